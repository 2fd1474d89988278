// Fused optimizer updates with PyTorch's rules; the gradient is scaled by `grad_scale`
// (1 / (world size x micro-steps)) as it is read, as on the CPU.

// SGD with momentum, dampening, Nesterov and coupled weight decay. `first` marks the first
// update of this parameter, when PyTorch initialises the buffer with the gradient itself.
extern "C" __global__ void sgd_update(
    float* value, float* momentum_buffer, const float* grad, int n, float lr, float momentum, float dampening,
    float weight_decay, int nesterov, int first, float grad_scale) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float g = grad[i] * grad_scale + weight_decay * value[i];
        if (momentum != 0.0f) {
            float b = first ? g : momentum * momentum_buffer[i] + (1.0f - dampening) * g;
            momentum_buffer[i] = b;
            g = nesterov ? g + momentum * b : b;
        }
        value[i] -= lr * g;
    }
}

// AdamW: decoupled decay, then the bias-corrected moment step. The host computes
// step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t) in f64.
extern "C" __global__ void adamw_update(
    float* value, float* exp_avg, float* exp_avg_sq, const float* grad, int n, float lr, float beta1, float beta2,
    float eps, float weight_decay, float step_size, float bias_correction2_sqrt, float grad_scale) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float g = grad[i] * grad_scale;
        float v = value[i] * (1.0f - lr * weight_decay);
        float m = beta1 * exp_avg[i] + (1.0f - beta1) * g;
        float s = beta2 * exp_avg_sq[i] + (1.0f - beta2) * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = s;
        value[i] = v - step_size * m / (sqrtf(s) / bias_correction2_sqrt + eps);
    }
}
