//! From a checked model and its schedule to code: the struct, its companion types (workspace,
//! gradient buckets, in-flight buckets), the `Program` impl every device runs, the host's impls
//! (`host_impl`), and compile-time checks that every layer type has the layout the plan assumed.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemStruct;

use crate::ast::Model;
use crate::attr;
use crate::emitted_struct::strip_field_attrs;
use crate::errors::Errors;
use crate::field_attr;
use crate::helpers::lit;
use crate::planning::{self, Planned};
use crate::schedule_code::{backward_body, forward_body, step_body, update_bucket_body, Names};
use crate::shard_attr::Gathers;
use crate::{check, crate_path, fallback, nesting};

pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let config = attr::model_config(crate::ungroup::tokens(args), &mut errors);
    let item: ItemStruct = match syn::parse2::<syn::Item>(item).map(|mut item| {
        crate::ungroup::item(&mut item);
        remove_repeated(&mut item, &mut errors);
        item
    }) {
        Ok(syn::Item::Struct(s)) => s,
        Ok(syn::Item::Mod(module)) => return with_crate(expand_module(&config, &module, errors), &config),
        Ok(other) => {
            let at: &dyn quote::ToTokens = match &other {
                syn::Item::Enum(e) => &e.enum_token,
                syn::Item::Union(u) => &u.union_token,
                _ => &other,
            };
            errors.spanned(at, "#[distributed_model] applies to a struct with named fields, one per layer");
            let errors = errors.to_compile_errors();
            return quote!(#other #errors);
        }
        Err(e) => return e.to_compile_error(),
    };
    if let Some(named) = &config.model {
        errors.spanned(
            named,
            "`model = ..` picks the model among the structs of a module of blocks; on a struct, the struct is the \
             model: remove the key",
        );
    }
    nesting::refuse_residual_model(&item, &mut errors);
    let mut model = Model::from_struct(&item, &mut errors);
    check::all(&mut model, &mut errors);
    let code = planned_code(&config, Some(&model), &mut errors).unwrap_or_else(|| fallback::emit(&item, &errors));
    with_crate(code, &config)
}

/// The model's code, planned and emitted, when nothing was refused. Otherwise none, but what
/// planning reads apart from the model (a profile's file) is still checked, so that every
/// problem shows in one compile.
fn planned_code(config: &attr::ModelConfig, model: Option<&Model>, errors: &mut Errors) -> Option<TokenStream> {
    let Some(model) = model.filter(|_| errors.is_empty()) else {
        planning::check_inputs(&config.planning, errors);
        return None;
    };
    let gradients = (config.grad_comm, config.shard_optimizer);
    let planned = planning::plan(&config.planning, gradients, &model.item.ident, &model.specs(), errors)?;
    Some(emit(model, &configured(planned, config)))
}

/// A second `#[distributed_model]` on the same item, or one on a struct of the module this one
/// reads: one error each, and removed, so that it does not expand the struct again (a dozen
/// clashing definitions otherwise, or a block made a model of its own).
fn remove_repeated(item: &mut syn::Item, errors: &mut Errors) {
    let is_ours = |a: &syn::Attribute| a.path().segments.last().is_some_and(|s| s.ident == "distributed_model");
    let attrs = match item {
        syn::Item::Struct(s) => &mut s.attrs,
        syn::Item::Mod(m) => {
            for item in m.content.iter_mut().flat_map(|(_, items)| items.iter_mut()) {
                if let syn::Item::Struct(s) = item {
                    s.attrs.retain(|a| {
                        if is_ours(a) {
                            errors.spanned(
                                a,
                                "the module's `#[distributed_model]` already reads this struct: remove this one (a \
                                 module holds one model and the blocks it uses; another model goes in a module of \
                                 its own)",
                            );
                        }
                        !is_ours(a)
                    });
                }
            }
            &mut m.attrs
        }
        _ => return,
    };
    attrs.retain(|a| {
        if is_ours(a) {
            errors.spanned(a, "`#[distributed_model]` is applied twice: once is enough");
        }
        !is_ours(a)
    });
}

/// The plan with the attribute's gradient formats and sharding default, and the all-gathers'
/// grouping: as `gathers = ...` says, else, when a cost model chose the buckets, the one it
/// predicts fastest (noted in the docs), else one per bucket.
fn configured(mut planned: Planned, config: &attr::ModelConfig) -> Planned {
    planned.schedule = planned.schedule.with_grad_comm(config.grad_comm);
    planned.schedule.shard_optimizer = config.shard_optimizer;
    let schedule = &planned.schedule;
    let gathers = match (config.gathers, &planned.target) {
        (Some(Gathers::PerBucket), _) | (None, None) => return planned,
        (Some(Gathers::PerLayer), _) => overlap_plan::gathers_per_layer(schedule),
        (None, Some(target)) => overlap_plan::choose_gathers(schedule, target),
    };
    // One per bucket is what no list means, and keeps the fingerprint.
    if gathers != overlap_plan::gathers_per_bucket(schedule) {
        if config.gathers.is_none() {
            let (chosen, buckets) = (gathers.len(), schedule.buckets.len());
            planned.notes.push(format!(
                "all-gathers of sharded state chosen by the same cost model: {chosen} for {buckets} buckets"
            ));
        }
        planned.schedule.gathers = std::borrow::Cow::Owned(gathers);
    }
    planned
}

/// `code` with its `::overlap::` paths where `crate = ".."` says the crate is, or else where the
/// user's `Cargo.toml` names it (a renamed dependency).
fn with_crate(code: TokenStream, config: &attr::ModelConfig) -> TokenStream {
    match config.krate.clone().or_else(crate_path::renamed_dependency) {
        Some(krate) => crate_path::rebase(code, &krate),
        None => code,
    }
}

/// A module holding a model and its blocks (see `nesting`): the module again, its blocks as
/// written (without this macro's attributes), and the model's code inside it.
fn expand_module(config: &attr::ModelConfig, module: &syn::ItemMod, mut errors: Errors) -> TokenStream {
    field_attr::misplaced_on_module(&module.attrs, &mut errors);
    let structs = match config.model_unreadable {
        true => nesting::unjudged(module),
        false => nesting::structs(module, config.model.as_ref(), &mut errors),
    };
    if let Some(root) = structs.model() {
        nesting::generated_names_free(module, &structs.all[root].ident, &mut errors);
    }
    let mut trees = nesting::trees(&structs, &mut errors);
    nesting::shadowed_built_ins(module, &trees, &mut errors);
    for tree in &mut trees {
        check::all(tree, &mut errors);
    }
    let model = if structs.model().is_some() { trees.pop() } else { None };
    let code = planned_code(config, model.as_ref(), &mut errors).unwrap_or_else(|| match structs.model() {
        // Without `#[residual]` on it (refused), so that the compiler adds no error of its own;
        // a generic model is emitted too (without impls), so that its uses find it.
        Some(root) => fallback::emit(&nesting::stripped(&structs.all, root), &errors),
        None => errors.to_compile_errors(),
    });
    let blocks =
        (0..structs.all.len()).filter(|&s| structs.model() != Some(s)).map(|s| nesting::stripped(&structs.all, s));
    let own = structs.own.iter().map(|s| nesting::own_as_written(s));
    // Everything else as written, layer types of one's own included.
    let is_struct_of = |i: &syn::Item, structs: &[&syn::ItemStruct]| matches!(i, syn::Item::Struct(s) if structs.iter().any(|a| a.ident == s.ident));
    let others = module.content.iter().flat_map(|(_, items)| items.iter());
    let others = others.filter(|i| !is_struct_of(i, &structs.all) && !is_struct_of(i, &structs.own));
    // `//!` docs and `#![..]` attributes belong inside the braces.
    // This macro's own attributes (refused above) left out, so that the compiler does not add its own
    // error about them.
    let kept = module.attrs.iter().filter(|a| !field_attr::ours_or_residual(a));
    let (inner, outer): (Vec<_>, Vec<_>) = kept.partition(|a| matches!(a.style, syn::AttrStyle::Inner(_)));
    let (vis, unsafety, ident) = (&module.vis, &module.unsafety, &module.ident);
    quote! {
        #(#outer)*
        #vis #unsafety mod #ident {
            #(#inner)*
            #(#others)*
            #(#own)*
            #(#blocks)*
            #code
        }
    }
}

fn emit(model: &Model, planned: &Planned) -> TokenStream {
    let schedule = &planned.schedule;
    let mut item = strip_field_attrs(model.item);
    // The table in a code block, so that rustdoc keeps its columns; the planner's notes after it.
    // After the user's own documentation, whose first line is the summary rustdoc lists.
    let is_doc_text = |a: &syn::Attribute| a.path().is_ident("doc") && matches!(a.meta, syn::Meta::NameValue(_));
    let after_docs = item.attrs.iter().rposition(is_doc_text).map_or(0, |i| i + 1);
    let printed = schedule.to_string();
    let table: Vec<String> = ["```text"]
        .into_iter()
        .chain(printed.lines())
        .chain(["```"])
        .chain(planned.notes.iter().map(String::as_str))
        .map(|l| format!(" {l}"))
        .collect();
    let heading = if after_docs > 0 { &["", " # Schedule", ""][..] } else { &[] };
    let documented = heading.iter().map(|l| l.to_string()).chain(table.iter().cloned());
    let documented: Vec<syn::Attribute> = documented.map(|line| syn::parse_quote!(#[doc = #line])).collect();
    item.attrs.splice(after_docs..after_docs, documented);
    let (vis, ident) = (&item.vis, &item.ident);
    let names = Names::new(model, schedule);
    let Names { workspace, grads, in_flight, workspace_on, grads_on, in_flight_on, buckets, .. } = &names;
    // Cargo rebuilds when a file the plan was read from changes.
    let input_file = planned.input_file.iter().map(|f| {
        quote!(
            const _: &[u8] = ::core::include_bytes!(#f);
        )
    });
    let ws_fields = names.workspace_fields();
    let bucket_docs = schedule.buckets.iter().enumerate().map(|(k, b)| {
        let members: Vec<String> = b.params.iter().map(|&r| schedule.param_name(r)).collect();
        format!(
            " Bucket {k}: {} ({} elements), launched after `{}.backward`.",
            members.join(", "),
            b.numel,
            schedule.layers[b.launch_after].name
        )
    });
    let bucket_docs: Vec<String> = bucket_docs.collect();
    // A low-rank bucket is waited for through its second all-reduce.
    let in_flight_types = schedule.buckets.iter().map(|b| match b.low_rank {
        None => quote!(__S::InFlight),
        Some(_) => quote!(__S::LowRankQ),
    });
    let bucket_indices: Vec<_> = (0..schedule.buckets.len()).map(lit).collect();
    let ws_names = names.workspace_field_names();
    let (backward, backward_no_sync) = (backward_body(&names, true), backward_body(&names, false));
    let step = step_body(&names);
    let update_bucket = update_bucket_body(&names);
    let forward = forward_body(&names, false);
    let forward_gathering = {
        let body = forward_body(&names, true);
        quote! {
            /// The forward after a sharded step: each all-gather's wait point right before the
            /// first layer that reads its parameters.
            fn forward_gathering_on<
                'w,
                __S: ::overlap::program::Storage,
                __E: ::overlap::program::Compute<__S>,
                __G: ::overlap::program::Gather<Self, __S>,
            >(
                &mut self,
                dev: &mut __E,
                gather: &mut __G,
                ctx: &::overlap::StepContext,
                input: &__S::Tensor,
                ws: &'w mut #workspace_on<__S>,
            ) -> ::overlap::Result<&'w __S::Tensor>
            where
                ::overlap::Error: ::core::convert::From<__S::Error>,
            {
                #body
            }
        }
    };
    let assertions = layer_checks::layout_assertions(model, schedule);
    let guard = layer_checks::layer_guard(model);
    let allows = crate::lint_allows::LintAllows::of(model);
    let host = host_impl::host_impls(model, &names, schedule, &planned.notes, &guard, &allows);
    let (allow_in_workspace, allow_in_types, allow_in_impls) = (allows.workspace(), allows.types(), allows.impls());
    let model_name = syn::ext::IdentExt::unraw(ident).to_string();

    quote! {
        #item

        #[doc = ::core::concat!(" What one step of `", #model_name, "` keeps from forward for backward, its tensors in storage `__S` (the host or a GPU): activations and saved state, and the gradients backward passes between layers (`grad_0`, `grad_1`, ...: buffers shared by layers whose gradients are never needed at the same time). Generated by `#[distributed_model]`; make one with `Default` and reuse it across steps.")]
        // Its fields and the generated functions' locals are named after the model's fields
        // (`FC_out` for a field `FC` its struct allows), which the generated functions also read
        // (a `#[deprecated]` one): the user's lints speak once, at the user's own field
        // (`lint_allows`).
        #allow_in_workspace
        #vis struct #workspace_on<__S: ::overlap::program::Storage> #guard {
            #ws_fields
        }

        #allow_in_workspace
        impl<__S: ::overlap::program::Storage> ::core::default::Default for #workspace_on<__S> #guard {
            fn default() -> Self {
                #workspace_on { #(#ws_names: ::core::default::Default::default(),)* }
            }
        }

        #[doc = ::core::concat!(" `", #model_name, "`'s workspace on the host.")]
        #allow_in_types
        #vis type #workspace = #workspace_on<::overlap::program::Host>;

        #[doc = ::core::concat!(" The gradient buckets of `", #model_name, "` between steps (`new_grads`, then what `step` returns), in launch order; each parameter's gradient is a view at a fixed offset. Generated by `#[distributed_model]`.")]
        #allow_in_types
        #vis struct #grads_on<__S: ::overlap::program::Storage> {
            #(#[doc = #bucket_docs] #buckets: __S::Bucket,)*
            micro_steps: ::core::primitive::usize,
        }

        #[doc = ::core::concat!(" `", #model_name, "`'s gradient buckets on the host.")]
        #allow_in_types
        #vis type #grads = #grads_on<::overlap::program::Host>;

        #[doc = ::core::concat!(" The gradient buckets of `", #model_name, "` while they are being all-reduced, with the parameters lent to them (what `backward` returns): only `step` can wait for them. Generated by `#[distributed_model]`.")]
        #[must_use = "in-flight gradients must be passed to `step`"]
        #allow_in_types
        #vis struct #in_flight_on<__S: ::overlap::program::Storage> {
            #(#buckets: #in_flight_types,)*
            grad_scale: ::core::primitive::f32,
        }

        #[doc = ::core::concat!(" `", #model_name, "`'s in-flight buckets on the host.")]
        #allow_in_types
        #vis type #in_flight = #in_flight_on<::overlap::program::Host>;

        impl ::overlap::GradientBuckets for #grads_on<::overlap::program::Host> {
            fn buckets(&self) -> ::std::vec::Vec<&::overlap::GradBucket> {
                ::std::vec![#(&self.#buckets),*]
            }
            fn buckets_mut(&mut self) -> ::std::vec::Vec<&mut ::overlap::GradBucket> {
                ::std::vec![#(&mut self.#buckets),*]
            }
            fn micro_steps(&self) -> ::core::primitive::usize {
                self.micro_steps
            }
        }

        /// The step as one program for every device: the host runs it through
        /// `DistributedModel`'s methods, a GPU with its kernels and NCCL.
        #allow_in_impls
        impl ::overlap::program::Program for #ident #guard {
            type WorkspaceOn<__S: ::overlap::program::Storage> = #workspace_on<__S>;
            type GradsOn<__S: ::overlap::program::Storage> = #grads_on<__S>;
            type InFlightOn<__S: ::overlap::program::Storage> = #in_flight_on<__S>;

            fn buckets_on<__S: ::overlap::program::Storage>(grads: &#grads_on<__S>) -> ::std::vec::Vec<&__S::Bucket> {
                ::std::vec![#(&grads.#buckets),*]
            }

            fn new_grads_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(
                &self,
                dev: &mut __E,
            ) -> ::core::result::Result<#grads_on<__S>, __S::Error> {
                let schedule = &<Self as ::overlap::DistributedModel>::SCHEDULE;
                // One local per bucket, then the struct: `?` inside a struct literal would drop the
                // buckets made so far by a cleanup of its own at each field, code growing with
                // the square of the bucket count.
                #(let #buckets = dev.new_bucket(schedule, #bucket_indices)?;)*
                ::core::result::Result::Ok(#grads_on { #(#buckets,)* micro_steps: 0 })
            }

            fn forward_on<'w, __S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(
                &self,
                dev: &mut __E,
                ctx: &::overlap::StepContext,
                input: &__S::Tensor,
                ws: &'w mut #workspace_on<__S>,
            ) -> ::core::result::Result<&'w __S::Tensor, __S::Error> {
                #forward
            }

            #forward_gathering

            #(#[doc = #table])*
            fn backward_on<
                __S: ::overlap::program::Storage,
                __E: ::overlap::program::Compute<__S> + ::overlap::program::Launch<Self, __S>,
            >(
                &mut self,
                dev: &mut __E,
                ws: &mut #workspace_on<__S>,
                dy: &__S::Tensor,
                grads: #grads_on<__S>,
            ) -> ::core::result::Result<#in_flight_on<__S>, __S::Error> {
                #backward
            }

            fn backward_no_sync_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Compute<__S>>(
                &self,
                dev: &mut __E,
                ws: &mut #workspace_on<__S>,
                dy: &__S::Tensor,
                grads: &mut #grads_on<__S>,
            ) -> ::core::result::Result<(), __S::Error> {
                #backward_no_sync
            }

            fn step_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Settle<Self, __S>>(
                &mut self,
                dev: &mut __E,
                in_flight: #in_flight_on<__S>,
            ) -> ::overlap::Result<#grads_on<__S>> {
                #step
            }

            fn update_bucket_on<__S: ::overlap::program::Storage, __E: ::overlap::program::Settle<Self, __S>>(
                &mut self,
                dev: &mut __E,
                index: ::core::primitive::usize,
                bucket: &mut __S::Bucket,
                grad_scale: ::core::primitive::f32,
            ) -> ::overlap::Result<()> {
                #update_bucket
            }
        }

        #host

        #(#assertions)*
        #(#input_file)*
    }
}

mod host_impl;
mod layer_checks;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod shard_tests;
#[cfg(test)]
mod tests;
