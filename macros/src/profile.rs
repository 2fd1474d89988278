//! Reads a profile that a run wrote with `--write-profile` (format `overlap-profile/1`, written
//! by `overlap_runtime::profile`): measured per-layer forward and backward seconds, the
//! optimizer's cost per byte, and the world size and link of that run.

use std::path::PathBuf;

use overlap_plan::{LayerSpec, Link, StepCosts, Target};
use serde_json::Value;
use syn::LitStr;

use crate::errors::Errors;

const FORMAT: &str = "overlap-profile/1";

/// The optimisation target the profile describes, with `link`/`world` overriding the run's own,
/// and the absolute path read. Every problem goes to `errors`, spanned on the path literal.
pub fn read(
    path: &LitStr,
    link: Option<Link>,
    world: Option<usize>,
    layers: &[LayerSpec],
    errors: &mut Errors,
) -> Option<(Target, PathBuf)> {
    let base = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default();
    let file = base.join(path.value());
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => {
            errors.spanned(path, format!("cannot read profile {}: {e}", file.display()));
            return None;
        }
    };
    let json: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            errors.spanned(path, format!("{} is not JSON: {e}", file.display()));
            return None;
        }
    };
    let mut problems = Vec::new();
    if json["format"] != FORMAT {
        problems.push(format!("format is {}, expected \"{FORMAT}\"", json["format"]));
    }
    let number = |v: &Value, what: &str, problems: &mut Vec<String>| match v.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => x,
        _ => {
            problems.push(format!("{what} is {v}, expected a non-negative number"));
            0.0
        }
    };
    let entries = json["layers"].as_array().cloned().unwrap_or_default();
    if entries.len() != layers.len() {
        problems.push(format!("it has {} layers, the model has {}", entries.len(), layers.len()));
    }
    let (mut forward_s, mut backward_s) = (Vec::new(), Vec::new());
    for (i, (entry, layer)) in entries.iter().zip(layers).enumerate() {
        if entry["name"].as_str() != Some(&*layer.name) {
            problems.push(format!("layer {i} is {}, the model's is `{}`", entry["name"], layer.name));
        }
        forward_s.push(number(&entry["forward_s"], &format!("layers[{i}].forward_s"), &mut problems));
        backward_s.push(number(&entry["backward_s"], &format!("layers[{i}].backward_s"), &mut problems));
    }
    let update_s_per_byte = number(&json["update_s_per_byte"], "update_s_per_byte", &mut problems);
    let measured_link = match &json["link"] {
        Value::Null => None,
        l => Some(Link {
            latency_s: number(&l["latency_s"], "link.latency_s", &mut problems),
            bandwidth_bytes_per_s: number(&l["bandwidth_bytes_per_s"], "link.bandwidth_bytes_per_s", &mut problems),
        }),
    };
    let world = world.or_else(|| json["world_size"].as_u64().map(|w| w as usize).filter(|&w| w > 0));
    let link = link.or(measured_link);
    if world.is_none() {
        problems.push("it has no world size: add `world = <ranks>`".into());
    }
    if link.is_none() {
        problems.push("the run emulated no link: add `link = \"ib-hdr\"` (or another)".into());
    }
    if !problems.is_empty() {
        errors.spanned(path, format!("profile {} does not fit this model: {}", file.display(), problems.join("; ")));
        return None;
    }
    let costs = StepCosts { forward_s, backward_s, update_s_per_byte };
    Some((Target { costs, link: link?, world: world? }, file))
}
