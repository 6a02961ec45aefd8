// The CUDA runtime API on the CPU: one emulated device whose memory is host memory.
//
// The toolkit's cuda_runtime_api.h declares these functions; defining them here against that
// same header guarantees the signatures match. Work is synchronous, so streams and events only
// exist to be created, waited on (nothing to wait for) and destroyed; events record host time.
// What a GPU would reject (freeing a foreign pointer, copying outside an allocation, copying in
// the wrong direction) is rejected with the same error code, plus a line on stderr saying why.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <set>

#include "internal.h"
#include "sanitizer.h"

struct CUstream_st {};  // streams carry no state: all work completes before the call returns

struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
};

namespace simt {
namespace {

constexpr std::size_t kGlobalMemoryBytes = std::size_t{16} << 30;  // unless SIMT_DEVICE_MEMORY says otherwise
constexpr std::size_t kDefaultDynamicSharedBytes = 48 * 1024;
constexpr std::size_t kOptInDynamicSharedBytes = 227 * 1024;
constexpr std::size_t kDeviceAllocationAlignment = 256;  // what cudaMalloc guarantees
constexpr unsigned char kUninitialisedByte = 0xff;       // NaN as float, -1 as integer

std::map<const char*, std::size_t> device_allocations;  // cudaMalloc: base -> bytes
std::set<void*> pinned_allocations;                      // cudaMallocHost / cudaHostAlloc
std::set<CUstream_st*> streams;
std::set<CUevent_st*> events;
std::map<const void*, std::size_t> dynamic_shared_limits;  // set by cudaFuncSetAttribute
std::size_t device_bytes_in_use = 0;
cudaError_t last_error = cudaSuccess;
int device_access_depth = 0;  // DeviceMemoryAccess objects alive

// The device's memory in bytes: SIMT_DEVICE_MEMORY when set (so that a test can run a program
// on a small device), else 16 GiB. cudaMalloc refuses what does not fit beside what is in use,
// as a GPU does.
std::size_t device_capacity() {
  static const std::size_t capacity = [] {
    const char* bytes = std::getenv("SIMT_DEVICE_MEMORY");
    return bytes != nullptr && *bytes != '\0' ? static_cast<std::size_t>(std::strtoull(bytes, nullptr, 10))
                                              : kGlobalMemoryBytes;
  }();
  return capacity;
}

std::deque<std::unique_ptr<PendingWork>> pending_work;  // in the order it was enqueued

// Says on stderr why a call fails, remembers the error for cudaGetLastError and returns it.
cudaError_t fail(cudaError_t error, const char* why) {
  std::fprintf(stderr, "simt: %s (%s)\n", why, cudaGetErrorName(error));
  last_error = error;
  return error;
}

void set_poisoned(const void* memory, std::size_t bytes, bool poisoned) {
#if SIMT_ASAN
  if (poisoned)
    ASAN_POISON_MEMORY_REGION(memory, bytes);
  else
    ASAN_UNPOISON_MEMORY_REGION(memory, bytes);
#else
  (void)memory, (void)bytes, (void)poisoned;
#endif
}

void set_all_device_memory_poisoned(bool poisoned) {
  for (const auto& [base, bytes] : device_allocations) set_poisoned(base, bytes, poisoned);
}

// Whether [pointer, pointer + bytes) may be one side of a copy: the device side must lie inside
// one allocation, the host side must not be device memory.
bool on_expected_side(const void* pointer, std::size_t bytes, bool device) {
  const bool in_allocation = is_device_range(pointer, bytes);
  const bool touches_device = is_device_range(pointer, 0);
  return device ? in_allocation : !touches_device;
}

// Which sides of a copy of this kind are device memory; false for a kind without fixed sides.
bool copy_sides(cudaMemcpyKind kind, bool* destination_on_device, bool* source_on_device) {
  switch (kind) {
    case cudaMemcpyHostToHost: *destination_on_device = false; *source_on_device = false; return true;
    case cudaMemcpyHostToDevice: *destination_on_device = true; *source_on_device = false; return true;
    case cudaMemcpyDeviceToHost: *destination_on_device = false; *source_on_device = true; return true;
    case cudaMemcpyDeviceToDevice: *destination_on_device = true; *source_on_device = true; return true;
    default: return false;
  }
}

}  // namespace

bool is_device_range(const void* pointer, std::size_t bytes) {
  const char* start = static_cast<const char*>(pointer);
  auto after = device_allocations.upper_bound(start);
  if (after == device_allocations.begin()) return false;
  const auto& [base, size] = *std::prev(after);
  return start < base + size && bytes <= static_cast<std::size_t>(base + size - start);
}

void enqueue_pending_work(std::unique_ptr<PendingWork> work) { pending_work.push_back(std::move(work)); }

void finish_pending_work() {
  while (!pending_work.empty()) {
    const std::unique_ptr<PendingWork> work = std::move(pending_work.front());
    pending_work.pop_front();
    work->finish();
  }
}

bool poll_pending_work() {
  while (!pending_work.empty()) {
    if (!pending_work.front()->poll()) return false;
    pending_work.pop_front();
  }
  return true;
}

void drop_pending_work(const void* owner) {
  pending_work.erase(std::remove_if(pending_work.begin(), pending_work.end(),
                                    [&](const std::unique_ptr<PendingWork>& work) { return work->owner == owner; }),
                     pending_work.end());
}

std::size_t max_dynamic_shared_bytes(const void* kernel) {
  const auto limit = dynamic_shared_limits.find(kernel);
  return limit == dynamic_shared_limits.end() ? kDefaultDynamicSharedBytes : limit->second;
}

DeviceMemoryAccess::DeviceMemoryAccess() {
  if (device_access_depth++ == 0) set_all_device_memory_poisoned(false);
}

DeviceMemoryAccess::~DeviceMemoryAccess() {
  if (--device_access_depth == 0) set_all_device_memory_poisoned(true);
}

}  // namespace simt

// Sanitizer settings of emulated test binaries (environment variables still override them).
// Memory a test never frees is harmless on a GPU, and a test that fails mid-way abandons what
// it allocated: leak reports would only be noise, so LeakSanitizer is off. UBSan prints the
// stack with each report, so that an error inside a kernel names the kernel.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1"; }

using simt::fail;

// ---- device and errors -------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null pointer");
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice: the emulator has only device 0");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
  *device = 0;
  return cudaSuccess;
}

// An Ampere-class device (compute capability 8.0, so bf16 paths are taken) with few SMs:
// grid sizes derived from multiProcessorCount stay small, so grid-stride loops wrap around.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null pointer");
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: the emulator has only device 0");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "SIMT emulator (CPU)");
  prop->totalGlobalMem = simt::device_capacity();
  prop->sharedMemPerBlock = simt::kDefaultDynamicSharedBytes;
  prop->sharedMemPerBlockOptin = simt::kOptInDynamicSharedBytes;
  prop->sharedMemPerMultiprocessor = simt::kOptInDynamicSharedBytes + 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->multiProcessorCount = 4;
  prop->major = 8;
  prop->minor = 0;
  prop->l2CacheSize = 40 << 20;
  prop->totalConstMem = 64 << 10;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

// The attributes beyond cudaDeviceProp: a program asks for one (the clock, for bench_gpu's cost
// model) only of a device the cost model knows by name, which the emulator is not; every one is
// refused.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  return fail(cudaErrorNotSupported, "cudaDeviceGetAttribute: the emulator has no attributes");
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: null pointer");
  *total = simt::device_capacity();
  *free = simt::device_capacity() - simt::device_bytes_in_use;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  simt::finish_pending_work();
  return cudaSuccess;
}

cudaError_t cudaDeviceReset() { return cudaSuccess; }

cudaError_t cudaGetLastError() {
  const cudaError_t error = simt::last_error;
  simt::last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return simt::last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    default: return "unrecognized error code";
  }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: null kernel");
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // performance hints
  if (value < 0 || static_cast<std::size_t>(value) > simt::kOptInDynamicSharedBytes)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: dynamic shared memory above the device's 227 KiB");
  simt::dynamic_shared_limits[func] = static_cast<std::size_t>(value);
  return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------------------------

// Fresh device memory is filled with 0xff bytes (NaN as float): a GPU gives no guarantee about
// its contents, and a kernel that reads it before writing should fail its test.
cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  if (pointer == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > simt::device_capacity() - simt::device_bytes_in_use)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: the device's memory is used up (SIMT_DEVICE_MEMORY)");
  void* memory = nullptr;
  if (posix_memalign(&memory, simt::kDeviceAllocationAlignment, bytes) != 0)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of host memory");
  std::memset(memory, simt::kUninitialisedByte, bytes);
  simt::device_allocations[static_cast<const char*>(memory)] = bytes;
  simt::device_bytes_in_use += bytes;
  if (simt::device_access_depth == 0) simt::set_poisoned(memory, bytes, true);
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  simt::finish_pending_work();
  const auto allocation = simt::device_allocations.find(static_cast<const char*>(pointer));
  if (allocation == simt::device_allocations.end())
    return fail(cudaErrorInvalidValue, "cudaFree: not a pointer returned by cudaMalloc");
  simt::set_poisoned(pointer, allocation->second, false);
  simt::device_bytes_in_use -= allocation->second;
  simt::device_allocations.erase(allocation);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  if (pointer == nullptr) return fail(cudaErrorInvalidValue, "cudaHostAlloc: null pointer");
  *pointer = std::malloc(bytes == 0 ? 1 : bytes);
  if (*pointer == nullptr) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: out of host memory");
  simt::pinned_allocations.insert(*pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) { return cudaHostAlloc(pointer, bytes, 0); }

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  if (simt::pinned_allocations.erase(pointer) == 0)
    return fail(cudaErrorInvalidValue, "cudaFreeHost: not a pointer returned by cudaMallocHost");
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  bool dst_on_device = false;
  bool src_on_device = false;
  if (kind == cudaMemcpyDefault) {
    dst_on_device = simt::is_device_range(dst, 0);
    src_on_device = simt::is_device_range(src, 0);
  } else if (!simt::copy_sides(kind, &dst_on_device, &src_on_device)) {
    return fail(cudaErrorInvalidValue, "cudaMemcpy: unknown cudaMemcpyKind");
  }
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue, "cudaMemcpy: null pointer");
  simt::finish_pending_work();
  if (!simt::on_expected_side(dst, count, dst_on_device))
    return fail(cudaErrorInvalidValue, dst_on_device
                    ? "cudaMemcpy: the destination range is not inside one cudaMalloc allocation"
                    : "cudaMemcpy: the destination is device memory but the kind says host");
  if (!simt::on_expected_side(src, count, src_on_device))
    return fail(cudaErrorInvalidValue, src_on_device
                    ? "cudaMemcpy: the source range is not inside one cudaMalloc allocation"
                    : "cudaMemcpy: the source is device memory but the kind says host");
  const simt::DeviceMemoryAccess access;
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* pointer, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!simt::is_device_range(pointer, count))
    return fail(cudaErrorInvalidValue, "cudaMemset: the range is not inside one cudaMalloc allocation");
  simt::finish_pending_work();
  const simt::DeviceMemoryAccess access;
  std::memset(pointer, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t count, cudaStream_t) {
  return cudaMemset(pointer, value, count);
}

// ---- streams and events ------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
  *stream = new CUstream_st;
  simt::streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  return cudaStreamCreate(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (simt::streams.erase(stream) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a stream from cudaStreamCreate");
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream != nullptr && simt::streams.count(stream) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  simt::finish_pending_work();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (stream != nullptr && simt::streams.count(stream) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: unknown stream");
  return simt::poll_pending_work() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return fail(cudaErrorInvalidValue, "cudaEventCreate: null pointer");
  *event = new CUevent_st{std::chrono::steady_clock::now()};
  simt::events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (simt::events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event");
  simt::finish_pending_work();
  event->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (simt::events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: unknown event");
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null pointer");
  if (simt::events.count(start) == 0 || simt::events.count(end) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: unknown event");
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (simt::events.erase(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: unknown event");
  delete event;
  return cudaSuccess;
}
