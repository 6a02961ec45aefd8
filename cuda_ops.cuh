// cuda_ops.cuh — the CUDA op set: the ops the model of gpt2.h calls (CudaModel<T> in gpt2.cu), as
// cpu_ops.h and cpu_fast_ops.h are the CPU's. Each op launches its kernel (the .cuh files) or its
// matrix product (cuBLAS, cuBLASLt) in a few lines; a matrix product with its bias, GELU or bias
// gradient is one cuBLASLt product with that epilogue where that kind runs fused (`fused`,
// chosen at start-up: cuda/fused_products.h) and cuBLASLt has an algorithm for it, else the
// product and a kernel of its own, written out in the op. The kernel tests (test/) call these
// ops as the model does. At the end, time_fused_products: each fusable product timed both ways.
//
// Like the kernel files it defines kernels and host functions: each program includes it in
// exactly one translation unit (gpt2.cu, or a test that includes gpt2.cu or this file).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/fused_products.h"
#include "diagnostics.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "bench/kernel_costs.h"
#include "layernorm.cuh"
#include "loss.cuh"
#include "matmul.cuh"
#include "model.h"
#include "residual.cuh"
#include "stats.cuh"

// What watches the ops of a training step for ./bench_gpu: bench/step_timing.cuh's Timer records CUDA
// events around each op, bench/step_traffic.cuh's Recorder notes the launches each declares (bench/traffic.h).
// CudaOps tells it an op's name ("qkv matmul fwd") and declared launches before launching them,
// and the op's end after. Transfers between host and device and the diagnostics are not told.
struct OpObserver {
    virtual void begin(const std::string& op, Launches launches) = 0;
    virtual void end() = 0;

protected:
    ~OpObserver() = default;
};

// The CUDA ops as the model calls them: the kernels on DeviceArray buffers, activations in Act,
// the residual stream, statistics, losses and parameter gradients in fp32. The object owns the
// stream every op runs on, the cuBLAS and cuBLASLt handles (gpu::Blas) and the scratch memory
// the kernels need between and within ops. Built while device memory is being counted
// (cuda/cuda_common.cuh), it only counts: no stream, no handle, no launch (launching()).
//
// Every op is the same few lines: its name and declared launches (the launcher's `*_traffic`
// function) to the observer, if there is one; the launcher of the .cuh file, unless device
// memory is only being counted; the op's end to the observer.
template <typename Activation>
class CudaOps {
public:
    using Act = Activation;
    using Acc = float;
    template <class U>
    using Array = DeviceArray<U>;
    static size_t attention_saved_size(int B, int T, int NH) { return gpu::attention_saved_size(B, T, NH); }

    cudaStream_t stream = nullptr;
    std::unique_ptr<gpu::Blas> blas;   // cuBLAS and cuBLASLt on `stream`
    OpObserver* observer = nullptr;    // null in training
    FusedKinds fused = EVERY_KIND_FUSED;  // the kinds of product asked for fused (the backend's choice)

    CudaOps(const ModelConfig& cfg, int B, int T)
        : cfg(cfg), attention_delta(gpu::attention_saved_size(B, T, cfg.NH)), token_order(B * T, cfg.C),
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

    // Whether ops run on the device: not while device memory is only counted (bench/step_traffic.cuh).
    static bool launching() { return !counting_device_memory(); }

    // Buffers and copies. The buffers the model allocates next count under `category`.
    void memory_category(MemoryCategory category) { device_ledger().category = category; }
    template <class U>
    Array<U> alloc(size_t n) {  // zero-filled
        Array<U> a(n);
        if (launching()) cudaCheck(cudaMemsetAsync(a.data(), 0, n * sizeof(U), stream));
        return a;
    }
    template <class U>
    void zero(Array<U>& a) {
        if (observer) observer->begin("memset (gradients)", {{"memset", 0, (double)a.size() * sizeof(U)}});
        if (launching()) cudaCheck(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(U), stream));
        end_op();
    }
    template <class U>
    void copy(U* dst, const U* src, size_t n) {
        if (observer) observer->begin("copy", {{"copy", (double)n * sizeof(U), (double)n * sizeof(U)}});
        if (launching()) cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, stream));
        end_op();
    }
    // Waits until every op so far has run on the device.
    void finish() {
        if (launching()) cudaCheck(cudaStreamSynchronize(stream));
    }
    // dst = src rounded to T (the bf16 weights from params, a matrix product's input from the stream).
    void convert(Act* dst, const float* src, size_t n) {
        if (observer) observer->begin("convert", {convert_traffic<Act, float>(n)});
        if (launching()) ::convert(dst, src, n, stream);
        end_op();
    }
    // Uploads the batch.
    void load_batch(Array<int32_t>& tokens, Array<int32_t>& targets, const int32_t* host_tokens,
                    const int32_t* host_targets) {
        if (launching()) {
            tokens.upload(host_tokens, stream);
            targets.upload(host_targets, stream);
        }
        host_batch.assign(host_tokens, host_tokens + tokens.size());
    }

    // The mean of the per-position losses (summed on the host in double); the L2 norm of a buffer.
    float mean(const Array<float>& losses) {
        double total = 0;
        if (launching()) {
            std::vector<float> host(losses.size());
            losses.download(host.data(), stream);
            for (float l : host) total += l;
        }
        return (float)(total / losses.size());
    }
    template <class U>
    double norm(const Array<U>& a) {
        double sum = 0;
        if (observer) observer->begin("grad norm", {gpu::sum_of_squares_traffic<U>(a.size())});
        if (launching()) sum = gpu::sum_of_squares(a.data(), a.size(), norm_partial.data(), stream);
        end_op();
        return std::sqrt(sum);
    }

    // The model's ops (the .cuh files). The stream (X_0, residual sums, the after-add LayerNorm's
    // output and their gradients) is float; a LayerNorm's input, output and their gradients are
    // the stream's or the activations' type, whichever the model hands it (I, O, D, G below).
    void encoder_forward(float* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
        if (observer) observer->begin("encoder fwd", {gpu::encoder_forward_traffic<float, Act>(B, T, C)});
        if (launching()) gpu::encoder_forward(out, tokens, wte, wpe, B, T, C, stream);
        end_op();
    }
    // tokens: the batch of the last load_batch (device memory), sorted by token on the device.
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
        if (observer)
            observer->begin("encoder bwd", gpu::encoder_backward_traffic<float>(
                                                B, T, C, gpu::token_runs(host_batch.data(), B * T)));
        if (launching()) gpu::encoder_backward(dwte, dwpe, dout, tokens, token_order, B, T, C, stream);
        end_op();
    }
    template <class O, class I>
    void layernorm_forward(O* out, float* mean, float* rstd, const I* x, const Act* w, const Act* b, int N, int C) {
        if (observer) observer->begin("layernorm fwd", {gpu::layernorm_forward_traffic<O, I, Act>(N, C)});
        if (launching()) gpu::layernorm_forward(out, mean, rstd, x, w, b, N, C, stream);
        end_op();
    }
    // s (N,C) = x + Δt·f, then out = LayerNorm(s), in one kernel: s is not read back from memory.
    template <class O>
    void residual_layernorm_forward(float* s, O* out, float* mean, float* rstd, const float* x, const Act* f,
                                    float dt, const Act* w, const Act* b, int N, int C) {
        if (observer)
            observer->begin("residual + layernorm fwd",
                            {gpu::residual_layernorm_forward_traffic<float, Act, O, Act>(N, C)});
        if (launching()) gpu::residual_layernorm_forward(s, out, mean, rstd, x, f, dt, w, b, N, C, stream);
        end_op();
    }
    template <class D, class G, class I>
    void layernorm_backward(D* dx, float* dw, float* db, const G* dout, const I* x, const Act* w, const float* mean,
                            const float* rstd, int N, int C, GradOut dx_out) {
        if (observer) observer->begin("layernorm bwd", gpu::layernorm_backward_traffic<D, G, I, Act>(N, C, dx_out));
        if (launching())
            gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream, dx_out);
        end_op();
    }
    // layernorm_backward, and df (N,C) = Δt·dx (written) in the same pass: dx is not read back.
    template <class D, class G, class I>
    void layernorm_backward_residual(D* dx, Act* df, float dt, float* dw, float* db, const G* dout, const I* x,
                                     const Act* w, const float* mean, const float* rstd, int N, int C,
                                     GradOut dx_out) {
        if (observer)
            observer->begin("layernorm + residual bwd",
                            gpu::layernorm_backward_residual_traffic<D, Act, G, I, Act>(N, C, dx_out));
        if (launching())
            gpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, partial.data(), stream, dx_out, df, dt);
        end_op();
    }
    // out (N,OC) = inp (N,IC)·wᵀ + bias, w (OC,IC); bias may be null (the tied lm head has none).
    // The bias is cuBLASLt's epilogue where the bias kind is fused and cuBLASLt has an algorithm
    // for it, else a kernel of its own.
    void matmul_forward(Act* out, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " fwd",
                            gpu::matmul_forward_traffic<Act>(N, IC, OC, bias != nullptr, fused));
        if (launching() && !(bias && fused[Epilogue::Bias] &&
                             blas->fused_gemm(Epilogue::Bias, (void*)bias, (const Act*)nullptr, false, true, N, OC, IC,
                                              1.0f, inp, IC, w, IC, 0.0f, out, OC))) {
            gpu::gemm(blas->cublas, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);  // out = inp·wᵀ
            if (bias) gpu::add_bias(out, bias, N, OC, stream);                                   // out += bias
        }
        end_op();
    }
    // dinp (N,IC) += dout (N,OC)·w (GradOut::Write: =, the product's beta 0);  dw (OC,IC) +=
    // doutᵀ·inp;  dbias (OC) += Σ_n dout (skipped when null). dinp is Act, or float where it is
    // the stream's gradient (a module without an input LayerNorm).
    template <class D>
    void matmul_backward(D* dinp, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w, int N, int IC,
                         int OC, GradOut dinp_out) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " bwd",
                            gpu::matmul_backward_traffic<Act, D>(N, IC, OC, dbias != nullptr, dinp_out, fused));
        if (launching()) {
            const float beta = dinp_out == GradOut::Write ? 0.0f : 1.0f;
            gpu::gemm(blas->cublas, false, false, N, IC, OC, 1.0f, dout, OC, w, IC, beta, dinp, IC);  // dinp
            // dw += doutᵀ·inp, and dbias += Σ_n dout: summed by the product's epilogue where the
            // bias-gradient kind is fused and cuBLASLt has an algorithm for it, else by
            // bias_backward's own pass
            const bool summed = dbias && fused[Epilogue::BiasGrad] &&
                                blas->fused_gemm(Epilogue::BiasGrad, partial.data(), (const float*)nullptr, true, false,
                                                 OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
            if (!summed) gpu::gemm(blas->cublas, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
            if (dbias) gpu::bias_backward(dbias, partial.data(), dout, N, OC, summed, stream);
        }
        end_op();
    }
    void attention_forward(Act* out, float* lse, const Act* qkv, int B, int T, int C, int NH) {
        if (observer) observer->begin("attention fwd", gpu::attention_forward_traffic<Act>(B, T, C, NH));
        if (launching()) gpu::attention_forward(out, lse, qkv, B, T, C, NH, stream);
        end_op();
    }
    void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out, const float* lse, int B, int T,
                            int C, int NH) {
        if (observer) observer->begin("attention bwd", gpu::attention_backward_traffic<Act>(B, T, C, NH));
        if (launching())
            gpu::attention_backward(dqkv, dout, qkv, out, lse, attention_delta.data(), B, T, C, NH, stream);
        end_op();
    }
    // pre (N,OC) = inp (N,IC)·wᵀ + bias;  out (N,OC) = GELU(pre) (the MLP's fc layer). In bf16 one
    // cuBLASLt product with bias and GELU as its epilogue where that kind is fused and cuBLASLt
    // has an algorithm for it (GELU of the fp32 sum); else the product, then one pass for bias
    // and GELU (of the stored pre).
    void matmul_gelu_forward(Act* out, Act* pre, const Act* inp, const Act* w, const Act* bias, int N, int IC, int OC) {
        if (observer)
            observer->begin("fc matmul + bias + gelu fwd", gpu::matmul_gelu_forward_traffic<Act>(N, IC, OC, fused));
        if (launching() && !(fused[Epilogue::BiasGelu] && gpu::gelu_epilogue_allowed<Act>() &&
                             blas->fused_gemm(Epilogue::BiasGelu, (void*)bias, (const Act*)pre, false, true, N, OC,
                                              IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC))) {
            gpu::gemm(blas->cublas, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, pre, OC);  // pre = inp·wᵀ
            gpu::bias_gelu_forward(out, pre, bias, N, OC, stream);  // pre += bias, out = GELU(pre)
        }
        end_op();
    }
    // The backward of a linear layer whose input is inp = GELU(pre) (the MLP's fcproj):
    //   dpre (N,IC) = (dout·w)·GELU'(pre) (written);  dw (OC,IC) += doutᵀ·inp;  dbias (OC) += Σ_n dout.
    // In bf16 the dpre product has GELU's derivative as its cuBLASLt epilogue where that kind is
    // fused and cuBLASLt has an algorithm for it, else a pass of its own over the product's result.
    void matmul_gelu_backward(Act* dpre, float* dw, float* dbias, const Act* dout, const Act* inp, const Act* w,
                              const Act* pre, int N, int IC, int OC) {
        if (observer)
            observer->begin(matmul_layer(IC, OC) + " + gelu bwd",
                            gpu::matmul_gelu_backward_traffic<Act>(N, IC, OC, dbias != nullptr, fused));
        if (launching()) {
            if (!fused[Epilogue::GeluGrad] || !gpu::gelu_epilogue_allowed<Act>() ||
                !blas->fused_gemm(Epilogue::GeluGrad, nullptr, pre, false, false, N, IC, OC, 1.0f, dout, OC, w, IC,
                                  0.0f, dpre, IC)) {
                gpu::gemm(blas->cublas, false, false, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dpre, IC);  // dout·w
                gpu::gelu_backward_inplace(dpre, pre, N, IC, stream);  // dpre *= GELU'(pre)
            }
            // dw += doutᵀ·inp, and dbias += Σ_n dout: summed by the product's epilogue where the
            // bias-gradient kind is fused and cuBLASLt has an algorithm for it, else by
            // bias_backward's own pass
            const bool summed = dbias && fused[Epilogue::BiasGrad] &&
                                blas->fused_gemm(Epilogue::BiasGrad, partial.data(), (const float*)nullptr, true, false,
                                                 OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
            if (!summed) gpu::gemm(blas->cublas, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
            if (dbias) gpu::bias_backward(dbias, partial.data(), dout, N, OC, summed, stream);
        }
        end_op();
    }
    // s = x + Δt·f alone, where no LayerNorm reads s (the end of run_blocks_from).
    void residual_forward(float* s, const float* x, const Act* f, float dt, size_t n) {
        if (observer) observer->begin("residual fwd", {gpu::residual_forward_traffic<float, Act>(n)});
        if (launching()) gpu::residual_forward(s, x, f, dt, n, stream);
        end_op();
    }
    void crossentropy_forward(float* losses, const Act* logits, const int32_t* targets, int N, int V, int Vp) {
        if (observer) observer->begin("crossentropy fwd", {gpu::crossentropy_forward_traffic<Act>(N, V, Vp)});
        if (launching()) gpu::crossentropy_forward(losses, logits, targets, N, V, Vp, stream);
        end_op();
    }
    void crossentropy_forward_backward(float* losses, Act* logits, const int32_t* targets, float dloss, int N, int V,
                                       int Vp) {
        if (observer)
            observer->begin("crossentropy fwd+bwd", {gpu::crossentropy_forward_backward_traffic<Act>(N, V, Vp)});
        if (launching()) gpu::crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp, stream);
        end_op();
    }

    // AdamW over [lo, hi) of the parameters (CudaBackend::update), refreshing their copy in T.
    void adamw_update(float* params, Act* copy, const float* grads, float* m, float* v, size_t lo, size_t hi,
                      const AdamWHyper& h, int t, double grad_scale) {
        if (observer) observer->begin("adamw", {gpu::adamw_update_traffic<Act>(hi - lo, copy != nullptr)});
        if (launching())
            gpu::adamw_update(params, copy, grads, m, v, gpu::adamw_table(cfg), lo, hi, h, t, grad_scale, stream);
        end_op();
    }

    // The reductions of the diagnostics (diagnostics.h); each waits for its result.
    template <class U>
    double sum_of_squares(const U* x, size_t n) {
        return gpu::sum_of_squares(x, n, diag_scratch.data(), stream);
    }
    StreamStats stream_statistics(const float* x, int N, int C) {
        return gpu::stream_statistics(x, N, C, stats_scratch.data(), stream);
    }
    double attention_logit_max(const Act* qkv, int B, int T, int C, int NH) {
        return gpu::attention_logit_max(qkv, B, T, C, NH, diag_scratch.data(), stream);
    }
    LogitStats logit_statistics(const Act* logits, int N, int V, int Vp) {
        return gpu::logit_statistics(logits, N, V, Vp, diag_scratch.data(), stream);
    }

private:
    ModelConfig cfg;
    // The last load_batch's tokens on the host (B·T): how they repeat decides the traffic of the
    // embedding backward (the traffic model's; no kernel reads them).
    std::vector<int32_t> host_batch;

    DeviceArray<float> attention_delta;  // (B,NH,T) Σ dout·out per row, for attention_backward
    gpu::TokenOrder token_order;        // the batch's positions sorted by token, for the wte gradient
    DeviceArray<float> partial;         // column-sum partials: MAX_ROW_CHUNKS·4C, or LayerNorm's if more
    DeviceArray<float> norm_partial;    // sum-of-squares partials of norm
    DeviceArray<float> stats_scratch;   // for stream_statistics
    DeviceArray<float> diag_scratch;    // the other diagnostics: sums of squares, per-row maxima
    DeviceArray<unsigned char> blas_workspace;  // cuBLASLt's, for the fused products

    // Tells the observer, if any, that the op just launched has ended.
    void end_op() {
        if (observer) observer->end();
    }

    // The linear layer a matrix product (N,IC)·(OC,IC)ᵀ belongs to, told apart by its shape.
    std::string matmul_layer(int IC, int OC) const {
        if (OC == cfg.Vp) return "lm head matmul";
        if (OC == 3 * cfg.C) return "qkv matmul";
        if (OC == 4 * cfg.C) return "fc matmul";
        if (IC == 4 * cfg.C) return "fcproj matmul";
        return "attproj matmul";
    }
};

// ---------------------------------------------------------------------------------------------
// Fused or plain, timed on the card (-fused auto, cuda/fused_products.h). Every op with a product
// that can be fused runs at the shapes of the model's layers for micro-batches (B, T), with its
// kind fused and then plain (the other kinds plain both times); each time is the median of
// TIMED_RUNS runs after one untimed run, which also asks cuBLASLt for its algorithm. A kind
// cuBLASLt refuses, or cannot be asked for (GELU's auxiliary matrix needs a row stride 4C that
// is a multiple of 8), has no fused time (NaN). The buffers hold a constant (bytes 0x3C: about
// 0.011 in bf16 and in fp32) and are freed on return: the backend times before it allocates the
// model, so the two never share the device's memory. They are 256-byte aligned, where the model's
// weights and biases lie at any offset: cuBLASLt may pick another algorithm for those. GELU's
// kinds are timed in bf16 only.
template <typename Act>
std::vector<ProductTiming> time_fused_products(const ModelConfig& cfg, int B, int T) {
    constexpr int TIMED_RUNS = 5;
    CudaOps<Act> ops(cfg, B, T);
    const int N = B * T, C = cfg.C;
    DeviceArray<Act> in((size_t)N * 4 * C), out((size_t)N * 4 * C), pre((size_t)N * 4 * C);  // (N,4C) each
    DeviceArray<Act> w((size_t)4 * C * C), bias(4 * C);                                     // (4C,C), (4C)
    DeviceArray<float> dw((size_t)4 * C * C), dbias(4 * C);
    for (DeviceArray<Act>* a : {&in, &out, &pre, &w, &bias})
        cudaCheck(cudaMemsetAsync(a->data(), 0x3C, a->size() * sizeof(Act), ops.stream));
    for (DeviceArray<float>* a : {&dw, &dbias})
        cudaCheck(cudaMemsetAsync(a->data(), 0x3C, a->size() * sizeof(float), ops.stream));
    cudaEvent_t start, end;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&end));

    // The median time of `op` with `kinds` fused, in ms.
    auto median_ms = [&](const FusedKinds& kinds, const std::function<void()>& op) {
        ops.fused = kinds;
        op();
        std::array<float, TIMED_RUNS> ms;
        for (float& t : ms) {
            cudaCheck(cudaEventRecord(start, ops.stream));
            op();
            cudaCheck(cudaEventRecord(end, ops.stream));
            cudaCheck(cudaEventSynchronize(end));
            cudaCheck(cudaEventElapsedTime(&t, start, end));
        }
        std::sort(ms.begin(), ms.end());
        return (double)ms[TIMED_RUNS / 2];
    };
    std::vector<ProductTiming> timings;
    // Layer `layer`'s op with kind e fused, then plain.
    auto time_kind = [&](Epilogue e, const char* layer, const std::function<void()>& op) {
        FusedKinds only_e = NO_KIND_FUSED;
        only_e[e] = true;
        const bool needs_aux = e == Epilogue::BiasGelu || e == Epilogue::GeluGrad;
        const size_t refused_before = ops.blas->refused_kinds();
        double fused_ms = median_ms(only_e, op);
        if (ops.blas->refused_kinds() > refused_before || (needs_aux && !gpu::aux_stride_allowed(4 * C))) fused_ms = NAN;
        timings.push_back({e, layer, fused_ms, median_ms(NO_KIND_FUSED, op)});
    };
    struct Layer {
        const char* name;
        int IC, OC;
    };
    const Layer qkv{"qkv", C, 3 * C}, attproj{"attproj", C, C}, fc{"fc", C, 4 * C}, fcproj{"fcproj", 4 * C, C};
    // fcproj's backward: dpre (N,4C) into out, dout (N,C) and inp (N,4C) both read from `in`.
    auto fcproj_backward = [&] {
        ops.matmul_gelu_backward(out.data(), dw.data(), dbias.data(), in.data(), in.data(), w.data(), pre.data(), N,
                                 fcproj.IC, fcproj.OC);
    };
    for (const Layer& l : {qkv, attproj, fcproj})
        time_kind(Epilogue::Bias, l.name,
                  [&] { ops.matmul_forward(out.data(), in.data(), w.data(), bias.data(), N, l.IC, l.OC); });
    if (gpu::gelu_epilogue_allowed<Act>()) {
        time_kind(Epilogue::BiasGelu, fc.name, [&] {
            ops.matmul_gelu_forward(out.data(), pre.data(), in.data(), w.data(), bias.data(), N, fc.IC, fc.OC);
        });
        time_kind(Epilogue::GeluGrad, fcproj.name, fcproj_backward);
    }
    for (const Layer& l : {qkv, attproj, fc})
        time_kind(Epilogue::BiasGrad, l.name, [&] {
            ops.matmul_backward(out.data(), dw.data(), dbias.data(), in.data(), pre.data(), w.data(), N, l.IC, l.OC,
                                GradOut::Write);
        });
    time_kind(Epilogue::BiasGrad, fcproj.name, fcproj_backward);

    cudaEventDestroy(start);
    cudaEventDestroy(end);
    return timings;
}
