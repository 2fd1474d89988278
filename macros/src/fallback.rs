//! What to emit when the input is invalid: the user's struct (without this macro's field
//! attributes, which would otherwise be "unknown attribute" errors) and placeholder `Program` and
//! `DistributedModel` impls whose bodies are never run, because the errors stop the build. Users
//! then see the real problems, not a cascade of "no function `new`" errors at every call site.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemStruct;

use crate::emitted_struct::strip_field_attrs;
use crate::errors::Errors;

pub fn emit(item: &ItemStruct, errors: &Errors) -> TokenStream {
    let errors = errors.to_compile_errors();
    let item = strip_field_attrs(item);
    let ident = &item.ident;
    // A generic struct cannot get a meaningful placeholder; its error says why.
    if !item.generics.params.is_empty() {
        return quote!(#item #errors);
    }
    let model = syn::ext::IdentExt::unraw(ident).to_string();
    quote! {
        #item
        #errors
        impl ::overlap::program::Program for #ident {
            type WorkspaceOn<__S: ::overlap::program::Storage> = ();
            type GradsOn<__S: ::overlap::program::Storage> = ::overlap::__private::InvalidModel;
            type InFlightOn<__S: ::overlap::program::Storage> = ::overlap::__private::InvalidModel;
            fn buckets_on<__S: ::overlap::program::Storage>(_: &Self::GradsOn<__S>) -> ::std::vec::Vec<&__S::Bucket> { ::core::unreachable!() }
            fn new_grads_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(&self, _: &mut __E) -> ::core::result::Result<Self::GradsOn<__S>, __S::Error> { ::core::unreachable!() }
            fn forward_on<'w, __S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(&self, _: &mut __E, _: &::overlap::StepContext, _: &__S::Tensor, _: &'w mut ()) -> ::core::result::Result<&'w __S::Tensor, __S::Error> { ::core::unreachable!() }
            fn backward_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S> + ::overlap::program::Launch<Self, __S>>(&mut self, _: &mut __E, _: &mut (), _: &__S::Tensor, _: Self::GradsOn<__S>) -> ::core::result::Result<Self::InFlightOn<__S>, __S::Error> { ::core::unreachable!() }
            fn backward_no_sync_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(&self, _: &mut __E, _: &mut (), _: &__S::Tensor, _: &mut Self::GradsOn<__S>) -> ::core::result::Result<(), __S::Error> { ::core::unreachable!() }
            fn step_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Settle<Self, __S>>(&mut self, _: &mut __E, _: Self::InFlightOn<__S>) -> ::overlap::Result<Self::GradsOn<__S>> { ::core::unreachable!() }
            fn update_bucket_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Settle<Self, __S>>(&mut self, _: &mut __E, _: ::core::primitive::usize, _: &mut __S::Bucket, _: ::core::primitive::f32) -> ::overlap::Result<()> { ::core::unreachable!() }
        }
        impl ::overlap::DistributedModel for #ident {
            const SCHEDULE: ::overlap::plan::Schedule = ::overlap::__private::invalid_schedule(#model);
            type Workspace = ();
            type Grads = ::overlap::__private::InvalidModel;
            type InFlight = ::overlap::__private::InvalidModel;
            const DEVICE_OPS: &'static [::overlap::DeviceOp] = &[];
            fn init(_: ::core::primitive::u64) -> Self { ::core::unreachable!() }
            fn new_grads(&self) -> Self::Grads { ::core::unreachable!() }
            fn forward_with<'w>(&self, _: &::overlap::StepContext, _: &::overlap::Matrix, _: &'w mut ()) -> &'w ::overlap::Matrix { ::core::unreachable!() }
            fn forward_gathering<'w>(&mut self, _: &::overlap::StepContext, _: &::overlap::Matrix, _: &'w mut (), _: &::overlap::Communicator) -> ::overlap::Result<&'w ::overlap::Matrix> { ::core::unreachable!() }
            fn backward<O: ::overlap::Optimizer>(&mut self, _: &mut (), _: &::overlap::Matrix, _: Self::Grads, _: &::overlap::Communicator, _: &mut O) -> Self::InFlight { ::core::unreachable!() }
            fn backward_no_sync(&self, _: &mut (), _: &::overlap::Matrix, _: &mut Self::Grads) { ::core::unreachable!() }
            fn step<O: ::overlap::Optimizer>(&mut self, _: Self::InFlight, _: &mut O) -> ::overlap::Result<Self::Grads> { ::core::unreachable!() }
            fn param(&self, _: ::overlap::plan::ParamRef) -> &[::core::primitive::f32] { ::core::unreachable!() }
            fn param_mut(&mut self, _: ::overlap::plan::ParamRef) -> &mut [::core::primitive::f32] { ::core::unreachable!() }
        }
        impl ::overlap::__private::ParamVecs for #ident {
            fn param_vec_mut(&mut self, _: ::core::primitive::usize) -> ::core::option::Option<&mut ::std::vec::Vec<::core::primitive::f32>> { ::core::unreachable!() }
        }
    }
}
