//! The flags' value parsers: each refuses a bad value with a message that says what it takes,
//! before anything starts (clap names the flag).

use std::time::Duration;

use overlap_runtime::optim::LrSchedule;
use overlap_runtime::plan::Link;
use overlap_runtime::profile::Cluster;
use overlap_runtime::ParseError;

pub(super) fn parse_cluster(s: &str) -> Result<Cluster, String> {
    s.parse().map_err(|e: ParseError| e.0)
}

/// `--comm-timeout`: a bound, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout(pub Option<Duration>);

pub(super) fn parse_timeout(s: &str) -> Result<Timeout, String> {
    match s {
        "off" | "none" => Ok(Timeout(None)),
        _ => parse_duration(s).map(|d| Timeout(Some(d))),
    }
}

/// The longest `--comm-timeout` taken: a bound beyond a year is no bound (`off` says so), and
/// a deadline that far ahead may not be representable as an instant.
pub(super) const LONGEST_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// `60s`, `500ms`, `2m`, `1.5s`: a positive time.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let at = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = (&s[..at], s[at..].trim());
    let value: f64 = number.parse().map_err(|_| format!("`{s}` does not start with a number"))?;
    let seconds = match unit {
        "ms" => value / 1e3,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "" => return Err(format!("`{s}` needs a unit: ms, s, m or h")),
        other => return Err(format!("`{s}`: `{other}` is not a unit taken here (ms, s, m or h)")),
    };
    if seconds > LONGEST_TIMEOUT.as_secs_f64() {
        return Err(format!("`{s}` is too long: at most 8760h (a year); `off` waits as long as the job lives"));
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("`{s}` must be a positive time")),
    }
}

/// `--timeline`: a file whose name says it is SVG, or says nothing (`step.png` would hold SVG
/// under a raster image's name, which viewers then refuse). Any bytes, as a path may hold.
pub(super) fn svg_file(name: std::ffi::OsString) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(name);
    match path.extension() {
        Some(ext) if !ext.eq_ignore_ascii_case("svg") => Err(format!(
            "the timeline is drawn as SVG: give a file name ending in .svg (or without an extension), not `{}`",
            path.file_name().unwrap_or_default().to_string_lossy()
        )),
        _ => Ok(path),
    }
}

pub(super) fn parse_link(s: &str) -> Result<Link, String> {
    s.parse()
}

pub(super) fn parse_lr_schedule(s: &str) -> Result<LrSchedule, String> {
    s.parse().map_err(|e: ParseError| e.0)
}

/// A count of steps, samples or the like, 0 included.
pub(super) fn count<T: std::str::FromStr<Err = std::num::ParseIntError> + std::fmt::Display + Bounded>(
    s: &str,
) -> Result<T, String> {
    s.parse::<T>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("must be at most {}", T::MAX),
        _ => "must be a whole number".into(),
    })
}

/// A count of at least 1.
pub(super) fn positive<T: std::str::FromStr<Err = std::num::ParseIntError> + std::fmt::Display + Bounded>(
    s: &str,
) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(v) if v == T::ZERO => Err("must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(format!("must be at most {}", T::MAX)),
        Err(_) => Err("must be a whole number of at least 1".into()),
    }
}

/// The counts' types: their zero and their largest value, for the messages.
pub(super) trait Bounded: PartialEq + Sized {
    const ZERO: Self;
    const MAX: Self;
}

impl Bounded for u64 {
    const ZERO: Self = 0;
    const MAX: Self = u64::MAX;
}

impl Bounded for usize {
    const ZERO: Self = 0;
    const MAX: Self = usize::MAX;
}

/// The most `--threads` accepted: past any machine's cores (OpenBLAS caps its own count far lower).
const MAX_THREADS: usize = 4096;

/// `--threads`: at least 1, at most `MAX_THREADS`.
pub(super) fn thread_count(s: &str) -> Result<usize, String> {
    match positive::<usize>(s)? {
        n if n > MAX_THREADS => Err(format!("must be at most {MAX_THREADS}")),
        n => Ok(n),
    }
}

/// `--clip-grad-norm`: a positive norm, or `off` (an example's default can be turned off).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipNorm(pub Option<f64>);

pub(super) fn parse_clip(s: &str) -> Result<ClipNorm, String> {
    match s {
        "off" => Ok(ClipNorm(None)),
        _ => match s.parse::<f64>() {
            Ok(_) => positive_f64(s).map(|v| ClipNorm(Some(v))),
            Err(_) => Err("must be a norm (a finite number greater than 0) or `off`".into()),
        },
    }
}

/// Parsed as f64, as PyTorch reads its Python floats: `--beta2 0.999` is PyTorch's 0.999.
pub(super) fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a finite number greater than 0, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `--temperature`: a positive number the sampler can divide by in f32 (1e-50 would be 0 there,
/// 1e50 infinite).
pub(super) fn temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v.is_normal() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!(
            "must be a positive number from {:e} to {:e} (an f32), got {s}{}",
            f32::MIN_POSITIVE,
            f32::MAX,
            if v == 0.0 {
                "; --top-k 1 draws the likeliest token every time, as a temperature near 0 would"
            } else {
                ""
            }
        )),
        Err(_) => Err(format!("must be a positive number, got {s}")),
    }
}

pub(super) fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a finite number of at least 0, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

/// PyTorch's precondition on AdamW's betas.
/// A dropout rate: at least 0 and below 1 (1 would zero every activation).
pub(super) fn dropout_rate(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        // As typed: `0.99999999` reads as the f32 1.
        Ok(v) if v == 1.0 && s.parse::<f64>().is_ok_and(|typed| typed < 1.0) => Err(format!(
            "must be at least 0 and less than 1 (the share of activations dropped), got {s}, which an f32 rounds to 1"
        )),
        Ok(_) => Err(format!("must be at least 0 and less than 1 (the share of activations dropped), got {s}")),
        Err(e) => Err(e.to_string()),
    }
}

pub(super) fn beta(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("must be at least 0 and less than 1, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}
