// encoder.cuh — the embedding: token embedding plus position embedding.
//
//   forward:  out (B,T,C) = wte[tokens[b,t]] + wpe[t];  tokens (B,T), wte (Vp,C), wpe (maxT,C)
//   backward: dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += dout[b,t]   (dwte, dwpe fp32)
// out and dout are the residual stream X_0 and its gradient (fp32 in both precisions, its
// element type S); the weights are of type W (the bf16 copy in bf16 mode). The forward moves
// 16 bytes of out (4 floats) per thread, and the matching pack of each weight row, where C and
// the buffers allow, else single elements, with 32-bit indices where the sizes allow.
//
// The same token can sit at many positions, so its dwte row gathers several rows of dout (in
// real text a frequent token fills a thousand positions of a batch). To sum them without
// atomics, in a fixed order and without the host, the positions are sorted on the device by
// (token, position) (TokenOrder, a bitonic sort of 64-bit keys), and the sorted positions are
// cut into chunks of WTE_CHUNK: one block per chunk (and 256 channels) sums the pieces of runs
// of equal tokens it holds, a thread per channel; a run inside one chunk is added to dwte there,
// and a run that crosses chunks leaves its pieces (the chunk's first and last) in scratch, which
// a second launch adds up in chunk order for each such run. So the sum of a token's rows is
// parallel over the channels and over the run, and the same on every run. The sort does every
// step whose pairs lie within a tile of SORT_TILE keys in one block's shared memory, so it takes
// few launches: one that builds and sorts the tiles, then per larger stage one launch per
// partner distance of a tile or more and one that finishes the stage in the tiles.
// The ops that launch these kernels: CudaOps::encoder_forward and encoder_backward (cuda_ops.cuh).
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.cuh"

namespace gpu {

// Sorted positions per chunk of the wte gradient's sums.
constexpr int WTE_CHUNK = 32;

// Scratch of the wte gradient for N positions of C channels: keys[i] = token << 32 | position,
// sorted ascending by CudaOps::encoder_backward, `padded` (a power of two ≥ N, at least 2) keys, the last
// padded − N of them all ones; per chunk of sorted positions, the sums (C) of its first piece
// where that continues a run from the chunk before (heads) and of its last piece where that
// starts a run going on past the chunk (tails).
struct TokenOrder {
    int N, padded, chunks;
    DeviceArray<unsigned long long> keys;
    DeviceArray<float> heads, tails;  // (chunks, C)

    TokenOrder(int N, int C)
        : N(N), padded(padded_size(N)), chunks((int)ceil_div(N, WTE_CHUNK)), keys(padded),
          heads((size_t)chunks * C), tails((size_t)chunks * C) {}
    static int padded_size(int n) {
        int p = 2;
        while (p < n) p *= 2;
        return p;
    }
};

// Keys one block sorts in shared memory (16 KiB), two per thread.
constexpr int SORT_TILE = 2048;

// Keys per tile for `padded` keys: SORT_TILE, or all of them when fewer.
inline int sort_tile(int padded) { return std::min(SORT_TILE, padded); }

// ---------------------------------------------------------------------------------------------
// Kernels

// out[n, c] = wte[tokens[n], c] + wpe[t, c] over the n·C elements of out, row n = b·T + t.
// Thread k handles the K elements [k·K, k·K + K), which lie in one row (K divides C), with one
// access per buffer: K = pack_width<S, W>() (16 bytes of the fp32 stream) where its op
// found the rows aligned, else K = 1. I is the index type (narrow_index).
template <int K, typename S, typename W, typename I>
__global__ void encoder_forward_kernel(S* out, const int32_t* tokens, const W* wte, const W* wpe, I n, I T, I C) {
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * K;
    if (first >= n) return;
    const I row = first / C, c = first % C, t = row % T;
    float sum[K], position[K];
    load_pack(sum, wte + (size_t)tokens[row] * C + c);
    load_pack(position, wpe + t * C + c);
    for (int e = 0; e < K; e++) sum[e] += position[e];
    store_pack(out + first, sum);
}

// dwpe[t, c] += Σ_b dout[b, t, c], one thread per (t, c).
template <typename G>
__global__ void wpe_backward_kernel(float* dwpe, const G* dout, int B, int T, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + i]);
    dwpe[i] += sum;
}

// The key of position i: tokens[i] << 32 | i for i < N, all ones for the padding.
__device__ inline unsigned long long token_key(const int32_t* tokens, int i, int N) {
    return i < N ? (unsigned long long)(uint32_t)tokens[i] << 32 | (unsigned)i : ~0ull;
}

// The steps (j, k) of stage k of a bitonic sort for j = j_first, j_first/2, ..., 1, on the
// tile `tile` (2·blockDim.x keys in shared memory) that holds keys [base, base + 2·blockDim.x):
// per step, thread t orders the pair (i, i + j), i = (t / j)·2j + t mod j, ascending where bit
// k of the key's index base + i is 0. Every thread of the block calls it.
__device__ inline void bitonic_steps_in_tile(unsigned long long* tile, int base, int k, int j_first) {
    const int t = threadIdx.x;
    for (int j = j_first; j > 0; j /= 2) {
        const int i = (t / j) * 2 * j + t % j;
        const unsigned long long a = tile[i], b = tile[i + j];
        const bool ascending = ((base + i) & k) == 0;
        if (ascending ? a > b : a < b) {
            tile[i] = b;
            tile[i + j] = a;
        }
        __syncthreads();
    }
}

// Block b builds the keys [b·tile, (b + 1)·tile) from the tokens (tile = 2·blockDim.x) and runs
// every stage k ≤ tile of the sort on them in shared memory: afterwards tile b is sorted,
// ascending where bit `tile` of its first index is 0, else descending (the bitonic order the
// next stage merges).
__global__ void sort_token_tiles_kernel(unsigned long long* keys, const int32_t* tokens, int N) {
    __shared__ unsigned long long tile[SORT_TILE];
    const int half = blockDim.x, base = blockIdx.x * 2 * half, t = threadIdx.x;
    tile[t] = token_key(tokens, base + t, N);
    tile[t + half] = token_key(tokens, base + t + half, N);
    __syncthreads();
    for (int k = 2; k <= 2 * half; k *= 2) bitonic_steps_in_tile(tile, base, k, k / 2);
    keys[base + t] = tile[t];
    keys[base + t + half] = tile[t + half];
}

// The steps j < tile of stage k > tile (tile = 2·blockDim.x), block b on keys
// [b·tile, (b + 1)·tile) in shared memory.
__global__ void merge_token_tiles_kernel(unsigned long long* keys, int k) {
    __shared__ unsigned long long tile[SORT_TILE];
    const int half = blockDim.x, base = blockIdx.x * 2 * half, t = threadIdx.x;
    tile[t] = keys[base + t];
    tile[t + half] = keys[base + t + half];
    __syncthreads();
    bitonic_steps_in_tile(tile, base, k, half);
    keys[base + t] = tile[t];
    keys[base + t + half] = tile[t + half];
}

// One compare-exchange step (j, k) of a bitonic sort of `padded` keys in global memory, for
// partner distances j of a tile or more: thread i < i ^ j orders the pair (i, i ^ j), ascending
// where bit k of i is 0, and always stores both, so every step moves the same bytes whatever
// the data.
__global__ void bitonic_step_kernel(unsigned long long* keys, int j, int k, int padded) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int partner = i ^ j;
    if (i >= padded || partner < i) return;
    const unsigned long long a = keys[i], b = keys[partner];
    const bool ascending = (i & k) == 0;
    const bool swap = ascending ? a > b : a < b;
    keys[i] = swap ? b : a;
    keys[partner] = swap ? a : b;
}

// The token of a sorted key.
__host__ __device__ inline unsigned key_token(unsigned long long key) { return (unsigned)(key >> 32); }

// Chunk k = blockIdx.x of the sorted positions, channels blockIdx.y·256 + threadIdx.x: the
// chunk's rows of dout summed, in position order, into one sum per piece of a run of equal
// tokens. A piece that is a whole run is added to dwte (the run's only writer); the chunk's
// first piece, where its run began in an earlier chunk, goes to heads[k]; its last piece, where
// its run begins here and goes on past the chunk, to tails[k] (wte_run_sums adds those up).
template <typename G>
__global__ void wte_chunk_sums_kernel(float* dwte, float* heads, float* tails, const G* dout,
                                      const unsigned long long* keys, int N, int C) {
    __shared__ unsigned long long chunk[WTE_CHUNK + 2];  // the key before the chunk, its keys, the key after
    const int k = blockIdx.x, first = k * WTE_CHUNK, count = min(WTE_CHUNK, N - first);
    for (int i = threadIdx.x; i < WTE_CHUNK + 2; i += blockDim.x) {
        const int at = first - 1 + i;
        chunk[i] = at >= 0 && at < N ? keys[at] : ~0ull;  // no token's key: ~0 >> 32 ≥ every V
    }
    __syncthreads();
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float row[WTE_CHUNK];  // every load first, so that they are in flight together
    for (int j = 0; j < WTE_CHUNK; j++)
        row[j] = j < count ? to_float(dout[(size_t)(unsigned)chunk[j + 1] * C + c]) : 0.0f;
    const auto token = [&](int j) { return key_token(chunk[j + 1]); };  // j = −1 … count
    float sum = 0.0f;
    int start = 0;  // the first position of the current piece
    for (int j = 0; j < WTE_CHUNK; j++) {
        if (j >= count) break;
        sum += row[j];
        if (j + 1 < count && token(j + 1) == token(j)) continue;  // the piece goes on
        const bool began_before = start == 0 && token(-1) == token(0);
        const bool goes_on = j + 1 == count && token(count) == token(j);
        if (began_before) heads[(size_t)k * C + c] = sum;
        else if (goes_on) tails[(size_t)k * C + c] = sum;
        else dwte[(size_t)token(j) * C + c] += sum;
        sum = 0.0f, start = j + 1;
    }
}

// Chunk k = blockIdx.x, channels as above: where the chunk's last piece begins a run that goes
// on past the chunk, dwte[token] += tails[k] + heads[k + 1] + heads[k + 2] + … over the chunks
// the run reaches, in chunk order.
__global__ void wte_run_sums_kernel(float* dwte, const float* heads, const float* tails,
                                    const unsigned long long* keys, int N, int C) {
    const int k = blockIdx.x, first = k * WTE_CHUNK, last = min(first + WTE_CHUNK, N) - 1;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C || last + 1 >= N) return;
    const unsigned token = key_token(keys[last]);
    const bool goes_on = key_token(keys[last + 1]) == token;
    const bool began_before = first > 0 && key_token(keys[first]) == token && key_token(keys[first - 1]) == token;
    if (!goes_on || began_before) return;
    float sum = tails[(size_t)k * C + c];
    for (int next = k + 1;; next++) {
        sum += heads[(size_t)next * C + c];
        const int next_last = min((next + 1) * WTE_CHUNK, N) - 1;
        if (next_last + 1 >= N || key_token(keys[next_last + 1]) != token) break;
    }
    dwte[(size_t)token * C + c] += sum;
}

}  // namespace gpu
