//! Backward's activation gradients share a few workspace buffers (the generated workspace's
//! `grad_0`, `grad_1`, ...; the memory estimate counts the same) instead of one per layer. The
//! gradient with respect to layer `j`'s output is written by layer `j + 1`'s backward and read by
//! layer `j`'s, and again by the skip of every residual block ending at `j`, at that block's first
//! layer. Buffers whose uses do not overlap share a slot: a chain needs two (each layer reads one
//! and writes the other), each level of nested residual blocks one more. PyTorch frees each such
//! gradient once autograd has used it; keeping one per layer held about as much memory as the
//! saved activations themselves (a GPT block's seven gradients of `[rows, width]`).

/// Per layer `j`, the slot of the gradient with respect to its output, where backward keeps one
/// (`first_param_layer <= j < layers - 1`: the last layer's comes from the loss, the input's of
/// the first layer with parameters is never computed); and the number of slots.
pub fn assign_grad_slots(
    layers: usize,
    first_param_layer: usize,
    residuals: &[(usize, usize)],
) -> (Vec<Option<usize>>, usize) {
    let mut slots = vec![None; layers];
    // Per slot, the backward time (a layer index: backward runs them in decreasing order) of its
    // current gradient's last read; the slot is free for a gradient written at a later time.
    let mut last_read: Vec<usize> = Vec::new();
    for j in (first_param_layer..layers.saturating_sub(1)).rev() {
        let written = j + 1;
        let read_until = residuals
            .iter()
            .filter(|&&(first, last)| last == j && first > first_param_layer)
            .map(|&(first, _)| first)
            .fold(j, usize::min);
        let slot = match last_read.iter().position(|&until| until > written) {
            Some(free) => free,
            None => {
                last_read.push(0);
                last_read.len() - 1
            }
        };
        last_read[slot] = read_until;
        slots[j] = Some(slot);
    }
    (slots, last_read.len())
}

#[cfg(test)]
mod tests {
    use super::assign_grad_slots as assign;

    /// Every use of every gradient, as (slot, backward time): written at `j + 1`, read at `j` and
    /// at each residual skip; no two gradients may hold a slot at the same time.
    fn assert_no_overlap(layers: usize, first_param_layer: usize, residuals: &[(usize, usize)]) {
        let (slots, count) = assign(layers, first_param_layer, residuals);
        let live = |j: usize| {
            let until = residuals
                .iter()
                .filter(|&&(first, last)| last == j && first > first_param_layer)
                .map(|&(first, _)| first)
                .fold(j, usize::min);
            until..=j + 1
        };
        for a in 0..layers {
            for b in a + 1..layers {
                let (Some(sa), Some(sb)) = (slots[a], slots[b]) else { continue };
                let (la, lb) = (live(a), live(b));
                let overlap = la.start() <= lb.end() && lb.start() <= la.end();
                assert!(!(overlap && sa == sb), "gradients of layers {a} and {b} share slot {sa} while both live");
            }
        }
        assert!(slots.iter().flatten().all(|&s| s < count));
    }

    #[test]
    fn a_chain_alternates_two_buffers() {
        let (slots, count) = assign(5, 0, &[]);
        assert_eq!(slots, [Some(1), Some(0), Some(1), Some(0), None]);
        assert_eq!(count, 2);
        assert_no_overlap(5, 0, &[]);
    }

    #[test]
    fn nothing_before_the_first_layer_with_parameters() {
        let (slots, count) = assign(4, 2, &[]);
        assert_eq!(slots, [None, None, Some(0), None]);
        assert_eq!(count, 1);
        assert_eq!(assign(1, 0, &[]), (vec![None], 0));
    }

    #[test]
    fn a_residual_block_keeps_its_output_gradient_until_its_first_layer() {
        // input 0, block 1..=3, head 4: the gradient of layer 3's output is read at layer 1.
        let residuals = [(1, 3)];
        let (slots, count) = assign(5, 0, &residuals);
        assert_eq!(count, 3);
        assert_ne!(slots[3], slots[2]);
        assert_ne!(slots[3], slots[1]);
        assert_ne!(slots[3], slots[0]);
        assert_no_overlap(5, 0, &residuals);
    }

    #[test]
    fn gpt_shaped_models_need_one_slot_per_nesting_level() {
        // wte, wpe, then per block two residual halves of 2 and 4 layers, then ln_f and the head.
        let mut residuals = Vec::new();
        let mut at = 2;
        for _ in 0..4 {
            residuals.push((at, at + 1));
            residuals.push((at + 2, at + 5));
            at += 6;
        }
        let layers = at + 2;
        let (_, count) = assign(layers, 0, &residuals);
        assert_eq!(count, 3);
        assert_no_overlap(layers, 0, &residuals);
        // A block of blocks: nested spans need one more.
        residuals.push((2, at - 1));
        assert_eq!(assign(layers, 0, &residuals).1, 4);
        assert_no_overlap(layers, 0, &residuals);
    }

    #[test]
    fn random_nestings_never_share_a_live_slot() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..500 {
            let layers = 2 + next(14);
            let first_param_layer = next(layers);
            let residuals: Vec<(usize, usize)> = (0..next(4))
                .map(|_| {
                    let first = next(layers);
                    (first, first + next(layers - first))
                })
                .collect();
            assert_no_overlap(layers, first_param_layer, &residuals);
        }
    }
}
