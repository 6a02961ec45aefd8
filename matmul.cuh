// matmul.cuh — what the linear layers of cuda_ops.cuh need beside cuBLAS's plain product
// (cublasGemmEx): the setup of cuBLASLt's fused products (Blas, LtMatmul) and the kernels that
// do an epilogue's work where the product runs plain:
//
//   forward:   out (N,OC) = inp (N,IC)·wᵀ + bias,  w (OC,IC) as PyTorch stores it (matmul_forward);
//              add_bias_kernel adds the bias where it is not the product's epilogue;
//   backward:  dinp (N,IC) += dout·w (or =, GradOut::Write);  dw (OC,IC) += doutᵀ·inp;
//              dbias (OC) += Σ_n dout (matmul_backward): bias_backward_kernel sums dout's columns
//              per chunk of rows where the dw product's epilogue did not.
//
// Operands are of the element type T; the result is T, or fp32 where precision matters (weight
// gradients, an input gradient that is the residual stream's). Both libraries multiply in fp32
// (CUBLAS_COMPUTE_32F): with bf16 operands on the tensor cores, with fp32 operands in exact fp32
// (no TF32), as the fp32 mode promises. Where the ops do not fuse a product (a kind the backend
// chose to run plain, cuda/fused_products.h) or cuBLASLt does not take it (an epilogue whose
// auxiliary matrix has a row stride that is not a multiple of 8, GELU in fp32 (gelu.cuh), or a
// refusal by the heuristic or by cublasLtMatmul), they run the plain product and the kernels
// below instead, with the same results up to rounding (docs/cuda.md §3). The bias pass moves
// 16-byte packs of a row (4 floats or 8 bf16) per thread where OC and its buffers allow, else
// single elements, with 32-bit indices where the sizes allow.
// The ops that launch these kernels (cuda_ops.cuh): CudaOps::matmul_forward, matmul_backward and
// matmul_gelu_backward.
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
// cuBLAS gets B before A and the sizes (N, M) swapped; the transpose flags stay as they are (the
// ops of cuda_ops.cuh call cublasGemmEx and cublasLtMatmul so).

inline cublasOperation_t cublas_op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// ---------------------------------------------------------------------------------------------
// Products with a fused epilogue (the kinds Epilogue names, cuda/fused_products.h). In row-major terms, with t = alpha·op(A)·op(B) + beta·C:
//   Bias:      C[m, n] = t + bias[n]                    bias: TC, N elements
//   BiasGelu:  pre[m, n] = t + bias[n];  C = GELU(pre)  pre: TC, (M,N) with row stride ldc
//              (GELU of the fp32 sum, pre rounded to TC as it is stored)
//   GeluGrad:  C = t·GELU'(pre[m, n])                   pre read as above; beta must be 0
//   BiasGrad:  C = t;  bias[m] = Σ_k op(A)[m, k]        bias: TC, M elements, written (not added)
// cuBLASLt sees the row-major product in its column-major view (B before A, M and N swapped, as
// above), where these are its epilogues BIAS, GELU_AUX_BIAS, DGELU and BGRADB. GELU is
// taken to be the tanh approximation of gelu.cuh: cuBLASLt does not say which it uses, so
// scripts/gpu_check.sh compares the fused products with the CPU model on a GPU.

// cuBLASLt needs the row stride of an epilogue's auxiliary matrix (pre) to be a multiple of 8
// elements; the ops do not ask it for a fused product otherwise.
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
// pointer): the alignment cuBLASLt is told each pointer has (LtMatmul).
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

// A kind of fused product: its epilogue, shape, types and the alignment of every pointer (A, B,
// C, bias, pre), which is what cuBLASLt's choice of algorithm depends on.
using LtKind = std::tuple<int, bool, bool, int, int, int, int, int, int, int, int, bool, uint32_t, uint32_t, uint32_t,
                          uint32_t, uint32_t>;

// The cuBLASLt set-up of one kind of fused product (an LtKind): its descriptor with the epilogue,
// the layouts of its three matrices in cuBLASLt's order (its A is our B, its C is also D), and
// the algorithm the heuristic chose for them (none: cuBLASLt has none, or refused it). Blas
// makes it at the first product of its kind and keeps it: every product of that kind, in every
// layer and step, runs with it.
struct LtSetup {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t Adesc = nullptr, Bdesc = nullptr, Cdesc = nullptr;
    std::optional<cublasLtMatmulAlgo_t> algo;
};

// The matrix-product libraries on one stream: a cuBLAS handle for plain products, a cuBLASLt
// handle for fused ones with the workspace it is given (none: it picks among the algorithms
// that need none), and the set-up of each kind of fused product (LtSetup), its algorithm asked
// of the heuristic once per kind so that every step runs the same algorithm (deterministic
// results) without a heuristic query, a descriptor or a layout made per launch. cuBLASLt is told
// the real alignment of A, B, C and D (MIN_ALIGNMENT_*_BYTES; it assumes 256 bytes otherwise) and
// reads that of the bias and aux pointers from the descriptor, so the algorithm it picks can work
// with them.
class Blas {
public:
    static constexpr size_t LT_WORKSPACE_BYTES = (size_t)32 << 20;  // what the backend gives it

    explicit Blas(cudaStream_t stream, void* workspace = nullptr, size_t workspace_bytes = 0)
        : workspace(workspace), workspace_bytes(workspace_bytes) {
        cublasCheck(cublasCreate(&cublas));
        cublasCheck(cublasSetStream(cublas, stream));
        // fp32 products stay fp32 (no TF32); bf16 products accumulate in fp32 all the way,
        // with no reduced-precision steps inside a split-K reduction.
        cublasCheck(cublasSetMathMode(
            cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
        cublasCheck(cublasLtCreate(&lt));
    }
    ~Blas() {
        for (auto& [kind, setup] : setups) {
            for (cublasLtMatrixLayout_t l : {setup.Adesc, setup.Bdesc, setup.Cdesc}) cublasLtMatrixLayoutDestroy(l);
            cublasLtMatmulDescDestroy(setup.desc);
        }
        cublasLtDestroy(lt);
        cublasDestroy(cublas);
    }
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;

    cublasHandle_t cublas = nullptr;
    cublasLtHandle_t lt = nullptr;
    void* workspace;         // cuBLASLt's workspace, of workspace_bytes
    size_t workspace_bytes;

    // The set-up kept for the kind of product `kind`, or null before its first product.
    LtSetup* setup_of(const LtKind& kind) {
        const auto known = setups.find(kind);
        return known == setups.end() ? nullptr : &known->second;
    }

    // Keeps `setup` for the kind `kind` (its descriptor and layouts are released with the Blas)
    // with the algorithm the heuristic picks for it (within the workspace, for pointers aligned as
    // `alignments` says: cuBLASLt's A, B and C = D); none where it has one, said once on stderr.
    LtSetup& keep(const LtKind& kind, LtSetup setup, const std::array<uint32_t, 3>& alignments) {
        LtSetup& kept = setups.emplace(kind, setup).first->second;
        cublasLtMatmulPreference_t preference;
        cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
        set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (uint64_t)workspace_bytes);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments[0]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments[1]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments[2]);
        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments[2]);
        cublasLtMatmulHeuristicResult_t result;
        std::memset(&result, 0, sizeof result);
        int found = 0;
        const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt, kept.desc, kept.Adesc, kept.Bdesc, kept.Cdesc,
                                                                     kept.Cdesc, preference, 1, &result, &found);
        cublasLtMatmulPreferenceDestroy(preference);
        if (status == CUBLAS_STATUS_SUCCESS && found > 0)
            kept.algo = result.algo;
        else
            refuse(kind, "heuristic", status == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : status);
        return kept;
    }

    // What cublasLtMatmul answered for a product of kind `kind`: true when it ran; false when it
    // refused it (lt_refusal; said once on stderr, and that kind keeps no algorithm, so it runs
    // plain from now on); any other failure stops the program.
    bool took(const LtKind& kind, cublasStatus_t status) {
        if (status == CUBLAS_STATUS_SUCCESS) return true;
        if (!lt_refusal(status)) cublasCheck(status);
        refuse(kind, "cublasLtMatmul", status);
        return false;
    }

    // How many kinds of fused product cuBLASLt refused so far (each runs unfused).
    size_t refused_kinds() const {
        return (size_t)std::count_if(setups.begin(), setups.end(), [](const auto& known) { return !known.second.algo; });
    }

private:
    template <class V>
    static void set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, V value) {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
    }

    // Records that cuBLASLt refused the kind of product `kind` (`where` said `status`), and says so.
    void refuse(const LtKind& kind, const char* where, cublasStatus_t status) {
        setups.at(kind).algo = std::nullopt;
        std::fprintf(stderr, "cuBLASLt refused the %s epilogue of a %dx%dx%d %s product (%s: %s): it runs unfused\n",
                     epilogue_name((Epilogue)std::get<0>(kind)), std::get<3>(kind), std::get<4>(kind),
                     std::get<5>(kind), std::get<9>(kind) == (int)CUDA_R_16BF ? "bf16" : "fp32", where,
                     cublasGetStatusName(status));
    }

    std::map<LtKind, LtSetup> setups;
};

// One product C (M,N) = epilogue(op(A)·op(B) + beta·C), row-major, ready for cublasLtMatmul
// (alpha 1): the set-up Blas keeps for its kind (made here at the first product of the kind),
// with this product's bias and pre (as the epilogue needs them, else null) set on its
// descriptor, and the algorithm of the kind (null: cuBLASLt refused that kind, or pre's row
// stride is one it cannot take). The members are in cuBLASLt's order, its A being our B: an op
// passes them to cublasLtMatmul as they are, then its status to Blas::took. The descriptor and
// layouts are Blas's; a product of the same kind sets its own pointers on the descriptor before
// its call (cublasLtMatmul reads them when it is called).
template <typename TAB, typename TC>
struct LtMatmul {
    LtKind kind;
    const cublasLtMatmulAlgo_t* algo = nullptr;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t Adesc = nullptr, Bdesc = nullptr, Cdesc = nullptr;
    const TAB* A;  // our B
    const TAB* B;  // our A
    float beta;
    TC* C;

    LtMatmul(Blas& blas, Epilogue epilogue, bool transA, bool transB, int M, int N, int K, const TAB* a, int lda,
             const TAB* b, int ldb, float beta, TC* c, int ldc, void* bias, const TC* pre)
        : kind{(int)epilogue, transA, transB, M, N, K, lda, ldb, ldc, (int)cuda_data_type<TAB>(),
               (int)cuda_data_type<TC>(), beta != 0.0f, pointer_alignment(a), pointer_alignment(b),
               pointer_alignment(c), pointer_alignment(bias), pointer_alignment(pre)},
          A(b), B(a), beta(beta), C(c) {
        if (pre && !aux_stride_allowed(ldc)) return;
        LtSetup* setup = blas.setup_of(kind);
        if (setup) {
            desc = setup->desc;
            set_pointers(bias, pre);
        } else {
            LtSetup made;
            cublasCheck(cublasLtMatmulDescCreate(&made.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            desc = made.desc;
            set(CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)cublas_op(transB));
            set(CUBLASLT_MATMUL_DESC_TRANSB, (int32_t)cublas_op(transA));
            set(CUBLASLT_MATMUL_DESC_EPILOGUE, (uint32_t)lt_epilogue(epilogue));
            if (pre) set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)ldc);
            set_pointers(bias, pre);
            // The matrices as stored (row-major rows × cols): our A is (M,K), or (K,M) when transposed.
            made.Adesc = layout(cuda_data_type<TAB>(), transB ? N : K, transB ? K : N, ldb);  // our B, its A
            made.Bdesc = layout(cuda_data_type<TAB>(), transA ? K : M, transA ? M : K, lda);  // our A, its B
            made.Cdesc = layout(cuda_data_type<TC>(), M, N, ldc);
            setup = &blas.keep(kind, made, {pointer_alignment(b), pointer_alignment(a), pointer_alignment(c)});
        }
        Adesc = setup->Adesc;
        Bdesc = setup->Bdesc;
        Cdesc = setup->Cdesc;
        algo = setup->algo ? &*setup->algo : nullptr;
    }

private:
    template <class V>
    void set(cublasLtMatmulDescAttributes_t attribute, V value) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
    }
    // This product's own bias and pre on the kind's descriptor (each layer has its own).
    void set_pointers(void* bias, const TC* pre) {
        if (bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
        if (pre) set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (const void*)pre);
    }
    // cuBLASLt's layout of a row-major rows × cols matrix with row stride ld: the column-major
    // cols × rows matrix with leading dimension ld.
    static cublasLtMatrixLayout_t layout(cudaDataType type, int rows, int cols, int ld) {
        cublasLtMatrixLayout_t l;
        cublasCheck(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)cols, (uint64_t)rows, ld));
        return l;
    }
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
// Pack16<T>::size (16 bytes) where its op found the rows aligned, else K = 1. I is the
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

}  // namespace gpu
