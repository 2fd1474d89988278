//! What PyTorch did with the gradients of small twins of the tests' models
//! (`tests/fixtures/ddp_buckets.json`, written by `tests/fixtures/ddp_buckets.py`): the order its
//! post-accumulate-grad hooks fired in, and the buckets DDP handed to a communication hook, in
//! its first step (`find_unused_parameters=True`) and after rebuilding them. Our plans are
//! compared with these observations, not with orders worked out by hand.

use overlap::plan::{BucketLimits, Schedule};
use serde_json::Value;

/// The observations for one twin (`chain`, `tiny_gpt`).
pub struct Observed {
    /// Parameter names in the order their gradients became ready.
    pub ready_order: Vec<String>,
    /// DDP's buckets in its first step, in the order it launched them, members in buffer order.
    pub first_iteration: Vec<Vec<String>>,
    /// DDP's rebuilt buckets, likewise.
    pub rebuilt: Vec<Vec<String>>,
    /// The cap DDP ran with (`bucket_cap_mb`), which the Rust model is compiled with too, and
    /// the bytes DDP made of it.
    pub bucket_cap_mb: f64,
    pub bucket_cap_bytes: usize,
}

pub fn observed(model: &str) -> Observed {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ddp_buckets.json"))
        .expect("the fixture is in the repository");
    let all: Value = serde_json::from_str(&text).expect("the fixture is JSON");
    let m = &all["models"][model];
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("a list in {v}"))
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let buckets =
        |v: &Value| -> Vec<Vec<String>> { v.as_array().expect("a list of buckets").iter().map(names).collect() };
    Observed {
        ready_order: names(&m["ready_order"]),
        first_iteration: buckets(&m["first_iteration"]),
        rebuilt: buckets(&m["rebuilt"]),
        bucket_cap_mb: m["bucket_cap_mb"].as_f64().unwrap_or_else(|| panic!("{model} in the fixture")),
        bucket_cap_bytes: m["bucket_cap_bytes"].as_u64().expect("DDP's cap in bytes") as usize,
    }
}

impl Observed {
    /// Checks that `schedule` is DDP's plan of the twin: the caps it was compiled with are the
    /// bytes DDP made of the same MiB (first bucket included), and its buckets are DDP's
    /// (`first_iteration` when it was compiled with `bucket_order = ddp_first_iteration`, else
    /// the rebuilt ones, whose members, in order, are the ready order).
    pub fn check(&self, schedule: &Schedule, first_iteration: bool) {
        let cap = self.bucket_cap_bytes;
        let limits = BucketLimits::Capped { first_bucket_bytes: cap, bucket_cap_bytes: cap };
        assert_eq!(schedule.limits, limits, "DDP's caps for {} MiB", self.bucket_cap_mb);
        let ours = buckets(schedule);
        if first_iteration {
            assert_eq!(ours, self.first_iteration, "DDP's first-iteration buckets");
        } else {
            assert_eq!(ours, self.rebuilt, "DDP's rebuilt buckets");
            assert_eq!(ours.concat(), self.ready_order, "PyTorch's ready order");
        }
    }
}

/// A plan's buckets in launch order, each its members' names in buffer order.
pub fn buckets(schedule: &Schedule) -> Vec<Vec<String>> {
    schedule.buckets.iter().map(|b| b.params.iter().map(|&p| schedule.param_name(p)).collect()).collect()
}
