//! Every name the generated code binds (an argument, a `let`, a destructured field, a match
//! binding) starts with `__`: a crate's lowercase `const` or `static` of the same name would
//! otherwise turn the binding into a pattern, or an error (`tests/user_consts.rs` compiles
//! beside such constants).

use quote::quote;
use syn::visit::Visit;

use super::expand;

/// The names the patterns of `code` bind, `self` aside.
fn bound_names(code: proc_macro2::TokenStream) -> Vec<String> {
    struct Bindings(Vec<String>);
    impl<'ast> Visit<'ast> for Bindings {
        fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
            if pat.ident != "self" {
                self.0.push(pat.ident.to_string());
            }
            syn::visit::visit_pat_ident(self, pat);
        }
    }
    let file: syn::File = syn::parse2(code).expect("the expansion parses as a file");
    let mut found = Bindings(Vec::new());
    found.visit_file(&file);
    found.0
}

fn assert_all_prefixed(what: &str, attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) {
    let names = bound_names(expand(attr, item));
    // Arguments, bucket locals, gradient views, in-flight handles: far more than a handful.
    assert!(names.len() > 20, "{what}: only {names:?} bound");
    let bare: Vec<&String> = names.iter().filter(|n| !n.starts_with("__")).collect();
    assert!(bare.is_empty(), "{what} binds {bare:?} without the `__` of generated names");
}

#[test]
fn a_chain_with_a_layer_of_ones_own_compressed_or_sharded_binds_only_prefixed_names() {
    let chain = quote! {
        struct Mlp {
            fc1: Linear<8, 16>,
            act: Relu,
            #[layer(input = 16, output = 16, params(gain = [16]))]
            gain: Gain<16>,
            fc2: Linear<16, 4>,
        }
    };
    assert_all_prefixed("a chain", quote!(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001), chain.clone());
    let powersgd = quote!(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001, grad_comm = powersgd(rank = 2));
    assert_all_prefixed("a compressed chain", powersgd, chain.clone());
    assert_all_prefixed("a sharded chain", quote!(shard_optimizer, bucket_cap_mb = 0.0001), chain);
}

#[test]
fn a_language_model_of_blocks_binds_only_prefixed_names() {
    let lm = quote! {
        mod lm {
            use overlap::prelude::*;

            #[residual]
            pub struct Attend {
                ln: LayerNorm<8>,
                attn: CausalSelfAttention<8, 2>,
            }

            pub struct Lm {
                #[init(std = 0.02)]
                wte: Embedding<11, 8>,
                wpe: PositionEmbedding<4, 8>,
                #[init(std = 0.02, ends_with("c_proj.weight", std = 0.01))]
                h: [Attend; 2],
                ln_f: LayerNorm<8>,
                #[tied(wte)]
                lm_head: TiedHead<8, 11>,
            }
        }
    };
    assert_all_prefixed("a language model", quote!(bucket_cap_mb = 0.001, first_bucket_mb = 0.001), lm);
}
