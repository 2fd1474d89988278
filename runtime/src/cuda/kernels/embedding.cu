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

// dw[t, :] += dy[r, :] for every row r of token t, added in the order of the rows, as the CPU
// adds them (the same bits every run; atomics would add in whatever order the blocks run): one
// block per token of the batch, its threads over the columns. `rows_by_token`, grouped on the
// host (token_rows.rs), holds the rows sorted by token, then where each token's rows start
// (`groups` + 1 entries), then the tokens. dw is zeroed first when not accumulating.
extern "C" __global__ void embedding_backward(
    float* dw, const int* rows_by_token, int rows, int groups, const float* dy, int d) {
    const int* starts = rows_by_token + rows;
    const int* tokens = starts + groups + 1;
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        float* row = dw + (long long)tokens[g] * d;
        for (int c = threadIdx.x; c < d; c += blockDim.x) {
            float sum = row[c];
            for (int k = starts[g]; k < starts[g + 1]; ++k) {
                sum += dy[(long long)rows_by_token[k] * d + c];
            }
            row[c] = sum;
        }
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
