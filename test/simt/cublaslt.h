// Test control of the emulated cuBLASLt (cublaslt.cpp), force-included through simt.h: besides
// what its documentation rules out, the emulation can be told to refuse every product with an
// epilogue, so that a test reaches the path its caller takes when a GPU's cuBLASLt has no
// algorithm (kHeuristic: the heuristic returns none) or refuses the one it offered at the call
// (kMatmul: cublasLtMatmul returns CUBLAS_STATUS_NOT_SUPPORTED). Products with the DEFAULT
// epilogue are never refused this way.
#pragma once

namespace simt {

enum class LtRefusal { kNone, kHeuristic, kMatmul };

// Until the next call, refuses products with an epilogue as `refusal` says.
void refuse_cublaslt_epilogues(LtRefusal refusal);

}  // namespace simt
