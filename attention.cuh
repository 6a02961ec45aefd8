// attention.cuh — causal multi-head self-attention on the packed projections qkv (B,T,3C) =
// [q | k | v], NH heads of hs = C/NH channels, without any T×T buffer (docs/cuda.md, "The
// attention kernels"):
//
//   forward:  for each query t of head h: s[t'] = q_t·k_t'/√hs for t' ≤ t, p = softmax(s),
//             out (B,T,C)[t, h·hs + i] = Σ_t' p[t']·v_t'[i], and the log-sum-exp
//             lse[t] = log Σ_t' exp(s[t']) (B,NH,T) fp32: all the backward keeps
//   backward: given dout (B,T,C): D[t] = Σ_i dout_t[i]·out_t[i] (B,NH,T) fp32, then with the
//             recomputed p[t'] = exp(s[t'] − lse[t]):  dp[t'] = dout_t·v_t',
//             ds[t'] = p[t']·(dp[t'] − D[t]),  dq_t = Σ_t' ds[t']·k_t'/√hs,
//             dk_t' = Σ_t ds[t']·q_t/√hs,  dv_t' = Σ_t p[t']·dout_t;  dqkv = [dq | dk | dv] (stored:
//             the backward writes every element of dqkv once, so it needs no zeroed buffer).
//             The qkv bias gradient Σ_n dqkv[n, :] is the qkv product's (matmul.cuh)
//
// Two implementations, the same functions:
//   * on the tensor cores (attention_mma.cuh): bf16, for the head sizes compiled in (64, GPT-2's,
//     and the tests' 8, 12, 16), FlashAttention-2's tiling, products by mma.sync;
//   * exact (below): one warp per row of queries (forward, dq) or keys (dk, dv), plain fp32
//     arithmetic for any head size; fp32 always runs here (no TF32), and bf16 where no
//     tensor-core kernel fits. Not fast.
// In both, each output element has exactly one owner and every sum a fixed order: no atomics,
// and results do not depend on scheduling.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_mma.cuh"
#include "cuda_common.cuh"

namespace gpu {

// Number of fp32 values the forward keeps for the backward: the log-sum-exp of every
// (b, h, query) row. The model allocates this per layer as its attention statistics.
inline size_t attention_saved_size(int B, int Tn, int NH) { return (size_t)B * NH * Tn; }

// ---------------------------------------------------------------------------------------------
// The exact kernels: one warp per (b, h, t) row, rows in that order (a block's warps share a
// head). The other side is walked 32 rows at a time, lane j taking the dot products of row j
// over the whole head; the accumulators are spread over the lanes by channel, ROW_CHANNELS
// per lane (256 in all); a head wider than that is done in passes of 256 channels, each
// recomputing the dot products.

constexpr int ROW_CHANNELS = 8;  // accumulators per lane
constexpr int ROW_PASS = ROW_CHANNELS * WARP_SIZE;

// The row a warp works on: sequence b, head h, position t; q, k, v and dout of row t are
// qkv[(b·T + t)·3C + {0, C, 2C} + h·hs + i] and dout[(b·T + t)·C + h·hs + i].
struct HeadRow {
    int b, h, t, hs;
    size_t row;  // (b·NH + h)·T + t: the index into lse and D
    __device__ HeadRow(size_t row, int Tn, int C, int NH)
        : b((int)(row / ((size_t)Tn * NH))), h((int)(row / Tn % NH)), t((int)(row % Tn)), hs(C / NH), row(row) {}
};

// Σ_i x[i]·y[i] over the hs channels, in one lane.
template <typename T>
__device__ inline float dot(const T* x, const T* y, int hs) {
    float sum = 0.0f;
    for (int i = 0; i < hs; i++) sum = fmaf(to_float(x[i]), to_float(y[i]), sum);
    return sum;
}

// Channel j of this lane in the pass starting at channel c0: c0 + lane + 32·j.
__device__ inline int row_channel(int c0, int j) { return c0 + threadIdx.x % WARP_SIZE + WARP_SIZE * j; }

// out and lse of row (b, h, t): over the keys t' ≤ t, the running maximum m, each lane's part of
// the sum ℓ of exp(s − m), and o = Σ exp(s − m)·v, rescaled by exp(m − m′) when m grows.
template <typename T>
__global__ void attention_forward_rows_kernel(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C;
    const T* q = qkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
    const T* k0 = qkv + (size_t)r.b * Tn * stride + C + r.h * r.hs;  // key 0; value 0 is C further
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float m = -INFINITY, l = 0.0f, o[ROW_CHANNELS] = {};
        for (int first = 0; first <= r.t; first += WARP_SIZE) {
            const int key = first + lane;  // this lane's key; those past t weigh 0
            const float s = key <= r.t ? dot(q, k0 + key * stride, r.hs) * scale : -INFINITY;
            const float new_max = fmaxf(m, warp_max(s)), correction = expf(m - new_max), p = expf(s - new_max);
            l = l * correction + p;
            for (int j = 0; j < ROW_CHANNELS; j++) o[j] *= correction;
            for (int e = 0; e < WARP_SIZE && first + e <= r.t; e++) {
                const float pe = __shfl_sync(0xffffffff, p, e);
                const T* v = k0 + C + (first + e) * stride;
                for (int j = 0; j < ROW_CHANNELS; j++)
                    if (row_channel(c0, j) < r.hs) o[j] = fmaf(pe, to_float(v[row_channel(c0, j)]), o[j]);
            }
            m = new_max;
        }
        l = warp_sum(l);
        T* dst = out + ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++)
            if (row_channel(c0, j) < r.hs) dst[row_channel(c0, j)] = from_float<T>(o[j] / l);
        if (c0 == 0 && lane == 0) lse[row] = m + logf(l);
    }
}

// dq of row (b, h, t): over the keys t' ≤ t, p = exp(s − lse), dp = dout_t·v_t',
// dq += p·(dp − D)·k_t'; stored /√hs into the q third of dqkv.
template <typename T>
__global__ void attention_backward_dq_rows_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                  const float* delta, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C;
    const T* q = qkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
    const T* d = dout + ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
    const T* k0 = qkv + (size_t)r.b * Tn * stride + C + r.h * r.hs;
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float dq[ROW_CHANNELS] = {};
        for (int first = 0; first <= r.t; first += WARP_SIZE) {
            const int key = first + lane;
            const T* k = k0 + key * stride;
            const float p = key <= r.t ? expf(dot(q, k, r.hs) * scale - lse[row]) : 0.0f;
            const float ds = key <= r.t ? p * (dot(d, k + C, r.hs) - delta[row]) : 0.0f;
            for (int e = 0; e < WARP_SIZE && first + e <= r.t; e++) {
                const float dse = __shfl_sync(0xffffffff, ds, e);
                const T* ke = k0 + (first + e) * stride;
                for (int j = 0; j < ROW_CHANNELS; j++)
                    if (row_channel(c0, j) < r.hs) dq[j] = fmaf(dse, to_float(ke[row_channel(c0, j)]), dq[j]);
            }
        }
        T* dst = dqkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++)
            if (row_channel(c0, j) < r.hs) dst[row_channel(c0, j)] = from_float<T>(dq[j] * scale);
    }
}

// dk and dv of key row (b, h, t'): over the queries t ≥ t', p = exp(s − lse[t]),
// dv += p·dout_t, dp = dout_t·v_t', dk += p·(dp − D[t])·q_t; stored (dk /√hs) into their thirds.
template <typename T>
__global__ void attention_backward_dkdv_rows_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                    const float* delta, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C, head = row - r.t;  // lse and D of query t: head + t
    const T* q0 = qkv + (size_t)r.b * Tn * stride + r.h * r.hs;  // query 0
    const T* d0 = dout + (size_t)r.b * Tn * C + r.h * r.hs;
    const T* k = q0 + r.t * stride + C;
    const T* v = k + C;
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float dk[ROW_CHANNELS] = {}, dv[ROW_CHANNELS] = {};
        for (int first = r.t; first < Tn; first += WARP_SIZE) {
            const int query = first + lane;  // this lane's query; those past T weigh 0
            const float p = query < Tn ? expf(dot(q0 + query * stride, k, r.hs) * scale - lse[head + query]) : 0.0f;
            const float ds = query < Tn ? p * (dot(d0 + (size_t)query * C, v, r.hs) - delta[head + query]) : 0.0f;
            for (int e = 0; e < WARP_SIZE && first + e < Tn; e++) {
                const float pe = __shfl_sync(0xffffffff, p, e), dse = __shfl_sync(0xffffffff, ds, e);
                const T* qe = q0 + (first + e) * stride;
                const T* de = d0 + (size_t)(first + e) * C;
                for (int j = 0; j < ROW_CHANNELS; j++) {
                    const int c = row_channel(c0, j);
                    if (c >= r.hs) continue;
                    dv[j] = fmaf(pe, to_float(de[c]), dv[j]);
                    dk[j] = fmaf(dse, to_float(qe[c]), dk[j]);
                }
            }
        }
        T* dst = dqkv + ((size_t)r.b * Tn + r.t) * stride + C + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++) {
            const int c = row_channel(c0, j);
            if (c >= r.hs) continue;
            dst[c] = from_float<T>(dk[j] * scale);
            dst[C + c] = from_float<T>(dv[j]);
        }
    }
}

// delta (B,NH,T) = Σ_i dout·out over each head's hs channels, one warp per (b, h, t) row.
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const size_t at = ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
    float sum = 0.0f;
    for (int i = threadIdx.x % WARP_SIZE; i < r.hs; i += WARP_SIZE)
        sum = fmaf(to_float(dout[at + i]), to_float(out[at + i]), sum);
    sum = warp_sum(sum);
    if (threadIdx.x % WARP_SIZE == 0) delta[row] = sum;
}

// ---------------------------------------------------------------------------------------------
// Launchers

// The head size of the tensor-core kernels for these shapes and pointers, or 0 where the exact
// kernels run: C/NH when T is bf16, C/NH is a head size with a tensor-core kernel (64, 8, 12 or
// 16) and every pointer given is aligned for its row loads.
template <typename T, typename... P>
int mma_head_size(int C, int NH, const P*... p) {
    if (!std::is_same<T, bf16>::value || C % NH != 0) return 0;
    size_t load_bytes = 0;
    switch (C / NH) {
        case 64: load_bytes = HeadShape<64>::load_bytes; break;
        case 8: load_bytes = HeadShape<8>::load_bytes; break;
        case 12: load_bytes = HeadShape<12>::load_bytes; break;
        case 16: load_bytes = HeadShape<16>::load_bytes; break;
        default: return 0;
    }
    return ((reinterpret_cast<uintptr_t>(p) % load_bytes == 0) && ...) ? C / NH : 0;
}

// Grid of the tensor-core kernels: (NH, B, ⌈T/64⌉), the tile the slowest index (attention_mma.cuh).
inline dim3 attention_tiles(int B, int Tn, int NH) {
    return dim3((unsigned)NH, (unsigned)B, (unsigned)ceil_div(Tn, ATTENTION_ROWS));
}
// Blocks of the exact kernels: WARPS_PER_BLOCK rows each.
inline size_t attention_row_blocks(int B, int Tn, int NH) {
    return ceil_div(attention_saved_size(B, Tn, NH), WARPS_PER_BLOCK);
}

// out (B,T,C) and lse (attention_saved_size(B,T,NH) floats) from qkv (B,T,3C): the tensor-core
// kernel of the head size where there is one (mma_head_size), else the exact kernel.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH, cudaStream_t stream) {
    const int hs = mma_head_size<T>(C, NH, out, qkv);
    if constexpr (std::is_same<T, bf16>::value) {
        const dim3 tiles = attention_tiles(B, Tn, NH);
        const int threads = ATTENTION_WARPS * WARP_SIZE;
        switch (hs) {
            case 64: attention_forward_mma_kernel<64><<<tiles, threads, 0, stream>>>(out, lse, qkv, Tn, C, NH); break;
            case 8: attention_forward_mma_kernel<8><<<tiles, threads, 0, stream>>>(out, lse, qkv, Tn, C, NH); break;
            case 12: attention_forward_mma_kernel<12><<<tiles, threads, 0, stream>>>(out, lse, qkv, Tn, C, NH); break;
            case 16: attention_forward_mma_kernel<16><<<tiles, threads, 0, stream>>>(out, lse, qkv, Tn, C, NH); break;
        }
    }
    if (hs == 0)
        attention_forward_rows_kernel<T><<<attention_row_blocks(B, Tn, NH), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            out, lse, qkv, B, Tn, C, NH);
    cudaCheck(cudaGetLastError());
}

// dqkv (B,T,3C) = the gradient of attention_forward given dout (B,T,C), its qkv, out and lse
// (stored: dqkv is not read). delta is scratch of attention_saved_size(B,T,NH) floats. First
// delta, then dq, then dk and dv: with the tensor-core kernels of the head size where there
// are, else the exact ones.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, float* delta, int B,
                        int Tn, int C, int NH, cudaStream_t stream) {
    const size_t blocks = attention_row_blocks(B, Tn, NH);
    attention_delta_kernel<T><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(delta, dout, out, B, Tn, C, NH);
    cudaCheck(cudaGetLastError());
    const int hs = mma_head_size<T>(C, NH, dqkv, dout, qkv);
    if constexpr (std::is_same<T, bf16>::value) {
        const dim3 g = attention_tiles(B, Tn, NH);
        const int th = ATTENTION_WARPS * WARP_SIZE;
        switch (hs) {  // dq, then dk and dv
            case 64:
                attention_backward_dq_mma_kernel<64><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                attention_backward_dkdv_mma_kernel<64><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                break;
            case 8:
                attention_backward_dq_mma_kernel<8><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                attention_backward_dkdv_mma_kernel<8><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                break;
            case 12:
                attention_backward_dq_mma_kernel<12><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                attention_backward_dkdv_mma_kernel<12><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                break;
            case 16:
                attention_backward_dq_mma_kernel<16><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                attention_backward_dkdv_mma_kernel<16><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C, NH);
                break;
        }
    }
    if (hs == 0) {
        attention_backward_dq_rows_kernel<T><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            dqkv, dout, qkv, lse, delta, B, Tn, C, NH);
        attention_backward_dkdv_rows_kernel<T><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            dqkv, dout, qkv, lse, delta, B, Tn, C, NH);
    }
    cudaCheck(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// Traffic (traffic.h). Both paths read every position's q, k and v (and dout) once as distinct
// bytes (blocks reread k and v tiles, which the L2 cache serves) and write their outputs once.

// The (query, key) pairs of causal attention, t' ≤ t, over the B·NH heads.
inline double attention_pairs(int B, int Tn, int NH) { return (double)B * NH * Tn * (Tn + 1.0) / 2; }
// Whether attention_forward and attention_backward run the tensor-core kernels.
template <typename T>
bool attention_uses_mma(int C, int NH) {
    return mma_head_size<T>(C, NH) != 0;
}

// The cost model's view of a tensor-core kernel (cost_model.h), from its structure in
// attention_mma.cuh: per warp, the warp instructions and shared-memory wavefronts of one tile
// of its walk off the diagonal (the loop), and of everything else a block does once (the tile on
// the diagonal with its mask, loading its own rows, storing the results); ptxas's resources.
// test/traffic_test.cu checks the loop against the inner loop of the kernel's sm_90 PTX, the
// wavefronts against the emulator's count and the resources against ptxas.
struct MmaTileCosts {
    double loop_instructions, rest_instructions, loop_wavefronts, rest_wavefronts;
    KernelResources resources;
};

enum class AttentionKernel { Forward, BackwardDq, BackwardDkDv };

// ptxas -v for sm_90 (the registers; shared memory is the kernel's static tiles: two pairs of
// tile buffers, and the dk/dv kernel's two pairs of lse and D rows), by head size.
inline KernelResources mma_attention_resources(AttentionKernel kernel, int hs) {
    const int threads = ATTENTION_WARPS * WARP_SIZE, tile = ATTENTION_ROWS * ((hs + 15) / 16 * 16 + 8) * 2;
    const int shared = 4 * tile + (kernel == AttentionKernel::BackwardDkDv ? 4 * ATTENTION_ROWS * 4 : 0);
    const int registers[3][4] = {{72, 88, 96, 159}, {56, 72, 72, 130}, {69, 80, 96, 242}};  // hs 8, 12, 16, 64
    const int column = hs == 8 ? 0 : hs == 12 ? 1 : hs == 16 ? 2 : 3;
    return {threads, registers[(int)kernel][column], shared};
}

inline MmaTileCosts mma_attention_costs(AttentionKernel kernel, int hs) {
    const int padded = (hs + 15) / 16 * 16, chunks = padded / 16, n_tiles = padded / 8;
    const int load_bytes = (2 * hs) % 16 == 0 ? 16 : (2 * hs) % 8 == 0 ? 8 : (2 * hs) % 4 == 0 ? 4 : 2;
    const double tile_loads = std::ceil(ATTENTION_ROWS * 2.0 * hs / load_bytes / (ATTENTION_WARPS * WARP_SIZE));
    const double scores = ATTENTION_ROWS * ATTENTION_WARP_ROWS / WARP_SIZE;  // 32 per lane
    // Building blocks, per warp: s = a·tileᵀ (zeroed accumulators, an ldmatrix with its address
    // per two n8 tiles and k16 chunk, an mma per n8 tile and chunk); acc += p·tile (p packed to
    // bf16 pairs, an ldmatrix per two n8 tiles of the head and 16 rows, an mma per n8 tile);
    // copying a tile (per round of 128 threads: the cp.async, 5 of address and clamping).
    const double rows_product = scores + 4 * chunks * 2 + 8 * chunks;
    const double acc_product = scores / 2 + 4 * (n_tiles / 2) * 2 + 4 * n_tiles;
    const double rows_waves = 4 * chunks * 4, acc_waves = 4 * (n_tiles / 2) * 4;  // ldmatrix .x4: 4 each
    const double tile_load = tile_loads * 6, tile_waves = tile_loads * load_bytes / 4;  // per warp
    // Per tile: the wait, the barrier, the next tile's bounds test, the commit, the two buffers'
    // addresses for its copies and for every ldmatrix (from the tile's parity), the loop's counter
    // and branch: about 40 in the sm_90 PTX.
    const double loop_overhead = 40;
    // The head's padding zeroed in the four tile buffers before the walk: per round of 128 2-byte
    // stores about 2 wavefronts (the rows, 16 bytes of padding apart, meet in some banks).
    const double padding_waves = 4 * std::ceil(ATTENTION_ROWS * (padded - hs) / 128.0) * 2;
    double loop = 0, waves = 0, rest = 0, rest_waves = 0;
    // Once per block: the mask of the diagonal tile (index, comparison and selection per score),
    // pointers and constants (about 100), and the results stored (per bf16 pair: the pack, the
    // bounds, the address and the store).
    const double mask = 4 * scores, setup = 100, stores = 2 * n_tiles * 8;
    switch (kernel) {
        case AttentionKernel::Forward:
            // per score: max, fma, ex2 and the sum; per row: quad maximum and correction; o rescaled
            loop = rows_product + acc_product + 4 * scores + 20 + 4 * n_tiles + 2 * tile_load + loop_overhead;
            waves = rows_waves + acc_waves + 2 * tile_waves;
            rest = mask + tile_load + chunks * 2 + setup + stores;  // q and its fragments
            rest_waves = tile_waves + chunks * 4 + padding_waves;
            break;
        case AttentionKernel::BackwardDq:
            // per score: fma, ex2, the difference and the product
            loop = 2 * rows_product + acc_product + 4 * scores + 2 * tile_load + loop_overhead;
            waves = 2 * rows_waves + acc_waves + 2 * tile_waves;
            rest = mask + 2 * tile_load + 2 * chunks * 2 + setup + stores;  // q, dout and their fragments
            rest_waves = 2 * tile_waves + 2 * chunks * 4 + padding_waves;
            break;
        case AttentionKernel::BackwardDkDv:
            // per score: its query's lse and D from shared memory, fma, ex2, difference, product
            loop = 2 * rows_product + 2 * acc_product + 6 * scores + 2 * tile_load + 10 + loop_overhead;
            // lse and D: a request per score; copied, then finished (loaded and stored) by warps 0 and 1
            waves = 2 * rows_waves + 2 * acc_waves + 2 * tile_waves + 2 * scores + 3;
            rest = mask + 2 * tile_load + 2 * chunks * 2 + setup + 2 * stores;  // k, v and their fragments
            rest_waves = 2 * tile_waves + 2 * chunks * 4 + padding_waves;
            break;
    }
    return {loop, loop + rest, waves, waves + rest_waves, mma_attention_resources(kernel, hs)};
}

// The FLOPs of one attention kernel: on the tensor cores `products` 64×64×padded-head products
// per tile pair and about 6 FLOPs of softmax per score, with the instructions, wavefronts and
// resources of mma_attention_costs over the tiles the blocks walk; in the exact kernels every
// (query, key) pair costs 2·hs per dot product and per accumulated channel row (`row_ops` of
// them), on the CUDA cores.
template <typename T>
Traffic attention_kernel_traffic(const char* mma_kernel, const char* rows_kernel, double read, double written, int B,
                                 int Tn, int C, int NH, AttentionKernel kernel, int products, int row_ops) {
    const int hs = C / NH;
    if (attention_uses_mma<T>(C, NH)) {
        const double tiles = ceil_div(Tn, ATTENTION_ROWS), blocks = (double)B * NH * tiles;
        const double below = (double)B * NH * tiles * (tiles - 1) / 2;  // tile pairs off the diagonal
        const double pairs = below + blocks, scores = (double)ATTENTION_ROWS * ATTENTION_ROWS;
        const double padded = (hs + 15) / 16 * 16;
        const MmaTileCosts c = mma_attention_costs(kernel, hs);
        Traffic t{mma_kernel, read, written, pairs * 6.0 * scores, pairs * products * 2.0 * scores * padded};
        t.warp_instructions = ATTENTION_WARPS * (below * c.loop_instructions + blocks * c.rest_instructions);
        t.shared_wavefronts = ATTENTION_WARPS * (below * c.loop_wavefronts + blocks * c.rest_wavefronts);
        t.resources = c.resources;
        t.mma_sync = true;
        t.round_trips = blocks;  // the block's own rows with its first tile; later tiles come a tile ahead
        return t;
    }
    return {rows_kernel, read, written, attention_pairs(B, Tn, NH) * (row_ops * 2.0 * hs + 6.0), 0};
}

// Traffic of attention_forward: q, k, v read, out and lse written; on the tensor cores two
// products per tile pair (q·kᵀ and p·v), in the exact kernel a dot product and an accumulation
// per pair.
template <typename T>
Launches attention_forward_traffic(int B, int Tn, int C, int NH) {
    const double n = (double)B * Tn, rows = (double)attention_saved_size(B, Tn, NH);
    return {attention_kernel_traffic<T>("attention_forward_mma_kernel", "attention_forward_rows_kernel",
                                        n * 3 * C * sizeof(T), n * C * sizeof(T) + 4 * rows, B, Tn, C, NH,
                                        AttentionKernel::Forward, 2, 2)};
}

template <typename T>
constexpr WarpWork attention_delta_work() {
    return {5 + 2 * conversion<T>(), 0, 100};
}

// Traffic of attention_backward: D from dout and out; the dq kernel reads qkv, dout, lse and D,
// writes its third of dqkv, with three products per tile pair (q·kᵀ, dout·vᵀ, ds·k) or three
// row operations per pair; the dk/dv kernel reads the same, writes the other two thirds, with
// four (q·kᵀ, pᵀ·dout, dout·vᵀ, dsᵀ·q).
template <typename T>
Launches attention_backward_traffic(int B, int Tn, int C, int NH) {
    const double n = (double)B * Tn, rows = (double)attention_saved_size(B, Tn, NH), e = sizeof(T);
    const double inputs = n * 4 * C * e + 8 * rows;  // qkv, dout, lse, D
    // D: a warp per row, a trip over 32 channels two loads, their conversions and the fma with one
    // of address and one of loop (unrolled by 4); once 100 (setup, HeadRow's three 64-bit
    // divisions, which nvcc tests for a 32-bit one, the row's address, entering the loop, the
    // warp sum and the store).
    return {with_issue({"attention_delta_kernel", 2 * n * C * e, 4 * rows, 2 * n * C},
                       attention_delta_work<T>().instructions(rows, 1, ceil_div(C / NH, WARP_SIZE)), 0,
                       {WARPS_PER_BLOCK * WARP_SIZE, 32, 0}),
            attention_kernel_traffic<T>("attention_backward_dq_mma_kernel", "attention_backward_dq_rows_kernel",
                                        inputs, n * C * e, B, Tn, C, NH, AttentionKernel::BackwardDq, 3, 3),
            attention_kernel_traffic<T>("attention_backward_dkdv_mma_kernel", "attention_backward_dkdv_rows_kernel",
                                        inputs, 2 * n * C * e, B, Tn, C, NH, AttentionKernel::BackwardDkDv, 4, 4)};
}

}  // namespace gpu
