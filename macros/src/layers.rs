//! What a field's type means to the planner. Built-in layers are recognised by name and their
//! literal widths; any other type must say what it is with `#[layer(...)]`. Either way the
//! emitted code asserts at compile time that the type's `overlap::Layer` constants agree, so a
//! look-alike type (an alias, a shadowing import) cannot silently run with a wrong plan.

use overlap_plan::{LayerSpec, ReadyOrder, Width};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{Expr, ExprLit, GenericArgument, Lit, LitInt, PathArguments, Type};

use crate::errors::Errors;
use crate::field_attr::LayerAttr;
use crate::helpers::{foreign_suffix, positive_int, positive_value};

/// The layer types the macro reads from the type alone, each with its number of const arguments
/// (widths, heads, vocabulary), in the order messages list them.
const BUILT_INS: [(&str, usize); 11] = [
    ("Linear", 2),
    ("LayerNorm", 1),
    ("Relu", 0),
    ("Gelu", 0),
    ("Tanh", 0),
    ("Sigmoid", 0),
    ("Dropout", 0),
    ("Embedding", 2),
    ("PositionEmbedding", 2),
    ("CausalSelfAttention", 2),
    ("TiedHead", 2),
];

/// The const arguments of the built-in layer type `name`; `None` for any other type.
fn builtin_arity(name: &syn::Ident) -> Option<usize> {
    BUILT_INS.iter().find(|(b, _)| name == b).map(|&(_, arity)| arity)
}

/// Whether `name` is one of the built-in layer types.
pub fn is_builtin(name: &syn::Ident) -> bool {
    builtin_arity(name).is_some()
}

/// The built-in layer types, for messages: `Linear, LayerNorm, ...`.
fn built_in_list() -> String {
    BUILT_INS.map(|(name, _)| name).join(", ")
}

/// Approximate forward FLOPs per element of the element-wise built-ins (used by cost models).
const RELU_FLOPS: u64 = 1;
const SIGMOID_FLOPS: u64 = 4;
const TANH_FLOPS: u64 = 5;
const GELU_FLOPS: u64 = 10;
const DROPOUT_FLOPS: u64 = 1;
const LAYER_NORM_FLOPS: u64 = 8;

/// The spec of a field from its `#[layer(...)]` attribute.
pub fn custom(name: &str, ty: &Type, attr: &LayerAttr) -> LayerSpec {
    let width = match &attr.width {
        Some((i, o)) => Width::Fixed { input: positive_value(i), output: positive_value(o) },
        None => Width::Preserving,
    };
    let mut spec = LayerSpec::new(name.to_owned(), type_text(ty), width).with_ready(attr.ready);
    for (param, dims) in &attr.params {
        let shape: Vec<usize> = dims.iter().map(positive_value).collect();
        // `r#type` is `type` in the schedule and checkpoints (PyTorch's name) and in generated names.
        spec.params.push(overlap_plan::ParamSpec::new(param.unraw().to_string(), shape));
    }
    spec.flops_per_sample = attr.flops.unwrap_or_else(|| {
        spec.params.iter().map(|p| p.numel() as u64).fold(0u64, u64::saturating_add).saturating_mul(2)
    });
    spec
}

/// The spec of a built-in layer type, `Ok(None)` for a type that is not one, `Err(())` when it
/// is one but malformed (reported to `errors`).
pub fn builtin(name: &str, ty: &Type, errors: &mut Errors) -> Result<Option<LayerSpec>, ()> {
    let Type::Path(path) = ty else { return Ok(None) };
    let Some(last) = path.path.segments.last() else { return Ok(None) };
    let Some(arity) = builtin_arity(&last.ident) else { return Ok(None) };
    let kind = last.ident.to_string();
    let widths = const_args(&last.arguments, arity, &kind, ty, errors)?;
    let text = type_text(ty);
    let spec = match (kind.as_str(), widths.as_slice()) {
        ("Linear", &[input, output]) => LayerSpec::new(name.to_owned(), text, Width::Fixed { input, output })
            .with_param("weight", &[output, input])
            .with_param("bias", &[output])
            .with_flops((input as u64).saturating_mul(output as u64).saturating_mul(2)),
        ("Embedding", &[vocab, d]) => LayerSpec::new(name.to_owned(), text, Width::Fixed { input: 1, output: d })
            .with_param("weight", &[vocab, d])
            .with_flops(d as u64),
        ("PositionEmbedding", &[positions, d]) => {
            LayerSpec::new(name.to_owned(), text, Width::Fixed { input: d, output: d })
                .with_param("weight", &[positions, d])
                .with_flops(d as u64)
        }
        ("CausalSelfAttention", &[d, heads]) => {
            if d % heads != 0 {
                errors.spanned(
                    ty,
                    format!("`CausalSelfAttention<{d}, {heads}>`: the width must be a multiple of the heads"),
                );
                return Err(());
            }
            // The projections' FLOPs; the attention's own grow with the sequence, unknown here.
            LayerSpec::new(name.to_owned(), text, Width::Fixed { input: d, output: d })
                .with_param("c_attn.weight", &[d.saturating_mul(3), d])
                .with_param("c_attn.bias", &[d.saturating_mul(3)])
                .with_param("c_proj.weight", &[d, d])
                .with_param("c_proj.bias", &[d])
                .with_flops((d as u64).saturating_mul(d as u64).saturating_mul(8))
        }
        // No parameter of its own: `#[tied(..)]` names the embedding whose weight it reads (`tied`).
        ("TiedHead", &[d, vocab]) => LayerSpec::new(name.to_owned(), text, Width::Fixed { input: d, output: vocab })
            .with_flops((d as u64).saturating_mul(vocab as u64).saturating_mul(2)),
        ("LayerNorm", &[d]) => LayerSpec::new(name.to_owned(), text, Width::Fixed { input: d, output: d })
            .with_param("weight", &[d])
            .with_param("bias", &[d])
            .with_ready(ReadyOrder::Definition)
            .with_flops(LAYER_NORM_FLOPS.saturating_mul(d as u64)),
        _ => LayerSpec::new(name.to_owned(), text, Width::Preserving),
    };
    Ok(Some(spec))
}

/// The `overlap::DeviceOp` that the built-in layer `ty` names declares: as an expression
/// (`::overlap::DeviceOp::Linear { input: 784, output: 2048 }`) for the compile-time check that
/// the type is that built-in, not another type under its name (`use .. Gelu as Relu`) that would
/// run with a plan describing another layer, and as messages show it. `None` for other types.
pub fn builtin_device_op(ty: &Type) -> Option<(proc_macro2::TokenStream, String)> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    builtin_arity(&last.ident)?;
    let args: Vec<usize> = match &last.arguments {
        PathArguments::None => Vec::new(),
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .map(|arg| match arg {
                GenericArgument::Const(expr) => crate::helpers::int_literal(expr)?.base10_parse().ok(),
                _ => None,
            })
            .collect::<Option<_>>()?,
        PathArguments::Parenthesized(_) => return None,
    };
    let kind = last.ident.unraw().to_string();
    let names: &[&str] = match kind.as_str() {
        "Linear" | "TiedHead" => &["input", "output"],
        "LayerNorm" => &["width"],
        "CausalSelfAttention" => &["width", "heads"],
        "Embedding" => &["vocab", "width"],
        "PositionEmbedding" => &["positions", "width"],
        _ => &[],
    };
    if names.len() != args.len() {
        return None;
    }
    let variant = syn::Ident::new(&kind, proc_macro2::Span::call_site());
    if args.is_empty() {
        return Some((quote::quote!(::overlap::DeviceOp::#variant), format!("DeviceOp::{kind}")));
    }
    let fields = names.iter().map(|n| syn::Ident::new(n, proc_macro2::Span::call_site()));
    let values = args.iter().map(|&v| crate::helpers::lit(v));
    let shown: Vec<String> = names.iter().zip(&args).map(|(n, v)| format!("{n}: {v}")).collect();
    Some((
        quote::quote!(::overlap::DeviceOp::#variant { #(#fields: #values),* }),
        format!("DeviceOp::{kind} {{ {} }}", shown.join(", ")),
    ))
}

/// A built-in layer type's width literals with another suffix than `usize` (reported by
/// `builtin`) without it, so that the struct emitted beside the errors adds none of its own.
pub fn drop_foreign_suffixes(ty: &mut Type) {
    let Type::Path(path) = ty else { return };
    let Some(last) = path.path.segments.last_mut() else { return };
    if !is_builtin(&last.ident) {
        return;
    }
    let PathArguments::AngleBracketed(args) = &mut last.arguments else { return };
    for arg in args.args.iter_mut() {
        if let GenericArgument::Const(Expr::Lit(ExprLit { lit: Lit::Int(lit), .. })) = arg {
            if foreign_suffix(lit) {
                *lit = LitInt::new(lit.base10_digits(), lit.span());
            }
        }
    }
}

/// Whether the compiler would refuse a built-in layer type as written on top of the macro's own
/// error (already reported by `builtin`): another number of generic arguments than the type
/// takes (`Linear<4>`, `Relu<4>`), a negative width (`Linear<-4, 4>`) or a literal of another type
/// than an integer (`Linear<4, 4.0>`). The struct emitted beside the errors holds `()` there
/// instead, so that each mistake is reported once.
pub fn refused_by_the_compiler_too(ty: &Type) -> bool {
    let Type::Path(path) = ty else { return false };
    let Some(last) = path.path.segments.last() else { return false };
    let Some(arity) = builtin_arity(&last.ident) else { return false };
    match &last.arguments {
        PathArguments::None => arity != 0,
        PathArguments::Parenthesized(_) => true,
        PathArguments::AngleBracketed(args) => {
            args.args.len() != arity
                || args.args.iter().any(|arg| {
                    let GenericArgument::Const(expr) = arg else { return false };
                    let expr = match expr {
                        Expr::Block(block) => match block.block.stmts.as_slice() {
                            [syn::Stmt::Expr(inner, None)] => inner,
                            _ => return false,
                        },
                        other => other,
                    };
                    match expr {
                        Expr::Unary(syn::ExprUnary { op: syn::UnOp::Neg(_), .. }) => true,
                        // `Linear<-4, 4>` reads as one literal.
                        Expr::Lit(ExprLit { lit: Lit::Int(lit), .. }) => lit.base10_digits().starts_with('-'),
                        // `Linear<4, 4.0>`, `'a'`, `true`, `"4"`: not a `usize`.
                        Expr::Lit(_) => true,
                        _ => false,
                    }
                })
        }
    }
}

/// The type's name without its path and generic arguments: `Linear` for `overlap::Linear<4, 2>`.
pub fn kind_name(kind: &str) -> &str {
    // The generic arguments first: they may hold paths of their own (`Gain<crate::Width>`).
    let path = kind.split('<').next().unwrap_or(kind);
    path.rsplit("::").next().unwrap_or(path).trim()
}

/// FLOPs per element of a width-preserving built-in, once its width is known.
pub fn elementwise_flops(kind: &str) -> u64 {
    match kind {
        "Relu" => RELU_FLOPS,
        "Sigmoid" => SIGMOID_FLOPS,
        "Tanh" => TANH_FLOPS,
        "Gelu" => GELU_FLOPS,
        // Two integer hashes and a product per element while training, a copy otherwise.
        "Dropout" => DROPOUT_FLOPS,
        _ => 0,
    }
}

/// The `arity` literal const-generic widths of a built-in layer type.
fn const_args(
    args: &PathArguments,
    arity: usize,
    kind: &str,
    ty: &Type,
    errors: &mut Errors,
) -> Result<Vec<usize>, ()> {
    let builtin = match arity {
        0 => format!("overlap's built-in `{kind}` takes no generic arguments"),
        1 => format!("expected `{kind}<WIDTH>` with an integer literal"),
        _ => match kind {
            "Embedding" => "expected `Embedding<VOCAB, WIDTH>` with integer literals".to_string(),
            "PositionEmbedding" => "expected `PositionEmbedding<POSITIONS, WIDTH>` with integer literals".to_string(),
            "CausalSelfAttention" => "expected `CausalSelfAttention<WIDTH, HEADS>` with integer literals".to_string(),
            "TiedHead" => "expected `TiedHead<WIDTH, VOCAB>` with integer literals".to_string(),
            _ => format!("expected `{kind}<IN, OUT>` with integer literals"),
        },
    };
    // The name may be the user's own layer's, which the macro takes for the built-in's.
    let expected =
        format!("{builtin} (a layer of your own named `{kind}` is described to the macro with `#[layer(...)]`)");
    let args: Vec<&GenericArgument> = match args {
        PathArguments::None => Vec::new(),
        PathArguments::AngleBracketed(a) => a.args.iter().collect(),
        PathArguments::Parenthesized(_) => {
            errors.spanned(ty, expected);
            return Err(());
        }
    };
    if args.len() != arity {
        errors.spanned(ty, expected);
        return Err(());
    }
    let mut widths = Vec::new();
    let mut ok = true;
    for arg in args {
        let value = match arg {
            GenericArgument::Const(expr) => positive_int(expr, "a layer width", errors),
            // `Linear<N, M>` with named constants parses as types; the planner needs the values.
            other => {
                errors.spanned(other, crate::helpers::not_computed("a layer width", other));
                None
            }
        };
        match value {
            Some(v) => widths.push(positive_value(&v)),
            None => ok = false,
        }
    }
    if ok {
        Ok(widths)
    } else {
        Err(())
    }
}

/// Why a field's type is no layer, and what would make it one: an array of layers, a path to a
/// struct elsewhere, or a type the macro does not know.
pub fn not_a_layer(ty: &Type) -> String {
    let shown = shown_type(ty);
    match ty {
        Type::Array(array) if matches!(&*array.elem, Type::Array(_)) => format!(
            "`{shown}`: an array of arrays is not unrolled; make a block holding the inner array, and repeat that \
             block"
        ),
        Type::Array(array) if names_no_layer(&array.elem) => format!(
            "`{shown}`: an array repeats a block, named by its struct's name (`[Block; 8]`, or `[self::Block; 8]`), \
             defined beside the model in its `#[distributed_model]` module"
        ),
        Type::Array(array) if unknown_name(&array.elem).is_some() => format!(
            "`{shown}`: `{}` is no block of this module: an array repeats a block (a struct of layers defined \
             beside the model in its `#[distributed_model]` module); to repeat a layer, make a block of it and \
             repeat the block",
            unknown_name(&array.elem).unwrap_or_default()
        ),
        Type::Array(_) => format!(
            "`{shown}`: an array repeats a block (a struct of layers defined beside the model in its \
             `#[distributed_model]` module), not a layer; make a block of the layers, and repeat it"
        ),
        Type::Path(p)
            if p.qself.is_none()
                && p.path.segments.len() > 1
                && p.path.segments.iter().all(|s| s.arguments.is_empty()) =>
        {
            format!(
                "`{shown}` is not a built-in layer ({}); a block is named by its struct's name (alone, or after \
                 `self::`), defined beside the model in its `#[distributed_model]` module; a layer of your own is described \
                 with `#[layer(input = N, output = M, params(weight = [M, N], ...))]`",
                built_in_list()
            )
        }
        _ => format!(
            "`{shown}` is not a built-in layer ({}) nor a block (a struct of layers, defined beside the model in a \
             module that `#[distributed_model]` is on, and named by its struct's name, not through an alias); \
             describe a layer of your own with `#[layer(input = N, output = M, params(weight = [M, N], ...))]` (no \
             input/output for width-preserving layers, `#[layer]` for one without parameters)",
            built_in_list()
        ),
    }
}

/// An array's element that is a bare name (`Blok`) but no built-in layer's: a block's name
/// mistyped, or a struct that is no block of this module.
fn unknown_name(elem: &Type) -> Option<String> {
    let Type::Path(p) = elem else { return None };
    let ident = p.path.get_ident()?;
    (p.qself.is_none() && !BUILT_INS.iter().any(|(name, _)| ident == name)).then(|| ident.to_string())
}

/// An array's element that is neither a bare name (`Block`) nor a layer type (`nn::Linear<4, 4>`,
/// `overlap::Relu`): a path to what can only be a block's name. (Parentheses around a type were
/// taken off before, as the compiler reads them: `[(Block); 2]` is `[Block; 2]`.)
fn names_no_layer(elem: &Type) -> bool {
    match elem {
        Type::Path(p) => {
            let last = p.path.segments.last();
            p.path.segments.len() > 1
                && last.is_some_and(|s| s.arguments.is_empty() && !BUILT_INS.iter().any(|(name, _)| s.ident == name))
        }
        _ => false,
    }
}

/// The type as a message shows it: `crate::other::Block`, `&'static Linear<4, 4>`, `[Relu; 2]`.
pub fn shown_type(ty: &Type) -> String {
    let mut text = type_text(ty);
    for (spaced, tight) in [(" :: ", "::"), (":: ", "::"), ("& ", "&"), (" ;", ";"), ("[ ", "["), (" ]", "]")] {
        text = text.replace(spaced, tight);
    }
    text
}

/// The type as the user wrote it, normalised (`Linear<784, 2048>`), for tables and fingerprints.
pub fn type_text(ty: &Type) -> String {
    ty.to_token_stream().to_string().replace(" < ", "<").replace(" >", ">").replace(" ,", ",")
}
