//! The library names a run's settings as their fields (`TrainConfig::batch`,
//! `CommConfig::check_finite`; the list is `overlap_runtime::config::SETTING_NAMES`); a user of
//! the command line set them with flags, so its messages name the flags instead.

/// Each setting the library's messages name, and the flag that sets it; a setting that is
/// several flags is named with its value (longer entries first).
const FLAGS: &[(&str, &str)] = &[
    ("`TrainConfig::steps`", "--steps"),
    ("`TrainConfig::batch`", "--batch"),
    ("`TrainConfig::accumulate`", "--accumulate"),
    ("`TrainConfig::threads`", "--threads"),
    ("`TrainConfig::log_every`", "--log-every"),
    ("`TrainConfig::save_params`", "--save-params"),
    ("`TrainConfig::resume`", "--resume"),
    ("`TrainConfig::device`", "--device"),
    ("`TrainConfig::device.gpu`", "--gpu"),
    ("`SaveConfig::dir`", "--save"),
    ("`SaveConfig::overwrite`", "--overwrite"),
    ("`SaveConfig::every`", "--save-every"),
    ("`ValidationConfig::batches`", "--eval-batches"),
    ("`ObserveConfig::report`", "--report"),
    ("`ObserveConfig::report_every`", "--report-every"),
    ("`ObserveConfig::trace`", "--trace"),
    ("`ObserveConfig::timeline`", "--timeline"),
    ("`ObserveConfig::write_profile`", "--write-profile"),
    ("`ObserveConfig::simulate`", "--simulate"),
    ("`CommConfig::link`", "--link"),
    ("`CommConfig::transport`", "--all-reduce"),
    // The mode is two flags: named with its value.
    ("`CommConfig::mode` compute-only", "--compute-only"),
    ("`CommConfig::mode` no-overlap", "--no-overlap"),
    ("`CommConfig::mode`", "--no-overlap/--compute-only"),
    ("`CommConfig::wait_timeout`", "--comm-timeout"),
    ("`CommConfig::check_finite`", "--check-finite"),
    ("`CommConfig::grad_comm`", "--grad-comm"),
    // Sharding is two flags: turned off, named with its value.
    ("`CommConfig::shard_optimizer` false", "--no-shard-optimizer"),
    ("`CommConfig::shard_optimizer` left unset", "--shard-optimizer left out"),
    ("`CommConfig::shard_optimizer`", "--shard-optimizer"),
    ("`OptimizerConfig::kind`", "--optimizer"),
    ("`OptimizerConfig::lr`", "--lr"),
    ("`OptimizerConfig::momentum`", "--momentum"),
    ("`OptimizerConfig::weight_decay`", "--weight-decay"),
    ("`OptimizerConfig::betas`", "--beta1/--beta2"),
    ("`OptimizerConfig::eps`", "--eps"),
    ("`OptimizerConfig::decay_on`", "--decay-on"),
    ("`OptimizerConfig::lr_schedule`", "--lr-schedule"),
    ("`OptimizerConfig::clip_grad_norm`", "--clip-grad-norm"),
    ("`TrainConfig::validation`", "--eval-every"),
    ("`DropoutConfig::rate`", "--dropout"),
    ("`DropoutConfig::seed`", "--seed"),
];

/// `message` with every setting named by its flag.
pub fn in_flag_terms(message: &str) -> String {
    FLAGS.iter().fold(message.to_string(), |text, (setting, flag)| text.replace(setting, flag))
}

/// `error`, when it is a file the flag `flag` names that cannot be read, saying so (`--text
/// notes: Is a directory`, `--init-params notes.txt: not a safetensors file (..)`) rather than
/// naming the path alone.
pub fn naming(flag: &str, error: overlap_runtime::Error) -> overlap_runtime::Error {
    match error {
        overlap_runtime::Error::Io { path, source } => {
            overlap_runtime::Error::Config(format!("{flag} {}: {source}", path.display()))
        }
        // Its message starts with the path.
        overlap_runtime::Error::Safetensors(message) => overlap_runtime::Error::Config(format!("{flag} {message}")),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overlap_runtime::config::SETTING_NAMES;

    #[test]
    fn every_setting_the_library_names_has_its_flag() {
        let mapped: Vec<&str> = FLAGS.iter().map(|(setting, _)| *setting).collect();
        for setting in SETTING_NAMES {
            assert!(mapped.iter().any(|m| m.starts_with(setting)), "no flag for {setting}");
        }
        for setting in mapped {
            assert!(
                SETTING_NAMES.iter().any(|s| setting.starts_with(s)),
                "{setting}: the library names no such setting"
            );
        }
    }

    #[test]
    fn messages_name_the_flags() {
        let message = "`TrainConfig::accumulate` 4 with `TrainConfig::batch` 64 (`CommConfig::wait_timeout`); \
                       `TrainConfig::device.gpu` and `TrainConfig::device` cuda";
        assert_eq!(in_flag_terms(message), "--accumulate 4 with --batch 64 (--comm-timeout); --gpu and --device cuda");
    }
}
