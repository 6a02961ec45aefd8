// matmul.cuh — matrix products on cuBLAS and cuBLASLt, and the pieces of the linear layer that
// the ops of cuda_ops.cuh build from them:
//
//   gemm:               C (M,N) = alpha·op(A)·op(B) + beta·C, row-major like matmul.h's gemm;
//   fused_gemm:         the same product with an epilogue cuBLASLt applies before it stores C
//                       (a bias, bias + GELU, GELU's derivative, or a bias gradient), so the
//                       separate pass over C that the epilogue replaces is not needed;
//   add_bias:           out (N,OC) += bias, where the forward's bias is not an epilogue;
//   bias_backward:      dbias (OC) += Σ_n dout, where the dw product's epilogue did not sum it.
// The linear layer (the ops matmul_forward and matmul_backward):
//   forward:            out (N,OC) = inp (N,IC)·wᵀ + bias,  w (OC,IC) as PyTorch stores it;
//   backward:           dinp (N,IC) += dout·w (or =, GradOut::Write);  dw (OC,IC) += doutᵀ·inp;
//                       dbias (OC) += Σ_n dout.
//
// Operands A and B are of the element type T; the result is T, or fp32 where precision
// matters (weight gradients, an input gradient that is the residual stream's). Both libraries
// multiply in fp32 (CUBLAS_COMPUTE_32F): with bf16 operands on the tensor cores, with fp32
// operands in exact fp32 (no TF32), as the fp32 mode promises. Weight and bias gradients are
// fp32. Where the ops do not ask for a fused product (a kind the backend chose to run plain,
// cuda/fused_products.h) or cuBLASLt does not take it (an epilogue whose auxiliary matrix has a
// row stride that is not a multiple of 8, GELU in fp32 (gelu.cuh), or a refusal by the
// heuristic or by cublasLtMatmul), they run the plain product and the kernels below instead,
// with the same results up to rounding (docs/cuda.md §3). The bias pass moves 16-byte packs of
// a row (4 floats or 8 bf16) per thread where OC and its buffers allow, else single elements, with 32-bit indices where the
// sizes allow.
#pragma once
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "cuda/cuda_common.cuh"
#include "cuda/fused_products.h"
#include "model.h"

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

// ---------------------------------------------------------------------------------------------
// Products with a fused epilogue (the kinds Epilogue names, cuda/fused_products.h). In row-major terms, with t = alpha·op(A)·op(B) + beta·C:
//   Bias:      C[m, n] = t + bias[n]                    bias: TC, N elements
//   BiasGelu:  pre[m, n] = t + bias[n];  C = GELU(pre)  pre: TC, (M,N) with row stride ldc
//              (GELU of the fp32 sum, pre rounded to TC as it is stored)
//   GeluGrad:  C = t·GELU'(pre[m, n])                   pre read as above; beta must be 0
//   BiasGrad:  C = t;  bias[m] = Σ_k op(A)[m, k]        bias: TC, M elements, written (not added)
// cuBLASLt sees the row-major product in its column-major view (B before A, M and N swapped, as
// gemm above), where these are its epilogues BIAS, GELU_AUX_BIAS, DGELU and BGRADB. GELU is
// taken to be the tanh approximation of gelu.cuh: cuBLASLt does not say which it uses, so
// scripts/gpu_check.sh compares the fused products with the CPU model on a GPU.

// cuBLASLt needs the row stride of an epilogue's auxiliary matrix (pre) to be a multiple of 8
// elements; the launchers do not ask it for a fused product otherwise.
inline bool aux_stride_allowed(int ld) { return ld % 8 == 0; }

inline cublasLtEpilogue_t lt_epilogue(Epilogue e) {
    switch (e) {
        case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
        case Epilogue::BiasGelu: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        case Epilogue::GeluGrad: return CUBLASLT_EPILOGUE_DGELU;
        case Epilogue::BiasGrad: return CUBLASLT_EPILOGUE_BGRADB;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

// The largest power of two, at most 256, that divides the address of p (256 for a null
// pointer): the alignment cuBLASLt is told each pointer has (Blas::fused_gemm).
inline uint32_t pointer_alignment(const void* p) {
    const uintptr_t address = (uintptr_t)p;
    const uintptr_t lowest_bit = address & (~address + 1);
    return address == 0 || lowest_bit > 256 ? 256u : (uint32_t)lowest_bit;
}

// True when cuBLASLt refused a product as configured, before running anything: the statuses
// its documentation gives for a configuration it does not support (NOT_SUPPORTED), cannot run
// on this device (ARCH_MISMATCH) or finds in conflict (INVALID_VALUE). Any other failure is one.
inline bool lt_refusal(cublasStatus_t status) {
    return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH ||
           status == CUBLAS_STATUS_INVALID_VALUE;
}

// The matrix-product libraries on one stream: a cuBLAS handle for plain products, a cuBLASLt
// handle for fused ones with the workspace it is given (none: it picks among the algorithms
// that need none), and the algorithm cuBLASLt picked for each kind of fused product (or that
// it has none), asked once per kind so that every step runs the same algorithm (deterministic
// results) without a heuristic query per launch. A kind of product is its shape, types,
// epilogue and the alignment of each pointer: cuBLASLt is told the real alignment of A, B, C and
// D (MIN_ALIGNMENT_*_BYTES; it assumes 256 bytes otherwise) and reads that of the bias and aux
// pointers from the descriptor, so the algorithm it picks can work with them.
class Blas {
public:
    static constexpr size_t LT_WORKSPACE_BYTES = (size_t)32 << 20;  // what the backend gives it

    explicit Blas(cudaStream_t stream, void* workspace = nullptr, size_t workspace_bytes = 0)
        : stream(stream), workspace(workspace), workspace_bytes(workspace_bytes) {
        cublasCheck(cublasCreate(&cublas));
        cublasCheck(cublasSetStream(cublas, stream));
        // fp32 products stay fp32 (no TF32); bf16 products accumulate in fp32 all the way,
        // with no reduced-precision steps inside a split-K reduction.
        cublasCheck(cublasSetMathMode(
            cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
        cublasCheck(cublasLtCreate(&lt));
    }
    ~Blas() {
        cublasLtDestroy(lt);
        cublasDestroy(cublas);
    }
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;

    cublasHandle_t cublas = nullptr;

    // C (M,N) = epilogue(alpha·op(A)·op(B) + beta·C) as listed above, row-major like gemm;
    // bias and pre as the epilogue needs them (else null). Returns false, having written
    // nothing, where cuBLASLt refuses it: the heuristic has no algorithm, or cublasLtMatmul
    // refuses the one it gave (lt_refusal); said once on stderr per kind of product, which is
    // not asked again.
    template <typename TAB, typename TC>
    bool fused_gemm(Epilogue epilogue, void* bias, const TC* pre, bool transA, bool transB, int M, int N, int K,
                    float alpha, const TAB* A, int lda, const TAB* B, int ldb, float beta, TC* C, int ldc) {
        if (pre && !aux_stride_allowed(ldc)) return false;
        const cudaDataType tab = cuda_data_type<TAB>(), tc = cuda_data_type<TC>();
        const Key key{(int)epilogue, transA, transB, M, N, K, lda, ldb, ldc, (int)tab, (int)tc, beta != 0.0f,
                      pointer_alignment(A), pointer_alignment(B), pointer_alignment(C), pointer_alignment(bias),
                      pointer_alignment(pre)};
        const auto known = algos.find(key);
        if (known != algos.end() && !known->second) return false;
        cublasLtMatmulDesc_t desc;
        cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        set(desc, CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)cublas_op(transB));
        set(desc, CUBLASLT_MATMUL_DESC_TRANSB, (int32_t)cublas_op(transA));
        set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, (uint32_t)lt_epilogue(epilogue));
        if (bias) set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
        if (pre) {
            set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (const void*)pre);
            set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)ldc);
        }
        // The matrices as stored (row-major rows × cols): A is (M,K), or (K,M) when transposed.
        cublasLtMatrixLayout_t a = layout(tab, transB ? N : K, transB ? K : N, ldb);  // B, cuBLASLt's A
        cublasLtMatrixLayout_t b = layout(tab, transA ? K : M, transA ? M : K, lda);  // A, its B
        cublasLtMatrixLayout_t c = layout(tc, M, N, ldc);
        const Alignments alignments{pointer_alignment(B), pointer_alignment(A), pointer_alignment(C)};
        const std::optional<cublasLtMatmulAlgo_t> algo =
            known != algos.end() ? known->second : heuristic(key, desc, a, b, c, alignments);
        cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
        if (algo)
            status = cublasLtMatmul(lt, desc, &alpha, B, a, A, b, &beta, C, c, C, c, &*algo, workspace,
                                    workspace_bytes, stream);
        for (cublasLtMatrixLayout_t l : {a, b, c}) cublasLtMatrixLayoutDestroy(l);
        cublasLtMatmulDescDestroy(desc);
        if (algo && !lt_refusal(status)) cublasCheck(status);
        if (algo && status != CUBLAS_STATUS_SUCCESS) refuse(key, "cublasLtMatmul", status);
        return status == CUBLAS_STATUS_SUCCESS;
    }

    // How many kinds of fused product cuBLASLt refused so far (each runs unfused).
    size_t refused_kinds() const {
        return (size_t)std::count_if(algos.begin(), algos.end(), [](const auto& known) { return !known.second; });
    }

private:
    // What the choice of algorithm depends on: the product, its types, and the alignment of
    // every pointer (A, B, C, bias, pre).
    using Key = std::tuple<int, bool, bool, int, int, int, int, int, int, int, int, bool, uint32_t, uint32_t, uint32_t,
                           uint32_t, uint32_t>;
    // The alignment of cuBLASLt's A, B and C = D (our B, A and C).
    using Alignments = std::array<uint32_t, 3>;

    template <class V>
    static void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, V value) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
    }
    template <class V>
    static void set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, V value) {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
    }

    // cuBLASLt's layout of a row-major rows × cols matrix with row stride ld: the column-major
    // cols × rows matrix with leading dimension ld.
    static cublasLtMatrixLayout_t layout(cudaDataType type, int rows, int cols, int ld) {
        cublasLtMatrixLayout_t l;
        cublasCheck(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)cols, (uint64_t)rows, ld));
        return l;
    }

    // The algorithm cuBLASLt's heuristic picks for `key` (kept for the next product of its
    // kind), within the workspace, for pointers aligned as `alignments` says; none where it has
    // none.
    std::optional<cublasLtMatmulAlgo_t> heuristic(const Key& key, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                                  const Alignments& alignments) {
        cublasLtMatmulPreference_t preference;
        cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
        set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (uint64_t)workspace_bytes);
        declare_alignments(preference, alignments);
        cublasLtMatmulHeuristicResult_t result;
        std::memset(&result, 0, sizeof result);
        int found = 0;
        const cublasStatus_t status =
            cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, preference, 1, &result, &found);
        cublasLtMatmulPreferenceDestroy(preference);
        if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
            refuse(key, "heuristic", status == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : status);
            return std::nullopt;
        }
        return algos.emplace(key, result.algo).first->second;
    }

    // Tells the heuristic how A, B and C = D are aligned (else it assumes 256 bytes).
    static void declare_alignments(cublasLtMatmulPreference_t preference, const Alignments& alignments) {
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments[0]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments[1]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments[2]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments[2]);
    }

    // Records that cuBLASLt refused the kind of product `key` (`where` said `status`), and says so.
    void refuse(const Key& key, const char* where, cublasStatus_t status) {
        algos[key] = std::nullopt;
        std::fprintf(stderr, "cuBLASLt refused the %s epilogue of a %dx%dx%d %s product (%s: %s): it runs unfused\n",
                     epilogue_name((Epilogue)std::get<0>(key)), std::get<3>(key), std::get<4>(key), std::get<5>(key),
                     std::get<9>(key) == (int)CUDA_R_16BF ? "bf16" : "fp32", where, cublasGetStatusName(status));
    }

    cudaStream_t stream;
    void* workspace;
    size_t workspace_bytes;
    cublasLtHandle_t lt = nullptr;
    std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos;
};

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
// index type (narrow_index).
template <int K, typename T, typename I>
__global__ void add_bias_kernel(T* out, const T* bias, I n, I OC) {
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * K;
    if (first >= n) return;
    float v[K];
    load_plus_bias(v, out + first, bias + first % OC);
    store_pack(out + first, v);
}

// dbias stage 1 (see cuda/cuda_common.cuh): partial[k·OC + o] = Σ_{n in chunk k} dout[n, o].
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
    constexpr int K = Pack16<T>::size;
    const bool packed = rows_in_packs<K>(OC, out, bias);
    const size_t blocks = ceil_div(ceil_div(n, packed ? K : 1), 256);
    const unsigned n32 = (unsigned)n, OC32 = (unsigned)OC;
    if (packed && narrow_index(n))
        add_bias_kernel<K, T, unsigned><<<blocks, 256, 0, stream>>>(out, bias, n32, OC32);
    else if (packed)
        add_bias_kernel<K, T, size_t><<<blocks, 256, 0, stream>>>(out, bias, n, (size_t)OC);
    else if (narrow_index(n))
        add_bias_kernel<1, T, unsigned><<<blocks, 256, 0, stream>>>(out, bias, n32, OC32);
    else
        add_bias_kernel<1, T, size_t><<<blocks, 256, 0, stream>>>(out, bias, n, (size_t)OC);
    cudaCheck(cudaGetLastError());
}

// dbias (OC) += Σ_n dout (N,OC), the bias gradient of a linear layer's backward, after its dw
// product (the ops matmul_backward and matmul_gelu_backward, cuda_ops.cuh). Where that product's
// cuBLASLt epilogue summed dout's columns into one row of `partial` (summed_by_epilogue), only
// stage 2 of the column sums runs, adding the row to dbias; else stage 1 first
// (bias_backward_kernel, a row of partial sums per chunk of rows; cuda/cuda_common.cuh). `partial` is
// scratch of MAX_ROW_CHUNKS·OC floats.
template <typename T>
void bias_backward(float* dbias, float* partial, const T* dout, int N, int OC, bool summed_by_epilogue,
                   cudaStream_t stream) {
    int rows_of_partials = 1;
    if (!summed_by_epilogue) {
        rows_of_partials = row_chunks(N);
        bias_backward_kernel<T><<<column_tiles(OC, rows_of_partials), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
            partial, dout, N, OC);
        cudaCheck(cudaGetLastError());
    }
    add_column_partials_kernel<<<ceil_div(OC, TILE_COLS), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
        dbias, partial, rows_of_partials, OC, OC);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
