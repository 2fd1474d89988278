//! What a run reports about itself as it goes (the loss lines) and at its end (the summary).

use std::time::{Duration, Instant};

use crate::comm::{CommMode, Communicator, PendingSum};
use crate::config::TrainConfig;
use crate::error::Result;

/// What a run did, as rank 0 reports it.
#[derive(Clone, Debug)]
pub struct TrainSummary {
    /// Steps run by this call (fewer than `TrainConfig::steps` after a resume).
    pub steps: u64,
    /// Ranks that trained.
    pub world_size: usize,
    /// The global mean loss of the first and the last step run.
    pub first_loss: f64,
    /// (See `first_loss`.)
    pub final_loss: f64,
    /// The median wall time of this rank's steps.
    pub median_step: Duration,
    /// Samples per second over all ranks, from the median step time.
    pub samples_per_sec: f64,
    /// The last held-out loss measured, when the run validates (`Trainer::validate`).
    pub validation_loss: Option<f64>,
}

impl TrainSummary {
    /// From the per-step times of the steps run and the losses `log` kept.
    pub(crate) fn new(config: &TrainConfig, world_size: usize, log: &LossLog, step_times: Vec<Duration>) -> Self {
        // The report's median: the mean of the two middle values for an even count.
        let median_step = Duration::from_secs_f64(crate::trace::median(step_times.iter().map(Duration::as_secs_f64)));
        TrainSummary {
            steps: step_times.len() as u64,
            world_size,
            first_loss: log.first,
            final_loss: log.last,
            median_step,
            samples_per_sec: config.global_batch(world_size) as f64 / median_step.as_secs_f64().max(f64::MIN_POSITIVE),
            validation_loss: log.validation,
        }
    }

    /// The closing line rank 0 prints.
    pub fn describe(&self, mode: CommMode) -> String {
        let validation = self.validation_loss.map(|v| format!(" (validation {v:.4})")).unwrap_or_default();
        let steps = if self.steps == 1 { "step" } else { "steps" };
        format!(
            "done: {} {steps} on {} rank(s) ({}), loss {:.4} -> {:.4}{validation}, median step {:.1} ms, {} samples/s",
            self.steps,
            self.world_size,
            mode.name(),
            self.first_loss,
            self.final_loss,
            self.median_step.as_secs_f64() * 1e3,
            crate::figures::three_digits(self.samples_per_sec),
        )
    }
}

/// The first and last global losses logged, and the last held-out one.
pub(crate) struct LossLog {
    pub first_step: u64,
    pub first: f64,
    pub last: f64,
    pub validation: Option<f64>,
    /// When the run's first step began, for the time left that each line estimates.
    began: Instant,
}

impl LossLog {
    pub(crate) fn new(first_step: u64) -> Self {
        LossLog { first_step, first: f64::NAN, last: f64::NAN, validation: None, began: Instant::now() }
    }

    pub(crate) fn validated(&mut self, loss: f64) {
        self.validation = Some(loss);
    }

    /// Averages the step's loss over ranks (`summed`: every rank's mean over its micro-steps,
    /// summed over ranks, as `start_sum_f64` began it during the step), keeps it, and returns the
    /// step's log line: the step of the total, the loss (and the gradient norm, when the run
    /// clips: the same on every rank), the throughput since `started`, and the time the steps
    /// left would take at the run's pace so far.
    pub(crate) fn record(
        &mut self,
        config: &TrainConfig,
        comm: &Communicator,
        step: u64,
        summed: PendingSum,
        grad_norm: Option<f32>,
        started: Instant,
    ) -> Result<String> {
        let world = comm.world_size();
        let global = comm.finish_sum(summed)? / world as f64;
        if step == self.first_step {
            self.first = global;
        }
        self.last = global;
        let rate = config.global_batch(world) as f64 / started.elapsed().as_secs_f64();
        let norm = grad_norm.map(|n| format!("  grad norm {n:.3}")).unwrap_or_default();
        let (done, left) = (step + 1 - self.first_step, config.steps.saturating_sub(step + 1));
        let eta = if left == 0 {
            String::new()
        } else {
            format!("  eta {}", in_words(self.began.elapsed().as_secs_f64() / done as f64 * left as f64))
        };
        let rate = crate::figures::three_digits(rate);
        Ok(format!("step {:>6}/{}  loss {global:.4}{norm}  {rate:>8} samples/s{eta}", step + 1, config.steps))
    }
}

/// `seconds` as a log line says it: `42s`, `5m07s`, `2h03m`.
fn in_words(seconds: f64) -> String {
    let s = seconds.round().min(u64::MAX as f64) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_reads_as_a_person_would_say_it() {
        let said = [0.4, 42.0, 307.0, 3599.6, 7380.0, 1e30].map(in_words);
        assert_eq!(said, ["0s", "42s", "5m07s", "1h00m", "2h03m", "5124095576030431h00m"]);
    }

    /// The last line's median step is the report's: the two middle steps averaged, so that a run
    /// of 2 steps does not report its warm-up step alone.
    #[test]
    fn the_median_step_of_an_even_count_averages_the_two_middle_ones() {
        let ms = Duration::from_millis;
        let config = TrainConfig::default();
        let two = TrainSummary::new(&config, 1, &LossLog::new(0), vec![ms(130), ms(30)]);
        assert_eq!(two.median_step, ms(80));
        let three = TrainSummary::new(&config, 1, &LossLog::new(0), vec![ms(130), ms(30), ms(40)]);
        assert_eq!(three.median_step, ms(40));
    }
}
