//! The model attribute's comma-separated settings, each read on its own: one that cannot be read
//! is reported at its first unreadable token, and the others are still read. A missing comma
//! loses only what follows it up to the next comma, so `model = Net` or `crate = ..` beside a
//! typo still name the model and the crate, and no error follows from their absence.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::Meta;

use crate::errors::Errors;

/// The settings read, and the keys of those that could not be (where a key could be told).
pub struct Settings {
    pub read: Vec<Meta>,
    pub unreadable: Vec<String>,
}

/// What a setting is, after a parser's error.
const A_SETTING: &str = "a setting is `key = value`, or the flag `shard_optimizer`";

pub fn settings(args: TokenStream, errors: &mut Errors) -> Settings {
    let mut out = Settings { read: Vec::new(), unreadable: Vec::new() };
    for (piece, comma) in split_at_commas(args) {
        if piece.is_empty() {
            // A trailing comma is allowed (and dropped); a leading one, or two in a row, are not.
            if let Some(comma) = comma {
                errors.push(syn::Error::new(comma, "a setting is missing before this comma"));
            }
            continue;
        }
        let key = match piece.clone().into_iter().next() {
            Some(TokenTree::Ident(ident)) => Some(ident.to_string()),
            _ => None,
        };
        let end = piece.clone().into_iter().last().map_or_else(Span::call_site, |t| t.span());
        match Parser::parse2(meta_and_rest, piece) {
            Ok((meta, rest)) => {
                if let Some(rest) = rest {
                    errors.push(syn::Error::new(rest, "expected `,` before this: settings are separated by commas"));
                }
                out.read.push(meta);
            }
            Err(e) => {
                // At the end of a setting (`bucket_cap_mb =`), not across the whole attribute.
                let at = if e.to_string().contains("end of input") { end } else { e.span() };
                errors.push(syn::Error::new(at, format!("{e}; {A_SETTING}")));
                out.unreadable.extend(key);
            }
        }
    }
    out
}

/// A setting, and where what follows it begins when something does (a missing comma).
fn meta_and_rest(input: ParseStream) -> syn::Result<(Meta, Option<Span>)> {
    let meta: Meta = input.parse()?;
    let rest = (!input.is_empty()).then(|| input.span());
    while !input.is_empty() {
        input.parse::<TokenTree>()?;
    }
    Ok((meta, rest))
}

/// The tokens between top-level commas (a group's commas are inside one token), each with the
/// comma after it.
fn split_at_commas(args: TokenStream) -> Vec<(TokenStream, Option<Span>)> {
    let mut pieces = vec![(TokenStream::new(), None)];
    for token in args {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                if let Some(last) = pieces.last_mut() {
                    last.1 = Some(p.span());
                }
                pieces.push((TokenStream::new(), None));
            }
            _ => {
                if let Some(last) = pieces.last_mut() {
                    last.0.extend([token]);
                }
            }
        }
    }
    if pieces.len() > 1 && pieces.last().is_some_and(|(piece, _)| piece.is_empty()) {
        pieces.pop(); // After a trailing comma.
    }
    pieces
}
