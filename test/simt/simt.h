// SIMT emulation of CUDA for CPU-only test builds: force-included (g++ -include) into every
// translation unit of the emulated build, before any other header. See docs/simt.md.
//
// The CUDA toolkit's own headers supply the types and declarations: uint3, dim3, float4, the
// runtime API (implemented in runtime.cpp), cuBLAS (cublas.cpp), cuBLASLt (cublaslt.cpp) and the
// bf16 type with its host arithmetic. This header adds what only exists on a GPU: the thread coordinates,
// barriers, warp operations, atomics and intrinsics (device_api.h), the WMMA warp matrix
// operations (wmma.h), the launch helper
// that rewritten `<<<...>>>` launches call (launch.h), and the tests' control of the emulated
// cuBLASLt (cublaslt.h).
#pragma once

// Lets test code ask whether it runs on the emulator. Kernels never need to.
#define SIMT_EMULATION 1

// Shared-memory declarations that the source rewrite leaves alone (at namespace scope, or
// with several declarators) become ordinary statics: still one copy shared by the threads of
// the block running at the time. The toolkit headers keep a __shared__ that is already defined.
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include "device_api.h"
#include "wmma.h"
#include "launch.h"
#include "cublaslt.h"
