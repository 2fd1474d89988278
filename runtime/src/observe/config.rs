//! What a run records and writes about itself, as a library user or the command line sets it.

use std::path::PathBuf;

use crate::profile::Cluster;

/// How the overlap report is printed (rank 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReportFormat {
    /// A table for people.
    #[default]
    Text,
    /// One JSON document per report on stdout, for scripts (log lines then go to stderr).
    Json,
    /// No report (and no recording unless a trace, a timeline, a profile to write or a simulation
    /// needs it).
    Off,
}

/// What a run records and writes about itself (see `observe`).
#[derive(Clone, Debug, Default)]
pub struct ObserveConfig {
    /// How rank 0 prints the overlap report at the end (and every `report_every` steps).
    pub report: ReportFormat,
    /// Also print the report every N steps, over those N steps.
    pub report_every: Option<u64>,
    /// Every rank's spans as one Chrome trace-event file.
    pub trace: Option<PathBuf>,
    /// One representative step as an SVG timeline.
    pub timeline: Option<PathBuf>,
    /// The measured per-layer times, as a profile for `buckets = profile("FILE")`.
    pub write_profile: Option<PathBuf>,
    /// Clusters to predict this model's step on, from the times measured in this run.
    pub simulate: Vec<Cluster>,
}

impl ObserveConfig {
    /// Whether anything needs the spans recorded.
    pub fn records(&self) -> bool {
        self.report != ReportFormat::Off
            || self.trace.is_some()
            || self.timeline.is_some()
            || self.write_profile.is_some()
            || !self.simulate.is_empty()
    }
}
