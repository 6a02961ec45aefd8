// bench/kernel_costs.h — the cost model's declarations of the CUDA backend's kernels, one section per
// kernel file: for each op of the CUDA op set (cuda_ops.cuh), a `*_traffic` function that returns,
// for the sizes it is called with, one Traffic (bench/traffic.h) per launch the op makes (the
// kernel, the distinct bytes read and written, the FLOPs), and for the project's own kernels their
// issue (a WarpWork from the kernel's structure, the shared-memory wavefronts, and the threads,
// registers and shared bytes of a block). bench/cost_model.h turns them into time; `./bench_gpu
// -model` adds them up over the launches of a step (bench/step_traffic.cuh). The kernel files hold
// the kernels and the sizes of their launches; this file includes them for those constants and
// size helpers.
//
// test/traffic_test.cu checks every declaration: the bytes and wavefronts against the emulator's
// counts of each launch, the threads against the launch, the warp instructions against the
// kernel's sm_90 PTX and the registers and static shared memory against ptxas's report
// (docs/cost_model.md).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "cuda/cuda_common.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "residual.cuh"
#include "bench/traffic.h"

// =============================================================================================
// cuda/cuda_common.cuh: convert_kernel, add_column_partials_kernel (shared by the weight gradients)
// =============================================================================================

// Instructions that convert one element of type T to or from fp32 (cvt for bf16, none for
// fp32): the cost model's count (bench/traffic.h's WarpWork).
template <typename T>
constexpr double conversion() {
    return sizeof(T) < 4 ? 1 : 0;
}

// The issue of sum_of_column_partials in one warp (a row y of the block), from its structure: a
// trip over chunks y, y + 8, ... is a load, its address and the add (the loop unrolled by 4: its
// test and branch amortised to one); around it, the tile-row sum (the store, two barriers, and
// in row 0 eight loads and adds), the setup and the result; 32 + 8 shared wavefronts a block
// (each row's store of 32 floats, row 0's eight reads of a row).
constexpr WarpWork COLUMN_PARTIALS_WORK{4, 0, 70};
constexpr double COLUMN_PARTIALS_WAVEFRONTS = TILE_ROWS + TILE_ROWS;
// A block of add_column_partials_kernel: a (TILE_COLS, TILE_ROWS) tile of threads, the tile-row
// sum's shared floats, and the registers ptxas gives it (traffic_test checks them against ptxas's
// report, the threads against the launch).
constexpr KernelResources ADD_COLUMN_PARTIALS_RESOURCES{TILE_COLS * TILE_ROWS, 22, TILE_ROWS * TILE_COLS * 4};

// The warp instructions and wavefronts of one stage-2 launch over `width` columns and `chunks`
// partials: TILE_ROWS warps per block of 32 columns, each over every 8th chunk.
inline Traffic column_partials_issue(Traffic t, int chunks, int width, KernelResources resources) {
    const double blocks = ceil_div(width, TILE_COLS), trips = std::ceil(chunks / (double)TILE_ROWS);
    return with_issue(t, COLUMN_PARTIALS_WORK.instructions(blocks * TILE_ROWS, 1, trips),
                      blocks * COLUMN_PARTIALS_WAVEFRONTS, resources);
}

// Traffic of one add_column_partials_kernel launch: the `chunks` partials of each column read, out read and written.
inline Traffic add_column_partials_traffic(int chunks, int width) {
    return column_partials_issue({"add_column_partials_kernel", 4.0 * width * (chunks + 1), 4.0 * width,
                                  (double)width * chunks},
                                 chunks, width, ADD_COLUMN_PARTIALS_RESOURCES);
}

// A block of convert_kernel: 256 threads, no shared memory, and the registers ptxas gives it (as
// for the other kernels, traffic_test checks them).
constexpr KernelResources CONVERT_RESOURCES{256, 14, 0};

// Traffic of convert: `in` read, `out` written, no FLOPs.
// Its issue, a warp per 32 packs, from the kernel's structure: 10 of setup, the index and the
// exit test (6), the tests of a whole pack and alignment (6), the load and the store with their
// addresses (6), the conversions of the pack's elements (and 1 to pack bf16 pairs).
template <typename TOut, typename TIn>
constexpr WarpWork convert_work() {
    constexpr int S = convert_pack_size<TOut, TIn>();
    return {0, 0, 10 + 6 + 6 + 6 + S * (conversion<TIn>() + conversion<TOut>()) + 1};
}
template <typename TOut, typename TIn>
Traffic convert_traffic(size_t n) {
    const double warps = ceil_div(ceil_div(n, convert_pack_size<TOut, TIn>()), WARP_SIZE);
    return with_issue({"convert_kernel", (double)n * sizeof(TIn), (double)n * sizeof(TOut), 0},
                      convert_work<TOut, TIn>().instructions(warps, 1, 0), 0, CONVERT_RESOURCES);
}

namespace gpu {

// =============================================================================================
// encoder.cuh: encoder_forward_kernel; wpe_backward, the token sort's three, wte_chunk_sums and
// wte_run_sums kernels
// =============================================================================================

// A block of encoder_forward_kernel: 256 threads, no shared memory, and the registers ptxas gives
// it (traffic_test checks them).
constexpr KernelResources ENCODER_FORWARD_RESOURCES{256, 18, 0};

// Traffic of encoder_forward: the tokens, one wte row per position (all distinct at worst) and
// T rows of wpe read (W), out written (S).
// Its issue, a warp per 32 packs of K (the model's rows are aligned), from the structure of
// the kernel: 10 of setup, the index and the exit test (6), row, column and position (3
// divisions and 3 of conversion), the token loaded (3 with its address), the wte and wpe packs
// (4 each with their addresses), per element both converted and added, the store (2).
template <typename S, typename W>
constexpr WarpWork encoder_forward_work() {
    constexpr int K = pack_width<S, W>();
    return {0, 0, 10 + 6 + 6 + 3 + 2 * 4 + K * (2 * conversion<W>() + 1) + 2};
}
template <typename S, typename W>
Traffic encoder_forward_traffic(int B, int T, int C) {
    const double N = (double)B * T;
    constexpr int K = pack_width<S, W>();
    return with_issue({"encoder_forward_kernel", 4.0 * N + (N + T) * C * sizeof(W), N * C * sizeof(S), N * C},
                      encoder_forward_work<S, W>().instructions(ceil_div(N * C / K, WARP_SIZE), 1, 0), 0,
                      ENCODER_FORWARD_RESOURCES);
}

// How a batch's tokens fall into the chunks of the wte gradient, from the tokens on the host
// (what the traffic model needs; real text has long runs, random tokens short ones).
struct TokenRuns {
    int distinct = 0;     // distinct tokens
    int whole = 0;        // runs inside one chunk (added to dwte by wte_chunk_sums)
    int crossing = 0;     // runs over several chunks (added by wte_run_sums)
    int heads = 0;        // chunks whose first piece continues a run
    int tails = 0;        // chunks whose last piece begins a run that goes on (= crossing)
    int longest = 0;      // positions of the most frequent token
};

inline TokenRuns token_runs(const int32_t* tokens, int N) {
    std::vector<int32_t> sorted(tokens, tokens + N);
    std::sort(sorted.begin(), sorted.end());
    TokenRuns runs;
    for (int i = 0; i < N;) {
        int j = i;
        while (j < N && sorted[j] == sorted[i]) j++;
        const int first_chunk = i / WTE_CHUNK, last_chunk = (j - 1) / WTE_CHUNK;
        runs.distinct++;
        runs.longest = std::max(runs.longest, j - i);
        if (first_chunk == last_chunk) runs.whole++;
        else runs.crossing++, runs.tails++, runs.heads += last_chunk - first_chunk;
        i = j;
    }
    return runs;
}

// Traffic of encoder_backward for a batch whose tokens fall as `runs` says: dwpe (T,C) from
// dout; the tokens read and the sorted tiles written, then each later launch of the sort (all
// keys read and written); the chunk sums read dout, every key and the dwte rows of whole runs
// (read and written), and write the pieces of crossing runs; the run sums read the two keys at
// each boundary between chunks, and for each crossing run its pieces and its dwte row (read and
// written).
//
// The issue of each launch, from the kernels' structure (per warp):
//   wpe_backward: a trip over b is a load with its address and the add (4); once 40 (setup,
//     index and bound, dwpe loaded, added and stored, entering the loop unrolled by 4);
//   a bitonic step in a tile: its pair's index (5), both keys loaded (4), the direction (3), the
//     comparison and exchange (7), the barrier and the loop (5): 24; per stage 6; once the keys
//     built from the tokens (16), stored to and read from shared memory and
//     stored (12), and 15 of setup (with the keys loaded from device memory, 4). Shared
//     wavefronts: per step both keys read, 2 a warp's 256 bytes, 4 where the pairs' distance
//     j < 16 spreads them over 512 bytes, and stored where the pair is exchanged: taken as half
//     of the reads (the count depends on the data);
//   bitonic_step_kernel: 32 in a warp that exchanges, 10 in one whose pairs lie the other way;
//   wte_chunk_sums: setup and the chunk's keys (30); in the warps with channels, per position of the chunk its key read,
//     the row loaded with its address and selected (7) and the run test (key read, compared, the
//     sum: 6), per piece its end (the tests, the store and for a whole run dwte loaded and added:
//     15); wavefronts: the keys stored, per position 3 key reads (broadcasts), per piece 4. (Its
//     PTX unrolls the chunk's 32 positions with a copy of the piece's end in each, so it is not
//     checked against the PTX);
//   wte_run_sums: 50 (indices, the keys at both ends, the tests), per chunk a run reaches its
//     piece loaded and the next key tested (19, in the warps of the runs' channels).
constexpr WarpWork WPE_BACKWARD_WORK{4, 0, 40}, BITONIC_STEP_WORK{0, 0, 32};
inline WarpWork bitonic_tile_work(bool from_tokens) { return {24, 6, (from_tokens ? 16.0 : 4.0) + 12 + 15}; }
constexpr WarpWork WTE_RUN_SUMS_WORK{19, 0, 50};
inline double bitonic_tile_instructions(int steps, int stages, bool from_tokens) {
    return bitonic_tile_work(from_tokens).instructions(1, stages, (double)steps / stages);
}
inline double bitonic_tile_wavefronts(int k_first, int k_last, int j_first) {
    double waves = 2 * 2 + 2 * 2;  // the keys stored and read back, two wavefronts each
    for (int k = k_first; k <= k_last; k *= 2)
        for (int j = j_first > 0 ? j_first : k / 2; j > 0; j /= 2) waves += 3 * (j < 16 ? 4 : 2);
    return waves;
}
// The blocks of the backward's kernels: their threads, their static shared memory (the sort's
// tile of keys, the chunk's keys) and the registers ptxas gives them (traffic_test checks them).
constexpr KernelResources WPE_BACKWARD_RESOURCES{256, 32, 0}, BITONIC_STEP_RESOURCES{256, 14, 0};
constexpr KernelResources WTE_CHUNK_SUMS_RESOURCES{256, 86, (WTE_CHUNK + 2) * 8}, WTE_RUN_SUMS_RESOURCES{256, 18, 0};
inline KernelResources sort_tile_resources(int tile, bool from_tokens) {
    return {tile / 2, from_tokens ? 20 : 22, SORT_TILE * 8};
}

template <typename G>
Launches encoder_backward_traffic(int B, int T, int C, const TokenRuns& runs) {
    const int N = B * T, P = TokenOrder::padded_size(N), tile = sort_tile(P), chunks = (int)ceil_div(N, WTE_CHUNK);
    const double nc = (double)N * C, tc = (double)T * C, keys = 8.0 * P, row = 4.0 * C;
    const double tile_warps = (double)(P / tile) * (tile / 2) / WARP_SIZE;
    int tile_stages = 0, tile_steps = 0;
    for (int k = 2; k <= tile; k *= 2) tile_stages++, tile_steps += tile_stages;
    Launches out{with_issue({"wpe_backward_kernel", nc * sizeof(G) + 4.0 * tc, 4.0 * tc, nc},
                            WPE_BACKWARD_WORK.instructions(ceil_div(tc, WARP_SIZE), 1, B), 0, WPE_BACKWARD_RESOURCES),
                 with_issue({"sort_token_tiles_kernel", 4.0 * N, keys, 0},
                            tile_warps * bitonic_tile_instructions(tile_steps, tile_stages, true),
                            tile_warps * bitonic_tile_wavefronts(2, tile, 0), sort_tile_resources(tile, true))};
    const double step_warps = (double)P / WARP_SIZE / 2;  // that exchange; as many skip
    for (int k = 2 * tile; k <= P; k *= 2) {
        for (int j = k / 2; j >= tile; j /= 2)
            out.push_back(with_issue({"bitonic_step_kernel", keys, keys, 0}, step_warps * (BITONIC_STEP_WORK.once + 10), 0,
                                     BITONIC_STEP_RESOURCES));
        out.push_back(with_issue({"merge_token_tiles_kernel", keys, keys, 0},
                                 tile_warps * bitonic_tile_instructions(tile_stages, 1, false),
                                 tile_warps * bitonic_tile_wavefronts(k, k, tile / 2), sort_tile_resources(tile, false)));
    }
    const double channel_warps = ceil_div(C, 256) * 256.0 / WARP_SIZE;  // of a chunk's blocks
    const double column_warps = ceil_div(C, WARP_SIZE);                  // of them, those with channels
    const double pieces = runs.whole + runs.heads + runs.tails;
    out.push_back(with_issue({"wte_chunk_sums_kernel", nc * sizeof(G) + 8.0 * N + row * runs.whole,
                              row * (runs.whole + runs.heads + runs.tails), nc},
                             channel_warps * chunks * 30 + column_warps * (chunks * 13.0 * WTE_CHUNK + 15 * pieces),
                             chunks * (3.0 + column_warps * 3 * WTE_CHUNK) + column_warps * 4 * pieces,
                             WTE_CHUNK_SUMS_RESOURCES));
    out.push_back(with_issue({"wte_run_sums_kernel", 16.0 * (chunks - 1) + row * (runs.heads + runs.tails + runs.crossing),
                              row * runs.crossing, row / 4 * runs.heads},
                             channel_warps * chunks * WTE_RUN_SUMS_WORK.once +
                                 ceil_div(C, WARP_SIZE) * WTE_RUN_SUMS_WORK.per_trip * runs.heads,
                             0,
                             WTE_RUN_SUMS_RESOURCES));
    return out;
}

// =============================================================================================
// layernorm.cuh: layernorm_forward_kernel, layernorm_backward_kernel, layernorm_weight_gradients_kernel
// =============================================================================================

// A block of layernorm_weight_gradients_kernel, as add_column_partials_kernel's (whose issue it
// has) but for the registers ptxas gives it (traffic_test checks them).
constexpr KernelResources LAYERNORM_WEIGHT_GRADIENTS_RESOURCES{TILE_COLS * TILE_ROWS, 32, TILE_ROWS * TILE_COLS * 4};

// The issue of layernorm_forward_kernel in packs of K (the model's rows are aligned), one warp
// per row, from its structure. A trip takes K columns through the three passes: per element,
// the input (x converted, and with ADD_FIRST f converted, the fma and the rounding to S), then
// pass 1's sum, pass 2's difference and square, pass 3's (s − m)·r·w + b with w and b converted
// and the result converted to O; per pack, each pass's loads and stores and 3 of loop (index,
// test, branch). Once: 60 of indices and setup, two warp sums (5 shuffles and adds: 20 each),
// rstd (5), the stores of mean and rstd (6), entering the three loops (10 each).
template <bool ADD_FIRST, int K, typename O, typename S, typename F, typename W>
constexpr WarpWork layernorm_forward_work() {
    const double add = ADD_FIRST ? conversion<F>() + 1 + 2 * conversion<S>() : 0, in = conversion<S>() + add;
    const double loads = 1 + ADD_FIRST, loop = 3;
    const double pass1 = K * (in + 1) + loads + ADD_FIRST + loop, pass2 = K * (in + 2) + loads + loop;
    const double pass3 = K * (in + 3 + 2 * conversion<W>() + conversion<O>()) + loads + 2 + 1 + loop;
    return {pass1 + pass2 + pass3, 0, 60 + 2 * 20 + 5 + 6 + 3 * 10};
}

// A block of the forward kernel: 8 warps, no shared memory, and the registers ptxas gives it, more
// for the fp32 sum of two fp32 tensors (traffic_test checks both counts).
template <bool ADD_FIRST, typename O, typename S, typename F>
constexpr KernelResources layernorm_forward_resources() {
    const bool wide = ADD_FIRST && sizeof(O) == 4 && sizeof(S) == 4 && sizeof(F) == 4;
    return {WARPS_PER_BLOCK * WARP_SIZE, wide ? 40 : 32, 0};
}

// `t` with the issue of a forward launch over N rows of C (no shared memory).
template <bool ADD_FIRST, typename O, typename S, typename F, typename W>
Traffic layernorm_forward_issue(Traffic t, int N, int C) {
    constexpr int K = pack_width<O, S, F, W>();
    const WarpWork work = layernorm_forward_work<ADD_FIRST, K, O, S, F, W>();
    return with_issue(t, work.instructions(N, 1, ceil_div(C, WARP_SIZE * K)), 0,
                      layernorm_forward_resources<ADD_FIRST, O, S, F>());
}

// Traffic of layernorm_forward: inp (N,C), w and b (C) read; out (N,C), mean and rstd (N)
// written; about 8 FLOPs per element.
template <typename O, typename X, typename W>
Traffic layernorm_forward_traffic(int N, int C) {
    const double nc = (double)N * C;
    return layernorm_forward_issue<false, O, X, X, W>(
        {"layernorm_forward_kernel", nc * sizeof(X) + 2.0 * C * sizeof(W), nc * sizeof(O) + 8.0 * N, 8.0 * nc}, N, C);
}

// Traffic of residual_layernorm_forward: x and f (N,C), w and b (C) read; sum and out (N,C),
// mean and rstd (N) written; about 14 FLOPs per element (the add is redone in each of the
// kernel's three passes over the row).
template <typename S, typename F, typename O, typename W>
Traffic residual_layernorm_forward_traffic(int N, int C) {
    const double nc = (double)N * C;
    return layernorm_forward_issue<true, O, S, F, W>({"layernorm_forward_kernel",
                                                      nc * (sizeof(S) + sizeof(F)) + 2.0 * C * sizeof(W),
                                                      nc * (sizeof(S) + sizeof(O)) + 8.0 * N, 14.0 * nc},
                                                     N, C);
}

// The issue of layernorm_backward_kernel in packs of K, from its structure. A trip takes K
// columns of a row through both passes: per element, pass 1's conversions of dout and w (and
// x), g = dout·w, its sum, x̂ and the sum of g·x̂ (5); pass 2's conversions (dinp's too when it
// is bf16), x̂ (2), the gradient (5), its add into dinp, the fmas of dw and db, and with dres
// Δt·dinp converted to F; per pack, each access (3 in pass 1; dout, x, w, dinp, the two column
// sums read and stored, dinp and dres stored in pass 2) with 2 of address, and 3 of loop per
// pass. Per row: mean and rstd loaded, two warp sums (20 each), the divisions, entering the
// loops (20 each) and the row loop (3). Once: 40 of setup, zeroing the warp's column sums (5 a
// pack of each), and its share of the block's sums of the warps' columns (2C/256 columns a
// thread, each `warps` loads and adds, its store: 2·warps + 6).
template <int K, typename D, typename G, typename X, typename W, typename F>
WarpWork layernorm_backward_work(int C, bool residual) {
    const double cvt = conversion<G>() + conversion<X>() + conversion<W>();
    const double pass1 = K * (cvt + 5) + 3 * 3 + 3;
    const double dres = residual ? 1 + conversion<F>() + 2 * conversion<D>() : 0;
    const double pass2 = K * (cvt + conversion<D>() + 2 + 5 + 3 + dres) + (8 + residual) * 3 + 3;
    const int warps = layernorm_backward_warps(C);
    const double zeroing = 2 * 5 * ceil_div(C, WARP_SIZE * K), sums = ceil_div(2 * C, warps * WARP_SIZE) * (2.0 * warps + 6);
    return {pass1 + pass2, 4 + 2 * 20 + 2 + 2 * 20 + 3, 40 + zeroing + sums};
}

// A block of the backward kernel: its warps, the column sums in dynamic shared memory, and the
// registers ptxas gives it, more in bf16 throughout (traffic_test checks both counts).
template <typename D, typename G, typename X>
KernelResources layernorm_backward_resources(int C) {
    const bool all_bf16 = sizeof(D) == 2 && sizeof(G) == 2 && sizeof(X) == 2;
    return {layernorm_backward_warps(C) * WARP_SIZE, all_bf16 ? 76 : 48, (int)layernorm_backward_shared_bytes(C)};
}

// The shared wavefronts of one warp of the backward kernel: its two column sums (4C bytes each,
// C·4/128 wavefronts a pass over them) zeroed, then read and stored for each row, and its share
// of the block's sums of the warps' columns (per 32 of the 2C columns, a wavefront from each
// warp's sums: 2C/32 a warp on average).
inline double layernorm_backward_wavefronts(int C, double rows) {
    const double pass = ceil_div(4 * C, 128);
    return 2 * pass + rows * 4 * pass + ceil_div(2 * C, WARP_SIZE);
}

// Traffic of layernorm_backward: dout, inp, w, mean, rstd read, and dinp when added into;
// dinp and the partial column sums written; then the partials, dw and db read, dw and db written.
// `F` is the type of dres (layernorm_backward_residual), which it writes only there.
template <typename D, typename G, typename X, typename W, typename F = G>
Launches layernorm_backward_traffic(int N, int C, GradOut dinp_out = GradOut::Add, bool residual = false) {
    const double nc = (double)N * C;
    const int blocks = layernorm_backward_blocks(N), warps = layernorm_backward_warps(C);
    const double dinp_read = dinp_out == GradOut::Add ? sizeof(D) : 0;
    constexpr int K = pack_width<D, G, X, W, F>();
    const double rows = (double)N / (blocks * warps);  // per warp
    const WarpWork work = layernorm_backward_work<K, D, G, X, W, F>(C, residual);
    const Traffic pass{"layernorm_backward_kernel", nc * (sizeof(G) + sizeof(X) + dinp_read) + C * sizeof(W) + 8.0 * N,
                       nc * (sizeof(D) + (residual ? sizeof(F) : 0)) + 8.0 * blocks * C, (17.0 + residual) * nc};
    const Traffic sums{"layernorm_weight_gradients_kernel", 8.0 * C * (blocks + 1), 8.0 * C, 2.0 * C * blocks};
    return {with_issue(pass, work.instructions((double)blocks * warps, rows, ceil_div(C, WARP_SIZE * K)),
                       (double)blocks * warps * layernorm_backward_wavefronts(C, rows),
                       layernorm_backward_resources<D, G, X>(C)),
            column_partials_issue(sums, blocks, 2 * C, LAYERNORM_WEIGHT_GRADIENTS_RESOURCES)};
}

// Traffic of layernorm_backward_residual: that of layernorm_backward, and df (N,C) written.
template <typename D, typename F, typename G, typename X, typename W>
Launches layernorm_backward_residual_traffic(int N, int C, GradOut dinp_out = GradOut::Add) {
    return layernorm_backward_traffic<D, G, X, W, F>(N, C, dinp_out, true);
}

// =============================================================================================
// matmul.cuh: the products (cublasGemmEx, cublasLtMatmul), add_bias_kernel, bias_backward_kernel
// =============================================================================================

// Traffic of one plain product (cublasGemmEx) with elements of sizes ab_bytes (A, B) and c_bytes (C): reads op(A) (M,K) and
// op(B) (K,N), reads C only when beta ≠ 0, writes C (M,N), and does 2·M·N·K FLOPs.
inline Traffic gemm_traffic(int M, int N, int K, bool beta_nonzero, size_t ab_bytes, size_t c_bytes) {
    const double mn = (double)M * N;
    return {"gemm", ((double)M * K + (double)K * N) * ab_bytes + (beta_nonzero ? mn * c_bytes : 0.0),
            mn * c_bytes, 0, 2.0 * mn * K};
}

// Traffic of one product with an epilogue (cublasLtMatmul): the plain product's, plus the bias read (Bias, BiasGelu) or written (BiasGrad, as
// TC), and pre written (BiasGelu) or read (GeluGrad); the epilogue's FLOPs count as other FLOPs
// (about 11 per element for GELU, 21 for its derivative, as the kernels they replace).
inline Traffic fused_gemm_traffic(Epilogue e, int M, int N, int K, bool beta_nonzero, size_t ab_bytes,
                                  size_t c_bytes) {
    Traffic t = gemm_traffic(M, N, K, beta_nonzero, ab_bytes, c_bytes);
    const double mn = (double)M * N;
    switch (e) {
        case Epilogue::Bias: t.bytes_read += (double)N * c_bytes; break;
        case Epilogue::BiasGelu:
            t.bytes_read += (double)N * c_bytes, t.bytes_written += mn * c_bytes, t.flops = 11.0 * mn;
            break;
        case Epilogue::GeluGrad: t.bytes_read += mn * c_bytes, t.flops = 21.0 * mn; break;
        case Epilogue::BiasGrad: t.bytes_written += (double)M * c_bytes; break;
    }
    return t;
}

// Traffic of one add_bias_kernel launch: out and bias read, out written, one FLOP per element.
template <typename T>
Traffic add_bias_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return {"add_bias_kernel", (n + OC) * sizeof(T), n * sizeof(T), n};
}

// Traffic of matmul_forward (cuda_ops.cuh): the product with its bias epilogue where the bias
// kind is fused, else the product and add_bias_kernel; the product alone without a bias.
template <typename T>
Launches matmul_forward_traffic(int N, int IC, int OC, bool bias, const FusedKinds& fused) {
    if (bias && fused[Epilogue::Bias])
        return {fused_gemm_traffic(Epilogue::Bias, N, OC, IC, false, sizeof(T), sizeof(T))};
    Launches out{gemm_traffic(N, OC, IC, false, sizeof(T), sizeof(T))};
    if (bias) out.push_back(add_bias_traffic<T>(N, OC));
    return out;
}

// Traffic of bias_backward_kernel, stage 1 of the bias gradient (matmul.cuh): dout read, a row of partial sums per chunk of
// rows written, one FLOP per element. Its bytes only: the cost model gives it no issue or
// latency term (it runs where the bias-gradient kind is plain).
template <typename T>
Traffic bias_backward_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return {"bias_backward_kernel", n * sizeof(T), 4.0 * row_chunks(N) * OC, n};
}

// Traffic of the weight half of a linear layer's backward: the dw product (which accumulates,
// so its C is read) with the bias gradient as its epilogue, then the one-row stage 2 that adds
// it to dbias; where the bias-gradient kind is plain, the product, then both stages of the
// column sums.
template <typename T>
Launches weight_backward_traffic(int N, int IC, int OC, bool bias, const FusedKinds& fused) {
    if (!bias) return {gemm_traffic(OC, IC, N, true, sizeof(T), 4)};
    if (fused[Epilogue::BiasGrad])
        return {fused_gemm_traffic(Epilogue::BiasGrad, OC, IC, N, true, sizeof(T), 4),
                add_column_partials_traffic(1, OC)};
    return {gemm_traffic(OC, IC, N, true, sizeof(T), 4), bias_backward_traffic<T>(N, OC),
            add_column_partials_traffic(row_chunks(N), OC)};
}

// Traffic of the input half of a linear layer's backward: the dinp product, its C read only when
// it adds.
template <typename T, typename D = T>
Traffic input_backward_traffic(int N, int IC, int OC, GradOut dinp_out) {
    return gemm_traffic(N, IC, OC, dinp_out == GradOut::Add, sizeof(T), sizeof(D));
}

// Traffic of matmul_backward (cuda_ops.cuh): the input half's, then the weight half's.
template <typename T, typename D = T>
Launches matmul_backward_traffic(int N, int IC, int OC, bool bias, GradOut dinp_out, const FusedKinds& fused) {
    Launches out{input_backward_traffic<T, D>(N, IC, OC, dinp_out)};
    append(out, weight_backward_traffic<T>(N, IC, OC, bias, fused));
    return out;
}

// =============================================================================================
// attention.cuh: the tensor-core kernels (attention_mma.cuh), attention_delta_kernel, and the
// exact rows kernels
// =============================================================================================

// Both paths, the tensor-core kernels and the exact rows kernels, read every position's q, k and
// v (and dout) once as distinct bytes (blocks reread k and v tiles, which the L2 cache serves)
// and write their outputs once.

// The (query, key) pairs of causal attention, t' ≤ t, over the B·NH heads.
inline double attention_pairs(int B, int Tn, int NH) { return (double)B * NH * Tn * (Tn + 1.0) / 2; }
// Whether attention_forward and attention_backward run the tensor-core kernels.
template <typename T>
bool attention_uses_mma(int C, int NH) {
    return mma_head_size<T>(C, NH) != 0;
}

// The cost model's view of a tensor-core kernel (bench/cost_model.h), from its structure in
// attention_mma.cuh: per warp, the warp instructions and shared-memory wavefronts of one tile
// of its walk off the diagonal (the loop), and of everything else a block does once (the tile on
// the diagonal with its mask, loading its own rows, storing the results); the resources of a block.
// test/traffic_test.cu checks the loop against the inner loop of the kernel's sm_90 PTX, the
// wavefronts against the emulator's count and the resources against ptxas.
struct MmaTileCosts {
    double loop_instructions, rest_instructions, loop_wavefronts, rest_wavefronts;
    KernelResources resources;
};

enum class AttentionKernel { Forward, BackwardDq, BackwardDkDv };

// A block of a tensor-core kernel by head size: 4 warps; its static shared memory, two pairs of
// tile buffers and the dk/dv kernel's two pairs of lse and D rows; and the registers ptxas gives
// it (traffic_test checks them at every head size compiled).
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

// A block of attention_delta_kernel: 8 warps, no shared memory, and the registers ptxas gives it
// (traffic_test checks them).
constexpr KernelResources ATTENTION_DELTA_RESOURCES{WARPS_PER_BLOCK * WARP_SIZE, 32, 0};

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
                       ATTENTION_DELTA_RESOURCES),
            attention_kernel_traffic<T>("attention_backward_dq_mma_kernel", "attention_backward_dq_rows_kernel",
                                        inputs, n * C * e, B, Tn, C, NH, AttentionKernel::BackwardDq, 3, 3),
            attention_kernel_traffic<T>("attention_backward_dkdv_mma_kernel", "attention_backward_dkdv_rows_kernel",
                                        inputs, 2 * n * C * e, B, Tn, C, NH, AttentionKernel::BackwardDkDv, 4, 4)};
}

// =============================================================================================
// residual.cuh: residual_forward_kernel
// =============================================================================================

// Traffic of residual_forward: x (S) and f (F) read, out (S) written.
template <typename S, typename F>
Traffic residual_forward_traffic(size_t n) {
    return {"residual_forward_kernel", (double)n * (sizeof(S) + sizeof(F)), (double)n * sizeof(S), 2.0 * n};
}

// =============================================================================================
// gelu.cuh: bias_gelu_forward_kernel, gelu_backward_inplace_kernel, and the MLP products around them
// =============================================================================================

// A block of either GELU pass in packs (the model's rows are aligned): 256 threads, no shared
// memory, and the registers ptxas gives it, more in bf16 (traffic_test checks both counts).
template <typename T>
constexpr KernelResources gelu_pass_resources() {
    return {256, sizeof(T) == 4 ? 30 : 32, 0};
}

// Traffic of one bias_gelu_forward_kernel launch: pre and bias read, pre and out written, about 11 FLOPs per
// element.
// Its issue, a warp per 32 packs of K (the model's rows are aligned), from the structure of the
// kernel: 17 of setup, the index, the exit test and the three pack addresses; per element the
// bias added (2), the tanh form's polynomial (4), tanhf (19: |u|, the exponential, its
// reciprocal, the small-argument series, the sign) and the product with x (4).
template <typename T>
constexpr WarpWork bias_gelu_forward_work() {
    return {0, 0, 17 + Pack16<T>::size * (2 + 4 + 19 + 4)};
}
template <typename T>
Traffic bias_gelu_forward_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return with_issue({"bias_gelu_forward_kernel", (n + OC) * sizeof(T), 2 * n * sizeof(T), 11.0 * n},
                      bias_gelu_forward_work<T>().instructions(ceil_div(n / Pack16<T>::size, WARP_SIZE), 1, 0), 0,
                      gelu_pass_resources<T>());
}

// Traffic of one gelu_backward_inplace_kernel launch: d and pre read, d written, about 21 FLOPs per element.
// Its issue, a warp per 32 packs of K: 14 of setup, the index, the exit test and the two pack
// addresses; per element the tanh form's argument (4), tanhf (19), the derivative's two terms
// (sech² = 1 − tanh², and x·u'·sech²: 10) and the product with d (2).
template <typename T>
constexpr WarpWork gelu_backward_inplace_work() {
    return {0, 0, 14 + Pack16<T>::size * (4 + 19 + 10 + 2)};
}
template <typename T>
Traffic gelu_backward_inplace_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return with_issue({"gelu_backward_inplace_kernel", 2 * n * sizeof(T), n * sizeof(T), 21.0 * n},
                      gelu_backward_inplace_work<T>().instructions(ceil_div(n / Pack16<T>::size, WARP_SIZE), 1, 0),
                      0, gelu_pass_resources<T>());
}

// Traffic of matmul_gelu_forward (cuda_ops.cuh): the fused product where the kind is fused and
// the precision and OC allow it, else the product and the bias + GELU pass.
template <typename T>
Launches matmul_gelu_forward_traffic(int N, int IC, int OC, const FusedKinds& fused) {
    if (fused[Epilogue::BiasGelu] && gelu_epilogue_allowed<T>() && aux_stride_allowed(OC))
        return {fused_gemm_traffic(Epilogue::BiasGelu, N, OC, IC, false, sizeof(T), sizeof(T))};
    Launches out = matmul_forward_traffic<T>(N, IC, OC, false, fused);
    out.push_back(bias_gelu_forward_traffic<T>(N, OC));
    return out;
}

// Traffic of matmul_gelu_backward (cuda_ops.cuh): the dpre product with GELU's derivative fused where the
// kind is fused and the precision and IC allow it, else the product and the pass; then the
// weight half's.
template <typename T>
Launches matmul_gelu_backward_traffic(int N, int IC, int OC, bool bias, const FusedKinds& fused) {
    Launches out;
    if (fused[Epilogue::GeluGrad] && gelu_epilogue_allowed<T>() && aux_stride_allowed(IC))
        out.push_back(fused_gemm_traffic(Epilogue::GeluGrad, N, IC, OC, false, sizeof(T), sizeof(T)));
    else
        out = {input_backward_traffic<T>(N, IC, OC, GradOut::Write), gelu_backward_inplace_traffic<T>(N, IC)};
    append(out, weight_backward_traffic<T>(N, IC, OC, bias, fused));
    return out;
}

// =============================================================================================
// loss.cuh: crossentropy_forward_kernel, crossentropy_forward_backward_kernel
// =============================================================================================

// Traffic of crossentropy_forward: the V real columns of each row and the targets read, the
// losses written; about 4 FLOPs per logit (max, subtract, exp, add).
template <typename T>
Traffic crossentropy_forward_traffic(int N, int V, int Vp) {
    return {"crossentropy_forward_kernel", (double)N * V * sizeof(T) + 4.0 * N, 4.0 * N, 4.0 * N * V};
}

// Traffic of crossentropy_forward_backward: the V real columns of each row and the targets read
// once, all Vp columns and the losses written; about 8 FLOPs per logit (4 for the loss, 4 for
// the gradient).
//
// Its issue, from the kernel's structure (rows staged in shared memory, in packs of K): a trip
// takes a pack of a thread through the three passes: per element its conversion (and 0.5 of
// unpacking bf16 pairs) in each pass, pass 1's maximum, pass 2's exp (the sub and 11 of expf)
// and sum, pass 3's exp, target test (2), difference, product and conversion back; per pack the
// three loads, the staged store and the gradient's store with 2 of address each, and 3 of loop
// per pass. Once per warp: 200 (setup, 30; the two block reductions with their barriers, 50
// each; the loss with its log, 25; entering the loops and the columns past the packs, 45).
// Shared wavefronts: per row the staged store and the two reads of its V·sizeof(T) bytes, 128 a
// wavefront; per warp 4 in the reductions.
template <typename T>
constexpr WarpWork crossentropy_forward_backward_work() {
    constexpr int K = Pack16<T>::size;
    const double cvt = conversion<T>() * 1.5;
    return {K * ((cvt + 1) + (cvt + 13) + (cvt + 16 + conversion<T>())) + 5 * 3 + 3 * 3, 0, 200};
}
// A block of crossentropy_forward_backward_kernel: CE_THREADS threads; the reductions' static
// shared floats and `staged_bytes` of dynamic shared memory (the row, when staged); and the
// registers ptxas gives it (traffic_test checks them).
inline KernelResources crossentropy_forward_backward_resources(size_t staged_bytes) {
    return {CE_THREADS, 32, (int)staged_bytes + WARP_SIZE * 4};
}

template <typename T>
Traffic crossentropy_forward_backward_traffic(int N, int V, int Vp) {
    constexpr int K = Pack16<T>::size;
    const double trips = ceil_div(ceil_div(V, K), CE_THREADS);
    const WarpWork work = crossentropy_forward_backward_work<T>();
    const double warps = (double)N * CE_THREADS / WARP_SIZE;
    const bool staged = V * sizeof(T) <= 227 * 1024 - WARP_SIZE * sizeof(float);  // the H200's limit
    const double row_waves = staged ? 3 * std::ceil(V * sizeof(T) / 128.0) : 0;  // per row
    return with_issue({"crossentropy_forward_backward_kernel", (double)N * V * sizeof(T) + 4.0 * N,
                       (double)N * Vp * sizeof(T) + 4.0 * N, 8.0 * N * V},
                      work.instructions(warps, 1, trips), N * row_waves + warps * 4,
                      crossentropy_forward_backward_resources(staged ? V * sizeof(T) : 0));
}

// =============================================================================================
// adamw.cuh: adamw_kernel, sum_of_squares_kernel
// =============================================================================================

// Traffic of adamw_update: params, grads, m, v read; params, m, v written, and the bf16 copy
// when there is one; about 15 FLOPs per parameter.
//
// Its issue, a warp per 32 packs of ADAMW_PACK parameters, from the kernel's structure: 45 of
// setup, index, bounds and alignment tests; the four 16-byte loads and three stores with their
// addresses (14); per parameter its segment found (5 a segment passed: one here), and the
// update (25: the moments, the two bias corrections and the step, with three divisions and a
// square root); with the bf16 copy, the conversions, the store and its address (7).
// A block of adamw_kernel: 256 threads, no shared memory, and the registers ptxas gives it
// (traffic_test checks them).
constexpr KernelResources ADAMW_RESOURCES{256, 40, 0};

inline WarpWork adamw_work(bool copy) { return {0, 0, 45 + 14 + ADAMW_PACK * (5 + 25) + (copy ? ADAMW_PACK + 3.0 : 0.0)}; }
template <typename T>
Traffic adamw_update_traffic(size_t n, bool copy) {
    return with_issue({"adamw_kernel", 16.0 * n, 12.0 * n + (copy ? (double)n * sizeof(T) : 0.0), 15.0 * n},
                      adamw_work(copy).instructions(ceil_div(ceil_div(n, ADAMW_PACK), WARP_SIZE), 1, 0), 0,
                      ADAMW_RESOURCES);
}

// A block of sum_of_squares_kernel: SUMSQ_THREADS threads, the block sum's shared floats, and the
// registers ptxas gives it, more in bf16 (traffic_test checks both counts).
template <typename T>
constexpr KernelResources sum_of_squares_resources() {
    return {SUMSQ_THREADS, sizeof(T) == 4 ? 14 : 16, WARP_SIZE * 4};
}

template <typename T>
constexpr WarpWork sum_of_squares_work() {
    return {6 + conversion<T>(), 0, 90};
}

// Traffic of sum_of_squares: x read, one partial per block written.
template <typename T>
Traffic sum_of_squares_traffic(size_t n) {
    const size_t blocks = sum_of_squares_blocks(n);
    // Its issue: a trip of the grid-stride loop is a load with its address, the conversion, the
    // fma and the loop (7 + conversion); once 90 (setup, the block sum: two warp sums, two
    // barriers, the shared store and read; the partial stored). Wavefronts: a store and a read
    // per warp.
    const double warps = blocks * SUMSQ_THREADS / WARP_SIZE;
    const double trips = ceil_div(n, blocks * SUMSQ_THREADS);
    return with_issue({"sum_of_squares_kernel", (double)n * sizeof(T), 4.0 * blocks, 2.0 * n},
                      sum_of_squares_work<T>().instructions(warps, 1, trips), 2 * warps,
                      sum_of_squares_resources<T>());
}

}  // namespace gpu
