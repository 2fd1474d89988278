//! Clipping by the global gradient norm, as `torch.nn.utils.clip_grad_norm_(max_norm)` does
//! between backward and the optimizer's step.
//!
//! The norm is over every parameter's averaged gradient, so it needs every bucket's sums before
//! the first update: a clipping run lends nothing to the all-reduces, waits for every bucket,
//! then updates. The all-reduces still overlap backward; what clipping costs is the overlap of
//! early buckets' updates with later buckets' sums. The factor is folded into the averaging
//! factor every update already multiplies the sums by, so clipping adds one read of the sums
//! (their squares) and no write.

/// A run's clipping threshold, and the norm its last step measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradClip {
    max_norm: f32,
    last_norm: Option<f32>,
}

impl GradClip {
    /// Clips to `max_norm` (PyTorch's `max_norm`, with `norm_type` 2).
    ///
    /// # Panics
    ///
    /// If `max_norm` is not a positive finite number: PyTorch takes a negative one and scales
    /// the gradients by a negative factor (the parameters then climb the loss), and 0 stops
    /// training. `OptimizerConfig::clip_grad_norm` reports it as an error before step 1 instead.
    pub fn new(max_norm: f32) -> Self {
        assert!(
            max_norm.is_finite() && max_norm > 0.0,
            "clip_grad_norm({max_norm}): the norm to clip to must be a positive finite number"
        );
        GradClip { max_norm, last_norm: None }
    }

    /// The global norm the gradients are scaled down to when theirs exceeds it.
    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// The global norm of the last step's averaged gradients, before clipping.
    pub fn last_norm(&self) -> Option<f32> {
        self.last_norm
    }

    /// Records `norm` as the last step's, measured elsewhere (by the communication thread, for
    /// sharded optimizer state).
    pub fn record_norm(&mut self, norm: f32) {
        self.last_norm = Some(norm);
    }

    /// The factor the updates multiply the summed gradients by: `grad_scale` (the averaging),
    /// times PyTorch's `min(1, max_norm / (norm + 1e-6))`, where `norm` is the averaged
    /// gradients' norm, `grad_scale · √sum_of_squares` (squares of the sums, in f64). Where
    /// PyTorch's f32 squares overflow (an element past about 1.8e19), its norm is infinite and
    /// every gradient becomes 0; here the f64 sum stays finite and the gradients are clipped.
    pub fn scale(&mut self, sum_of_squares: f64, grad_scale: f32) -> f32 {
        let norm = (sum_of_squares.sqrt() * f64::from(grad_scale)) as f32;
        self.last_norm = Some(norm);
        let coef = self.max_norm / (norm + 1e-6);
        // PyTorch's `clamp(max=1.0)`: a NaN norm stays NaN (every gradient becomes NaN, as in
        // PyTorch), an infinite one gives 0 (finite gradients become 0, infinite ones NaN). A
        // factor of 1 leaves the scale as it was, as PyTorch's multiplication by 1 does.
        grad_scale * if coef > 1.0 { 1.0 } else { coef }
    }
}

/// The sum of squares of `values`, in f64 (the clipping norm's part from one bucket).
pub fn sum_of_squares(values: &[f32]) -> f64 {
    // Four running sums let the loop vectorise; f64 keeps the order of summation immaterial at
    // f32's precision.
    let mut acc = [0.0f64; 4];
    let mut chunks = values.chunks_exact(4);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v) * f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    acc.iter().sum::<f64>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "clip_grad_norm(-1): the norm to clip to must be a positive finite number")]
    fn a_negative_norm_to_clip_to_is_refused_not_followed_up_the_loss() {
        GradClip::new(-1.0);
    }

    #[test]
    fn scales_only_above_the_threshold() {
        // Sums over 2 ranks: averaged gradient (3, 4) / 1, norm 5.
        let sums = [6.0f32, 8.0];
        let mut clip = GradClip::new(1.0);
        let scale = clip.scale(sum_of_squares(&sums), 0.5);
        assert_eq!(clip.last_norm(), Some(5.0));
        assert!((scale - 0.5 / (5.0 + 1e-6)).abs() < 1e-9, "{scale}");
        let mut loose = GradClip::new(10.0);
        assert_eq!(loose.scale(sum_of_squares(&sums), 0.5), 0.5);
    }

    #[test]
    fn sum_of_squares_covers_the_tail() {
        let values: Vec<f32> = (1..=7).map(|v| v as f32).collect();
        assert_eq!(sum_of_squares(&values), 140.0);
    }

    #[test]
    fn non_finite_norms_scale_as_pytorchs_clamp_does() {
        let mut clip = GradClip::new(1.0);
        assert_eq!(clip.scale(f64::INFINITY, 1.0), 0.0);
        assert!(clip.scale(f64::NAN, 1.0).is_nan());
    }
}
