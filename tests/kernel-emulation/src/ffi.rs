//! The C entries of `kernels.cpp`: `emu_<kernel>(grid, block, the kernel's own arguments)`.

extern "C" {
    pub fn emu_causal_softmax(grid: u32, block: u32, p: *mut f32, rows: i32, t: i32, scale: f32);
    pub fn emu_causal_softmax_backward(
        grid: u32,
        block: u32,
        ds: *mut f32,
        p: *const f32,
        rows: i32,
        t: i32,
        scale: f32,
    );
    pub fn emu_softmax_cross_entropy(
        grid: u32,
        block: u32,
        loss: *mut f32,
        dlogits: *mut f32,
        logits: *const f32,
        labels: *const u32,
        rows: i32,
        classes: i32,
    );
    pub fn emu_bias_add_rows(grid: u32, block: u32, y: *mut f32, bias: *const f32, rows: i32, cols: i32);
    pub fn emu_bias_grad(grid: u32, block: u32, dbias: *mut f32, dy: *const f32, rows: i32, cols: i32, accumulate: i32);
    pub fn emu_relu_forward(grid: u32, block: u32, y: *mut f32, x: *const f32, n: i32);
    pub fn emu_relu_backward(grid: u32, block: u32, dx: *mut f32, x: *const f32, dy: *const f32, n: i32);
    pub fn emu_gelu_forward(grid: u32, block: u32, y: *mut f32, x: *const f32, n: i32);
    pub fn emu_gelu_backward(grid: u32, block: u32, dx: *mut f32, x: *const f32, dy: *const f32, n: i32);
    pub fn emu_tanh_forward(grid: u32, block: u32, y: *mut f32, x: *const f32, n: i32);
    pub fn emu_tanh_backward(grid: u32, block: u32, dx: *mut f32, y: *const f32, dy: *const f32, n: i32);
    pub fn emu_sigmoid_forward(grid: u32, block: u32, y: *mut f32, x: *const f32, n: i32);
    pub fn emu_sigmoid_backward(grid: u32, block: u32, dx: *mut f32, y: *const f32, dy: *const f32, n: i32);
    pub fn emu_add(grid: u32, block: u32, y: *mut f32, a: *const f32, b: *const f32, n: i32);
    pub fn emu_add_into(grid: u32, block: u32, y: *mut f32, a: *const f32, n: i32);
    #[allow(clippy::too_many_arguments)]
    pub fn emu_dropout(
        grid: u32,
        block: u32,
        y: *mut f32,
        x: *const f32,
        rows: i32,
        cols: i32,
        threshold: u32,
        scale: f32,
        stream: u64,
        first_row: u64,
    );
    #[allow(clippy::too_many_arguments)]
    pub fn emu_dropout_in_place(
        grid: u32,
        block: u32,
        x: *mut f32,
        rows: i32,
        cols: i32,
        threshold: u32,
        scale: f32,
        stream: u64,
        first_row: u64,
    );
    pub fn emu_embedding_forward(grid: u32, block: u32, y: *mut f32, ids: *const f32, w: *const f32, rows: i32, d: i32);
    pub fn emu_embedding_backward(
        grid: u32,
        block: u32,
        dw: *mut f32,
        rows_by_token: *const i32,
        rows: i32,
        groups: i32,
        dy: *const f32,
        d: i32,
    );
    pub fn emu_position_forward(
        grid: u32,
        block: u32,
        y: *mut f32,
        x: *const f32,
        w: *const f32,
        rows: i32,
        positions: i32,
        d: i32,
    );
    pub fn emu_position_backward(
        grid: u32,
        block: u32,
        dw: *mut f32,
        dy: *const f32,
        sequences: i32,
        positions: i32,
        d: i32,
        accumulate: i32,
    );
    pub fn emu_layer_norm_forward(
        grid: u32,
        block: u32,
        y: *mut f32,
        mean: *mut f32,
        rstd: *mut f32,
        x: *const f32,
        gamma: *const f32,
        beta: *const f32,
        rows: i32,
        d: i32,
    );
    pub fn emu_layer_norm_backward_input(
        grid: u32,
        block: u32,
        dx: *mut f32,
        x: *const f32,
        dy: *const f32,
        gamma: *const f32,
        mean: *const f32,
        rstd: *const f32,
        rows: i32,
        d: i32,
    );
    pub fn emu_layer_norm_backward_params(
        grid: u32,
        block: u32,
        dgamma: *mut f32,
        dbeta: *mut f32,
        x: *const f32,
        dy: *const f32,
        mean: *const f32,
        rstd: *const f32,
        rows: i32,
        d: i32,
        accumulate: i32,
    );
    pub fn emu_sgd_update(
        grid: u32,
        block: u32,
        value: *mut f32,
        momentum_buffer: *mut f32,
        grad: *const f32,
        n: i32,
        lr: f32,
        momentum: f32,
        kept: f32,
        weight_decay: f32,
        nesterov: i32,
        first: i32,
        grad_scale: f32,
    );
    pub fn emu_adamw_update(
        grid: u32,
        block: u32,
        value: *mut f32,
        exp_avg: *mut f32,
        exp_avg_sq: *mut f32,
        grad: *const f32,
        n: i32,
        decay: f32,
        lerp_weight: f32,
        beta2: f32,
        one_minus_beta2: f32,
        inv_bias_correction2_sqrt: f32,
        eps: f32,
        neg_step_size: f32,
        grad_scale: f32,
    );
    pub fn emu_sum_squares(grid: u32, block: u32, x: *const f32, n: i32, partials: *mut f64);
    pub fn emu_run_blocks_last_first(on: bool);
}
