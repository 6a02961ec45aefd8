// The cuBLAS calls the project uses, on the CPU, with cuBLAS's exact semantics:
//
//   C = alpha * op(A) * op(B) + beta * C      for each batch b:  X_b = X + b * strideX
//
// All matrices are column-major: element (row, col) of a matrix with leading dimension ld is
// at data[row + col * ld]. op(A) is m x k, op(B) is k x n, C is m x n; op is the identity for
// CUBLAS_OP_N and the transpose for CUBLAS_OP_T (and CUBLAS_OP_C: the data are real). Products
// accumulate in fp32 in order of k; with TF32 enabled the fp32 inputs are first rounded to TF32
// as tensor cores do; a bf16 C is rounded to bf16 once at the end. As in cuBLAS, beta == 0
// means C is not read (it may hold NaN) and alpha == 0 means A and B are not read.
// Arguments cuBLAS rejects get the status cuBLAS returns, plus a line on stderr saying why.
#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "blas.h"
#include "counting.h"
#include "internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace simt {
namespace {

using blas::Matrix;
using blas::reject;

// Checks the arguments in the order cuBLAS documents them and runs the (batched) product.
cublasStatus_t gemm(const char* api, cublasHandle_t handle, cublasOperation_t transa,
                    cublasOperation_t transb, int m, int n, int k, const void* alpha, Matrix a,
                    Matrix b, const void* beta, void* c_data, cudaDataType c_type, int ldc,
                    long long stride_c, int batch_count, cublasComputeType_t compute) {
  if (handle == nullptr) return reject(CUBLAS_STATUS_NOT_INITIALIZED, api, "null handle (call cublasCreate first)");
  const auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!valid_op(transa) || !valid_op(transb)) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "invalid transa or transb");
  if (m < 0 || n < 0 || k < 0 || batch_count < 0)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "negative m, n, k or batchCount");
  const bool a_transposed = transa != CUBLAS_OP_N;
  const bool b_transposed = transb != CUBLAS_OP_N;
  const int a_rows = a_transposed ? k : m;  // rows of A as stored
  const int b_rows = b_transposed ? n : k;
  if (a.ld < std::max(1, a_rows))
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "lda = " + std::to_string(a.ld) + " but A as stored has " + std::to_string(a_rows) + " rows");
  if (b.ld < std::max(1, b_rows))
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "ldb = " + std::to_string(b.ld) + " but B as stored has " + std::to_string(b_rows) + " rows");
  if (ldc < std::max(1, m))
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "ldc = " + std::to_string(ldc) + " but C has " + std::to_string(m) + " rows");
  if (alpha == nullptr || beta == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null alpha or beta");
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "emulated compute types: CUBLAS_COMPUTE_32F, _PEDANTIC, _FAST_TF32");
  if (a.type != b.type || !blas::is_supported(a.type) || !blas::is_supported(c_type) || (a.type == CUDA_R_32F && c_type != CUDA_R_32F))
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "emulated types (A/B, C): (32F, 32F), (16BF, 16BF), (16BF, 32F)");
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;

  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const bool reads_ab = alpha_value != 0.0f && k > 0;
  if (!is_device_range(c_data, 0) || (reads_ab && (!is_device_range(a.data, 0) || !is_device_range(b.data, 0))))
    return reject(CUBLAS_STATUS_EXECUTION_FAILED, api, "A, B and C must point into memory from cudaMalloc");
  const bool tf32 = a.type == CUDA_R_32F &&
                    (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                     (compute == CUBLAS_COMPUTE_32F && (handle->math_mode & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH));

  finish_pending_work();  // the stream's earlier work first
  const DeviceMemoryAccess device_memory;
  begin_launch("gemm");
  for (long long batch = 0; batch < batch_count; ++batch) {
    const blas::ScaledProduct product(a, a_transposed, b, b_transposed, batch, m, n, k, alpha_value, tf32);
    for (int col = 0; col < n; ++col)
      for (int row = 0; row < m; ++row) {
        const long long index = batch * stride_c + row + 1ll * col * ldc;
        float value = product(row, col);
        if (beta_value != 0.0f) value += beta_value * blas::load(c_data, c_type, index);
        blas::store(c_data, c_type, index, value);
      }
  }
  end_launch();
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace simt

// ---- handle ------------------------------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

// Workspace only matters for speed on a GPU.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void*, size_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown cuBLAS status";
  }
}

// ---- matrix products ---------------------------------------------------------------------------

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return simt::gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, {A, CUDA_R_32F, lda, 0},
                    {B, CUDA_R_32F, ldb, 0}, beta, C, CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb,
                                         long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  return simt::gemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha,
                    {A, CUDA_R_32F, lda, strideA}, {B, CUDA_R_32F, ldb, strideB}, beta, C,
                    CUDA_R_32F, ldc, strideC, batchCount, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  return simt::gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, {A, Atype, lda, 0},
                    {B, Btype, ldb, 0}, beta, C, Ctype, ldc, 0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return simt::gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha,
                    {A, Atype, lda, strideA}, {B, Btype, ldb, strideB}, beta, C, Ctype, ldc,
                    strideC, batchCount, computeType);
}
