// cuda_ops.cuh — the CUDA op set: CudaOps<Act>, every op the model of gpt2.h calls on the GPU
// (CudaBackend in gpt2.cu), as ReferenceOps and FastOps (gpt2_cpu.h) are the CPU's. Each op does what its CPU
// twin does and nothing else: it launches its kernels itself (they are in the .cuh file named
// above it, as `<op>_kernel` or the pieces of the op's work) or hands its matrix product to
// cuBLAS (cublasGemmEx) or cuBLASLt (cublasLtMatmul). So from train_step a kernel is four calls
// away: model.backward → Gpt2::step_backward → ops.layernorm_backward_residual →
// layernorm_backward_kernel (README "Reading the code").
//
// A product with a bias, GELU or bias-gradient epilogue runs, by a plain `if` over the run's
// choice `fused` (cuda/fused_products.h), as one cuBLASLt product with that epilogue or as the
// plain cuBLAS product and the project's kernel; a product cuBLASLt refuses (said once on stderr
// per kind of product) runs plain too.
//
// Like the kernel files it defines kernels and host functions: each program includes it in
// exactly one translation unit (gpt2.cu, bench/bench_gpu_backend.cu, or a test that includes one of
// them or this file).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/fused_products.h"
#include "diagnostics.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "model.h"
#include "residual.cuh"
#include "stats.cuh"

// The CUDA ops as the model calls them: the kernels on DeviceArray buffers, activations in Act,
// the residual stream, statistics, losses and parameter gradients in fp32. The object owns the
// stream every op runs on, the cuBLAS and cuBLASLt handles (gpu::Blas) and the scratch memory
// the kernels need between and within ops. Built while device memory is being counted
// (cuda/cuda_common.cuh), it only counts: no stream, no handle, nothing zeroed (launching()).
template <typename Activation>
class CudaOps {
public:
    using Act = Activation;
    using Acc = float;
    template <class U>
    using Array = DeviceArray<U>;
    static size_t attention_saved_size(int B, int T, int NH) { return gpu::attention_saved_size(B, T, NH); }

    cudaStream_t stream = nullptr;
    std::unique_ptr<gpu::Blas> blas;      // cuBLAS and cuBLASLt on `stream`
    FusedKinds fused = EVERY_KIND_FUSED;  // the kinds of product run fused (the backend's choice)
    gpu::AdamWTable adamw_segments;       // the parameter tensors, each with its weight decay or none

    CudaOps(const ModelConfig& cfg, int B, int T)
        : adamw_segments(gpu::adamw_table(cfg)), attention_delta(gpu::attention_saved_size(B, T, cfg.NH)),
          token_order(B * T, cfg.C),
          partial(std::max((size_t)MAX_ROW_CHUNKS * 4 * cfg.C, gpu::layernorm_backward_scratch(cfg.C))),
          norm_partial(gpu::SUMSQ_MAX_BLOCKS), stats_scratch(gpu::stream_statistics_scratch(B * T, cfg.C)),
          diag_scratch(std::max<size_t>(gpu::diagnostics_scratch(B, T, cfg.NH), gpu::SUMSQ_MAX_BLOCKS)),
          blas_workspace(gpu::Blas::LT_WORKSPACE_BYTES) {
        if (!launching()) return;
        cudaCheck(cudaStreamCreate(&stream));
        blas = std::make_unique<gpu::Blas>(stream, blas_workspace.data(), blas_workspace.size());
    }
    ~CudaOps() {
        blas.reset();
        if (stream) cudaStreamDestroy(stream);
    }
    CudaOps(const CudaOps&) = delete;
    CudaOps& operator=(const CudaOps&) = delete;

    // Whether there is a device behind the buffers: not while device memory is only counted.
    static bool launching() { return !counting_device_memory(); }

    // ---- buffers and copies -------------------------------------------------------------------
    // The buffers the model allocates next count under `category`.
    void memory_category(MemoryCategory category) { device_ledger().category = category; }
    template <class U>
    Array<U> alloc(size_t n) {  // zero-filled
        Array<U> a(n);
        if (launching()) cudaCheck(cudaMemsetAsync(a.data(), 0, n * sizeof(U), stream));
        return a;
    }
    template <class U>
    void zero(Array<U>& a) {
        cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(U), stream));
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, stream));
    }
    // Waits until every op so far has run on the device.
    void finish() {
        if (launching()) cudaCheck(cudaStreamSynchronize(stream));
    }
    // Uploads the batch.
    void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        tokens.upload(host_tokens, stream);
        targets.upload(host_targets, stream);
    }

    // dst (n) = src rounded to Act (the bf16 weights from params, a matrix product's input from
    // the stream): convert_kernel (cuda/cuda_common.cuh).
    void convert(Act* dst, const float* src, size_t n) {
        if (n == 0) return;
        const size_t blocks = ceil_div(ceil_div(n, convert_pack_size<Act, float>()), 256);
        if (narrow_index(n)) convert_kernel<Act, float, unsigned><<<blocks, 256, 0, stream>>>(dst, src, (unsigned)n);
        else convert_kernel<Act, float, size_t><<<blocks, 256, 0, stream>>>(dst, src, n);
        cudaCheck(cudaGetLastError());
    }

    // The mean of the per-position losses (summed on the host in double); the L2 norm of a
    // buffer (the gradient norm), from sum_of_squares.
    float mean(const Array<float>& losses) {
        std::vector<float> host(losses.size());
        losses.download(host.data(), stream);
        double total = 0;
        for (float l : host) total += l;
        return (float)(total / losses.size());
    }
    template <class U>
    double norm(const Array<U>& a) {
        return std::sqrt(sum_of_squares(a.data(), a.size(), norm_partial.data()));
    }

    // ---- encoder.cuh: the embedding -------------------------------------------------------------
    // out (B,T,C) = wte[tokens] + wpe[t] (the fp32 stream X_0), in packs of pack_width<float, Act>()
    // elements of a row where C is a multiple and out, wte and wpe are aligned to their packs,
    // else element by element; 32-bit indices where the size allows.
    void encoder_forward(float* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
        using gpu::encoder_forward_kernel;
        const size_t n = (size_t)B * T * C;
        if (n == 0) return;
        constexpr int K = pack_width<float, Act>();
        const bool packed = rows_in_packs<K>(C, out, wte, wpe);
        const size_t blocks = ceil_div(ceil_div(n, packed ? K : 1), 256);
        const unsigned n32 = (unsigned)n, T32 = (unsigned)T, C32 = (unsigned)C;
        const size_t T64 = T, C64 = C;
        if (packed && narrow_index(n))
            encoder_forward_kernel<K, float, Act, unsigned><<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, n32, T32, C32);
        else if (packed)
            encoder_forward_kernel<K, float, Act, size_t><<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, n, T64, C64);
        else if (narrow_index(n))
            encoder_forward_kernel<1, float, Act, unsigned><<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, n32, T32, C32);
        else
            encoder_forward_kernel<1, float, Act, size_t><<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, n, T64, C64);
        cudaCheck(cudaGetLastError());
    }
    // dwpe (maxT,C) += Σ_b dout;  dwte (Vp,C) += dout summed over the positions of each token of
    // the batch (tokens, device memory): the positions sorted by (token, position) first, a
    // bitonic sort whose steps within a tile of keys run in one launch (sort_token_tiles_kernel,
    // merge_token_tiles_kernel) and the longer ones one launch each (bitonic_step_kernel); then
    // each chunk of sorted positions sums its runs of equal tokens, and the runs that cross chunks
    // are added up in chunk order (encoder.cuh).
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
        using namespace gpu;
        wpe_backward_kernel<float><<<ceil_div((size_t)T * C, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
        cudaCheck(cudaGetLastError());
        TokenOrder& order = token_order;
        const int P = order.padded, tile = sort_tile(P), tiles = P / tile;
        unsigned long long* keys = order.keys.data();
        sort_token_tiles_kernel<<<tiles, tile / 2, 0, stream>>>(keys, tokens, order.N);
        cudaCheck(cudaGetLastError());
        for (int k = 2 * tile; k <= P; k *= 2) {
            for (int j = k / 2; j >= tile; j /= 2) {
                bitonic_step_kernel<<<ceil_div(P, 256), 256, 0, stream>>>(keys, j, k, P);
                cudaCheck(cudaGetLastError());
            }
            merge_token_tiles_kernel<<<tiles, tile / 2, 0, stream>>>(keys, k);
            cudaCheck(cudaGetLastError());
        }
        const dim3 grid((unsigned)order.chunks, (unsigned)ceil_div(C, 256));
        wte_chunk_sums_kernel<float><<<grid, 256, 0, stream>>>(dwte, order.heads.data(), order.tails.data(), dout, keys,
                                                               B * T, C);
        cudaCheck(cudaGetLastError());
        wte_run_sums_kernel<<<grid, 256, 0, stream>>>(dwte, order.heads.data(), order.tails.data(), keys, B * T, C);
        cudaCheck(cudaGetLastError());
    }

    // ---- layernorm.cuh: LayerNorm, and its fusions with the residual step -----------------------
    // A LayerNorm's input, output and their gradients are the stream's type (float) or the
    // activations', whichever the model hands it (I, O, D, G below). Each kernel moves packs of
    // pack_width<...>() elements of a row where C and every pointer allow, else single elements.

    // out (N,C), mean (N), rstd (N) = LayerNorm of x (N,C) with w, b (C): one warp per row.
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const Act* w, const Act* b, int N, int C) {
        using gpu::layernorm_forward_kernel;
        constexpr int K = pack_width<O, I, Act>();
        const int blocks = ceil_div(N, WARPS_PER_BLOCK), threads = WARPS_PER_BLOCK * WARP_SIZE;
        I* no_sum = nullptr;
        const I* no_f = nullptr;
        if (rows_in_packs<K>(C, out, x, w, b))
            layernorm_forward_kernel<false, K, O, I, I, Act><<<blocks, threads, 0, stream>>>(out, mean, rstd, no_sum, x,
                                                                                           no_f, 0.0f, w, b, N, C);
        else
            layernorm_forward_kernel<false, 1, O, I, I, Act><<<blocks, threads, 0, stream>>>(out, mean, rstd, no_sum, x,
                                                                                           no_f, 0.0f, w, b, N, C);
        cudaCheck(cudaGetLastError());
    }
    // s (N,C) = x + Δt·f, then out = LayerNorm(s), in one kernel: s is stored on the way and not
    // read back from memory. The same values as residual_forward followed by layernorm_forward.
    template <class O>
    void residual_layernorm_forward(float* s, O* out, float* mean, float* rstd, const float* x, const Act* f,
                                    float dt, const Act* w, const Act* b, int N, int C) {
        using gpu::layernorm_forward_kernel;
        constexpr int K = pack_width<O, float, Act, Act>();
        const int blocks = ceil_div(N, WARPS_PER_BLOCK), threads = WARPS_PER_BLOCK * WARP_SIZE;
        if (rows_in_packs<K>(C, out, s, x, f, w, b))
            layernorm_forward_kernel<true, K, O, float, Act, Act><<<blocks, threads, 0, stream>>>(out, mean, rstd, s, x,
                                                                                                f, dt, w, b, N, C);
        else
            layernorm_forward_kernel<true, 1, O, float, Act, Act><<<blocks, threads, 0, stream>>>(out, mean, rstd, s, x,
                                                                                                f, dt, w, b, N, C);
        cudaCheck(cudaGetLastError());
    }
    // dx (N,C) += LayerNorm'(dout) (= with GradOut::Write), dw, db (C) += ... given the forward's
    // x, w, mean, rstd: one pass over the rows for dx and each chunk's partial column sums
    // (layernorm_backward_kernel), then one launch that adds them into dw and db
    // (layernorm_weight_gradients_kernel). Above the default 48 KiB of dynamic shared memory the
    // pass's limit is raised first.
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const Act* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out) {
        using gpu::layernorm_weight_gradients_kernel;
        using gpu::layernorm_backward_kernel;
        constexpr int K = pack_width<D, G, I, Act, G>();
        const int blocks = gpu::layernorm_backward_blocks(N), threads = gpu::layernorm_backward_warps(C) * WARP_SIZE;
        const size_t shared = gpu::layernorm_backward_shared_bytes(C);
        G* no_df = nullptr;
        if (shared > (48 << 10)) {  // both variants' limit
            cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<K, D, G, I, Act, G>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
            cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<1, D, G, I, Act, G>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
        }
        const bool add = dx_out == GradOut::Add;
        if (rows_in_packs<K>(C, dx, no_df, dout, x, w))
            layernorm_backward_kernel<K, D, G, I, Act, G><<<blocks, threads, shared, stream>>>(
                dx, no_df, 0.0f, partial.data(), dout, x, w, mean, rstd, N, C, add);
        else
            layernorm_backward_kernel<1, D, G, I, Act, G><<<blocks, threads, shared, stream>>>(
                dx, no_df, 0.0f, partial.data(), dout, x, w, mean, rstd, N, C, add);
        cudaCheck(cudaGetLastError());
        layernorm_weight_gradients_kernel<<<column_tiles(2 * C, 1), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
            dw, db, partial.data(), blocks, C);
        cudaCheck(cudaGetLastError());
    }
    // layernorm_backward, and df (N,C) = Δt·dx (written) in the same pass: when dx is the
    // gradient of a residual sum s = x + Δt·f, the step's backward for f (docs/block.md §2)
    // without another pass over the stream gradient.
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, Act* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const Act* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out) {
        using gpu::layernorm_weight_gradients_kernel;
        using gpu::layernorm_backward_kernel;
        constexpr int K = pack_width<D, G, I, Act, Act>();
        const int blocks = gpu::layernorm_backward_blocks(N), threads = gpu::layernorm_backward_warps(C) * WARP_SIZE;
        const size_t shared = gpu::layernorm_backward_shared_bytes(C);
        if (shared > (48 << 10)) {  // both variants' limit
            cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<K, D, G, I, Act, Act>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
            cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<1, D, G, I, Act, Act>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
        }
        const bool add = dx_out == GradOut::Add;
        if (rows_in_packs<K>(C, dx, df, dout, x, w))
            layernorm_backward_kernel<K, D, G, I, Act, Act><<<blocks, threads, shared, stream>>>(
                dx, df, dt, partial.data(), dout, x, w, mean, rstd, N, C, add);
        else
            layernorm_backward_kernel<1, D, G, I, Act, Act><<<blocks, threads, shared, stream>>>(
                dx, df, dt, partial.data(), dout, x, w, mean, rstd, N, C, add);
        cudaCheck(cudaGetLastError());
        layernorm_weight_gradients_kernel<<<column_tiles(2 * C, 1), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
            dw, db, partial.data(), blocks, C);
        cudaCheck(cudaGetLastError());
    }

    // ---- matmul.cuh: the linear layers, on cuBLAS and cuBLASLt ----------------------------------
    // Row-major products on column-major libraries: cuBLAS reads a row-major X (N,K) as the
    // column-major Xᵀ, so out = inp·wᵀ is asked for as outᵀ = w·inpᵀ, w before inp and the sizes
    // swapped (matmul.cuh). Every product multiplies in fp32 (CUBLAS_COMPUTE_32F).

    // out (N,OC) = inp (N,IC)·wᵀ + bias, w (OC,IC); bias may be null (the tied lm head has none).
    // Where the bias kind is fused: one cuBLASLt product with the bias as its epilogue; else
    // (or where cuBLASLt refuses it) the product, then add_bias_kernel, in packs where OC and the
    // buffers allow.
    void matmul_forward(Act* out, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        const float one = 1.0f, zero = 0.0f;
        bool ran_fused = false;
        if (bias && fused[Epilogue::Bias]) {
            const gpu::LtMatmul<Act, Act> lt(*blas, Epilogue::Bias, false, true, N, OC, IC, inp, IC, w, IC, 0.0f, out,
                                             OC, (void*)bias, nullptr);
            ran_fused = lt.algo && blas->took(lt.kind, cublasLtMatmul(blas->lt, lt.desc, &one, lt.A, lt.Adesc, lt.B,
                                                                     lt.Bdesc, &lt.beta, lt.C, lt.Cdesc, lt.C,
                                                                     lt.Cdesc, lt.algo, blas->workspace,
                                                                     blas->workspace_bytes, stream));
        }
        if (ran_fused) return;
        cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, ACT_TYPE, IC, inp,
                                 ACT_TYPE, IC, &zero, out, ACT_TYPE, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (!bias) return;
        using gpu::add_bias_kernel;  // out += bias
        const size_t n = (size_t)N * OC;
        if (n == 0) return;
        constexpr int K = Pack16<Act>::size;
        const bool packed = rows_in_packs<K>(OC, out, bias);
        const size_t blocks = ceil_div(ceil_div(n, packed ? K : 1), 256);
        const unsigned n32 = (unsigned)n, OC32 = (unsigned)OC;
        if (packed && narrow_index(n))
            add_bias_kernel<K, Act, unsigned><<<blocks, 256, 0, stream>>>(out, bias, n32, OC32);
        else if (packed)
            add_bias_kernel<K, Act, size_t><<<blocks, 256, 0, stream>>>(out, bias, n, (size_t)OC);
        else if (narrow_index(n))
            add_bias_kernel<1, Act, unsigned><<<blocks, 256, 0, stream>>>(out, bias, n32, OC32);
        else
            add_bias_kernel<1, Act, size_t><<<blocks, 256, 0, stream>>>(out, bias, n, (size_t)OC);
        cudaCheck(cudaGetLastError());
    }
    // dinp (N,IC) += dout (N,OC)·w (GradOut::Write: =, the product's beta 0);  dw (OC,IC) +=
    // doutᵀ·inp;  dbias (OC) += Σ_n dout (skipped when null). dinp is Act, or float where it is
    // the stream's gradient (a module without an input LayerNorm). The bias gradient: where that
    // kind is fused, the dw product's cuBLASLt epilogue sums dout's columns into `partial` and
    // add_column_partials_kernel adds them to dbias; else (or where cuBLASLt refuses) the plain
    // dw product, then the column sums in two stages (bias_backward_kernel per chunk of rows,
    // add_column_partials_kernel over the chunks; cuda/cuda_common.cuh).
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w, int N, int IC,
                         int OC, GradOut dinp_out) {
        using gpu::bias_backward_kernel;
        const float one = 1.0f, beta = dinp_out == GradOut::Write ? 0.0f : 1.0f;
        cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, ACT_TYPE, IC, dout,
                                 ACT_TYPE, OC, &beta, dinp, cuda_data_type<D>(), IC, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
        bool ran_fused = false;  // whether the dw product's epilogue summed dout's columns
        if (dbias && fused[Epilogue::BiasGrad]) {
            const gpu::LtMatmul<Act, float> lt(*blas, Epilogue::BiasGrad, true, false, OC, IC, N, dout, OC, inp, IC,
                                               1.0f, dw, IC, partial.data(), nullptr);
            ran_fused = lt.algo && blas->took(lt.kind, cublasLtMatmul(blas->lt, lt.desc, &one, lt.A, lt.Adesc, lt.B,
                                                                     lt.Bdesc, &lt.beta, lt.C, lt.Cdesc, lt.C,
                                                                     lt.Cdesc, lt.algo, blas->workspace,
                                                                     blas->workspace_bytes, stream));
        }
        if (!ran_fused)
            cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, ACT_TYPE, IC, dout,
                                     ACT_TYPE, OC, &one, dw, CUDA_R_32F, IC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (!dbias) return;
        int rows_of_partials = 1;
        if (!ran_fused) {
            rows_of_partials = row_chunks(N);
            bias_backward_kernel<Act><<<column_tiles(OC, rows_of_partials), dim3(TILE_COLS, TILE_ROWS), 0,
                                             stream>>>(partial.data(), dout, N, OC);
            cudaCheck(cudaGetLastError());
        }
        add_column_partials_kernel<<<ceil_div(OC, TILE_COLS), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
            dbias, partial.data(), rows_of_partials, OC, OC);
        cudaCheck(cudaGetLastError());
    }

    // ---- attention.cuh, attention_mma.cuh: causal self-attention --------------------------------
    // out (B,T,C) and lse (attention_saved_size(B,T,NH) floats) from qkv (B,T,3C): the tensor-core
    // kernel of the head size where there is one (mma_head_size: bf16, head size 64, 8, 12 or 16,
    // pointers aligned for its loads), else the exact kernel, one warp per row.
    void attention_forward(Act* out, float* lse, const Act* qkv, int B, int T, int C, int NH) {
        using namespace gpu;
        const int hs = mma_head_size<Act>(C, NH, out, qkv);
        if constexpr (std::is_same<Act, bf16>::value) {
            const dim3 tiles = attention_tiles(B, T, NH);
            const int threads = ATTENTION_WARPS * WARP_SIZE;
            switch (hs) {
                case 64: attention_forward_mma_kernel<64><<<tiles, threads, 0, stream>>>(out, lse, qkv, T, C, NH); break;
                case 8: attention_forward_mma_kernel<8><<<tiles, threads, 0, stream>>>(out, lse, qkv, T, C, NH); break;
                case 12: attention_forward_mma_kernel<12><<<tiles, threads, 0, stream>>>(out, lse, qkv, T, C, NH); break;
                case 16: attention_forward_mma_kernel<16><<<tiles, threads, 0, stream>>>(out, lse, qkv, T, C, NH); break;
            }
        }
        if (hs == 0)
            attention_forward_rows_kernel<Act><<<attention_row_blocks(B, T, NH), WARPS_PER_BLOCK * WARP_SIZE, 0,
                                                 stream>>>(out, lse, qkv, B, T, C, NH);
        cudaCheck(cudaGetLastError());
    }
    // dqkv (B,T,3C) = the gradient of attention_forward given dout (B,T,C), its qkv, out and lse
    // (stored: dqkv is not read). First delta = Σ dout·out per row (attention_delta_kernel), then
    // dq, then dk and dv: with the tensor-core kernels of the head size where there are, else the
    // exact ones.
    void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out, const float* lse, int B, int T,
                            int C, int NH) {
        using namespace gpu;
        float* delta = attention_delta.data();
        const size_t blocks = attention_row_blocks(B, T, NH);
        attention_delta_kernel<Act><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(delta, dout, out, B, T, C, NH);
        cudaCheck(cudaGetLastError());
        const int hs = mma_head_size<Act>(C, NH, dqkv, dout, qkv);
        if constexpr (std::is_same<Act, bf16>::value) {
            const dim3 g = attention_tiles(B, T, NH);
            const int th = ATTENTION_WARPS * WARP_SIZE;
            switch (hs) {  // dq, then dk and dv
                case 64:
                    attention_backward_dq_mma_kernel<64><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    attention_backward_dkdv_mma_kernel<64><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    break;
                case 8:
                    attention_backward_dq_mma_kernel<8><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    attention_backward_dkdv_mma_kernel<8><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    break;
                case 12:
                    attention_backward_dq_mma_kernel<12><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    attention_backward_dkdv_mma_kernel<12><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    break;
                case 16:
                    attention_backward_dq_mma_kernel<16><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    attention_backward_dkdv_mma_kernel<16><<<g, th, 0, stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
                    break;
            }
        }
        if (hs == 0) {
            attention_backward_dq_rows_kernel<Act><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
                dqkv, dout, qkv, lse, delta, B, T, C, NH);
            attention_backward_dkdv_rows_kernel<Act><<<blocks, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
                dqkv, dout, qkv, lse, delta, B, T, C, NH);
        }
        cudaCheck(cudaGetLastError());
    }

    // ---- gelu.cuh: the MLP's fc layer with GELU, and fcproj's backward through it ----------------
    // pre (N,OC) = inp (N,IC)·wᵀ + bias;  out (N,OC) = GELU(pre). In bf16, where that kind is
    // fused: one cuBLASLt product with bias and GELU as its epilogue (GELU of the fp32 sum); else
    // (or where cuBLASLt refuses) the product, then one pass for bias and GELU of the stored pre
    // (bias_gelu_forward_kernel), in packs where OC and the buffers allow.
    void matmul_gelu_forward(Act* out, Act* pre, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        const float one = 1.0f, zero = 0.0f;
        bool ran_fused = false;
        if (fused[Epilogue::BiasGelu] && gpu::gelu_epilogue_allowed<Act>()) {
            const gpu::LtMatmul<Act, Act> lt(*blas, Epilogue::BiasGelu, false, true, N, OC, IC, inp, IC, w, IC, 0.0f,
                                             out, OC, (void*)bias, pre);
            ran_fused = lt.algo && blas->took(lt.kind, cublasLtMatmul(blas->lt, lt.desc, &one, lt.A, lt.Adesc, lt.B,
                                                                     lt.Bdesc, &lt.beta, lt.C, lt.Cdesc, lt.C,
                                                                     lt.Cdesc, lt.algo, blas->workspace,
                                                                     blas->workspace_bytes, stream));
        }
        if (ran_fused) return;
        cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, ACT_TYPE, IC, inp,
                                 ACT_TYPE, IC, &zero, pre, ACT_TYPE, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        using gpu::bias_gelu_forward_kernel;  // pre += bias, out = GELU(pre)
        const size_t n = (size_t)N * OC;
        if (n == 0) return;
        constexpr int K = Pack16<Act>::size;
        const bool packed = rows_in_packs<K>(OC, out, pre, bias);
        const size_t blocks = ceil_div(ceil_div(n, packed ? K : 1), 256);
        const unsigned n32 = (unsigned)n, OC32 = (unsigned)OC;
        if (packed && narrow_index(n))
            bias_gelu_forward_kernel<K, Act, unsigned><<<blocks, 256, 0, stream>>>(out, pre, bias, n32, OC32);
        else if (packed)
            bias_gelu_forward_kernel<K, Act, size_t><<<blocks, 256, 0, stream>>>(out, pre, bias, n, (size_t)OC);
        else if (narrow_index(n))
            bias_gelu_forward_kernel<1, Act, unsigned><<<blocks, 256, 0, stream>>>(out, pre, bias, n32, OC32);
        else
            bias_gelu_forward_kernel<1, Act, size_t><<<blocks, 256, 0, stream>>>(out, pre, bias, n, (size_t)OC);
        cudaCheck(cudaGetLastError());
    }
    // The backward of a linear layer whose input is inp = GELU(pre) (the MLP's fcproj):
    //   dpre (N,IC) = (dout·w)·GELU'(pre) (written);  dw (OC,IC) += doutᵀ·inp;  dbias (OC) += Σ_n dout.
    // dpre: in bf16, where that kind is fused, one cuBLASLt product with GELU's derivative as its
    // epilogue; else (or where cuBLASLt refuses) the product, then a pass over it
    // (gelu_backward_inplace_kernel). dw and dbias as matmul_backward makes them.
    void matmul_gelu_backward(Act* dpre, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w,
                              const Act* pre, int N, int IC, int OC) {
        using gpu::bias_backward_kernel;
        const float one = 1.0f, zero = 0.0f;
        bool ran_fused = false;
        if (fused[Epilogue::GeluGrad] && gpu::gelu_epilogue_allowed<Act>()) {
            const gpu::LtMatmul<Act, Act> lt(*blas, Epilogue::GeluGrad, false, false, N, IC, OC, dout, OC, w, IC,
                                             0.0f, dpre, IC, nullptr, pre);
            ran_fused = lt.algo && blas->took(lt.kind, cublasLtMatmul(blas->lt, lt.desc, &one, lt.A, lt.Adesc, lt.B,
                                                                     lt.Bdesc, &lt.beta, lt.C, lt.Cdesc, lt.C,
                                                                     lt.Cdesc, lt.algo, blas->workspace,
                                                                     blas->workspace_bytes, stream));
        }
        if (!ran_fused) {
            cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, ACT_TYPE, IC, dout,
                                     ACT_TYPE, OC, &zero, dpre, ACT_TYPE, IC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            using gpu::gelu_backward_inplace_kernel;  // dpre *= GELU'(pre)
            const size_t n = (size_t)N * IC;
            constexpr int K = Pack16<Act>::size;
            const bool packed = rows_in_packs<K>(IC, dpre, pre);
            const size_t blocks = ceil_div(ceil_div(n, packed ? K : 1), 256);
            if (n > 0) {
                if (packed && narrow_index(n))
                    gelu_backward_inplace_kernel<K, Act, unsigned><<<blocks, 256, 0, stream>>>(dpre, pre, (unsigned)n);
                else if (packed)
                    gelu_backward_inplace_kernel<K, Act, size_t><<<blocks, 256, 0, stream>>>(dpre, pre, n);
                else if (narrow_index(n))
                    gelu_backward_inplace_kernel<1, Act, unsigned><<<blocks, 256, 0, stream>>>(dpre, pre, (unsigned)n);
                else
                    gelu_backward_inplace_kernel<1, Act, size_t><<<blocks, 256, 0, stream>>>(dpre, pre, n);
                cudaCheck(cudaGetLastError());
            }
        }
        bool summed = false;  // whether the dw product's epilogue summed dout's columns
        if (dbias && fused[Epilogue::BiasGrad]) {
            const gpu::LtMatmul<Act, float> lt(*blas, Epilogue::BiasGrad, true, false, OC, IC, N, dout, OC, inp, IC,
                                               1.0f, dw, IC, partial.data(), nullptr);
            summed = lt.algo && blas->took(lt.kind, cublasLtMatmul(blas->lt, lt.desc, &one, lt.A, lt.Adesc, lt.B,
                                                                  lt.Bdesc, &lt.beta, lt.C, lt.Cdesc, lt.C, lt.Cdesc,
                                                                  lt.algo, blas->workspace, blas->workspace_bytes,
                                                                  stream));
        }
        if (!summed)
            cublasCheck(cublasGemmEx(blas->cublas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, ACT_TYPE, IC, dout,
                                     ACT_TYPE, OC, &one, dw, CUDA_R_32F, IC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (!dbias) return;
        int rows_of_partials = 1;
        if (!summed) {
            rows_of_partials = row_chunks(N);
            bias_backward_kernel<Act><<<column_tiles(OC, rows_of_partials), dim3(TILE_COLS, TILE_ROWS), 0,
                                             stream>>>(partial.data(), dout, N, OC);
            cudaCheck(cudaGetLastError());
        }
        add_column_partials_kernel<<<ceil_div(OC, TILE_COLS), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
            dbias, partial.data(), rows_of_partials, OC, OC);
        cudaCheck(cudaGetLastError());
    }

    // ---- residual.cuh: the residual step alone ----------------------------------------------------
    // s = x + Δt·f over n elements, where no LayerNorm reads s (the end of run_blocks_from): packed
    // where s, x and f are aligned to their packs.
    void residual_forward(float* s, const float* x, const Act* f, float dt, size_t n) {
        using gpu::residual_forward_kernel;
        constexpr int E = pack_width<float, Act>();
        const bool packed = aligned_to_packs<E>(s, x, f);
        const size_t threads = packed ? ceil_div(n, (size_t)E) : n;
        if (narrow_index(n))
            residual_forward_kernel<E, float, Act, unsigned><<<ceil_div(threads, 256), 256, 0, stream>>>(
                s, x, f, dt, (unsigned)n, packed);
        else
            residual_forward_kernel<E, float, Act, size_t><<<ceil_div(threads, 256), 256, 0, stream>>>(s, x, f, dt, n,
                                                                                                       packed);
        cudaCheck(cudaGetLastError());
    }

    // ---- loss.cuh: softmax and cross-entropy -------------------------------------------------------
    // losses (N) from logits (N,Vp) and targets (N), one warp per row (evaluation: the logits
    // are kept).
    void crossentropy_forward(float* losses, const Act* logits, const int32_t* targets, int N, int V, int Vp) {
        using gpu::crossentropy_forward_kernel;
        if (N == 0) return;
        constexpr int K = Pack16<Act>::size;
        const int blocks = ceil_div(N, WARPS_PER_BLOCK), threads = WARPS_PER_BLOCK * WARP_SIZE;
        if (rows_in_packs<K>(Vp, logits))
            crossentropy_forward_kernel<K, Act><<<blocks, threads, 0, stream>>>(losses, logits, targets, N, V, Vp);
        else
            crossentropy_forward_kernel<1, Act><<<blocks, threads, 0, stream>>>(losses, logits, targets, N, V, Vp);
        cudaCheck(cudaGetLastError());
    }
    // losses (N) from logits (N,Vp) and targets (N), and logits ← d(Σ_n dloss·losses[n])/dlogits,
    // in one pass: one block per row, the row kept in shared memory when V·sizeof(Act) fits.
    void crossentropy_forward_backward(float* losses, Act* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        using gpu::crossentropy_forward_backward_kernel;
        if (N == 0) return;
        const size_t row_bytes = (size_t)V * sizeof(Act);
        const bool staged = row_bytes <= gpu::crossentropy_shared_limit();
        const size_t shared = staged ? row_bytes : 0;
        constexpr int K = Pack16<Act>::size;
        if (shared > 0) {  // both variants' limit
            cudaCheck(cudaFuncSetAttribute(crossentropy_forward_backward_kernel<K, Act>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
            cudaCheck(cudaFuncSetAttribute(crossentropy_forward_backward_kernel<1, Act>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
        }
        if (rows_in_packs<K>(Vp, logits))
            crossentropy_forward_backward_kernel<K, Act><<<N, gpu::CE_THREADS, shared, stream>>>(
                losses, logits, targets, dloss, V, Vp, staged);
        else
            crossentropy_forward_backward_kernel<1, Act><<<N, gpu::CE_THREADS, shared, stream>>>(
                losses, logits, targets, dloss, V, Vp, staged);
        cudaCheck(cudaGetLastError());
    }

    // ---- adamw.cuh: the optimiser ---------------------------------------------------------------
    // AdamW at step t (1-based) over [lo, hi) of the parameters (CudaBackend::update) in one
    // launch of ADAMW_PACK parameters a thread, refreshing their copy in Act (null: none); m and v
    // hold that range only. Weight decay on the segments of adamw_segments that decay.
    void adamw_update(float* params, Act* copy, const float* grads, float* m, float* v, size_t lo, size_t hi,
                      const AdamWHyper& h, int t, double grad_scale) {
        using gpu::adamw_kernel;
        if (hi <= lo) return;
        const gpu::AdamWStep step{(float)h.lr, (float)h.beta1, (float)h.beta2, (float)h.eps, (float)h.weight_decay,
                                  (float)(1.0 - std::pow(h.beta1, t)), (float)(1.0 - std::pow(h.beta2, t)),
                                  (float)grad_scale};
        const size_t blocks = ceil_div(ceil_div(hi - lo, gpu::ADAMW_PACK), 256);
        if (narrow_index(hi))
            adamw_kernel<Act, unsigned><<<blocks, 256, 0, stream>>>(params, copy, grads, m, v, (unsigned)lo,
                                                                    (unsigned)hi, adamw_segments, step);
        else
            adamw_kernel<Act, size_t><<<blocks, 256, 0, stream>>>(params, copy, grads, m, v, lo, hi, adamw_segments, step);
        cudaCheck(cudaGetLastError());
    }

    // ---- adamw.cuh, stats.cuh, diagnostics.cuh: the reductions of the diagnostics ----------------
    // (diagnostics.h's on the CPU); each waits for its result and sums it up on the host in double.

    // Σ x² over n elements: per-block fp32 sums (sum_of_squares_kernel, a fixed grid for a given
    // n), added in order on the host. `scratch`: SUMSQ_MAX_BLOCKS floats (the diagnostics' own
    // unless given).
    template <class U>
    double sum_of_squares(const U* x, size_t n, float* scratch = nullptr) {
        using gpu::sum_of_squares_kernel;
        float* partials = scratch ? scratch : diag_scratch.data();
        const int blocks = gpu::sum_of_squares_blocks(n);
        sum_of_squares_kernel<U><<<blocks, gpu::SUMSQ_THREADS, 0, stream>>>(partials, x, n);
        cudaCheck(cudaGetLastError());
        std::vector<float> host(blocks);
        cudaCheck(cudaMemcpyAsync(host.data(), partials, blocks * sizeof(float), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaStreamSynchronize(stream));
        double total = 0.0;
        for (float s : host) total += s;
        return total;
    }
    // mean_abs, entry_var and data_var of the stream x (N,C) (docs/statistics.md §1): per row
    // Σ|x| and its variance (row_stats_kernel), per column the sum and then Σ (x − mean)²
    // (column_sum_kernel, column_sq_dev_kernel, each added up over its row chunks).
    StreamStats stream_statistics(const float* x, int N, int C) {
        using namespace gpu;
        float* abs_sum = stats_scratch.data();
        float* row_var = abs_sum + N;
        float* col_sum = row_var + N;
        float* col_sq_dev = col_sum + C;
        float* partials = col_sq_dev + C;
        const int rows_grid = (int)ceil_div(N, WARPS_PER_BLOCK), chunks = row_chunks(N);
        const dim3 tiles = column_tiles(C, chunks), tile(TILE_COLS, TILE_ROWS);
        row_stats_kernel<float><<<rows_grid, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(abs_sum, row_var, x, N, C);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemsetAsync(col_sum, 0, 2 * C * sizeof(float), stream));
        column_sum_kernel<float><<<tiles, tile, 0, stream>>>(partials, x, N, C);
        cudaCheck(cudaGetLastError());
        add_column_partials_kernel<<<ceil_div(C, TILE_COLS), tile, 0, stream>>>(col_sum, partials, chunks, C, C);
        cudaCheck(cudaGetLastError());
        column_sq_dev_kernel<float><<<tiles, tile, 0, stream>>>(partials, x, col_sum, N, C);
        cudaCheck(cudaGetLastError());
        add_column_partials_kernel<<<ceil_div(C, TILE_COLS), tile, 0, stream>>>(col_sq_dev, partials, chunks, C, C);
        cudaCheck(cudaGetLastError());

        std::vector<float> host(2 * (size_t)N + 2 * C);
        cudaCheck(cudaMemcpyAsync(host.data(), abs_sum, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaStreamSynchronize(stream));
        double abs_total = 0, row_var_total = 0, col_var_total = 0;
        for (int n = 0; n < N; n++) {
            abs_total += host[n];
            row_var_total += host[N + n];
        }
        for (int c = 0; c < C; c++) col_var_total += host[2 * N + C + c];
        StreamStats st;
        st.mean_abs = abs_total / ((double)N * C);
        st.entry_var = row_var_total / N;
        st.data_var = col_var_total / N / C;
        return st;
    }
    // The largest pre-softmax attention logit of one block from its qkv (B,T,3C): one warp per
    // (b, h, t) row (attention_logit_row_max_kernel), the rows' maxima compared on the host.
    double attention_logit_max(const Act* qkv, int B, int T, int C, int NH) {
        using gpu::attention_logit_row_max_kernel;
        const int rows = B * NH * T;
        attention_logit_row_max_kernel<Act><<<ceil_div(rows, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0,
                                                   stream>>>(diag_scratch.data(), qkv, B, T, C, NH,
                                                             1.0f / std::sqrt((float)(C / NH)));
        cudaCheck(cudaGetLastError());
        std::vector<float> host(rows);
        cudaCheck(cudaMemcpyAsync(host.data(), diag_scratch.data(), rows * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
        cudaCheck(cudaStreamSynchronize(stream));
        return *std::max_element(host.begin(), host.end());
    }
    // The largest logit and the mean log-partition of logits (N,Vp) over the V real tokens: one
    // warp per row (logit_row_stats_kernel), the rows reduced on the host.
    LogitStats logit_statistics(const Act* logits, int N, int V, int Vp) {
        using gpu::logit_row_stats_kernel;
        float* scratch = diag_scratch.data();
        logit_row_stats_kernel<Act><<<ceil_div(N, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
            scratch, scratch + N, logits, N, V, Vp);
        cudaCheck(cudaGetLastError());
        std::vector<float> host(2 * (size_t)N);
        cudaCheck(cudaMemcpyAsync(host.data(), scratch, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaStreamSynchronize(stream));
        LogitStats st;
        st.logit_max = *std::max_element(host.begin(), host.begin() + N);
        double lse_sum = 0;
        for (int n = 0; n < N; n++) lse_sum += host[N + n];
        st.log_z_mean = lse_sum / N;
        return st;
    }

private:
    static constexpr cudaDataType_t ACT_TYPE = cuda_data_type<Act>();  // cuBLAS's name for Act

    // The scratch the kernels need, in the order it is allocated.
    DeviceArray<float> attention_delta;  // (B,NH,T) Σ dout·out per row, for attention_backward

public:
    gpu::TokenOrder token_order;  // the batch's positions sorted by token, for the wte gradient (tests read it)

private:
    DeviceArray<float> partial;         // column-sum partials: MAX_ROW_CHUNKS·4C, or LayerNorm's if more
    DeviceArray<float> norm_partial;    // sum-of-squares partials of norm
    DeviceArray<float> stats_scratch;   // for stream_statistics
    DeviceArray<float> diag_scratch;    // the other diagnostics: sums of squares, per-row maxima
    DeviceArray<unsigned char> blas_workspace;  // cuBLASLt's, for the fused products
};
