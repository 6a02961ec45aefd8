// Test control of the emulated cuBLASLt (cublaslt.cpp), force-included through simt.h: besides
// what its documentation rules out, the emulation can be told to refuse every product with an
// epilogue, so that a test reaches the path its caller takes when a GPU's cuBLASLt has no
// algorithm (kHeuristic: the heuristic returns none) or refuses the one it offered at the call
// (kMatmul: cublasLtMatmul returns CUBLAS_STATUS_NOT_SUPPORTED). Products with the DEFAULT
// epilogue are never refused this way. And its GELU can be put off by a relative error, as a
// GPU's may be (the hardware's approximate tanh: about 2^-11), to measure what the callers'
// tolerances leave.
#pragma once

namespace simt {

enum class LtRefusal { kNone, kHeuristic, kMatmul };

// Until the next call, refuses products with an epilogue as `refusal` says.
void refuse_cublaslt_epilogues(LtRefusal refusal);

// Until the next call, the GELU_AUX_BIAS epilogue's GELU(u) and DGELU's GELU'(aux) are multiplied
// by (1 + relative) in fp32 (0: exact, the default).
void perturb_cublaslt_gelu(float relative);

}  // namespace simt
