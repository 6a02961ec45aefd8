// encoder.cuh — the embedding: token embedding plus position embedding.
//
//   forward:  out (B,T,C) = wte[tokens[b,t]] + wpe[t];  tokens (B,T), wte (Vp,C), wpe (maxT,C)
//   backward: dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += dout[b,t]   (dwte, dwpe fp32)
//
// The same token can sit at many positions, so its dwte row gathers several rows of dout. To
// sum them without atomics, in a fixed order, the positions are grouped by token on the host
// when the batch arrives (TokenBuckets): one block per distinct token then sums its positions.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// The positions of a batch grouped by token: bucket k holds the token token[k] and the
// positions position[start[k] .. start[k+1]), ascending. At most N buckets and N positions.
struct TokenBuckets {
    int count = 0;  // distinct tokens in the batch
    DeviceArray<int32_t> token, start, position;

    explicit TokenBuckets(int N) : token(N), start(N + 1), position(N) {}

    // Groups the N host tokens by id and uploads the buckets.
    void build(const int32_t* tokens, int N, cudaStream_t stream) {
        std::vector<int32_t> order(N), host_token, host_start;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
        for (int i = 0; i < N; i++) {
            if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) {
                host_token.push_back(tokens[order[i]]);
                host_start.push_back(i);
            }
        }
        host_start.push_back(N);
        count = (int)host_token.size();
        cudaCheck(cudaMemcpyAsync(token.data(), host_token.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(start.data(), host_start.data(), (count + 1) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(position.data(), order.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaStreamSynchronize(stream));  // the host vectors die here
    }
};

// ---------------------------------------------------------------------------------------------
// Kernels

// One thread per output element (n, c), n = b·T + t.
template <typename T>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int N, int Tn,
                                       int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    const int n = (int)(i / C), c = (int)(i % C), t = n % Tn;
    out[i] = from_float<T>(to_float(wte[(size_t)tokens[n] * C + c]) + to_float(wpe[(size_t)t * C + c]));
}

// dwpe[t, c] += Σ_b dout[b, t, c], one thread per (t, c).
template <typename T>
__global__ void wpe_backward_kernel(float* dwpe, const T* dout, int B, int Tn, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)Tn * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * Tn * C + i]);
    dwpe[i] += sum;
}

// dwte[token[k], c] += Σ over the positions of bucket k of dout[position, c]; block (k, column
// slice), one thread per channel.
template <typename T>
__global__ void wte_backward_kernel(float* dwte, const T* dout, const int32_t* token, const int32_t* start,
                                    const int32_t* position, int C) {
    const int k = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    for (int j = start[k]; j < start[k + 1]; j++) sum += to_float(dout[(size_t)position[j] * C + c]);
    dwte[(size_t)token[k] * C + c] += sum;
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out (B,T,C) from tokens (B,T) on the device.
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
    const size_t n = (size_t)B * Tn * C;
    encoder_forward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B * Tn, Tn, C);
    cudaCheck(cudaGetLastError());
}

// Traffic of encoder_forward: the tokens, one wte row per position (all distinct at worst) and
// T rows of wpe read, out written.
template <typename T>
Traffic encoder_forward_traffic(int B, int Tn, int C) {
    const double N = (double)B * Tn;
    return {"encoder_forward_kernel", 4.0 * N + (N + Tn) * C * sizeof(T), N * C * sizeof(T), N * C};
}

// dwte (Vp,C), dwpe (maxT,C) += from dout (B,T,C); `buckets` were built from this batch's tokens.
template <typename T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const TokenBuckets& buckets, int B, int Tn, int C,
                      cudaStream_t stream) {
    wpe_backward_kernel<T><<<ceil_div((size_t)Tn * C, 256), 256, 0, stream>>>(dwpe, dout, B, Tn, C);
    cudaCheck(cudaGetLastError());
    if (buckets.count == 0) return;
    const dim3 grid((unsigned)buckets.count, (unsigned)ceil_div(C, 256));
    wte_backward_kernel<T><<<grid, 256, 0, stream>>>(dwte, dout, buckets.token.data(), buckets.start.data(),
                                                  buckets.position.data(), C);
    cudaCheck(cudaGetLastError());
}

// Traffic of encoder_backward with `distinct` tokens in the batch: dwpe (T,C) from dout, then
// dout again, the buckets and the `distinct` rows of dwte (read and written).
template <typename T>
Launches encoder_backward_traffic(int B, int Tn, int C, int distinct) {
    const double N = (double)B * Tn, nc = N * C, tc = (double)Tn * C;
    Launches out{{"wpe_backward_kernel", nc * sizeof(T) + 4.0 * tc, 4.0 * tc, nc}};
    if (distinct > 0)
        out.push_back({"wte_backward_kernel", nc * sizeof(T) + 4.0 * (2.0 * distinct + 1 + N) + 4.0 * distinct * C,
                       4.0 * distinct * C, nc});
    return out;
}

}  // namespace gpu
