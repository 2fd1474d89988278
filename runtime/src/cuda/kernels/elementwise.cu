// Element-wise layers and the bias, on row-major [rows, cols] activations.
// One thread per element, grid-stride loops; `accumulate` adds to a gradient instead of
// overwriting it (gradient-accumulation micro-steps), as the CPU layers do.

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f

extern "C" __global__ void bias_add_rows(float* y, const float* bias, int rows, int cols) {
    int n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] += bias[i % cols];
    }
}

// Column sums (a bias's gradient, LayerNorm's parameters'): a block takes COLUMN_TILE
// neighbouring columns (launch_shapes.rs: as many blocks as tiles), its threads standing in
// blockDim.x / COLUMN_TILE lanes of rows; lane l sums rows l, l + lanes, ... of its column (reads
// of neighbouring columns together), then the first lane adds the lanes' sums in lane order. The
// same order every run, and a lane's loads in flight where one thread per column left a handful
// of blocks each walking every row (at a large batch, most of the GPU idle and the loads one at
// a time). Any grid works: blocks loop over the tiles.
#define COLUMN_TILE 32

// dbias[c] (+)= sum over rows of dy[r, c].
extern "C" __global__ void bias_grad(float* dbias, const float* dy, int rows, int cols, int accumulate) {
    __shared__ float lanes_sums[1024];
    const int column = threadIdx.x % COLUMN_TILE, lane = threadIdx.x / COLUMN_TILE, lanes = blockDim.x / COLUMN_TILE;
    for (long long tile = blockIdx.x; tile * COLUMN_TILE < cols; tile += gridDim.x) {
        const long long c = tile * COLUMN_TILE + column;
        float sum = 0.0f;
        if (c < cols) {
            for (int r = lane; r < rows; r += lanes) {
                sum += dy[(long long)r * cols + c];
            }
        }
        lanes_sums[threadIdx.x] = sum;
        __syncthreads();
        if (lane == 0 && c < cols) {
            float total = 0.0f;
            for (int l = 0; l < lanes; ++l) {
                total += lanes_sums[l * COLUMN_TILE + column];
            }
            dbias[c] = accumulate ? dbias[c] + total : total;
        }
        // The next tile's sums go where these were read.
        __syncthreads();
    }
}

extern "C" __global__ void relu_forward(float* y, const float* x, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        // NaN stays NaN, as in PyTorch (and on the CPU).
        y[i] = x[i] <= 0.0f ? 0.0f : x[i];
    }
}

extern "C" __global__ void relu_backward(float* dx, const float* x, const float* dy, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        dx[i] = x[i] <= 0.0f ? 0.0f : dy[i];
    }
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
extern "C" __global__ void gelu_forward(float* y, const float* x, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = x[i];
        float t = tanhf(SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

extern "C" __global__ void gelu_backward(float* dx, const float* x, const float* dy, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        float v = x[i];
        float t = tanhf(SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v));
        float dt = (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
    }
}

extern "C" __global__ void tanh_forward(float* y, const float* x, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] = tanhf(x[i]);
    }
}

// From the saved output: d tanh = 1 - y^2.
extern "C" __global__ void tanh_backward(float* dx, const float* y, const float* dy, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
}

extern "C" __global__ void sigmoid_forward(float* y, const float* x, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] = 1.0f / (1.0f + expf(-x[i]));
    }
}

// From the saved output: d sigmoid = y (1 - y).
extern "C" __global__ void sigmoid_backward(float* dx, const float* y, const float* dy, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        dx[i] = dy[i] * y[i] * (1.0f - y[i]);
    }
}

// Residual blocks: y = a + b (the block's output), and y += a (its skip gradient).
extern "C" __global__ void add(float* y, const float* a, const float* b, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] = a[i] + b[i];
    }
}

extern "C" __global__ void add_into(float* y, const float* a, int n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] += a[i];
    }
}

// Dropout's multipliers, hashed from where each element is (runtime/src/layer/dropout_draw.rs
// computes the same, bit for bit): SplitMix64 of the stream and the run-wide row gives the row's
// key, two MurmurHash3 finalisers of it and the column give a 24-bit draw, and the element is
// kept with `scale` when the draw is at least `threshold`, zeroed otherwise (by a multiplication,
// so that NaN and infinity give NaN, as the CPU and PyTorch do). Forward passes x and y, backward
// dy and dx: the same mask.
__device__ unsigned long long dropout_splitmix64(unsigned long long x) {
    unsigned long long z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ unsigned int dropout_fmix32(unsigned int h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

// The multiplier of element i of a [rows, cols] tensor whose first row is row `first_row` of the
// run's: `scale`, or 0 where it is dropped.
__device__ float dropout_factor(long long i, int cols, unsigned int threshold, float scale, unsigned long long stream,
                                unsigned long long first_row) {
    const unsigned long long row = first_row + (unsigned long long)(i / cols);
    const unsigned int col = (unsigned int)(i % cols);
    const unsigned long long key = dropout_splitmix64(stream ^ (row * 0x9e3779b97f4a7c15ull));
    const unsigned int draw = dropout_fmix32(dropout_fmix32(col ^ (unsigned int)key) ^ (unsigned int)(key >> 32)) >> 8;
    return draw >= threshold ? scale : 0.0f;
}

extern "C" __global__ void dropout(float* y, const float* x, int rows, int cols, unsigned int threshold, float scale,
                                   unsigned long long stream, unsigned long long first_row) {
    long long n = (long long)rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        y[i] = x[i] * dropout_factor(i, cols, threshold, scale, stream, first_row);
    }
}

// The same multipliers, in place (attention's weight gradients).
extern "C" __global__ void dropout_in_place(float* x, int rows, int cols, unsigned int threshold, float scale,
                                            unsigned long long stream, unsigned long long first_row) {
    long long n = (long long)rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        x[i] *= dropout_factor(i, cols, threshold, scale, stream, first_row);
    }
}
