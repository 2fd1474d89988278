//! Types, lengths and attribute arguments that reach the macro through another macro's
//! fragments (`$t:ty`, `$n:expr`, `$c:literal`) arrive wrapped in invisible groups. They are
//! unwrapped before anything reads the fields, so that `model!(Net, Linear<4, 8>)` is the model
//! it reads as; the tokens keep their spans. Parentheses around a type go the same way. (An
//! attribute's values are literals and paths, which no grouping changes the meaning of.)

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use syn::{Expr, Fields, GenericArgument, Item, PathArguments, Type};

/// The fields of `item`'s structs (the struct itself, or each struct of the module), unwrapped.
pub fn item(item: &mut Item) {
    match item {
        Item::Struct(s) => fields(&mut s.fields),
        Item::Mod(m) => {
            for inner in m.content.iter_mut().flat_map(|(_, items)| items.iter_mut()) {
                if let Item::Struct(s) = inner {
                    fields(&mut s.fields);
                }
            }
        }
        _ => {}
    }
}

fn fields(fields: &mut Fields) {
    for field in fields.iter_mut() {
        ty(&mut field.ty);
        // This macro's own attributes only: another's may hold expressions whose grouping counts.
        field.attrs.iter_mut().filter(|a| crate::cfg::names_ours(a.path())).for_each(attribute);
    }
}

/// One of this macro's field attributes' arguments (`#[layer(input = $n, ..)]`,
/// `#[init(ends_with("w", std = $s))]`), wherever a fragment sits in them.
fn attribute(attr: &mut syn::Attribute) {
    match &mut attr.meta {
        syn::Meta::List(list) => list.tokens = tokens(std::mem::take(&mut list.tokens)),
        syn::Meta::NameValue(nv) => expr(&mut nv.value),
        syn::Meta::Path(_) => {}
    }
}

/// `stream` with every invisible group replaced by its tokens, at any depth.
pub fn tokens(stream: TokenStream) -> TokenStream {
    stream
        .into_iter()
        .flat_map(|tree| match tree {
            TokenTree::Group(g) if g.delimiter() == Delimiter::None => tokens(g.stream()).into_iter().collect(),
            // Rebuilt only around a fragment: a rebuilt group has one span for both delimiters.
            TokenTree::Group(g) if has_invisible(&g.stream()) => {
                let mut inner = Group::new(g.delimiter(), tokens(g.stream()));
                inner.set_span(g.span());
                vec![TokenTree::Group(inner)]
            }
            other => vec![other],
        })
        .collect()
}

fn ty(t: &mut Type) {
    // `(Linear<4, 8>)` is the type it holds, as the compiler reads it.
    loop {
        match t {
            Type::Group(g) => *t = (*g.elem).clone(),
            Type::Paren(p) => *t = (*p.elem).clone(),
            _ => break,
        }
    }
    match t {
        Type::Array(a) => {
            ty(&mut a.elem);
            expr(&mut a.len);
        }
        Type::Path(p) => {
            for segment in p.path.segments.iter_mut() {
                if let PathArguments::AngleBracketed(args) = &mut segment.arguments {
                    for arg in args.args.iter_mut() {
                        match arg {
                            GenericArgument::Type(inner) => ty(inner),
                            GenericArgument::Const(e) => expr(e),
                            _ => {}
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn expr(e: &mut Expr) {
    while let Expr::Group(g) = e {
        *e = (*g.expr).clone();
    }
}

fn has_invisible(stream: &TokenStream) -> bool {
    stream.clone().into_iter().any(|tree| match tree {
        TokenTree::Group(g) => g.delimiter() == Delimiter::None || has_invisible(&g.stream()),
        _ => false,
    })
}
