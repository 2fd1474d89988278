//! Interconnects as an alpha-beta cost model: a per-message latency α and a bandwidth B.
//!
//! Ring all-reduce of `S` bytes on `n` ranks takes `2(n−1)` steps, each paying α and moving
//! `S/n` bytes, so `t = 2(n−1)·α + 2(n−1)/n · S/B` (the model nccl-tests' bus bandwidth is
//! defined against). The runtime uses it to emulate a link on one machine; planning and
//! simulation use it to predict clusters.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One link: latency in seconds and bandwidth in bytes per second (per direction). Profiles
/// store it under these field names.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Per-message latency α, in seconds (one way).
    pub latency_s: f64,
    /// Bandwidth B per direction, in bytes per second (may be infinite: no bandwidth cost).
    pub bandwidth_bytes_per_s: f64,
}

/// A named link with the figures it stands for.
#[derive(Clone, Copy, Debug)]
pub struct LinkPreset {
    /// The preset's name as `--link` and `link = ".."` accept it (matched ignoring case), e.g.
    /// `ib-hdr`.
    pub name: &'static str,
    /// Its latency and bandwidth.
    pub link: Link,
    /// Where the figures come from.
    pub source: &'static str,
}

/// Common links. Bandwidths are the per-direction signalling rate of the standard (GB = 10⁹ bytes);
/// latencies are typical small-message one-way latencies reported for each.
pub const LINK_PRESETS: &[LinkPreset] = &[
    LinkPreset {
        name: "nvlink4",
        link: Link { latency_s: 2e-6, bandwidth_bytes_per_s: 450e9 },
        source: "NVIDIA H100 datasheet: 4th-gen NVLink 900 GB/s per GPU, both directions together",
    },
    LinkPreset {
        name: "ib-ndr",
        link: Link { latency_s: 1e-6, bandwidth_bytes_per_s: 50e9 },
        source: "InfiniBand NDR 400 Gb/s per port (NVIDIA ConnectX-7); ~1 us end-to-end latency",
    },
    LinkPreset {
        name: "ib-hdr",
        link: Link { latency_s: 1e-6, bandwidth_bytes_per_s: 25e9 },
        source: "InfiniBand HDR 200 Gb/s per port (NVIDIA ConnectX-6); ~1 us end-to-end latency",
    },
    LinkPreset {
        name: "100gbe",
        link: Link { latency_s: 5e-6, bandwidth_bytes_per_s: 12.5e9 },
        source: "IEEE 802.3 100 Gb/s Ethernet; ~5 us with RDMA over Converged Ethernet",
    },
    LinkPreset {
        name: "10gbe",
        link: Link { latency_s: 30e-6, bandwidth_bytes_per_s: 1.25e9 },
        source: "IEEE 802.3 10 Gb/s Ethernet; ~30 us through a kernel TCP stack",
    },
];

impl Link {
    /// The preset named `name` (ignoring case), or `None` when there is none.
    pub fn preset(name: &str) -> Option<Link> {
        LINK_PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name)).map(|p| p.link)
    }

    /// Seconds a ring all-reduce of `bytes` takes on `ranks` ranks; zero for one rank.
    pub fn ring_all_reduce_seconds(&self, bytes: usize, ranks: usize) -> f64 {
        2.0 * self.ring_pass_seconds(bytes, ranks)
    }

    /// A ring reduce-scatter of `bytes` over `ranks`: `(n-1)·α + (n-1)/n · S/B`, half an
    /// all-reduce.
    pub fn ring_reduce_scatter_seconds(&self, bytes: usize, ranks: usize) -> f64 {
        self.ring_pass_seconds(bytes, ranks)
    }

    /// A ring all-gather of `bytes` (the whole buffer) over `ranks`: as a reduce-scatter.
    pub fn ring_all_gather_seconds(&self, bytes: usize, ranks: usize) -> f64 {
        self.ring_pass_seconds(bytes, ranks)
    }

    /// One pass around the ring: `n - 1` hops, each moving `1/n` of the buffer.
    fn ring_pass_seconds(&self, bytes: usize, ranks: usize) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let n = ranks as f64;
        (n - 1.0) * self.latency_s + (n - 1.0) / n * bytes as f64 / self.bandwidth_bytes_per_s
    }
}

/// `nvlink4`, `ib-hdr`, ... or `latency=5us,bandwidth=25GB/s` (either key may be left out: a
/// missing latency is 0, a missing bandwidth is infinite).
impl FromStr for Link {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(link) = Link::preset(s) {
            return Ok(link);
        }
        if !s.contains('=') {
            let names: Vec<&str> = LINK_PRESETS.iter().map(|p| p.name).collect();
            return Err(format!(
                "unknown link `{s}`: use one of {} or `latency=<time>,bandwidth=<rate>` (e.g. latency=5us,bandwidth=25GB/s)",
                names.join(", ")
            ));
        }
        let mut link = Link { latency_s: 0.0, bandwidth_bytes_per_s: f64::INFINITY };
        let mut seen = (false, false);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not `key=value` (keys: latency, bandwidth)"))?;
            match key.trim() {
                "latency" if !seen.0 => (link.latency_s, seen.0) = (parse_seconds(value.trim())?, true),
                "bandwidth" if !seen.1 => (link.bandwidth_bytes_per_s, seen.1) = (parse_rate(value.trim())?, true),
                "latency" | "bandwidth" => return Err(format!("`{}` is given twice", key.trim())),
                other => return Err(format!("unknown key `{other}` (keys: latency, bandwidth)")),
            }
        }
        Ok(link)
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "latency {:.3} us, ", self.latency_s * 1e6)?;
        // GB/s down to 0.001 (links people emulate); below that in units that still show it.
        match self.bandwidth_bytes_per_s {
            b if !b.is_finite() => write!(f, "no bandwidth limit"),
            b if b >= 1e6 => write!(f, "bandwidth {:.3} GB/s", b / 1e9),
            b if b >= 1e3 => write!(f, "bandwidth {:.3} KB/s", b / 1e3),
            b => write!(f, "bandwidth {b:.3} B/s"),
        }
    }
}

/// `5us`, `1.5ms`, `800ns`, `0.002s`.
fn parse_seconds(value: &str) -> Result<f64, String> {
    let (number, unit) = split_unit(value);
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        // The micro sign and the Greek letter mu, which keyboards give for it.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1e-6,
        "ns" => 1e-9,
        "" => return Err(format!("latency `{value}` needs a unit: s, ms, us or ns")),
        other => return Err(format!("latency `{value}`: `{other}` is not a unit taken here (s, ms, us or ns)")),
    };
    let seconds = parse_number(number, value)? * scale;
    if seconds > LONGEST_LATENCY_S {
        return Err(format!("latency `{value}` is too long: at most 1 hour (3600s)"));
    }
    Ok(seconds)
}

/// The longest per-message latency and the lowest bandwidth a link may be given: beyond them no
/// link is being described, and the times derived (an emulated all-reduce's hold) stop being
/// representable.
pub(crate) const LONGEST_LATENCY_S: f64 = 3600.0;
/// The slowest link accepted, in bytes per second: slower would not be a link.
pub(crate) const LOWEST_BANDWIDTH: f64 = 1.0;

/// `25GB/s`, `200Gb/s`, `1.25GB/s`, `900MB/s`, `1TB/s` (decimal prefixes; `b` is bits).
fn parse_rate(value: &str) -> Result<f64, String> {
    let (number, unit) = split_unit(value);
    let units = "GB/s, Gb/s, MB/s or TB/s (decimal prefixes, capital but k; b for bits)";
    let bad = || match unit {
        "" => format!("bandwidth `{value}` needs a unit such as {units}"),
        _ => format!("bandwidth `{value}`: `{unit}` is not a unit taken here: {units}"),
    };
    let per_second = unit.strip_suffix("/s").ok_or_else(bad)?;
    let (prefix, bits) = match per_second.strip_suffix('B') {
        Some(p) => (p, false),
        None => (per_second.strip_suffix('b').ok_or_else(bad)?, true),
    };
    let scale = match prefix {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return Err(bad()),
    };
    let v = parse_number(number, value)?;
    if v <= 0.0 {
        return Err(format!("bandwidth `{value}` must be greater than 0"));
    }
    let bytes_per_s = v * scale / if bits { 8.0 } else { 1.0 };
    if !bytes_per_s.is_finite() {
        return Err(format!("bandwidth `{value}` is not a finite number of bytes per second"));
    }
    if bytes_per_s < LOWEST_BANDWIDTH {
        return Err(format!("bandwidth `{value}` is too low: at least 1 byte per second (1B/s)"));
    }
    Ok(bytes_per_s)
}

fn split_unit(value: &str) -> (&str, &str) {
    // A number in letters (`inf`, `NaN`) is the number, for `parse_number` to refuse by name,
    // not the start of a unit.
    let unsigned = value.trim_start_matches(['+', '-']);
    let lower = unsigned.to_ascii_lowercase();
    if let Some(word) = ["infinity", "inf", "nan"].into_iter().find(|w| lower.starts_with(w)) {
        let at = value.len() - unsigned.len() + word.len();
        return (&value[..at], value[at..].trim());
    }
    let at =
        value.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))).unwrap_or(value.len());
    (&value[..at], value[at..].trim())
}

fn parse_number(number: &str, whole: &str) -> Result<f64, String> {
    match number.parse::<f64>() {
        // `-0` is 0, and shown as such.
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v.abs()),
        Ok(v) if !v.is_finite() => Err(format!("`{whole}`: `{number}` is not a finite number")),
        _ => Err(format!("`{whole}` does not start with a non-negative number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_show_their_bandwidth_in_units_that_show_it() {
        let shown = |s: &str| s.parse::<Link>().unwrap().to_string();
        assert_eq!(shown("latency=5us,bandwidth=25GB/s"), "latency 5.000 us, bandwidth 25.000 GB/s");
        assert_eq!(shown("latency=5us,bandwidth=0.5GB/s"), "latency 5.000 us, bandwidth 0.500 GB/s");
        assert_eq!(shown("latency=1ms,bandwidth=2KB/s"), "latency 1000.000 us, bandwidth 2.000 KB/s");
        assert_eq!(shown("latency=0s,bandwidth=1B/s"), "latency 0.000 us, bandwidth 1.000 B/s");
        assert_eq!(shown("latency=5us"), "latency 5.000 us, no bandwidth limit");
        assert_eq!(shown("latency=-0us,bandwidth=1GB/s"), "latency 0.000 us, bandwidth 1.000 GB/s");
        // Exponents in either case; micro as the micro sign or the Greek mu.
        assert_eq!(shown("latency=1E3us,bandwidth=2E9B/s"), "latency 1000.000 us, bandwidth 2.000 GB/s");
        assert_eq!(shown("latency=5\u{b5}s"), shown("latency=5\u{3bc}s"));
    }

    #[test]
    fn parses_presets_and_explicit_figures() {
        assert_eq!("ib-hdr".parse::<Link>().unwrap(), Link { latency_s: 1e-6, bandwidth_bytes_per_s: 25e9 });
        let l: Link = "latency=5us,bandwidth=25GB/s".parse().unwrap();
        assert!((l.latency_s - 5e-6).abs() < 1e-15 && (l.bandwidth_bytes_per_s - 25e9).abs() < 1.0);
        let l: Link = "bandwidth=200Gb/s, latency=1.5ms".parse().unwrap();
        assert!((l.latency_s - 1.5e-3).abs() < 1e-12 && (l.bandwidth_bytes_per_s - 25e9).abs() < 1.0);
        let l: Link = "latency=2ms".parse().unwrap();
        assert!(l.bandwidth_bytes_per_s.is_infinite());
        // The limits themselves are links.
        let l: Link = "latency=3600s,bandwidth=8b/s".parse().unwrap();
        assert_eq!((l.latency_s, l.bandwidth_bytes_per_s), (3600.0, 1.0));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, expected) in [
            ("infiniband", "unknown link"),
            ("latency=5", "needs a unit"),
            ("latency=5sec", "`sec` is not a unit taken here (s, ms, us or ns)"),
            ("bandwidth=25", "needs a unit"),
            ("bandwidth=25GB", "`GB` is not a unit taken here"),
            ("bandwidth=25gb/s", "`gb/s` is not a unit taken here: GB/s"),
            ("bandwidth=0GB/s", "greater than 0"),
            ("latency=-1us", "non-negative"),
            ("speed=1GB/s", "unknown key"),
            ("latency=1us,latency=2us", "given twice"),
            ("latency", "unknown link"),
            ("latency=1us,foo", "not `key=value`"),
            ("latency=1e20s", "too long: at most 1 hour"),
            ("latency=1e300s", "too long"),
            ("latency=3601s", "too long"),
            ("bandwidth=1e-300GB/s", "too low"),
            ("bandwidth=7b/s", "too low"),
            ("bandwidth=1e400GB/s", "`1e400GB/s`: `1e400` is not a finite number"),
            ("bandwidth=1e300TB/s", "bandwidth `1e300TB/s` is not a finite number of bytes per second"),
            ("bandwidth=NaNGB/s", "`NaNGB/s`: `NaN` is not a finite number"),
            ("bandwidth=infGB/s", "`infGB/s`: `inf` is not a finite number"),
            ("latency=infus", "`infus`: `inf` is not a finite number"),
            ("latency=-infinityms", "`-infinityms`: `-infinity` is not a finite number"),
        ] {
            let err = spec.parse::<Link>().unwrap_err();
            assert!(err.contains(expected), "{spec}: {err}");
        }
    }

    #[test]
    fn ring_cost_follows_the_alpha_beta_model() {
        let l = Link { latency_s: 1e-6, bandwidth_bytes_per_s: 1e9 };
        assert_eq!(l.ring_all_reduce_seconds(1 << 20, 1), 0.0);
        // n = 2: 2 latencies and the whole buffer once.
        let t = l.ring_all_reduce_seconds(1_000_000, 2);
        assert!((t - (2e-6 + 1e-3)).abs() < 1e-12, "{t}");
        // n = 4: 6 latencies and 1.5x the buffer.
        let t = l.ring_all_reduce_seconds(1_000_000, 4);
        assert!((t - (6e-6 + 1.5e-3)).abs() < 1e-12, "{t}");
        for p in LINK_PRESETS {
            assert_eq!(Link::preset(p.name), Some(p.link));
        }
    }
}
