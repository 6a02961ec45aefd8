// Test control of the emulated cuBLASLt (cublaslt.cpp), force-included through simt.h: besides
// what its documentation rules out, the emulation can be told to refuse every product with an
// epilogue, so that a test reaches the path its caller takes when a GPU's cuBLASLt has no
// algorithm (kHeuristic: the heuristic returns none) or refuses the one it offered at the call
// (kMatmul: cublasLtMatmul returns CUBLAS_STATUS_NOT_SUPPORTED). Products with the DEFAULT
// epilogue are never refused this way. And its GELU can be put off by a relative error, as a
// GPU's may be (the hardware's approximate tanh: about 2^-11), to measure what the callers'
// tolerances leave. And it counts the set-up objects a program makes (cublaslt_setups), so that a
// test can see how often they are made.
#pragma once

namespace simt {

enum class LtRefusal { kNone, kHeuristic, kMatmul };

// Until the next call, refuses products with an epilogue as `refusal` says.
void refuse_cublaslt_epilogues(LtRefusal refusal);

// Until the next call, the GELU_AUX_BIAS epilogue's GELU(u) and DGELU's GELU'(aux) are multiplied
// by (1 + relative) in fp32 (0: exact, the default).
void perturb_cublaslt_gelu(float relative);

// How many of each set-up object the emulated cuBLASLt has made since the program started:
// matmul descriptors, matrix layouts, preferences, and calls of the heuristic.
struct LtSetups {
  long descriptors = 0, layouts = 0, preferences = 0, heuristic_queries = 0;
};
LtSetups cublaslt_setups();

}  // namespace simt
