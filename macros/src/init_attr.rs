//! `#[init(..)]`: initial values beyond each layer type's own, on a layer or a block field.
//! `std = 0.02` draws the weights from N(0, 0.02²) and zeroes the biases (GPT-2's init);
//! `ends_with("c_proj.weight", std = 0.0071)` gives the parameters whose path ends so a spread of
//! their own (nanoGPT's residual projections, `pn.endswith('c_proj.weight')`). The innermost
//! `#[init]` around a layer decides it whole; a block's `std` leaves layers of one's own to their
//! `Layer::init` (nanoGPT's `_init_weights` touches only `nn.Linear` and `nn.Embedding`). Names are matched here, against the schedule's
//! parameter names, so a suffix that names nothing is an error and the expansion shows which
//! parameter of which layer is drawn how.

use std::rc::Rc;

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Lit, LitStr, Meta, Token};

use overlap_plan::{LayerSpec, StdInit};

use crate::errors::Errors;
use crate::helpers::{first_occurrence, path_name};

/// The largest `std` accepted: beyond, the weights are no initialisation.
const MAX_STD: f64 = 1e6;

/// One field's `#[init(..)]`, shared by every layer under the field.
pub struct InitAttr {
    /// `std = ..`: every matrix drawn from N(0, std²), every bias zeroed.
    pub std: Option<f64>,
    /// The tokens `std = ..`, for the error when there is no parameter to decide.
    pub std_at: Option<TokenStream>,
    /// `ends_with("suffix", std = ..)`, in the order written.
    pub named: Vec<NamedStd>,
}

pub struct NamedStd {
    /// Matched against whole components of a parameter's path (`c_proj.weight` matches
    /// `h.0.mlp.c_proj.weight`, not `h.0.mlp.xc_proj.weight`).
    pub suffix: LitStr,
    pub std: f64,
}

impl NamedStd {
    fn matches(&self, path: &str) -> bool {
        let suffix = self.suffix.value();
        path.strip_suffix(&suffix).is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
    }
}

/// `#[init(...)]`, every problem reported; `None` when any.
pub fn parse(attr: &Attribute, errors: &mut Errors) -> Option<Rc<InitAttr>> {
    let usage = "expected `#[init(std = 0.02)]`: weights drawn from N(0, std²) with a positive number literal, and \
                 optionally `ends_with(\"c_proj.weight\", std = 0.0071)` for the parameters whose path ends so";
    // At the token that cannot be read, not the whole attribute.
    let items = match attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
        Ok(items) => items,
        Err(e) => {
            errors.push(syn::Error::new(e.span(), usage));
            return None;
        }
    };
    let before = errors.len();
    let mut out = InitAttr { std: None, std_at: None, named: Vec::new() };
    let mut seen = Vec::new();
    for item in &items {
        match (path_name(item.path()).as_str(), item) {
            ("std", Meta::NameValue(nv)) => {
                if first_occurrence(&mut seen, "std", nv, errors) {
                    out.std = std_value(&nv.value, errors);
                    out.std_at = Some(nv.to_token_stream());
                }
            }
            ("ends_with", Meta::List(list)) if !matches!(list.delimiter, syn::MacroDelimiter::Paren(_)) => {
                errors.spanned(list, "expected `ends_with(\"c_proj.weight\", std = 0.0071)`, in parentheses")
            }
            ("ends_with", Meta::List(list)) => match list.parse_args::<EndsWith>() {
                Ok(EndsWith { suffix, std_key, value }) => {
                    let std = if std_key == "std" {
                        std_value(&value, errors)
                    } else {
                        errors.spanned(&std_key, "expected `std = ..` after the suffix");
                        None
                    };
                    let text = suffix.value();
                    if text.is_empty() || text.starts_with('.') || text.ends_with('.') || text.contains("..") {
                        errors.spanned(
                            &suffix,
                            "a suffix is one or more whole components of a parameter's path, such as `c_proj.weight`",
                        );
                    } else if out.named.iter().any(|n| n.suffix.value() == text) {
                        errors.spanned(&suffix, format!("duplicate suffix \"{text}\""));
                    } else if let Some(std) = std {
                        out.named.push(NamedStd { suffix, std });
                    }
                }
                Err(e) => {
                    errors.push(syn::Error::new(e.span(), "expected `ends_with(\"c_proj.weight\", std = 0.0071)`"))
                }
            },
            _ => errors.spanned(item, usage),
        }
    }
    if items.is_empty() {
        errors.spanned(attr, usage);
    }
    (errors.len() == before).then(|| Rc::new(out))
}

/// `"suffix", std = value`.
struct EndsWith {
    suffix: LitStr,
    std_key: syn::Ident,
    value: Expr,
}

impl Parse for EndsWith {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let suffix = input.parse()?;
        input.parse::<Token![,]>()?;
        let std_key = input.parse()?;
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        input.parse::<Option<Token![,]>>()?;
        Ok(EndsWith { suffix, std_key, value })
    }
}

/// A positive number literal (`0.02`, or `1` as `bucket_cap_mb` takes one) that is a normal f32
/// (the weights are drawn in f32: 1e-50 would be 0).
fn std_value(value: &Expr, errors: &mut Errors) -> Option<f64> {
    let parsed = match value {
        Expr::Lit(syn::ExprLit { lit: Lit::Float(lit), .. }) => lit.base10_parse::<f64>(),
        Expr::Lit(syn::ExprLit { lit: Lit::Int(lit), .. }) => lit.base10_parse::<f64>(),
        _ => {
            errors.spanned(value, "`std` must be a positive number literal, such as `0.02`");
            return None;
        }
    };
    match parsed {
        Ok(std) if std > MAX_STD => errors.spanned(value, "`std` must be at most 1e6"),
        Ok(std) if (std as f32).is_normal() && std > 0.0 => return Some(std),
        _ => {
            errors.spanned(value, "`std` must be positive and, as the f32 the weights are drawn with, at least 1.2e-38")
        }
    }
    None
}

/// The initial value of a layer of type `ty` (as the schedule describes it, `spec`), layer
/// `index` of the model: the type's own `Layer::init`, then, under an `#[init(..)]`, its
/// parameters redrawn (`init_normal`, or `init_normal_params` with the indices of the parameters a
/// suffix names); the `std` of the `#[init]` only where it applies (`Field::std_applies`).
pub fn init_expr(
    ty: &syn::Type,
    index: usize,
    init: Option<&InitAttr>,
    std_applies: bool,
    spec: Option<&LayerSpec>,
) -> TokenStream {
    let i = crate::helpers::lit(index);
    let own = quote!(<#ty as ::overlap::Layer>::init(&mut __rng));
    let f32_lit = |v: f64| proc_macro2::Literal::f32_unsuffixed(v as f32);
    let named: Vec<TokenStream> = match (init, spec) {
        (Some(init), Some(spec)) => spec
            .params
            .iter()
            .enumerate()
            .filter_map(|(p, param)| {
                let path = format!("{}.{}", spec.name, param.name);
                let rule = init.named.iter().find(|n| n.matches(&path))?;
                let (p, std) = (crate::helpers::lit(p), f32_lit(rule.std));
                Some(quote!((#p, #std)))
            })
            .collect(),
        _ => Vec::new(),
    };
    let std = init.and_then(|init| init.std).filter(|_| std_applies);
    let value = match std {
        Some(std) if named.is_empty() => {
            let std = f32_lit(std);
            quote!(::overlap::__private::init_normal(#own, &mut __rng, #std))
        }
        None if named.is_empty() => own,
        std => {
            let std = match std {
                Some(std) => {
                    let std = f32_lit(std);
                    quote!(::core::option::Option::Some(#std))
                }
                None => quote!(::core::option::Option::None),
            };
            quote!(::overlap::__private::init_normal_params(#own, &mut __rng, #std, &[#(#named),*]))
        }
    };
    quote!({
        let mut __rng = ::overlap::InitRng::for_layer(__seed, #i);
        #value
    })
}

/// One layer as `check_named` judges it: its innermost `#[init]`, its schedule entry, and whether
/// that `#[init]`'s `std` applies to it (`Field::std_applies`).
pub struct Decision<'a> {
    pub init: Option<&'a Rc<InitAttr>>,
    pub spec: Option<&'a LayerSpec>,
    pub std_applies: bool,
}

impl Decision<'_> {
    fn decided_by(&self, init: &Rc<InitAttr>) -> bool {
        self.init.is_some_and(|i| Rc::ptr_eq(i, init))
    }
}

/// Reports each suffix of `init` that names no parameter of the layers it decides among
/// `layers` (each one's innermost `#[init]` and schedule entry: those under its field), listing
/// the names it could have matched, or saying which inner `#[init]` decides the parameter it
/// names; and each parameter two suffixes name. Names are shown from `holder`, the path of the
/// struct holding the field, so that every copy of a repeated block says the same (and the
/// compiler shows it once). Layers whose type was already refused (no entry) are not judged.
pub fn check_named(init: &Rc<InitAttr>, holder: &str, layers: &[Decision], errors: &mut Errors) {
    if layers.iter().any(|d| d.spec.is_none()) {
        return;
    }
    let shown_from = if holder.is_empty() { String::new() } else { format!("{holder}.") };
    let paths = |which: &dyn Fn(&Decision) -> bool| -> Vec<String> {
        layers
            .iter()
            .filter(|d| which(d))
            .flat_map(|d| d.spec.iter().flat_map(|s| s.params.iter().map(move |p| format!("{}.{}", s.name, p.name))))
            .collect()
    };
    let (decided, others) = (paths(&|d| d.decided_by(init)), paths(&|d| !d.decided_by(init)));
    // Those its `std` applies to (the rest are layers of one's own, left to their `Layer::init`).
    let under_std = paths(&|d| d.decided_by(init) && d.std_applies);
    // What `std` alone changes (the runtime's rule): matrices drawn, biases zeroed, in the layers
    // it applies to.
    let drawn_by_std = layers
        .iter()
        .filter(|d| d.decided_by(init) && d.std_applies)
        .flat_map(|d| d.spec.iter().flat_map(|s| s.params.iter()))
        .any(|p| StdInit::of(&p.name, p.shape.len()) != StdInit::Keep);
    let shown = |path: &str| path.strip_prefix(&shown_from).unwrap_or(path).to_string();
    if let (Some(_), Some(at), true, false) = (init.std, &init.std_at, init.named.is_empty(), drawn_by_std) {
        let message = if !decided.is_empty() && under_std.is_empty() {
            format!(
                "this `#[init]` changes no parameter: a block's `std` leaves layers of one's own to their \
                 `Layer::init`; name a parameter to draw it: `ends_with(\"{}\", std = ..)`, or put the `#[init]` on \
                 the layer's own field",
                decided[0].rsplit('.').next().unwrap_or(&decided[0])
            )
        } else if !decided.is_empty() {
            let listed: Vec<String> = under_std.iter().take(4).map(|p| format!("`{}`", shown(p))).collect();
            let own_layers = if under_std.len() < decided.len() {
                " (and a block's `std` leaves layers of one's own to their `Layer::init`)"
            } else {
                ""
            };
            format!(
                "this `#[init]` changes no parameter: `std` draws matrices and zeroes biases, and {} {} \
                 neither{own_layers}; name a parameter to draw it: `ends_with(\"{}\", std = ..)`",
                listed.join(", "),
                if under_std.len() == 1 { "is" } else { "are" },
                decided[0].rsplit('.').next().unwrap_or(&decided[0])
            )
        } else if others.is_empty() {
            "this `#[init]` decides no parameter: no layer under it has parameters".to_string()
        } else {
            "this `#[init]` decides no parameter: each parameter under it is decided by the `#[init]` of a field \
             inside"
                .to_string()
        };
        errors.spanned(at, message);
    }
    // With a suffix, the `#[init]` does something; its `std` still does nothing when only layers
    // of one's own are under it.
    if let (Some(_), Some(at), false) = (init.std, &init.std_at, init.named.is_empty()) {
        if !decided.is_empty() && under_std.is_empty() {
            errors.spanned(
                at,
                "this `std` changes no parameter: a block's `std` leaves layers of one's own to their `Layer::init`, \
                 and only such layers are under it; keep the `ends_with(..)` alone, or put the `#[init]` on a layer's \
                 own field",
            );
        }
    }
    for rule in init.named.iter().filter(|rule| !decided.iter().any(|p| rule.matches(p))) {
        let listed: Vec<String> = decided.iter().take(6).map(|p| shown(p)).collect();
        let more = match decided.len() - listed.len() {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let why = match others.iter().find(|p| rule.matches(p)) {
            Some(inner) => format!("`{}` does, but the `#[init]` of a field inside decides it", shown(inner)),
            None if decided.is_empty() => "it decides no parameter".to_string(),
            None => format!("its parameters are {}{more}", listed.join(", ")),
        };
        errors.spanned(
            &rule.suffix,
            format!("no parameter's path ends in \"{}\" under this `#[init]`: {why}", rule.suffix.value()),
        );
    }
    // One spread per parameter: a later suffix naming a parameter an earlier one names is an error.
    for (k, rule) in init.named.iter().enumerate() {
        let twice = decided.iter().find_map(|p| {
            let earlier = init.named[..k].iter().find(|e| e.matches(p))?;
            rule.matches(p).then_some((p, earlier))
        });
        if let Some((path, earlier)) = twice {
            errors.spanned(
                &rule.suffix,
                format!(
                    "`{}` ends in both \"{}\" and \"{}\": give each parameter one spread",
                    shown(path),
                    earlier.suffix.value(),
                    rule.suffix.value()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_matches_whole_components_of_a_path() {
        let rule = NamedStd { suffix: LitStr::new("c_proj.weight", proc_macro2::Span::call_site()), std: 0.1 };
        assert!(rule.matches("h.0.mlp.c_proj.weight"));
        assert!(rule.matches("c_proj.weight"));
        assert!(!rule.matches("h.0.mlp.xc_proj.weight"));
        assert!(!rule.matches("h.0.mlp.c_proj.weight2"));
        assert!(!rule.matches("h.0.mlp.c_proj.bias"));
    }

    #[test]
    fn std_is_a_number_literal_written_with_or_without_a_point() {
        let std = |attr: Attribute| parse(&attr, &mut Errors::default()).and_then(|init| init.std);
        assert_eq!(std(syn::parse_quote!(#[init(std = 1)])), Some(1.0));
        assert_eq!(std(syn::parse_quote!(#[init(std = 0.02)])), Some(0.02));
        assert_eq!(std(syn::parse_quote!(#[init(std = 0)])), None);
    }
}
