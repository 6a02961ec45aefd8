// Per-launch sets of the device bytes read and written (counting.h), and the access hooks that
// GCC's -fsanitize=thread instrumentation calls in the counting build.
#include "counting.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
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

// ---- shared-memory requests ----

constexpr unsigned kBanks = 32;
constexpr std::size_t kPhaseBytes = 128;  // one wavefront: 32 banks of 4 bytes

struct LaneAccess {
  unsigned lane;
  std::uintptr_t address;
  std::size_t bytes;
};
// A warp-level request: (block, warp, epoch, k) for the k-th shared access of the warp's lanes
// since their last synchronisation point.
using RequestKey = std::tuple<std::uint64_t, unsigned, std::uint64_t, std::uint64_t>;
std::map<RequestKey, std::vector<LaneAccess>> requests;  // of the running launch
// Per thread (block, warp, lane): its epoch and how many shared accesses it has made in it.
std::map<std::tuple<std::uint64_t, unsigned, unsigned>, std::pair<std::uint64_t, std::uint64_t>> thread_accesses;
CountedLaunch shared_totals;  // the running launch's shared counts and round trips

// The block (serial) whose current phase, since its last barrier, waited for device memory.
std::uint64_t block_waiting_for_memory = 0;

// The running kernel thread waits for device memory in the current phase of its block.
void note_wait_for_memory() {
  ThreadPosition at;
  if (running_thread_position(&at)) block_waiting_for_memory = at.block;
}

// Wavefronts of one phase: the most distinct 4-byte words that any bank holds (at least one).
std::size_t phase_wavefronts(const std::vector<LaneAccess>& phase) {
  std::map<unsigned, std::unordered_set<std::uintptr_t>> words_of_bank;
  for (const LaneAccess& access : phase)
    for (std::uintptr_t word = access.address / 4; word <= (access.address + access.bytes - 1) / 4; ++word)
      words_of_bank[word % kBanks].insert(word);
  std::size_t most = 1;
  for (const auto& [bank, words] : words_of_bank) most = std::max(most, words.size());
  return most;
}

// Adds one warp-level request, served in phases of the lanes whose accesses fit 128 bytes.
void count_request(const std::vector<LaneAccess>& lanes) {
  std::size_t widest = 1;
  for (const LaneAccess& access : lanes) widest = std::max(widest, access.bytes);
  const unsigned lanes_per_phase = widest <= 4 ? kBanks : (unsigned)(kPhaseBytes / widest);
  std::map<unsigned, std::vector<LaneAccess>> phases;
  for (const LaneAccess& access : lanes) phases[access.lane / lanes_per_phase].push_back(access);
  shared_totals.shared_requests++;
  for (const auto& [index, phase] : phases) {
    shared_totals.shared_wavefronts += phase_wavefronts(phase);
    shared_totals.shared_ideal_wavefronts++;
  }
}

// Notes a shared-memory access of the running kernel thread as its lane's part of a request.
void record_shared(const void* address, std::size_t bytes) {
  ThreadPosition at;
  if (!running_shared_access(address, bytes, &at)) return;
  auto& [epoch, count] = thread_accesses[{at.block, at.warp, at.lane}];
  if (epoch != at.epoch) epoch = at.epoch, count = 0;
  requests[{at.block, at.warp, at.epoch, count++}].push_back(
      {at.lane, reinterpret_cast<std::uintptr_t>(address), bytes});
}

// Adds the device bytes [address, address + bytes) to the launch's bytes read or written.
void add_bytes(const void* address, std::size_t bytes, bool write) {
  auto& set = write ? written_bytes : read_bytes;
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  for (std::size_t i = 0; i < bytes; ++i) set.insert(start + i);
}

// Notes the `bytes` bytes at `address` when they are device memory touched by a counted launch
// (a read by a kernel thread: a wait for memory in its block's phase), or shared memory.
void record(const void* address, std::size_t bytes, bool write) {
  hooks_seen = true;
  if (!in_launch) return;
  if (!is_device_range(address, bytes)) {
    record_shared(address, bytes);
    return;
  }
  if (!write) note_wait_for_memory();
  add_bytes(address, bytes, write);
}

}  // namespace

void note_async_copy(const void* dst, const void* src, std::size_t bytes) {
  if (!in_launch) return;
  add_bytes(src, bytes, false);
  record_shared(dst, bytes);
}

void note_async_wait(bool exposed) {
  if (in_launch && exposed) note_wait_for_memory();
}

void note_barrier(std::uint64_t block) {
  if (!in_launch || block != block_waiting_for_memory) return;
  shared_totals.round_trips++;
  block_waiting_for_memory = 0;
}

void note_ldmatrix(const unsigned char* const* rows, int count) {
  if (!in_launch) return;
  shared_totals.shared_requests++;
  for (int i = 0; i < count; ++i) {
    std::vector<LaneAccess> phase;
    for (unsigned r = 0; r < 8; ++r) phase.push_back({r, reinterpret_cast<std::uintptr_t>(rows[8 * i + r]), 16});
    shared_totals.shared_wavefronts += phase_wavefronts(phase);
    shared_totals.shared_ideal_wavefronts++;
  }
}

bool counting_compiled() { return hooks_seen; }

void start_counting() {
  counting = true;
  launches.clear();
}

std::vector<CountedLaunch> stop_counting() {
  counting = false;
  return std::move(launches);
}

void begin_launch(const char* kernel, std::size_t threads_per_block, std::size_t dynamic_shared_bytes) {
  if (!counting) return;
  in_launch = true;
  launch_kernel = kernel;
  read_bytes.clear();
  written_bytes.clear();
  requests.clear();
  thread_accesses.clear();
  shared_totals = CountedLaunch{};
  shared_totals.threads_per_block = threads_per_block;
  shared_totals.dynamic_shared_bytes = dynamic_shared_bytes;
  block_waiting_for_memory = 0;
}

void end_launch() {
  if (!in_launch) return;
  in_launch = false;
  for (const auto& [key, lanes] : requests) count_request(lanes);
  CountedLaunch launch = shared_totals;
  launch.kernel = launch_kernel;
  launch.bytes_read = read_bytes.size();
  launch.bytes_written = written_bytes.size();
  launches.push_back(launch);
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
// Host atomics in instrumented code (a shared_ptr's count: never device memory), done as asked.
int __tsan_atomic32_fetch_add(volatile int* a, int v, int /*memory_order*/) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
}
