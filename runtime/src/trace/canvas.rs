//! The timeline's canvas: its geometry and colours, shared by the layout (`timeline`) and the
//! blocks drawn on it (`blocks`), and the escaping of text put into the SVG.

pub(super) const WIDTH: f64 = 1200.0;
pub(super) const LEFT: f64 = 120.0;
pub(super) const RIGHT: f64 = 24.0;
pub(super) const LANE: f64 = 26.0;
/// Room under the all-reduce bars for the dashed queued-time lines.
pub(super) const QUEUE_BAND: f64 = 9.0;
pub(super) const FORWARD: &str = "#9ecae1";
pub(super) const BACKWARD: &str = "#3d7fc1";
pub(super) const LOSS: &str = "#fdae6b";
pub(super) const WAIT: &str = "#d62728";
pub(super) const BUCKETS: [&str; 8] =
    ["#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

/// `s` as SVG text or attribute content.
pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
