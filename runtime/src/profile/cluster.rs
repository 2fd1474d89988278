//! The clusters `--simulate` predicts for, as the command line and `ObserveConfig::simulate`
//! give them.

use std::str::FromStr;

use overlap_plan::Link;

use crate::error::ParseError;

/// A cluster to predict for: `world=64,link=ib-ndr` (the link takes the rest of the text, so
/// `world=8,link=latency=5us,bandwidth=25GB/s` works too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cluster {
    /// Ranks to predict for (1 to 2^24).
    pub world: usize,
    /// The link between them: a preset's or the given latency and bandwidth.
    pub link: Link,
}

impl FromStr for Cluster {
    type Err = ParseError;

    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        parse_cluster(s).map_err(ParseError)
    }
}

fn parse_cluster(s: &str) -> std::result::Result<Cluster, String> {
    let help = "expected `world=<ranks>,link=<preset or latency=..,bandwidth=..>`, e.g. world=64,link=ib-ndr";
    let rest = s.trim().strip_prefix("world=").ok_or_else(|| format!("`{s}`: {help}"))?;
    // `world=8,link=..`, spaces after the comma allowed.
    let link_part =
        rest.split_once(',').and_then(|(world, link)| Some((world, link.trim_start().strip_prefix("link=")?)));
    let (world, link) = link_part.ok_or_else(|| format!("`{s}` names no link: {help}"))?;
    let world = match world.trim().parse::<usize>() {
        Ok(w) if (1..=overlap_plan::MAX_WORLD).contains(&w) => w,
        _ => return Err(format!("world `{world}` must be a whole number from 1 to {}", overlap_plan::MAX_WORLD)),
    };
    // The link takes the rest, commas included (`latency=..,bandwidth=..`): say so on a bad one.
    let link = link.parse().map_err(|why| format!("link `{link}`: {why} (world= comes first, link= last)"))?;
    Ok(Cluster { world, link })
}
