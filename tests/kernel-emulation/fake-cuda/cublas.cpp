// cuBLAS on the CPU (libcublas.so): the single-precision products the GPU backend calls (one, and
// strided-batched), queued on the handle's stream as cuBLAS queues its kernels, and computed by the
// system's CBLAS with the same column-major arguments (BLAS's `sgemm` is cuBLAS's, argument for
// argument).
// Arguments cuBLAS would refuse (a leading dimension shorter than a column) are refused with its
// status; operands outside device memory end the process with a message.
#include <cblas.h>

#include <algorithm>
#include <string>

#include "fake_cuda.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

typedef int cublasStatus_t;
enum : cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };

struct FakeBlas {
    CUstream stream = nullptr;
};
typedef FakeBlas* cublasHandle_t;

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    *handle = new FakeBlas;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, CUstream stream) {
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t, int) { return CUBLAS_STATUS_SUCCESS; }

EXPORT const char* cublasGetStatusString(cublasStatus_t status) {
    return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

// C = alpha op(A) op(B) + beta C, column-major, `batch` times, operands `stride_*` elements
// further on each time; with beta 0, C is written without being read, in BLAS as in cuBLAS (so a
// poisoned output buffer does not leak into the result). `name` is the cuBLAS call's.
static cublasStatus_t gemm(const char* name, cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                           const float* alpha, const float* a, int lda, long long stride_a, const float* b, int ldb,
                           long long stride_b, const float* beta, float* c, int ldc, long long stride_c, int batch) {
    bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if ((transa != CUBLAS_OP_N && !ta) || (transb != CUBLAS_OP_N && !tb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = ta ? k : m, b_rows = tb ? n : k;
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    int a_cols = ta ? m : k, b_cols = tb ? k : n;
    // Host pointer mode (cuBLAS's default): the scalars are read when the call is made.
    float scale = *alpha, keep = *beta;
    auto span = [](int rows, int cols, int ld) { return (size_t(cols - 1) * ld + rows) * sizeof(float); };
    std::string what_a = std::string(name) + " A", what_b = std::string(name) + " B", what_c = std::string(name) + " C";
    for (int i = 0; i < batch; i++) {
        if (k > 0) {
            fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(a + i * stride_a), span(a_rows, a_cols, lda), what_a.c_str());
            fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(b + i * stride_b), span(b_rows, b_cols, ldb), what_b.c_str());
        }
        fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(c + i * stride_c), span(m, n, ldc), what_c.c_str());
    }
    enqueue(handle->stream, "sgemm", [=] {
        for (int i = 0; i < batch; i++) {
            cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, scale,
                        a + i * stride_a, lda, b + i * stride_b, ldb, keep, c + i * stride_c, ldc);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                     const float* alpha, const float* a, int lda, const float* b, int ldb,
                                     const float* beta, float* c, int ldc) {
    return gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                                const float* alpha, const float* a, int lda, long long stride_a,
                                                const float* b, int ldb, long long stride_b, const float* beta,
                                                float* c, int ldc, long long stride_c, int batch) {
    return gemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb,
                stride_b, beta, c, ldc, stride_c, batch);
}
