// Tests of the SIMT emulation layer (test/simt/, docs/simt.md).
//
// Part 1 runs correct CUDA code everywhere: emulated on the CPU, and natively when a GPU is
// present, where the same expectations hold. It covers shared-memory reductions, warp
// operations, atomics, bf16, vector loads, dynamic shared memory, cuBLAS and cuBLASLt's
// epilogues, each checked against a plain loop, and a wrong cuBLAS transpose, which must give a
// mismatch or be refused.
// Because the same file passes natively, the emulator's semantics are pinned to the GPU's.
//
// Part 2 runs only emulated: it plants the bugs the layer exists to catch (races, out-of-bounds
// accesses, divergent shuffles and barriers, invalid launches, a cuBLAS transpose that reads past
// the end of a matrix, host access to device memory) and checks that each one fails loudly and
// names the kernel; and it checks what the emulated cuBLASLt refuses, and that its plain product
// is the emulated cublasGemmEx bit for bit.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/async_copy.cuh"
#include "cuda_test_util.h"

namespace {

// ---- helpers ------------------------------------------------------------------------------------

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}

// An array in device memory, filled from and read back into host vectors.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    check(cudaMalloc(&data_, size_ * sizeof(T)), "cudaMalloc");
    check(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  explicit DeviceArray(std::size_t size) : DeviceArray(std::vector<T>(size)) {}
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    check(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

 private:
  std::size_t size_;
  T* data_ = nullptr;
};

// Small integers as floats: every sum and product of them is exact, in any order.
std::vector<float> small_integers(std::size_t n, int seed) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 9) - 4);
  return values;
}

// Largest |a[i] - b[i]|; infinite when any element is NaN in one array and not the other.
float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float difference = std::fabs(a[i] - b[i]);
    if (std::isnan(difference) && !(std::isnan(a[i]) && std::isnan(b[i]))) return INFINITY;
    worst = std::fmax(worst, difference);
  }
  return worst;
}

// ---- correct kernels ---------------------------------------------------------------------------

// Sum of in[] over a grid-stride loop, reduced in shared memory: one result per block.
template <int kBlock>
__global__ void block_sum_kernel(const float* in, float* block_sums, int n) {
  __shared__ float partial[kBlock];
  const int t = threadIdx.x;
  float sum = 0.0f;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) sum += in[i];
  partial[t] = sum;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

// The warp operations, one output array each.
__global__ void warp_ops_kernel(const float* in, float* xor_sums, float* down_sums, float* maxes,
                                float* lane5, float* scans, float* segment_sums, unsigned* ballots,
                                int* all_positive) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % warpSize;
  const float v = in[i];
  float xor_sum = v, down_sum = v, maximum = v, scan = v, segment_sum = v;
  for (int offset = 16; offset > 0; offset /= 2) {
    xor_sum += __shfl_xor_sync(0xffffffff, xor_sum, offset);
    down_sum += __shfl_down_sync(0xffffffff, down_sum, offset);
    maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffff, maximum, offset));
  }
  for (int offset = 1; offset < 32; offset *= 2) {
    const float below = __shfl_up_sync(0xffffffff, scan, offset);
    if (lane >= offset) scan += below;
  }
  for (int offset = 4; offset > 0; offset /= 2) segment_sum += __shfl_xor_sync(0xffffffff, segment_sum, offset, 8);
  xor_sums[i] = xor_sum;
  down_sums[i] = down_sum;
  maxes[i] = maximum;
  lane5[i] = __shfl_sync(0xffffffff, v, 5);
  scans[i] = scan;
  segment_sums[i] = segment_sum;
  ballots[i] = __ballot_sync(0xffffffff, v > 0.0f);
  all_positive[i] = __all_sync(0xffffffff, v > -10.0f);
}

__global__ void atomics_kernel(const float* in, int n, int* histogram, float* total, int* largest) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&histogram[static_cast<int>(in[i]) + 4], 1);
  atomicAdd(total, in[i]);
  atomicMax(largest, static_cast<int>(in[i]) * 10 + i % 10);
}

__global__ void bf16_kernel(const float* in, float* round_trip, __nv_bfloat16* fused, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __nv_bfloat16 x = __float2bfloat16(in[i]);
  round_trip[i] = __bfloat162float(x);
  fused[i] = x * __float2bfloat16(0.5f) + __float2bfloat16(1.0f);
}

__global__ void scale_float4_kernel(const float* in, float* out, float factor, int n4) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = reinterpret_cast<const float4*>(in)[i];
  v.x *= factor;
  v.y *= factor;
  v.z *= factor;
  v.w *= factor;
  reinterpret_cast<float4*>(out)[i] = v;
}

// Reverses each block's slice of `values` through dynamic shared memory.
template <typename T>
__global__ void reverse_in_shared_kernel(const T* in, T* out, int per_block) {
  extern __shared__ float staging[];
  T* slice = reinterpret_cast<T*>(staging);
  const T* block_in = in + blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) slice[i] = block_in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) out[blockIdx.x * per_block + i] = slice[per_block - 1 - i];
}

// ---- reference implementations ------------------------------------------------------------------

// C = alpha * op(A) * op(B) + beta * C for column-major matrices, as cuBLAS defines it.
void reference_gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  for (int col = 0; col < n; ++col)
    for (int row = 0; row < m; ++row) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const float a_value = transpose_a ? a[p + row * lda] : a[row + p * lda];
        const float b_value = transpose_b ? b[col + p * ldb] : b[p + col * ldb];
        sum += static_cast<double>(a_value) * b_value;
      }
      float& out = c[row + col * ldc];
      out = static_cast<float>(alpha * sum + (beta == 0.0f ? 0.0 : beta * out));
    }
}

// Row-major C (m x n) = A (m x k) * B (k x n) through column-major cuBLAS: C^T = B^T * A^T.
cublasStatus_t row_major_matmul(cublasHandle_t handle, cublasOperation_t op_b, const float* a,
                                const float* b, float* c, int m, int n, int k) {
  const float one = 1.0f, zero = 0.0f;
  return cublasSgemm(handle, op_b, CUBLAS_OP_N, n, m, k, &one, b, n, a, k, &zero, c, n);
}

// ---- cuBLASLt ------------------------------------------------------------------------------------

template <typename T>
cudaDataType data_type() {
  return std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16BF;
}

// A float as T (float, or bf16 rounded to nearest), and back.
template <typename T>
T round_to(float value);
template <>
float round_to<float>(float value) { return value; }
template <>
__nv_bfloat16 round_to<__nv_bfloat16>(float value) { return __float2bfloat16(value); }
float to_float(float value) { return value; }
float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

// Host values as T, and back.
template <typename T>
std::vector<T> converted(const std::vector<float>& values) {
  std::vector<T> out;
  for (float v : values) out.push_back(round_to<T>(v));
  return out;
}
template <typename T>
std::vector<float> as_floats(const std::vector<T>& values) {
  std::vector<float> out;
  for (const T& v : values) out.push_back(to_float(v));
  return out;
}

// Values k * 65/256 for small integers k: exact in bf16 (7 significant bits), while their
// products (14 bits) are not, and every sum of a few products is exact in fp32.
std::vector<float> bf16_exact_values(std::size_t n, int seed) {
  std::vector<float> values = small_integers(n, seed);
  for (float& v : values) v *= 65.0f / 256.0f;
  return values;
}

// GELU, tanh approximation, and its derivative, in double: the test's own reference.
double reference_gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double reference_gelu_derivative(double x) {
  const double s = std::sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// One cublasLtMatmul call: D = epilogue(alpha op(A) op(B) + beta C), column-major.
struct LtCall {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  cudaDataType ab_type = CUDA_R_32F;
  long long lda = 0;
  const void* b = nullptr;
  long long ldb = 0;
  const void* c = nullptr;
  void* d = nullptr;
  cudaDataType cd_type = CUDA_R_32F;
  long long ldc = 0, ldd = 0;
  int cd_rows = 0;  // rows of C and D as described; 0: m
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int bias_type = -1;  // -1: not set (D's type)
  void* aux = nullptr;
  long long aux_ld = 0;
  uint32_t min_alignment[4] = {0, 0, 0, 0};  // MIN_ALIGNMENT_{A,B,C,D}_BYTES of the preference; 0: not set
  bool without_algo = false;                 // cublasLtMatmul with a null algo (its own heuristic)
};

// What the heuristic and the product returned.
struct LtOutcome {
  cublasStatus_t heuristic;
  int algo_count;
  cublasStatus_t matmul;  // with the heuristic's algorithm, or a null one when it gave none
};

// Describes `call` to cuBLASLt, asks the heuristic for an algorithm and runs the product.
LtOutcome run_lt(cublasLtHandle_t handle, const LtCall& call) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t transa = call.transa, transb = call.transb;
  const uint32_t epilogue = call.epilogue;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  if (call.bias != nullptr)
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &call.bias, sizeof call.bias);
  if (call.bias_type != -1) {
    const int32_t bias_type = call.bias_type;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
  }
  if (call.aux != nullptr) {
    const int64_t aux_ld = call.aux_ld;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &call.aux, sizeof call.aux);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  }
  const bool ta = call.transa != CUBLAS_OP_N, tb = call.transb != CUBLAS_OP_N;
  cublasLtMatrixLayout_t a_layout, b_layout, c_layout, d_layout;
  cublasLtMatrixLayoutCreate(&a_layout, call.ab_type, ta ? call.k : call.m, ta ? call.m : call.k, call.lda);
  cublasLtMatrixLayoutCreate(&b_layout, call.ab_type, tb ? call.n : call.k, tb ? call.k : call.n, call.ldb);
  const int cd_rows = call.cd_rows == 0 ? call.m : call.cd_rows;
  cublasLtMatrixLayoutCreate(&c_layout, call.cd_type, cd_rows, call.n, call.ldc);
  cublasLtMatrixLayoutCreate(&d_layout, call.cd_type, cd_rows, call.n, call.ldd);
  cublasLtMatmulPreference_t preference;
  cublasLtMatmulPreferenceCreate(&preference);
  const uint64_t workspace_bytes = 0;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof workspace_bytes);
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    if (call.min_alignment[i] != 0)
      cublasLtMatmulPreferenceSetAttribute(preference, alignment_attributes[i], &call.min_alignment[i],
                                           sizeof call.min_alignment[i]);
  cublasLtMatmulHeuristicResult_t result{};
  LtOutcome outcome{};
  outcome.heuristic = cublasLtMatmulAlgoGetHeuristic(handle, desc, a_layout, b_layout, c_layout, d_layout, preference,
                                                     1, &result, &outcome.algo_count);
  const bool have_algo = outcome.heuristic == CUBLAS_STATUS_SUCCESS && outcome.algo_count > 0;
  outcome.matmul = cublasLtMatmul(handle, desc, &call.alpha, call.a, a_layout, call.b, b_layout, &call.beta, call.c,
                                  c_layout, call.d, d_layout, have_algo && !call.without_algo ? &result.algo : nullptr,
                                  nullptr, 0, 0);
  check(cudaDeviceSynchronize(), "cublasLtMatmul");
  cublasLtMatmulPreferenceDestroy(preference);
  for (cublasLtMatrixLayout_t layout : {a_layout, b_layout, c_layout, d_layout}) cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  return outcome;
}

// What `call` must produce, from the documented semantics, on the host in double: `t` holds
// alpha op(A) op(B) + beta C (m x n, ld m) on entry and D (before rounding) on return; aux and
// bias are updated as the epilogue writes them.
void reference_epilogue(cublasLtEpilogue_t epilogue, int m, int n, int k, std::vector<double>& t,
                        const std::vector<float>& op_b, std::vector<float>& bias, std::vector<float>& aux,
                        long long aux_ld) {
  for (int col = 0; col < n; ++col)
    for (int row = 0; row < m; ++row) {
      double& value = t[row + 1ll * col * m];
      if (epilogue == CUBLASLT_EPILOGUE_BIAS) value += bias[row];
      if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        value += bias[row];
        aux[row + col * aux_ld] = static_cast<float>(value);
        value = reference_gelu(value);
      }
      if (epilogue == CUBLASLT_EPILOGUE_DGELU) value *= reference_gelu_derivative(aux[row + col * aux_ld]);
    }
  if (epilogue == CUBLASLT_EPILOGUE_BGRADB)
    for (int col = 0; col < n; ++col) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) sum += op_b[p + 1ll * col * k];
      bias[col] = static_cast<float>(sum);
    }
}

// Tolerance, relative to 1 + |value|, of a GELU or GELU' result in fp32. The emulator computes
// the tanh formula in float (a few units in the last place); a GPU's cuBLASLt may use the
// hardware's approximate tanh (relative error about 2^-11), which the native run allows.
#ifdef SIMT_EMULATION
constexpr double kGeluTolerance = 1e-6;
#else
constexpr double kGeluTolerance = 2e-3;
#endif

// True when `got` is `want` rounded to T; when `inexact` (a GELU or GELU' result), within one
// rounding step of T (bf16) or kGeluTolerance (fp32).
template <typename T>
bool close_to(float got, double want, bool inexact) {
  const float rounded = to_float(round_to<T>(static_cast<float>(want)));
  if (!inexact) return got == rounded;
  const double step = std::is_same<T, float>::value ? kGeluTolerance : std::max(kGeluTolerance, 1.0 / 256);
  return std::fabs(got - want) <= step * (1.0 + std::fabs(want));
}

// =============================================================================================
// Part 1: correct code, checked against plain loops (emulated and native)
// =============================================================================================

TEST(SimtCorrect, SharedMemoryBlockReduction) {
  REQUIRE_CUDA_DEVICE();
  const int n = 5000, blocks = 6;
  const std::vector<float> in = small_integers(n, 1);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> d_sums(blocks);
  block_sum_kernel<128><<<blocks, 128>>>(d_in.get(), d_sums.get(), n);
  check(cudaGetLastError(), "launch");
  const std::vector<float> sums = d_sums.to_host();
  float total = 0.0f, expected = 0.0f;
  for (float s : sums) total += s;
  for (float v : in) expected += v;
  EXPECT_EQ(total, expected);
}

TEST(SimtCorrect, WarpOperations) {
  REQUIRE_CUDA_DEVICE();
  const int n = 128;
  const std::vector<float> in = small_integers(n, 2);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> xor_sums(n), down_sums(n), maxes(n), lane5(n), scans(n), segment_sums(n);
  DeviceArray<unsigned> ballots(n);
  DeviceArray<int> all_positive(n);
  warp_ops_kernel<<<2, 64>>>(d_in.get(), xor_sums.get(), down_sums.get(), maxes.get(), lane5.get(),
                             scans.get(), segment_sums.get(), ballots.get(), all_positive.get());
  check(cudaGetLastError(), "launch");
  const std::vector<float> xs = xor_sums.to_host(), ds = down_sums.to_host(), ms = maxes.to_host(),
                           ls = lane5.to_host(), ss = scans.to_host(), gs = segment_sums.to_host();
  const std::vector<unsigned> bs = ballots.to_host();
  const std::vector<int> as = all_positive.to_host();
  for (int warp = 0; warp < n / 32; ++warp) {
    float sum = 0.0f, maximum = -INFINITY, scan = 0.0f;
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; ++lane) {
      const float v = in[warp * 32 + lane];
      sum += v;
      maximum = std::fmax(maximum, v);
      if (v > 0.0f) ballot |= 1u << lane;
    }
    EXPECT_EQ(ds[warp * 32], sum) << "__shfl_down_sync reduction, warp " << warp;
    for (int lane = 0; lane < 32; ++lane) {
      const int i = warp * 32 + lane;
      scan += in[i];
      float segment = 0.0f;
      for (int j = lane / 8 * 8; j < lane / 8 * 8 + 8; ++j) segment += in[warp * 32 + j];
      EXPECT_EQ(xs[i], sum) << "__shfl_xor_sync sum, thread " << i;
      EXPECT_EQ(ms[i], maximum) << "__shfl_xor_sync max, thread " << i;
      EXPECT_EQ(ls[i], in[warp * 32 + 5]) << "__shfl_sync broadcast, thread " << i;
      EXPECT_EQ(ss[i], scan) << "__shfl_up_sync scan, thread " << i;
      EXPECT_EQ(gs[i], segment) << "__shfl_xor_sync width 8, thread " << i;
      EXPECT_EQ(bs[i], ballot) << "__ballot_sync, thread " << i;
      EXPECT_EQ(as[i], 1) << "__all_sync, thread " << i;
    }
  }
}

TEST(SimtCorrect, Atomics) {
  REQUIRE_CUDA_DEVICE();
  const int n = 1000;
  const std::vector<float> in = small_integers(n, 3);
  const DeviceArray<float> d_in(in);
  DeviceArray<int> histogram(9);
  DeviceArray<float> total(1);
  DeviceArray<int> largest(std::vector<int>{-1000});
  atomics_kernel<<<(n + 255) / 256, 256>>>(d_in.get(), n, histogram.get(), total.get(), largest.get());
  check(cudaGetLastError(), "launch");
  std::vector<int> expected_histogram(9, 0);
  float expected_total = 0.0f;
  int expected_largest = -1000;
  for (int i = 0; i < n; ++i) {
    ++expected_histogram[static_cast<int>(in[i]) + 4];
    expected_total += in[i];
    expected_largest = std::max(expected_largest, static_cast<int>(in[i]) * 10 + i % 10);
  }
  EXPECT_EQ(histogram.to_host(), expected_histogram);
  EXPECT_EQ(total.to_host()[0], expected_total);
  EXPECT_EQ(largest.to_host()[0], expected_largest);
}

TEST(SimtCorrect, Bf16RoundTripAndArithmetic) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<float> in = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, 1.0f + 1.0f / 256, -7.75f};
  const int n = static_cast<int>(in.size());
  const DeviceArray<float> d_in(in);
  DeviceArray<float> round_trip(n);
  DeviceArray<__nv_bfloat16> fused(n);
  bf16_kernel<<<1, 32>>>(d_in.get(), round_trip.get(), fused.get(), n);
  check(cudaGetLastError(), "launch");
  const std::vector<float> rt = round_trip.to_host();
  const std::vector<__nv_bfloat16> fu = fused.to_host();
  for (int i = 0; i < n; ++i) {
    const float expected = __bfloat162float(__float2bfloat16(in[i]));  // host side of cuda_bf16.h
    EXPECT_EQ(rt[i], expected) << in[i];
    const float x = expected * 0.5f;  // exact in bf16: halving keeps the mantissa
    EXPECT_EQ(__bfloat162float(fu[i]), __bfloat162float(__float2bfloat16(x + 1.0f))) << in[i];
  }
}

TEST(SimtCorrect, Float4VectorLoads) {
  REQUIRE_CUDA_DEVICE();
  const int n = 256;
  const std::vector<float> in = small_integers(n, 4);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(n);
  scale_float4_kernel<<<2, 32>>>(d_in.get(), out.get(), 3.0f, n / 4);
  check(cudaGetLastError(), "launch");
  const std::vector<float> result = out.to_host();
  for (int i = 0; i < n; ++i) EXPECT_EQ(result[i], 3.0f * in[i]) << i;
}

TEST(SimtCorrect, DynamicSharedMemoryAbove48KiB) {
  REQUIRE_CUDA_DEVICE();
  const int per_block = 16 * 1024, blocks = 2;  // 64 KiB of floats per block
  const std::size_t shared_bytes = per_block * sizeof(float);
  check(cudaFuncSetAttribute(reverse_in_shared_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes)),
        "cudaFuncSetAttribute");
  const std::vector<float> in = small_integers(per_block * blocks, 5);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(in.size());
  reverse_in_shared_kernel<float><<<blocks, 256, shared_bytes>>>(d_in.get(), out.get(), per_block);
  check(cudaGetLastError(), "launch");
  const std::vector<float> result = out.to_host();
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < per_block; ++i)
      ASSERT_EQ(result[b * per_block + i], in[b * per_block + per_block - 1 - i]) << b << " " << i;
}

TEST(SimtCorrect, CublasStridedBatchedGemmAllTransposes) {
  REQUIRE_CUDA_DEVICE();
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 7, k = 3, batches = 3;
  const float alpha = 0.5f, beta = 2.0f;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1, ldc = m + 3;  // padded
      const long long stride_a = 1ll * lda * (ta ? m : k) + 4, stride_b = 1ll * ldb * (tb ? k : n);
      const long long stride_c = 1ll * ldc * n + 1;
      const std::vector<float> a = small_integers(stride_a * batches, 6);
      const std::vector<float> b = small_integers(stride_b * batches, 7);
      std::vector<float> c = small_integers(stride_c * batches, 8);
      const DeviceArray<float> d_a(a), d_b(b);
      DeviceArray<float> d_c(c);
      ASSERT_EQ(cublasSgemmStridedBatched(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          m, n, k, &alpha, d_a.get(), lda, stride_a, d_b.get(), ldb, stride_b,
                                          &beta, d_c.get(), ldc, stride_c, batches),
                CUBLAS_STATUS_SUCCESS);
      for (int batch = 0; batch < batches; ++batch)
        reference_gemm(ta, tb, m, n, k, alpha, &a[batch * stride_a], lda, &b[batch * stride_b], ldb, beta,
                       &c[batch * stride_c], ldc);
      EXPECT_EQ(max_abs_difference(d_c.to_host(), c), 0.0f) << "transa " << ta << ", transb " << tb;
    }
  cublasDestroy(handle);
}

TEST(SimtCorrect, CublasGemmExBf16AndBetaZeroIgnoresC) {
  REQUIRE_CUDA_DEVICE();
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int m = 8, n = 4, k = 16;
  const std::vector<float> a = small_integers(m * k, 9), b = small_integers(k * n, 10);
  std::vector<__nv_bfloat16> a16, b16;
  for (float v : a) a16.push_back(__float2bfloat16(v));
  for (float v : b) b16.push_back(__float2bfloat16(v));
  const DeviceArray<__nv_bfloat16> d_a(a16), d_b(b16);
  DeviceArray<__nv_bfloat16> d_c(std::vector<__nv_bfloat16>(m * n, __float2bfloat16(NAN)));
  const float alpha = 1.0f, beta = 0.0f;
  ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, d_a.get(), CUDA_R_16BF, k,
                         d_b.get(), CUDA_R_16BF, k, &beta, d_c.get(), CUDA_R_16BF, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> expected(m * n);
  reference_gemm(true, false, m, n, k, alpha, a.data(), k, b.data(), k, beta, expected.data(), m);
  const std::vector<__nv_bfloat16> c = d_c.to_host();
  for (int i = 0; i < m * n; ++i)
    EXPECT_EQ(__bfloat162float(c[i]), __bfloat162float(__float2bfloat16(expected[i]))) << i;
  cublasDestroy(handle);
}

// The classic row-major trick computes C = A B with cuBLAS as C^T = B^T A^T. Transposing B in
// that call is the typical mistake: with square matrices it runs and gives wrong numbers; when
// B has fewer columns than rows its leading dimension no longer fits and cuBLAS refuses the
// call; with more columns than rows it reads past the end of B (part 2 catches that).
TEST(SimtCorrect, CublasWrongTransposeIsCaught) {
  REQUIRE_CUDA_DEVICE();
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int size = 6;
  const std::vector<float> a = small_integers(size * size, 11), b = small_integers(size * size, 12);
  std::vector<float> expected(size * size, 0.0f);
  for (int i = 0; i < size; ++i)
    for (int j = 0; j < size; ++j)
      for (int p = 0; p < size; ++p) expected[i * size + j] += a[i * size + p] * b[p * size + j];
  const DeviceArray<float> d_a(a), d_b(b);
  DeviceArray<float> d_c(size * size);
  ASSERT_EQ(row_major_matmul(handle, CUBLAS_OP_N, d_a.get(), d_b.get(), d_c.get(), size, size, size), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(max_abs_difference(d_c.to_host(), expected), 0.0f);
  ASSERT_EQ(row_major_matmul(handle, CUBLAS_OP_T, d_a.get(), d_b.get(), d_c.get(), size, size, size), CUBLAS_STATUS_SUCCESS);
  EXPECT_GT(max_abs_difference(d_c.to_host(), expected), 1.0f) << "a transposed B went unnoticed";

  // Now B is 5 x 2: transposed, cuBLAS reads it as stored with 5 rows, more than ldb = 2.
  const int m = 3, n = 2, k = 5;
  DeviceArray<float> d_small_a(m * k), d_small_b(k * n), d_small_c(m * n);
  EXPECT_EQ(row_major_matmul(handle, CUBLAS_OP_T, d_small_a.get(), d_small_b.get(), d_small_c.get(), m, n, k),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(handle);
}

// One cuBLASLt product with one epilogue, types TAB (A, B) and TD (C, D), checked against the
// documented semantics computed on the host (reference_epilogue). Padded leading dimensions;
// padding must stay untouched. With beta == 0, C holds NaN (it must not be read); in_place
// accumulates into D = C. A configuration the GPU's cuBLASLt refuses is said and left
// unchecked natively (the caller then takes another path); the emulator must run every one.
template <typename TAB, typename TD>
void check_lt_epilogue(cublasLtHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                       int k, float alpha, float beta, bool in_place, cublasLtEpilogue_t epilogue,
                       bool fp32_bias = false) {
  const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           ", transa " + std::to_string(transa) + " transb " + std::to_string(transb) + ", epilogue " +
                           std::to_string(epilogue) + (in_place ? ", in place" : "") + (fp32_bias ? ", fp32 bias" : "");
  SCOPED_TRACE(what);
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const long long lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldd = m + 3;
  const long long aux_ld = (m + 7) / 8 * 8 + 8;
  const float sentinel = -99.0f;
  const bool bgrad = epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const std::vector<float> a = as_floats(converted<TAB>(bf16_exact_values(lda * (ta ? m : k), 1)));
  const std::vector<float> b = as_floats(converted<TAB>(bf16_exact_values(ldb * (tb ? k : n), 2)));
  const std::vector<float> c = beta == 0.0f ? std::vector<float>(ldd * n, NAN) : bf16_exact_values(ldd * n, 3);
  std::vector<float> bias = bgrad ? std::vector<float>(n, sentinel) : bf16_exact_values(m, 4);
  std::vector<float> aux = epilogue == CUBLASLT_EPILOGUE_DGELU ? bf16_exact_values(aux_ld * n, 5)
                                                               : std::vector<float>(aux_ld * n, sentinel);
  const DeviceArray<TAB> d_a(converted<TAB>(a)), d_b(converted<TAB>(b));
  DeviceArray<TD> d_c(converted<TD>(c)), d_d(converted<TD>(std::vector<float>(ldd * n, sentinel)));
  DeviceArray<TD> d_aux(converted<TD>(aux));
  DeviceArray<TD> d_bias(converted<TD>(bias));
  DeviceArray<float> d_bias32(bias);
  LtCall call;
  call.transa = transa, call.transb = transb, call.m = m, call.n = n, call.k = k, call.alpha = alpha, call.beta = beta;
  call.a = d_a.get(), call.ab_type = data_type<TAB>(), call.lda = lda, call.b = d_b.get(), call.ldb = ldb;
  call.c = d_c.get(), call.d = in_place ? d_c.get() : d_d.get(), call.cd_type = data_type<TD>(), call.ldc = ldd;
  call.ldd = ldd, call.epilogue = epilogue;
  if (epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || bgrad) {
    call.bias = fp32_bias ? static_cast<void*>(d_bias32.get()) : static_cast<void*>(d_bias.get());
    if (fp32_bias) call.bias_type = CUDA_R_32F;
  }
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU)
    call.aux = d_aux.get(), call.aux_ld = aux_ld;
  const LtOutcome outcome = run_lt(handle, call);
#ifndef SIMT_EMULATION
  // A GPU's cuBLASLt may refuse a configuration (the backend then runs the product unfused,
  // matmul.cuh): said, not failed or skipped (scripts/gpu_check.sh fails on a skip), and the
  // configurations it runs are checked.
  const cublasStatus_t matmul = outcome.matmul;
  if (outcome.heuristic != CUBLAS_STATUS_SUCCESS || outcome.algo_count == 0 || matmul == CUBLAS_STATUS_NOT_SUPPORTED ||
      matmul == CUBLAS_STATUS_INVALID_VALUE || matmul == CUBLAS_STATUS_ARCH_MISMATCH) {
    std::printf("  this GPU's cuBLASLt refused A/B %s, C/D %s, %s (heuristic %s, cublasLtMatmul %s); the emulator runs it\n",
                data_type<TAB>() == CUDA_R_16BF ? "bf16" : "fp32", data_type<TD>() == CUDA_R_16BF ? "bf16" : "fp32",
                what.c_str(), cublasGetStatusName(outcome.heuristic), cublasGetStatusName(matmul));
    return;
  }
#endif
  ASSERT_EQ(outcome.heuristic, CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(outcome.algo_count, 1);
  ASSERT_EQ(outcome.matmul, CUBLAS_STATUS_SUCCESS);

  // The reference, from the host copies of the (exactly representable) inputs.
  std::vector<double> t(1ull * m * n);
  std::vector<float> op_b(1ull * k * n);
  for (int col = 0; col < n; ++col)
    for (int p = 0; p < k; ++p) op_b[p + 1ll * col * k] = tb ? b[col + p * ldb] : b[p + col * ldb];
  for (int col = 0; col < n; ++col)
    for (int row = 0; row < m; ++row) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) sum += static_cast<double>(ta ? a[p + row * lda] : a[row + p * lda]) * op_b[p + 1ll * col * k];
      t[row + 1ll * col * m] = alpha * sum + (beta == 0.0f ? 0.0 : beta * to_float(round_to<TD>(c[row + col * ldd])));
    }
  std::vector<float> bias_want = bias, aux_want = as_floats(converted<TD>(aux));
  if (!fp32_bias) bias_want = as_floats(converted<TD>(bias));
  reference_epilogue(epilogue, m, n, k, t, op_b, bias_want, aux_want, aux_ld);

  const bool inexact = epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU;
  const std::vector<float> d = as_floats((in_place ? d_c : d_d).to_host());
  const std::vector<float> d_before = in_place ? as_floats(converted<TD>(c)) : std::vector<float>(ldd * n, sentinel);
  for (int col = 0; col < n; ++col)
    for (long long row = 0; row < ldd; ++row) {
      const long long i = row + col * ldd;
      if (row < m)
        EXPECT_TRUE(close_to<TD>(d[i], t[row + 1ll * col * m], inexact)) << "D(" << row << ", " << col << ") = " << d[i]
                                                                          << ", want " << t[row + 1ll * col * m];
      else
        EXPECT_EQ(d[i], d_before[i]) << "padding of D(" << row << ", " << col << ") written";
    }
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    const std::vector<float> aux_got = as_floats(d_aux.to_host());
    for (std::size_t i = 0; i < aux_got.size(); ++i)
      EXPECT_EQ(aux_got[i], to_float(round_to<TD>(aux_want[i]))) << "aux[" << i << "]";
  }
  if (bgrad) {
    const std::vector<float> bias_got = as_floats(d_bias.to_host());
    for (int col = 0; col < n; ++col) EXPECT_EQ(bias_got[col], to_float(round_to<TD>(bias_want[col]))) << "bias[" << col << "]";
  }
}

// The epilogues as the linear layers call them, on two shapes: the forward product (T, N) with
// DEFAULT, BIAS and GELU_AUX_BIAS; the input gradient (N, N) with DGELU, and accumulated in
// place; the weight gradient (N, T) accumulated in place, with and without BGRADB.
template <typename TAB, typename TD>
void check_lt_epilogues() {
  cublasLtHandle_t handle;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int shapes[2][3] = {{5, 7, 3}, {16, 24, 8}};
  for (const auto& shape : shapes) {
    const int m = shape[0], n = shape[1], k = shape[2];
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, 0.5f, 0.0f, false, CUBLASLT_EPILOGUE_DEFAULT);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, 1.0f, 0.0f, false, CUBLASLT_EPILOGUE_BIAS);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, 1.0f, 0.0f, false, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, 0.0f, false, CUBLASLT_EPILOGUE_DGELU);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, 1.0f, true, CUBLASLT_EPILOGUE_DEFAULT);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, 1.0f, 1.0f, true, CUBLASLT_EPILOGUE_DEFAULT);
    check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, 1.0f, 1.0f, true, CUBLASLT_EPILOGUE_BGRADB);
    if (std::is_same<TD, __nv_bfloat16>::value)
      check_lt_epilogue<TAB, TD>(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, 1.0f, 0.0f, false, CUBLASLT_EPILOGUE_BIAS, true);
  }
  cublasLtDestroy(handle);
}

TEST(SimtCorrect, CublasLtEpiloguesFp32) {
  REQUIRE_CUDA_DEVICE();
  check_lt_epilogues<float, float>();
}

TEST(SimtCorrect, CublasLtEpiloguesBf16) {
  REQUIRE_CUDA_DEVICE();
  check_lt_epilogues<__nv_bfloat16, __nv_bfloat16>();
}

TEST(SimtCorrect, CublasLtEpiloguesBf16InputsFp32Output) {
  REQUIRE_CUDA_DEVICE();
  check_lt_epilogues<__nv_bfloat16, float>();
}

// ---- cp.async (cuda/async_copy.cuh) ------------------------------------------------------------------

// 64 threads (two warps) copy 512 floats into shared memory with cp.async of every size, in two
// groups, wait for both, pass a barrier and write out the other warp's half: as on a GPU, the
// copies are visible to every thread once each has waited and all have met.
__global__ void async_copy_kernel(const float* in, float* out) {
  __shared__ __align__(16) float tile[512];
  const int t = threadIdx.x;
  cp_async<16>(tile + 4 * t, in + 4 * t);
  cp_async_commit();
  cp_async<8>(tile + 256 + 4 * t, in + 256 + 4 * t);
  cp_async<4>(tile + 258 + 4 * t, in + 258 + 4 * t);
  cp_async<4>(tile + 259 + 4 * t, in + 259 + 4 * t);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < 8; i++) out[8 * t + i] = tile[(8 * t + i + 256) % 512];
}

// Walks 3 tiles of 64 floats through two shared buffers, as the attention kernels walk theirs:
// tile j + 1 is copied (cp.async) while tile j is read, each thread reading the other warp's
// value and passing it through a shuffle into its sum. One barrier a tile, after each thread's
// wait for its own copies; `barrier` false leaves it out.
__global__ void double_buffered_walk_kernel(const float* in, float* out, bool barrier) {
  __shared__ __align__(16) float tiles[2][64];
  const int t = threadIdx.x;
  cp_async<4>(&tiles[0][t], in + t);
  cp_async_commit();
  float sum = 0.0f;
  for (int j = 0; j < 3; j++) {
    cp_async_wait<0>();
    if (barrier) __syncthreads();
    if (j + 1 < 3) {
      cp_async<4>(&tiles[(j + 1) % 2][t], in + 64 * (j + 1) + t);
      cp_async_commit();
    }
    sum += __shfl_xor_sync(0xffffffff, tiles[j % 2][63 - t], 1);
  }
  out[t] = sum;
}

std::vector<float> walk_expected(const std::vector<float>& in) {
  std::vector<float> expected(64, 0.0f);
  for (int t = 0; t < 64; ++t)
    for (int j = 0; j < 3; ++j) expected[t] += in[64 * j + 63 - (t ^ 1)];
  return expected;
}

TEST(SimtCorrect, AsyncCopiesOfEverySize) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<float> in = small_integers(512, 17);
  std::vector<float> expected(512);
  for (int i = 0; i < 512; ++i) expected[i] = in[(i + 256) % 512];
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(512);
  async_copy_kernel<<<1, 64>>>(d_in.get(), out.get());
  check(cudaDeviceSynchronize(), "async_copy_kernel");
  EXPECT_EQ(max_abs_difference(out.to_host(), expected), 0.0f);
}

TEST(SimtCorrect, DoubleBufferedAsyncCopies) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<float> in = small_integers(192, 18);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(64);
  double_buffered_walk_kernel<<<1, 64>>>(d_in.get(), out.get(), true);
  check(cudaDeviceSynchronize(), "double_buffered_walk_kernel");
  EXPECT_EQ(max_abs_difference(out.to_host(), walk_expected(in)), 0.0f);
}

// =============================================================================================
// Part 2: planted bugs, each of which the emulator must catch (emulated build only)
// =============================================================================================
#ifdef SIMT_EMULATION

// ---- kernels with planted bugs ------------------------------------------------------------------

// Rotates each block's values by one through shared memory, but forgets __syncthreads()
// between writing and reading: whether a neighbour's value is there yet depends on the order.
// rotate_kernel below is the correct version.
__global__ void rotate_without_barrier_kernel(const float* in, float* out) {
  __shared__ float values[64];
  const int t = threadIdx.x;
  values[t] = in[blockIdx.x * 64 + t];
  out[blockIdx.x * 64 + t] = values[(t + 1) % 64];
}

// Walks two tiles of 64 values through one shared buffer, as the attention kernels walk their
// key tiles: each thread loads its value, a barrier, then each reads the mirrored value (the
// other warp's) and passes it through a shuffle into its sum. Without the barrier before the
// buffer is loaded again, a warp that runs ahead overwrites values the other has yet to read:
// the orders that run every thread to its next warp operation in rounds keep the two warps in
// step and never show it; the warps schedule does.
__global__ void walk_tiles_kernel(const float* in, float* out, bool barrier_before_reload) {
  __shared__ float tile[64];
  const int t = threadIdx.x;
  float sum = 0.0f;
  for (int j = 0; j < 2; j++) {
    if (barrier_before_reload) __syncthreads();
    tile[t] = in[j * 64 + t];
    __syncthreads();
    sum += __shfl_xor_sync(0xffffffff, tile[63 - t], 1);
  }
  out[t] = sum;
}

__global__ void rotate_kernel(const float* in, float* out) {
  __shared__ float values[64];
  const int t = threadIdx.x;
  values[t] = in[blockIdx.x * 64 + t];
  __syncthreads();
  out[blockIdx.x * 64 + t] = values[(t + 1) % 64];
}

// The shared-memory reduction above with the barrier inside the loop missing.
__global__ void block_sum_without_barrier_kernel(const float* in, float* block_sums) {
  __shared__ float partial[128];
  const int t = threadIdx.x;
  partial[t] = in[blockIdx.x * 128 + t];
  __syncthreads();
  for (int stride = 64; stride > 0; stride /= 2)
    if (t < stride) partial[t] += partial[t + stride];
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

__global__ void write_one_past_end_kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // should be i < n
}

__global__ void shared_index_past_end_kernel(float* out) {
  __shared__ float values[32];
  values[threadIdx.x] = 1.0f;  // launched with 33 threads
  __syncthreads();
  out[threadIdx.x] = values[threadIdx.x];
}

__global__ void dynamic_shared_past_end_kernel(float* out) {
  extern __shared__ float values[];
  values[threadIdx.x] = 2.0f;  // launched with one float too little
  out[threadIdx.x] = values[threadIdx.x];
}

__global__ void half_warp_shuffle_kernel(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x % 32 < 16) v += __shfl_xor_sync(0xffffffff, v, 1);  // lanes 16-31 never come
  out[threadIdx.x] = v;
}

__global__ void half_block_barrier_kernel(float* out) {
  if (threadIdx.x < 64) __syncthreads();  // threads 64-127 never come
  out[threadIdx.x] = 1.0f;
}

__global__ void early_return_before_barrier_kernel(const float* in, float* out, int n) {
  __shared__ float values[128];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;  // the tail threads leave the barrier below waiting
  values[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = values[(threadIdx.x + 1) % blockDim.x];
}

__global__ void barrier_or_shuffle_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x % 2 == 0)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffff, v, 1);
  out[threadIdx.x] = v;
}

__global__ void full_mask_in_partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffff, 1.0f, 1);  // launched with 48 threads
}

__global__ void read_shared_before_write_kernel(float* out) {
  __shared__ float never_written[32];
  out[threadIdx.x] = never_written[threadIdx.x];
}

// ---- helpers --------------------------------------------------------------------------------------

// Death tests that expect an AddressSanitizer report skip themselves in a build without it.
bool built_with_address_sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

// Sets the scheduling order for the lifetime of the object.
class ScopedSchedule {
 public:
  explicit ScopedSchedule(const std::string& order) : saved_(simt::current_schedule()) {
    simt::set_schedule(simt::parse_schedule(order));
  }
  ~ScopedSchedule() { simt::set_schedule(saved_); }
  ScopedSchedule(const ScopedSchedule&) = delete;
  ScopedSchedule& operator=(const ScopedSchedule&) = delete;

 private:
  simt::Schedule saved_;
};

// The message of the simt::KernelError that `launch` throws, or "" if it throws none.
template <typename Launch>
std::string kernel_error_of(const Launch& launch) {
  try {
    launch();
  } catch (const simt::KernelError& error) {
    return error.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- tests ----------------------------------------------------------------------------------------

TEST(SimtCatches, MissingBarrierUnderEveryOrder) {
  const int blocks = 2;
  const std::vector<float> in = small_integers(64 * blocks, 13);
  std::vector<float> expected(in.size());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 64; ++t) expected[b * 64 + t] = in[b * 64 + (t + 1) % 64];
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(in.size());
  for (const char* order : {"forward", "reverse", "shuffle:1", "shuffle:2"}) {
    const ScopedSchedule schedule(order);
    rotate_kernel<<<blocks, 64>>>(d_in.get(), out.get());
    EXPECT_EQ(max_abs_difference(out.to_host(), expected), 0.0f) << "correct kernel, " << order;
    rotate_without_barrier_kernel<<<blocks, 64>>>(d_in.get(), out.get());
    EXPECT_GT(max_abs_difference(out.to_host(), expected), 0.0f) << "race unnoticed, " << order;
  }
}

// A write-after-read race between warps (a tile reloaded before every warp is done reading it)
// that only the warps schedule exposes.
TEST(SimtCatches, ReloadBeforeEveryWarpIsDoneNeedsWarpsApart) {
  const std::vector<float> in = small_integers(128, 16);
  std::vector<float> expected(64, 0.0f);
  for (int t = 0; t < 64; ++t)
    for (int j = 0; j < 2; ++j) expected[t] += in[j * 64 + 63 - (t ^ 1)];
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(64);
  for (const char* order : {"forward", "reverse", "shuffle:1", "warps"}) {
    const ScopedSchedule schedule(order);
    walk_tiles_kernel<<<1, 64>>>(d_in.get(), out.get(), true);
    EXPECT_EQ(max_abs_difference(out.to_host(), expected), 0.0f) << "correct kernel, " << order;
    walk_tiles_kernel<<<1, 64>>>(d_in.get(), out.get(), false);
    const bool race_seen = max_abs_difference(out.to_host(), expected) > 0.0f;
    EXPECT_EQ(race_seen, std::string(order) == "warps") << order;
  }
}

// Running the threads one after another in reverse happens to be a valid sequential order for
// this tree reduction, so only the forward order exposes the missing barrier: the reason every
// kernel test runs under two orders.
TEST(SimtCatches, MissingBarrierInReductionNeedsBothOrders) {
  const int blocks = 3;
  const std::vector<float> in = small_integers(128 * blocks, 14);
  std::vector<float> expected(blocks, 0.0f);
  for (int i = 0; i < 128 * blocks; ++i) expected[i / 128] += in[i];
  const DeviceArray<float> d_in(in);
  DeviceArray<float> sums(blocks);
  const auto wrong_under = [&](const char* order) {
    const ScopedSchedule schedule(order);
    block_sum_without_barrier_kernel<<<blocks, 128>>>(d_in.get(), sums.get());
    return max_abs_difference(sums.to_host(), expected) > 0.0f;
  };
  EXPECT_TRUE(wrong_under("forward"));
  EXPECT_FALSE(wrong_under("reverse"));
}

TEST(SimtCatches, ShuffleNotReachedByAllLanes) {
  DeviceArray<float> out(64);
  for (const char* order : {"forward", "reverse"}) {
    const ScopedSchedule schedule(order);
    const std::string message = kernel_error_of([&] { half_warp_shuffle_kernel<<<1, 64>>>(out.get()); });
    EXPECT_TRUE(contains(message, "kernel 'half_warp_shuffle_kernel'")) << order << ": " << message;
    EXPECT_TRUE(contains(message, "__shfl_xor_sync(mask 0xffffffff)")) << order << ": " << message;
  }
}

TEST(SimtCatches, BarrierNotReachedByAllThreads) {
  DeviceArray<float> out(128);
  for (const char* order : {"forward", "reverse"}) {
    const ScopedSchedule schedule(order);
    const std::string message = kernel_error_of([&] { half_block_barrier_kernel<<<1, 128>>>(out.get()); });
    EXPECT_TRUE(contains(message, "kernel 'half_block_barrier_kernel'")) << order << ": " << message;
    EXPECT_TRUE(contains(message, "__syncthreads()")) << order << ": " << message;
  }
}

TEST(SimtCatches, EarlyReturnBeforeBarrier) {
  const std::vector<float> in = small_integers(200, 15);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(in.size());
  const std::string message = kernel_error_of([&] {
    early_return_before_barrier_kernel<<<2, 128>>>(d_in.get(), out.get(), 200);
  });
  EXPECT_TRUE(contains(message, "kernel 'early_return_before_barrier_kernel'")) << message;
  EXPECT_TRUE(contains(message, "in block (1,0,0)")) << message;
}

TEST(SimtCatches, LanesSplitBetweenBarrierAndShuffle) {
  DeviceArray<float> out(32);
  for (const char* order : {"forward", "reverse"}) {
    const ScopedSchedule schedule(order);
    const std::string message = kernel_error_of([&] { barrier_or_shuffle_kernel<<<1, 32>>>(out.get()); });
    EXPECT_TRUE(contains(message, "kernel 'barrier_or_shuffle_kernel'")) << order << ": " << message;
  }
}

TEST(SimtCatches, FullMaskInPartialWarp) {
  DeviceArray<float> out(48);
  const std::string message = kernel_error_of([&] { full_mask_in_partial_warp_kernel<<<1, 48>>>(out.get()); });
  EXPECT_TRUE(contains(message, "beyond the end of the block")) << message;
}

TEST(SimtCatches, InvalidLaunchConfigurations) {
  DeviceArray<float> out(2048);
  EXPECT_TRUE(contains(kernel_error_of([&] { rotate_kernel<<<1, 1025>>>(out.get(), out.get()); }),
                       "1 to 1024 threads"));
  EXPECT_TRUE(contains(kernel_error_of([&] { rotate_kernel<<<0, 64>>>(out.get(), out.get()); }),
                       "grid dimensions"));
  DeviceArray<int> ints(1024);
  EXPECT_TRUE(contains(kernel_error_of([&] {
                         reverse_in_shared_kernel<int><<<1, 32, 64 * 1024>>>(ints.get(), ints.get(), 1024);
                       }),
                       "cudaFuncSetAttribute"));
}

TEST(SimtCatches, UninitialisedMemoryReadsAsNaN) {
  DeviceArray<float> out(32);
  read_shared_before_write_kernel<<<1, 32>>>(out.get());
  for (float v : out.to_host()) EXPECT_TRUE(std::isnan(v));
  float* fresh = nullptr;
  check(cudaMalloc(&fresh, sizeof(float)), "cudaMalloc");
  float value = 0.0f;
  check(cudaMemcpy(&value, fresh, sizeof value, cudaMemcpyDeviceToHost), "cudaMemcpy");
  EXPECT_TRUE(std::isnan(value));
  cudaFree(fresh);
}

TEST(SimtCatches, CopyInTheWrongDirection) {
  DeviceArray<float> device(4);
  std::vector<float> host(4);
  EXPECT_EQ(cudaMemcpy(host.data(), device.get(), 4 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device.get(), host.data(), 5 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SimtCatches, Tf32RoundsInputsOnlyWhenAsked) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float slightly_above_one = 1.0f + 1.0f / 4096;  // needs 12 mantissa bits; TF32 has 10
  const DeviceArray<float> a(std::vector<float>{slightly_above_one}), b(std::vector<float>{1.0f});
  DeviceArray<float> c(1);
  const float alpha = 1.0f, beta = 0.0f;
  for (const cublasComputeType_t compute : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32}) {
    ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, a.get(), CUDA_R_32F, 1, b.get(),
                           CUDA_R_32F, 1, &beta, c.get(), CUDA_R_32F, 1, compute, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(c.to_host()[0], compute == CUBLAS_COMPUTE_32F ? slightly_above_one : 1.0f);
  }
  cublasDestroy(handle);
}

TEST(SimtCatches, ScheduleSyntax) {
  EXPECT_EQ(simt::parse_schedule("shuffle:7").seed, 7u);
  EXPECT_EQ(simt::to_string(simt::parse_schedule("reverse")), "reverse");
  EXPECT_EQ(simt::to_string(simt::parse_schedule("warps")), "warps");
  EXPECT_THROW(simt::parse_schedule("sideways"), std::invalid_argument);
  EXPECT_THROW(simt::parse_schedule("shuffle:"), std::invalid_argument);
}

// ---- the emulated cuBLASLt ------------------------------------------------------------------------

// Values with full fp32 mantissas, so that the order of the sums shows in the bits.
std::vector<float> irregular_values(std::size_t n, int seed) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  return values;
}

// The DEFAULT epilogue is the emulated cublasGemmEx, bit for bit, for each type pair and each
// of the callers' transposes (k = 37: more than the eight partial sums of the dot product).
template <typename TAB, typename TD>
void check_lt_default_is_gemm_ex(cublasHandle_t blas, cublasLtHandle_t lt) {
  const int m = 13, n = 11, k = 37;
  const cublasOperation_t pairs[3][2] = {{CUBLAS_OP_T, CUBLAS_OP_N}, {CUBLAS_OP_N, CUBLAS_OP_N}, {CUBLAS_OP_N, CUBLAS_OP_T}};
  for (const auto& pair : pairs) {
    const bool ta = pair[0] != CUBLAS_OP_N, tb = pair[1] != CUBLAS_OP_N;
    const int lda = ta ? k : m, ldb = tb ? n : k;
    const DeviceArray<TAB> a(converted<TAB>(irregular_values(lda * (ta ? m : k), 1)));
    const DeviceArray<TAB> b(converted<TAB>(irregular_values(ldb * (tb ? k : n), 2)));
    const std::vector<TD> c = converted<TD>(irregular_values(m * n, 3));
    DeviceArray<TD> gemm_ex_c(c), lt_d(c);
    const float alpha = 0.75f, beta = 1.0f;
    ASSERT_EQ(cublasGemmEx(blas, pair[0], pair[1], m, n, k, &alpha, a.get(), data_type<TAB>(), lda, b.get(),
                           data_type<TAB>(), ldb, &beta, gemm_ex_c.get(), data_type<TD>(), m, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    LtCall call;
    call.transa = pair[0], call.transb = pair[1], call.m = m, call.n = n, call.k = k, call.alpha = alpha;
    call.beta = beta, call.a = a.get(), call.ab_type = data_type<TAB>(), call.lda = lda, call.b = b.get();
    call.ldb = ldb, call.c = lt_d.get(), call.d = lt_d.get(), call.cd_type = data_type<TD>(), call.ldc = m, call.ldd = m;
    ASSERT_EQ(run_lt(lt, call).matmul, CUBLAS_STATUS_SUCCESS);
    const std::vector<TD> want = gemm_ex_c.to_host(), got = lt_d.to_host();
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(TD)), 0) << "transa " << ta << ", transb " << tb;
  }
}

TEST(SimtCatches, CublasLtDefaultIsGemmExBitForBit) {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  check_lt_default_is_gemm_ex<float, float>(blas, lt);
  check_lt_default_is_gemm_ex<__nv_bfloat16, __nv_bfloat16>(blas, lt);
  check_lt_default_is_gemm_ex<__nv_bfloat16, float>(blas, lt);
  cublasLtDestroy(lt);
  cublasDestroy(blas);
}

// A forward product with an epilogue (transa T, transb N, m 16, n 8, k 4; fp32 or bf16) on its
// own device buffers, every output filled with a sentinel, to be broken one way at a time.
struct RefusalCase {
  explicit RefusalCase(cudaDataType type)
      : a(32 * 16), b(32 * 8), d(16 * 8), bias(16), aux(16 * 8), a16(32 * 16), b16(32 * 8), d16(16 * 8) {
    const bool bf16 = type == CUDA_R_16BF;
    call.transa = CUBLAS_OP_T, call.m = 16, call.n = 8, call.k = 4;
    call.a = bf16 ? static_cast<const void*>(a16.get()) : a.get(), call.ab_type = type, call.lda = 4;
    call.b = bf16 ? static_cast<const void*>(b16.get()) : b.get(), call.ldb = 4;
    call.c = call.d = bf16 ? static_cast<void*>(d16.get()) : d.get(), call.cd_type = type, call.ldc = call.ldd = 16;
    call.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, call.bias = bias.get(), call.aux = aux.get(), call.aux_ld = 16;
    check(cudaMemset(d.get(), 0x7f, 16 * 8 * sizeof(float)), "cudaMemset");
    check(cudaMemset(d16.get(), 0x7f, 16 * 8 * 2), "cudaMemset");
    check(cudaMemset(bias.get(), 0x7f, 16 * sizeof(float)), "cudaMemset");
    check(cudaMemset(aux.get(), 0x7f, 16 * 8 * sizeof(float)), "cudaMemset");
  }
  // True when no output (D, bias, aux) was written.
  bool untouched() const {
    for (const DeviceArray<float>* x : {&d, &bias, &aux})
      for (float v : x->to_host()) if (v != sentinel()) return false;
    for (__nv_bfloat16 v : d16.to_host()) if (__bfloat16_as_ushort(v) != 0x7f7f) return false;
    return true;
  }
  static float sentinel() {
    float value;
    const unsigned bits = 0x7f7f7f7f;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  DeviceArray<float> a, b, d, bias, aux;
  DeviceArray<__nv_bfloat16> a16, b16, d16;
  LtCall call;
};

// Runs a broken call: the heuristic answers `heuristic` (with no algorithm unless SUCCESS),
// the product answers `matmul`, and nothing is written; with null_handle, on a handle never
// created.
void expect_refused(const RefusalCase& broken, cublasStatus_t heuristic, cublasStatus_t matmul, const char* what,
                    bool null_handle = false) {
  cublasLtHandle_t handle;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const LtOutcome outcome = run_lt(null_handle ? nullptr : handle, broken.call);
  EXPECT_EQ(outcome.heuristic, heuristic) << what;
  EXPECT_EQ(outcome.algo_count, heuristic == CUBLAS_STATUS_SUCCESS ? 1 : 0) << what;
  EXPECT_EQ(outcome.matmul, matmul) << what;
  EXPECT_TRUE(broken.untouched()) << what << ": an output was written";
  cublasLtDestroy(handle);
}

TEST(SimtCatches, CublasLtRefusesWhatItDoesNotDocument) {
  const cublasStatus_t unsupported = CUBLAS_STATUS_NOT_SUPPORTED, invalid = CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS, failed = CUBLAS_STATUS_EXECUTION_FAILED;
  std::vector<float> host_bias(16);
  struct Breakage {
    const char* what;
    cudaDataType type;
    void (*apply)(LtCall&, RefusalCase&, float*);
    cublasStatus_t heuristic, matmul;
  };
  const Breakage breakages[] = {
      {"BIAS without a bias pointer", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_BIAS, c.bias = nullptr; }, unsupported, unsupported},
      {"BGRADB without a bias pointer", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_BGRADB, c.bias = nullptr; }, unsupported, unsupported},
      {"GELU_AUX_BIAS without an aux pointer", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.aux = nullptr; }, unsupported, unsupported},
      {"DGELU without an aux pointer", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_DGELU, c.aux = nullptr; }, unsupported, unsupported},
      {"aux ld not divisible by 8", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.aux_ld = 20; }, unsupported, unsupported},
      {"aux ld below m", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.aux_ld = 8; }, unsupported, unsupported},
      {"GELU (not emulated)", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_GELU; }, unsupported, unsupported},
      {"DGELU_BGRAD (not emulated)", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD; }, unsupported, unsupported},
      {"DGELU with beta 1", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_DGELU, c.beta = 1.0f; }, ok, unsupported},
      {"BGRADB with alpha 0.5", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_BGRADB, c.alpha = 0.5f; }, ok, unsupported},
      {"bf16 bias with an fp32 D", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_BIAS, c.bias_type = CUDA_R_16BF; }, unsupported, unsupported},
      {"fp32 bias with a bf16 D for GELU_AUX_BIAS", CUDA_R_16BF, [](LtCall& c, RefusalCase&, float*) { c.bias_type = CUDA_R_32F; }, unsupported, unsupported},
      {"fp32 A and B with a bf16 D", CUDA_R_32F, [](LtCall& c, RefusalCase& r, float*) { c.cd_type = CUDA_R_16BF, c.c = c.d = r.d16.get(); }, unsupported, unsupported},
      {"C and D with fewer rows than op(A)", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.cd_rows = 15; }, invalid, invalid},
      {"C == D with different layouts", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.epilogue = CUBLASLT_EPILOGUE_DEFAULT, c.beta = 1.0f, c.ldc = 17, c.n = 7; }, ok, invalid},
      {"a bias in host memory", CUDA_R_32F, [](LtCall& c, RefusalCase&, float* host) { c.bias = host; }, ok, failed},
      {"an aux matrix past the end of its allocation", CUDA_R_32F, [](LtCall& c, RefusalCase&, float*) { c.aux_ld = 24; }, ok, failed},
  };
  for (const Breakage& breakage : breakages) {
    RefusalCase broken(breakage.type);
    breakage.apply(broken.call, broken, host_bias.data());
    expect_refused(broken, breakage.heuristic, breakage.matmul, breakage.what);
  }
  expect_refused(RefusalCase(CUDA_R_32F), CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_NOT_INITIALIZED, "a null handle",
                 true);
}

// The alignment contract (cublasLt.h): the heuristic picks an algorithm for A, B, C and D aligned
// as the preference's MIN_ALIGNMENT_*_BYTES promise (256 when not set) and for the bias and aux
// pointers the descriptor holds; cublasLtMatmul refuses pointers less aligned than that.
TEST(SimtCatches, CublasLtHoldsPointersToTheAlignmentPromised) {
  const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS, unsupported = CUBLAS_STATUS_NOT_SUPPORTED;
  struct Shift {
    const char* what;
    void (*apply)(LtCall&);
    int operand;  // whose MIN_ALIGNMENT_*_BYTES (0..3 for A..D) declares it; -1: the descriptor says it
  };
  const Shift shifts[] = {
      {"A one float off", [](LtCall& c) { c.a = static_cast<const float*>(c.a) + 1; }, 0},
      {"B one float off", [](LtCall& c) { c.b = static_cast<const float*>(c.b) + 1; }, 1},
      {"C = D one float off", [](LtCall& c) { c.c = c.d = static_cast<float*>(c.d) + 1; }, 2},
      {"bias one float off", [](LtCall& c) { c.bias = static_cast<float*>(c.bias) + 1; }, -1},
      {"aux one float off", [](LtCall& c) { c.aux = static_cast<float*>(c.aux) + 1; }, -1},
  };
  for (const Shift& shift : shifts) {
    SCOPED_TRACE(shift.what);
    // The pointers as the heuristic saw them, but 256 bytes promised for A to D: refused at the
    // call (for the bias and aux the heuristic saw the pointer, so there is nothing to refuse).
    RefusalCase promised(CUDA_R_32F);
    promised.call.m = 15;  // so that every buffer has room for one element more
    shift.apply(promised.call);
    if (shift.operand < 0) {
      cublasLtHandle_t handle;
      ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
      const LtOutcome outcome = run_lt(handle, promised.call);
      EXPECT_EQ(outcome.heuristic, ok);
      EXPECT_EQ(outcome.matmul, ok);
      cublasLtDestroy(handle);
    } else {
      expect_refused(promised, ok, unsupported, shift.what);
      // Declared as it is (4 bytes; C and D together), the same product runs.
      RefusalCase declared(CUDA_R_32F);
      declared.call.m = 15;
      shift.apply(declared.call);
      check(cudaMemset(declared.bias.get(), 0, 16 * sizeof(float)), "cudaMemset");  // so that D and aux change
      declared.call.min_alignment[shift.operand] = 4;
      if (shift.operand == 2) declared.call.min_alignment[3] = 4;
      cublasLtHandle_t handle;
      ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(run_lt(handle, declared.call).matmul, ok);
      EXPECT_FALSE(declared.untouched()) << "nothing written";
      // Without an algorithm, cublasLtMatmul assumes what the heuristic does by default: 256.
      promised.call.without_algo = true;
      EXPECT_EQ(run_lt(handle, promised.call).matmul, unsupported);
      cublasLtDestroy(handle);
    }
  }
  // A bias or aux pointer moved after the heuristic ran is held to the alignment it had then.
  for (bool move_aux : {false, true}) {
    SCOPED_TRACE(move_aux ? "aux moved after the heuristic" : "bias moved after the heuristic");
    RefusalCase moved(CUDA_R_32F);
    LtCall& c = moved.call;
    cublasLtHandle_t handle;
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t transa = c.transa;
    const uint32_t epilogue = c.epilogue;
    const int64_t aux_ld = c.aux_ld;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof c.bias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof c.aux);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
    cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_32F, 4, 16, 4);
    cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_32F, 4, 8, 4);
    cublasLtMatrixLayoutCreate(&d_layout, CUDA_R_32F, 16, 8, 16);
    cublasLtMatmulPreference_t preference;
    cublasLtMatmulPreferenceCreate(&preference);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc, a_layout, b_layout, d_layout, d_layout, preference, 1, &result,
                                             &found),
              ok);
    const void* moved_pointer = static_cast<const float*>(move_aux ? c.aux : c.bias) + 1;
    cublasLtMatmulDescSetAttribute(desc, move_aux ? CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER : CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                   &moved_pointer, sizeof moved_pointer);
    EXPECT_EQ(cublasLtMatmul(handle, desc, &c.alpha, c.a, a_layout, c.b, b_layout, &c.beta, c.c, d_layout, c.d, d_layout,
                             &result.algo, nullptr, 0, 0),
              unsupported);
    // And an algorithm used for other descriptors (one more row) is refused as well.
    cublasLtMatmulDescSetAttribute(desc, move_aux ? CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER : CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                   move_aux ? &c.aux : &c.bias, sizeof c.bias);
    cublasLtMatrixLayout_t other_a;
    cublasLtMatrixLayoutCreate(&other_a, CUDA_R_32F, 4, 16, 5);
    EXPECT_EQ(cublasLtMatmul(handle, desc, &c.alpha, c.a, other_a, c.b, b_layout, &c.beta, c.c, d_layout, c.d, d_layout,
                             &result.algo, nullptr, 0, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_TRUE(moved.untouched()) << "an output was written";
    for (cublasLtMatrixLayout_t layout : {a_layout, b_layout, d_layout, other_a}) cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
}

TEST(SimtCatches, CublasLtDescriptorsCheckTheirArguments) {
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int64_t wrong_size = CUBLAS_OP_T;  // TRANSA is an int32_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wrong_size, sizeof wrong_size),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t aux_ld = 16;  // EPILOGUE_AUX_LD is an int64_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t pointer_mode = 0;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pointer_mode, sizeof pointer_mode),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulDescDestroy(desc);
  cublasLtMatrixLayout_t layout;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 8, 4, 7), CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulPreference_t preference;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  const uint32_t small = 0;  // MAX_WORKSPACE_BYTES is a uint64_t
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &small, sizeof small),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint64_t wide_alignment = 16;  // MIN_ALIGNMENT_*_BYTES are uint32_t
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &wide_alignment,
                                                 sizeof wide_alignment),
            CUBLAS_STATUS_INVALID_VALUE);
  for (uint32_t odd : {0u, 3u, 24u})  // no meaning documented but a power of two's
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &odd, sizeof odd),
              CUBLAS_STATUS_NOT_SUPPORTED);
  const int32_t search_mode = 0;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &search_mode, sizeof search_mode),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulPreferenceDestroy(preference);
  EXPECT_EQ(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
}

// Out-of-bounds accesses end the process with an AddressSanitizer report, so these run in a
// child process (a death test) and check the report: the kind of error and the kernel's name.
class SimtCatchesDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    if (!built_with_address_sanitizer()) GTEST_SKIP() << "needs a build with -fsanitize=address";
  }
};

TEST_F(SimtCatchesDeathTest, GlobalWritePastEnd) {
  DeviceArray<float> out(100);
  const auto launch = [&] { write_one_past_end_kernel<<<1, 128>>>(out.get(), 100); };
  EXPECT_DEATH(launch(), "heap-buffer-overflow.*kernel 'write_one_past_end_kernel'");
}

TEST_F(SimtCatchesDeathTest, StaticSharedIndexPastEnd) {
  DeviceArray<float> out(33);
  const auto launch = [&] { shared_index_past_end_kernel<<<1, 33>>>(out.get()); };
  // UBSan's bounds check sees the array type and reports first; ASan would catch it next.
  EXPECT_DEATH(launch(), "index 32 out of bounds.*shared_index_past_end_kernel");
}

TEST_F(SimtCatchesDeathTest, DynamicSharedPastEnd) {
  DeviceArray<float> out(32);
  const auto launch = [&] { dynamic_shared_past_end_kernel<<<1, 32, 31 * sizeof(float)>>>(out.get()); };
  EXPECT_DEATH(launch(), "heap-buffer-overflow.*kernel 'dynamic_shared_past_end_kernel'");
}

TEST_F(SimtCatchesDeathTest, CublasWrongTransposeReadsPastEnd) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 8, k = 4;  // B is 4 x 8: transposed, cuBLAS walks 8 columns of ldb = 8
  DeviceArray<float> a(m * k), b(k * n), c(m * n);
  EXPECT_DEATH(row_major_matmul(handle, CUBLAS_OP_T, a.get(), b.get(), c.get(), m, n, k),
               "heap-buffer-overflow.*cublasSgemm");
  cublasDestroy(handle);
}

TEST_F(SimtCatchesDeathTest, HostDereferencesDeviceMemory) {
  DeviceArray<float> device(4);
  volatile float* pointer = device.get();
  EXPECT_DEATH(*pointer = 1.0f, "use-after-poison.*memory from cudaMalloc");
}

// ---- cp.async: copies in flight until waited for -------------------------------------------------

// One thread reads its copies' destinations before any wait, after waiting for all but the newest
// group, and after waiting for all.
__global__ void async_copy_stages_kernel(const float* in, float* out) {
  __shared__ __align__(16) float tile[8];
  cp_async<16>(tile, in);
  cp_async_commit();
  cp_async<16>(tile + 4, in + 4);
  cp_async_commit();
  out[0] = tile[0];
  cp_async_wait<1>();
  out[1] = tile[0], out[2] = tile[4];
  cp_async_wait<0>();
  out[3] = tile[4];
}

__global__ void async_copy_never_waited_kernel(const float* in, float* out) {
  __shared__ __align__(16) float tile[4];
  cp_async<16>(tile, in);
  cp_async_commit();
  out[0] = 1.0f;
}

__global__ void async_copy_misaligned_kernel(const float* in, float* out) {
  __shared__ __align__(16) float tile[8];
  cp_async<16>(tile + 1, in);
  cp_async_commit();
  cp_async_wait<0>();
  out[0] = tile[1];
}

std::uint32_t bits_of(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

TEST(SimtCatches, AsyncCopyReadBeforeItsWait) {
  const std::vector<float> in = small_integers(8, 19);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(4);
  async_copy_stages_kernel<<<1, 1>>>(d_in.get(), out.get());
  const std::vector<float> got = out.to_host();
  EXPECT_EQ(bits_of(got[0]), 0xffffffffu) << "read before any wait";
  EXPECT_EQ(got[1], in[0]) << "the older group, after cp.async.wait_group 1";
  EXPECT_EQ(bits_of(got[2]), 0xffffffffu) << "the newest group, after cp.async.wait_group 1";
  EXPECT_EQ(got[3], in[4]) << "after cp.async.wait_group 0";
}

TEST(SimtCatches, AsyncCopyNeverWaitedFor) {
  const DeviceArray<float> d_in(small_integers(4, 20));
  DeviceArray<float> out(1);
  const std::string message = kernel_error_of([&] { async_copy_never_waited_kernel<<<1, 32>>>(d_in.get(), out.get()); });
  EXPECT_TRUE(contains(message, "kernel 'async_copy_never_waited_kernel'")) << message;
  EXPECT_TRUE(contains(message, "cp.async copies it never waited for")) << message;
}

TEST(SimtCatches, AsyncCopyMisaligned) {
  const DeviceArray<float> d_in(small_integers(8, 21));
  DeviceArray<float> out(1);
  const std::string message = kernel_error_of([&] { async_copy_misaligned_kernel<<<1, 1>>>(d_in.get(), out.get()); });
  EXPECT_TRUE(contains(message, "not aligned to the size")) << message;
}

// Without its barrier the walk reads the other warp's copies before they are waited for (0xff:
// NaN), or after the next copy into the buffer has started, under every order.
TEST(SimtCatches, DoubleBufferedWalkWithoutItsBarrier) {
  const std::vector<float> in = small_integers(192, 18);
  const DeviceArray<float> d_in(in);
  DeviceArray<float> out(64);
  for (const char* order : {"forward", "reverse", "shuffle:1", "warps"}) {
    const ScopedSchedule schedule(order);
    double_buffered_walk_kernel<<<1, 64>>>(d_in.get(), out.get(), true);
    EXPECT_EQ(max_abs_difference(out.to_host(), walk_expected(in)), 0.0f) << "with the barrier, " << order;
    double_buffered_walk_kernel<<<1, 64>>>(d_in.get(), out.get(), false);
    EXPECT_GT(max_abs_difference(out.to_host(), walk_expected(in)), 0.0f) << "without the barrier, " << order;
  }
}

#endif  // SIMT_EMULATION

}  // namespace
