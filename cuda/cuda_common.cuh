// cuda/cuda_common.cuh — what every kernel file of the CUDA backend shares:
//   * cudaCheck / cublasCheck: stop with file and line on any CUDA runtime or cuBLAS error;
//   * ceil_div for grid sizes;
//   * the two element types (float, or __nv_bfloat16 called bf16), picked at run time by the
//     backend: kernels are templates on the element type T and compute in fp32 whatever T is;
//   * warp reductions (sum, max) and block reductions (sum, max) in fp32 on __shfl_xor_sync;
//   * deterministic column sums of an (N, width) matrix over its N rows, in two stages and
//     without atomics, which every weight gradient that sums over positions uses;
//   * packs of up to 16 bytes for vector loads and stores, and the index width of a launch;
//   * convert_kernel (one element type to another; CudaOps::convert launches it) and DeviceArray,
//     an owning device buffer;
//   * the device ledger: while a MemoryPlan is being counted, DeviceArray adds up the bytes it
//     would allocate instead of allocating them (docs/cuda_memory.md).
//
// These headers define kernels and host functions, so each program includes them in exactly
// one translation unit (gpt2.cu, bench/bench_gpu_backend.cu, or one test file).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "util/memory_plan.h"

// ---------------------------------------------------------------------------------------------
// Errors: a failed CUDA or cuBLAS call is a bug or a broken device, never bad user input, so
// the program stops at once, saying where.

inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err == cudaSuccess) return;
    std::fprintf(stderr, "CUDA error at %s:%d: %s\n", file, line, cudaGetErrorString(err));
    std::exit(EXIT_FAILURE);
}

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    std::fprintf(stderr, "cuBLAS error at %s:%d: status %d\n", file, line, (int)status);
    std::exit(EXIT_FAILURE);
}

#define cudaCheck(call) cuda_check((call), __FILE__, __LINE__)
#define cublasCheck(call) cublas_check((call), __FILE__, __LINE__)

// Number of blocks of `block` threads that cover n items.
__host__ __device__ inline size_t ceil_div(size_t n, size_t block) { return (n + block - 1) / block; }

// ---------------------------------------------------------------------------------------------
// Element types. Kernels load T, compute in float and store T; bf16 stores round to nearest even.

using bf16 = __nv_bfloat16;

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__host__ __device__ inline T from_float(float x);
template <>
__host__ __device__ inline float from_float<float>(float x) { return x; }
template <>
__host__ __device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }

// Two floats rounded to bf16 in one 32-bit register, `lo` in the low half: the element pairs of
// the tensor cores' fragments (cuda/tensor_cores.cuh).
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &pair, sizeof bits);
    return bits;
}

// cuBLAS's name for an element type.
template <typename T>
constexpr cudaDataType_t cuda_data_type() {
    return std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16BF;
}

template <typename T>
constexpr const char* precision_name() {
    return std::is_same<T, float>::value ? "fp32" : "bf16";
}

// ---------------------------------------------------------------------------------------------
// Vector accesses: S elements of T loaded or stored as one access of S·sizeof(T) bytes (at most
// 16), where the pointers are aligned to it; and the index width a launch needs.

template <typename T, int S>
struct alignas(sizeof(T) * S) Pack {
    static constexpr int size = S;
    T v[S];
};

// 16 bytes of T (4 floats or 8 bf16).
template <typename T>
using Pack16 = Pack<T, 16 / sizeof(T)>;

// Whether every pointer is 16-byte aligned.
template <typename... P>
__host__ __device__ inline bool aligned16(const P*... p) {
    return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// Whether p is aligned for one access of a Pack of type P.
template <class P, typename T>
__host__ __device__ inline bool aligned_for(const T* p) {
    return reinterpret_cast<uintptr_t>(p) % sizeof(P) == 0;
}

// The pack of a kernel over tensors of the types Ts: K elements of each, 16 bytes of the widest.
template <typename... Ts>
constexpr int pack_width() {
    return (int)(16 / std::max({sizeof(Ts)...}));
}

// Whether every pointer given is aligned for packs of K of its own type (a null pointer, one
// the kernel does not use, counts as aligned).
template <int K, typename... P>
bool aligned_to_packs(const P*... p) {
    return ((reinterpret_cast<uintptr_t>(p) % (K * sizeof(P)) == 0) && ...);
}

// Whether rows of `width` elements can be read in packs of K from every pointer given (null
// ones are not used and do not count): width a multiple of K, every pointer aligned to its pack.
template <int K, typename... P>
bool rows_in_packs(int width, const P*... p) {
    return width % K == 0 && aligned_to_packs<K>(p...);
}

// v[e] = p[e] for e < K, as floats, in one access.
template <int K, typename T>
__device__ inline void load_pack(float (&v)[K], const T* p) {
    const Pack<T, K> pack = *reinterpret_cast<const Pack<T, K>*>(p);
    for (int e = 0; e < K; e++) v[e] = to_float(pack.v[e]);
}

// p[e] = v[e] for e < K, rounded to T, in one access.
template <int K, typename T>
__device__ inline void store_pack(T* p, const float (&v)[K]) {
    Pack<T, K> pack;
    for (int e = 0; e < K; e++) pack.v[e] = from_float<T>(v[e]);
    *reinterpret_cast<Pack<T, K>*>(p) = pack;
}

// Whether a launch over n elements indexes them in 32 bits (unsigned: cheaper arithmetic) rather
// than size_t: when n stays 2^16 below 2^32, so that the first index of the last, partly idle
// block's last pack does not wrap either. An op picks the index type I of its kernel with it.
inline bool narrow_index(size_t n) { return n < ((size_t)1 << 32) - ((size_t)1 << 16); }

// ---------------------------------------------------------------------------------------------
// Reductions in fp32. A warp is 32 lanes; blocks that use block_sum or block_max are 1-D with a
// multiple of 32 threads (at most 1024), and pass 32 floats of their shared memory.

constexpr int WARP_SIZE = 32;
constexpr int WARPS_PER_BLOCK = 8;  // kernels that give each row one warp: 256-thread blocks

// Sum of x over the 32 lanes of a warp; every lane receives it.
__device__ inline float warp_sum(float x) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
    return x;
}

// Maximum of x over the 32 lanes of a warp; every lane receives it.
__device__ inline float warp_max(float x) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset));
    return x;
}

// x reduced over all threads of the block by warp_reduce (a warp reduction of warp_sum's
// kind, whose neutral element is `neutral`): each warp reduces, then warp 0's lanes reduce the
// warps' results. Every thread receives it.
template <class WarpReduce>
__device__ inline float block_reduce(float x, float neutral, float* shared, WarpReduce warp_reduce) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps = blockDim.x / WARP_SIZE;
    x = warp_reduce(x);
    __syncthreads();  // every thread is done with `shared` from an earlier reduction
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    return warp_reduce(lane < warps ? shared[lane] : neutral);
}
struct WarpSum {
    __device__ float operator()(float x) const { return warp_sum(x); }
};
struct WarpMax {
    __device__ float operator()(float x) const { return warp_max(x); }
};

// Sum and maximum of x over all threads of the block; every thread receives it.
__device__ inline float block_sum(float x, float* shared) { return block_reduce(x, 0.0f, shared, WarpSum{}); }
__device__ inline float block_max(float x, float* shared) { return block_reduce(x, -INFINITY, shared, WarpMax{}); }

// ---------------------------------------------------------------------------------------------
// Column sums without atomics: out[c] += Σ_n f(n, c) over the N rows of an (N, width) matrix.
//   stage 1 (a kernel in each op's file): the rows are cut into `chunks` contiguous chunks;
//           block (TILE_COLS, TILE_ROWS) handles 32 columns of one chunk, thread (x, y) summing
//           rows y, y + 8, ... of it, and writes partial[k·stride + c] for chunk k;
//   stage 2 (add_column_partials_kernel): out[c] += Σ_k partial[k·stride + c] in a fixed order (8
//           threads per column, each over every 8th chunk, their sums added in order).
// Every sum has a fixed order, so results are the same on every run. The partial buffer holds
// at most MAX_ROW_CHUNKS rows of `stride` floats.

constexpr int MAX_ROW_CHUNKS = 64;
constexpr int MIN_CHUNK_ROWS = 64;
constexpr int TILE_COLS = 32;
constexpr int TILE_ROWS = 8;

// Number of row chunks for N rows: enough blocks to fill a GPU, few enough for small N.
inline int row_chunks(int N) {
    return (int)std::min<size_t>(MAX_ROW_CHUNKS, std::max<size_t>(1, ceil_div(N, MIN_CHUNK_ROWS)));
}

// First row of chunk k (chunk k is rows [row_chunk_begin(k), row_chunk_begin(k + 1))).
__device__ inline int row_chunk_begin(int k, int chunks, int N) { return (int)((long long)N * k / chunks); }

// In a (TILE_COLS, TILE_ROWS) block: Σ over threadIdx.y of x for each threadIdx.x, added in
// order of y; valid in the threads with threadIdx.y == 0. `shared` holds TILE_ROWS·TILE_COLS floats.
__device__ inline float sum_over_tile_rows(float x, float* shared) {
    __syncthreads();  // every thread is done with `shared` from an earlier call
    shared[threadIdx.y * TILE_COLS + threadIdx.x] = x;
    __syncthreads();
    float sum = 0.0f;
    if (threadIdx.y == 0)
        for (int y = 0; y < TILE_ROWS; y++) sum += shared[y * TILE_COLS + threadIdx.x];
    return sum;
}

// Stage 2 of column c in a (TILE_COLS, TILE_ROWS) block: Σ_k partial[k·stride + c] over the
// `chunks` partials, thread (x, y) summing chunks y, y + 8, ... and the 8 sums added in order
// of y (sum_over_tile_rows), so the sum has a fixed order and 8 threads share its loads. Every
// thread of the block must call it (it synchronises); those with `valid` false add nothing.
// The result is valid in the threads with threadIdx.y == 0.
__device__ inline float sum_of_column_partials(const float* partial, int chunks, int stride, int c, bool valid,
                                               float* shared) {
    float sum = 0.0f;
    if (valid)
        for (int k = threadIdx.y; k < chunks; k += TILE_ROWS) sum += partial[(size_t)k * stride + c];
    return sum_over_tile_rows(sum, shared);
}

// Stage 2: out[c] += Σ_k partial[k·stride + c] for c < width; a block per 32 columns.
__global__ void add_column_partials_kernel(float* out, const float* partial, int chunks, int stride, int width) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    const float sum = sum_of_column_partials(partial, chunks, stride, c, c < width, shared);
    if (threadIdx.y == 0 && c < width) out[c] += sum;
}

// Grid of a stage-1 kernel over `width` columns and `chunks` row chunks.
inline dim3 column_tiles(int width, int chunks) { return dim3((unsigned)ceil_div(width, TILE_COLS), (unsigned)chunks); }

// ---------------------------------------------------------------------------------------------
// Conversion: out[i] = in[i] in another element type, n elements (the bf16 copy of the fp32
// master weights, and test inputs). Thread k converts elements [k·S, k·S + S), S = 16 bytes of
// the wider type (4 for fp32 → bf16): as one access per buffer when all S are there and both
// buffers are aligned for it, else one by one; indices of type I (32-bit where n allows).

template <typename TOut, typename TIn>
__host__ __device__ constexpr int convert_pack_size() {
    return 16 / (int)(sizeof(TOut) > sizeof(TIn) ? sizeof(TOut) : sizeof(TIn));
}

template <typename TOut, typename TIn, typename I>
__global__ void convert_kernel(TOut* out, const TIn* in, I n) {
    constexpr int S = convert_pack_size<TOut, TIn>();
    using PIn = Pack<TIn, S>;
    using POut = Pack<TOut, S>;
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * S;
    if (first >= n) return;
    if (first + S <= n && aligned_for<PIn>(in) && aligned_for<POut>(out)) {
        const PIn x = *reinterpret_cast<const PIn*>(in + first);
        POut y;
        for (int e = 0; e < S; e++) y.v[e] = from_float<TOut>(to_float(x.v[e]));
        *reinterpret_cast<POut*>(out + first) = y;
        return;
    }
    for (I i = first; i < n && i < first + S; i++) out[i] = from_float<TOut>(to_float(in[i]));
}


// ---------------------------------------------------------------------------------------------
// The device ledger. Normally `plan` is null and buffers are allocated. While a CountingScope
// lives, every DeviceArray adds its bytes to plan under `category` instead (the model sets
// the category before each of its buffers), and the ops launch nothing: the backend can be
// built, without a device, only to learn what it would allocate.

struct DeviceLedger {
    MemoryPlan* plan = nullptr;
    MemoryCategory category = MemoryCategory::Scratch;
    uintptr_t next_placeholder = uintptr_t(1) << 44;

    // A fresh 256-byte-aligned made-up address range of `bytes` for a counted buffer.
    uintptr_t placeholder(size_t bytes) {
        const uintptr_t at = next_placeholder;
        next_placeholder += (bytes + 511) / 256 * 256;
        return at;
    }
};

inline DeviceLedger& device_ledger() {
    static DeviceLedger ledger;
    return ledger;
}

// True while device memory is only being counted.
inline bool counting_device_memory() { return device_ledger().plan != nullptr; }

// Counts into `plan` for as long as it lives; buffers made before any category is set count
// as scratch.
class CountingScope {
public:
    explicit CountingScope(MemoryPlan* plan) { device_ledger() = {plan, MemoryCategory::Scratch}; }
    ~CountingScope() { device_ledger() = {}; }
    CountingScope(const CountingScope&) = delete;
    CountingScope& operator=(const CountingScope&) = delete;
};

// ---------------------------------------------------------------------------------------------
// DeviceArray<T>: n elements of device memory, freed with the object; movable, not copyable.
// upload/download copy to and from host memory and return when the copy is done. Made while
// counting, it holds no memory: data() is then a made-up address that nothing may read, a
// distinct range for each array (offsets into it, as the model's tensor views take, stay
// well-defined, and two arrays compare unequal, as the CUDA ops' fusions need).

template <typename T>
class DeviceArray {
public:
    DeviceArray() = default;
    explicit DeviceArray(size_t n) : n_(n) {
        if (n == 0) return;
        if (counting_device_memory()) {
            device_ledger().plan->add(device_ledger().category, n * sizeof(T));
            counted_ = true;
            ptr_ = reinterpret_cast<T*>(device_ledger().placeholder(n * sizeof(T)));  // never dereferenced
            return;
        }
        cudaCheck(cudaMalloc(&ptr_, n * sizeof(T)));
    }
    ~DeviceArray() {
        if (ptr_ && !counted_) cudaFree(ptr_);
    }
    DeviceArray(DeviceArray&& other) noexcept { swap(other); }
    DeviceArray& operator=(DeviceArray&& other) noexcept {
        swap(other);
        return *this;
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    T* data() const { return ptr_; }
    size_t size() const { return n_; }
    void swap(DeviceArray& other) noexcept {
        std::swap(ptr_, other.ptr_);
        std::swap(n_, other.n_);
        std::swap(counted_, other.counted_);
    }

    void upload(const T* host, cudaStream_t stream) {
        cudaCheck(cudaMemcpyAsync(ptr_, host, n_ * sizeof(T), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaStreamSynchronize(stream));
    }
    void download(T* host, cudaStream_t stream) const {
        cudaCheck(cudaMemcpyAsync(host, ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaStreamSynchronize(stream));
    }

private:
    T* ptr_ = nullptr;
    size_t n_ = 0;
    bool counted_ = false;  // made while counting: no memory behind ptr_
};
