//! Collects every problem found in the input, each with the span of the offending tokens, so
//! users see all of them in one compile.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;

#[derive(Default)]
pub struct Errors(Vec<syn::Error>);

impl Errors {
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.0.push(syn::Error::new_spanned(tokens, message));
    }

    pub fn push(&mut self, error: syn::Error) {
        self.0.push(error);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_compile_errors(&self) -> TokenStream {
        self.0.iter().map(syn::Error::to_compile_error).collect()
    }
}
