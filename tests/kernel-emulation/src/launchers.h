// The C entry of every kernel, `emu_<kernel>(grid, block, the kernel's own arguments)`, as one
// list: whoever includes it defines LAUNCHER(kernel, parameters, arguments) first. kernels.cpp
// defines the entries from it (checked against the kernels' own signatures); the race driver
// declares them from it, so the two cannot drift (C linkage would not notice).
#define P(...) __VA_ARGS__

LAUNCHER(causal_softmax, P(float* p, int rows, int t, float scale), P(p, rows, t, scale))
LAUNCHER(causal_softmax_backward, P(float* ds, const float* p, int rows, int t, float scale), P(ds, p, rows, t, scale))
LAUNCHER(softmax_cross_entropy,
         P(float* loss, float* dlogits, const float* logits, const unsigned int* labels, int rows, int classes),
         P(loss, dlogits, logits, labels, rows, classes))
LAUNCHER(bias_add_rows, P(float* y, const float* bias, int rows, int cols), P(y, bias, rows, cols))
LAUNCHER(bias_grad, P(float* dbias, const float* dy, int rows, int cols, int accumulate), P(dbias, dy, rows, cols, accumulate))
LAUNCHER(relu_forward, P(float* y, const float* x, int n), P(y, x, n))
LAUNCHER(relu_backward, P(float* dx, const float* x, const float* dy, int n), P(dx, x, dy, n))
LAUNCHER(gelu_forward, P(float* y, const float* x, int n), P(y, x, n))
LAUNCHER(gelu_backward, P(float* dx, const float* x, const float* dy, int n), P(dx, x, dy, n))
LAUNCHER(tanh_forward, P(float* y, const float* x, int n), P(y, x, n))
LAUNCHER(tanh_backward, P(float* dx, const float* y, const float* dy, int n), P(dx, y, dy, n))
LAUNCHER(sigmoid_forward, P(float* y, const float* x, int n), P(y, x, n))
LAUNCHER(sigmoid_backward, P(float* dx, const float* y, const float* dy, int n), P(dx, y, dy, n))
LAUNCHER(add, P(float* y, const float* a, const float* b, int n), P(y, a, b, n))
LAUNCHER(add_into, P(float* y, const float* a, int n), P(y, a, n))
LAUNCHER(dropout,
         P(float* y, const float* x, int rows, int cols, unsigned int threshold, float scale, unsigned long long stream,
           unsigned long long first_row),
         P(y, x, rows, cols, threshold, scale, stream, first_row))
LAUNCHER(dropout_in_place,
         P(float* x, int rows, int cols, unsigned int threshold, float scale, unsigned long long stream,
           unsigned long long first_row),
         P(x, rows, cols, threshold, scale, stream, first_row))
LAUNCHER(embedding_forward, P(float* y, const float* ids, const float* w, int rows, int d), P(y, ids, w, rows, d))
LAUNCHER(embedding_backward, P(float* dw, const int* rows_by_token, int rows, int groups, const float* dy, int d),
         P(dw, rows_by_token, rows, groups, dy, d))
LAUNCHER(position_forward, P(float* y, const float* x, const float* w, int rows, int positions, int d),
         P(y, x, w, rows, positions, d))
LAUNCHER(position_backward, P(float* dw, const float* dy, int sequences, int positions, int d, int accumulate),
         P(dw, dy, sequences, positions, d, accumulate))
LAUNCHER(layer_norm_forward,
         P(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta, int rows, int d),
         P(y, mean, rstd, x, gamma, beta, rows, d))
LAUNCHER(layer_norm_backward_input,
         P(float* dx, const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd, int rows,
           int d),
         P(dx, x, dy, gamma, mean, rstd, rows, d))
LAUNCHER(layer_norm_backward_params,
         P(float* dgamma, float* dbeta, const float* x, const float* dy, const float* mean, const float* rstd, int rows,
           int d, int accumulate),
         P(dgamma, dbeta, x, dy, mean, rstd, rows, d, accumulate))
LAUNCHER(sgd_update,
         P(float* value, float* momentum_buffer, const float* grad, int n, float lr, float momentum, float kept,
           float weight_decay, int nesterov, int first, float grad_scale),
         P(value, momentum_buffer, grad, n, lr, momentum, kept, weight_decay, nesterov, first, grad_scale))
LAUNCHER(adamw_update,
         P(float* value, float* exp_avg, float* exp_avg_sq, const float* grad, int n, float decay, float lerp_weight,
           float beta2, float one_minus_beta2, float inv_bias_correction2_sqrt, float eps, float neg_step_size,
           float grad_scale),
         P(value, exp_avg, exp_avg_sq, grad, n, decay, lerp_weight, beta2, one_minus_beta2, inv_bias_correction2_sqrt, eps,
           neg_step_size, grad_scale))
LAUNCHER(sum_squares, P(const float* x, int n, double* partials), P(x, n, partials))
