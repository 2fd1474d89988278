//! Conditional compilation on fields. The bucket schedule is computed from the struct's fields
//! when the macro runs, before `#[cfg]` is evaluated, so a field that may vanish would leave the
//! plan (and the code emitted from it) naming a field the struct no longer has. Such fields are
//! refused with one error each, as is `#[cfg_attr]` applying this macro's own attributes (which
//! the macro would never see). Any other `cfg_attr` (docs, lints) passes through untouched.

use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Attribute, LitBool, Meta, Token};

use crate::errors::Errors;

/// This macro's field attributes.
pub const OURS: [&str; 4] = ["layer", "bucket_boundary", "tied", "init"];

const CFG_HELP: &str = "a #[distributed_model] field cannot be conditional: the gradient schedule is computed from \
                        the struct's fields at compile time, before `cfg` is evaluated; put the `cfg` on the whole \
                        struct, or write one struct per configuration";

/// Reports `#[cfg(...)]` on a field, and `#[cfg_attr(..)]` that would apply `#[cfg]` or one of
/// this macro's field attributes, once per attribute, at the attribute. Returns whether one of
/// ours was applied so: the field is then judged once it is written unconditionally (a `TiedHead`
/// without its `#[tied]`, a custom type without its `#[layer]`, would be errors of their own).
pub fn check_field(attrs: &[Attribute], errors: &mut Errors) -> bool {
    let mut ours_refused = false;
    for attr in attrs {
        if attr.path().is_ident("cfg") {
            errors.spanned(attr, CFG_HELP);
        } else if let Some(applied) = conditional(attr) {
            if applied.iter().any(|m| m.path().is_ident("cfg")) {
                errors.spanned(attr, CFG_HELP);
            } else if let Some(ours) = applied.iter().find(|m| is_ours(m)) {
                let name = ours.path().get_ident().map(ToString::to_string).unwrap_or_default();
                errors.spanned(
                    attr,
                    format!(
                        "`#[{name}]` cannot be applied through `cfg_attr`: the gradient schedule and the code are \
                         computed from this macro's field attributes (`#[layer]`, `#[bucket_boundary]`, `#[tied]`, \
                         `#[init]`) at compile time, before `cfg` is evaluated; write the attribute unconditionally, \
                         or write one struct per configuration"
                    ),
                );
                ours_refused = true;
            }
        }
    }
    ours_refused
}

/// Reports `#[cfg(...)]` on a struct of a module of blocks, and `#[cfg_attr(..)]` that would apply
/// `#[cfg]` or `#[residual]` to it: the model is planned from every struct of the module, found
/// by name, before `cfg` is evaluated. Whether it reported one.
pub fn check_struct(attrs: &[Attribute], errors: &mut Errors) -> bool {
    let before = errors.len();
    const HELP: &str = "a struct of a #[distributed_model] module cannot be conditional: the model and its blocks \
                        are planned at compile time, before `cfg` is evaluated; put the `cfg` on the whole module, \
                        or write one module per configuration";
    for attr in attrs {
        if attr.path().is_ident("cfg") || applies(attr, "cfg") || applies(attr, "residual") {
            errors.spanned(attr, HELP);
        }
    }
    errors.len() > before
}

/// Whether `attr` is `#[cfg_attr(..)]` applying (possibly nested) the attribute `name`.
pub fn applies(attr: &Attribute, name: &str) -> bool {
    conditional(attr).is_some_and(|applied| applied.iter().any(|m| m.path().is_ident(name)))
}

/// Whether `attr` is `#[cfg_attr(..)]` applying (possibly nested) one of this macro's attributes:
/// such attributes are removed from the struct the macro emits after reporting them.
pub fn applies_ours(attr: &Attribute) -> bool {
    conditional(attr).is_some_and(|applied| applied.iter().any(is_ours))
}

fn is_ours(meta: &Meta) -> bool {
    names_ours(meta.path())
}

/// Whether `path` is one of this macro's field attributes (`init`, not `overlap::init`).
pub fn names_ours(path: &syn::Path) -> bool {
    OURS.iter().any(|name| path.is_ident(name))
}

/// The attributes `#[cfg_attr(predicate, a, b, ..)]` would apply, nested `cfg_attr`s flattened;
/// `None` for any other attribute, or one that does not parse (left for the compiler to report).
fn conditional(attr: &Attribute) -> Option<Vec<Meta>> {
    if !attr.path().is_ident("cfg_attr") {
        return None;
    }
    let list = attr.meta.require_list().ok()?;
    Some(flatten(list.parse_args_with(applied).ok()?))
}

/// The attributes of `cfg_attr(predicate, a, b, ..)`'s arguments: after the predicate, which is a
/// `Meta` (`unix`, `all(..)`) or `true` or `false` (a literal to syn).
fn applied(input: ParseStream) -> syn::Result<Punctuated<Meta, Token![,]>> {
    if input.peek(LitBool) {
        input.parse::<LitBool>()?;
    } else {
        input.parse::<Meta>()?;
    }
    input.parse::<Token![,]>()?;
    Punctuated::parse_terminated(input)
}

fn flatten(items: Punctuated<Meta, Token![,]>) -> Vec<Meta> {
    let mut out = Vec::new();
    for item in items {
        let nested = match &item {
            Meta::List(list) if list.path.is_ident("cfg_attr") => list.parse_args_with(applied).ok(),
            _ => None,
        };
        match nested {
            Some(inner) => out.extend(flatten(inner)),
            None => out.push(item),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn errors_for(attrs: Vec<Attribute>) -> usize {
        let mut errors = Errors::default();
        check_field(&attrs, &mut errors);
        errors.len()
    }

    #[test]
    fn each_of_our_attributes_is_named_when_applied_through_cfg_attr() {
        for name in OURS {
            let ident = syn::Ident::new(name, proc_macro2::Span::call_site());
            let attrs: Vec<Attribute> = vec![parse_quote!(#[cfg_attr(all(), #ident(x))])];
            let mut errors = Errors::default();
            assert!(check_field(&attrs, &mut errors));
            let message = errors.to_compile_errors().to_string();
            assert!(message.contains(&format!("`#[{name}]` cannot be applied through `cfg_attr`")), "{message}");
        }
    }

    #[test]
    fn cfg_and_cfg_attr_applying_ours_are_refused_once_each() {
        assert_eq!(errors_for(vec![parse_quote!(#[cfg(test)])]), 1);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(test, bucket_boundary)])]), 1);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(test, layer(input = 1, output = 1))])]), 1);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(test, cfg_attr(unix, bucket_boundary))])]), 1);
        // `true` and `false` are predicates too (a literal to syn, not a `Meta`).
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(true, cfg(false))])]), 1);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(false, cfg_attr(true, bucket_boundary))])]), 1);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(test, cfg(unix))])]), 1);
    }

    #[test]
    fn other_cfg_attrs_pass_through() {
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(feature = "x", doc = "docs")])]), 0);
        assert_eq!(errors_for(vec![parse_quote!(#[cfg_attr(test, allow(dead_code))])]), 0);
        assert_eq!(errors_for(vec![parse_quote!(#[doc = "docs"])]), 0);
        let attr: Attribute = parse_quote!(#[cfg_attr(test, doc = "x")]);
        assert!(!applies_ours(&attr));
        let attr: Attribute = parse_quote!(#[cfg_attr(test, doc = "x", bucket_boundary)]);
        assert!(applies_ours(&attr));
    }
}
