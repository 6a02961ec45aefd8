// The matrix product shared by the emulated cuBLAS (cublas.cpp) and cuBLASLt (cublaslt.cpp), so
// that both give the same bits for the same product (docs/simt.md: "Design", its cuBLAS paragraph, and
// "cuBLASLt").
//
// All matrices are column-major: element (row, col) of a matrix with leading dimension ld is
// at data[row + col * ld]. op(A) is m x k and op(B) is k x n; op is the identity or the
// transpose. Products accumulate in fp32 in a fixed order of k; with TF32 the fp32 inputs are
// first rounded to TF32 as tensor cores do. Both files are compiled with the counting build's
// access hooks, so the loads and stores here count as the product's traffic.
#pragma once

#include <cublas_api.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace simt {
namespace blas {

// One matrix argument: its elements, their type, leading dimension and batch stride (elements).
struct Matrix {
  const void* data;
  cudaDataType type;
  long long ld;
  long long stride;
};

// Says on stderr why the library refuses a call and returns the status it refuses it with.
inline cublasStatus_t reject(cublasStatus_t status, const char* api, const std::string& why) {
  std::fprintf(stderr, "simt: %s: %s (%s)\n", api, why.c_str(), cublasGetStatusName(status));
  return status;
}

inline bool is_supported(cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

// Element `index` of an fp32 or bf16 array, as fp32.
inline float load(const void* data, cudaDataType type, long long index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

// Stores `value` as element `index` of an fp32 or bf16 array, rounding to nearest for bf16.
inline void store(void* data, cudaDataType type, long long index, float value) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16(value);
  else
    static_cast<float*>(data)[index] = value;
}

// fp32 -> TF32 (10 mantissa bits), rounding to nearest with ties away from zero like the
// tensor cores' conversion; infinities and NaN pass through.
inline float round_to_tf32(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Copies one batch of the stored (column-major) matrix X into a dense row-major rows x cols
// array of floats: element (r, c) is X(r, c), or X(c, r) when `transposed`; rounded to TF32
// when asked.
inline std::vector<float> gather(const Matrix& x, long long batch, bool transposed, int rows, int cols, bool tf32) {
  std::vector<float> dense(static_cast<std::size_t>(rows) * cols);
  const long long offset = batch * x.stride;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const long long index = offset + (transposed ? c + r * x.ld : r + c * x.ld);
      const float value = load(x.data, x.type, index);
      dense[static_cast<std::size_t>(r) * cols + c] = tf32 ? round_to_tf32(value) : value;
    }
  return dense;
}

// Sum of a[p] * b[p] over p < k, in eight interleaved fp32 partial sums (a fixed order that
// the compiler can vectorise). Reads only gather()'s own arrays, so it skips the sanitizers'
// checks, which would otherwise keep it from vectorising and dominate every emulated matmul.
__attribute__((no_sanitize("address", "undefined"))) inline float dot(const float* a, const float* b, int k) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int p = 0;
  for (; p + 8 <= k; p += 8)
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[p + lane] * b[p + lane];
  for (; p < k; ++p) partial[0] += a[p] * b[p];
  float sum = 0.0f;
  for (float value : partial) sum += value;
  return sum;
}

// alpha·op(A)·op(B) of one batch, element by element: op(A) is gathered as m x k and op(B),
// transposed, as n x k, so each element is one dot() of two contiguous rows. With alpha == 0
// or k == 0, A and B are not read and every element is 0, as in cuBLAS.
class ScaledProduct {
 public:
  ScaledProduct(const Matrix& a, bool a_transposed, const Matrix& b, bool b_transposed, long long batch, int m,
                int n, int k, float alpha, bool tf32)
      : k_(k), alpha_(alpha), reads_ab_(alpha != 0.0f && k > 0) {
    if (!reads_ab_) return;
    a_dense_ = gather(a, batch, a_transposed, m, k, tf32);
    b_dense_ = gather(b, batch, !b_transposed, n, k, tf32);
  }

  // True when the product reads A and B (alpha != 0 and k > 0).
  bool reads_ab() const { return reads_ab_; }
  // alpha * (op(A) op(B))(row, col).
  float operator()(int row, int col) const {
    return reads_ab_ ? alpha_ * dot(&a_dense_[1ull * row * k_], &b_dense_[1ull * col * k_], k_) : 0.0f;
  }
  // Column `col` of op(B) as k contiguous values (only when reads_ab()).
  const float* op_b_column(int col) const { return &b_dense_[1ull * col * k_]; }

 private:
  int k_;
  float alpha_;
  bool reads_ab_;
  std::vector<float> a_dense_, b_dense_;  // op(A) as m x k, op(B) transposed as n x k
};

}  // namespace blas
}  // namespace simt
