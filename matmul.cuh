// matmul.cuh — matrix products on cuBLAS, and the linear layer built from them.
//
//   gemm:               C (M,N) = alpha·op(A)·op(B) + beta·C, row-major like matmul.h's gemm;
//   linear forward:     out (N,OC) = inp (N,IC)·wᵀ + bias,  w (OC,IC) as PyTorch stores it;
//   linear backward:    dinp (N,IC) += dout·w (or =, GradOut::Write);  dw (OC,IC) += doutᵀ·inp;
//                       dbias (OC) += Σ_n dout.
//
// Operands A and B are of the element type T; the result is T, or fp32 where precision
// matters (weight gradients, an input gradient that is the residual stream's). cuBLAS multiplies in fp32 (CUBLAS_COMPUTE_32F):
// with bf16 operands it uses the tensor cores, with fp32 operands it stays exact fp32 (no
// TF32), as the fp32 mode promises. Weight and bias gradients are fp32. The bias pass of the
// forward moves 16-byte packs of a row (4 floats or 8 bf16) per thread where OC and its buffers
// allow, else single elements, with 32-bit indices where the sizes allow.
#pragma once
#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Row-major products on a column-major library. cuBLAS reads a row-major X (ld = row stride) as
// the column-major Xᵀ, and row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ. So
// cuBLAS gets B before A and the sizes (N, M) swapped; the transpose flags stay as they are.

inline cublasOperation_t cublas_op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <typename TAB, typename TC>
void gemm(cublasHandle_t handle, bool transA, bool transB, int M, int N, int K, float alpha, const TAB* A, int lda,
          const TAB* B, int ldb, float beta, TC* C, int ldc) {
    cublasCheck(cublasGemmEx(handle, cublas_op(transB), cublas_op(transA), N, M, K, &alpha, B, cuda_data_type<TAB>(),
                             ldb, A, cuda_data_type<TAB>(), lda, &beta, C, cuda_data_type<TC>(), ldc,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Traffic of gemm with elements of sizes ab_bytes (A, B) and c_bytes (C): reads op(A) (M,K) and
// op(B) (K,N), reads C only when beta ≠ 0, writes C (M,N), and does 2·M·N·K FLOPs.
inline Traffic gemm_traffic(int M, int N, int K, bool beta_nonzero, size_t ab_bytes, size_t c_bytes) {
    const double mn = (double)M * N;
    return {"gemm", ((double)M * K + (double)K * N) * ab_bytes + (beta_nonzero ? mn * c_bytes : 0.0),
            mn * c_bytes, 0, 2.0 * mn * K};
}

// ---------------------------------------------------------------------------------------------
// Kernels

// v[e] = x[e] + bias[e] for e < K, each sum rounded to T as it is stored: K consecutive
// elements of one row of an (N,OC) matrix and the bias entries of their columns, one access
// per buffer (the bias passes below and bias_gelu_forward_kernel, gelu.cuh).
template <int K, typename T>
__device__ inline void load_plus_bias(float (&v)[K], const T* x, const T* bias) {
    float b[K];
    load_pack(v, x);
    load_pack(b, bias);
    for (int e = 0; e < K; e++) v[e] = to_float(from_float<T>(v[e] + b[e]));
}

// out[n, o] += bias[o] over the n = N·OC elements of out. Thread k handles the K elements
// [k·K, k·K + K), which lie in one row (K divides OC), with one access per buffer: K =
// Pack16<T>::size (16 bytes) where the launcher found the rows aligned, else K = 1. I is the
// index type (with_index_type).
template <int K, typename T, typename I>
__global__ void add_bias_kernel(T* out, const T* bias, I n, I OC) {
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * K;
    if (first >= n) return;
    float v[K];
    load_plus_bias(v, out + first, bias + first % OC);
    store_pack(out + first, v);
}

// dbias stage 1 (see cuda_common.cuh): partial[k·OC + o] = Σ_{n in chunk k} dout[n, o].
template <typename T>
__global__ void bias_backward_kernel(float* partial, const T* dout, int N, int OC) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int o = blockIdx.x * TILE_COLS + threadIdx.x;
    const int k = blockIdx.y, chunks = gridDim.y;
    const int end = row_chunk_begin(k + 1, chunks, N);
    float sum = 0.0f;
    if (o < OC)
        for (int n = row_chunk_begin(k, chunks, N) + threadIdx.y; n < end; n += TILE_ROWS)
            sum += to_float(dout[(size_t)n * OC + o]);
    sum = sum_over_tile_rows(sum, shared);
    if (threadIdx.y == 0 && o < OC) partial[(size_t)k * OC + o] = sum;
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out (N,OC) += bias (OC): in 16-byte packs where OC is a multiple of Pack16<T>::size and out
// and bias are 16-byte aligned, else element by element (the same results, bit for bit).
template <typename T>
void add_bias(T* out, const T* bias, int N, int OC, cudaStream_t stream) {
    const size_t n = (size_t)N * OC;
    if (n == 0) return;
    auto launch = [&](auto pack, auto index) {
        constexpr int K = decltype(pack)::value;
        using I = decltype(index);
        add_bias_kernel<K, T, I><<<ceil_div(ceil_div(n, K), 256), 256, 0, stream>>>(out, bias, (I)n, (I)OC);
    };
    with_row_packs<Pack16<T>::size>(n, OC, launch, out, bias);
    cudaCheck(cudaGetLastError());
}

// Traffic of add_bias: out and bias read, out written, one FLOP per element.
template <typename T>
Traffic add_bias_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return {"add_bias_kernel", (n + OC) * sizeof(T), n * sizeof(T), n};
}

// out (N,OC) = inp (N,IC)·wᵀ + bias; bias may be null (the tied lm head has none).
template <typename T>
void matmul_forward(cublasHandle_t handle, T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC,
                    cudaStream_t stream) {
    gemm(handle, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);
    if (bias) add_bias(out, bias, N, OC, stream);
}

// Traffic of matmul_forward: the product, then the bias pass that reads and writes out.
template <typename T>
Launches matmul_forward_traffic(int N, int IC, int OC, bool bias) {
    Launches out{gemm_traffic(N, OC, IC, false, sizeof(T), sizeof(T))};
    if (bias) out.push_back(add_bias_traffic<T>(N, OC));
    return out;
}

// dinp (N,IC) += dout·w (with GradOut::Write: =, beta = 0);  dw (OC,IC) += doutᵀ·inp;
// dbias (OC) += Σ_n dout (skipped when null). dinp is T or fp32 (D). `partial` is scratch of
// MAX_ROW_CHUNKS·OC floats.
template <typename T, typename D>
void matmul_backward(cublasHandle_t handle, D* dinp, float* dw, float* dbias, const T* dout, const T* inp, const T* w,
                     int N, int IC, int OC, float* partial, cudaStream_t stream, GradOut dinp_out = GradOut::Add) {
    gemm(handle, false, false, N, IC, OC, 1.0f, dout, OC, w, IC, dinp_out == GradOut::Write ? 0.0f : 1.0f, dinp, IC);
    gemm(handle, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (!dbias) return;
    const int chunks = row_chunks(N);
    bias_backward_kernel<T><<<column_tiles(OC, chunks), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(partial, dout, N, OC);
    cudaCheck(cudaGetLastError());
    add_column_partials(dbias, partial, chunks, OC, OC, stream);
}

// Traffic of matmul_backward: the two products (dw accumulates, so its C is read; dinp's C
// only when it adds), then the two stages of the bias gradient.
template <typename T, typename D = T>
Launches matmul_backward_traffic(int N, int IC, int OC, bool bias, GradOut dinp_out = GradOut::Add) {
    Launches out{gemm_traffic(N, IC, OC, dinp_out == GradOut::Add, sizeof(T), sizeof(D)),
                 gemm_traffic(OC, IC, N, true, sizeof(T), 4)};
    if (!bias) return out;
    const int chunks = row_chunks(N);
    out.push_back({"bias_backward_kernel", (double)N * OC * sizeof(T), 4.0 * chunks * OC, (double)N * OC});
    out.push_back(add_column_partials_traffic(chunks, OC));
    return out;
}

}  // namespace gpu
