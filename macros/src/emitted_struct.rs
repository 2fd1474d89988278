//! The user's struct as the macro emits it again: without this macro's field attributes (the
//! compiler does not know them) and without the foreign suffixes of built-in layers' widths
//! (`Linear<4u32, 2>`), built-in layer types the compiler would refuse too (`Linear<4>`) and
//! fields of the struct's own type, already reported, so that the compiler adds no errors of its
//! own.
//! Apart from `field_attr` and `layers`, which it reads both of.

use syn::ItemStruct;

use crate::field_attr::is_ours;
use crate::layers::drop_foreign_suffixes;

/// `item` as written, without this macro's field attributes and foreign width suffixes.
pub fn strip_field_attrs(item: &ItemStruct) -> ItemStruct {
    let mut item = item.clone();
    for field in item.fields.iter_mut() {
        // The type of a `#[layer(...)]` field is the user's to check.
        let built_in = !field.attrs.iter().any(|a| a.path().is_ident("layer"));
        if built_in {
            drop_foreign_suffixes(&mut field.ty);
        }
        // `#[residual]` on a field is misplaced (reported in `field_attr`).
        field.attrs.retain(|a| !is_ours(a) && !a.path().is_ident("residual"));
        // The struct in itself (reported in `ast`) would be the compiler's "infinite size" too, and
        // a malformed built-in (reported in `layers`) its "wrong number of generic arguments".
        let refused_twice = built_in && crate::layers::refused_by_the_compiler_too(&field.ty);
        if refused_twice || crate::helpers::names_itself(&field.ty, &item.ident) {
            field.ty = syn::parse_quote!(());
        }
    }
    // Field attributes written on the struct (reported by `field_attr::misplaced_on_struct`), and
    // `#[residual]`, directly or through `cfg_attr` (refused), which the compiler would not know.
    item.attrs.retain(|a| {
        !crate::cfg::names_ours(a.path()) && !a.path().is_ident("residual") && !crate::cfg::applies(a, "residual")
    });
    item
}
