//! The host's side of the expansion: `DistributedModel` (the program run with the layers' own
//! methods and the communicator, the schedule as a constant, parameters by reference) and the
//! `Vec`s of the parameters that sharded state and the lent updates reach.

use overlap_plan::Schedule;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ast::Model;
use crate::helpers::lit;
use crate::schedule_code::Names;
use crate::schedule_tokens;

/// `impl DistributedModel` and `impl ParamVecs` for the model, both under `guard`: the `Layer`
/// bounds on the `#[layer(...)]` types, as on every generated item that uses them.
pub(super) fn host_impls(
    model: &Model,
    names: &Names,
    schedule: &Schedule,
    notes: &[String],
    guard: &TokenStream,
    allows: &crate::lint_allows::LintAllows,
) -> TokenStream {
    let allow = allows.impls();
    // The device-generic types on the host, not their aliases (`MlpGrads`): an item of the user's
    // named as an alias is then the compiler's one error (E0428), not also a type error here.
    let Names { workspace_on, grads_on, in_flight_on, .. } = names;
    let ident = &model.item.ident;
    let model_name = ident.to_string();
    let types = &names.types;
    let init = &model.init;
    // Only a model with residual blocks says so: a chain keeps the trait's empty default.
    let residuals = (!model.residuals.is_empty()).then(|| {
        let pairs = model.residuals.iter().map(|r| {
            let (first, last) = (lit(r.first), lit(r.last));
            quote!((#first, #last))
        });
        quote!(const RESIDUALS: &'static [(::core::primitive::usize, ::core::primitive::usize)] = &[#(#pairs),*];)
    });
    // Only a plan the planner has something to say of says it: others keep the empty default.
    let plan_notes = (!notes.is_empty())
        .then(|| quote!(const PLAN_NOTES: &'static [&'static ::core::primitive::str] = &[#(#notes),*];));
    let schedule_const = schedule_tokens::schedule(schedule);
    let (param_arms, param_mut_arms) = (param_arms(names, schedule, "param"), param_arms(names, schedule, "param_mut"));
    let param_vec_arms = schedule.layers.iter().zip(&names.access).flat_map(|(layer, f)| {
        layer.params.iter().enumerate().map(move |(j, p)| {
            let (index, j) = (lit(p.index), lit(j));
            quote!(#index => ::overlap::Layer::param_vec_mut(&mut self.#f, #j),)
        })
    });
    quote! {
        /// On the host: the program with the layers' own methods and the communicator.
        #allow
        impl ::overlap::DistributedModel for #ident #guard {
            const SCHEDULE: ::overlap::plan::Schedule = #schedule_const;
            type Workspace = #workspace_on<::overlap::program::Host>;
            type Grads = #grads_on<::overlap::program::Host>;
            type InFlight = #in_flight_on<::overlap::program::Host>;
            const DEVICE_OPS: &'static [::overlap::DeviceOp] = &[#(<#types as ::overlap::Layer>::DEVICE_OP),*];
            #residuals
            #plan_notes

            fn init(__seed: ::core::primitive::u64) -> Self {
                #init
            }

            fn new_grads(&self) -> Self::Grads {
                let ::core::result::Result::Ok(__grads) =
                    ::overlap::program::Program::new_grads_on(self, &mut ::overlap::program::HostCompute::named(<Self as ::overlap::DistributedModel>::SCHEDULE.static_layers()));
                __grads
            }

            fn forward_with<'w>(
                &self,
                __ctx: &::overlap::StepContext,
                __input: &::overlap::Matrix,
                __ws: &'w mut Self::Workspace,
            ) -> &'w ::overlap::Matrix {
                ::core::assert_eq!(__input.rows(), __ctx.row_count(), "the input's rows are not the step context's");
                let ::core::result::Result::Ok(__output) =
                    ::overlap::program::Program::forward_on(self, &mut ::overlap::program::HostCompute::named(<Self as ::overlap::DistributedModel>::SCHEDULE.static_layers()), __ctx, __input, __ws);
                __output
            }

            fn forward_gathering<'w>(
                &mut self,
                __ctx: &::overlap::StepContext,
                __input: &::overlap::Matrix,
                __ws: &'w mut Self::Workspace,
                __comm: &::overlap::Communicator,
            ) -> ::overlap::Result<&'w ::overlap::Matrix> {
                ::core::assert_eq!(__input.rows(), __ctx.row_count(), "the input's rows are not the step context's");
                ::overlap::program::Program::forward_gathering_on(
                    self,
                    &mut ::overlap::program::HostCompute::named(<Self as ::overlap::DistributedModel>::SCHEDULE.static_layers()),
                    &mut ::overlap::program::HostGather::new(__comm),
                    __ctx,
                    __input,
                    __ws,
                )
            }

            fn backward<O: ::overlap::Optimizer>(
                &mut self,
                __ws: &mut Self::Workspace,
                __dy: &::overlap::Matrix,
                __grads: Self::Grads,
                __comm: &::overlap::Communicator,
                __optimizer: &mut O,
            ) -> Self::InFlight {
                let mut __dev = ::overlap::program::HostLaunch::named(__comm, __optimizer, <Self as ::overlap::DistributedModel>::SCHEDULE.static_layers());
                let ::core::result::Result::Ok(__in_flight) =
                    ::overlap::program::Program::backward_on(self, &mut __dev, __ws, __dy, __grads);
                __in_flight
            }

            fn backward_no_sync(&self, __ws: &mut Self::Workspace, __dy: &::overlap::Matrix, __grads: &mut Self::Grads) {
                let ::core::result::Result::Ok(()) = ::overlap::program::Program::backward_no_sync_on(
                    self,
                    &mut ::overlap::program::HostCompute::named(<Self as ::overlap::DistributedModel>::SCHEDULE.static_layers()),
                    __ws,
                    __dy,
                    __grads,
                );
            }

            fn step<O: ::overlap::Optimizer>(&mut self, __in_flight: Self::InFlight, __optimizer: &mut O) -> ::overlap::Result<Self::Grads> {
                ::overlap::program::Program::step_on(self, &mut ::overlap::program::HostSettle::new(__optimizer), __in_flight)
            }

            fn param(&self, __p: ::overlap::plan::ParamRef) -> &[::core::primitive::f32] {
                use ::overlap::Layer as _;
                match __p.layer {
                    #(#param_arms)*
                    _ => ::core::panic!("{:?} is not a parameter of {}", __p, #model_name),
                }
            }

            fn param_mut(&mut self, __p: ::overlap::plan::ParamRef) -> &mut [::core::primitive::f32] {
                use ::overlap::Layer as _;
                match __p.layer {
                    #(#param_mut_arms)*
                    _ => ::core::panic!("{:?} is not a parameter of {}", __p, #model_name),
                }
            }
        }

        #allow
        impl ::overlap::__private::ParamVecs for #ident #guard {
            fn param_vec_mut(&mut self, __index: ::core::primitive::usize) -> ::core::option::Option<&mut ::std::vec::Vec<::core::primitive::f32>> {
                use ::overlap::Layer as _;
                match __index {
                    #(#param_vec_arms)*
                    _ => ::core::panic!("{} has no parameter {}", #model_name, __index),
                }
            }
        }
    }
}

/// `<layer index> => ::overlap::Layer::<method>(&self.<field>, p.param),` for every layer with
/// parameters: the arms of `param` and `param_mut`, called through the trait so that a layer's
/// inherent method of the same name is not the one called.
fn param_arms(names: &Names, schedule: &Schedule, method: &str) -> Vec<TokenStream> {
    let borrow = if method == "param_mut" { quote!(&mut) } else { quote!(&) };
    let method = format_ident!("{}", method);
    schedule
        .layers
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.params.is_empty())
        .map(|(i, _)| {
            let (f, i) = (&names.access[i], lit(i));
            quote!(#i => ::overlap::Layer::#method(#borrow self.#f, __p.param),)
        })
        .collect()
}
