// cuBLAS on the CPU (libcublas.so): the single-precision product the GPU backend calls, queued on
// the handle's stream as cuBLAS queues its kernels, and computed by the system's CBLAS with the
// same column-major arguments (BLAS's `sgemm` is cuBLAS's, argument for argument).
// Arguments cuBLAS would refuse (a leading dimension shorter than a column) are refused with its
// status; operands outside device memory end the process with a message.
#include <cblas.h>

#include <algorithm>

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

// C = alpha op(A) op(B) + beta C, column-major; with beta 0, C is written without being read, in
// BLAS as in cuBLAS (so a poisoned output buffer does not leak into the result).
EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                     const float* alpha, const float* a, int lda, const float* b, int ldb,
                                     const float* beta, float* c, int ldc) {
    bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if ((transa != CUBLAS_OP_N && !ta) || (transb != CUBLAS_OP_N && !tb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = ta ? k : m, b_rows = tb ? n : k;
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    int a_cols = ta ? m : k, b_cols = tb ? k : n;
    // Host pointer mode (cuBLAS's default): the scalars are read when the call is made.
    float scale = *alpha, keep = *beta;
    auto span = [](int rows, int cols, int ld) { return (size_t(cols - 1) * ld + rows) * sizeof(float); };
    if (k > 0) {
        fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(a), span(a_rows, a_cols, lda), "cublasSgemm A");
        fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(b), span(b_rows, b_cols, ldb), "cublasSgemm B");
    }
    fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(c), span(m, n, ldc), "cublasSgemm C");
    enqueue(handle->stream, "sgemm", [=] {
        cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, scale, a,
                    lda, b, ldb, keep, c, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}
