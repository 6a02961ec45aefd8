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
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "internal.h"
#include "counting.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace simt {
namespace {

// One matrix argument as cuBLAS receives it.
struct Matrix {
  const void* data;
  cudaDataType type;
  int ld;
  long long stride;  // between consecutive batches, in elements
};

// Says on stderr why cuBLAS refuses a call and returns the status it refuses it with.
cublasStatus_t reject(cublasStatus_t status, const char* api, const std::string& why) {
  std::fprintf(stderr, "simt: %s: %s (%s)\n", api, why.c_str(), cublasGetStatusName(status));
  return status;
}

bool is_supported(cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

float load(const void* data, cudaDataType type, long long index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

void store(void* data, cudaDataType type, long long index, float value) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16(value);
  else
    static_cast<float*>(data)[index] = value;
}

// fp32 -> TF32 (10 mantissa bits), rounding to nearest with ties away from zero like the
// tensor cores' conversion; infinities and NaN pass through.
float round_to_tf32(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Copies one batch of the stored (column-major) matrix X into a dense row-major rows x cols
// array of floats: element (r, c) is X(r, c), or X(c, r) when `transposed`; rounded to TF32
// when asked.
std::vector<float> gather(const Matrix& x, long long batch, bool transposed, int rows, int cols,
                          bool tf32) {
  std::vector<float> dense(static_cast<std::size_t>(rows) * cols);
  const long long offset = batch * x.stride;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const long long index = offset + (transposed ? c + 1ll * r * x.ld : r + 1ll * c * x.ld);
      const float value = load(x.data, x.type, index);
      dense[static_cast<std::size_t>(r) * cols + c] = tf32 ? round_to_tf32(value) : value;
    }
  return dense;
}

// Sum of a[p] * b[p] over p < k, in eight interleaved fp32 partial sums (a fixed order that
// the compiler can vectorise). Reads only gather()'s own arrays, so it skips the sanitizers'
// checks, which would otherwise keep it from vectorising and dominate every emulated matmul.
__attribute__((no_sanitize("address", "undefined"))) float dot(const float* a, const float* b, int k) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int p = 0;
  for (; p + 8 <= k; p += 8)
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[p + lane] * b[p + lane];
  for (; p < k; ++p) partial[0] += a[p] * b[p];
  float sum = 0.0f;
  for (float value : partial) sum += value;
  return sum;
}

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
  if (a.type != b.type || !is_supported(a.type) || !is_supported(c_type) || (a.type == CUDA_R_32F && c_type != CUDA_R_32F))
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

  const DeviceMemoryAccess device_memory;
  begin_launch("gemm");
  for (long long batch = 0; batch < batch_count; ++batch) {
    std::vector<float> a_dense, b_dense;  // op(A) as m x k, op(B) transposed as n x k
    if (reads_ab) {
      a_dense = gather(a, batch, a_transposed, m, k, tf32);
      b_dense = gather(b, batch, !b_transposed, n, k, tf32);
    }
    for (int col = 0; col < n; ++col)
      for (int row = 0; row < m; ++row) {
        const long long index = batch * stride_c + row + 1ll * col * ldc;
        float value = reads_ab ? alpha_value * dot(&a_dense[1ull * row * k], &b_dense[1ull * col * k], k) : 0.0f;
        if (beta_value != 0.0f) value += beta_value * load(c_data, c_type, index);
        store(c_data, c_type, index, value);
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
