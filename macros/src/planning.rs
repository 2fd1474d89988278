//! How the buckets are chosen: PyTorch DDP's size caps in gradient-ready order (the default;
//! `bucket_order = ddp_first_iteration` for DDP's first-iteration order), `buckets = auto(...)`
//! (boundaries minimising the simulated step for a device rate, link and world size), or
//! `buckets = profile("path.json", ...)` (the same, fed by per-layer times a run measured with
//! `--write-profile`). Whatever the mode, the result is an ordinary `Schedule`.

use std::path::PathBuf;

use overlap_plan::{
    plan_auto, plan_auto_sharded, plan_buckets, plan_buckets_in, sharded_step, sim_buckets, simulate, BucketLimits,
    BucketOrder, GradComm, LayerSpec, Link, Prediction, Schedule, StepCosts, Strategy, Target,
};
use syn::{Expr, ExprLit, Ident, Lit, LitStr};

use crate::errors::Errors;
use crate::helpers::{expr_name, first_occurrence, number};
use crate::profile;

pub enum Planning {
    Caps(BucketLimits, BucketOrder),
    Auto { link: Link, world: usize, batch: usize, gflops: f64 },
    Profile { path: LitStr, link: Option<Link>, world: Option<usize> },
}

/// Reports what planning would read that does not depend on the model (a profile's file), for a
/// model not planned because of other problems: all of them show in one compile.
pub fn check_inputs(planning: &Planning, errors: &mut Errors) {
    if let Planning::Profile { path, .. } = planning {
        profile::load(path, errors);
    }
}

/// The plan and what the docs should say about how it was chosen.
pub struct Planned {
    pub schedule: Schedule,
    /// Doc lines on the choice and its predicted cost.
    pub notes: Vec<String>,
    /// A file the plan was read from: the expansion `include_bytes!`s it so that cargo
    /// recompiles when it changes.
    pub input_file: Option<String>,
    /// The cost model the buckets were chosen by (`auto`, `profile`), which also chooses the
    /// all-gathers' grouping.
    pub target: Option<Target>,
}

const AUTO_HELP: &str = "expected `auto(link = \"ib-hdr\", world = 64)`, optionally with `batch = <samples per rank>` \
                         and `gflops = <device GFLOP/s>`";
const PROFILE_HELP: &str =
    "expected `profile(\"path/to/profile.json\")`, optionally with `link = \"...\"` and `world = <ranks>`";

/// The device speeds `auto(gflops = ..)` plans for: a megaflop to a hundred petaflops a second.
/// Past them the simulated step is dominated by one side alone (or overflows), and the number
/// is a typo, not a device.
const GFLOPS: std::ops::RangeInclusive<f64> = 1e-3..=1e8;

/// Parses the value of `buckets = ...`.
pub fn parse(value: &Expr, errors: &mut Errors) -> Option<Planning> {
    let Expr::Call(call) = value else {
        errors.spanned(value, format!("{AUTO_HELP}, or {PROFILE_HELP}"));
        return None;
    };
    let func = expr_name(&call.func);
    let mut args = call.args.iter();
    let path = if func == "profile" {
        match args.next() {
            Some(Expr::Lit(ExprLit { lit: Lit::Str(s), .. })) => Some(s.clone()),
            _ => {
                errors.spanned(call, PROFILE_HELP);
                return None;
            }
        }
    } else if func == "auto" {
        None
    } else {
        errors.spanned(&call.func, format!("unknown planner; {AUTO_HELP}, or {PROFILE_HELP}"));
        return None;
    };
    let help = if path.is_some() { PROFILE_HELP } else { AUTO_HELP };
    let (mut link, mut world, mut batch, mut gflops) = (None, None, None, None);
    let before = errors.len();
    let mut seen: Vec<String> = Vec::new();
    for arg in args {
        let Expr::Assign(assign) = arg else {
            errors.spanned(arg, help);
            continue;
        };
        let key = expr_name(&assign.left);
        if ["link", "world", "batch", "gflops"].contains(&key.as_str())
            && !first_occurrence(&mut seen, &key, &assign.left, errors)
        {
            continue;
        }
        let right = &*assign.right;
        // `-1` is a number too, out of range as `0` is: the same message, not "bad argument".
        let (negative, unsigned) = match right {
            Expr::Unary(syn::ExprUnary { op: syn::UnOp::Neg(_), expr, .. }) => (true, &**expr),
            other => (false, other),
        };
        match (key.as_str(), right, unsigned) {
            ("link", Expr::Lit(ExprLit { lit: Lit::Str(s), .. }), _) => match s.value().parse::<Link>() {
                Ok(l) => link = Some(l),
                Err(e) => errors.spanned(s, e),
            },
            ("world" | "batch", _, Expr::Lit(ExprLit { lit: Lit::Int(i), .. })) if path.is_none() || key == "world" => {
                match i.base10_parse::<usize>() {
                    Ok(v) if !negative && v > 0 && v <= overlap_plan::MAX_WORLD => {
                        *(if key == "world" { &mut world } else { &mut batch }) = Some(v)
                    }
                    _ => errors.spanned(right, format!("`{key}` must be between 1 and {}", overlap_plan::MAX_WORLD)),
                }
            }
            ("gflops", _, Expr::Lit(_)) if path.is_none() => {
                // As every number of the attribute: underscores and a suffix allowed (`1_000`, `100u32`).
                match number(unsigned).map(|v| if negative { -v } else { v }) {
                    Some(v) if GFLOPS.contains(&v) => gflops = Some(v),
                    _ => errors.spanned(
                        right,
                        format!(
                            "`gflops` must be between {} and {} (the device's GFLOP/s)",
                            GFLOPS.start(),
                            GFLOPS.end()
                        ),
                    ),
                }
            }
            _ => errors.spanned(arg, format!("bad argument; {help}")),
        }
    }
    if errors.len() > before {
        return None;
    }
    if let Some(path) = path {
        return Some(Planning::Profile { path, link, world });
    }
    let (Some(link), Some(world)) = (link, world) else {
        errors.spanned(call, format!("`auto` needs a link and a world size; {AUTO_HELP}"));
        return None;
    };
    Some(Planning::Auto { link, world, batch: batch.unwrap_or(64), gflops: gflops.unwrap_or(100.0) })
}

/// Plans the model `ident` of layers `specs` as `planning` says, for gradients that travel as
/// `grad_comm` says; reports problems (profile files, and the planner's own refusals at `ident`)
/// to `errors`.
pub fn plan(
    planning: &Planning,
    (grad_comm, sharded): (GradComm, bool),
    ident: &Ident,
    specs: &[LayerSpec],
    errors: &mut Errors,
) -> Option<Planned> {
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    let span = ident;
    let (target, description, input_file) = match planning {
        &Planning::Caps(limits, order) => {
            let notes = match order {
                BucketOrder::Ready => vec![],
                BucketOrder::DdpFirstIteration => vec![
                    "bucket_order = ddp_first_iteration: filled in definition order and launched in reverse, as DDP \
                     plans before its first backward pass (and replaces after it)"
                        .to_string(),
                ],
            };
            return plan_buckets_in(&name, specs, &limits, order)
                .map_err(|e| errors.spanned(span, e))
                .ok()
                .map(|schedule| Planned { schedule, notes, input_file: None, target: None });
        }
        &Planning::Auto { link, world, batch, gflops } => {
            let costs = StepCosts::from_flops(specs.iter().map(|l| l.flops_per_sample), batch, gflops * 1e9);
            let description = format!("auto(link: {link}, world {world}, batch {batch} per rank, {gflops} GFLOP/s)");
            (Target { costs, link, world }, description, None)
        }
        Planning::Profile { path, link, world } => {
            let (target, file) = profile::read(path, *link, *world, specs, errors)?;
            let description = format!("profile(\"{}\") (link: {}, world {})", path.value(), target.link, target.world);
            (target, description, Some(file))
        }
    };
    // Sharded state is its own step to plan for: reduce-scatters, 1/N of the update, all-gathers.
    let chosen = if sharded {
        plan_auto_sharded(&name, specs, &target, grad_comm)
    } else {
        plan_auto(&name, specs, &target, Strategy::Optimal, grad_comm)
    };
    let (schedule, predicted) = match chosen {
        Ok(p) => p,
        Err(e) => {
            errors.spanned(span, e);
            return None;
        }
    };
    let baseline = plan_buckets(&name, specs, &BucketLimits::default()).map_err(|e| errors.spanned(span, e)).ok()?;
    let with_caps = if sharded {
        sharded_step(&baseline, &target, grad_comm)
    } else {
        let sent = baseline.with_grad_comm(grad_comm);
        simulate(&sim_buckets(&sent), &target.costs, &target.link, target.world, true)
    };
    let state = if sharded { " for sharded optimizer state" } else { "" };
    let notes = vec![
        format!("buckets chosen by {description}{state}:"),
        prediction_line("predicted step", &predicted),
        prediction_line("with DDP's 25 MiB cap", &with_caps),
    ];
    let input_file = input_file.map(|f: PathBuf| f.display().to_string());
    Some(Planned { schedule, notes, input_file, target: Some(target) })
}

fn prediction_line(what: &str, p: &Prediction) -> String {
    format!(
        "{what}: {:.3} ms (compute {:.3} ms, all-reduce {:.3} ms, exposed {:.3} ms, efficiency {:.1}%)",
        p.step_s * 1e3,
        p.compute_s() * 1e3,
        p.comm_s * 1e3,
        p.exposed_s * 1e3,
        p.efficiency() * 100.0
    )
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn auto_gflops(value: Expr) -> Result<f64, usize> {
        let mut errors = Errors::default();
        match parse(&value, &mut errors) {
            Some(Planning::Auto { gflops, .. }) => Ok(gflops),
            _ => Err(errors.len()),
        }
    }

    #[test]
    fn a_key_given_twice_is_an_error_at_each_repetition() {
        let twice = parse_quote!(auto(
            link = "ib-hdr",
            link = "10gbe",
            world = 1,
            world = 64,
            batch = 1,
            batch = 2,
            gflops = 1,
            gflops = 2
        ));
        assert_eq!(auto_gflops(twice), Err(4));
        let mut errors = Errors::default();
        assert!(parse(&parse_quote!(profile("p.json", world = 2, world = 2)), &mut errors).is_none());
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn gflops_is_a_device_speed() {
        for bad in [parse_quote!(1e-300), parse_quote!(0.0009), parse_quote!(1e9), parse_quote!(-5)] {
            let bad: Expr = bad;
            assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = #bad))), Err(1), "{bad:?}");
        }
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = 0.001))), Ok(0.001));
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = 1e8))), Ok(1e8));
    }

    #[test]
    fn gflops_reads_numbers_as_every_other_key_does() {
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = 1_000))), Ok(1000.0));
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = 100u32))), Ok(100.0));
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = 2_5.5e1f64))), Ok(255.0));
        assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, batch = 1_024))), Ok(100.0));
        for bad in [parse_quote!(0), parse_quote!(0.0), parse_quote!("100"), parse_quote!(1e400)] {
            let bad: Expr = bad;
            assert_eq!(auto_gflops(parse_quote!(auto(link = "ib-hdr", world = 8, gflops = #bad))), Err(1), "{bad:?}");
        }
    }
}
