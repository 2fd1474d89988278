//! The medians the report, the timeline and the measured costs take over steps.

use super::breakdown::StepBreakdown;

/// The middle value (the mean of the two middle ones for an even count); 0 for none.
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Over `steps` (each one step's breakdowns, a rank's each): the median over steps of the ranks'
/// mean of `f`, from nanoseconds to milliseconds.
pub(crate) fn median_of_rank_means(steps: &[&[StepBreakdown]], f: &dyn Fn(&StepBreakdown) -> u64) -> f64 {
    median(steps.iter().map(|s| s.iter().map(f).sum::<u64>() as f64 / s.len() as f64 / 1e6))
}
