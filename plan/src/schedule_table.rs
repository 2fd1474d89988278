//! The schedule as a table (`Display`): one line per bucket in launch order, what travels and
//! how, the sharded state's all-gathers and tied weights. `--print-schedule` prints it, and the
//! generated `backward`'s doc comment is it.

use std::fmt;

use crate::limits::BucketLimits;
use crate::schedule::{BucketInfo, Schedule};
use crate::spec::MIB;

/// Human-readable size: `512 B`, `4.0 KiB`, `16.01 MiB`.
pub fn human_bytes(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    } else if bytes >= 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// The bucket table, one line per bucket in launch order; also the doc comment on the
/// generated `backward`.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limits = match self.limits {
            BucketLimits::Capped { first_bucket_bytes, bucket_cap_bytes } => format!(
                "first bucket closes at {}, others at {}",
                human_bytes(first_bucket_bytes),
                human_bytes(bucket_cap_bytes)
            ),
            BucketLimits::Unlimited => "boundaries chosen by the cost model, no size caps".to_string(),
        };
        writeln!(
            f,
            "schedule of {}: {} bucket{}, {} parameters ({}), {limits}",
            self.model,
            self.buckets.len(),
            if self.buckets.len() == 1 { "" } else { "s" },
            self.param_count(),
            human_bytes(self.total_bytes()),
        )?;
        // FP32 schedules keep their table; narrow ones add what travels.
        let narrows = self.narrows();
        if narrows {
            let how = match self.buckets.iter().find_map(|b| b.low_rank) {
                Some(l) => format!(
                    "as rank-{} PowerSGD factors with error feedback (whole for the first {} steps)",
                    l.rank, l.start_iter
                ),
                None => "narrowed, summed in FP32".to_string(),
            };
            writeln!(
                f,
                "gradients travel {how}: {} on the wire per rank instead of {} ({:.1}x fewer bytes)",
                human_bytes(self.total_wire_bytes()),
                human_bytes(self.total_bytes()),
                self.total_bytes() as f64 / self.total_wire_bytes().max(1) as f64
            )?;
        }
        if self.shard_optimizer {
            writeln!(
                f,
                "optimizer state sharded: each bucket is reduce-scattered, each rank updates its own 1/N slice \
                 (balanced to the element) with state for it alone, and the updated slices are all-gathered in \
                 the next forward, each waited for right before the first layer that reads it"
            )?;
        }
        if !self.gathers.is_empty() {
            let groups: Vec<String> = self
                .gathers
                .iter()
                .map(|g| {
                    let part = if g.end - g.start == self.buckets[g.bucket].numel {
                        String::new()
                    } else {
                        format!("[{}..{}]", g.start, g.end)
                    };
                    format!("b{}{part} before {}", g.bucket, self.layers[g.first_read].name)
                })
                .collect();
            writeln!(f, "all-gathers of sharded state, in launch order: {}", groups.join(", "))?;
        }
        let wire_header = if narrows { format!(" {:>17}", "on the wire") } else { String::new() };
        let after = |b: &BucketInfo| format!("{}.backward", self.layers[b.launch_after].name);
        // As wide as the longest launch point (deep block paths), so that the columns line up.
        let width = self.buckets.iter().map(|b| after(b).len()).max().unwrap_or(0).max(25);
        writeln!(
            f,
            "{:<7} {:<width$} {:>11}{wire_header}  members (buffer order)",
            "bucket", "all-reduce launched after", "bytes"
        )?;
        for (k, b) in self.buckets.iter().enumerate() {
            let members: Vec<String> = b.params.iter().map(|&r| self.param_name(r)).collect();
            let after = after(b);
            let wire = if narrows {
                let format = match b.low_rank {
                    Some(l) => format!("rank {}", l.rank),
                    None => b.wire.to_string(),
                };
                format!(" {:>17}", format!("{format} {}", human_bytes(self.wire_bytes(k))))
            } else {
                String::new()
            };
            writeln!(
                f,
                "{:<7} {:<width$} {:>11}{wire}  {}",
                format!("b{k}"),
                after,
                human_bytes(b.bytes()),
                members.join(", ")
            )?;
        }
        for (i, layer) in self.layers.iter().enumerate() {
            if let Some(t) = layer.tied {
                writeln!(
                    f,
                    "tied: {} reads {} as its weight; its gradient adds to that parameter's in b{} before the \
                     all-reduce launched after {}.backward",
                    self.layers[i].name,
                    self.param_name(t),
                    self.param(t).bucket,
                    self.layers[self.buckets[self.param(t).bucket].launch_after].name
                )?;
            }
        }
        Ok(())
    }
}
