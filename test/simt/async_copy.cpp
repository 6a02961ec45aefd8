// cp.async with commit and wait groups for the SIMT emulation (cuda/async_copy.cuh), from the PTX ISA
// ("Data Movement and Conversion Instructions: cp.async", "cp.async.commit_group",
// "cp.async.wait_group"). Each thread keeps its copies not yet committed and its committed
// groups, oldest first. A copy is made only when a wait completes its group; until then its
// destination holds 0xff bytes (NaN as float or bf16), written when the copy starts, so a kernel
// that reads a tile before waiting for it, or that starts a copy into a buffer another warp is
// still reading, computes with NaN. A thread that exits with copies it never waited for fails the
// launch (the ISA does not say what happens to them).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "internal.h"
#include "simt.h"

namespace simt {
namespace {

constexpr unsigned char kInFlightByte = 0xff;

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes;
};

struct Group {
  std::vector<Copy> copies;
  std::uint64_t last_start_epoch;  // the thread's synchronisation epoch when its last copy started
};

struct ThreadCopies {
  std::vector<Copy> uncommitted;
  std::uint64_t last_start_epoch = 0;
  std::deque<Group> groups;  // committed, oldest first
};

std::uint64_t block_of_threads = 0;  // the block serial `threads` belongs to
std::vector<ThreadCopies> threads;   // of the running block, by linear thread index

ThreadPosition position_of_running_thread(const char* what) {
  ThreadPosition at;
  if (!running_thread_position(&at)) throw KernelError(std::string(what) + " used outside a kernel");
  return at;
}

ThreadCopies& copies_of(const ThreadPosition& at) {
  if (at.block != block_of_threads) threads.clear(), block_of_threads = at.block;
  const std::size_t linear = (std::size_t)at.warp * 32 + at.lane;
  if (threads.size() <= linear) threads.resize(linear + 1);
  return threads[linear];
}

std::string address_text(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", pointer);
  return text;
}

}  // namespace

void cp_async(void* dst, const void* src, int bytes) {
  const ThreadPosition at = position_of_running_thread("cp.async");
  const std::string what = "cp.async of " + std::to_string(bytes) + " bytes";
  if (bytes != 4 && bytes != 8 && bytes != 16)
    throw std::logic_error(what + ": the size must be 4, 8 or 16 bytes");
  if (reinterpret_cast<std::uintptr_t>(dst) % bytes != 0 || reinterpret_cast<std::uintptr_t>(src) % bytes != 0)
    throw std::logic_error(what + ": source " + address_text(src) + " or destination " + address_text(dst) +
                           " not aligned to the size");
  if (!is_shared_range(dst, bytes)) throw std::logic_error(what + ": the destination is not in shared memory");
  if (!is_device_range(src, bytes)) throw std::logic_error(what + ": the source is not in device memory");
  note_async_copy(dst, src, bytes);
  std::memset(dst, kInFlightByte, bytes);
  ThreadCopies& mine = copies_of(at);
  mine.uncommitted.push_back({static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes});
  mine.last_start_epoch = at.epoch;
}

void cp_async_commit() {
  ThreadCopies& mine = copies_of(position_of_running_thread("cp.async.commit_group"));
  mine.groups.push_back({std::move(mine.uncommitted), mine.last_start_epoch});
  mine.uncommitted.clear();
}

void cp_async_wait(int pending) {
  const ThreadPosition at = position_of_running_thread("cp.async.wait_group");
  if (pending < 0) throw std::logic_error("cp.async.wait_group " + std::to_string(pending) + ": N must be 0 or more");
  ThreadCopies& mine = copies_of(at);
  while (mine.groups.size() > (std::size_t)pending) {
    const Group& group = mine.groups.front();
    for (const Copy& copy : group.copies) std::memcpy(copy.dst, copy.src, copy.bytes);
    // Copies started with no synchronisation point since: nothing overlapped their latency.
    if (!group.copies.empty()) note_async_wait(group.last_start_epoch == at.epoch);
    mine.groups.pop_front();
  }
}

bool running_thread_has_copies_in_flight() {
  ThreadPosition at;
  if (!running_thread_position(&at) || at.block != block_of_threads) return false;
  const std::size_t linear = (std::size_t)at.warp * 32 + at.lane;
  if (linear >= threads.size()) return false;
  const ThreadCopies& mine = threads[linear];
  if (!mine.uncommitted.empty()) return true;
  for (const Group& group : mine.groups)
    if (!group.copies.empty()) return true;
  return false;
}

}  // namespace simt
