// The embeddings of a language model, on row-major [rows, d] activations. Token ids arrive as
// integral floats (checked on the host before they are copied in).

// y[r, :] = w[ids[r], :]
extern "C" __global__ void embedding_forward(float* y, const float* ids, const float* w, int rows, int d) {
    int n = rows * d;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        int r = i / d;
        y[i] = w[(int)ids[r] * d + (i - r * d)];
    }
}

// dw[ids[r], :] += dy[r, :]: rows of the same token meet, hence the atomics (dw is zeroed first
// when not accumulating).
extern "C" __global__ void embedding_backward(float* dw, const float* ids, const float* dy, int rows, int d) {
    int n = rows * d;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        int r = i / d;
        atomicAdd(&dw[(int)ids[r] * d + (i - r * d)], dy[i]);
    }
}

// y[r, :] = x[r, :] + w[r % positions, :]
extern "C" __global__ void position_forward(float* y, const float* x, const float* w, int rows, int positions, int d) {
    int n = rows * d;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        int r = i / d;
        y[i] = x[i] + w[(r % positions) * d + (i - r * d)];
    }
}

// dw[t, c] (+)= sum over sequences of dy[s * positions + t, c]: one thread per (t, c).
extern "C" __global__ void position_backward(
    float* dw, const float* dy, int sequences, int positions, int d, int accumulate) {
    int n = positions * d;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long long)blockDim.x * gridDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < sequences; ++s) {
            sum += dy[s * n + j];
        }
        dw[j] = accumulate ? dw[j] + sum : sum;
    }
}
