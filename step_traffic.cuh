// step_traffic.cuh — the launches of one training step without running a kernel, for the cost
// model of `./bench_gpu -model` (traffic.h, docs/cuda.md "The traffic model").
//
// TrafficOps<T> is an ops object for Gpt2 (gpt2.h) with the names and arguments of CudaOps
// (gpt2.cu), so the model's own forward and backward call it in the order a real step calls
// the kernels; each op notes, under a readable name, the launches its launcher declares in
// its `*_traffic` function, instead of launching them. Its arrays own no memory: each is a
// distinct fake address range that nothing reads, so a step of any size is recorded on any
// machine. Included by gpt2.cu after the kernel headers.
#pragma once
#include <cstdint>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "gpt2.h"
#include "model.h"
#include "traffic.h"

namespace step_traffic {

// The name of the linear layer a matrix product (N,IC)·(OC,IC)ᵀ belongs to, told apart by its
// shape; the op names of -model and of make bench's per-op times.
inline std::string matmul_name(const ModelConfig& cfg, int IC, int OC) {
    if (OC == cfg.Vp) return "lm head matmul";
    if (OC == 3 * cfg.C) return "qkv matmul";
    if (OC == 4 * cfg.C) return "fc matmul";
    if (IC == 4 * cfg.C) return "fcproj matmul";
    return "attproj matmul";
}

// n elements of U at a made-up device address; data() may be offset but never dereferenced.
template <class U>
class FakeArray {
public:
    FakeArray() = default;
    explicit FakeArray(size_t n) : n_(n), ptr_(reinterpret_cast<U*>(next_address(n * sizeof(U)))) {}
    U* data() const { return ptr_; }
    size_t size() const { return n_; }
    void swap(FakeArray& other) noexcept {
        std::swap(n_, other.n_);
        std::swap(ptr_, other.ptr_);
    }

private:
    size_t n_ = 0;
    U* ptr_ = nullptr;
    // A fresh 256-byte-aligned range of `bytes` (addresses only; nothing is allocated).
    static uintptr_t next_address(size_t bytes) {
        static uintptr_t next = uintptr_t{1} << 40;
        const uintptr_t at = next;
        next += (bytes + 511) / 256 * 256;
        return at;
    }
};

// The ops of CudaOps<T>, each recording its launches in `ops` (op name, launches) in call order.
template <typename T>
class TrafficOps {
public:
    using Act = T;
    using Acc = float;
    using Stream = float;
    template <class U>
    using Array = FakeArray<U>;
    using AttentionSaved = float;

    std::vector<OpTraffic> ops;

    TrafficOps(const ModelConfig& cfg, int B, int Tn) : cfg(cfg), B(B), Tn(Tn) {}

    void memory_category(MemoryCategory) {}
    template <class U>
    Array<U> alloc(size_t n) {
        return Array<U>(n);  // allocation happens once, before any step: not recorded
    }
    template <class U>
    void zero(Array<U>& a) {
        note("memset (gradients)", {{"memset", 0, (double)a.size() * sizeof(U)}});
    }
    template <class U>
    void copy(U*, const U*, size_t n) {
        note("copy", {{"copy", (double)n * sizeof(U), (double)n * sizeof(U)}});
    }
    void finish() {}
    void convert(T*, const float*, size_t n) { note("convert", {::convert_traffic<T, float>(n)}); }
    // The batch's tokens, kept: how they repeat decides the embedding backward's traffic.
    void load_batch(Array<int32_t>&, Array<int32_t>&, const int32_t* host_tokens, const int32_t*) {
        batch.assign(host_tokens, host_tokens + (size_t)B * Tn);
    }

    float mean(const Array<float>&) { return 0.0f; }  // a copy of N floats to the host
    template <class U>
    double norm(const Array<U>& a) {
        note("grad norm", {gpu::sum_of_squares_traffic<U>(a.size())});
        return 0.0;
    }
    StreamStats stream_statistics(const float*, int, int) { return {}; }

    void encoder_forward(float*, const int32_t*, const T*, const T*, int B_, int Tn_, int C) {
        note("encoder fwd", {gpu::encoder_forward_traffic<float, T>(B_, Tn_, C)});
    }
    void encoder_backward(float*, float*, const float*, const int32_t*, int B_, int Tn_, int C) {
        note("encoder bwd", gpu::encoder_backward_traffic<float>(B_, Tn_, C, gpu::token_runs(batch.data(), B_ * Tn_)));
    }
    template <class O, class I>
    void layernorm_forward(O*, float*, float*, const I*, const T*, const T*, int N, int C) {
        note("layernorm fwd", {gpu::layernorm_forward_traffic<O, I, T>(N, C)});
    }
    template <class D, class G, class I>
    void layernorm_backward(D*, float*, float*, const G*, const I*, const T*, const float*, const float*, int N, int C,
                            GradOut dx_out = GradOut::Add) {
        note("layernorm bwd", gpu::layernorm_backward_traffic<D, G, I, T>(N, C, dx_out));
    }
    template <class D, class G, class I>
    void layernorm_backward_residual(D*, T*, float, float*, float*, const G*, const I*, const T*, const float*,
                                     const float*, int N, int C, GradOut dx_out = GradOut::Add) {
        note("layernorm + residual bwd", gpu::layernorm_backward_residual_traffic<D, T, G, I, T>(N, C, dx_out));
    }
    void matmul_forward(T*, const T*, const T*, const T* bias, int N, int IC, int OC) {
        note(matmul_name(cfg, IC, OC) + " fwd", gpu::matmul_forward_traffic<T>(N, IC, OC, bias != nullptr));
    }
    template <class D>
    void matmul_backward(D*, float*, float* dbias, const T*, const T*, const T*, int N, int IC, int OC,
                         GradOut dinp_out = GradOut::Add) {
        note(matmul_name(cfg, IC, OC) + " bwd",
             gpu::matmul_backward_traffic<T, D>(N, IC, OC, dbias != nullptr, dinp_out));
    }
    static size_t attention_saved_size(int B_, int Tn_, int NH) { return gpu::attention_saved_size(B_, Tn_, NH); }
    void attention_forward(T*, float*, const T*, int B_, int Tn_, int C, int NH) {
        note("attention fwd", gpu::attention_forward_traffic<T>(B_, Tn_, C, NH));
    }
    void attention_backward(T*, const T*, const T*, const T*, const float*, int B_, int Tn_, int C, int NH) {
        note("attention bwd", gpu::attention_backward_traffic<T>(B_, Tn_, C, NH));
    }
    void matmul_gelu_forward(T*, T*, const T*, const T*, const T*, int N, int IC, int OC) {
        note("fc matmul + bias + gelu fwd", gpu::matmul_bias_gelu_forward_traffic<T>(N, IC, OC));
    }
    void matmul_gelu_backward(T*, float*, float* dbias, const T*, const T*, const T*, const T*, int N, int IC,
                              int OC) {
        note(matmul_name(cfg, IC, OC) + " + gelu bwd",
             gpu::matmul_gelu_backward_traffic<T>(N, IC, OC, dbias != nullptr));
    }
    void residual_forward(float*, const float*, const T*, float, size_t n) {
        note("residual fwd", {gpu::residual_forward_traffic<float, T>(n)});
    }
    template <class O>
    void residual_layernorm_forward(float*, O*, float*, float*, const float*, const T*, float, const T*, const T*,
                                    int N, int C) {
        note("residual + layernorm fwd", {gpu::residual_layernorm_forward_traffic<float, T, O, T>(N, C)});
    }
    void crossentropy_forward(float*, const T*, const int32_t*, int N, int V, int Vp) {
        note("crossentropy fwd", {gpu::crossentropy_forward_traffic<T>(N, V, Vp)});
    }
    void crossentropy_forward_backward(float*, T*, const int32_t*, float, int N, int V, int Vp) {
        note("crossentropy fwd+bwd", {gpu::crossentropy_forward_backward_traffic<T>(N, V, Vp)});
    }

    // CudaBackend::update: one AdamW launch over all n parameters.
    void adamw(size_t n) { note("adamw", {gpu::adamw_update_traffic<T>(n, !std::is_same<T, float>::value)}); }

private:
    ModelConfig cfg;
    int B, Tn;
    std::vector<int32_t> batch;  // the last load_batch's tokens (B·T)

    void note(const std::string& op, const Launches& launches) { ops.push_back({op, launches}); }

};

// One step as bench_gpu.cpp's train_step runs it, on the batch `tokens` (B·T): zero_grad,
// forward to the logits, backward (from the fused cross-entropy on), gradient norm, AdamW over
// every parameter tensor.
template <typename T>
std::vector<OpTraffic> record_step(const ModelConfig& cfg, int B, int Tn, const int32_t* tokens) {
    Gpt2<TrafficOps<T>> model(cfg, B, Tn);
    model.ops.ops.clear();
    model.ops.zero(model.grads);
    model.forward_to_logits(tokens, tokens);
    model.backward(1.0f);
    model.grad_norm();
    model.ops.adamw(model.params.size());
    return std::move(model.ops.ops);
}

}  // namespace step_traffic

std::vector<OpTraffic> cuda_step_traffic(const ModelConfig& cfg, int B, int T, bool use_bf16, const int32_t* tokens) {
    return use_bf16 ? step_traffic::record_step<bf16>(cfg, B, T, tokens)
                    : step_traffic::record_step<float>(cfg, B, T, tokens);
}
