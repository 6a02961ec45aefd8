// Helpers for the CUDA kernel tests (test/cuda_test_*.cu). The same test source builds twice:
// natively with nvcc (build/cuda/) and for the CPU with the SIMT emulation layer (build/emu/,
// see docs/simt.md). In the emulated build a device is always available; natively, a machine
// without a GPU (like CI) skips every test that needs one.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

// True when a CUDA device can run kernels. Any error (no driver, no device) counts as none.
inline bool cuda_device_available() {
  int count = 0;
  const bool available = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();  // a failed query must not leak into the test's own error checks
  return available;
}

// The running test as "Suite.Name", for skip messages.
inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info == nullptr ? "?" : std::string(info->test_suite_name()) + "." + info->name();
}

// First statement of every test that runs kernels: skips it when there is no device.
#define REQUIRE_CUDA_DEVICE()                                                     \
  do {                                                                            \
    if (!cuda_device_available())                                                 \
      GTEST_SKIP() << "no CUDA device: skipping " << current_test_name();         \
  } while (0)

// A new device copy of `host` (cudaMalloc; the test frees it), and n elements of device memory
// copied back, for the tests that hold raw device pointers.
template <typename T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}
