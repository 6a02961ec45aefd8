// The kernels whose sm_90 PTX and ptxas report the cost model is checked against
// (test/traffic_test.cu): `make` compiles this file with nvcc into build/ptx/ (docs/cuda.md,
// "The cost model"). It is the CUDA backend itself, so the PTX holds every kernel a training
// step launches, in the instantiations the backend makes.
#include "gpt2.cu"
