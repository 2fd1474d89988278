//! Small helpers the parsing and emitting modules share: names read from paths, and literals
//! and identifiers written into the generated code.

use proc_macro2::Literal;
use quote::format_ident;
use syn::{Expr, Ident, Path};

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

/// `2048`, not `2048usize`: the expansion is meant to be read.
pub fn lit(n: usize) -> Literal {
    Literal::usize_unsuffixed(n)
}

/// `<base>_<suffix>`: the generated names derived from a field (`fc1_out`, `fc1_weight`).
pub fn suffixed(base: &Ident, suffix: &str) -> Ident {
    format_ident!("{}_{}", base, suffix)
}
