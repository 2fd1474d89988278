// Softmax cross-entropy over row-major logits [rows, classes], mean over rows, as PyTorch's
// CrossEntropyLoss. One block per row; the block reduces the row's max and sum of exponentials
// in shared memory (blockDim.x must be a power of two, at most 1024).

extern "C" __global__ void softmax_cross_entropy(
    float* loss_per_row, float* dlogits, const float* logits, const unsigned int* labels, int rows, int classes) {
    __shared__ float scratch[1024];
    int r = blockIdx.x;
    if (r >= rows) {
        return;
    }
    const float* x = logits + (size_t)r * classes;
    float* dx = dlogits + (size_t)r * classes;

    float local_max = __int_as_float(0xff800000);  // -infinity (NVRTC has no math.h macros)
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        local_max = fmaxf(local_max, x[c]);
    }
    scratch[threadIdx.x] = local_max;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        }
        __syncthreads();
    }
    float row_max = scratch[0];
    __syncthreads();

    float local_sum = 0.0f;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        local_sum += expf(x[c] - row_max);
    }
    scratch[threadIdx.x] = local_sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            scratch[threadIdx.x] += scratch[threadIdx.x + s];
        }
        __syncthreads();
    }
    float log_sum = logf(scratch[0]);

    unsigned int label = labels[r];
    float scale = 1.0f / (float)rows;
    for (int c = threadIdx.x; c < classes; c += blockDim.x) {
        float p = expf(x[c] - row_max - log_sum);
        dx[c] = (p - (c == (int)label ? 1.0f : 0.0f)) * scale;
    }
    if (threadIdx.x == 0) {
        loss_per_row[r] = log_sum + row_max - x[label];
    }
}
