// Causal self-attention's softmax, row by row over [rows, t] scores (rows = sequences x heads x
// t): row r is position i = r mod t of its sequence, which attends to positions 0..=i only. One
// block per row with shared-memory reductions (blockDim.x a power of two, at most 1024).

#define THREADS 1024

__device__ float block_reduce(float v, float* scratch, bool take_max) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float other = scratch[threadIdx.x + s];
            scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], other) : scratch[threadIdx.x] + other;
        }
        __syncthreads();
    }
    float total = scratch[0];
    __syncthreads();
    return total;
}

// p[r, j] = softmax_j(scale * p[r, j]) over j <= i, and 0 above the diagonal.
extern "C" __global__ void causal_softmax(float* p, int rows, int t, float scale) {
    __shared__ float scratch[THREADS];
    int r = blockIdx.x;
    if (r >= rows) return;
    int i = r % t;
    float* row = p + (long long)r * t;
    float m = __int_as_float(0xff800000);  // -infinity (NVRTC has no math.h)
    for (int j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, scale * row[j]);
    m = block_reduce(m, scratch, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        float e = expf(scale * row[j] - m);
        row[j] = e;
        sum += e;
    }
    sum = block_reduce(sum, scratch, false);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < t; j += blockDim.x) row[j] = j <= i ? row[j] * inv : 0.0f;
}

// ds = p * (ds - sum_j p * ds) * scale, row by row: the scores' gradient from the weights'.
extern "C" __global__ void causal_softmax_backward(float* ds, const float* p, int rows, int t, float scale) {
    __shared__ float scratch[THREADS];
    int r = blockIdx.x;
    if (r >= rows) return;
    float* d = ds + (long long)r * t;
    const float* w = p + (long long)r * t;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < t; j += blockDim.x) dot += w[j] * d[j];
    dot = block_reduce(dot, scratch, false);
    for (int j = threadIdx.x; j < t; j += blockDim.x) d[j] = w[j] * (d[j] - dot) * scale;
}
