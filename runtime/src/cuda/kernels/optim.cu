// Fused optimizer updates with PyTorch's rules; the gradient is scaled by `grad_scale`
// (1 / (world size x micro-steps)) as it is read, as on the CPU.

// SGD with momentum, dampening, Nesterov and coupled weight decay. `first` marks the first
// update of this parameter, when PyTorch initialises the buffer with the gradient itself.
extern "C" __global__ void sgd_update(
    float* value, float* momentum_buffer, const float* grad, int n, float lr, float momentum, float kept,
    float weight_decay, int nesterov, int first, float grad_scale) {
    // PyTorch's ops, rounded as its kernels round them (an add with alpha is one fused
    // multiply-add), spelled out with intrinsics as the CPU's rule is (optim/elementwise.rs):
    //   grad.add(param, alpha=weight_decay)             fma(p, weight_decay, g), when decaying
    //   buf.mul_(momentum).add_(grad, alpha=1 - d)      fma(g, kept, b * momentum), kept = 1 - d
    //                                                   taken in f64 on the host, as PyTorch does
    //   grad.add(buf, alpha=momentum)                   fma(b, momentum, g), Nesterov's
    //   param.add_(grad, alpha=-lr)                     fma(g, -lr, p)
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        const float p = value[i];
        float g = __fmul_rn(grad[i], grad_scale);
        if (weight_decay != 0.0f) g = __fmaf_rn(p, weight_decay, g);
        if (momentum != 0.0f) {
            const float b = first ? g : __fmaf_rn(g, kept, __fmul_rn(momentum_buffer[i], momentum));
            momentum_buffer[i] = b;
            g = nesterov ? __fmaf_rn(b, momentum, g) : b;
        }
        value[i] = __fmaf_rn(g, -lr, p);
    }
}

// AdamW as PyTorch's single-tensor path (foreach=False) computes it on CUDA float32 tensors, one
// tensor op after another. The host computes each scalar in f64 from the f64 hyperparameters and
// rounds it to f32 once, as PyTorch's ops do (see AdamWStep). The rounding is spelled out with
// intrinsics so that it does not depend on the compiler contracting into FMAs:
//   param.mul_(decay)                         p * decay
//   exp_avg.lerp_(grad, lerp_weight)          fma from the nearer end (Lerp.h, contracted by nvcc)
//   exp_avg_sq.mul_(beta2)                    v * beta2
//     .addcmul_(grad, grad, one_minus_beta2)  fma(value, g * g, v)  (pointwise_op_impl)
//   exp_avg_sq.sqrt() / bias_correction2_sqrt sqrt(v) * (1 / b): a CPU scalar divides by its
//                                             reciprocal (div_true_kernel_cuda); the host passes
//                                             inv_bias_correction2_sqrt = 1.0f / b, in f32
//     .add_(eps)
//   param.addcdiv_(exp_avg, denom, neg_step_size)  fma(value, m / denom, p)  (pointwise_op_impl)
// PyTorch's CPU kernels round three of these differently, and so does the CPU rule here, which
// follows them: addcmul as fma(value * g, g, v), a true division, and addcdiv unfused.
extern "C" __global__ void adamw_update(
    float* value, float* exp_avg, float* exp_avg_sq, const float* grad, int n, float decay, float lerp_weight,
    float beta2, float one_minus_beta2, float inv_bias_correction2_sqrt, float eps, float neg_step_size,
    float grad_scale) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float g = __fmul_rn(grad[i], grad_scale);
        float m = exp_avg[i];
        float d = __fsub_rn(g, m);
        m = fabsf(lerp_weight) < 0.5f ? __fmaf_rn(lerp_weight, d, m) : __fmaf_rn(__fsub_rn(lerp_weight, 1.0f), d, g);
        float s = __fmul_rn(exp_avg_sq[i], beta2);
        // pointwise_op_impl fuses a value of 1 into the product itself.
        s = one_minus_beta2 == 1.0f ? __fmaf_rn(g, g, s) : __fmaf_rn(one_minus_beta2, __fmul_rn(g, g), s);
        float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(s), inv_bias_correction2_sqrt), eps);
        exp_avg[i] = m;
        exp_avg_sq[i] = s;
        value[i] = __fmaf_rn(neg_step_size, __fdiv_rn(m, denom), __fmul_rn(value[i], decay));
    }
}

// Clipping by the global norm: block b of CLIP_BLOCKS sums the squares of its grid-stride share
// of x in f64 into partials[b]; the host adds the partials in a fixed order, so the norm does not
// depend on scheduling. blockDim.x must be 256.
extern "C" __global__ void sum_squares(const float* x, int n, double* partials) {
    __shared__ double sums[256];
    double s = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        double v = (double)x[i];
        s += v * v;
    }
    sums[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}
