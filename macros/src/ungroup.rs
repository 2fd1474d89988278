//! Types and lengths that reach the macro through another macro's fragments (`$t:ty`,
//! `$n:expr`) arrive wrapped in invisible groups. They are unwrapped before anything reads the
//! fields, so that `model!(Net, Linear<4, 8>)` is the model it reads as; the tokens keep their
//! spans.

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
    fields.iter_mut().for_each(|f| ty(&mut f.ty));
}

fn ty(t: &mut Type) {
    while let Type::Group(g) = t {
        *t = (*g.elem).clone();
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
