// Declarations shared by the .cpp files of the SIMT layer; kernels and tests never see these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace simt {

enum class WarpOp;  // device_api.h

// Largest dynamic shared memory a launch of `kernel` may ask for: 48 KiB unless raised with
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
std::size_t max_dynamic_shared_bytes(const void* kernel);

// While one of these exists, memory from cudaMalloc is addressable. The rest of the time it
// is poisoned for AddressSanitizer, so host code that dereferences a device pointer (which
// faults on a GPU) fails the emulated test too. Kernel launches, copies, memsets and cuBLAS
// calls hold one. Without AddressSanitizer this does nothing.
class DeviceMemoryAccess {
 public:
  DeviceMemoryAccess();
  ~DeviceMemoryAccess();
  DeviceMemoryAccess(const DeviceMemoryAccess&) = delete;
  DeviceMemoryAccess& operator=(const DeviceMemoryAccess&) = delete;
};

// True when [pointer, pointer + bytes) lies inside one cudaMalloc allocation.
bool is_device_range(const void* pointer, std::size_t bytes);

// Work another emulated library left on the stream to finish later (the emulated NCCL's
// collectives, which wait for the other ranks): as on a GPU, the stream's later work (launches,
// cuBLAS products, copies, memsets, events) and cudaStreamSynchronize, cudaDeviceSynchronize and
// cudaFree wait for it, and cudaStreamQuery answers cudaErrorNotReady until it is done. The
// emulation has one queue for all streams.
class PendingWork {
 public:
  explicit PendingWork(const void* owner) : owner(owner) {}
  virtual ~PendingWork() = default;
  virtual bool poll() = 0;    // makes progress without blocking; true once done
  virtual void finish() = 0;  // blocks until done
  const void* const owner;    // what the work belongs to (drop_pending_work)
};
void enqueue_pending_work(std::unique_ptr<PendingWork> work);
// Blocks until all pending work is done, in order.
void finish_pending_work();
// Makes progress on the pending work; true when none is left.
bool poll_pending_work();
// Forgets the pending work of `owner` unfinished (an aborted communicator's).
void drop_pending_work(const void* owner);
// ---- warp-level matrix instructions (tensor_cores.cpp) -------------------------------------------
// Joins the warp-wide operation `op` (kMma or kLdmatrix) with the given qualifiers: waits, as a
// warp operation over all 32 lanes, until every lane of the running thread's warp has called it
// with the same op and qualifiers; the last lane to arrive first runs complete(w), w being the
// warp's index in the block, which does the whole warp's work. A lane that exits, waits
// elsewhere or is missing (a block whose size is not a multiple of 32) fails the launch.
void warp_matrix_operation(WarpOp op, int qualifiers, void (*complete)(unsigned warp));

// Whether [pointer, pointer + bytes) lies in the running block's shared memory (its dynamic area
// or a __shared__ variable). Only inside a kernel.
bool is_shared_range(const void* pointer, std::size_t bytes);

// The index in its block of the running thread's warp.
unsigned warp_of_running_thread();

// ---- shared-memory requests (counting.cpp) ------------------------------------------------------
struct ThreadPosition {
  std::uint64_t block;  // serial number of the block among all blocks run
  unsigned warp, lane;
  std::uint64_t epoch;  // synchronisation points the thread has passed, plus one
};

// Whether [pointer, pointer + bytes) is shared memory of the running kernel thread's block; if
// so, *position says where that thread is. False outside kernels.
bool running_shared_access(const void* pointer, std::size_t bytes, ThreadPosition* position);
// Where the running kernel thread is; false outside kernels.
bool running_thread_position(ThreadPosition* position);

// ---- asynchronous copies (async_copy.cpp) --------------------------------------------------------
// Whether the running kernel thread has started cp.async copies it has not waited for (the
// scheduler refuses its exit).
bool running_thread_has_copies_in_flight();

// ---- round trips to device memory (counting.cpp) --------------------------------------------------
// A cp.async of the running thread starting: its bytes count as read (src) and as a shared store
// (dst) of the launch.
void note_async_copy(const void* dst, const void* src, std::size_t bytes);
// A cp.async.wait_group completing a group of copies; `exposed` when the thread has passed no
// synchronisation point (no warp operation, no barrier) since the group's last copy started.
void note_async_wait(bool exposed);
// Every thread of block `block` (its serial) has arrived at a __syncthreads().
void note_barrier(std::uint64_t block);

// The emulated ldmatrix's shared-memory request: `count` matrices, each 8 rows of 16 bytes read
// as one phase; rows[8i + r] is row r of matrix i.
void note_ldmatrix(const unsigned char* const* rows, int count);

}  // namespace simt
