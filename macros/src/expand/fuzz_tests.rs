//! Property tests: `expand` is total. Whatever tokens a user writes under `#[distributed_model]`,
//! the macro must return tokens (problems become `compile_error!` invocations), never panic: a
//! panicking proc macro gives users an opaque "proc macro panicked" with no span, and takes every
//! other error of the same compile with it.
//!
//! Two generators feed `expand`: a grammar of struct-like items assembled from valid and invalid
//! fragments of the DSL, and token-level mutations (inside groups too) of valid models.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::Config;

use super::expand;

/// Valid models, as `(macro arguments, item)`: the grammar's anchor and the mutations' seeds.
const SEEDS: &[(&str, &str)] = &[
    (
        "bucket_cap_mb = 8, first_bucket_mb = 1",
        "pub struct Mlp { fc1: Linear<784, 2048>, act1: Relu, head: Linear<2048, 10> }",
    ),
    (
        "",
        "struct Model { fc: Linear<784, 256>, \
         #[layer(input = 256, output = 256, params(gain = [256]), flops = 512)] scale: Scale, \
         head: Linear<256, 10> }",
    ),
    ("", "struct Split { fc1: Linear<4, 8>, act: Gelu, #[bucket_boundary] fc2: Linear<8, 2> }"),
    (
        "bucket_cap_mb = 0.5",
        "pub(crate) struct Norm { ln: LayerNorm<16>, fc: Linear<16, 4>, act: Tanh, out: Linear<4, 1>, sig: Sigmoid }",
    ),
    (
        "first_bucket_mb = 2",
        "struct Scaled { fc: Linear<8, 4>, #[doc = \"x\"] #[layer(params(weight = [4]))] s: Scale }",
    ),
];

#[rustfmt::skip]
const DIMS: &[&str] = &[
    "0", "1", "7", "784", "2048", "4294967296", "4611686018427387904", "18446744073709551615",
    "99999999999999999999", "-1", "N", "\"x\"",
];
#[rustfmt::skip]
const OTHER_TYPES: &[&str] = &[
    "Relu", "Gelu", "Tanh", "Sigmoid", "Conv2d", "T", "Self", "a::b::Linear<1, 2>", "::overlap::Linear<4, 4>",
    "&'a Linear<1, 2>", "&mut Relu", "(Relu, Gelu)", "()", "[Linear<1, 2>; 3]", "[Relu]", "Linear<1>",
    "Linear<1, 2, 3>", "Linear", "LayerNorm", "Relu<1>", "Linear(u8) -> u8", "Linear<{ 1 + 1 }, 2>", "Linear<N, M>",
    "Linear<'a, 1>", "Box<Linear<1, 2>>", "dyn Layer", "impl Layer", "fn(Relu) -> Relu", "_",
];
#[rustfmt::skip]
const FIELD_ATTRS: &[&str] = &[
    "#[bucket_boundary]", "#[bucket_boundary = 3]", "#[bucket_boundary(x)]", "#[layer]", "#[layer = 1]",
    "#[layer(input = 1, output = 2)]", "#[layer(input = 1, output = 2, params(w = [1, 2]), flops = 3)]",
    "#[layer(input = x)]", "#[layer(input = 1)]", "#[layer(params(w = []))]", "#[layer(params(w = [0]))]",
    "#[layer(params(w = [4294967296, 4294967296]))]", "#[layer(params(w = [4611686018427387904]), flops = 1)]",
    "#[layer(input = 1, output = 4611686018427387904, flops = 1)]", "#[layer(params(w = 1, w = [1], a::b = [1]))]",
    "#[layer(unknown = 1)]", "#[layer(input = 18446744073709551616)]", "#[layer(flops = -1)]",
    "#[layer(input = 1, input = 1, output = 1)]", "#[layer(params)]", "#[doc = \"x\"]", "#[serde(skip)]",
    "#[cfg(test)]", "#[cfg]", "#[cfg_attr]", "#[cfg_attr(test)]", "#[cfg_attr(test, bucket_boundary)]",
    "#[cfg_attr(test, cfg_attr(unix, layer(params(w = [1]))))]", "#[cfg_attr(test, doc = \"x\", cfg(unix))]",
];
#[rustfmt::skip]
const ARGS: &[&str] = &[
    "", "bucket_cap_mb = 8", "bucket_cap_mb = 0", "bucket_cap_mb = -1", "bucket_cap_mb = 1e400",
    "bucket_cap_mb = 0.5", "bucket_cap_mb = 1e-30", "first_bucket_mb = 1, bucket_cap_mb = 25", "bucket_cap_mb",
    "bucket_cap_mb = \"8\"", "foo = 1", "bucket_cap_mb = 1, bucket_cap_mb = 2", "18446744073709551615", ",,",
    "first_bucket_mb = 99999999999999999999",
];
const VISIBILITIES: &[&str] = &["", "pub", "pub(crate)", "pub(in a::b)"];
const STRUCT_NAMES: &[&str] = &["Mlp", "Model", "r#struct", "_"];
const GENERICS: &[&str] = &["", "", "", "<T>", "<const N: usize>", "<'a>", "<T: Layer, const N: usize>"];
const WHERE_CLAUSES: &[&str] = &["", "", "", "where T: Layer", "where Linear<1, 2>: Layer", "where"];
const FIELD_NAMES: &[&str] = &["fc1", "fc2", "act", "head", "fc1", "r#type", "_"];

/// Replacements for literals and identifiers in the mutation-based generator.
#[rustfmt::skip]
const LITERALS: &[&str] = &[
    "0", "1", "-1", "1e400", "0.5", "4294967296", "4611686018427387904", "18446744073709551616",
    "99999999999999999999", "\"8\"", "'c'", "b\"x\"", "1u8", "0x10", "1_000", "true",
];
const IDENTS: &[&str] = &["Linear", "Relu", "LayerNorm", "struct", "enum", "_", "self", "layer", "bucket_boundary"];

/// A field as `(attributes, name, type)`.
type FieldSource = (Vec<&'static str>, &'static str, String);

fn field_type() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (select(DIMS), select(DIMS)).prop_map(|(a, b)| format!("Linear<{a}, {b}>")),
        1 => select(DIMS).prop_map(|d| format!("LayerNorm<{d}>")),
        3 => select(OTHER_TYPES).prop_map(String::from),
    ]
}

fn field() -> impl Strategy<Value = FieldSource> {
    (vec(select(FIELD_ATTRS), 0..3), select(FIELD_NAMES), field_type())
}

#[derive(Clone, Copy, Debug)]
enum ItemKind {
    Named,
    Tuple,
    Unit,
    Enum,
    Union,
    Fn,
}

/// Source text of a struct (usually) or another item, built from DSL fragments.
fn item_source() -> impl Strategy<Value = String> {
    use ItemKind::*;
    let kind = prop_oneof![
        8 => Just(Named),
        1 => Just(Tuple),
        1 => Just(Unit),
        1 => Just(Enum),
        1 => Just(Union),
        1 => Just(Fn),
    ];
    let header = (select(VISIBILITIES), select(STRUCT_NAMES), select(GENERICS), select(WHERE_CLAUSES));
    (header, kind, vec(field(), 0..8)).prop_map(|((vis, name, generics, where_clause), kind, fields)| {
        let named = fields.iter().map(|(attrs, f, ty)| format!("{} {f}: {ty}", attrs.join(" "))).collect::<Vec<_>>();
        let unnamed = fields.iter().map(|(attrs, _, ty)| format!("{} {ty}", attrs.join(" "))).collect::<Vec<_>>();
        let (named, unnamed) = (named.join(", "), unnamed.join(", "));
        let head = format!("{vis} struct {name}{generics}");
        match kind {
            Named => format!("{head} {where_clause} {{ {named} }}"),
            Tuple => format!("{head}({unnamed}) {where_clause};"),
            Unit => format!("{head} {where_clause};"),
            Enum => format!("{vis} enum {name}{generics} {where_clause} {{ A {{ {named} }}, B({unnamed}) }}"),
            Union => format!("{vis} union {name}{generics} {where_clause} {{ {named} }}"),
            Fn => format!("{vis} fn {name}{generics}() {where_clause} {{}}"),
        }
    })
}

#[derive(Clone, Debug)]
enum Edit {
    Delete,
    Duplicate,
    SwapWith(usize),
    /// Replace a literal (the `at`-th one, cyclically) with this source text.
    Literal(&'static str),
    /// Replace an identifier (the `at`-th one, cyclically) with this source text.
    Ident(&'static str),
    Truncate,
    /// A group gets this delimiter instead; any other token is wrapped in one.
    Rewrap(Delimiter),
}

/// One edit, applied after descending `path` into nested groups (each step picks a group of
/// the current level, cyclically; the descent stops early at a level with no groups).
#[derive(Clone, Debug)]
struct Mutation {
    path: Vec<usize>,
    at: usize,
    edit: Edit,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let delimiters = vec![Delimiter::Parenthesis, Delimiter::Brace, Delimiter::Bracket, Delimiter::None];
    let edit = prop_oneof![
        Just(Edit::Delete),
        Just(Edit::Duplicate),
        any::<usize>().prop_map(Edit::SwapWith),
        select(LITERALS).prop_map(Edit::Literal),
        select(IDENTS).prop_map(Edit::Ident),
        Just(Edit::Truncate),
        select(delimiters).prop_map(Edit::Rewrap),
    ];
    (vec(any::<usize>(), 0..4), any::<usize>(), edit).prop_map(|(path, at, edit)| Mutation { path, at, edit })
}

fn tokens(source: &str) -> TokenStream {
    TokenStream::from_str(source).unwrap_or_else(|e| panic!("`{source}` does not tokenize: {e}"))
}

fn positions(tokens: &[TokenTree], wanted: impl Fn(&TokenTree) -> bool) -> Vec<usize> {
    tokens.iter().enumerate().filter(|(_, t)| wanted(t)).map(|(i, _)| i).collect()
}

/// Replaces the `at`-th (cyclically) token that is `wanted` with the tokens of `source`.
fn replace_token(tokens: &mut Vec<TokenTree>, at: usize, wanted: fn(&TokenTree) -> bool, source: &str) {
    let hits = positions(tokens, wanted);
    if !hits.is_empty() {
        let i = hits[at % hits.len()];
        tokens.splice(i..=i, self::tokens(source));
    }
}

fn mutate(stream: TokenStream, m: &Mutation, depth: usize) -> TokenStream {
    let mut tokens: Vec<TokenTree> = stream.into_iter().collect();
    let groups = positions(&tokens, |t| matches!(t, TokenTree::Group(_)));
    if let (Some(step), false) = (m.path.get(depth), groups.is_empty()) {
        let i = groups[step % groups.len()];
        if let TokenTree::Group(g) = &tokens[i] {
            let mut inner = Group::new(g.delimiter(), mutate(g.stream(), m, depth + 1));
            inner.set_span(g.span());
            tokens[i] = TokenTree::Group(inner);
        }
        return tokens.into_iter().collect();
    }
    if tokens.is_empty() {
        return TokenStream::new();
    }
    let i = m.at % tokens.len();
    match m.edit {
        Edit::Delete => drop(tokens.remove(i)),
        Edit::Duplicate => tokens.insert(i, tokens[i].clone()),
        Edit::SwapWith(j) => {
            let j = j % tokens.len();
            tokens.swap(i, j);
        }
        Edit::Literal(text) => replace_token(&mut tokens, m.at, |t| matches!(t, TokenTree::Literal(_)), text),
        Edit::Ident(text) => replace_token(&mut tokens, m.at, |t| matches!(t, TokenTree::Ident(_)), text),
        Edit::Truncate => tokens.truncate(i),
        Edit::Rewrap(delimiter) => {
            let inner = match &tokens[i] {
                TokenTree::Group(g) => g.stream(),
                other => other.clone().into(),
            };
            tokens[i] = TokenTree::Group(Group::new(delimiter, inner));
        }
    }
    tokens.into_iter().collect()
}

fn mutate_all(source: &str, mutations: &[Mutation]) -> TokenStream {
    mutations.iter().fold(tokens(source), |stream, m| mutate(stream, m, 0))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "(a panic payload that is not a string)".to_owned(),
    }
}

/// Expands, turning a panic into `Err(message)`.
fn expand_catching_panics(args: &TokenStream, item: &TokenStream) -> Result<TokenStream, String> {
    catch_unwind(AssertUnwindSafe(|| expand(args.clone(), item.clone()))).map_err(|p| panic_message(&*p))
}

/// The property: `expand` returns some tokens and does not panic.
fn assert_total(args: &TokenStream, item: &TokenStream) -> Result<TokenStream, TestCaseError> {
    let out = expand_catching_panics(args, item)
        .map_err(|e| TestCaseError::fail(format!("expand panicked: {e}\n  args: {args}\n  item: {item}")))?;
    prop_assert!(!out.is_empty(), "expand returned no tokens\n  args: {args}\n  item: {item}");
    Ok(out)
}

fn config() -> Config {
    // No regression files: they would land in the source tree, and found inputs belong in
    // `fuzz_found_inputs_do_not_panic` below.
    Config { cases: 512, failure_persistence: None, ..Config::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_grammar_generated_items_never_panic(args in select(ARGS), item in item_source()) {
        let (args, item) = (TokenStream::from_str(args), TokenStream::from_str(&item));
        prop_assume!(args.is_ok() && item.is_ok());
        assert_total(&args.unwrap(), &item.unwrap())?;
    }

    #[test]
    fn fuzz_mutated_models_never_panic(
        seed in 0..SEEDS.len(),
        arg_mutations in vec(mutation(), 0..3),
        item_mutations in vec(mutation(), 1..6),
    ) {
        let (args, item) = SEEDS[seed];
        assert_total(&mutate_all(args, &arg_mutations), &mutate_all(item, &item_mutations))?;
    }
}

#[test]
fn fuzz_seeds_expand_without_errors() {
    for (args, item) in SEEDS {
        let out = assert_total(&tokens(args), &tokens(item)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!out.to_string().contains("compile_error"), "seed `{item}` has errors:\n{out}");
    }
}

/// Inputs the fuzzers found that make `expand` panic (integer overflow on huge widths and
/// shapes), one per panicking site; each must become a `compile_error!` instead.
#[test]
fn fuzz_found_inputs_do_not_panic() {
    let huge_params = "#[layer(params(w = [4611686018427387904]), flops = 1)]";
    let four_huge =
        format!("struct M {{ {huge_params} a: A, {huge_params} b: A, {huge_params} c: A, {huge_params} d: A }}");
    let found = [
        "struct M { fc: Linear<4294967296, 4294967296> }",
        "struct M { ln: LayerNorm<4611686018427387904> }",
        "struct M { #[layer(params(w = [4294967296, 4294967296]))] a: A }",
        "struct M { #[layer(params(w = [4611686018427387904]))] a: A }",
        "struct M { #[layer(input = 1, output = 4611686018427387904, params(w = [1]), flops = 1)] a: A, g: Gelu }",
        &four_huge,
    ];
    let panics: Vec<String> = found
        .iter()
        .filter_map(|item| {
            expand_catching_panics(&TokenStream::new(), &tokens(item)).err().map(|e| format!("{item}\n    => {e}"))
        })
        .collect();
    assert!(panics.is_empty(), "expand panicked on:\n  {}", panics.join("\n  "));
}
