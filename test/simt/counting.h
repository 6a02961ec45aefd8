// Counting the global-memory traffic of each launch (test/traffic_test.cu, docs/simt.md
// "Counting traffic").
//
// In the counting build every load and store of the test's own code and of the emulated cuBLAS
// and cuBLASLt is compiled with GCC's ThreadSanitizer instrumentation (-fsanitize=thread),
// which calls a hook before each access; this layer defines those hooks itself (no
// ThreadSanitizer runtime is linked) and, between start_counting() and stop_counting(), records
// the bytes of device memory (from cudaMalloc) that each kernel launch or cuBLAS(Lt) product
// reads and writes, each byte once per launch. In every other build the hooks are never called and counting records launches
// with zero bytes, so counting_compiled() tells a test whether its numbers mean anything.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace simt {

// One launch or cuBLAS call while counting.
struct CountedLaunch {
  std::string kernel;             // the kernel expression as written at the launch, or "gemm"
  std::size_t bytes_read = 0;     // distinct bytes of device memory read
  std::size_t bytes_written = 0;  // distinct bytes of device memory written
  // Shared memory, as the warps of a GPU would access it: the warp-level requests (the lanes'
  // k-th access between two synchronisation points form one, and one ldmatrix is one), the
  // wavefronts they take (a request is served in phases of 128 bytes, the lanes that fit one:
  // 32 for accesses up to 4 bytes, 16 for 8 bytes, 8 for 16 bytes and for each ldmatrix
  // matrix; a phase takes as many wavefronts as the most distinct 4-byte words any of the 32
  // banks holds, word w being in bank w mod 32), and the wavefronts without bank conflicts
  // (one per phase), so conflicts = shared_wavefronts − shared_ideal_wavefronts.
  std::size_t shared_requests = 0;
  std::size_t shared_wavefronts = 0;
  std::size_t shared_ideal_wavefronts = 0;
  // Round trips to device memory that a block waited for at a barrier, over all blocks: the
  // barriers ending a phase (since the block's previous barrier) in which a thread of the block
  // read device memory itself, or waited (cp.async.wait_group) for copies it started with no
  // synchronisation point in between (nothing overlapped their latency).
  std::size_t round_trips = 0;
  // The launch's threads per block and dynamic shared memory (0 for a cuBLAS call), which
  // traffic_test compares with the block a kernel's declaration gives.
  std::size_t threads_per_block = 0;
  std::size_t dynamic_shared_bytes = 0;
};

// True when this binary's accesses reach the hooks (the counting build).
bool counting_compiled();
// Starts recording launches; stop_counting() returns those since then, in launch order.
void start_counting();
std::vector<CountedLaunch> stop_counting();

// Called by the scheduler around each grid (with its block's threads and dynamic shared bytes)
// and by the emulated cuBLAS and cuBLASLt around each product.
void begin_launch(const char* kernel, std::size_t threads_per_block = 0, std::size_t dynamic_shared_bytes = 0);
void end_launch();

}  // namespace simt
