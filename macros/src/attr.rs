//! The model attribute's syntax: `#[distributed_model(...)]` on the struct (the fields' own
//! attributes are in `field_attr`). Every key is checked; unknown, duplicate and bad values are
//! all reported.

use overlap_plan::{
    BucketLimits, BucketOrder, GradComm, LowRank, WireFormat, DEFAULT_BUCKET_CAP_MB, DEFAULT_FIRST_BUCKET_MB, MIB,
};
use syn::{Expr, ExprLit, Lit, Meta, MetaNameValue};

use crate::errors::Errors;
use crate::helpers::{expr_name, first_occurrence, int_literal, number, path_name, set_once};
use crate::planning::{self, Planning};
use crate::shard_attr::{gathers_value, shard_value, Gathers};

/// What `#[distributed_model(...)]` asks for: how to plan the buckets, and the format their
/// gradients travel in.
pub struct ModelConfig {
    pub planning: Planning,
    pub grad_comm: GradComm,
    /// `crate = "path"`: where generated code finds `overlap` when it is not `::overlap`.
    pub krate: Option<syn::Path>,
    /// `shard_optimizer`: optimizer state sharded over the ranks by default (ZeRO-1).
    pub shard_optimizer: bool,
    /// `gathers = ...`: the all-gathers' grouping, when given.
    pub gathers: Option<Gathers>,
    /// `model = Net`: which struct of a module of blocks is the model, so that the module may
    /// also hold structs of one's own that the model does not use.
    pub model: Option<syn::Ident>,
    /// `model = ..` was given but names no struct (reported): which struct is the model cannot
    /// be told, and the module's structs are not judged (no second-model errors after it).
    pub model_unreadable: bool,
}

/// Parses `bucket_cap_mb = 25, first_bucket_mb = 1` (both optional; integers or decimals) and
/// `bucket_order = ready | ddp_first_iteration` (optional), or `buckets = auto(...)` /
/// `buckets = profile(...)`; and, with either, `grad_comm = fp32 | bf16 | fp16 | powersgd(..)` and
/// the bare flag `shard_optimizer` (or `shard_optimizer = true | false`) and `gathers = ...` (see
/// `shard_attr`); `crate = path`, and `model = Name` for a module of blocks (see `nesting`).
pub fn model_config(args: proc_macro2::TokenStream, errors: &mut Errors) -> ModelConfig {
    let mut config = ModelConfig {
        planning: Planning::Caps(BucketLimits::default(), BucketOrder::Ready),
        grad_comm: GradComm::Format(WireFormat::Fp32),
        krate: None,
        shard_optimizer: false,
        gathers: None,
        model: None,
        model_unreadable: false,
    };
    config.planning = planning_config(args, &mut config, errors);
    config
}

/// The settings as `key = value` pairs, the flag `shard_optimizer` taken out (set in `shard`);
/// anything else that is not a pair is reported.
fn name_value_pairs(metas: Vec<Meta>, shard: &mut bool, errors: &mut Errors) -> Vec<MetaNameValue> {
    let mut pairs = Vec::new();
    let mut flagged = false;
    for meta in metas {
        if meta.path().get_ident().is_none() {
            let path = meta.path();
            errors.spanned(path, "a key is a plain name (`bucket_cap_mb`, `buckets`, ...), not a path");
            continue;
        }
        match meta {
            Meta::NameValue(pair) => pairs.push(pair),
            Meta::Path(path) if path_name(&path) == "shard_optimizer" => {
                if std::mem::replace(&mut flagged, true) {
                    errors.spanned(&path, "duplicate key `shard_optimizer`");
                }
                *shard = true;
            }
            Meta::Path(path) => errors.spanned(
                &path,
                format!("`{}` needs a value (`key = value`); the only flag is `shard_optimizer`", path_name(&path)),
            ),
            Meta::List(list) => errors.spanned(&list, "expected `key = value` or the flag `shard_optimizer`"),
        }
    }
    if flagged && pairs.iter().any(|p| path_name(&p.path) == "shard_optimizer") {
        let pair = pairs.iter().find(|p| path_name(&p.path) == "shard_optimizer").expect("found above");
        errors.spanned(&pair.path, "duplicate key `shard_optimizer`");
    }
    pairs
}

/// The planning the pairs ask for; the other settings go to `config`.
fn planning_config(args: proc_macro2::TokenStream, config: &mut ModelConfig, errors: &mut Errors) -> Planning {
    let (mut first_bucket_bytes, mut bucket_cap_bytes) = (DEFAULT_FIRST_BUCKET_MB * MIB, DEFAULT_BUCKET_CAP_MB * MIB);
    let mut order = BucketOrder::Ready;
    let mut planner: Option<(Planning, proc_macro2::TokenStream)> = None;
    let metas = crate::attr_items::settings(args, errors);
    if metas.unreadable.iter().any(|key| key == "model") {
        config.model_unreadable = true;
    }
    let pairs = name_value_pairs(metas.read, &mut config.shard_optimizer, errors);
    let mut seen: Vec<String> = Vec::new();
    let mut grad_comm_at = None;
    for pair in &pairs {
        let key = path_name(&pair.path);
        if !first_occurrence(&mut seen, &key, &pair.path, errors) {
            continue;
        }
        let target = match key.as_str() {
            "bucket_cap_mb" => &mut bucket_cap_bytes,
            "first_bucket_mb" => &mut first_bucket_bytes,
            "bucket_order" => {
                if let Some(o) = bucket_order(&pair.value, errors) {
                    order = o;
                }
                continue;
            }
            "grad_comm" => {
                if let Some(format) = grad_comm_value(&pair.value, errors) {
                    config.grad_comm = format;
                    grad_comm_at = Some(&pair.value);
                }
                continue;
            }
            "crate" => {
                config.krate = crate_path(&pair.value, errors);
                continue;
            }
            "shard_optimizer" => {
                if let Some(shard) = shard_value(&pair.value, errors) {
                    config.shard_optimizer = shard;
                }
                continue;
            }
            "gathers" => {
                config.gathers = gathers_value(&pair.value, errors);
                continue;
            }
            "model" => {
                config.model = model_name(&pair.value, errors);
                config.model_unreadable = config.model.is_none();
                continue;
            }
            "buckets" => {
                if let Some(p) = planning::parse(&pair.value, errors) {
                    planner = Some((p, quote::ToTokens::to_token_stream(pair)));
                }
                continue;
            }
            _ => {
                errors.spanned(
                    &pair.path,
                    "unknown key; expected `bucket_cap_mb`, `first_bucket_mb`, `bucket_order`, `buckets`, `grad_comm`, \
                     `shard_optimizer`, `gathers`, `model` or `crate`",
                );
                continue;
            }
        };
        if let Some(bytes) = mebibytes(&pair.value, &key, errors) {
            *target = bytes;
        }
    }
    if let Some(at) = grad_comm_at {
        sharding_conflict(config, at, errors);
    }
    match planner {
        Some((planning, tokens)) => {
            // Only the keys `buckets` replaces: `seen` also holds unknown keys, already reported.
            if seen.iter().any(|k| ["bucket_cap_mb", "first_bucket_mb", "bucket_order"].contains(&k.as_str())) {
                errors.spanned(
                    tokens,
                    "`buckets = ...` chooses the bucket boundaries itself: remove `bucket_cap_mb`, `first_bucket_mb` \
                     and `bucket_order`",
                );
            }
            planning
        }
        None => Planning::Caps(BucketLimits::Capped { first_bucket_bytes, bucket_cap_bytes }, order),
    }
}

/// Sharded optimizer state with PowerSGD's factors, which the runtime refuses before every run's
/// first step (`check_sharding` in the runtime's preflight: a bucket of factors cannot be
/// reduce-scattered, even when a run sends it whole); the formats sent whole (`bf16`, `fp16`)
/// shard fine. Reported at the `grad_comm` value rather than at `shard_optimizer`: sharding goes
/// with every other value, so the value is what does not fit (and a key given as a flag or as
/// `= true` would need two spans tracked).
fn sharding_conflict(config: &ModelConfig, grad_comm: &Expr, errors: &mut Errors) {
    if let (true, GradComm::LowRank(_)) = (config.shard_optimizer, config.grad_comm) {
        errors.spanned(
            grad_comm,
            "`shard_optimizer` cannot go with `grad_comm = powersgd(..)`: PowerSGD's factors cannot be \
             reduce-scattered, so every run sharding the optimizer state as the model says would stop before its \
             first step; send the gradients as `fp32`, `bf16` or `fp16`, or remove `shard_optimizer`",
        );
    }
}

/// `ready` (the default: gradient-ready order, DDP's rebuilt buckets) or `ddp_first_iteration`
/// (DDP's assignment before it has seen a backward pass: definition order, launched in reverse).
fn bucket_order(value: &Expr, errors: &mut Errors) -> Option<BucketOrder> {
    match expr_name(value).as_str() {
        "ready" => Some(BucketOrder::Ready),
        "ddp_first_iteration" => Some(BucketOrder::DdpFirstIteration),
        _ => {
            errors.spanned(value, "`bucket_order` must be `ready` (the default) or `ddp_first_iteration`");
            None
        }
    }
}

const GRAD_COMM_HELP: &str = "`grad_comm` must be `fp32` (the default), `bf16` or `fp16` (the format gradients \
                              travel in between ranks, summed in FP32 either way), or `powersgd(rank = 4)` (low-rank \
                              factors, optionally with `start_iter = <steps sent whole first>`)";

/// `fp32` (the default), `bf16` or `fp16`: the format gradients travel in, summed in FP32; or
/// `powersgd(rank = R, start_iter = K)`: PowerSGD's factors.
fn grad_comm_value(value: &Expr, errors: &mut Errors) -> Option<GradComm> {
    if let Expr::Call(call) = value {
        if expr_name(&call.func) == "powersgd" {
            return powersgd(call, errors).map(GradComm::LowRank);
        }
    }
    match expr_name(value).parse::<WireFormat>() {
        Ok(format) => Some(GradComm::Format(format)),
        Err(_) => {
            errors.spanned(value, GRAD_COMM_HELP);
            None
        }
    }
}

/// `powersgd(rank = 4)` or `powersgd(rank = 4, start_iter = 100)`; every problem reported.
fn powersgd(call: &syn::ExprCall, errors: &mut Errors) -> Option<LowRank> {
    let (mut rank, mut start_iter) = (None, None);
    let before = errors.len();
    for arg in &call.args {
        let Expr::Assign(assign) = arg else {
            errors.spanned(arg, "expected `rank = <integer>` or `start_iter = <integer>`");
            continue;
        };
        let key = expr_name(&assign.left);
        let value = int_literal(&assign.right).and_then(|l| l.base10_parse::<u64>().ok());
        match key.as_str() {
            "rank" => match value {
                Some(r) if (1..=LowRank::MAX_RANK as u64).contains(&r) => {
                    set_once(&mut rank, Some(r as usize), "rank", &assign.left, errors)
                }
                _ => errors.spanned(
                    &assign.right,
                    format!("`rank` must be an integer literal from 1 to {}", LowRank::MAX_RANK),
                ),
            },
            "start_iter" => match value {
                Some(k) => set_once(&mut start_iter, Some(k), "start_iter", &assign.left, errors),
                None => {
                    errors.spanned(&assign.right, "`start_iter` must be an integer literal (steps sent whole first)")
                }
            },
            _ => errors.spanned(&assign.left, "unknown key; expected `rank` or `start_iter`"),
        }
    }
    if rank.is_none() && errors.len() == before {
        errors.spanned(call, "`powersgd(...)` needs `rank = <integer>`: the rank of the factors, e.g. `rank = 4`");
    }
    let start_iter = start_iter.unwrap_or(LowRank::DEFAULT_START_ITER);
    (errors.len() == before).then(|| LowRank::new(rank.expect("checked above"), start_iter))
}

/// `crate = "path"` (serde's form) or `crate = path`: the path the generated code reaches
/// `overlap` by.
fn crate_path(value: &Expr, errors: &mut Errors) -> Option<syn::Path> {
    let path = match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => s.parse::<syn::Path>().ok(),
        Expr::Path(p) if p.qself.is_none() => Some(p.path.clone()),
        _ => None,
    };
    if path.is_none() {
        errors.spanned(value, "`crate` must be a path, e.g. `crate = \"my_overlap\"` for a renamed dependency");
    }
    path
}

/// `model = Net`: a struct's name, alone; also as a string (`model = "Net"`), as `crate` takes
/// its path.
fn model_name(value: &Expr, errors: &mut Errors) -> Option<syn::Ident> {
    match value {
        Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => match syn::parse_str::<syn::Ident>(&s.value()) {
            Ok(mut ident) => {
                ident.set_span(s.span());
                Some(ident)
            }
            Err(_) => {
                errors.spanned(value, "`model` names a struct of this module by its name alone: `model = Net`");
                None
            }
        },
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => match p.path.get_ident() {
            Some(ident) => Some(ident.clone()),
            None => {
                errors.spanned(value, "`model` names a struct of this module by its name alone: `model = Net`");
                None
            }
        },
        _ => {
            errors.spanned(value, "`model` names the model's struct: `model = Net`");
            None
        }
    }
}

/// A positive size in MiB as bytes: at least one byte, at most what a `usize` counts.
fn mebibytes(value: &Expr, key: &str, errors: &mut Errors) -> Option<usize> {
    let mb = number(value);
    let max_mb = usize::MAX / MIB;
    match mb {
        Some(mb) if mb > max_mb as f64 => {
            errors.spanned(value, format!("`{key}` must be at most {max_mb} MiB"));
            None
        }
        Some(mb) if mb > 0.0 && (mb * MIB as f64).round() >= 1.0 => Some((mb * MIB as f64).round() as usize),
        Some(mb) if mb > 0.0 => {
            errors.spanned(value, format!("`{key}` must be at least one byte (1 / {MIB} MiB)"));
            None
        }
        Some(_) => {
            errors.spanned(value, format!("`{key}` must be a number of MiB greater than zero"));
            None
        }
        None => {
            errors.spanned(
                value,
                format!("`{key}` must be a number of MiB greater than zero, written as a number (`8`, `0.5`)"),
            );
            None
        }
    }
}
