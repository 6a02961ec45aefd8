// bench/bench_gpu_backend.cu — ./bench_gpu's CUDA translation unit: the CUDA backend (gpt2.cu) that
// ./train links, and beside it the benchmark's own view of a training step on the watched op set
// (bench/observed_ops.cuh): each op's declared launches for the cost model (bench/step_traffic.cuh)
// and its time between CUDA events (bench/step_timing.cuh). ./bench_gpu links this object instead
// of build/gpt2_cuda.o; ./train and ./eval never compile anything of bench/.
#include "gpt2.cu"

#include "bench/step_timing.cuh"
#include "bench/step_traffic.cuh"
