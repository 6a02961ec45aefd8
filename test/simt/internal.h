// Declarations shared by the .cpp files of the SIMT layer; kernels and tests never see these.
#pragma once

#include <cstddef>

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

}  // namespace simt
