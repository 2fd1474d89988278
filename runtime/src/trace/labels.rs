//! Where the timeline's block labels go. A label that fits inside its block is drawn there; one
//! that does not goes into a band of label rows beside the block's lane (above the compute lane,
//! below the communication lane), at the first row where it overlaps no other label, as near
//! its block as the labels before it allow, with a leader line to the block. Every block also
//! carries its label as a tooltip, so one left out of a full band is still named.

/// Rows of a band: beyond that, a crowded stretch is named by tooltips only.
pub(super) const MAX_ROWS: usize = 3;
/// Height of one band row.
pub(super) const ROW_HEIGHT: f64 = 11.0;
/// Font size of band labels (block labels use the document's 11).
pub(super) const BAND_FONT: f64 = 9.0;
/// Least room between two labels of a row.
const GAP: f64 = 4.0;

/// Width of `text` at `font_size`, from an average glyph of 0.57 em (DejaVu Sans, the
/// document's first font, is a little wider than Helvetica).
pub(super) fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars().count() as f64 * font_size * 0.573
}

/// Whether `label` fits inside a block `width` wide, with a margin.
pub(super) fn fits_inside(width: f64, label: &str) -> bool {
    width > text_width(label, 11.0) + 4.0
}

/// Where one block's label is drawn.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Placement {
    /// Centred inside the block.
    Inside,
    /// Centred at `x` in row `row` of the lane's band (row 0 nearest the lane).
    Band { row: usize, x: f64 },
    /// Only as the block's tooltip: every row near it is full.
    TooltipOnly,
}

/// Places the labels of one lane's blocks, each given as its left edge, width and label, within
/// `[left, right]`; the result is in the order of `blocks`.
pub(super) fn place(blocks: &[(f64, f64, &str)], left: f64, right: f64) -> Vec<Placement> {
    let mut placements = vec![Placement::Inside; blocks.len()];
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| !fits_inside(blocks[i].1, blocks[i].2)).collect();
    order.sort_by(|&a, &b| (blocks[a].0 + blocks[a].1 / 2.0).total_cmp(&(blocks[b].0 + blocks[b].1 / 2.0)));
    // Where each row's last label ends.
    let mut ends = [f64::NEG_INFINITY; MAX_ROWS];
    for i in order {
        let (x, width, label) = blocks[i];
        let w = text_width(label, BAND_FONT);
        let wanted = (x + width / 2.0 - w / 2.0).clamp(left, (right - w).max(left));
        // The row that keeps the label nearest its block; the lowest of equals.
        let best = (0..MAX_ROWS)
            .map(|row| (row, wanted.max(ends[row] + GAP)))
            .filter(|&(_, start)| start + w <= right)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        placements[i] = match best {
            Some((row, start)) => {
                ends[row] = start + w;
                Placement::Band { row, x: start + w / 2.0 }
            }
            None => Placement::TooltipOnly,
        };
    }
    placements
}

/// Band rows that `placements` use.
pub(super) fn rows_used(placements: &[Placement]) -> usize {
    placements.iter().map(|p| if let Placement::Band { row, .. } = p { row + 1 } else { 0 }).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The extent of each band label, by row.
    fn extents(blocks: &[(f64, f64, &str)], placements: &[Placement]) -> Vec<(usize, f64, f64)> {
        blocks
            .iter()
            .zip(placements)
            .filter_map(|(&(_, _, label), p)| match *p {
                Placement::Band { row, x } => {
                    let w = text_width(label, BAND_FONT);
                    Some((row, x - w / 2.0, x + w / 2.0))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn narrow_blocks_get_band_labels_that_do_not_overlap() {
        // A wide block, then six blocks a pixel wide side by side, then one at the right edge.
        let mut blocks = vec![(100.0, 300.0, "forward fc1")];
        let names = ["fc1", "act1", "norm", "fc2", "act2", "head"];
        blocks.extend(names.iter().enumerate().map(|(k, name)| (500.0 + k as f64, 1.0, *name)));
        blocks.push((999.5, 0.5, "wait b3"));
        let placements = place(&blocks, 100.0, 1000.0);
        assert_eq!(placements[0], Placement::Inside);
        assert!(placements[1..].iter().all(|p| matches!(p, Placement::Band { .. })), "{placements:?}");
        let spans = extents(&blocks, &placements);
        for (a, &(row_a, left_a, right_a)) in spans.iter().enumerate() {
            assert!(left_a >= 100.0 && right_a <= 1000.0, "inside the lane: {left_a}..{right_a}");
            for &(row_b, left_b, right_b) in &spans[a + 1..] {
                assert!(row_a != row_b || right_a <= left_b || right_b <= left_a, "overlap in row {row_a}");
            }
        }
        // Crowded labels spread over the rows rather than drifting far along one.
        assert_eq!(rows_used(&placements), MAX_ROWS);
    }

    #[test]
    fn a_full_band_leaves_the_label_to_the_tooltip() {
        let long = "a label as long as the lane itself";
        let blocks = [(0.0, 1.0, long), (1.0, 1.0, long), (2.0, 1.0, long), (3.0, 1.0, long)];
        let placements = place(&blocks, 0.0, text_width(long, BAND_FONT) + 1.0);
        assert_eq!(rows_used(&placements), MAX_ROWS);
        assert_eq!(placements[3], Placement::TooltipOnly);
    }
}
