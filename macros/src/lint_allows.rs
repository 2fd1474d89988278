//! The lints the generated code would raise again where the user's own code already did: names
//! made from a field's (`FC_out` for a field `FC`) or from the model's (`netWorkspace` for a
//! model `net`), and reads of a `#[deprecated]` field. Each is allowed only where the user wrote
//! such a name or attribute: an `allow` under the crate's `forbid` of the same lint is itself an
//! error, so a crate that forbids them, and writes none, builds.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::Model;

/// Which of the lints the generated items allow.
pub struct LintAllows {
    /// A field's or a parameter's name that is not snake case, in the model or a block.
    snake: bool,
    /// The model's name is not upper camel case (the generated types begin with it).
    camel: bool,
    /// A `#[deprecated]` field or struct, which the generated code reads.
    deprecated: bool,
}

impl LintAllows {
    pub fn of(model: &Model) -> Self {
        let not_snake = |ident: &syn::Ident| !is_snake_case(&syn::ext::IdentExt::unraw(ident).to_string());
        let name = syn::ext::IdentExt::unraw(&model.item.ident).to_string();
        // Gradient views are named `<field>_<parameter>` (`scale_W` for a layer's parameter `W`).
        let params = model.fields.iter().flat_map(|f| f.spec.iter().flat_map(|s| s.params.iter()));
        let param_not_snake = params.map(|p| &p.name).any(|name| !is_snake_case(name));
        // Only the model's own fields lend their span to the names made from them: a block's
        // layers are named by their path (`blocks_0_fc`) at the macro's call site, where the lint
        // does not speak.
        let own_not_snake = model.fields.iter().filter(|f| f.uses.is_empty()).any(|f| not_snake(&f.ident));
        LintAllows {
            snake: param_not_snake || own_not_snake,
            camel: name.starts_with(char::is_lowercase) || name.contains('_'),
            deprecated: model.deprecated,
        }
    }

    /// On the workspace: fields named after the model's, in a type named after it.
    pub fn workspace(&self) -> TokenStream {
        allow([("non_snake_case", self.snake), ("non_camel_case_types", self.camel)])
    }

    /// On the other generated types and aliases, named after the model.
    pub fn types(&self) -> TokenStream {
        allow([("non_camel_case_types", self.camel)])
    }

    /// On the generated impls: locals named after the model's fields, which read them.
    pub fn impls(&self) -> TokenStream {
        allow([("non_snake_case", self.snake), ("deprecated", self.deprecated)])
    }
}

/// The compiler's `non_snake_case` rule: no uppercase letter, and no two underscores in a row
/// between the leading and trailing ones (`fc__1` is not snake case, `_fc1_` is).
fn is_snake_case(name: &str) -> bool {
    let inner = name.trim_matches('_');
    !inner.chars().any(char::is_uppercase) && !inner.contains("__")
}

/// `#[allow(..)]` of the lints marked, or nothing.
fn allow<const N: usize>(lints: [(&str, bool); N]) -> TokenStream {
    let lints: Vec<syn::Ident> = lints
        .iter()
        .filter(|(_, needed)| *needed)
        .map(|(lint, _)| syn::Ident::new(lint, proc_macro2::Span::call_site()))
        .collect();
    if lints.is_empty() {
        return TokenStream::new();
    }
    quote!(#[allow(#(#lints),*)])
}
