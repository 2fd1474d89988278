//! A model made of blocks. A proc macro sees only the tokens it is applied to, never another
//! struct's fields through its type, so a model with blocks is written as one module that holds
//! all its structs: `#[distributed_model] mod net { struct Block {..} struct Net {..} }`. The
//! struct that no other uses is the model (or the one `model = Net` names); every other is a
//! block, used as a field (`mlp: Mlp`) or repeated (`blocks: [Block; 8]`), except a layer type of
//! one's own (a field describes it with `#[layer(..)]`, or no field uses it and the module
//! implements `Layer` for it) and, beside a named model, a struct of one's own it does not use
//! (`roles`). Blocks are unrolled here into one flat list of layers named by their path (`blocks.3.fc1`, as
//! PyTorch's state dict names them), so the planner, the checks and the code generator see one
//! chain of layers, and one bucket plan covers the model.
//! `#[residual]` on a block makes each of its uses `y = x + f(x)`.
//!
//! A block is defined above the structs that use it: nesting then has no cycles by
//! construction, and a use before the definition is reported as such.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, ToTokens};
use syn::{Expr, Fields, ItemStruct, Meta, Type};

use crate::ast::{generic_params, Field, Model, Prefix, Residual};
use crate::cfg;
use crate::errors::{Errors, Rule};
use crate::field_attr;
use crate::helpers::foreign_suffix;
use crate::layer_limit::{past_max_layers, MAX_LAYERS};

mod candidates;
mod macro_calls;
mod own_structs;
mod roles;

pub use own_structs::own_as_written;
use roles::block_of;
pub use roles::{generated_names_free, structs, unjudged, Structs, GENERATED_TYPES};

/// Copies of a block in one field (`[Block; N]`), at most: the code is unrolled per copy.
const MAX_REPEAT: usize = 1024;

/// The model `structs.model()` with its blocks unrolled. Where the module holds several candidates
/// (reported), each is unrolled as if it were the model, so that the errors in them and their
/// blocks show in the same compile (the compiler shows an error repeated at one place once).
pub fn trees<'a>(structs: &Structs<'a>, errors: &mut Errors) -> Vec<Model<'a>> {
    if structs.roots.is_empty() {
        return Vec::new();
    }
    for s in &structs.all {
        let message = "a model or block cannot be generic: the schedule is planned for concrete layers";
        // `Generics` prints no tokens for a `where` clause alone: the clause is the span then.
        if !s.generics.params.is_empty() {
            errors.spanned(&s.generics, message);
        } else if let Some(clause) = s.generics.where_clause.as_ref().filter(|c| !c.predicates.is_empty()) {
            errors.spanned(clause, message);
        }
        if !matches!(s.fields, Fields::Named(_)) {
            errors.spanned(&s.ident, "a model or block needs named fields, one per layer or block");
        }
    }
    if let Some(root) = structs.model() {
        refuse_residual_model(structs.all[root], errors);
    }
    let n = structs.all.len();
    let mut seen = Seen { unrolled: vec![false; n], refused: vec![false; n], barren: vec![None; n] };
    let trees = structs.roots.iter().map(|&root| unroll_alone(&structs.all, root, &mut seen, errors)).collect();
    // A block whose every use was refused (it comes after its user, or repeats a wrong count) is
    // still read once, alone, so that its own problems show in the same compile.
    let unread = |seen: &Seen| {
        (0..structs.all.len())
            .find(|&s| seen.refused[s] && !seen.unrolled[s] && structs.all[s].generics.params.is_empty())
    };
    while let Some(s) = unread(&seen) {
        unroll_alone(&structs.all, s, &mut seen, errors);
    }
    trees
}

/// Reports a layer field naming a built-in layer (`act: Relu`) where the module defines an enum,
/// union or type alias of that name (a struct of that name is a block): the field's type is then
/// the module's, not overlap's, which the plan assumed (once per field, however many copies of its
/// block).
pub fn shadowed_built_ins(module: &syn::ItemMod, trees: &[Model], errors: &mut Errors) {
    use syn::ext::IdentExt;
    let items = module.content.iter().flat_map(|(_, items)| items.iter());
    // An alias of the built-in itself (`type Relu = overlap::Relu;`) hides nothing; an item under
    // `#[cfg]` may not be there.
    let same_name = |t: &syn::ItemType| matches!(&*t.ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == t.ident));
    let unconditional = |attrs: &[syn::Attribute]| !attrs.iter().any(|a| a.path().is_ident("cfg"));
    let defined: Vec<&syn::Ident> = items
        .filter_map(|item| match item {
            syn::Item::Enum(e) if unconditional(&e.attrs) => Some(&e.ident),
            syn::Item::Union(u) if unconditional(&u.attrs) => Some(&u.ident),
            syn::Item::Type(t) if unconditional(&t.attrs) && !same_name(t) => Some(&t.ident),
            _ => None,
        })
        .collect();
    for field in trees.iter().flat_map(|tree| &tree.fields).filter(|f| !f.custom) {
        let Type::Path(path) = field.ty else { continue };
        let segments = &path.path.segments;
        if path.qself.is_some() || path.path.leading_colon.is_some() || segments.len() != 1 {
            continue;
        }
        let ident = &segments[0].ident;
        if crate::layers::is_builtin(ident) && defined.iter().any(|d| d.unraw() == ident.unraw()) {
            let message = format!(
                "`{ident}` here is this module's own `{ident}`, not overlap's built-in layer of that name, which the \
                 schedule was planned for: rename it, or describe it with `#[layer(...)]`"
            );
            errors.once(field.ty, Rule::Shadowed, field.ty, message);
        }
    }
}

/// Which structs were unrolled, and which had a use refused, by index into the module's.
#[derive(Default)]
struct Seen {
    unrolled: Vec<bool>,
    refused: Vec<bool>,
    /// Blocks unrolled once that gave no layers (reported then): whether by themselves (no layer
    /// field) rather than through empty blocks inside, and their `S { .. }`. A later use takes
    /// this instead of unrolling them again, which through fields of fields that repeat such a
    /// block would take exponential time.
    barren: Vec<Option<(bool, TokenStream)>>,
}

/// `all[root]` unrolled as a model, noting in `seen` the structs it reaches and refuses.
fn unroll_alone<'a>(all: &[&'a ItemStruct], root: usize, seen: &mut Seen, errors: &mut Errors) -> Model<'a> {
    let mut flat = Flat {
        structs: all,
        fields: Vec::new(),
        residuals: Vec::new(),
        too_many: false,
        empty_blocks: 0,
        refused_uses: 0,
        seen: std::mem::take(seen),
    };
    let init = flat.unroll(root, &Prefix::default(), errors);
    *seen = flat.seen;
    let complete = !flat.too_many && flat.refused_uses == 0 && flat.empty_blocks == 0;
    let deprecated = all.iter().any(|s| crate::ast::marks_deprecated(s));
    Model { item: all[root], fields: flat.fields, residuals: flat.residuals, init, complete, deprecated }
}

/// The model (the attributed struct, or the module's model) is no block, so `#[residual]` on it
/// is refused.
pub fn refuse_residual_model(model: &ItemStruct, errors: &mut Errors) {
    if let Some(r) = residual_attr(model, errors) {
        errors.spanned(r, "the model itself cannot be residual: mark a block `#[residual]` and use it in the model");
    }
}

/// The module's struct `all[s]` as it is emitted: without this macro's attributes. A field of the
/// struct's own type or of a struct defined after it (refused in `unroll`) becomes `()`, so that
/// the compiler adds no errors of its own about an infinitely large type.
pub fn stripped(all: &[&ItemStruct], s: usize) -> ItemStruct {
    let mut stripped = crate::emitted_struct::strip_field_attrs(all[s]);
    for field in stripped.fields.iter_mut() {
        match block_of(&field.ty, all, s) {
            Some((b, _)) if b >= s => field.ty = syn::parse_quote!(()),
            // `[Block; 2u8]` as `[Block; 2]`: the suffix is reported (in `unroll`), not also by the compiler.
            Some(_) => {
                if let Type::Array(a) = &mut field.ty {
                    if let Some(n) = suffixed_length(a) {
                        a.len = syn::parse_quote!(#n);
                    }
                }
            }
            None => {}
        }
    }
    stripped
}

/// The length of `[Block; 2u8]` without its suffix, when it has one other than `usize`.
fn suffixed_length(array: &syn::TypeArray) -> Option<syn::LitInt> {
    match &array.len {
        Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(n), .. }) if foreign_suffix(n) => {
            Some(syn::LitInt::new(n.base10_digits(), n.span()))
        }
        _ => None,
    }
}

/// `#[residual]` on a struct, if there (an argument is reported).
fn residual_attr<'s>(s: &'s ItemStruct, errors: &mut Errors) -> Option<&'s syn::Attribute> {
    let mut all = s.attrs.iter().filter(|a| a.path().is_ident("residual"));
    let attr = all.next()?;
    // At the arguments where there are some.
    let message = "`#[residual]` takes no arguments";
    match &attr.meta {
        Meta::Path(_) => {}
        Meta::List(list) if !list.tokens.is_empty() => errors.spanned(&list.tokens, message),
        Meta::NameValue(nv) => errors.spanned(&nv.value, message),
        Meta::List(_) => errors.spanned(attr, message),
    }
    for again in all {
        errors.spanned(again, "duplicate `#[residual]`");
    }
    Some(attr)
}

/// The layers of the model, as they are found.
struct Flat<'s, 'a> {
    structs: &'s [&'a ItemStruct],
    fields: Vec<Field<'a>>,
    residuals: Vec<Residual<'a>>,
    /// Unrolling passed `MAX_LAYERS` (reported once, at the model's field holding the block that did).
    too_many: bool,
    /// Uses of blocks that gave no layers (refused, with the block or at the use).
    empty_blocks: usize,
    /// Uses of blocks refused (reported) before unrolling them.
    refused_uses: usize,
    /// The structs unrolled so far and those with a use refused, over every tree.
    seen: Seen,
}

impl<'a> Flat<'_, 'a> {
    /// Appends struct `s`'s layers (blocks unrolled) at `prefix`; returns `S { .. }` with each
    /// layer initialised from its place in the flat list.
    fn unroll(&mut self, s: usize, prefix: &Prefix<'a>, errors: &mut Errors) -> TokenStream {
        self.seen.unrolled[s] = true;
        let item = self.structs[s];
        let ident = &item.ident;
        let mut inits = Vec::new();
        let params = generic_params(&item.generics);
        for field in item.fields.iter() {
            if self.too_many || self.fields.len() > MAX_LAYERS {
                break;
            }
            let Some(name) = &field.ident else { continue };
            let Some((b, repeat)) = block_of(&field.ty, self.structs, s) else {
                let i = self.fields.len();
                let layer = Field::new(field, prefix, &params, errors);
                let value = crate::init_attr::init_expr(
                    layer.ty,
                    i,
                    layer.init.as_deref(),
                    layer.std_applies(),
                    layer.spec.as_ref(),
                );
                inits.push(quote!(#name: #value));
                self.fields.push(layer);
                // Inside a block, the model's field holding it is reported (below).
                if prefix.uses.is_empty() {
                    self.too_many = past_max_layers(self.fields.len(), &field.ty, errors);
                }
                continue;
            };
            cfg::check_field(&field.attrs, errors);
            let attrs = field_attr::field_attrs(&field.attrs, errors);
            if attrs.layer.is_some() {
                errors
                    .spanned(&field.ty, "a block is not a layer: `#[layer(...)]` describes a layer type of one's own");
            }
            if let Some((_, attr)) = &attrs.tied {
                errors.spanned(attr, "a block cannot be tied: `#[tied(..)]` goes on a `TiedHead` field");
            }
            if b == s {
                errors.spanned(&field.ty, format!("`{ident}` contains itself: a block cannot be nested in itself"));
                self.refused_uses += 1;
                continue;
            }
            if b > s {
                errors.spanned(
                    &field.ty,
                    format!(
                        "block `{}` is used before it is defined: define each block above the structs that use it (so \
                         that blocks cannot nest in a cycle)",
                        self.structs[b].ident
                    ),
                );
                self.seen.refused[b] = true;
                self.refused_uses += 1;
                continue;
            }
            let copies = match repeat {
                None => None,
                Some(Some(n)) if (1..=MAX_REPEAT).contains(&n) => Some(n),
                Some(_) => {
                    let suffixed =
                        if let Type::Array(a) = &field.ty { suffixed_length(a).map(|n| (a, n)) } else { None };
                    match suffixed {
                        Some((a, n)) => errors.spanned(
                            &a.len,
                            format!("a repeat count is a `usize`: write `{n}`, not `{}`", a.len.to_token_stream()),
                        ),
                        None => errors.spanned(
                            &field.ty,
                            format!(
                                "repeat a block 1 to {MAX_REPEAT} times, with an integer literal: `[{}; 12]`",
                                self.structs[b].ident
                            ),
                        ),
                    }
                    self.seen.refused[b] = true;
                    self.refused_uses += 1;
                    continue;
                }
            };
            if !self.structs[b].generics.params.is_empty() {
                self.refused_uses += 1;
                continue; // Reported with the block.
            }
            let residual = residual_attr(self.structs[b], errors).is_some();
            let (before, errors_before, empty_before) = (self.fields.len(), errors.len(), self.empty_blocks);
            let mut one = |this: &mut Self, index: Option<usize>| {
                let mut inner = prefix.inner((name, &field.ty), index);
                inner.init = attrs.init.clone().or_else(|| prefix.init.clone());
                let (first, empty_inside) = (this.fields.len(), this.empty_blocks);
                let init = match this.seen.barren[b].clone() {
                    Some((by_itself, init)) => {
                        if !by_itself {
                            this.empty_blocks += 1; // Stands for the empty blocks inside, reported at theirs.
                        }
                        init
                    }
                    None => {
                        let init = this.unroll(b, &inner, errors);
                        // Past the limit, unrolling stops early: the layers are there, only not read.
                        if this.fields.len() == first && !this.too_many && first <= MAX_LAYERS {
                            this.seen.barren[b] = Some((this.empty_blocks == empty_inside, init.clone()));
                        }
                        init
                    }
                };
                if this.fields.len() > MAX_LAYERS && !this.too_many {
                    this.too_many = true;
                    // At the model's own field that holds it: where the depth is chosen.
                    let outermost = prefix.uses.first().map_or(&field.ty, |(_, ty)| *ty);
                    errors.spanned(
                        outermost,
                        format!(
                            "this unrolls the model past {MAX_LAYERS} layers: repeat fewer blocks, or smaller ones"
                        ),
                    );
                }
                if this.fields.len() == first {
                    // A block of unnamed fields is reported with the block; one empty for blocks
                    // empty inside it, at theirs.
                    if matches!(this.structs[b].fields, Fields::Named(_)) && this.empty_blocks == empty_inside {
                        errors.once(field, Rule::EmptyBlock, &field.ty, "a block needs at least one layer");
                    }
                    this.empty_blocks += 1;
                } else {
                    if let Some(attr) = &attrs.bucket_boundary {
                        if let Some(spec) = &mut this.fields[first].spec {
                            spec.bucket_boundary = true;
                        }
                        this.fields[first].block_boundaries.push((&field.ty, attr.clone()));
                    }
                    if residual {
                        let last = this.fields.len() - 1;
                        let ident = format_ident!("{}", inner.ident);
                        this.residuals.push(Residual { first, last, name: inner.name.clone(), ident, at: &field.ty });
                    }
                }
                init
            };
            let init = match copies {
                None => one(self, None),
                Some(n) => {
                    let mut each: Vec<TokenStream> = Vec::new();
                    for i in 0..n {
                        if self.too_many {
                            break;
                        }
                        each.push(one(self, Some(i)));
                        // Copies are alike: one that gives no layer (reported) stands for the
                        // rest, which would repeat the work, nested repeats multiplying it.
                        if self.fields.len() == before {
                            break;
                        }
                    }
                    quote!([#(#each),*])
                }
            };
            // Not judged when anything under the field was refused: its layers are not all there.
            let whole = errors.len() == errors_before && self.empty_blocks == empty_before && !self.too_many;
            if let (Some(own), true) = (&attrs.init, whole) {
                let under: Vec<_> = self.fields[before..].iter().map(Field::init_decision).collect();
                crate::init_attr::check_named(own, &prefix.name, &under, errors);
            }
            inits.push(quote!(#name: #init));
        }
        quote!(#ident { #(#inits,)* })
    }
}
