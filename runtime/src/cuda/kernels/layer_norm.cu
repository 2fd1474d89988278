// Layer normalisation over the last dimension of row-major [rows, d], PyTorch's defaults
// (biased variance, eps 1e-5, elementwise affine). One block per row with a shared-memory
// reduction (blockDim.x a power of two, at most 1024); mean and 1/std are saved for backward.

#define LN_EPS 1e-5f

__device__ float block_sum(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            scratch[threadIdx.x] += scratch[threadIdx.x + s];
        }
        __syncthreads();
    }
    float total = scratch[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void layer_norm_forward(
    float* y, float* mean_out, float* rstd_out, const float* x, const float* gamma, const float* beta, int rows, int d) {
    __shared__ float scratch[1024];
    int r = blockIdx.x;
    if (r >= rows) {
        return;
    }
    const float* xr = x + (size_t)r * d;
    float* yr = y + (size_t)r * d;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        sum += xr[c];
    }
    float mean = block_sum(sum, scratch) / (float)d;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float centred = xr[c] - mean;
        sq += centred * centred;
    }
    float rstd = rsqrtf(block_sum(sq, scratch) / (float)d + LN_EPS);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
    if (threadIdx.x == 0) {
        mean_out[r] = mean;
        rstd_out[r] = rstd;
    }
}

// dx for one row per block: rstd (g - mean(g) - xhat mean(g xhat)), with g = dy * gamma.
extern "C" __global__ void layer_norm_backward_input(
    float* dx, const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd, int rows, int d) {
    __shared__ float scratch[1024];
    int r = blockIdx.x;
    if (r >= rows) {
        return;
    }
    const float* xr = x + (size_t)r * d;
    const float* dyr = dy + (size_t)r * d;
    float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float g = dyr[c] * gamma[c];
        sum_g += g;
        sum_gx += g * (xr[c] - m) * s;
    }
    float mean_g = block_sum(sum_g, scratch) / (float)d;
    float mean_gx = block_sum(sum_gx, scratch) / (float)d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float xhat = (xr[c] - m) * s;
        dx[(size_t)r * d + c] = s * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
}

// dgamma and dbeta: column sums over rows as bias_grad sums them (elementwise.cu: tiles of
// LN_COLUMN_TILE columns, lanes of rows, the lanes' sums added in lane order).
#define LN_COLUMN_TILE 32
extern "C" __global__ void layer_norm_backward_params(
    float* dgamma, float* dbeta, const float* x, const float* dy, const float* mean, const float* rstd, int rows, int d,
    int accumulate) {
    __shared__ float gamma_sums[1024];
    __shared__ float beta_sums[1024];
    const int column = threadIdx.x % LN_COLUMN_TILE, lane = threadIdx.x / LN_COLUMN_TILE;
    const int lanes = blockDim.x / LN_COLUMN_TILE;
    for (long long tile = blockIdx.x; tile * LN_COLUMN_TILE < d; tile += gridDim.x) {
        const long long c = tile * LN_COLUMN_TILE + column;
        float sum_gamma = 0.0f, sum_beta = 0.0f;
        if (c < d) {
            for (int r = lane; r < rows; r += lanes) {
                float g = dy[(size_t)r * d + c];
                sum_gamma += g * (x[(size_t)r * d + c] - mean[r]) * rstd[r];
                sum_beta += g;
            }
        }
        gamma_sums[threadIdx.x] = sum_gamma;
        beta_sums[threadIdx.x] = sum_beta;
        __syncthreads();
        if (lane == 0 && c < d) {
            float total_gamma = 0.0f, total_beta = 0.0f;
            for (int l = 0; l < lanes; ++l) {
                total_gamma += gamma_sums[l * LN_COLUMN_TILE + column];
                total_beta += beta_sums[l * LN_COLUMN_TILE + column];
            }
            dgamma[c] = accumulate ? dgamma[c] + total_gamma : total_gamma;
            dbeta[c] = accumulate ? dbeta[c] + total_beta : total_beta;
        }
        // The next tile's sums go where these were read.
        __syncthreads();
    }
}
