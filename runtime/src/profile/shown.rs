//! The predictions of `--simulate` as people and scripts read them: a table, and a line of
//! JSON under `--report json`.

use std::fmt::Write as _;

use overlap_plan::Prediction;

use super::cluster::Cluster;

/// `prediction_table` as one line of JSON, for `--report json`: the cluster (its link also in
/// numbers) and one object per plan, times in milliseconds, efficiency a fraction (the table's
/// percentage over 100).
pub fn prediction_json(model: &str, cluster: Cluster, rows: &[(String, usize, Prediction)]) -> String {
    let plans: Vec<serde_json::Value> = rows
        .iter()
        .map(|(name, buckets, p)| {
            serde_json::json!({
                "plan": name,
                "buckets": buckets,
                "step_ms": p.step_s * 1e3,
                "all_reduce_ms": p.comm_s * 1e3,
                "exposed_ms": p.exposed_s * 1e3,
                "efficiency": p.efficiency(),
            })
        })
        .collect();
    let simulated = serde_json::json!({
        "model": model,
        "world_size": cluster.world,
        "link": cluster.link.to_string(),
        "latency_s": cluster.link.latency_s,
        "bandwidth_bytes_per_s": cluster.link.bandwidth_bytes_per_s,
        "plans": plans,
    });
    serde_json::json!({ "simulated": simulated }).to_string()
}

/// The predictions as a table.
pub fn prediction_table(model: &str, cluster: Cluster, rows: &[(String, usize, Prediction)]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "simulated {model} on {} ranks, link {} (per-layer times measured in this run):",
        cluster.world, cluster.link
    );
    // Columns keep a space between them however wide a number grows (an hour of latency).
    let _ = writeln!(
        t,
        "  {:<48} {:>7} {:>11} {:>13} {:>11} {:>11}",
        "plan", "buckets", "step ms", "all-reduce ms", "exposed ms", "efficiency"
    );
    for (name, buckets, p) in rows {
        let _ = writeln!(
            t,
            "  {name:<48} {buckets:>7} {:>11.2} {:>13.2} {:>11.2} {:>10.1}%",
            p.step_s * 1e3,
            p.comm_s * 1e3,
            p.exposed_s * 1e3,
            p.efficiency() * 100.0
        );
    }
    t
}
