//! `#[distributed_model(crate = "path")]`, as serde's `#[serde(crate = "...")]`: for a user who
//! re-exports `overlap` from a crate of their own, or names it through an alias; one who depends
//! on it under another name (`my_overlap = { package = "overlap", .. }`) needs none, as the name
//! is read from the crate's manifest (`renamed_dependency`). The code is generated with `::overlap::` paths, as
//! `cargo expand` shows them by default; given another path, each `::overlap` that starts a path
//! is replaced by it in one pass over the tokens, so no emitter needs to know. A module of
//! blocks gets its code inside the module, where the path is then read: an alias the enclosing
//! module imports (`use overlap as ml;`) is `super::ml` there, a renamed dependency `ml`.

use proc_macro2::{Group, Spacing, TokenStream, TokenTree};
use quote::ToTokens;

/// The crate's name in generated paths when none is given.
const DEFAULT: &str = "overlap";

/// `::ml` where the crate being compiled depends on `overlap` under the name `ml` (its
/// `Cargo.toml`: `ml = { package = "overlap", .. }`), so that a renamed dependency needs no
/// `crate = ".."`; `None` where it is `overlap`, or is not a direct dependency (a re-export, which
/// `crate = ".."` names), or the manifest cannot be read.
pub fn renamed_dependency() -> Option<syn::Path> {
    match proc_macro_crate::crate_name(DEFAULT).ok()? {
        proc_macro_crate::FoundCrate::Name(name) if name != DEFAULT => {
            let name = syn::Ident::new(&name, proc_macro2::Span::call_site());
            Some(syn::parse_quote!(::#name))
        }
        _ => None,
    }
}

/// `tokens` with every path that starts `::overlap::` starting with `krate` instead.
pub fn rebase(tokens: TokenStream, krate: &syn::Path) -> TokenStream {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if starts_default_path(&tokens, i) {
            out.extend(krate.to_token_stream());
            i += 3; // `:`, `:`, `overlap`; the `::` after it stays.
            continue;
        }
        match &tokens[i] {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), rebase(g.stream(), krate));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other.clone()),
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// Keywords that may stand right before a path (`impl ::overlap::Layer for`, `-> ::overlap::..`
/// has a punct); any other identifier there is a path segment (`a::overlap::b`).
const BEFORE_A_PATH: &[&str] = &[
    "as", "const", "dyn", "else", "for", "impl", "in", "let", "match", "move", "mut", "ref", "return", "static",
    "type", "unsafe", "use", "where", "while", "if", "break", "yield",
];

/// Whether `tokens[i..]` is `:: overlap ::` at the start of a path (not `a::overlap::b`, whose
/// `overlap` is a module of `a`).
fn starts_default_path(tokens: &[TokenTree], i: usize) -> bool {
    let colon = |k: usize, joint: bool| {
        matches!(tokens.get(k), Some(TokenTree::Punct(p))
            if p.as_char() == ':' && (!joint || p.spacing() == Spacing::Joint))
    };
    let named = matches!(tokens.get(i + 2), Some(TokenTree::Ident(id)) if id == DEFAULT);
    let continued = colon(i + 3, true) && colon(i + 4, false);
    let after_path = match i.checked_sub(1).and_then(|k| tokens.get(k)) {
        // A lifetime (`&'w ::overlap::Matrix`) or a keyword comes before a path's start.
        Some(TokenTree::Ident(id)) => {
            let lifetime = matches!(tokens.get(i.wrapping_sub(2)), Some(TokenTree::Punct(q)) if q.as_char() == '\'');
            !lifetime && !BEFORE_A_PATH.contains(&id.to_string().as_str())
        }
        // `<T>::overlap` continues a path; `->` and `=>` end an arrow before one.
        Some(TokenTree::Punct(p)) if p.as_char() == '>' => {
            let arrow = matches!(tokens.get(i.wrapping_sub(2)), Some(TokenTree::Punct(q))
                if (q.as_char() == '-' || q.as_char() == '=') && q.spacing() == Spacing::Joint);
            !arrow
        }
        // Any other punctuation (`:`, `<`, `(`, `=`, ...), a group or nothing: a path starts.
        _ => false,
    };
    colon(i, true) && colon(i + 1, false) && named && continued && !after_path
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn rebased(tokens: TokenStream, krate: &str) -> String {
        rebase(tokens, &syn::parse_str(krate).unwrap()).to_string()
    }

    #[test]
    fn absolute_overlap_paths_take_the_given_crate() {
        let code = quote!(impl ::overlap::Layer for X {
            fn f(v: Vec<::overlap::Matrix>) -> ::overlap::Result<()> { match v { _ => ::overlap::g() } }
        });
        let out = rebased(code, "::my_overlap");
        assert!(!out.contains(":: overlap ::"), "{out}");
        assert_eq!(out.matches(":: my_overlap ::").count(), 4, "{out}");
        let out = rebased(
            quote!(
                const _: u8 = ::overlap::__private::f();
            ),
            "crate::reexported::overlap",
        );
        assert!(out.contains("crate :: reexported :: overlap :: __private :: f"), "{out}");
    }

    #[test]
    fn other_paths_and_strings_are_left_alone() {
        let code = quote!(
            use a::overlap::B;,
            type T = <X>::overlap::Y;,
            const S: &str = "::overlap::Layer";,
            ::overlap_plan::X
        );
        assert_eq!(rebased(code.clone(), "::renamed"), code.to_string());
        // `::overlap` alone is no path into the crate.
        let alone = quote!(
            use ::overlap;
        );
        assert_eq!(rebased(alone.clone(), "::renamed"), alone.to_string());
    }
}
