//! The model as the macro sees it. Fields borrow the user's tokens, so every later error and
//! every generated line can point back at what the user wrote.

use std::rc::Rc;

use overlap_plan::LayerSpec;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::{Fields, Ident, ItemStruct, Type};

use crate::cfg;
use crate::errors::Errors;
use crate::field_attr;
use crate::init_attr::{self, InitAttr};
use crate::layers;

pub struct Model<'a> {
    /// The model's struct (in a module of blocks, the one no other struct uses).
    pub item: &'a ItemStruct,
    /// Every layer in forward order, blocks unrolled (see `nesting`).
    pub fields: Vec<Field<'a>>,
    /// Residual blocks, each `y = x + f(x)` over a run of `fields`.
    pub residuals: Vec<Residual<'a>>,
    /// `Self { .. }` with every layer initialised, nested as the structs are.
    pub init: TokenStream,
    /// Whether `fields` holds every layer the model is written with: not where a field or a
    /// block's use was refused (reported) or the layer limit stopped the reading.
    pub complete: bool,
    /// Whether a struct it is made of, or a field of one, is `#[deprecated]` (see `lint_allows`).
    pub deprecated: bool,
}

/// A residual block's instance: layers `first..=last` compute `f`, and the block outputs
/// `f(x) + x` where `x` is `first`'s input.
pub struct Residual<'a> {
    pub first: usize,
    pub last: usize,
    /// Its path from the model (`blocks.3`), for errors.
    pub name: String,
    /// For its workspace entry (`blocks_3_sum`).
    pub ident: Ident,
    /// The use of the block, for errors (its field's type, shared by the copies of a repeated
    /// block around it).
    pub at: &'a Type,
}

/// Where a struct's fields sit from the model: nothing for the model's own, `blocks.3` for the
/// fourth element of a field `blocks: [Block; N]`.
#[derive(Clone, Default)]
pub struct Prefix<'a> {
    /// In the schedule and checkpoints (PyTorch's state-dict path): `blocks.3`.
    pub name: String,
    /// In code, after `self.`: `blocks[3]`.
    pub access: TokenStream,
    /// In generated identifiers: `blocks_3`.
    pub ident: String,
    /// The innermost `#[init(..)]` of the block fields around these fields, if any.
    pub init: Option<Rc<InitAttr>>,
    /// The block fields these fields are in, outermost first: each one's part of `name`
    /// (`blocks.3`) and its type, where an error about the level it is written at points.
    pub uses: Vec<(String, &'a Type)>,
}

impl<'a> Prefix<'a> {
    /// The prefix of the fields of `inner`, a struct at `field` of type `ty` (element `index`
    /// when an array).
    pub fn inner(&self, (field, ty): (&Ident, &'a Type), index: Option<usize>) -> Prefix<'a> {
        let plain = field.unraw().to_string();
        let (mut name, mut ident) = (self.joined(&self.name, '.', &plain), self.joined(&self.ident, '_', &plain));
        let access = &self.access;
        let mut access = if access.is_empty() { quote!(#field) } else { quote!(#access.#field) };
        let mut part = plain;
        if let Some(i) = index {
            let lit = crate::helpers::lit(i);
            (name, ident, part) = (format!("{name}.{i}"), format!("{ident}_{i}"), format!("{part}.{i}"));
            access = quote!(#access[#lit]);
        }
        let mut uses = self.uses.clone();
        uses.push((part, ty));
        Prefix { name, access, ident, init: self.init.clone(), uses }
    }

    fn joined(&self, prefix: &str, separator: char, last: &str) -> String {
        if prefix.is_empty() {
            last.to_string()
        } else {
            format!("{prefix}{separator}{last}")
        }
    }
}

pub struct Field<'a> {
    /// The layer in code, after `self.`: `fc1`, or `blocks[3].fc1` in a block.
    pub access: TokenStream,
    /// For generated identifiers (`fc1_out`, `blocks_3_fc1_out`).
    pub ident: Ident,
    /// As messages name it: `fc1`, `blocks.3.fc1`.
    pub name: String,
    pub ty: &'a Type,
    /// `None` when the field's type or attribute was invalid (already reported).
    pub spec: Option<LayerSpec>,
    /// Described by `#[layer(...)]`: nothing but the compiler knows whether the type is a layer.
    pub custom: bool,
    /// `#[tied(field)]`: the sibling whose weight this layer reads (see `tied`).
    pub tied: Option<(Ident, syn::Attribute)>,
    /// The innermost `#[init(..)]`: on the field, or on a block around it.
    pub init: Option<Rc<InitAttr>>,
    /// Whether that `#[init]` is a block's, around the field: its `std` then leaves a layer of
    /// one's own to its `Layer::init` (see `std_applies`).
    pub init_inherited: bool,
    /// The block fields it is in, outermost first (`Prefix::uses`).
    pub uses: Vec<(String, &'a Type)>,
    /// Its own `#[bucket_boundary]` (one on a block field is on the block's first layer's spec).
    pub boundary: Option<syn::Attribute>,
    /// On a block's first layer: the `#[bucket_boundary]` of each block field it begins, with
    /// that field's type (shared by the copies of a repeated block, which tells them apart from
    /// other uses), innermost first.
    pub block_boundaries: Vec<(&'a Type, syn::Attribute)>,
}

impl<'a> Model<'a> {
    /// Reads the struct; reports structural problems and per-field problems to `errors`.
    pub fn from_struct(item: &'a ItemStruct, errors: &mut Errors) -> Self {
        let message =
            "#[distributed_model] structs cannot be generic: the schedule is planned for concrete layer sizes";
        if !item.generics.params.is_empty() {
            errors.spanned(&item.generics, message);
        } else if let Some(clause) = item.generics.where_clause.as_ref().filter(|c| !c.predicates.is_empty()) {
            errors.spanned(clause, message);
        }
        crate::field_attr::misplaced_on_struct(&item.attrs, &item.ident, errors);
        refuse_packed(&item.attrs, errors);
        let params = generic_params(&item.generics);
        let mut complete = true;
        let fields: Vec<Field> = match &item.fields {
            Fields::Named(named) => {
                let mut fields = Vec::new();
                for f in &named.named {
                    if crate::helpers::names_itself(&f.ty, &item.ident) {
                        let message = format!("`{}` contains itself: a model cannot be a field of itself", item.ident);
                        errors.spanned(&f.ty, message);
                        complete = false;
                    } else {
                        fields.push(Field::new(f, &Prefix::default(), &params, errors));
                        if crate::layer_limit::past_max_layers(fields.len(), &f.ty, errors) {
                            complete = false;
                            break;
                        }
                    }
                }
                fields
            }
            Fields::Unnamed(_) | Fields::Unit => {
                errors.spanned(&item.ident, "#[distributed_model] needs a struct with named fields, one per layer");
                Vec::new()
            }
        };
        let ident = &item.ident;
        let inits = fields.iter().enumerate().map(|(i, f)| {
            let (field, value) =
                (&f.ident, init_attr::init_expr(f.ty, i, f.init.as_deref(), f.std_applies(), f.spec.as_ref()));
            quote!(#field: #value,)
        });
        let init = quote!(#ident { #(#inits)* });
        let deprecated = marks_deprecated(item);
        Model { item, fields, residuals: Vec::new(), init, complete, deprecated }
    }

    /// Specs of every field, in definition order (only meaningful once all fields are valid).
    pub fn specs(&self) -> Vec<LayerSpec> {
        self.fields.iter().filter_map(|f| f.spec.clone()).collect()
    }
}

/// The type and const parameters of a struct's `generics`. A field whose type uses one (`act: L`,
/// `fc: Linear<N, 2>`) is covered by the error on the generics, which a struct of layers cannot
/// have: the field is not read as a layer, so that its width is not a second error.
pub fn generic_params(generics: &syn::Generics) -> Vec<&Ident> {
    generics.type_params().map(|p| &p.ident).chain(generics.const_params().map(|p| &p.ident)).collect()
}

impl<'a> Field<'a> {
    /// The layer in `field`, whose struct sits at `prefix` from the model and has the generic
    /// parameters `params` (refused; see `generic_params`).
    pub fn new(field: &'a syn::Field, prefix: &Prefix<'a>, params: &[&Ident], errors: &mut Errors) -> Self {
        let ident = field.ident.as_ref().expect("named fields have identifiers");
        // Names in the schedule (and so in checkpoints) are PyTorch's: `type.weight`, not `r#type.weight`.
        let own = prefix.inner((ident, &field.ty), None);
        let name = own.name.clone();
        let conditional_attr = cfg::check_field(&field.attrs, errors);
        let attrs = field_attr::field_attrs(&field.attrs, errors);
        let generic = crate::helpers::mentions(quote::ToTokens::to_token_stream(&field.ty), params);
        let spec = match &attrs.layer {
            // An array is no layer, whatever its elements are: the compiler would point into the library.
            Some(_) if matches!(field.ty, syn::Type::Array(_)) => {
                errors.spanned(&field.ty, layers::not_a_layer(&field.ty));
                None
            }
            Some(custom) => Some(layers::custom(&name, &field.ty, custom)),
            None if attrs.layer_invalid || attrs.tied_invalid || generic || conditional_attr => None,
            None => match layers::builtin(&name, &field.ty, errors) {
                Ok(Some(spec)) => Some(spec),
                Ok(None) => {
                    errors.spanned(&field.ty, layers::not_a_layer(&field.ty));
                    None
                }
                Err(()) => None,
            },
        };
        let spec = spec.map(|s| if attrs.bucket_boundary.is_some() { s.with_bucket_boundary() } else { s });
        // The model's own fields keep their identifiers (raw ones included) in generated names.
        let (shown, generated) = if prefix.name.is_empty() {
            (ident.to_string(), ident.clone())
        } else {
            (own.name.clone(), format_ident!("{}", own.ident))
        };
        let (custom, init) = (attrs.layer.is_some(), attrs.init.clone().or_else(|| prefix.init.clone()));
        let init_inherited = attrs.init.is_none() && init.is_some();
        let layer = Field {
            access: own.access,
            ident: generated,
            name: shown,
            ty: &field.ty,
            spec,
            custom,
            tied: attrs.tied,
            uses: prefix.uses.clone(),
            boundary: attrs.bucket_boundary,
            block_boundaries: Vec::new(),
            init,
            init_inherited,
        };
        if let Some(own) = &attrs.init {
            init_attr::check_named(own, &prefix.name, &[layer.init_decision()], errors);
        }
        layer
    }

    /// Whether the `std` of its `#[init]` redraws this layer's matrices and zeroes its biases: on
    /// overlap's layers, and on a layer of one's own when the `#[init]` is on its own field. A
    /// block's `std` leaves a layer of one's own to its `Layer::init` (as nanoGPT's
    /// `_init_weights` touches only `nn.Linear` and `nn.Embedding`); `ends_with` still names its
    /// parameters.
    pub fn std_applies(&self) -> bool {
        !(self.custom && self.init_inherited)
    }

    /// What `init_attr::check_named` judges of this layer.
    pub fn init_decision(&self) -> init_attr::Decision<'_> {
        init_attr::Decision { init: self.init.as_ref(), spec: self.spec.as_ref(), std_applies: self.std_applies() }
    }
}

/// Reports `#[repr(packed)]` on a model or a block, once: the generated code borrows each layer
/// where it lies (`&self.fc`), which a packed struct's fields do not allow, and the compiler would
/// say so at every borrow.
pub fn refuse_packed(attrs: &[syn::Attribute], errors: &mut Errors) {
    let packed = |attr: &&syn::Attribute| match &attr.meta {
        syn::Meta::List(list) if list.path.is_ident("repr") => {
            list.tokens.clone().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "packed"))
        }
        _ => false,
    };
    if let Some(attr) = attrs.iter().find(packed) {
        errors.spanned(
            attr,
            "a model or block cannot be `#[repr(packed)]`: the generated code borrows each layer where it lies, \
             which the fields of a packed struct do not allow",
        );
    }
}

/// Whether `item` or one of its fields is `#[deprecated]`, also through `cfg_attr`.
pub fn marks_deprecated(item: &ItemStruct) -> bool {
    let deprecated = |attr: &syn::Attribute| match &attr.meta {
        syn::Meta::List(list) if list.path.is_ident("cfg_attr") => {
            list.tokens.clone().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "deprecated"))
        }
        meta => meta.path().is_ident("deprecated"),
    };
    item.attrs.iter().chain(item.fields.iter().flat_map(|f| &f.attrs)).any(deprecated)
}
