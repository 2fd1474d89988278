//! Macro calls among a module's items. `#[distributed_model]` reads the module as written, before
//! the calls in it expand, so a struct a call writes (`make_block!(Block);`) is not seen: a field
//! using it is reported as no layer, and the call itself is told why, since the field's message
//! alone would leave one looking for a typo.

use syn::ext::IdentExt;
use syn::{Ident, Item, ItemStruct, Type};

use crate::errors::Errors;
use crate::layers::is_builtin;

/// Reports each macro call in `items` when a field of `structs` names a type by a bare name that
/// no struct of the module, no layer type of one's own (`layers`) and no built-in layer has: a
/// struct the call writes would be that type, unseen.
pub fn unseen_structs(items: &[Item], structs: &[&ItemStruct], layers: &[&Ident], errors: &mut Errors) {
    let calls: Vec<&syn::ItemMacro> = items
        .iter()
        .filter_map(|item| match item {
            // `macro_rules! name { .. }` defines a macro (it has an ident); a call has none.
            Item::Macro(call) if call.ident.is_none() => Some(call),
            _ => None,
        })
        .collect();
    if calls.is_empty() {
        return;
    }
    let known = |name: &Ident| {
        is_builtin(name)
            || structs.iter().any(|s| s.ident.unraw() == name.unraw())
            || layers.iter().any(|l| l.unraw() == name.unraw())
    };
    let unknown = structs.iter().flat_map(|s| s.fields.iter().map(move |f| (s, f))).find_map(|(s, field)| {
        // A layer of one's own may be defined anywhere: `#[layer(..)]` describes it.
        if field.attrs.iter().any(|a| a.path().is_ident("layer")) {
            return None;
        }
        let name = bare_name(&field.ty)?;
        let field_name = field.ident.as_ref()?;
        (!known(name)).then(|| format!("`{name}` (field `{field_name}` of `{}`)", s.ident))
    });
    let Some(unknown) = unknown else { return };
    for call in calls {
        let name = call.mac.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        errors.spanned(
            &call.mac,
            format!(
                "`#[distributed_model]` reads this module as written, before `{name}!` expands, so a struct it \
                 writes is not seen: {unknown} is neither a block nor a layer here; write the struct out in the \
                 module"
            ),
        );
    }
}

/// The name a field's type is written with alone (`Block`, the element of `[Block; 8]`), if it is
/// a single name without generic arguments: the form a struct of the module is used in.
fn bare_name(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Array(array) => bare_name(&array.elem),
        // A type passed through a `macro_rules!` fragment arrives grouped.
        Type::Group(group) => bare_name(&group.elem),
        Type::Paren(paren) => bare_name(&paren.elem),
        Type::Path(path) if path.qself.is_none() && path.path.leading_colon.is_none() => {
            match path.path.segments.iter().collect::<Vec<_>>().as_slice() {
                [only] if only.arguments.is_empty() => Some(&only.ident),
                _ => None,
            }
        }
        _ => None,
    }
}
