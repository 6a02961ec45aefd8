// The SIMT emulation's stand-in for cuda/async_copy.cuh (in the repository), which wraps PTX that a
// CPU cannot run: the emulated build compiles this file in its place (the Makefile copies it over
// build/emu/src/cuda/async_copy.cuh). The same functions, implemented in async_copy.cpp from the PTX
// ISA's semantics (docs/simt.md, "Asynchronous copies").
#pragma once

namespace simt {
// Starts copying `bytes` (4, 8 or 16) bytes from device memory at src to the block's shared
// memory at dst (cp.async.{ca,cg}.shared.global); the destination reads as 0xff bytes until the
// copy's group is waited for.
void cp_async(void* dst, const void* src, int bytes);
// cp.async.commit_group: the running thread's copies since its last commit become one group.
void cp_async_commit();
// cp.async.wait_group: completes the running thread's oldest groups until at most `pending` remain.
void cp_async_wait(int pending);
}  // namespace simt

template <int BYTES>
__device__ inline void cp_async(void* dst, const void* src) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    simt::cp_async(dst, src, BYTES);
}

__device__ inline void cp_async_commit() { simt::cp_async_commit(); }

template <int N>
__device__ inline void cp_async_wait() {
    simt::cp_async_wait(N);
}
