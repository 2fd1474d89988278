//! Expansion snapshots: the exact code users read with `cargo expand`, and the order of its
//! backward calls, all-reduce launches, wait points and updates.

use quote::quote;

use super::expand;

pub(super) fn pretty(tokens: proc_macro2::TokenStream) -> String {
    prettyplease::unparse(&syn::parse2::<syn::File>(tokens).expect("the expansion parses as a file"))
}

pub(super) fn mlp() -> String {
    mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1))
}

pub(super) fn mlp_with(attr: proc_macro2::TokenStream) -> String {
    pretty(expand(
        attr,
        quote! {
            pub struct Mlp {
                fc1: Linear<784, 2048>,
                act1: Relu,
                fc2: Linear<2048, 2048>,
                act2: Relu,
                fc3: Linear<2048, 2048>,
                act3: Relu,
                head: Linear<2048, 10>,
            }
        },
    ))
}

/// The body of the generated function `name`, up to the next function.
pub(super) fn function<'a>(code: &'a str, name: &str) -> &'a str {
    let start = code.find(&format!("fn {name}")).unwrap_or_else(|| panic!("no fn {name}"));
    let rest = &code[start + 3..];
    &code[start..start + 3 + rest.find("\n    fn ").unwrap_or(rest.len())]
}

/// The field after the first `self.` of a call's arguments (`head`, `blocks[3].fc1`).
fn field(call: &str) -> &str {
    call.split("self.").nth(1).and_then(|r| r.split([',', ' ']).next()).unwrap_or_default()
}

/// `body` on one line, single-spaced, with no space before `.` or after `(` and no trailing
/// comma: calls read as they are written, however the pretty-printer broke them.
pub(super) fn flat(body: &str) -> String {
    body.split_whitespace().collect::<Vec<_>>().join(" ").replace(" .", ".").replace("( ", "(").replace(", )", ")")
}

/// A generated local's name without its `__` (`__b0`: `b0`), for events that read as the schedule.
fn unprefixed(local: &str) -> &str {
    local.strip_prefix("__").unwrap_or(local)
}

/// One event per statement that calls backward, launches, waits or updates.
fn events(body: &str) -> Vec<String> {
    flat(body)
        .split([';', '{', '}'])
        .filter_map(|statement| {
            let s = statement.trim();
            if let Some((_, call)) = s.split_once("dev.backward(") {
                Some(format!("backward {}", field(call)))
            } else if let Some((_, args)) = s.split_once("dev.launch(").or_else(|| s.split_once("dev.launch_low_rank("))
            {
                // The bucket, taken from its slot (`::overlap::program::Slot::take(&mut b0)`).
                let bucket = args.split(", ").nth(1).unwrap_or_default();
                let bucket = bucket.rsplit("&mut ").next().unwrap_or_default().trim_end_matches(')');
                Some(format!("all_reduce {}", unprefixed(bucket)))
            } else if let Some((lhs, _)) =
                s.split_once(" = __dev.wait(").or_else(|| s.split_once(" = __dev.wait_low_rank("))
            {
                Some(format!("wait {}", unprefixed(lhs.trim_start_matches("let mut "))))
            } else if let Some((_, args)) = s.split_once("dev.give_back_updated(") {
                Some(format!(
                    "give_back {}",
                    unprefixed(args.trim_start_matches("&mut ").split(',').next().unwrap_or_default())
                ))
            } else if let Some((_, args)) = s.split_once("::overlap::program::Program::update_bucket_on(self, __dev, ")
            {
                Some(format!(
                    "update_bucket {}",
                    unprefixed(args.split(", ").nth(1).unwrap_or_default().trim_start_matches("&mut "))
                ))
            } else if s.contains("= __dev.clip(") {
                Some("clip".into())
            } else if let Some(arm) = s.strip_suffix(" =>") {
                Some(format!("bucket {arm}"))
            } else {
                s.split_once("dev.update(&mut ").map(|(_, rest)| {
                    let param = rest.split(", ").nth(1).unwrap_or_default();
                    format!("update {}[{param}]", field(rest))
                })
            }
        })
        .collect()
}

#[test]
fn mlp_expansion_snapshot() {
    expect_test::expect_file!["../../tests/expand/mlp.expanded.rs"].assert_eq(&mlp());
}

#[test]
fn backward_launches_each_bucket_right_after_the_layer_that_completes_it() {
    let code = mlp();
    let backward = function(&code, "backward_on<");
    assert_eq!(
        events(backward),
        [
            "backward head",
            "backward act3",
            "backward fc3",
            "all_reduce b0", // head.bias, head.weight, fc3.bias, fc3.weight: 16.09 MiB
            "backward act2",
            "backward fc2",
            "all_reduce b1", // fc2.bias, fc2.weight
            "backward act1",
            "backward fc1",
            "all_reduce b2", // fc1.bias, fc1.weight
        ]
    );
    let fc1 = &backward[backward.rfind("self.fc1").expect("fc1 backward")..];
    assert!(fc1.contains("Option::None"), "the first layer computes no input gradient");
    let no_sync = function(&code, "backward_no_sync_on");
    assert!(!no_sync.contains("all_reduce"), "micro-steps communicate nothing");
}

/// Each wait point is followed by its bucket's updates, so that they overlap the later buckets'
/// sums; a clipping step (which needs the global norm first) waits for every bucket, then clips,
/// then updates. A bucket's updates take back the parameters lent with it, or update them one by
/// one when they could not be lent.
#[test]
fn step_waits_for_each_bucket_right_before_its_updates() {
    let code = mlp();
    assert_eq!(
        events(function(&code, "step_on<")),
        [
            "wait b0",
            "wait b1",
            "wait b2",
            "clip",
            "update_bucket b0",
            "update_bucket b1",
            "update_bucket b2",
            "wait b0",
            "update_bucket b0",
            "wait b1",
            "update_bucket b1",
            "wait b2",
            "update_bucket b2",
        ]
    );
    assert_eq!(
        events(function(&code, "update_bucket_on<")),
        [
            "give_back bucket",
            "bucket 0",
            "update head[1]",
            "update head[0]",
            "update fc3[1]",
            "update fc3[0]",
            "bucket 1",
            "update fc2[1]",
            "update fc2[0]",
            "bucket 2",
            "update fc1[1]",
            "update fc1[0]",
        ]
    );
    let backward = function(&code, "backward_on<");
    assert!(backward.contains("dev.begin_step()"), "backward begins the step: it lends this step's rule");
    assert!(!function(&code, "step_on<").contains("begin_step"), "one step is begun once");
}

#[test]
fn bucket_table_is_in_the_doc_comments() {
    let code = mlp();
    assert!(code.contains("/// b1      fc2.backward"), "{code}");
    assert!(
        code.contains("/// Bucket 2: fc1.bias, fc1.weight (1607680 elements), launched after `fc1.backward`."),
        "{code}"
    );
}

/// DDP's first-iteration order, kept for comparison: filled in definition order, launched in
/// reverse, so the small first bucket (`fc1.weight`) goes last, after `fc1.bias` and `fc2.weight`.
#[test]
fn ddp_first_iteration_order_launches_the_small_first_bucket_last() {
    let code = mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1, bucket_order = ddp_first_iteration));
    assert!(code.contains("/// bucket_order = ddp_first_iteration: filled in definition order"), "{code}");
    let launches: Vec<String> =
        events(function(&code, "backward_on<")).into_iter().filter(|e| !e.starts_with("span")).collect();
    assert_eq!(
        launches,
        [
            "backward head",
            "backward act3",
            "backward fc3",
            "all_reduce b0", // fc3.bias, head.weight, head.bias
            "backward act2",
            "backward fc2",
            "all_reduce b1", // fc2.bias, fc3.weight
            "backward act1",
            "backward fc1",
            "all_reduce b2", // fc1.bias, fc2.weight
            "all_reduce b3", // fc1.weight
        ]
    );
    let ready = mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1, bucket_order = ready));
    assert_eq!(ready, mlp(), "`ready` is the default");
}

#[test]
fn leading_parameter_free_layers_get_no_backward() {
    let code = pretty(expand(
        quote!(),
        quote!(
            struct M {
                pre: Tanh,
                fc: Linear<4, 2>,
                post: Sigmoid,
            }
        ),
    ));
    assert_eq!(events(function(&code, "backward_on<")), ["backward post", "backward fc", "all_reduce b0"]);
}

#[test]
fn auto_buckets_are_whole_layers_and_the_docs_give_the_prediction() {
    let code = pretty(expand(
        quote!(buckets = auto(link = "10gbe", world = 64, batch = 32, gflops = 50)),
        quote! {
            pub struct Mlp {
                fc1: Linear<784, 2048>,
                act1: Relu,
                fc2: Linear<2048, 2048>,
                act2: Relu,
                fc3: Linear<2048, 2048>,
                act3: Relu,
                head: Linear<2048, 10>,
            }
        },
    ));
    assert!(!code.contains("compile_error"), "{code}");
    assert!(code.contains("boundaries chosen by the cost model, no size caps"), "{code}");
    assert!(
        code.contains("/// buckets chosen by auto(link: latency 30.000 us, bandwidth 1.250 GB/s, world 64"),
        "{code}"
    );
    assert!(code.contains("/// predicted step: ") && code.contains("/// with DDP's 25 MiB cap: "), "{code}");
    // Whole layers: every layer's weight and bias land in the same bucket.
    let updates = flat(function(&code, "update_bucket_on<"));
    for layer in ["fc1", "fc2", "fc3", "head"] {
        let arms_before = |param: &str| {
            let at = updates.find(&format!("__dev.update(&mut self.{layer}, {param},")).expect("an update");
            updates[..at].matches(" => {").count()
        };
        assert_eq!(arms_before("0"), arms_before("1"), "{layer}'s weight and bias are in different buckets");
    }
}
