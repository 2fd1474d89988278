//! From the attribute's input to code: the model read and checked (a struct, or a module of
//! blocks), its buckets planned with the attribute's settings, and the code `emit` writes from the
//! plan, or, where the input has errors, all of them with the struct as written (`fallback`).

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemStruct;

use crate::ast::Model;
use crate::attr;
use crate::errors::Errors;
use crate::field_attr;
use crate::planning::{self, Planned};
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
    Some(emit::emit(model, &configured(planned, config)))
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
    let code = planned_code(config, model.as_ref(), &mut errors).unwrap_or_else(|| match structs.emitted_model() {
        // Without `#[residual]` on it (refused), so that the compiler adds no error of its own;
        // a generic model is emitted too (without impls), so that its uses find it.
        Some(root) => fallback::emit(&nesting::stripped(&structs.all, root), &errors),
        None => errors.to_compile_errors(),
    });
    let blocks = (0..structs.all.len())
        .filter(|&s| structs.emitted_model() != Some(s))
        .map(|s| nesting::stripped(&structs.all, s));
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

mod emit;
mod host_impl;
mod layer_checks;

#[cfg(test)]
mod binding_tests;
#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod shard_tests;
#[cfg(test)]
mod tests;
