//! What only the compiler can check of a model's layers, stated where it checks them: that each
//! field's type is a layer, and that its `Layer` constants are those the plan was made with.

use overlap_plan::Schedule;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::ast::Model;
use crate::helpers::lit;
use crate::schedule_tokens;

/// `where for<'layer> T: ::overlap::Layer, ..` over the types of `#[layer(...)]` fields, for the
/// items that use them as layers. Whether such a type implements `Layer` only the compiler knows;
/// when it does not, its layout assertion (below) says so once, at the field's type, and this
/// guard keeps the workspace and the impl from repeating it at every use. The binder makes the
/// bound one the compiler assumes rather than checks on the spot (a plain `u32: Layer` would be
/// an error of its own); for real layers it always holds. A built-in layer's name reached
/// through a path (`nn::Relu`) may name a look-alike type, so it is guarded too.
pub(super) fn layer_guard(model: &Model) -> TokenStream {
    let through_a_path = |ty: &syn::Type| matches!(ty, syn::Type::Path(p) if p.path.segments.len() > 1);
    let types: Vec<&syn::Type> =
        model.fields.iter().filter(|f| f.custom || through_a_path(f.ty)).map(|f| f.ty).collect();
    if types.is_empty() {
        return TokenStream::new();
    }
    quote!(where #(for<'layer> #types: ::overlap::Layer,)*)
}

/// One `const` assertion per field of the input (copies of a repeated block share one): the
/// type's `Layer` constants equal what the plan assumed. Spanned at the field's type, it is also where a `#[layer(...)]` type that is not a layer at
/// all is reported, once.
pub(super) fn layout_assertions(model: &Model, schedule: &Schedule) -> Vec<TokenStream> {
    // The copies of a repeated block share their field's type: one check, naming the first.
    let mut checked = std::collections::HashSet::new();
    model
        .fields
        .iter()
        .zip(schedule.layers.iter())
        .filter(|(field, _)| checked.insert(std::ptr::from_ref(field.ty)))
        .map(|(field, layer)| {
            let ty = field.ty;
            let width = schedule_tokens::width(layer.width);
            let params = layer.params.iter().map(|p| {
                let (name, dims) = (p.name.as_ref(), p.shape.iter().map(|&d| lit(d)));
                quote!((#name, &[#(#dims),*]))
            });
            let ready = schedule_tokens::ready(layer.ready);
            // A built-in by its name: the type must also be that built-in (`builtin_device_op`).
            let builtin = crate::layers::builtin_device_op(ty).filter(|_| !field.custom);
            // The message is an argument, not the format string: it holds the type's text (`Gain<{ N }>`).
            // At the type, for errors; its crate paths resolved as the rest of the code's are (at
            // the type's span, `::core` is a path from the crate's root in a 2015-edition crate).
            // `assert!` is named at the type's span, so that the error says nothing of the
            // macro's expansion, and by an absolute path, not an import: a failed derive above
            // the attribute leaves an import's resolution undetermined, an error of its own.
            let at = ty.span().resolved_at(Span::call_site());
            let assert = quote_spanned!(ty.span()=> ::overlap::__private::assert);
            if let Some((op, shown)) = &builtin {
                let message = format!(
                    "layer `{}`: `{}` is not overlap's built-in `{}` that the bucket schedule was planned with \
                     (`DEVICE_OP = {shown}`, {}): name the built-in by its own name, and a layer of your own by \
                     another, or describe it with `#[layer(...)]`",
                    field.name,
                    crate::layers::shown_type(ty),
                    crate::layers::kind_name(&layer.kind),
                    planned_constants(layer)
                );
                let matches = quote_spanned!(at=> ::overlap::__private::layer_matches);
                let op = quote!(::core::option::Option::Some(#op));
                return quote_spanned! {ty.span()=>
                    const _: () = #assert!(#matches::<#ty>(#width, &[#(#params),*], #ready, #op), "{}", #message);
                };
            }
            // A layer of one's own: the message names the constant that differs.
            let (check, mismatch) = (
                quote_spanned!(at=> ::overlap::__private::layout_mismatch),
                quote_spanned!(at=> ::overlap::__private::LayoutMismatch),
            );
            let none = quote_spanned!(at=> ::core::option::Option::None);
            let arms = mismatch_messages(&field.name, &crate::layers::shown_type(ty), layer)
                .into_iter()
                .map(|(pattern, message)| quote_spanned!(at=> #mismatch::#pattern => #message,));
            quote_spanned! {ty.span()=>
                const _: () = {
                    let __mismatch = #check::<#ty>(#width, &[#(#params),*], #ready, #none);
                    #assert!(!__mismatch.found(), "{}", match __mismatch {
                        #(#arms)*
                        _ => "",
                    });
                };
            }
        })
        .collect()
}

/// For a layer of one's own, each way its constants can differ from what `#[layer(...)]` planned
/// (a `LayoutMismatch` pattern), with the message that names the constant, what was planned, and
/// how the attribute states it.
fn mismatch_messages(name: &str, ty: &str, layer: &overlap_plan::LayerInfo) -> Vec<(TokenStream, String)> {
    let at = format!("layer `{name}`: `{ty}`'s");
    let (width, how) = match layer.width {
        overlap_plan::Width::Fixed { input, output } => (
            format!("Width::Fixed {{ input: {input}, output: {output} }}"),
            format!("`#[layer(input = {input}, output = {output})]`; a `Width::Preserving` layer takes neither"),
        ),
        overlap_plan::Width::Preserving => (
            "Width::Preserving".to_string(),
            "`#[layer(...)]` without `input` and `output`; a `Width::Fixed` layer takes both, even where they \
             are equal"
                .to_string(),
        ),
    };
    let shown = |p: &overlap_plan::ParamInfo| {
        let dims: Vec<String> = p.shape.iter().map(usize::to_string).collect();
        format!("{} = [{}]", p.name, dims.join(", "))
    };
    let listed: Vec<String> = layer.params.iter().map(shown).collect();
    let ready = format!("ReadyOrder::{:?}", layer.ready);
    let mut out = vec![
        (quote!(Width), format!("{at} `WIDTH` is not the `{width}` the bucket schedule was planned with: {how}")),
        (
            quote!(ParamCount),
            format!(
                "{at} `PARAMS` does not hold the {} parameter(s) the bucket schedule was planned with: \
                 `#[layer(params({}))]`, in `PARAMS`' order",
                layer.params.len(),
                listed.join(", ")
            ),
        ),
        (
            quote!(ReadyOrder),
            format!(
                "{at} `READY_ORDER` is not the `{ready}` the bucket schedule was planned with: `#[layer(ready = \
                 definition)]` plans `ReadyOrder::Definition`, no `ready` `ReadyOrder::Reverse`"
            ),
        ),
    ];
    out.push((
        quote!(DeviceOpLayout),
        format!(
            "{at} `DEVICE_OP` names a built-in layer's kernels, whose parameters or widths are not `{ty}`'s: on the \
             GPU they would run in place of its `forward` and `backward`, reading and writing past them; a layer of \
             one's own keeps `DeviceOp::Unsupported` (the default) unless it computes what that built-in computes, \
             on the same parameters"
        ),
    ));
    for (i, p) in layer.params.iter().enumerate() {
        let index = lit(i);
        out.push((
            quote!(Name(#index)),
            format!(
                "{at} `PARAMS[{i}].name` is not \"{}\", the name `#[layer(params({}))]` gives parameter {i}, in \
                 `PARAMS`' order",
                p.name,
                listed.join(", ")
            ),
        ));
        out.push((
            quote!(Shape(#index)),
            format!(
                "{at} `PARAMS[{i}].shape`, `{}`'s, is not [{}], the shape `#[layer(params({}))]` gives it",
                p.name,
                p.shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
                shown(p)
            ),
        ));
    }
    out
}

/// The `Layer` constants the plan assumed, written as the type would declare them, for the user
/// to compare with the type's own.
fn planned_constants(layer: &overlap_plan::LayerInfo) -> String {
    let width = match layer.width {
        overlap_plan::Width::Fixed { input, output } => format!("Width::Fixed {{ input: {input}, output: {output} }}"),
        overlap_plan::Width::Preserving => "Width::Preserving".to_string(),
    };
    let params: Vec<String> = layer
        .params
        .iter()
        .map(|p| {
            let dims: Vec<String> = p.shape.iter().map(usize::to_string).collect();
            format!("ParamDef {{ name: \"{}\", shape: &[{}] }}", p.name, dims.join(", "))
        })
        .collect();
    format!("WIDTH = {width}, PARAMS = &[{}], READY_ORDER = ReadyOrder::{:?}", params.join(", "), layer.ready)
}
