//! Collects every problem found in the input, each with the span of the offending tokens, so
//! users see all of them in one compile.

use std::any::TypeId;
use std::collections::HashSet;
use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;

/// What a problem `Errors::once` reports is about: one error per node and rule.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Rule {
    /// A `TiedHead` and the embedding it reads.
    Tie,
    /// The width flowing into a layer.
    Width,
    /// A tensor's element count.
    Size,
    /// A residual block's input and output widths.
    ResidualWidth,
    /// A block that gives no layers.
    EmptyBlock,
    /// Two layers, or two residual sums, whose generated names are one.
    NameClash,
    /// A built-in layer's name that names a type of the module's own.
    Shadowed,
}

#[derive(Default)]
pub struct Errors {
    errors: Vec<syn::Error>,
    /// The input nodes `once` has reported at, by address and type (a struct and its first
    /// field may share an address), the rule each broke, and for `once_per_use` the block fields
    /// it was reached through (their types' addresses).
    reported: HashSet<(usize, TypeId, Rule, Vec<usize>)>,
}

impl Errors {
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    /// `spanned`, unless an error was already reported for `node`, a node of the input, under
    /// `rule`: the copies of a repeated block share their tokens, and one problem in them is one
    /// error (for the first copy), not one per copy; a second problem of the same layer is
    /// another rule, and reported too.
    pub fn once<T: 'static>(&mut self, node: &T, rule: Rule, tokens: impl ToTokens, message: impl Display) {
        if self.reported.insert((std::ptr::from_ref(node) as usize, TypeId::of::<T>(), rule, Vec::new())) {
            self.spanned(tokens, message);
        }
    }

    /// `once` per use of the block `node` is in, for a problem that depends on what surrounds the
    /// use (the width flowing into it): `uses` are the block fields it is reached through,
    /// outermost first. The copies of a repeated block share those fields and report once; two
    /// fields of one block type each report their own.
    pub fn once_per_use<T: 'static>(
        &mut self,
        (node, uses): (&T, &[(String, &syn::Type)]),
        rule: Rule,
        tokens: impl ToTokens,
        message: impl Display,
    ) {
        let path = uses.iter().map(|(_, ty)| std::ptr::from_ref(*ty) as usize).collect();
        if self.reported.insert((std::ptr::from_ref(node) as usize, TypeId::of::<T>(), rule, path)) {
            self.spanned(tokens, message);
        }
    }

    pub fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn to_compile_errors(&self) -> TokenStream {
        self.errors.iter().map(syn::Error::to_compile_error).collect()
    }
}
