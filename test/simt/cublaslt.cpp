// The cuBLASLt calls the project uses, on the CPU (docs/simt.md, "cuBLASLt"):
//
//   D = epilogue(alpha * op(A) * op(B) + beta * C)
//
// column-major like cuBLAS: op(A) is m x k, op(B) is k x n, C and D are m x n, each described
// by a matrix layout (type, rows, cols, leading dimension) and the transposes by the operation
// descriptor. The product is cublas.cpp's (blas.h), so with the DEFAULT epilogue the result has
// the same bits as the emulated cublasGemmEx. The epilogue works on the fp32 value t of each
// element before D is rounded to its type:
//
//   DEFAULT        D = t
//   BIAS           D = t + bias[row]
//   GELU_AUX_BIAS  u = t + bias[row];  aux[row + col * auxld] = u (in D's type);  D = GELU(u)
//   DGELU          D = t * GELU'(aux[row + col * auxld])
//   BGRADB         D = t;  bias[col] = sum over p < k of op(B)(p, col)   (written, not added)
//
// Configurations cuBLASLt documents as invalid, and those whose meaning it does not document,
// are refused with a status and one "simt: <api>: <why> (<status>)" line on stderr; the heuristic
// refuses exactly what cublasLtMatmul refuses before it looks at alpha, beta and the pointers.
//
// Alignment (docs/simt.md, "cuBLASLt"): the algorithm the heuristic hands out keeps the alignment
// it was chosen for: of A, B, C and D the preference's MIN_ALIGNMENT_*_BYTES (256 unless set), of
// the bias and aux vectors the alignment of the pointers in the descriptor (cublasLt.h: the
// heuristic "depends on its value to determine expected pointer alignment"). cublasLtMatmul
// refuses a pointer less aligned than that, and an algorithm found for another problem; without
// an algorithm it assumes what the heuristic would with the default preference.
#include <cublasLt.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "blas.h"
#include "counting.h"
#include "cublaslt.h"
#include "internal.h"

struct cublasLtContext {};

namespace simt {
namespace {

using blas::reject;

// What the emulation keeps in the library's semi-opaque descriptors (copied into and out of
// their data[] arrays).
struct Operation {  // cublasLtMatmulDesc_t
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
  const void* aux = nullptr;
  std::int64_t aux_ld = 0;
};
struct Layout {  // cublasLtMatrixLayout_t
  cudaDataType type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
// The pointers whose alignment an algorithm depends on, in the order Alignments keeps them.
enum Operand { kA, kB, kC, kD, kBias, kAux, kOperands };
const char* const kOperandNames[kOperands] = {"A", "B", "C", "D", "BIAS_POINTER", "EPILOGUE_AUX_POINTER"};

// Bytes each pointer is aligned to (a power of two).
using Alignments = std::array<std::uint32_t, kOperands>;

// The documented default of every MIN_ALIGNMENT_*_BYTES preference.
constexpr std::uint32_t kDefaultAlignment = 256;

struct Preference {  // cublasLtMatmulPreference_t
  std::uint64_t max_workspace_bytes = 0;
  std::uint32_t min_alignment[4] = {kDefaultAlignment, kDefaultAlignment, kDefaultAlignment, kDefaultAlignment};
};

// Marks the algorithms the heuristic hands out, so that cublasLtMatmul can tell one from an
// uninitialised cublasLtMatmulAlgo_t.
constexpr std::uint64_t kAlgoTag = 0x53494d542d4c54ull;  // "SIMT-LT"

// What the emulation keeps in a cublasLtMatmulAlgo_t it hands out: the tag, the problem it was
// found for (a hash of the descriptors), and the alignments it was chosen for.
struct Algorithm {
  std::uint64_t tag;
  std::uint64_t problem;
  Alignments alignment;
};

// What the test controls of cublaslt.h ask the emulation to refuse besides what it must.
LtRefusal extra_refusal = LtRefusal::kNone;
float gelu_factor = 1.0f;  // 1 + the relative error of perturb_cublaslt_gelu

template <typename Fields, typename Opaque>
Fields read(const Opaque* opaque) {
  static_assert(sizeof(Fields) <= sizeof(opaque->data), "the descriptor's fields must fit its storage");
  Fields fields;
  std::memcpy(&fields, opaque->data, sizeof fields);
  return fields;
}

template <typename Fields, typename Opaque>
void write(Opaque* opaque, const Fields& fields) {
  static_assert(sizeof(Fields) <= sizeof(opaque->data), "the descriptor's fields must fit its storage");
  std::memcpy(opaque->data, &fields, sizeof fields);
}

// The descriptor field an attribute sets: its name, where it is and its size.
struct Field {
  const char* name;
  void* data;
  std::size_t size;
};

template <typename T>
Field field(const char* name, T& value) {
  return {name, &value, sizeof value};
}

// The field of `op` that `attr` sets; a null one for an attribute not emulated.
Field operation_field(Operation& op, cublasLtMatmulDescAttributes_t attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return field("TRANSA", op.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field("TRANSB", op.transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field("EPILOGUE", op.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field("BIAS_POINTER", op.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field("BIAS_DATA_TYPE", op.bias_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field("EPILOGUE_AUX_POINTER", op.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field("EPILOGUE_AUX_LD", op.aux_ld);
    default: return {nullptr, nullptr, 0};
  }
}

// Copies an attribute's value from `buf` into its field, as cuBLASLt does when sizeInBytes is
// the attribute's own size; refuses a null buf or any other size.
cublasStatus_t set_field(const char* api, const Field& field, const void* buf, std::size_t size) {
  if (buf == nullptr || size != field.size)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api,
                  std::string(field.name) + " takes " + std::to_string(field.size) + " bytes, got " +
                      (buf == nullptr ? std::string("a null buffer") : std::to_string(size)));
  std::memcpy(field.data, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

const char* epilogue_name(std::uint32_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return nullptr;
  }
}

bool uses_bias(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_BGRADB;
}

bool uses_aux(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU;
}

// Elements from the first to one past the last of a rows x cols column-major matrix.
std::size_t extent(std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

std::size_t element_bytes(cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; }

// True when a rows x cols matrix of `type` at `data` lies inside one cudaMalloc allocation.
bool in_device_memory(const void* data, cudaDataType type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  return data != nullptr && is_device_range(data, extent(rows, cols, ld) * element_bytes(type));
}

// GELU (tanh approximation) and its exact derivative, in the same fp32 arithmetic as gelu.cuh's
// gelu and gelu_derivative, so that the fused and the unfused paths agree as closely as they
// can. cuBLASLt does not document which GELU its epilogues compute: this assumes GPT-2's tanh
// form; scripts/gpu_check.sh compares the two paths on a GPU.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x))); }
float gelu_derivative(float x) {
  const float th = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// A product as checked: the descriptors' contents and the sizes they imply.
struct Problem {
  Operation op;
  Layout a, b, c, d;
  bool a_transposed, b_transposed;
  int m, n, k;
  cudaDataType bias_type;  // resolved: BIAS_DATA_TYPE, or D's type
};

// The largest power of two, at most 256, that divides the address (256 for a null pointer): the
// alignment the heuristic sees in a bias or aux pointer, as the backend computes it too.
std::uint32_t alignment_of(const void* pointer) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(pointer);
  const std::uintptr_t lowest_bit = address & (~address + 1);
  return address == 0 || lowest_bit > kDefaultAlignment ? kDefaultAlignment : static_cast<std::uint32_t>(lowest_bit);
}

// A hash (FNV-1a) of everything in the descriptors an algorithm is chosen for.
std::uint64_t problem_hash(const Problem& p) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](std::int64_t value) {
    for (int byte = 0; byte < 8; ++byte) h = (h ^ ((static_cast<std::uint64_t>(value) >> (8 * byte)) & 0xff)) * 1099511628211ull;
  };
  for (std::int64_t value : {std::int64_t(p.op.compute), std::int64_t(p.op.scale_type), std::int64_t(p.op.transa),
                             std::int64_t(p.op.transb), std::int64_t(p.op.epilogue), std::int64_t(p.bias_type),
                             std::int64_t(p.op.bias != nullptr), std::int64_t(p.op.aux != nullptr), p.op.aux_ld})
    mix(value);
  for (const Layout* layout : {&p.a, &p.b, &p.c, &p.d})
    for (std::int64_t value : {std::int64_t(layout->type), std::int64_t(layout->rows), std::int64_t(layout->cols), layout->ld})
      mix(value);
  return h;
}

// The algorithm the heuristic hands out for `p` under `preference`: A to D aligned as the
// preference promises, bias and aux as the descriptor's pointers are.
Algorithm choose_algorithm(const Problem& p, const Preference& preference) {
  Algorithm algo{kAlgoTag, problem_hash(p), {}};
  for (int operand = kA; operand <= kD; ++operand) algo.alignment[operand] = preference.min_alignment[operand];
  algo.alignment[kBias] = alignment_of(p.op.bias);
  algo.alignment[kAux] = alignment_of(p.op.aux);
  return algo;
}

// Says which calls the test controls (cublaslt.h) make the emulation refuse.
const char* extra_refusal_reason() { return "refused on purpose for a test (simt::refuse_cublaslt_epilogues)"; }

// Checks a product's descriptors as cuBLASLt would before it looks at alpha, beta or the
// matrices' contents, and fills `problem`. Sizes that do not fit together are
// CUBLAS_STATUS_INVALID_VALUE; configurations outside the emulated (and documented) set are
// CUBLAS_STATUS_NOT_SUPPORTED.
cublasStatus_t check_problem(const char* api, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                             cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                             cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc, Problem& problem) {
  if (handle == nullptr) return reject(CUBLAS_STATUS_NOT_INITIALIZED, api, "null handle (call cublasLtCreate first)");
  if (desc == nullptr || a_desc == nullptr || b_desc == nullptr || c_desc == nullptr || d_desc == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null matmul descriptor or matrix layout");
  Problem& p = problem;
  p.op = read<Operation>(desc);
  p.a = read<Layout>(a_desc);
  p.b = read<Layout>(b_desc);
  p.c = read<Layout>(c_desc);
  p.d = read<Layout>(d_desc);
  const auto valid_op = [](std::int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!valid_op(p.op.transa) || !valid_op(p.op.transb)) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "invalid TRANSA or TRANSB");
  p.a_transposed = p.op.transa != CUBLAS_OP_N;
  p.b_transposed = p.op.transb != CUBLAS_OP_N;

  const std::uint64_t m = p.d.rows, n = p.d.cols;
  const std::uint64_t a_m = p.a_transposed ? p.a.cols : p.a.rows, k = p.a_transposed ? p.a.rows : p.a.cols;
  const std::uint64_t b_k = p.b_transposed ? p.b.cols : p.b.rows, b_n = p.b_transposed ? p.b.rows : p.b.cols;
  const auto size = [](const Layout& x) { return std::to_string(x.rows) + " x " + std::to_string(x.cols); };
  if (a_m != m || b_k != k || b_n != n || p.c.rows != m || p.c.cols != n)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api,
                  "sizes do not fit: A " + size(p.a) + (p.a_transposed ? " (T)" : " (N)") + ", B " + size(p.b) +
                      (p.b_transposed ? " (T)" : " (N)") + ", C " + size(p.c) + ", D " + size(p.d));
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "emulated sizes: m, n, k below 2^31");
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);

  const Operation& op = p.op;
  if (op.compute != CUBLAS_COMPUTE_32F && op.compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
      op.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "emulated compute types: CUBLAS_COMPUTE_32F, _PEDANTIC, _FAST_TF32");
  if (op.scale_type != CUDA_R_32F) return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "emulated scale type: CUDA_R_32F");
  if (p.a.type != p.b.type || p.c.type != p.d.type || !blas::is_supported(p.a.type) ||
      !blas::is_supported(p.d.type) || (p.a.type == CUDA_R_32F && p.d.type != CUDA_R_32F))
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                  "emulated types (A/B, C/D): (32F, 32F), (16BF, 16BF), (16BF, 32F); C and D alike");

  const char* epilogue = epilogue_name(op.epilogue);
  if (epilogue == nullptr)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                  "epilogue " + std::to_string(op.epilogue) + " not emulated (DEFAULT, BIAS, GELU_AUX_BIAS, DGELU, BGRADB are)");
  p.bias_type = op.bias_type == -1 ? p.d.type : static_cast<cudaDataType>(op.bias_type);
  if (uses_bias(op.epilogue)) {
    if (op.bias == nullptr)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, std::string("epilogue ") + epilogue + " needs BIAS_POINTER");
    const bool fp32_bias_for_bf16 = op.epilogue == CUBLASLT_EPILOGUE_BIAS && p.d.type == CUDA_R_16BF &&
                                    p.bias_type == CUDA_R_32F;
    if (p.bias_type != p.d.type && !fp32_bias_for_bf16)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                    std::string("BIAS_DATA_TYPE must be D's type (or CUDA_R_32F with a bf16 D, epilogue BIAS only); "
                                "epilogue ") + epilogue);
  }
  if (uses_aux(op.epilogue)) {
    if (op.aux == nullptr)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, std::string("epilogue ") + epilogue + " needs EPILOGUE_AUX_POINTER");
    if (op.aux_ld % 8 != 0 || op.aux_ld < static_cast<std::int64_t>(m))
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                    "EPILOGUE_AUX_LD = " + std::to_string(op.aux_ld) + " must be divisible by 8 and at least m = " +
                        std::to_string(m));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The checks that need alpha, beta, the algorithm and the pointers (cublasLtMatmul only). A null
// algo stands for the one the heuristic would choose with the default preference.
cublasStatus_t check_call(const char* api, const Problem& p, float alpha, float beta, const void* a, const void* b,
                          const void* c, const void* d, const cublasLtMatmulAlgo_t* algo) {
  Algorithm chosen = choose_algorithm(p, Preference{});
  if (algo != nullptr) {
    std::memcpy(&chosen, algo->data, sizeof chosen);
    if (chosen.tag != kAlgoTag)
      return reject(CUBLAS_STATUS_INVALID_VALUE, api, "algo does not come from cublasLtMatmulAlgoGetHeuristic");
    if (chosen.problem != problem_hash(p))
      return reject(CUBLAS_STATUS_INVALID_VALUE, api,
                    "algo was found for other descriptors than these (an algorithm is chosen for one problem)");
  }
  if (extra_refusal == LtRefusal::kMatmul && p.op.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, extra_refusal_reason());
  const void* pointers[kOperands] = {a, b, c, d, uses_bias(p.op.epilogue) ? p.op.bias : nullptr,
                                     uses_aux(p.op.epilogue) ? p.op.aux : nullptr};
  for (int operand = 0; operand < kOperands; ++operand) {
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(pointers[operand]);
    const std::uint32_t promised = chosen.alignment[operand];
    if (address % promised != 0)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                    std::string(kOperandNames[operand]) + " is " + std::to_string(alignment_of(pointers[operand])) +
                        "-byte aligned, but the algorithm was chosen for " + std::to_string(promised) +
                        (operand <= kD ? " (MIN_ALIGNMENT_" + std::string(kOperandNames[operand]) +
                                             "_BYTES of the heuristic's preference; 256 when not set)"
                                       : " (the alignment of the pointer the descriptor held for the heuristic)"));
  }
  if (p.op.epilogue == CUBLASLT_EPILOGUE_DGELU && beta != 0.0f)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "epilogue DGELU with beta != 0 is not emulated (undocumented)");
  if (p.op.epilogue == CUBLASLT_EPILOGUE_BGRADB && alpha != 1.0f)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "epilogue BGRADB with alpha != 1 is not emulated (undocumented)");
  const bool same_layout = p.c.type == p.d.type && p.c.rows == p.d.rows && p.c.cols == p.d.cols && p.c.ld == p.d.ld;
  if (c == d && !same_layout)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "C == D (in place) needs the same layout for both");
  const bool reads_ab = alpha != 0.0f && p.k > 0;
  if (!in_device_memory(d, p.d.type, p.d.rows, p.d.cols, p.d.ld) ||
      (beta != 0.0f && !in_device_memory(c, p.c.type, p.c.rows, p.c.cols, p.c.ld)) ||
      (reads_ab && (!in_device_memory(a, p.a.type, p.a.rows, p.a.cols, p.a.ld) ||
                    !in_device_memory(b, p.b.type, p.b.rows, p.b.cols, p.b.ld))))
    return reject(CUBLAS_STATUS_EXECUTION_FAILED, api, "A, B, C and D must lie in memory from cudaMalloc");
  const std::uint64_t bias_length = p.op.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.d.cols : p.d.rows;
  if (uses_bias(p.op.epilogue) && !in_device_memory(p.op.bias, p.bias_type, bias_length, 1, bias_length))
    return reject(CUBLAS_STATUS_EXECUTION_FAILED, api, "BIAS_POINTER must point to " + std::to_string(bias_length) +
                                                           " elements in memory from cudaMalloc");
  if (uses_aux(p.op.epilogue) && !in_device_memory(p.op.aux, p.d.type, p.d.rows, p.d.cols, p.op.aux_ld))
    return reject(CUBLAS_STATUS_EXECUTION_FAILED, api, "EPILOGUE_AUX_POINTER must point to an m x n matrix "
                                                       "(leading dimension EPILOGUE_AUX_LD) in memory from cudaMalloc");
  return CUBLAS_STATUS_SUCCESS;
}

// Runs a checked product and its epilogue (one counted "gemm" launch).
void run(const Problem& p, float alpha, float beta, const void* a, const void* b, const void* c, void* d) {
  const Operation& op = p.op;
  const bool tf32 = p.a.type == CUDA_R_32F && op.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  finish_pending_work();  // the stream's earlier work first
  const DeviceMemoryAccess device_memory;
  begin_launch("gemm");
  const blas::ScaledProduct product({a, p.a.type, p.a.ld, 0}, p.a_transposed, {b, p.b.type, p.b.ld, 0},
                                    p.b_transposed, 0, p.m, p.n, p.k, alpha, tf32);
  for (int col = 0; col < p.n; ++col)
    for (int row = 0; row < p.m; ++row) {
      float t = product(row, col);
      if (beta != 0.0f) t += beta * blas::load(c, p.c.type, row + col * p.c.ld);
      const long long aux_index = row + col * op.aux_ld;
      if (op.epilogue == CUBLASLT_EPILOGUE_BIAS) t += blas::load(op.bias, p.bias_type, row);
      if (op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        t += blas::load(op.bias, p.bias_type, row);
        blas::store(const_cast<void*>(op.aux), p.d.type, aux_index, t);
        t = gelu(t) * gelu_factor;
      }
      if (op.epilogue == CUBLASLT_EPILOGUE_DGELU)
        t *= gelu_derivative(blas::load(op.aux, p.d.type, aux_index)) * gelu_factor;
      blas::store(d, p.d.type, row + col * p.d.ld, t);
    }
  if (op.epilogue == CUBLASLT_EPILOGUE_BGRADB)
    for (int col = 0; col < p.n; ++col) {
      float sum = 0.0f;
      if (product.reads_ab())
        for (int i = 0; i < p.k; ++i) sum += product.op_b_column(col)[i];
      blas::store(const_cast<void*>(op.bias), p.bias_type, col, sum);
    }
  end_launch();
}

}  // namespace

void refuse_cublaslt_epilogues(LtRefusal refusal) { extra_refusal = refusal; }

void perturb_cublaslt_gelu(float relative) { gelu_factor = 1.0f + relative; }

LtSetups made_setups;  // counted by the API functions below; the host calls them from one thread

LtSetups cublaslt_setups() { return made_setups; }

}  // namespace simt

using simt::blas::reject;

// ---- handle and status -------------------------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "null handle pointer");
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "null handle");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLASLt returns cuBLAS's statuses; the names and strings are cuBLAS's (cublas.cpp).
const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// ---- descriptors -------------------------------------------------------------------------------

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "null descriptor pointer");
  *desc = new cublasLtMatmulDescOpaque_t{};
  simt::made_setups.descriptors++;
  simt::Operation op;
  op.compute = compute;
  op.scale_type = scale_type;
  simt::write(*desc, op);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  const char* api = "cublasLtMatmulDescSetAttribute";
  if (desc == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null descriptor");
  simt::Operation op = simt::read<simt::Operation>(desc);
  const simt::Field field = simt::operation_field(op, attr);
  if (field.data == nullptr)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "attribute " + std::to_string(attr) + " not emulated");
  const cublasStatus_t status = simt::set_field(api, field, buf, size);
  if (status == CUBLAS_STATUS_SUCCESS) simt::write(desc, op);
  return status;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  const char* api = "cublasLtMatrixLayoutCreate";
  if (layout == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null layout pointer");
  if (ld < 1 || static_cast<uint64_t>(ld) < rows)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api,
                  "ld = " + std::to_string(ld) + " but the (column-major) matrix has " + std::to_string(rows) + " rows");
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  simt::made_setups.layouts++;
  simt::write(*layout, simt::Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "null preference pointer");
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  simt::made_setups.preferences++;
  simt::write(*pref, simt::Preference{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

// The workspace limit (the emulation needs no workspace, so it changes nothing) and the minimum
// alignments of A, B, C and D (uint32_t, default 256; powers of two only: the documentation gives
// no other meaning), which the algorithms the heuristic hands out then hold cublasLtMatmul to.
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  const char* api = "cublasLtMatmulPreferenceSetAttribute";
  if (pref == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null preference");
  simt::Preference preference = simt::read<simt::Preference>(pref);
  simt::Field field{nullptr, nullptr, 0};
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: field = simt::field("MAX_WORKSPACE_BYTES", preference.max_workspace_bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: field = simt::field("MIN_ALIGNMENT_A_BYTES", preference.min_alignment[0]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: field = simt::field("MIN_ALIGNMENT_B_BYTES", preference.min_alignment[1]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: field = simt::field("MIN_ALIGNMENT_C_BYTES", preference.min_alignment[2]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: field = simt::field("MIN_ALIGNMENT_D_BYTES", preference.min_alignment[3]); break;
    default: return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, "attribute " + std::to_string(attr) + " not emulated");
  }
  const cublasStatus_t status = simt::set_field(api, field, buf, size);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  for (std::uint32_t alignment : preference.min_alignment)
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, api,
                    std::string(field.name) + " = " + std::to_string(alignment) + " is not a power of two (not emulated)");
  simt::write(pref, preference);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- heuristic and product ---------------------------------------------------------------------

// One algorithm (no workspace) for every configuration the emulation runs; none, with
// CUBLAS_STATUS_NOT_SUPPORTED or CUBLAS_STATUS_INVALID_VALUE, for one it refuses.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  const char* api = "cublasLtMatmulAlgoGetHeuristic";
  simt::made_setups.heuristic_queries++;
  if (count != nullptr) *count = 0;
  if (requested <= 0 || results == nullptr || count == nullptr || pref == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, api, "needs requestedAlgoCount > 0, a preference, results and a count");
  simt::Problem problem;
  const cublasStatus_t status = simt::check_problem(api, handle, desc, a_desc, b_desc, c_desc, d_desc, problem);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (simt::extra_refusal == simt::LtRefusal::kHeuristic && problem.op.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, api, simt::extra_refusal_reason());
  const simt::Algorithm algo = simt::choose_algorithm(problem, simt::read<simt::Preference>(pref));
  results[0] = cublasLtMatmulHeuristicResult_t{};
  static_assert(sizeof algo <= sizeof results[0].algo.data, "the algorithm must fit cublasLtMatmulAlgo_t");
  std::memcpy(results[0].algo.data, &algo, sizeof algo);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_desc, const void* B, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const char* api = "cublasLtMatmul";
  simt::Problem problem;
  cublasStatus_t status = simt::check_problem(api, handle, desc, a_desc, b_desc, c_desc, d_desc, problem);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (alpha == nullptr || beta == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, api, "null alpha or beta");
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  status = simt::check_call(api, problem, alpha_value, beta_value, A, B, C, D, algo);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (problem.m > 0 && problem.n > 0) simt::run(problem, alpha_value, beta_value, A, B, C, D);
  return CUBLAS_STATUS_SUCCESS;
}
