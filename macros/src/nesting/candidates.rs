//! Several structs of a module that no other uses: each could be the model, and a module holds
//! one. All but one are reported; the one that uses the module's blocks is taken for the model
//! (the others are drafts or settings left beside it), else the first.

use syn::ItemStruct;

use crate::errors::Errors;

/// Reports every candidate of `several` (indices into `all`) but the one taken for the model,
/// and returns that one (`uses_blocks`: whether a struct has a field of another of `all`).
pub(super) fn report_all_but_one(
    all: &[&ItemStruct],
    several: &[usize],
    uses_blocks: impl Fn(usize) -> bool,
    errors: &mut Errors,
) -> usize {
    let users: Vec<usize> = several.iter().copied().filter(|&s| uses_blocks(s)).collect();
    let taken = match users.as_slice() {
        [one] => *one,
        _ => several[0],
    };
    let listed: Vec<String> = several.iter().map(|&s| format!("`{}`", all[s].ident)).collect();
    for &s in several.iter().filter(|&&s| s != taken) {
        errors.spanned(
            &all[s].ident,
            format!(
                "{} are each used by no other struct: a module holds one model, and every other struct is one of its \
                 blocks or a layer type it implements `Layer` for; to keep structs of your own beside the model, \
                 name it (`#[distributed_model(model = Name)]`), or move them out of the module",
                listed.join(", ")
            ),
        );
    }
    taken
}
