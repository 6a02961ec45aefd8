// Helpers for the CUDA kernel tests (test/cuda_test_*.cu). The same test source builds twice:
// natively with nvcc (build/cuda/) and for the CPU with the SIMT emulation layer (build/emu/,
// see docs/simt.md). In the emulated build a device is always available; natively, a machine
// without a GPU (like CI) skips every test that needs one.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

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
