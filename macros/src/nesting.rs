//! A model made of blocks. A proc macro sees only the tokens it is applied to, never another
//! struct's fields through its type, so a model with blocks is written as one module that holds
//! all its structs: `#[distributed_model] mod net { struct Block {..} struct Net {..} }`. The
//! struct that no other uses is the model; every other is a block, used as a field (`mlp: Mlp`)
//! or repeated (`blocks: [Block; 8]`), except a layer type of one's own (a field describes it
//! with `#[layer(..)]`, or no field uses it and the module implements `Layer` for it). Blocks
//! are unrolled here into one flat list of layers named by their path (`blocks.3.fc1`, as
//! PyTorch's state dict names them), so the planner, the checks and the code generator see one
//! chain of layers, and one bucket plan covers the model.
//! `#[residual]` on a block makes each of its uses `y = x + f(x)`.
//!
//! A block is defined above the structs that use it: nesting then has no cycles by
//! construction, and a use before the definition is reported as such.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, ToTokens};
use syn::ext::IdentExt;
use syn::{Expr, Fields, Item, ItemMod, ItemStruct, Meta, Type};

use crate::ast::{generic_params, Field, Model, Prefix, Residual};
use crate::cfg;
use crate::errors::Errors;
use crate::field_attr;
use crate::helpers::{foreign_suffix, mentions};

/// Copies of a block in one field (`[Block; N]`), at most: the code is unrolled per copy.
const MAX_REPEAT: usize = 1024;

/// Layers of one model, blocks unrolled, at most: arrays of arrays multiply (three nested
/// `[_; 1024]` would be a billion layers), and each layer is a few lines of generated code that
/// the compiler checks: 2048 layers take half a minute, 8192 several (a 96-block transformer
/// has about 600).
const MAX_LAYERS: usize = 2048;

/// The structs of `module`, in order, and those no other struct uses: the model alone, or none
/// or several candidates (already reported).
pub struct Structs<'a> {
    pub all: Vec<&'a ItemStruct>,
    roots: Vec<usize>,
}

impl Structs<'_> {
    /// The model: the one struct no other uses (`None` when that could not be told).
    pub fn model(&self) -> Option<usize> {
        match self.roots[..] {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// The module's structs, its model found: the one struct no other struct uses.
pub fn structs<'a>(module: &'a ItemMod, errors: &mut Errors) -> Structs<'a> {
    let Some((_, items)) = &module.content else {
        errors
            .spanned(module, "the model's structs must be written inside the module: `mod net { .. }`, not `mod net;`");
        return Structs { all: Vec::new(), roots: Vec::new() };
    };
    let layers = layer_types(items);
    let all: Vec<&ItemStruct> = module_structs(items).filter(|s| !layers.contains(&&s.ident)).collect();
    for s in &all {
        cfg::check_struct(&s.attrs, errors);
        crate::field_attr::misplaced_on_struct(&s.attrs, errors);
    }
    if all.is_empty() {
        errors.spanned(&module.ident, "this module holds no struct: put the model and its blocks in it");
        return Structs { all, roots: Vec::new() };
    }
    // A struct that uses itself is not made a block by that (`unroll` reports the use).
    let used: Vec<bool> = (0..all.len())
        .map(|b| {
            let users = all.iter().enumerate().filter(|&(s, _)| s != b);
            users.flat_map(|(s, item)| item.fields.iter().map(move |f| (s, f))).any(|(s, f)| uses(&all, s, f, b))
        })
        .collect();
    let roots: Vec<usize> = (0..all.len()).filter(|&s| !used[s]).collect();
    match roots.as_slice() {
        &[model] => unreached(&all, model, errors),
        [] => errors.spanned(&module.ident, "every struct in this module is used by another: one must be the model"),
        several => {
            let names: Vec<String> = several.iter().map(|&s| format!("`{}`", all[s].ident)).collect();
            for &s in &several[1..] {
                errors.spanned(
                    &all[s].ident,
                    format!(
                        "{} are each used by no other struct: a module holds one model, and every other struct is one \
                         of its blocks or a layer type it implements `Layer` for (move any other struct out of the \
                         module)",
                        names.join(", ")
                    ),
                );
            }
        }
    }
    Structs { all, roots }
}

/// The module's structs that are layer types of one's own, not blocks: each field that names
/// one describes it with `#[layer(..)]` (which a layer of one's own needs), and a field does so
/// or the module implements a `Layer` for it (written beside the blocks, used by none yet). A
/// struct some field uses without `#[layer]` stays a block, whatever it implements; so does one
/// that holds layers or blocks and has no `Layer` impl here (`#[layer]` on a block's field is
/// then reported as such by `unroll`).
fn layer_types(items: &[Item]) -> Vec<&syn::Ident> {
    let structs = || module_structs(items);
    let fields = || structs().flat_map(|s| s.fields.iter());
    let described = |f: &syn::Field| f.attrs.iter().any(|a| a.path().is_ident("layer"));
    let implemented: Vec<&syn::Ident> =
        items.iter().filter_map(|i| if let Item::Impl(i) = i { implemented_layer(i) } else { None }).collect();
    let names: Vec<&syn::Ident> = structs().map(|s| &s.ident).collect();
    let holds_layers = |s: &ItemStruct| {
        s.fields.iter().any(|f| {
            let builtin = matches!(&f.ty, Type::Path(p) if p.path.segments.last().is_some_and(|l| crate::layers::is_builtin(&l.ident)));
            builtin || described(f) || mentions(f.ty.to_token_stream(), &names)
        })
    };
    let layer = |s: &ItemStruct| {
        let id = &s.ident;
        let uses: Vec<&syn::Field> = fields().filter(|f| mentions(f.ty.to_token_stream(), &[id])).collect();
        let implemented = implemented.contains(&id);
        uses.iter().all(|f| described(f)) && (!uses.is_empty() || implemented) && (implemented || !holds_layers(s))
    };
    structs().filter(|s| layer(s)).map(|s| &s.ident).collect()
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
fn uses(all: &[&ItemStruct], s: usize, field: &syn::Field, b: usize) -> bool {
    block_of(&field.ty, all, s).is_some_and(|(u, _)| u == b)
        || (b < s && mentions(field.ty.to_token_stream(), &[&all[b].ident]))
}

/// One error for the structs the model `all[model]` never reaches, through blocks, though each is
/// used by another: they use each other in a cycle (no struct can be unused and not the model),
/// which unrolling the model never meets.
fn unreached(all: &[&ItemStruct], model: usize, errors: &mut Errors) {
    let mut reached = vec![false; all.len()];
    let mut next = vec![model];
    while let Some(s) = next.pop() {
        if std::mem::replace(&mut reached[s], true) {
            continue;
        }
        next.extend((0..all.len()).filter(|&b| b != s && all[s].fields.iter().any(|f| uses(all, s, f, b))));
    }
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

/// The model `structs.model()` with its blocks unrolled. Where the module holds several candidates
/// (reported), each is unrolled as if it were the model, so that the errors in them and their
/// blocks show in the same compile (the compiler shows an error repeated at one place once).
pub fn trees<'a>(structs: &Structs<'a>, errors: &mut Errors) -> Vec<Model<'a>> {
    if structs.roots.is_empty() {
        return Vec::new();
    }
    for s in &structs.all {
        if !s.generics.params.is_empty() || s.generics.where_clause.is_some() {
            errors.spanned(
                &s.generics,
                "a model or block cannot be generic: the schedule is planned for concrete layers",
            );
        }
        if !matches!(s.fields, Fields::Named(_)) {
            errors.spanned(&s.ident, "a model or block needs named fields, one per layer or block");
        }
    }
    if let Some(root) = structs.model() {
        if let Some(r) = residual_attr(structs.all[root], errors) {
            errors
                .spanned(r, "the model itself cannot be residual: mark a block `#[residual]` and use it in the model");
        }
    }
    let tree = |root: usize, errors: &mut Errors| {
        let mut flat =
            Flat { structs: &structs.all, fields: Vec::new(), residuals: Vec::new(), too_many: false, empty_blocks: 0 };
        let init = flat.unroll(root, &Prefix::default(), errors);
        Model { item: structs.all[root], fields: flat.fields, residuals: flat.residuals, init }
    };
    structs.roots.iter().map(|&root| tree(root, errors)).collect()
}

/// The module's struct `all[s]` as it is emitted: without this macro's attributes. A field of the
/// struct's own type or of a struct defined after it (refused in `unroll`) becomes `()`, so that
/// the compiler adds no errors of its own about an infinitely large type.
pub fn stripped(all: &[&ItemStruct], s: usize) -> ItemStruct {
    let mut stripped = crate::emitted_struct::strip_field_attrs(all[s]);
    // `#[residual]`, and through `cfg_attr` (refused), which the compiler would not know.
    stripped.attrs.retain(|a| !a.path().is_ident("residual") && !cfg::applies(a, "residual"));
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

/// Whether `ty`, in a field of `all[within]`, is a block of `all` (`Block`; `Self` is
/// `all[within]`), or `N` of them (`[Block; N]`, the length `None` when it is not a literal of
/// type `usize`, reported by `unroll`).
fn block_of(ty: &Type, all: &[&ItemStruct], within: usize) -> Option<(usize, Option<Option<usize>>)> {
    let named = |ty: &Type| match ty {
        // One segment, generic arguments or not (a generic block is refused with the block).
        Type::Path(p) if p.qself.is_none() && p.path.leading_colon.is_none() && p.path.segments.len() == 1 => {
            let ident = &p.path.segments[0].ident;
            if ident == "Self" {
                return Some(within);
            }
            all.iter().position(|s| s.ident.unraw() == ident.unraw())
        }
        _ => None,
    };
    match ty {
        Type::Array(a) => {
            let len = match &a.len {
                // `base10_parse` ignores the suffix: `2u8` would be unrolled, and the compiler refuse it.
                Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(n), .. }) if !foreign_suffix(n) => {
                    n.base10_parse::<usize>().ok()
                }
                _ => None,
            };
            named(&a.elem).map(|b| (b, Some(len)))
        }
        other => named(other).map(|b| (b, None)),
    }
}

/// `#[residual]` on a struct, if there (an argument is reported).
fn residual_attr<'s>(s: &'s ItemStruct, errors: &mut Errors) -> Option<&'s syn::Attribute> {
    let mut all = s.attrs.iter().filter(|a| a.path().is_ident("residual"));
    let attr = all.next()?;
    if !matches!(attr.meta, Meta::Path(_)) {
        errors.spanned(attr, "`#[residual]` takes no arguments");
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
    residuals: Vec<Residual>,
    /// Unrolling passed `MAX_LAYERS` (reported once, at the innermost repeat that did).
    too_many: bool,
    /// Uses of blocks that gave no layers (refused, with the block or at the use).
    empty_blocks: usize,
}

impl<'a> Flat<'_, 'a> {
    /// Appends struct `s`'s layers (blocks unrolled) at `prefix`; returns `S { .. }` with each
    /// layer initialised from its place in the flat list.
    fn unroll(&mut self, s: usize, prefix: &Prefix, errors: &mut Errors) -> TokenStream {
        let item = self.structs[s];
        let ident = &item.ident;
        let mut inits = Vec::new();
        let params = generic_params(&item.generics);
        for field in item.fields.iter() {
            if self.too_many {
                break;
            }
            let Some(name) = &field.ident else { continue };
            let Some((b, repeat)) = block_of(&field.ty, self.structs, s) else {
                let i = self.fields.len();
                let layer = Field::new(field, prefix, &params, errors);
                let value = crate::init_attr::init_expr(layer.ty, i, layer.init.as_deref(), layer.spec.as_ref());
                inits.push(quote!(#name: #value));
                self.fields.push(layer);
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
                    continue;
                }
            };
            if !self.structs[b].generics.params.is_empty() {
                continue; // Reported with the block.
            }
            let residual = residual_attr(self.structs[b], errors).is_some();
            let (before, errors_before, empty_before) = (self.fields.len(), errors.len(), self.empty_blocks);
            let mut one = |this: &mut Self, index: Option<usize>| {
                let mut inner = prefix.inner(name, index);
                inner.init = attrs.init.clone().or_else(|| prefix.init.clone());
                let first = this.fields.len();
                let init = this.unroll(b, &inner, errors);
                if this.fields.len() > MAX_LAYERS && !this.too_many {
                    this.too_many = true;
                    errors.spanned(
                        &field.ty,
                        format!(
                            "this unrolls the model past {MAX_LAYERS} layers: repeat fewer blocks, or smaller ones"
                        ),
                    );
                }
                if this.fields.len() == first {
                    this.empty_blocks += 1;
                    // A block of unnamed fields is reported with the block.
                    if matches!(this.structs[b].fields, Fields::Named(_)) {
                        errors.spanned(&field.ty, "a block needs at least one layer");
                    }
                } else {
                    if attrs.bucket_boundary {
                        if let Some(spec) = &mut this.fields[first].spec {
                            spec.bucket_boundary = true;
                        }
                    }
                    if residual {
                        let last = this.fields.len() - 1;
                        let (ident, at) = (format_ident!("{}", inner.ident), field.ty.to_token_stream());
                        this.residuals.push(Residual { first, last, name: inner.name.clone(), ident, at });
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
                    }
                    quote!([#(#each),*])
                }
            };
            // Not judged when anything under the field was refused: its layers are not all there.
            let whole = errors.len() == errors_before && self.empty_blocks == empty_before && !self.too_many;
            if let (Some(own), true) = (&attrs.init, whole) {
                let under: Vec<_> = self.fields[before..].iter().map(|f| (f.init.as_ref(), f.spec.as_ref())).collect();
                crate::init_attr::check_named(own, &prefix.name, &under, errors);
            }
            inits.push(quote!(#name: #init));
        }
        quote!(#ident { #(#inits,)* })
    }
}
