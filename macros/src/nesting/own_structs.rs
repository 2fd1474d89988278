//! Structs of one's own beside the model in a module of blocks: found (beside a named model, the
//! structs it does not reach; otherwise a candidate for the model that holds no layer), reported
//! where this macro's attributes are on them, and emitted as written.

use syn::ItemStruct;

use crate::cfg;
use crate::errors::Errors;

/// `all` without the candidates for the model that hold no layer (`plain`, each reported, and
/// kept as written in `own`), with the positions there of the others (`models`), and `own`.
pub(super) fn without_plain_structs<'a>(
    all: Vec<&'a ItemStruct>,
    models: &[usize],
    plain: &[usize],
    mut own: Vec<&'a ItemStruct>,
    errors: &mut Errors,
) -> (Vec<&'a ItemStruct>, Vec<usize>, Vec<&'a ItemStruct>) {
    let model_names: Vec<String> = models.iter().map(|&m| format!("`{}`", all[m].ident)).collect();
    let name_it = match models {
        [one] => format!("`#[distributed_model(model = {})]`", all[*one].ident),
        _ => "`#[distributed_model(model = Name)]`".to_string(),
    };
    for &s in plain {
        errors.spanned(
            &all[s].ident,
            format!(
                "`{}` holds no layer or block, and no struct of the module uses it: a module holds one model \
                 ({}) and its blocks; to keep structs of your own beside the model, name it ({name_it}), or move \
                 them out of the module",
                all[s].ident,
                model_names.join(" or ")
            ),
        );
    }
    if let [_, rest @ ..] = models {
        for &s in rest {
            errors.spanned(
                &all[s].ident,
                format!("{} are each used by no other struct: a module holds one model", model_names.join(", ")),
            );
        }
    }
    own.extend(plain.iter().map(|&s| all[s]));
    let roots = models.iter().map(|&m| m - plain.iter().filter(|&&p| p < m).count()).collect();
    let kept = all.iter().enumerate().filter(|(s, _)| !plain.contains(s)).map(|(_, &s)| s).collect();
    (kept, roots, own)
}

/// A struct of one's own beside a named model is emitted as written: this macro's attributes on
/// it would only be unknown to the compiler, so each is reported here (and removed, by
/// `own_as_written`).
pub(super) fn not_in_the_model(own: &ItemStruct, model: &syn::Ident, errors: &mut Errors) {
    let struct_attrs = own.attrs.iter();
    let field_attrs = own.fields.iter().flat_map(|f| f.attrs.iter());
    for attr in struct_attrs.chain(field_attrs).filter(|a| ours_or_residual(a)) {
        errors.spanned(
            attr,
            format!(
                "`{}` is not part of the model `{model}` (neither it nor its blocks use it as a block), so this \
                 macro's attributes do not apply to it",
                own.ident
            ),
        );
    }
}

/// The struct of one's own `own` as it is emitted: as written, but for this macro's attributes
/// (reported by `not_in_the_model`).
pub fn own_as_written(own: &ItemStruct) -> ItemStruct {
    let mut item = own.clone();
    item.attrs.retain(|a| !ours_or_residual(a));
    for field in item.fields.iter_mut() {
        field.attrs.retain(|a| !ours_or_residual(a));
    }
    item
}

/// One of this macro's field attributes (directly or through `cfg_attr`), or `#[residual]`.
fn ours_or_residual(attr: &syn::Attribute) -> bool {
    crate::field_attr::is_ours(attr) || attr.path().is_ident("residual") || cfg::applies(attr, "residual")
}
