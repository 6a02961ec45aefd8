// The kernels whose sm_90 PTX and ptxas report the cost model is checked against
// (test/traffic_test.cu): `make` compiles this file with nvcc into build/ptx/ (docs/cuda.md,
// "The cost model"). Only instantiations: the launchers instantiate every kernel they can launch.
#include "attention.cuh"

template void gpu::attention_forward<bf16>(bf16*, float*, const bf16*, int, int, int, int, cudaStream_t);
template void gpu::attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*, float*, int,
                                            int, int, int, cudaStream_t);
