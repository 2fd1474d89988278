//! The fields' attribute syntax: `#[layer(...)]`, `#[bucket_boundary]`, `#[tied(..)]` and
//! `#[init(..)]`. Every key is checked; unknown, duplicate and bad values are all reported.

use std::rc::Rc;

use overlap_plan::ReadyOrder;
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, LitInt, Meta, MetaNameValue, Token};

use crate::cfg;
use crate::errors::Errors;
use crate::helpers::{expr_name, int_literal, path_name, positive_int, set_once};
use crate::init_attr::InitAttr;

/// What `#[layer(...)]` says about a custom layer.
pub struct LayerAttr {
    pub width: Option<(LitInt, LitInt)>,
    pub params: Vec<(syn::Ident, Vec<LitInt>)>,
    pub flops: Option<u64>,
    /// `ready = reverse | definition`: the type's `Layer::READY_ORDER` (default `reverse`).
    pub ready: ReadyOrder,
}

/// The field attributes this macro consumes.
#[derive(Default)]
pub struct FieldAttrs {
    pub layer: Option<LayerAttr>,
    /// A `#[layer(...)]` was there but invalid (already reported): the field's type must not
    /// then be judged as a built-in layer too.
    pub layer_invalid: bool,
    /// `#[bucket_boundary]`, kept for errors.
    pub bucket_boundary: Option<Attribute>,
    /// `#[tied(field)]`: the sibling field whose weight this layer reads, with the attribute
    /// (for errors).
    pub tied: Option<(syn::Ident, Attribute)>,
    /// A `#[tied(...)]` was there but malformed (already reported): the head is not then also
    /// reported as lacking one.
    pub tied_invalid: bool,
    /// `#[init(..)]` (see `init_attr`).
    pub init: Option<Rc<InitAttr>>,
}

/// This macro's own field attributes, directly or through `cfg_attr` (refused, see `cfg`): removed
/// from the struct it emits, so that the compiler never sees an attribute it does not know.
pub fn is_ours(attr: &Attribute) -> bool {
    cfg::names_ours(attr.path()) || cfg::applies_ours(attr)
}

/// Reports this macro's field attributes written on a struct instead (`#[init(..)]` on a block's
/// struct): the compiler would only say it does not know them. The emitted struct drops them.
pub fn misplaced_on_struct(attrs: &[Attribute], block: &syn::Ident, errors: &mut Errors) {
    for attr in attrs.iter().filter(|a| cfg::names_ours(a.path())) {
        let name = crate::helpers::path_name(attr.path());
        errors.spanned(
            attr,
            format!(
                "`#[{name}]` goes on a field, not on a struct: on a layer's field, or on the field that holds \
                 `{block}` where it is used as a block"
            ),
        );
    }
}

/// Whether `attr` is one of this macro's field attributes or `#[residual]`, written so or applied
/// through `cfg_attr`.
pub fn ours_or_residual(attr: &Attribute) -> bool {
    let path = attr.path();
    cfg::names_ours(path) || path.is_ident("residual") || cfg::applies_ours(attr) || cfg::applies(attr, "residual")
}

/// Reports this macro's field attributes and `#[residual]` written on the module of a model and
/// its blocks: they go on a field, or on a block's struct.
pub fn misplaced_on_module(attrs: &[Attribute], errors: &mut Errors) {
    for attr in attrs.iter().filter(|a| ours_or_residual(a)) {
        let message = match path_name(attr.path()).as_str() {
            "cfg_attr" => "this `cfg_attr` applies this macro's attributes to the module: they go on a field, and \
                           `#[residual]` on a block's struct"
                .to_string(),
            "residual" => "`#[residual]` goes on a block's struct, not on the module".to_string(),
            name => format!("`#[{name}]` goes on a field, not on the module"),
        };
        errors.spanned(attr, message);
    }
}

const BOUNDARY_TAKES_NOTHING: &str = "`#[bucket_boundary]` takes no arguments";

pub fn field_attrs(attrs: &[Attribute], errors: &mut Errors) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    let (mut seen_layer, mut seen_init) = (false, false);
    for attr in attrs {
        if attr.path().is_ident("bucket_boundary") {
            match &attr.meta {
                Meta::Path(_) if out.bucket_boundary.is_none() => out.bucket_boundary = Some(attr.clone()),
                Meta::Path(_) => errors.spanned(attr, "duplicate `#[bucket_boundary]`"),
                // At the arguments, `(..)` or `= ..`.
                Meta::List(list) if list.tokens.is_empty() => errors.spanned(attr, BOUNDARY_TAKES_NOTHING),
                Meta::List(list) => errors.spanned(&list.tokens, BOUNDARY_TAKES_NOTHING),
                Meta::NameValue(nv) => errors.spanned(&nv.value, BOUNDARY_TAKES_NOTHING),
            }
        } else if attr.path().is_ident("init") {
            if seen_init {
                errors.spanned(attr, "duplicate `#[init(...)]`");
            } else {
                out.init = crate::init_attr::parse(attr, errors);
            }
            seen_init = true;
        } else if attr.path().is_ident("tied") {
            match attr.parse_args::<syn::Ident>() {
                Ok(_) if out.tied.is_some() => errors.spanned(attr, "duplicate `#[tied(...)]`"),
                Ok(field) => out.tied = Some((field, attr.clone())),
                Err(e) => {
                    // At the token that is no field name (`"wte"`, `, fc`), as syn found it.
                    let message = "expected `#[tied(field)]`, naming the embedding whose weight this head reads";
                    errors.push(syn::Error::new(e.span(), message));
                    out.tied_invalid = true;
                }
            }
        } else if attr.path().is_ident("residual") {
            errors.spanned(
                attr,
                "`#[residual]` goes on the block's struct (`#[residual] pub struct Block { .. }`): every use of a \
                 block is residual, or none is",
            );
        } else if attr.path().is_ident("layer") {
            if seen_layer {
                errors.spanned(attr, "duplicate `#[layer(...)]` attribute");
                continue;
            }
            seen_layer = true;
            out.layer = layer_attr(attr, errors);
            out.layer_invalid = out.layer.is_none();
        }
    }
    out
}

fn layer_attr(attr: &Attribute, errors: &mut Errors) -> Option<LayerAttr> {
    // A bare `#[layer]` is `#[layer()]`: a width-preserving layer without parameters.
    let items = match &attr.meta {
        Meta::Path(_) => Ok(Punctuated::new()),
        _ => attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated),
    };
    let items = match items {
        Ok(items) => items,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let (mut input, mut output, mut params, mut flops, mut ready) = (None, None, None, None, None);
    let before = errors.len();
    // Given at all, valid or not: a bad value is its own error, not also a missing key.
    let given = |name: &str| items.iter().any(|item| item.path().is_ident(name));
    for item in &items {
        let key = path_name(item.path());
        match (key.as_str(), item) {
            ("input", Meta::NameValue(nv)) => {
                set_once(&mut input, positive_int(&nv.value, "input", errors), "input", nv, errors)
            }
            ("output", Meta::NameValue(nv)) => {
                set_once(&mut output, positive_int(&nv.value, "output", errors), "output", nv, errors)
            }
            ("flops", Meta::NameValue(nv)) => {
                let value = int_literal(&nv.value).and_then(|l| l.base10_parse::<u64>().ok());
                if value.is_none() {
                    errors.spanned(&nv.value, "`flops` must be an integer literal (forward FLOPs per sample)");
                }
                set_once(&mut flops, value, "flops", nv, errors);
            }
            ("ready", Meta::NameValue(nv)) => set_once(&mut ready, ready_order(&nv.value, errors), "ready", nv, errors),
            ("params", Meta::List(list)) => {
                let parsed = param_shapes(list, errors);
                set_once(&mut params, Some(parsed), "params", list, errors);
            }
            ("input" | "output" | "flops", _) => errors.spanned(item, format!("expected `{key} = <integer>`")),
            ("params", _) => errors.spanned(item, "expected `params(name = [dims..], ...)`"),
            ("ready", _) => errors.spanned(item, "expected `ready = reverse` or `ready = definition`"),
            _ => errors.spanned(item.path(), "unknown key; expected `input`, `output`, `params`, `flops` or `ready`"),
        }
    }
    let width = match (input, output) {
        (Some(i), Some(o)) => Some((i, o)),
        (None, None) => None,
        _ if given("input") && given("output") => None,
        _ => {
            // At the key given, which lacks its other half.
            let lone = items.iter().find(|item| item.path().is_ident("input") || item.path().is_ident("output"));
            let message = "give both `input` and `output`, or neither for a width-preserving layer";
            match lone {
                Some(item) => errors.spanned(item, message),
                None => errors.spanned(attr, message),
            }
            None
        }
    };
    let ready = ready.unwrap_or_default();
    (errors.len() == before).then(|| LayerAttr { width, params: params.unwrap_or_default(), flops, ready })
}

/// `reverse` (last parameter ready first, as `nn.Linear`) or `definition` (first first, as
/// `nn.LayerNorm`).
fn ready_order(value: &Expr, errors: &mut Errors) -> Option<ReadyOrder> {
    let order = match expr_name(value).as_str() {
        "reverse" => Some(ReadyOrder::Reverse),
        "definition" => Some(ReadyOrder::Definition),
        _ => None,
    };
    if order.is_none() {
        errors.spanned(
            value,
            "`ready` must be `reverse` (the last parameter's gradient ready first, as `nn.Linear`) or `definition` \
             (the first first, as `nn.LayerNorm`): the order the layer's `Layer::READY_ORDER` states",
        );
    }
    order
}

/// `weight = [64, 128], bias = [64]`.
fn param_shapes(list: &syn::MetaList, errors: &mut Errors) -> Vec<(syn::Ident, Vec<LitInt>)> {
    let pairs = match list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated) {
        Ok(pairs) => pairs,
        Err(e) => {
            errors.push(e);
            return Vec::new();
        }
    };
    let mut out: Vec<(syn::Ident, Vec<LitInt>)> = Vec::new();
    for pair in pairs {
        let Some(name) = pair.path.get_ident().cloned() else {
            errors.spanned(&pair.path, "a parameter name must be a plain identifier");
            continue;
        };
        if out.iter().any(|(n, _)| *n == name) {
            errors.spanned(&name, format!("duplicate parameter `{name}`"));
            continue;
        }
        let Expr::Array(array) = &pair.value else {
            errors.spanned(&pair.value, "a parameter shape is a list of dimensions, e.g. `[64, 128]`");
            continue;
        };
        let dims: Vec<LitInt> = array.elems.iter().filter_map(|e| positive_int(e, "a dimension", errors)).collect();
        if dims.len() == array.elems.len() {
            out.push((name, dims));
        }
    }
    out
}
