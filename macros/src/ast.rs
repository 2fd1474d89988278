//! The model as the macro sees it. Fields borrow the user's tokens, so every later error and
//! every generated line can point back at what the user wrote.

use overlap_plan::LayerSpec;
use syn::ext::IdentExt;
use syn::{Fields, Ident, ItemStruct, Type};

use crate::attr;
use crate::cfg;
use crate::errors::Errors;
use crate::layers;

pub struct Model<'a> {
    pub item: &'a ItemStruct,
    pub fields: Vec<Field<'a>>,
}

pub struct Field<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    /// `None` when the field's type or attribute was invalid (already reported).
    pub spec: Option<LayerSpec>,
    /// Described by `#[layer(...)]`: nothing but the compiler knows whether the type is a layer.
    pub custom: bool,
}

impl<'a> Model<'a> {
    /// Reads the struct; reports structural problems and per-field problems to `errors`.
    pub fn from_struct(item: &'a ItemStruct, errors: &mut Errors) -> Self {
        let message =
            "#[distributed_model] structs cannot be generic: the schedule is planned for concrete layer sizes";
        if !item.generics.params.is_empty() {
            errors.spanned(&item.generics, message);
        } else if let Some(clause) = &item.generics.where_clause {
            errors.spanned(clause, message);
        }
        // Fields typed by a type parameter are covered by the error above.
        let type_params: Vec<&Ident> = item.generics.type_params().map(|p| &p.ident).collect();
        let fields = match &item.fields {
            Fields::Named(named) => named.named.iter().map(|f| Field::new(f, &type_params, errors)).collect(),
            Fields::Unnamed(_) | Fields::Unit => {
                errors.spanned(&item.ident, "#[distributed_model] needs a struct with named fields, one per layer");
                Vec::new()
            }
        };
        Model { item, fields }
    }

    /// Specs of every field, in definition order (only meaningful once all fields are valid).
    pub fn specs(&self) -> Vec<LayerSpec> {
        self.fields.iter().filter_map(|f| f.spec.clone()).collect()
    }
}

impl<'a> Field<'a> {
    fn new(field: &'a syn::Field, type_params: &[&Ident], errors: &mut Errors) -> Self {
        let ident = field.ident.as_ref().expect("named fields have identifiers");
        // Names in the schedule (and so in checkpoints) are PyTorch's: `type.weight`, not `r#type.weight`.
        let name = ident.unraw().to_string();
        cfg::check_field(&field.attrs, errors);
        let attrs = attr::field_attrs(&field.attrs, errors);
        let is_type_param =
            matches!(&field.ty, Type::Path(p) if p.qself.is_none() && type_params.iter().any(|t| p.path.is_ident(*t)));
        let spec = match &attrs.layer {
            Some(custom) => Some(layers::custom(&name, &field.ty, custom)),
            None if attrs.layer_invalid || is_type_param => None,
            None => match layers::builtin(&name, &field.ty, errors) {
                Ok(Some(spec)) => Some(spec),
                Ok(None) => {
                    errors.spanned(
                        &field.ty,
                        format!(
                            "`{}` is not a built-in layer (Linear, LayerNorm, Relu, Gelu, Tanh, Sigmoid); describe it with \
                             `#[layer(input = N, output = M, params(weight = [M, N], ...))]` (no input/output for width-preserving layers)",
                            layers::type_text(&field.ty)
                        ),
                    );
                    None
                }
                Err(()) => None,
            },
        };
        let spec = spec.map(|s| if attrs.bucket_boundary { s.with_bucket_boundary() } else { s });
        Field { ident, ty: &field.ty, spec, custom: attrs.layer.is_some() }
    }
}
