// Declarations shared by the .cpp files of the SIMT layer; kernels and tests never see these.
#pragma once

#include <cstddef>
#include <memory>

namespace simt {

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

}  // namespace simt
