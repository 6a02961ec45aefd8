// Per-launch sets of the device bytes read and written (counting.h), and the access hooks that
// GCC's -fsanitize=thread instrumentation calls in the counting build.
#include "counting.h"

#include <cstdint>
#include <unordered_set>

#include "internal.h"

namespace simt {
namespace {

bool counting = false;    // between start_counting and stop_counting
bool in_launch = false;   // inside a counted launch
bool hooks_seen = false;  // an instrumented access has reached a hook
std::string launch_kernel;
std::unordered_set<std::uintptr_t> read_bytes, written_bytes;  // of the running launch
std::vector<CountedLaunch> launches;

// Notes the `bytes` bytes at `address` when they are device memory touched by a counted launch.
void record(const void* address, std::size_t bytes, bool write) {
  hooks_seen = true;
  if (!in_launch || !is_device_range(address, bytes)) return;
  auto& set = write ? written_bytes : read_bytes;
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  for (std::size_t i = 0; i < bytes; ++i) set.insert(start + i);
}

}  // namespace

bool counting_compiled() { return hooks_seen; }

void start_counting() {
  counting = true;
  launches.clear();
}

std::vector<CountedLaunch> stop_counting() {
  counting = false;
  return std::move(launches);
}

void begin_launch(const char* kernel) {
  if (!counting) return;
  in_launch = true;
  launch_kernel = kernel;
  read_bytes.clear();
  written_bytes.clear();
}

void end_launch() {
  if (!in_launch) return;
  in_launch = false;
  launches.push_back({launch_kernel, read_bytes.size(), written_bytes.size()});
}

}  // namespace simt

// ---- the hooks of -fsanitize=thread (GCC's names and signatures) -----------------------------
extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
#define SIMT_ACCESS_HOOKS(N)                                                               \
  void __tsan_read##N(void* p) { simt::record(p, N, false); }                             \
  void __tsan_write##N(void* p) { simt::record(p, N, true); }                             \
  void __tsan_unaligned_read##N(void* p) { simt::record(p, N, false); }                   \
  void __tsan_unaligned_write##N(void* p) { simt::record(p, N, true); }
SIMT_ACCESS_HOOKS(1)
SIMT_ACCESS_HOOKS(2)
SIMT_ACCESS_HOOKS(4)
SIMT_ACCESS_HOOKS(8)
SIMT_ACCESS_HOOKS(16)
#undef SIMT_ACCESS_HOOKS
void __tsan_read_range(void* p, unsigned long n) { simt::record(p, n, false); }
void __tsan_write_range(void* p, unsigned long n) { simt::record(p, n, true); }
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}
