//! Small helpers the parsing and emitting modules share: names and integers read from the
//! user's tokens, and literals and identifiers written into the generated code.

use proc_macro2::Literal;
use quote::format_ident;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, Path};

use crate::errors::Errors;

/// The identifier a path is (`bucket_cap_mb`, `auto`), or `""` for a longer path: every caller
/// then reports it as an unknown key or name.
pub fn path_name(path: &Path) -> String {
    path.get_ident().map(ToString::to_string).unwrap_or_default()
}

/// The identifier an expression is, as `path_name`; `""` for any other expression.
pub fn expr_name(expr: &Expr) -> String {
    match expr {
        Expr::Path(p) => path_name(&p.path),
        _ => String::new(),
    }
}

/// The integer literal an expression is, if it is one: also in braces or parentheses, as a
/// const argument may be written (`Linear<{ 64 }, 10>`), or in a `macro_rules!` fragment's
/// invisible group.
pub fn int_literal(expr: &Expr) -> Option<&LitInt> {
    match unwrapped(expr) {
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => Some(i),
        _ => None,
    }
}

/// `expr` without the braces, parentheses and invisible groups around it (`{ (4) }` is `4`).
fn unwrapped(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(inner) => unwrapped(&inner.expr),
        Expr::Group(inner) => unwrapped(&inner.expr),
        Expr::Block(block) if block.attrs.is_empty() && block.label.is_none() => match block.block.stmts.as_slice() {
            [syn::Stmt::Expr(inner, None)] => unwrapped(inner),
            _ => expr,
        },
        _ => expr,
    }
}

/// Whether an integer literal has a suffix other than `usize` (`4u32`): as a layer's const
/// argument it would be a constant of another type.
pub fn foreign_suffix(lit: &LitInt) -> bool {
    !lit.suffix().is_empty() && lit.suffix() != "usize"
}

/// Whether `tokens` name one of `idents` anywhere, inside groups too (`Linear<{ N }, 2>`,
/// `[[Block; 2]; 2]`), raw or not.
pub fn mentions(tokens: proc_macro2::TokenStream, idents: &[&Ident]) -> bool {
    use syn::ext::IdentExt;
    tokens.into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => idents.iter().any(|w| w.unraw() == i.unraw()),
        proc_macro2::TokenTree::Group(g) => mentions(g.stream(), idents),
        _ => false,
    })
}

/// An integer literal greater than zero (a width or a dimension), unsuffixed or `usize`.
pub fn positive_int(expr: &Expr, what: &str, errors: &mut Errors) -> Option<LitInt> {
    match int_literal(expr).map(|l| (l, l.base10_parse::<usize>())) {
        Some((lit, _)) if foreign_suffix(lit) => {
            errors.spanned(lit, format!("{what} is a `usize`: write `{}`, not `{lit}`", lit.base10_digits()));
            None
        }
        Some((lit, Ok(v))) if v > 0 => Some(lit.clone()),
        Some((lit, Err(_))) if lit.base10_digits().bytes().any(|d| d != b'0') => {
            errors.spanned(lit, format!("{what} must fit a `usize`: {lit} does not (at most {})", usize::MAX));
            None
        }
        Some(_) => {
            errors.spanned(expr, format!("{what} must be an integer literal greater than zero"));
            None
        }
        // A constant or an expression: its value is the compiler's to know, after the macro ran.
        None if !matches!(unwrapped(expr), Expr::Lit(_) | Expr::Unary(_)) => {
            errors.spanned(expr, not_computed(what, expr));
            None
        }
        None => {
            errors.spanned(expr, format!("{what} must be an integer literal greater than zero"));
            None
        }
    }
}

/// Why a number the plan needs cannot be `written` (a constant, an expression): the macro runs
/// before the compiler knows its value.
pub fn not_computed(what: &str, written: &impl quote::ToTokens) -> String {
    let written = written.to_token_stream().to_string();
    format!(
        "{what} must be an integer literal greater than zero: the bucket plan is made from its value, which the \
         macro cannot compute from `{written}`; write the number"
    )
}

/// The value of a literal `positive_int` accepted.
pub fn positive_value(lit: &LitInt) -> usize {
    lit.base10_parse().expect("validated by positive_int")
}

/// `2048`, not `2048usize`: the expansion is meant to be read.
pub fn lit(n: usize) -> Literal {
    Literal::usize_unsuffixed(n)
}

/// `<base>_<suffix>`: the generated names derived from a field (`fc1_out`, `fc1_weight`), at the
/// field's span. A base's trailing underscores are dropped (`in_out` for a field `in_`): `in__out`
/// is not snake case, and the lint would speak at the user's field, which is.
pub fn suffixed(base: &Ident, suffix: &str) -> Ident {
    format_ident!("{}_{}", generated_base(base), suffix, span = base.span())
}

/// What `suffixed` puts before its suffix: the identifier without `r#` and trailing underscores.
pub fn generated_base(base: &Ident) -> String {
    syn::ext::IdentExt::unraw(base).to_string().trim_end_matches('_').to_string()
}

/// Whether `key` (at `at`) is met for the first time among the keys `seen`; a repetition is an
/// error, not the last one winning.
pub fn first_occurrence(seen: &mut Vec<String>, key: &str, at: impl quote::ToTokens, errors: &mut Errors) -> bool {
    if seen.iter().any(|k| k == key) {
        errors.spanned(at, format!("duplicate key `{key}`"));
        return false;
    }
    seen.push(key.to_string());
    true
}

/// The value of an integer or float literal, underscores and any suffix allowed (`1_000`,
/// `100u32`, `0.5f32`); `None` for anything else.
pub fn number(value: &Expr) -> Option<f64> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => i.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit { lit: Lit::Float(f), .. }) => f.base10_parse::<f64>().ok(),
        Expr::Group(inner) => number(&inner.expr),
        _ => None,
    }
}

/// Fills `slot` with `value` once; a second occurrence of the key (at `at`) is an error.
pub fn set_once<T>(slot: &mut Option<T>, value: Option<T>, key: &str, at: impl quote::ToTokens, errors: &mut Errors) {
    if slot.is_some() {
        errors.spanned(at, format!("duplicate key `{key}`"));
    } else if value.is_some() {
        *slot = value;
    }
}

/// Whether `ty` names the struct `own` itself (`Net`, `self::Net` or `Self`): a field of that type
/// would make the struct contain itself.
pub fn names_itself(ty: &syn::Type, own: &Ident) -> bool {
    let syn::Type::Path(path) = ty else { return false };
    let Some(last) = path.path.segments.last() else { return false };
    path.qself.is_none() && last.arguments.is_none() && (last.ident == *own || last.ident == "Self")
}
