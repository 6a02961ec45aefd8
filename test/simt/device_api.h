// The CUDA device built-ins that kernels call, defined for the host compiler: thread
// coordinates, barriers, warp-level operations, atomics, fences, cache-hinted loads and
// stores, bit tricks, and the math intrinsics that the C library lacks.
//
// Included by simt.h after the toolkit's own headers, which already give us uint3, dim3,
// float4 and friends (vector_types.h) and the bf16 type with its host arithmetic
// (cuda_bf16.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// ---- thread coordinates ----------------------------------------------------------------------
// The scheduler updates what these refer to before it resumes each thread. They are references
// to const so kernels cannot assign them, and so the compiler re-reads them after every call
// that may switch threads.
extern const uint3& threadIdx;
extern const uint3& blockIdx;
extern const dim3& blockDim;
extern const dim3& gridDim;
constexpr int warpSize = 32;

// ---- barriers and warp-level operations (implemented in scheduler.cpp) ------------------------
namespace simt {

enum class WarpOp { kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAll, kAny, kSyncWarp, kMma, kLdmatrix };

// One warp-synchronous operation: waits until every lane named in `mask` has called the same
// operation with the same mask, then returns this lane's result: for shuffles the bits of the
// source lane's `value`, for votes the ballot of the lanes' `value != 0`.
std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int operand,
                              int width);

// Shuffles move any value of up to 8 bytes (int, float, double, __nv_bfloat16, ...) as raw bits.
template <typename T>
T shuffle(WarpOp op, unsigned mask, T value, int operand, int width) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= sizeof(std::uint64_t),
                "warp shuffles move values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_collective(op, mask, bits, operand, width);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// For parameters that should convert like CUDA's overloads instead of taking part in template
// argument deduction: atomicAdd(float*, 1.0) must pick T = float.
template <typename T>
struct same_type {
  using type = T;
};

}  // namespace simt

void __syncthreads();

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  simt::warp_collective(simt::WarpOp::kSyncWarp, mask, 0, 0, warpSize);
}

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return simt::shuffle(simt::WarpOp::kShfl, mask, var, src_lane, width);
}

template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return simt::shuffle(simt::WarpOp::kShflUp, mask, var, static_cast<int>(delta), width);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return simt::shuffle(simt::WarpOp::kShflDown, mask, var, static_cast<int>(delta), width);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return simt::shuffle(simt::WarpOp::kShflXor, mask, var, lane_mask, width);
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(
      simt::warp_collective(simt::WarpOp::kBallot, mask, predicate != 0, 0, warpSize));
}

inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(
      simt::warp_collective(simt::WarpOp::kAll, mask, predicate != 0, 0, warpSize));
}

inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(
      simt::warp_collective(simt::WarpOp::kAny, mask, predicate != 0, 0, warpSize));
}

// ---- atomics ----------------------------------------------------------------------------------
// Blocks run one at a time on one OS thread and threads switch only inside barriers and warp
// operations, so nothing can interleave with a read-modify-write: plain code is atomic here.
template <typename T>
T atomicAdd(T* address, typename simt::same_type<T>::type value) {
  const T old = *address;
  *address = old + value;
  return old;
}

template <typename T>
T atomicSub(T* address, typename simt::same_type<T>::type value) {
  const T old = *address;
  *address = old - value;
  return old;
}

template <typename T>
T atomicExch(T* address, typename simt::same_type<T>::type value) {
  const T old = *address;
  *address = value;
  return old;
}

template <typename T>
T atomicMin(T* address, typename simt::same_type<T>::type value) {
  const T old = *address;
  *address = value < old ? value : old;
  return old;
}

template <typename T>
T atomicMax(T* address, typename simt::same_type<T>::type value) {
  const T old = *address;
  *address = old < value ? value : old;
  return old;
}

template <typename T>
T atomicCAS(T* address, typename simt::same_type<T>::type compare,
            typename simt::same_type<T>::type value) {
  const T old = *address;
  if (old == compare) *address = value;
  return old;
}

// ---- memory fences ----------------------------------------------------------------------------
// Every write is visible to every thread as soon as it happens, so fences have nothing to do.
inline void __threadfence_block() {}
inline void __threadfence() {}
inline void __threadfence_system() {}

// ---- cache-hinted loads and stores: the hints only matter for performance ---------------------
template <typename T>
T __ldg(const T* address) { return *address; }
template <typename T>
T __ldca(const T* address) { return *address; }
template <typename T>
T __ldcg(const T* address) { return *address; }
template <typename T>
T __ldcs(const T* address) { return *address; }
template <typename T>
T __ldlu(const T* address) { return *address; }
template <typename T>
T __ldcv(const T* address) { return *address; }
template <typename T>
void __stwb(T* address, typename simt::same_type<T>::type value) { *address = value; }
template <typename T>
void __stcg(T* address, typename simt::same_type<T>::type value) { *address = value; }
template <typename T>
void __stcs(T* address, typename simt::same_type<T>::type value) { *address = value; }
template <typename T>
void __stwt(T* address, typename simt::same_type<T>::type value) { *address = value; }

// ---- integer bit operations -------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }

// ---- unqualified min and max, as CUDA provides them for every pair of arithmetic types --------
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}

template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

// ---- float intrinsics with no C library equivalent --------------------------------------------
// The fast approximate versions (__expf, __fdividef, ...) are computed exactly here: tests see
// less rounding error than a GPU has, never more.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0

// ---- reinterpretations and conversions --------------------------------------------------------
inline int __float_as_int(float x) {
  int bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline unsigned __float_as_uint(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline float __int_as_float(int bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline float __uint_as_float(unsigned bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rd(float x) { return static_cast<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(std::ceil(x)); }
