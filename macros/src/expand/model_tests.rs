//! Expansion snapshots and orders of the models beyond the MLP: raw field names, layers of
//! one's own, conditional fields, PowerSGD buckets, a renamed crate, residual blocks, the user's
//! documentation and tied heads.

use quote::quote;

use super::expand;
use super::tests::{flat, function, mlp, mlp_with, pretty};

/// Raw identifiers: the generated code addresses `self.r#type`, the schedule (and so every saved
/// name) says `type`, as PyTorch would.
#[test]
fn raw_field_names_are_unraw_in_the_schedule_and_raw_in_the_code() {
    let code = pretty(expand(
        quote!(),
        quote!(
            struct M {
                r#type: Linear<4, 2>,
            }
        ),
    ));
    assert!(!code.contains("compile_error"), "{code}");
    assert!(code.contains("self.r#type") && !code.contains("self.type"), "{code}");
    assert!(code.contains("/// Bucket 0: type.bias, type.weight"), "{code}");
    assert!(code.contains("Cow::Borrowed(\"type\")"), "{code}");
    assert!(!code.contains("r#type.weight") && !code.contains("\"r#type\""), "{code}");
}

/// Types only `#[layer(...)]` vouches for guard the items that use them as layers, so that a type
/// that is not one is reported once (by its layout assertion), not at every use.
#[test]
fn custom_layer_types_guard_the_items_that_use_them() {
    let code = pretty(expand(
        quote!(),
        quote!(
            struct M {
                fc: Linear<4, 4>,
                #[layer(params(gain = [4]))]
                gain: Gain,
            }
        ),
    ));
    assert!(!code.contains("compile_error"), "{code}");
    assert_eq!(
        code.matches("for<'layer> Gain: ::overlap::Layer").count(),
        5,
        "workspace, its Default and three impls: {code}"
    );
    assert!(!code.contains("Linear<4, 4>: ::overlap::Layer"), "built-in layers need no guard: {code}");
    assert!(!mlp().contains("for<'layer>"), "nor does a model of built-in layers");
}

/// One error per conditional field or conditional attribute of ours, and the attribute removed
/// from the struct that is emitted so that the compiler adds none.
#[test]
fn conditional_fields_and_attributes_are_refused_once_each() {
    let code = expand(
        quote!(),
        quote!(
            struct M {
                #[cfg(test)]
                probe: Linear<4, 4>,
                #[cfg_attr(all(), bucket_boundary)]
                #[cfg_attr(feature = "x", doc = "kept")]
                fc: Linear<4, 2>,
            }
        ),
    )
    .to_string();
    assert_eq!(code.matches("compile_error").count(), 2, "{code}");
    assert!(code.contains("a #[distributed_model] field cannot be conditional"), "{code}");
    assert!(code.contains("cannot be applied through `cfg_attr`"), "{code}");
    assert!(!code.contains("cfg_attr (all () , bucket_boundary)"), "{code}");
    assert!(code.contains("cfg_attr (feature = \"x\" , doc = \"kept\")"), "{code}");
}

#[test]
fn mlp_powersgd_expansion_snapshot() {
    let code = mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 4)));
    expect_test::expect_file!["../../tests/expand/mlp_powersgd.expanded.rs"].assert_eq(&code);
}

#[test]
fn each_low_rank_bucket_turns_around_after_the_next_layer_with_parameters_and_the_last_after_backward() {
    let code = mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 4)));
    let backward = flat(function(&code, "backward_on<"));
    let at = |needle: &str| backward.find(needle).unwrap_or_else(|| panic!("{needle} in\n{backward}"));
    let order = [
        "__dev.backward(4, &self.fc3,",
        "let mut __b0_in_flight = ::overlap::program::Slot::new(__dev.launch_low_rank(0, ::overlap::program::Slot::take(&mut __b0),",
        "__dev.backward(2, &self.fc2,",
        "let __b0_in_flight = __dev.reduce_q(::overlap::program::Slot::take(&mut __b0_in_flight))?;",
        "let mut __b1_in_flight = ::overlap::program::Slot::new(__dev.launch_low_rank(1, ::overlap::program::Slot::take(&mut __b1),",
        "__dev.backward(0, &self.fc1,",
        "let __b1_in_flight = __dev.reduce_q(::overlap::program::Slot::take(&mut __b1_in_flight))?;",
        "let mut __b2_in_flight = ::overlap::program::Slot::new(__dev.launch_low_rank(2, ::overlap::program::Slot::take(&mut __b2),",
        "__dev.backward_done()?;",
        "let __b2_in_flight = __dev.reduce_q(::overlap::program::Slot::take(&mut __b2_in_flight))?;",
    ];
    let positions: Vec<usize> = order.iter().map(|n| at(n)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{order:#?} out of order in\n{backward}");
    assert!(code.contains("b0: __S::LowRankQ,"), "step waits for the Q all-reduces");
    let wait = "let mut __b0 = __dev.wait_low_rank(0, ::overlap::program::Slot::take(&mut __b0_in_flight))?;";
    assert!(flat(&code).contains(wait), "{code}");
}

#[test]
fn a_renamed_crate_reaches_every_generated_path() {
    let model = quote!(
        pub struct Mlp {
            fc1: Linear<784, 2048>,
            act1: Relu,
            head: Linear<2048, 10>,
        }
    );
    let default = expand(quote!(bucket_cap_mb = 8), model.clone()).to_string();
    let renamed = expand(quote!(bucket_cap_mb = 8, crate = "::my_overlap"), model).to_string();
    assert!(!renamed.contains(":: overlap ::"), "{renamed}");
    assert_eq!(renamed.matches(":: my_overlap ::").count(), default.matches(":: overlap ::").count());
    assert_eq!(renamed.replace(":: my_overlap ::", ":: overlap ::"), default, "nothing but the paths changes");
    // A path form, and a rejected model's stub code, too.
    let stub = pretty(expand(
        quote!(crate = my::reexport, bucket_cap_mb = 0),
        quote!(
            pub struct M {
                fc: Linear<2, 2>,
            }
        ),
    ));
    assert!(stub.contains("my::reexport::") && !stub.contains("::overlap::"), "{stub}");
    let bad = pretty(expand(
        quote!(crate = 3),
        quote!(
            pub struct M {
                fc: Linear<2, 2>,
            }
        ),
    ));
    assert!(bad.contains("`crate` must be a path"), "{bad}");
}

#[test]
fn a_module_of_residual_blocks_expands_to_straight_line_code() {
    let code = pretty(expand(
        quote!(bucket_cap_mb = 1),
        quote! {
            pub mod net {
                use overlap::prelude::*;

                #[residual]
                pub struct Block {
                    norm: LayerNorm<8>,
                    fc: Linear<8, 8>,
                }

                pub struct Net {
                    input: Linear<4, 8>,
                    #[bucket_boundary]
                    blocks: [Block; 2],
                    head: Linear<8, 2>,
                }
            }
        },
    ));
    // The residual sums in forward, the skip gradients in backward, nested access paths.
    let flat = flat(&code);
    assert!(flat.contains("__dev.set_sum(&mut __ws.blocks_0_sum, &__ws.blocks_0_fc_out, &__ws.input_out)?;"), "{code}");
    assert!(flat.contains("__dev.add_assign(&mut __ws.grad_1, &__ws.grad_2)?;"), "{code}");
    assert!(code.contains("self.blocks[1].fc"), "{code}");
    assert!(!code.contains("#[residual]"), "our attributes are removed");
    expect_test::expect_file!["../../tests/expand/blocks.expanded.rs"].assert_eq(&code);
}

/// The user's documentation stays the item's summary: the schedule follows it, under a heading.
#[test]
fn the_users_documentation_comes_before_the_schedule() {
    let code = pretty(expand(
        quote!(),
        quote! {
            /// A small net.
            ///
            /// Its second paragraph.
            #[derive(Debug)]
            pub struct Small {
                fc: Linear<4, 2>,
            }
        },
    ));
    let at = |needle: &str| code.find(needle).unwrap_or_else(|| panic!("{needle} in\n{code}"));
    assert!(at("/// A small net.") < at("/// Its second paragraph."), "{code}");
    assert!(at("/// Its second paragraph.") < at("/// # Schedule") && at("/// # Schedule") < at("```text"), "{code}");
    assert!(at("```text") < at("#[derive(Debug)]") && at("#[derive(Debug)]") < at("pub struct Small"), "{code}");
}

/// Two heads tied to one embedding: the later head's backward (first in backward order) writes
/// the shared gradient, the earlier one adds to it, and the embedding adds last. A device that
/// writes a step's first gradients (the GPU, which clears no bucket) would otherwise lose one head's.
#[test]
fn heads_tied_to_one_embedding_add_after_the_first_writes() {
    let code = pretty(expand(
        quote!(),
        quote!(
            struct TwoHeads {
                wte: Embedding<11, 8>,
                #[tied(wte)]
                head1: TiedHead<8, 11>,
                proj: Linear<11, 8>,
                #[tied(wte)]
                head2: TiedHead<8, 11>,
            }
        ),
    ));
    let body = flat(function(&code, "backward_on<"));
    let accumulate_of = |index: usize| {
        let call = format!("__dev.backward_tied({index},");
        let (_, rest) = body.split_once(&call).unwrap_or_else(|| panic!("no tied backward of layer {index}: {body}"));
        let args = &rest[..rest.find(")?;").expect("the call ends")];
        let args = args.trim_end_matches([',', ' ']);
        args.rsplit(", ").nth(1).expect("accumulate comes before dx").to_string()
    };
    assert_eq!(accumulate_of(3), "__accumulate", "the first writer overwrites on a step's first backward");
    assert_eq!(accumulate_of(1), "true", "the second adds to the first's");
    let embedding = body.split_once("__dev.backward(0,").expect("the embedding's backward").1;
    let args = embedding[..embedding.find(")?;").expect("the call ends")].trim_end_matches([',', ' ']);
    assert!(args.ends_with("true, ::core::option::Option::None"), "{embedding}");
}

/// What a generated function hands on partway through (a bucket to its launch, P sums to their Q
/// all-reduce, an all-reduce to its wait point) is taken from a `Slot`, never moved out of a
/// local, and buckets are made into locals before their struct: moved locals and `?` inside a
/// struct literal cost the compiler drop code at every exit, and builds growing with the square
/// of the bucket count (77 s for a 48-block GPT, against 18 s).
#[test]
fn values_handed_on_mid_function_are_taken_from_slots() {
    let powersgd = quote!(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 4));
    for code in [mlp(), mlp_with(powersgd)] {
        let mut handed_on = 0;
        for name in ["backward_on<", "step_on<"] {
            let body = flat(function(&code, name));
            for (call, arg) in
                [("launch(", 1), ("launch_low_rank(", 1), ("reduce_q(", 0), ("wait(", 1), ("wait_low_rank(", 1)]
            {
                for (_, args) in body.match_indices(&format!("dev.{call}")).map(|(at, m)| body.split_at(at + m.len())) {
                    // `::overlap::program::Slot::take(&mut b0)` splits into `...::take(&mut b0`.
                    let value = args.split([',', ')']).nth(arg).unwrap_or_default();
                    assert!(
                        value.trim_start().starts_with("::overlap::program::Slot::take(&mut "),
                        "{call}{args:.80} in {name}"
                    );
                    handed_on += 1;
                }
            }
        }
        // Three buckets: their launches (and turnarounds), and their waits on both of step's paths.
        assert_eq!(handed_on, if code.contains("reduce_q") { 12 } else { 9 }, "every launch, turnaround and wait seen");
        let new_grads = flat(function(&code, "new_grads_on<"));
        assert!(new_grads.contains("let __b2 = __dev.new_bucket(__schedule, 2)?;"), "{new_grads}");
        assert!(!new_grads.contains("b0: __dev.new_bucket"), "{new_grads}");
    }
}

/// A model of more layers than the limit, written field by field, is refused at the first layer
/// past it (the module form counts such fields after its blocks too: `tests/ui`).
#[test]
fn a_struct_of_too_many_layers_is_refused_at_the_first_past_the_limit() {
    let fields = (0..=crate::layer_limit::MAX_LAYERS).map(|i| {
        let name = quote::format_ident!("fc{i}");
        quote!(#name: Linear<4, 4>,)
    });
    let code = expand(quote!(), quote!(pub struct Deep { #(#fields)* })).to_string();
    assert_eq!(code.matches("past 2048 layers").count(), 1, "{:.300}", code);
}
