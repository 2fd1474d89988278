//! Which struct of a module of blocks is what: the model (named by `model = Net`, or else the one
//! struct no other uses), its blocks (the structs it reaches through its fields), layer types of
//! one's own, and, beside a named model, structs of the program's own that it does not use.

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{Ident, Item, ItemMod, ItemStruct, Type};

use super::candidates;
use super::own_structs::{not_in_the_model, without_plain_structs};
use crate::cfg;
use crate::errors::Errors;
use crate::helpers::foreign_suffix;

/// The structs of `module`, in order, and those no other struct uses: the model alone, or none
/// or several candidates (already reported).
pub struct Structs<'a> {
    pub all: Vec<&'a ItemStruct>,
    pub(super) roots: Vec<usize>,
    /// Structs of one's own beside a named model, which it does not use (see `own_as_written`).
    pub own: Vec<&'a ItemStruct>,
    /// Of several candidate models (reported), the one taken for the model.
    taken: Option<usize>,
}

impl Structs<'_> {
    /// The model: the one struct no other uses (`None` when that could not be told).
    pub fn model(&self) -> Option<usize> {
        match self.roots[..] {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The struct emitted as the model when the input is invalid: the model, or of several
    /// candidates (reported) the one taken for it, so that code using it meets its placeholder
    /// impls rather than "no function `new`" besides the error.
    pub fn emitted_model(&self) -> Option<usize> {
        self.model().or(self.taken)
    }
}

/// The module's structs, its model found: the struct `named` (`model = Net`), or else the one
/// struct no other struct uses. With a name, the structs the model does not reach through its
/// blocks are the program's own, left as written.
pub fn structs<'a>(module: &'a ItemMod, named: Option<&syn::Ident>, errors: &mut Errors) -> Structs<'a> {
    let Some((_, items)) = &module.content else {
        errors
            .spanned(module, "the model's structs must be written inside the module: `mod net { .. }`, not `mod net;`");
        return Structs { all: Vec::new(), roots: Vec::new(), own: Vec::new(), taken: None };
    };
    let every: Vec<&ItemStruct> = module_structs(items).collect();
    // With a name, only the model and what it reaches through its fields' types are read; the
    // other structs are the program's own, whose fields say nothing about the model's types.
    let (mut read, mut own) = (every.clone(), Vec::new());
    let found = named.map(|named| every.iter().position(|s| s.ident.unraw() == named.unraw()));
    if let Some(Some(model)) = found {
        let reached = reached(&every, &module.ident, model);
        let (kept, others): (Vec<_>, Vec<_>) = every.iter().enumerate().partition(|&(s, _)| reached[s]);
        own = others.into_iter().map(|(_, &s)| s).collect();
        read = kept.into_iter().map(|(_, &s)| s).collect();
    }
    let layers = layer_types(&read, &module.ident, items);
    super::macro_calls::unseen_structs(items, &read, &layers, errors);
    if let Some(named) = named {
        let a_layer = layers.iter().any(|l| l.unraw() == named.unraw());
        if a_layer || found == Some(None) {
            model_not_found(&every, &layers, named, errors);
        }
        if a_layer {
            return Structs { all: Vec::new(), roots: Vec::new(), own, taken: None };
        }
        for s in &own {
            not_in_the_model(s, named, errors);
        }
    }
    let all: Vec<&ItemStruct> = read.into_iter().filter(|s| !layers.contains(&&s.ident)).collect();
    // Conditional structs (refused) may be one struct twice, or none in a build: which is the
    // model is not asked of them.
    let mut conditional = false;
    for s in &all {
        conditional |= cfg::check_struct(&s.attrs, errors);
        crate::field_attr::misplaced_on_struct(&s.attrs, &s.ident, errors);
        crate::ast::refuse_packed(&s.attrs, errors);
    }
    if all.is_empty() {
        errors.spanned(&module.ident, "this module holds no struct: put the model and its blocks in it");
        return Structs { all, roots: Vec::new(), own, taken: None };
    }
    if let Some(named) = named {
        let roots = all.iter().position(|s| s.ident.unraw() == named.unraw()).into_iter().collect();
        return Structs { all, roots, own, taken: None };
    }
    // A struct that uses itself is not made a block by that (`unroll` reports the use).
    let used: Vec<bool> = (0..all.len())
        .map(|b| {
            let users = all.iter().enumerate().filter(|&(s, _)| s != b);
            let mut fields = users.flat_map(|(s, item)| item.fields.iter().map(move |f| (s, f)));
            fields.any(|(s, f)| uses(&all, &module.ident, s, f, b))
        })
        .collect();
    let roots: Vec<usize> = (0..all.len()).filter(|&s| !used[s]).collect();
    match roots.as_slice() {
        &[model] => {
            unreached(&all, &module.ident, model, errors);
            taken_as_the_model(&all, &module.ident, model, errors);
        }
        [] => errors.spanned(&module.ident, "every struct in this module is used by another: one must be the model"),
        _ if conditional => {}
        several => {
            // Candidates that hold no layer are structs of one's own beside the model: said so,
            // and left as written, so that their fields are not read as layers.
            let names: Vec<&Ident> = all.iter().map(|s| &s.ident).collect();
            let (models, plain): (Vec<usize>, Vec<usize>) =
                several.iter().partition(|&&s| holds_layers(all[s], &module.ident, &names));
            if !models.is_empty() && !plain.is_empty() {
                let (all, roots, own) = without_plain_structs(all, &models, &plain, own, errors);
                return Structs { all, roots, own, taken: None };
            }
            let uses_blocks = |s: usize| {
                all[s].fields.iter().any(|f| names_module_struct(f.ty.to_token_stream(), &module.ident, &names))
            };
            let taken = candidates::report_all_but_one(&all, several, uses_blocks, errors);
            return Structs { all, roots: several.to_vec(), own, taken: Some(taken) };
        }
    }
    Structs { all, roots, own, taken: None }
}

/// The module's structs, none judged: all left as written, this macro's attributes removed
/// (where `model = ..` could not be read, and the model cannot be told).
pub fn unjudged(module: &ItemMod) -> Structs<'_> {
    let own = module.content.as_ref().map(|(_, items)| module_structs(items).collect()).unwrap_or_default();
    Structs { all: Vec::new(), roots: Vec::new(), own, taken: None }
}

/// The structs among `structs` (those of the module the model is read from) that are layer types
/// of one's own, not blocks, judged by the fields of `structs`: each field that names
/// one describes it with `#[layer(..)]` (which a layer of one's own needs), and a field does so
/// or the module implements a `Layer` for it (written beside the blocks, used by none yet). A
/// struct the module implements a `Layer` for and that holds no layer or block is one too (a
/// field using it without `#[layer]` is then reported as lacking it). Otherwise a struct some
/// field uses without `#[layer]` stays a block, whatever it implements (a trait of one's own may
/// be named `Layer`); so does one that holds layers or blocks and has no `Layer` impl here
/// (`#[layer]` on a block's field is then reported as such by `unroll`).
fn layer_types<'a>(structs: &[&'a ItemStruct], module: &Ident, items: &[Item]) -> Vec<&'a Ident> {
    let fields = || structs.iter().flat_map(|s| s.fields.iter());
    let described = |f: &syn::Field| f.attrs.iter().any(|a| a.path().is_ident("layer"));
    let implemented: Vec<&syn::Ident> =
        items.iter().filter_map(|i| if let Item::Impl(i) = i { implemented_layer(i) } else { None }).collect();
    let names: Vec<&Ident> = structs.iter().map(|s| &s.ident).collect();
    let holds_layers = |s: &ItemStruct| holds_layers(s, module, &names);
    let layer = |s: &ItemStruct| {
        let id = &s.ident;
        let uses: Vec<&syn::Field> =
            fields().filter(|f| names_module_struct(f.ty.to_token_stream(), module, &[id])).collect();
        let implemented = implemented.contains(&id);
        // Implemented here and holding no layer: a layer whose use lacks `#[layer]` (reported at
        // that field), not a block of no layers.
        (implemented && !holds_layers(s))
            || (uses.iter().all(|f| described(f))
                && (!uses.is_empty() || implemented)
                && (implemented || !holds_layers(s)))
    };
    structs.iter().filter(|s| layer(s)).map(|s| &s.ident).collect()
}

/// Whether `s` holds a layer or a block: a field of a built-in layer's type, one described with
/// `#[layer(..)]`, or one naming a struct of the module (`names`).
fn holds_layers(s: &ItemStruct, module: &Ident, names: &[&Ident]) -> bool {
    s.fields.iter().any(|f| {
        let builtin = matches!(&f.ty, Type::Path(p) if p.path.segments.last().is_some_and(|l| crate::layers::is_builtin(&l.ident)));
        let described = f.attrs.iter().any(|a| a.path().is_ident("layer"));
        builtin || described || names_module_struct(f.ty.to_token_stream(), module, names)
    })
}

/// The structs among a module's `items`, in order.
fn module_structs(items: &[Item]) -> impl Iterator<Item = &ItemStruct> {
    items.iter().filter_map(|i| if let Item::Struct(s) = i { Some(s) } else { None })
}

/// The struct `item` implements a trait named `Layer` for, if it is such an impl.
fn implemented_layer(item: &syn::ItemImpl) -> Option<&syn::Ident> {
    let (_, path, _) = item.trait_.as_ref()?;
    (path.segments.last()?.ident == "Layer").then_some(())?;
    match &*item.self_ty {
        Type::Path(p) if p.qself.is_none() => Some(&p.path.segments.last()?.ident),
        _ => None,
    }
}

/// Whether `field` of `all[s]` uses the struct `all[b]`: as a block (`[Block; 8]`), or named in a
/// form `block_of` does not know (`[[Block; 2]; 2]`, `net::Block`) by a struct defined after it:
/// `unroll` reports the form at the field's type, and the block is then no second model. (Only by
/// one after it: a block naming the model, `Vec<Net>`, leaves it the model.)
fn uses(all: &[&ItemStruct], module: &Ident, s: usize, field: &syn::Field, b: usize) -> bool {
    block_of(&field.ty, all, s).is_some_and(|(u, _)| u == b)
        || (b < s && names_module_struct(field.ty.to_token_stream(), module, &[&all[b].ident]))
}

/// Whether `tokens` (a field's type) name one of `structs`, the structs of the module `module`:
/// by a struct's name alone (`Block`, also inside generics: `Vec<Block>`), after `self::`, or
/// through the module's own name (`net::Block`, `crate::net::Block`). A path through another
/// module (`other::Block`, `::lib::Block`) names that module's struct, whatever it is called.
fn names_module_struct(tokens: proc_macro2::TokenStream, module: &Ident, structs: &[&Ident]) -> bool {
    use proc_macro2::{Spacing, TokenTree};
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let colon = |t: Option<&TokenTree>, spacing: Option<Spacing>| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == ':' && spacing.is_none_or(|s| p.spacing() == s));
    (0..tokens.len()).any(|k| match &tokens[k] {
        TokenTree::Group(g) => names_module_struct(g.stream(), module, structs),
        TokenTree::Ident(i) if structs.iter().any(|s| s.unraw() == i.unraw()) => {
            let after_path_separator = k >= 2 && colon(tokens.get(k - 1), None) && colon(tokens.get(k - 2), Some(Spacing::Joint));
            !after_path_separator
                || matches!(k.checked_sub(3).map(|q| &tokens[q]), Some(TokenTree::Ident(q)) if q == "self" || q.unraw() == module.unraw())
        }
        _ => false,
    })
}

/// One error for the structs the model `all[model]` never reaches, through blocks, though each is
/// used by another: they use each other in a cycle (no struct can be unused and not the model),
/// which unrolling the model never meets.
fn unreached(all: &[&ItemStruct], module: &Ident, model: usize, errors: &mut Errors) {
    let reached = reached(all, module, model);
    let cycle: Vec<String> = (0..all.len()).filter(|&s| !reached[s]).map(|s| format!("`{}`", all[s].ident)).collect();
    if let Some(first) = (0..all.len()).find(|&s| !reached[s]) {
        errors.spanned(
            &all[first].ident,
            format!(
                "{} use each other in a cycle that the model `{}` never reaches: a block cannot nest in itself, and a \
                 module holds one model and the blocks it uses",
                cycle.join(", "),
                all[model].ident
            ),
        );
    }
}

/// Which of `all` the model `all[model]` reaches through its blocks, itself included.
fn reached(all: &[&ItemStruct], module: &Ident, model: usize) -> Vec<bool> {
    let mut reached = vec![false; all.len()];
    let mut next = vec![model];
    while let Some(s) = next.pop() {
        if std::mem::replace(&mut reached[s], true) {
            continue;
        }
        next.extend((0..all.len()).filter(|&b| b != s && all[s].fields.iter().any(|f| uses(all, module, s, f, b))));
    }
    reached
}

/// The struct no other uses was taken as the model, but a field of it holds plain data (a number,
/// a string, a collection: reported at the field as no layer), as a struct of the program's own
/// that holds the model would. Says how to keep it so.
fn taken_as_the_model(all: &[&ItemStruct], module: &Ident, model: usize, errors: &mut Errors) {
    const PLAIN: &[&str] = &[
        "bool", "char", "str", "String", "Vec", "Option", "Box", "usize", "isize", "u8", "u16", "u32", "u64", "u128",
        "i8", "i16", "i32", "i64", "i128", "f32", "f64", "PathBuf", "HashMap", "BTreeMap", "Duration",
    ];
    let names: Vec<&Ident> = all.iter().map(|s| &s.ident).collect();
    let plain = |f: &&syn::Field| {
        let plain_type = match &f.ty {
            Type::Path(p) => p.path.segments.last().is_some_and(|last| PLAIN.iter().any(|name| last.ident == name)),
            Type::Reference(_) => true,
            _ => false,
        };
        plain_type
            && !f.attrs.iter().any(|a| a.path().is_ident("layer"))
            && !names_module_struct(f.ty.to_token_stream(), module, &names)
    };
    let Some(field) = all[model].fields.iter().find(plain) else { return };
    let name = field.ident.as_ref().map_or_else(String::new, |i| format!(" `{}`", i.unraw()));
    errors.spanned(
        &all[model].ident,
        format!(
            "`{}` is taken as the model, the one struct no other uses, but its field{name} is neither a layer nor a \
             block: if `{}` is a struct of your own, name the model (`#[distributed_model(model = Name)]`), and it \
             is left as written",
            all[model].ident, all[model].ident
        ),
    );
}

/// `model = Name` names no struct of layers and blocks in the module.
fn model_not_found(every: &[&ItemStruct], layers: &[&syn::Ident], named: &syn::Ident, errors: &mut Errors) {
    let what = if layers.iter().any(|l| l.unraw() == named.unraw()) {
        format!("`{named}` is a layer type of one's own, not the model")
    } else {
        format!("this module has no struct `{named}`")
    };
    let names: Vec<String> =
        every.iter().filter(|s| !layers.contains(&&s.ident)).map(|s| format!("`{}`", s.ident)).collect();
    let candidates = match names.len() {
        0 => String::new(),
        _ => format!(" (its structs of layers and blocks: {})", names.join(", ")),
    };
    errors.spanned(
        named,
        format!("{what}: `model` names the struct that holds the model's layers and blocks{candidates}"),
    );
}

/// The types the macro emits beside the model `model` (see `schedule_code::Names`).
pub const GENERATED_TYPES: [&str; 6] = ["Workspace", "Grads", "InFlight", "WorkspaceOn", "GradsOn", "InFlightOn"];

/// Items of `module` named as a type the macro emits for `model` (`NetGrads`), one error each.
/// Only items of the type namespace clash: a `fn NetGrads` or `const NetGrads` lives beside the
/// type (as in the struct form).
pub fn generated_names_free(module: &ItemMod, model: &syn::Ident, errors: &mut Errors) {
    let items = module.content.iter().flat_map(|(_, items)| items.iter());
    for item in items {
        let ident = match item {
            Item::Struct(i) => &i.ident,
            Item::Enum(i) => &i.ident,
            Item::Union(i) => &i.ident,
            Item::Type(i) => &i.ident,
            Item::Trait(i) => &i.ident,
            Item::TraitAlias(i) => &i.ident,
            Item::Mod(i) => &i.ident,
            _ => continue,
        };
        let name = ident.unraw().to_string();
        if let Some(kind) = GENERATED_TYPES.iter().find(|k| name == format!("{}{k}", model.unraw())) {
            errors.spanned(
                ident,
                format!("`{name}` is the name of the model's generated `{kind}` type: give this item another name"),
            );
        }
    }
}

/// Whether `ty`, in a field of `all[within]`, is a block of `all` (`Block`; `Self` is
/// `all[within]`), or `N` of them (`[Block; N]`, the length `None` when it is not a literal of
/// type `usize`, reported by `unroll`).
pub(super) fn block_of(ty: &Type, all: &[&ItemStruct], within: usize) -> Option<(usize, Option<Option<usize>>)> {
    let named = |ty: &Type| match ty {
        // One segment, generic arguments or not (a generic block is refused with the block), or
        // the same behind `self::`: the module's own item either way.
        Type::Path(p) if p.qself.is_none() && p.path.leading_colon.is_none() => {
            let segments: Vec<_> = p.path.segments.iter().collect();
            let last = match segments.as_slice() {
                [only] => only,
                [first, last] if first.ident == "self" && first.arguments.is_none() => last,
                _ => return None,
            };
            if last.ident == "Self" && segments.len() == 1 {
                return Some(within);
            }
            all.iter().position(|s| s.ident.unraw() == last.ident.unraw())
        }
        _ => None,
    };
    match ty {
        Type::Array(a) => {
            let len = match crate::helpers::int_literal(&a.len) {
                // `base10_parse` ignores the suffix: `2u8` would be unrolled, and the compiler refuse it.
                Some(n) if !foreign_suffix(n) => n.base10_parse::<usize>().ok(),
                _ => None,
            };
            named(&a.elem).map(|b| (b, Some(len)))
        }
        other => named(other).map(|b| (b, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::names_module_struct;

    /// Which field types name the module `net`'s struct `Block`.
    #[test]
    fn a_path_through_another_module_names_that_modules_struct() {
        let (module, block) = (syn::parse_quote!(net), syn::parse_quote!(Block));
        let names = |ty: &str| names_module_struct(ty.parse().unwrap(), &module, &[&block]);
        for named in ["Block", "r#Block", "[Block; 2]", "Vec<Block>", "self::Block", "net::Block", "crate::net::Block"]
        {
            assert!(names(named), "{named}");
        }
        for other in ["super::other::Block", "other::Block", "::lib::Block", "<T as Make>::Block", "Blocks", "Gain"] {
            assert!(!names(other), "{other}");
        }
        assert!(names("other::Wrapper<Block>"), "a generic argument is named by its name alone");
    }
}
