//! The profile file: per-layer seconds a run measured (`--write-profile`), from which
//! `buckets = profile("...")` plans. One type for the runtime that writes it and the macro that
//! reads it, so that the two cannot disagree on the format.
//!
//! Format `overlap-profile/1`, as JSON: `{"format", "model", "world_size", "batch",
//! "link": {"latency_s", "bandwidth_bytes_per_s"} | null, "update_s_per_byte",
//! "layers": [{"name", "forward_s", "backward_s"}]}`. A hand-written profile may leave out
//! `model`, `batch`, `world_size` and `link`; planning then needs the last two from the macro.

use serde::{Deserialize, Serialize};

use crate::auto::Target;
use crate::link::Link;
use crate::schedule::Schedule;
use crate::simulate::StepCosts;
use crate::spec::LayerSpec;

/// The `format` every profile states; a file with any other is refused, never misread.
pub const PROFILE_FORMAT: &str = "overlap-profile/1";

/// What one run measured about its model's layers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The model measured (informative: the layer names are what must match).
    #[serde(default)]
    pub model: String,
    /// Ranks of the measured run.
    pub world_size: Option<usize>,
    /// Samples per rank per step.
    pub batch: Option<usize>,
    /// The link the run emulated, if any.
    pub link: Option<Link>,
    /// The optimizer's update seconds per byte of gradients.
    pub update_s_per_byte: f64,
    /// Every layer, in definition order.
    pub layers: Vec<LayerTimes>,
}

/// One layer's forward and backward seconds per step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerTimes {
    /// The layer's path (e.g. `fc1`, `blocks.3.fc1`), which must match the model's layer at the
    /// same position.
    pub name: String,
    /// Seconds of its forward per step.
    pub forward_s: f64,
    /// Seconds of its backward per step.
    pub backward_s: f64,
}

/// The file as read: every key one of the format's, each once (a misspelt `world_size` would
/// otherwise be dropped unseen, and a repeated one silently win).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Read {
    /// Checked before (`from_json`).
    #[allow(dead_code)]
    format: serde::de::IgnoredAny,
    #[serde(default)]
    model: String,
    world_size: Option<usize>,
    batch: Option<usize>,
    link: Option<Link>,
    update_s_per_byte: f64,
    layers: Vec<LayerTimes>,
}

/// The file as written: the format first, then the profile's fields.
#[derive(Serialize)]
struct Versioned<'a> {
    format: &'static str,
    #[serde(flatten)]
    profile: &'a Profile,
}

impl Profile {
    /// The profile of a run of `schedule`'s model that measured `costs`.
    pub fn measured(
        schedule: &Schedule,
        costs: &StepCosts,
        world_size: usize,
        batch: usize,
        link: Option<Link>,
    ) -> Self {
        let times = costs.forward_s.iter().zip(&costs.backward_s);
        Profile {
            model: schedule.model.to_string(),
            world_size: Some(world_size),
            batch: Some(batch),
            link,
            update_s_per_byte: costs.update_s_per_byte,
            layers: schedule
                .layers
                .iter()
                .zip(times)
                .map(|(l, (&forward_s, &backward_s))| LayerTimes { name: l.name.to_string(), forward_s, backward_s })
                .collect(),
        }
    }

    /// The file's text: pretty JSON, ending with a newline.
    pub fn to_json(&self) -> String {
        let versioned = Versioned { format: PROFILE_FORMAT, profile: self };
        // A struct of strings, numbers and options always serialises.
        serde_json::to_string_pretty(&versioned).unwrap_or_default() + "\n"
    }

    /// Reads a profile file's text: refused when it is not JSON, states another format, lacks a
    /// field, or has a key it does not know or a key twice.
    pub fn from_json(text: &str) -> Result<Profile, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if value.get("format").and_then(serde_json::Value::as_str) != Some(PROFILE_FORMAT) {
            let found = value.get("format").map_or("missing".to_string(), ToString::to_string);
            return Err(format!("format is {found}, expected \"{PROFILE_FORMAT}\""));
        }
        let read: Read = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Read { model, world_size, batch, link, update_s_per_byte, layers, .. } = read;
        Ok(Profile { model, world_size, batch, link, update_s_per_byte, layers })
    }

    /// What to plan `layers` for: the measured costs on the profile's cluster, with `link` and
    /// `world` (when given) in place of the run's own. Every way the profile does not fit
    /// `layers`, or lacks a number planning needs, is in the error, separated by `; `.
    pub fn target(&self, layers: &[LayerSpec], link: Option<Link>, world: Option<usize>) -> Result<Target, String> {
        let mut problems = Vec::new();
        if self.layers.len() != layers.len() {
            problems.push(format!("it has {} layers, the model has {}", self.layers.len(), layers.len()));
        }
        let (mut forward_s, mut backward_s) = (Vec::new(), Vec::new());
        for (i, (times, layer)) in self.layers.iter().zip(layers).enumerate() {
            if times.name != layer.name {
                problems.push(format!("layer {i} is \"{}\", the model's is `{}`", times.name, layer.name));
            }
            forward_s.push(seconds(
                times.forward_s,
                LONGEST_LAYER_S,
                || format!("layers[{i}].forward_s"),
                &mut problems,
            ));
            backward_s.push(seconds(
                times.backward_s,
                LONGEST_LAYER_S,
                || format!("layers[{i}].backward_s"),
                &mut problems,
            ));
        }
        let update = self.update_s_per_byte;
        let update_s_per_byte =
            seconds(update, LONGEST_UPDATE_S_PER_BYTE, || "update_s_per_byte".into(), &mut problems);
        if let Some(l) = self.link {
            seconds(l.latency_s, crate::link::LONGEST_LATENCY_S, || "link.latency_s".into(), &mut problems);
            // As `--link` and `link = ".."` refuse it: at least 1 byte per second.
            let bandwidth = l.bandwidth_bytes_per_s;
            if !(bandwidth.is_finite() && bandwidth >= crate::link::LOWEST_BANDWIDTH) {
                problems.push(format!(
                    "link.bandwidth_bytes_per_s is {bandwidth}, expected at least {} (1 byte per second)",
                    crate::link::LOWEST_BANDWIDTH
                ));
            }
        }
        if let Some(w) = self.world_size.filter(|&w| w > crate::simulate::MAX_WORLD) {
            problems.push(format!("world_size is {w}, expected at most {}", crate::simulate::MAX_WORLD));
        }
        let world = world.or(self.world_size.filter(|&w| w > 0));
        let link = link.or(self.link);
        if world.is_none() {
            problems.push("it has no world size: add `world = <ranks>`".to_string());
        }
        if link.is_none() {
            problems.push("the run emulated no link: add `link = \"ib-hdr\"` (or another)".to_string());
        }
        match (link, world) {
            (Some(link), Some(world)) if problems.is_empty() => {
                Ok(Target { costs: StepCosts { forward_s, backward_s, update_s_per_byte }, link, world })
            }
            _ => Err(problems.join("; ")),
        }
    }
}

/// A layer's forward or backward time at most: a day. Longer is no measurement of a step, and
/// the simulator's sums of such times would stop being finite.
const LONGEST_LAYER_S: f64 = 86_400.0;
/// The optimizer update's time per byte of parameters at most: a second.
const LONGEST_UPDATE_S_PER_BYTE: f64 = 1.0;

/// `value` (as 0 where it is `-0`), with a problem recorded unless it is a number of seconds from
/// zero to `longest`.
fn seconds(value: f64, longest: f64, what: impl FnOnce() -> String, problems: &mut Vec<String>) -> f64 {
    if !(value.is_finite() && value >= 0.0) {
        problems.push(format!("{} is {value}, expected a non-negative number", what()));
    } else if value > longest {
        // `1e308`, not three hundred digits.
        let shown = if value >= 1e9 { format!("{value:e}") } else { value.to_string() };
        problems.push(format!("{} is {shown}, expected at most {longest}", what()));
    }
    value.abs()
}

#[cfg(test)]
mod tests;
