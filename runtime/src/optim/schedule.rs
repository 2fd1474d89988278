//! Which parameters decay (`DecayOn`), and the learning rate over a run: constant, or nanoGPT's linear warm-up and cosine decay to a
//! minimum (`get_lr` in its `train.py`), evaluated per optimizer step from the base rate of
//! `OptimizerConfig::lr`. The step index is 0-based, as nanoGPT's `iter_num`, so a resumed run
//! continues the schedule where it stopped.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

/// Which parameters weight decay applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecayOn {
    /// Every parameter (PyTorch's optimizers given `model.parameters()`).
    #[default]
    All,
    /// Only parameters of two or more dimensions: weight matrices and embeddings, not biases or
    /// LayerNorm's gains (nanoGPT's `configure_optimizers` parameter groups).
    Matrices,
}

/// The parameters an optimizer does not decay, by index (`DecayOn::Matrices` exempts the
/// vectors), as a PyTorch parameter group with `weight_decay` 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DecayExemptions(Vec<bool>);

impl DecayExemptions {
    pub(crate) fn insert(&mut self, index: usize) {
        if index >= self.0.len() {
            self.0.resize(index + 1, false);
        }
        self.0[index] = true;
    }

    pub(crate) fn contains(&self, index: usize) -> bool {
        self.0.get(index).copied().unwrap_or(false)
    }
}

/// The learning rate over a run, as a function of the 0-based step and the base rate
/// (`OptimizerConfig::lr_schedule`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum LrSchedule {
    /// The base rate on every step.
    #[default]
    Constant,
    /// `base · (step + 1) / (warmup + 1)` for the first `warmup` steps; then a cosine from the
    /// base rate down to `min_lr`, reached at step `decay_until`; `min_lr` after it.
    WarmupCosine {
        /// Steps of linear warm-up (nanoGPT's `warmup_iters`).
        warmup: u64,
        /// The step the cosine reaches `min_lr` at (nanoGPT's `lr_decay_iters`); after `warmup`.
        decay_until: u64,
        /// The rate after the decay, absolute rather than a fraction of the base (nanoGPT's `min_lr`).
        min_lr: f64,
    },
}

impl LrSchedule {
    /// The rate of 0-based step `step`, from the base rate `base`.
    pub fn lr(&self, base: f64, step: u64) -> f64 {
        match *self {
            LrSchedule::Constant => base,
            LrSchedule::WarmupCosine { warmup, decay_until, min_lr } => {
                // In f64 throughout, so that settings `problem` refuses give a rate, not an
                // overflow or 0/0 (nanoGPT's rates below 2^53 steps are the same).
                if step < warmup {
                    return base * (step as f64 + 1.0) / (warmup as f64 + 1.0);
                }
                if step > decay_until {
                    return min_lr;
                }
                let ratio = (step - warmup) as f64 / (decay_until.saturating_sub(warmup)).max(1) as f64;
                let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
                min_lr + coeff * (base - min_lr)
            }
        }
    }

    /// What a run of `steps` steps from the base rate `base` should be told: a warm-up that
    /// does not end within it, so that the rate never reaches `base`. Not an error: a run may be
    /// trained in parts, each resumed from the last.
    pub fn unfinished_warm_up(&self, base: f64, steps: u64) -> Option<String> {
        match *self {
            LrSchedule::WarmupCosine { warmup, .. } if steps > 0 && steps <= warmup => Some(format!(
                "the learning rate's warm-up takes {warmup} steps and the run ends after step {steps}: its rate \
                 never reaches {base:e} (the last step's is {:.3e})",
                self.lr(base, steps - 1)
            )),
            _ => None,
        }
    }

    /// What a run of `steps` steps should be told of a decay that ends before it does: its last
    /// steps all run at the minimum rate. Not an error (a tail at the minimum may be meant), but
    /// easily left so by a longer `--steps` alone.
    pub fn decay_ends_early(&self, steps: u64) -> Option<String> {
        match *self {
            LrSchedule::WarmupCosine { warmup, decay_until, min_lr } if steps > decay_until => Some(format!(
                "the learning rate's decay ends at step {decay_until} and the run trains {steps} steps: its last {} \
                 run at the minimum rate {min_lr:e} (the schedule \
                 `cosine:warmup={warmup},until={steps},min={min_lr:e}` would decay over the whole run, as nanoGPT's \
                 lr_decay_iters = max_iters does)",
                steps - decay_until
            )),
            _ => None,
        }
    }

    /// Why these settings cannot be followed, if they cannot.
    pub fn problem(&self) -> Option<String> {
        match *self {
            LrSchedule::Constant => None,
            LrSchedule::WarmupCosine { warmup, decay_until, min_lr } => {
                if decay_until <= warmup {
                    Some(format!(
                        "the decay must end after the warm-up: until step {decay_until}, warm-up {warmup} steps"
                    ))
                } else if !(min_lr.is_finite() && min_lr >= 0.0) {
                    Some(format!("the minimum rate must be a finite number of at least 0, got {min_lr}"))
                } else {
                    None
                }
            }
        }
    }
}

impl fmt::Display for LrSchedule {
    /// As the command line writes it: `constant`, `cosine:warmup=100,until=5000,min=6e-5`.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            LrSchedule::Constant => write!(f, "constant"),
            LrSchedule::WarmupCosine { warmup, decay_until, min_lr } => {
                write!(f, "cosine:warmup={warmup},until={decay_until},min={min_lr:e}")
            }
        }
    }
}

impl FromStr for LrSchedule {
    type Err = ParseError;

    /// `constant`, or `cosine:warmup=W,until=U,min=M` (the keys in any order, each once).
    fn from_str(s: &str) -> Result<Self, ParseError> {
        parse_schedule(s).map_err(ParseError)
    }
}

fn parse_schedule(s: &str) -> Result<LrSchedule, String> {
    if s == "constant" {
        return Ok(LrSchedule::Constant);
    }
    let expected = "expected `constant` or `cosine:warmup=STEPS,until=STEP,min=LR`";
    let Some(fields) = s.strip_prefix("cosine:") else { return Err(format!("`{s}`: {expected}")) };
    let (mut warmup, mut until, mut min) = (None, None, None);
    for field in fields.split(',') {
        let (key, value) = field.split_once('=').ok_or_else(|| match field {
            "" => format!("`{s}` has an empty field: {expected}"),
            _ => format!("`{field}` in `{s}`: {expected}"),
        })?;
        let steps =
            || value.parse::<u64>().map_err(|_| format!("{key}={value}: a step count, a whole number (0 or more)"));
        let slot = match key {
            "warmup" => &mut warmup,
            "until" => &mut until,
            "min" => {
                let lr = value.parse::<f64>().map_err(|e| format!("min={value}: {e}"))?;
                if min.replace(lr).is_some() {
                    return Err(format!("`min` given twice in `{s}`"));
                }
                continue;
            }
            other => return Err(format!("unknown key `{other}` in `{s}`: {expected}")),
        };
        if slot.replace(steps()?).is_some() {
            return Err(format!("`{key}` given twice in `{s}`"));
        }
    }
    let missing: Vec<&str> = [("warmup", warmup.is_none()), ("until", until.is_none()), ("min", min.is_none())]
        .into_iter()
        .filter_map(|(key, absent)| absent.then_some(key))
        .collect();
    if !missing.is_empty() {
        return Err(format!("`{s}` lacks {}: {expected}", missing.join(", ")));
    }
    let schedule = LrSchedule::WarmupCosine {
        warmup: warmup.unwrap_or_default(),
        decay_until: until.unwrap_or_default(),
        min_lr: min.unwrap_or_default(),
    };
    match schedule.problem() {
        Some(problem) => Err(format!("`{s}`: {problem}")),
        None => Ok(schedule),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nanoGPT's `get_lr` with its Shakespeare-character settings (learning_rate 1e-3,
    /// warmup_iters 100, lr_decay_iters 5000, min_lr 1e-4), at the edges of each phase.
    #[test]
    fn follows_nanogpts_warm_up_and_cosine() {
        let s = LrSchedule::WarmupCosine { warmup: 100, decay_until: 5000, min_lr: 1e-4 };
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1e-3);
        assert!(close(s.lr(1e-3, 0), 1e-3 / 101.0));
        assert!(close(s.lr(1e-3, 99), 1e-3 * 100.0 / 101.0));
        assert!(close(s.lr(1e-3, 100), 1e-3), "the cosine starts at the base rate");
        assert!(close(s.lr(1e-3, 2550), 1e-4 + 0.5 * (1e-3 - 1e-4)), "halfway: the mean of the two");
        assert!(close(s.lr(1e-3, 5000), 1e-4) && close(s.lr(1e-3, 9000), 1e-4));
        assert!((100..5000).all(|t| s.lr(1e-3, t) >= s.lr(1e-3, t + 1)), "decreasing after the warm-up");
        assert_eq!(LrSchedule::Constant.lr(0.05, 123), 0.05);
    }

    #[test]
    fn a_warm_up_past_the_run_is_noted() {
        let s = LrSchedule::WarmupCosine { warmup: 100, decay_until: 5000, min_lr: 1e-4 };
        let note = s.unfinished_warm_up(1e-3, 50).unwrap();
        assert!(note.contains("warm-up takes 100 steps and the run ends after step 50"), "{note}");
        assert!(note.contains("never reaches 1e-3 (the last step's is"), "{note}");
        assert_eq!(s.unfinished_warm_up(1e-3, 101), None, "step 101 runs at the base rate");
        assert_eq!(LrSchedule::Constant.unfinished_warm_up(1e-3, 1), None);
    }

    #[test]
    fn a_decay_that_ends_before_the_run_is_noted_with_the_schedule_that_would_not() {
        let s = LrSchedule::WarmupCosine { warmup: 100, decay_until: 2000, min_lr: 1e-4 };
        assert_eq!(s.decay_ends_early(2000), None, "the last step, 1999, is the decay's");
        let note = s.decay_ends_early(5000).unwrap();
        assert!(
            note.starts_with("the learning rate's decay ends at step 2000 and the run trains 5000 steps"),
            "{note}"
        );
        assert!(note.contains("its last 3000 run at the minimum rate 1e-4"), "{note}");
        let suggested: LrSchedule = "cosine:warmup=100,until=5000,min=1e-4".parse().unwrap();
        assert!(note.contains("the schedule `cosine:warmup=100,until=5000,min=1e-4` would decay"), "{note}");
        assert_eq!(suggested.decay_ends_early(5000), None);
        assert_eq!(LrSchedule::Constant.decay_ends_early(5000), None);
    }

    #[test]
    fn a_decay_that_ends_before_the_warm_up_is_a_problem() {
        let bad = LrSchedule::WarmupCosine { warmup: 10, decay_until: 10, min_lr: 0.0 };
        assert!(bad.problem().unwrap().contains("until step 10, warm-up 10 steps"));
        // Its rates are still numbers: no 0/0 where the decay ends at the warm-up, no overflow.
        assert_eq!(bad.lr(1e-3, 10), 1e-3);
        let endless = LrSchedule::WarmupCosine { warmup: u64::MAX, decay_until: 0, min_lr: 0.0 };
        assert!(endless.lr(1e-3, 5).is_finite() && endless.lr(1e-3, 5) > 0.0);
        let negative = LrSchedule::WarmupCosine { warmup: 1, decay_until: 10, min_lr: -1.0 };
        assert!(negative.problem().is_some());
        assert_eq!(
            LrSchedule::WarmupCosine { warmup: 1, decay_until: 10, min_lr: 1e-5 }.to_string(),
            "cosine:warmup=1,until=10,min=1e-5"
        );
    }

    #[test]
    fn parses_what_it_prints_and_names_what_is_wrong() {
        for s in [LrSchedule::Constant, LrSchedule::WarmupCosine { warmup: 100, decay_until: 5000, min_lr: 1e-4 }] {
            assert_eq!(s.to_string().parse::<LrSchedule>(), Ok(s));
        }
        let given = "min=6e-5,until=5000,warmup=100".parse::<LrSchedule>();
        assert!(given.unwrap_err().0.contains("expected `constant` or `cosine:"));
        let order = "cosine:min=6e-5,until=5000,warmup=100".parse::<LrSchedule>().unwrap();
        assert_eq!(order, LrSchedule::WarmupCosine { warmup: 100, decay_until: 5000, min_lr: 6e-5 });
        assert!("cosine:warmup=100".parse::<LrSchedule>().unwrap_err().0.contains("lacks until, min"));
        assert!("cosine:warmup=1,until=2,min=0,warmup=3".parse::<LrSchedule>().unwrap_err().0.contains("given twice"));
        assert!("cosine:warmup=9,until=5,min=0".parse::<LrSchedule>().unwrap_err().0.contains("must end after"));
        assert!("cosine:warmup=-1,until=5,min=0".parse::<LrSchedule>().unwrap_err().0.contains("warmup=-1"));
        assert!("cosine:speed=1".parse::<LrSchedule>().unwrap_err().0.contains("unknown key `speed`"));
        let empty = "cosine:warmup=1,until=9,min=0,".parse::<LrSchedule>().unwrap_err().0;
        assert!(empty.starts_with("`cosine:warmup=1,until=9,min=0,` has an empty field"), "{empty}");
        let bare = "cosine:warmup".parse::<LrSchedule>().unwrap_err().0;
        assert!(bare.starts_with("`warmup` in `cosine:warmup`: expected"), "{bare}");
    }
}
