// The block scheduler: runs the blocks of a grid one after another and the threads of a block
// as fibers, implements __syncthreads() and the warp-level operations on top of them, and turns
// every misuse it can see into a KernelError naming the kernel, block and thread.
//
// Scheduling works in rounds. A round takes the threads that are runnable, puts them in the
// order of the schedule (forward, reverse or a seeded shuffle) and resumes each in turn; a
// thread runs until its next synchronisation point (barrier, warp operation) or its end. Under
// the warps schedule a round takes only the runnable lanes of the lowest warp that has any, so
// that warp runs on alone to the next block barrier before the next warp moves. The
// last thread to arrive at a barrier or warp operation makes the waiting threads runnable
// again, for the next round. If a round finds no runnable thread while some have not finished,
// the block can never complete: that is reported instead of hanging.
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fiber.h"
#include "internal.h"
#include "sanitizer.h"
#include "simt.h"
#include "counting.h"

namespace simt {
namespace {

constexpr std::size_t kFiberStackBytes = 256 * 1024;  // generous: sanitizers inflate frames
constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 2147483647u;
constexpr unsigned kMaxGridDimYZ = 65535;
// Shared memory begins 128-byte aligned, as on a GPU: enough for float4 and for WMMA tiles
// (32 bytes), which extern __shared__ __align__(128) arrays rely on.
constexpr std::size_t kSharedAlignment = 128;
constexpr unsigned char kUninitialisedByte = 0xff;  // NaN as float, -1 as integer
constexpr std::uint64_t kUndefinedShuffleBits = ~std::uint64_t{0};

// What the running thread, block and grid look like to kernels (threadIdx & co).
uint3 thread_index;
uint3 block_index;
dim3 block_dim;
dim3 grid_dim;

std::uint64_t block_serial = 0;  // counts the blocks run so far; tells __shared__ slots apart

// ---- schedule ----------------------------------------------------------------------------------

Schedule schedule_from_environment() {
  const char* text = std::getenv("SIMT_ORDER");
  if (text == nullptr || *text == '\0') return Schedule{};
  try {
    return parse_schedule(text);
  } catch (const std::logic_error& error) {  // invalid_argument, or out_of_range for the seed
    std::fprintf(stderr, "SIMT_ORDER=%s: %s\n", text, error.what());
    std::exit(2);
  }
}

Schedule active_schedule = schedule_from_environment();

// Puts `items` (listed in forward order) into the order of the schedule.
template <typename T>
void arrange(std::vector<T>& items, ThreadOrder order, std::mt19937_64& random) {
  if (order == ThreadOrder::kReverse) std::reverse(items.begin(), items.end());
  if (order == ThreadOrder::kShuffle) std::shuffle(items.begin(), items.end(), random);
}

// ---- messages ----------------------------------------------------------------------------------

std::string to_string(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string to_string(const uint3& d) { return to_string(dim3(d)); }

std::string hex(unsigned value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

std::string demangle(const std::type_info& type) {
  int status = 0;
  char* name = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string result = status == 0 ? name : type.name();
  std::free(name);
  return result;
}

std::string describe_kernel(const LaunchConfig& config) {
  return "kernel '" + std::string(config.name) + "' [" + demangle(*config.signature) +
         "] with grid " + to_string(config.grid) + " and block " + to_string(config.block);
}

const char* name_of(WarpOp op) {
  switch (op) {
    case WarpOp::kShfl: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAll: return "__all_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kSyncWarp: return "__syncwarp";
    case WarpOp::kMma: return "mma.sync.aligned.m16n8k16";
    case WarpOp::kLdmatrix: return "ldmatrix.sync.aligned.m8n8";
  }
  return "warp operation";
}

// The warp-level matrix instructions: every lane of the warp takes part, with equal qualifiers.
bool is_matrix_operation(WarpOp op) { return op == WarpOp::kMma || op == WarpOp::kLdmatrix; }

bool is_shuffle(WarpOp op) {
  return op == WarpOp::kShfl || op == WarpOp::kShflUp || op == WarpOp::kShflDown ||
         op == WarpOp::kShflXor;
}

// ---- launch checks -----------------------------------------------------------------------------

// Throws KernelError for a launch that a GPU would refuse with cudaErrorInvalidConfiguration or
// cudaErrorInvalidValue.
void check_launch(const LaunchConfig& config) {
  const dim3& b = config.block;
  const dim3& g = config.grid;
  const std::string launch = "launch of " + describe_kernel(config) + ": ";
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || b.z > kMaxBlockDimZ)
    throw KernelError(launch + "a block must have 1 to 1024 threads, with blockDim.z at most 64");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > kMaxGridDimX || g.y > kMaxGridDimYZ ||
      g.z > kMaxGridDimYZ)
    throw KernelError(launch + "grid dimensions must be at least 1 and at most (2^31-1,65535,65535)");
  const std::size_t limit = max_dynamic_shared_bytes(config.kernel);
  if (config.dynamic_shared_bytes > limit)
    throw KernelError(launch + "asks for " + std::to_string(config.dynamic_shared_bytes) +
                      " bytes of dynamic shared memory but may use " + std::to_string(limit) +
                      "; above 48 KiB call cudaFuncSetAttribute(kernel, "
                      "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first");
}

// ---- one block ---------------------------------------------------------------------------------

enum class ThreadState { kRunnable, kAtBarrier, kInWarpOp, kExited };

struct WarpRequest {
  WarpOp op;
  unsigned mask;
  std::uint64_t value;
  int operand;  // source lane, delta or lane mask, depending on op; a matrix operation's qualifiers
  int width;
  void (*complete)(unsigned warp) = nullptr;  // a matrix operation's work, run once all lanes are in
};

struct ThreadSlot {
  uint3 index;
  unsigned linear;       // x fastest: threads 0-31 form warp 0, and so on
  ThreadState state;
  WarpRequest request;   // while kInWarpOp: the operation it waits in
  std::uint64_t result;  // of its last warp operation
  std::uint64_t resumes; // times it was resumed: 1 + the synchronisation points it has passed
};

// The lanes of one warp that wait at __syncthreads(), wait in a warp operation, or have exited,
// as bit masks: a warp operation checks its partners with a few bit operations.
struct WarpLanes {
  unsigned at_barrier = 0;
  unsigned in_warp_op = 0;
  unsigned exited = 0;
};

// Storage that every block reuses, so that running a block allocates next to nothing: its
// thread slots and warp masks, the thread list of one scheduling round, and the fibers with
// their stacks.
struct Workspace {
  std::vector<ThreadSlot> threads;
  std::vector<WarpLanes> warps;
  std::vector<unsigned> round;
  std::vector<std::unique_ptr<Fiber>> fibers;
};

Workspace& workspace_for(std::size_t threads) {
  static Workspace workspace;
  while (workspace.fibers.size() < threads)
    workspace.fibers.push_back(std::make_unique<Fiber>(kFiberStackBytes));
  return workspace;
}

unsigned lowest_lane(unsigned mask) { return static_cast<unsigned>(__builtin_ctz(mask)); }

// The lanes set in a mask, lowest first: for (unsigned lane : LanesOf(mask)) ...
class LanesOf {
 public:
  explicit LanesOf(unsigned mask) : mask_(mask) {}

  struct Iterator {
    unsigned rest;  // lanes not visited yet
    unsigned operator*() const { return lowest_lane(rest); }
    Iterator& operator++() {
      rest &= rest - 1;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return rest != other.rest; }
  };

  Iterator begin() const { return Iterator{mask_}; }
  Iterator end() const { return Iterator{0}; }

 private:
  unsigned mask_;
};

class Block;
Block* running_block = nullptr;

class Block {
 public:
  Block(const LaunchConfig& config, const uint3& index, const Schedule& schedule,
        void (*thread_body)(const void*), const void* context)
      : config_(config), index_(index), schedule_(schedule), thread_body_(thread_body),
        context_(context), serial_(++block_serial),
        workspace_(workspace_for(1ull * config.block.x * config.block.y * config.block.z)),
        threads_(workspace_.threads), warps_(workspace_.warps), round_(workspace_.round),
        fibers_(workspace_.fibers) {
    const dim3& d = config.block;
    threads_.clear();
    for (unsigned z = 0; z < d.z; ++z)
      for (unsigned y = 0; y < d.y; ++y)
        for (unsigned x = 0; x < d.x; ++x) {
          const unsigned linear = x + d.x * (y + d.y * z);
          threads_.push_back(ThreadSlot{uint3{x, y, z}, linear, ThreadState::kRunnable, {}, 0, 0});
        }
    warps_.assign((threads_.size() + kWarpSize - 1) / kWarpSize, WarpLanes{});
    dynamic_shared_ = allocate_uninitialised(config.dynamic_shared_bytes, kSharedAlignment);
    running_block = this;
  }

  // Frees the block's shared memory. When the block was abandoned because of an error, also
  // clears the sanitizer state its unfinished threads left on their stacks.
  ~Block() {
    for (const ThreadSlot& thread : threads_)
      if (thread.state != ThreadState::kExited) fibers_[thread.linear]->forget_abandoned_frames();
    for (const SharedAllocation& memory : shared_memory_) std::free(memory.start);
    running_block = nullptr;
  }

  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Runs every thread to its end; throws KernelError if one misuses a barrier or warp operation.
  void run(std::mt19937_64& random) {
    for (const ThreadSlot& thread : threads_)
      fibers_[thread.linear]->start(&Block::thread_main, this);
    while (failure_.empty() && exited_ < threads_.size()) {
      plan_round(random);
      if (round_.empty()) failure_ = where() + ": no thread can make progress";
      for (unsigned linear : round_) {
        resume(threads_[linear]);
        if (!failure_.empty()) break;
      }
    }
    if (!failure_.empty()) throw KernelError(failure_);
  }

  // ---- called by the running thread ----

  void barrier() {
    if (exited_ > 0)
      fail("reached __syncthreads() after thread " + to_string(first_exited().index) +
           " exited without reaching it: every thread of the block must reach every "
           "__syncthreads()");
    fail_if_warp_waits_for_running("reached __syncthreads()");
    set_state(*running_, ThreadState::kAtBarrier);
    if (at_barrier_ == threads_.size()) {
      note_barrier(serial_);
      for (ThreadSlot& thread : threads_) set_state(thread, ThreadState::kRunnable);
    }
    yield();
  }

  std::uint64_t warp_collective(const WarpRequest& request) {
    check_warp_request(request);
    running_->request = request;
    set_state(*running_, ThreadState::kInWarpOp);
    if ((warp_of(*running_).in_warp_op & request.mask) == request.mask)
      complete_warp_collective(first_lane_of_warp(*running_), request.mask);
    yield();
    return running_->result;
  }

  void* dynamic_shared() const { return dynamic_shared_; }

  void* shared_variable(SharedSlot& slot, std::size_t bytes, std::size_t alignment) {
    if (slot.block_serial != serial_) {
      slot.storage = allocate_uninitialised(bytes, alignment);
      slot.block_serial = serial_;
    }
    return slot.storage;
  }

  // "kernel 'k' [...] with grid (..) and block (..), in block (..), thread (..), SIMT_ORDER=.."
  std::string where() const {
    std::string text = describe_kernel(config_) + ", in block " + to_string(index_);
    if (running_ != nullptr) text += ", thread " + to_string(running_->index);
    return text + ", SIMT_ORDER=" + to_string(schedule_);
  }

  bool has_running_thread() const { return running_ != nullptr; }

  // Where the running thread is: block serial, warp, lane, and how many synchronisation points
  // it has passed (lanes of a warp that run the same code pass the same ones).
  ThreadPosition running_position() const {
    return {serial_, running_->linear / kWarpSize, running_->linear % kWarpSize, running_->resumes};
  }

  // Whether [pointer, pointer + bytes) lies inside the shared memory of this block.
  bool holds_shared(const void* pointer, std::size_t bytes) const {
    const auto at = reinterpret_cast<std::uintptr_t>(pointer);
    for (const SharedAllocation& memory : shared_memory_) {
      const auto start = reinterpret_cast<std::uintptr_t>(memory.start);
      if (at >= start && at + bytes <= start + memory.bytes) return true;
    }
    return false;
  }

 private:
  // The function every fiber of the block starts in: the kernel, then the exit checks. An
  // exception cannot leave a fiber, so one thrown inside the kernel fails the block instead
  // (after its handler has finished, which keeps the C++ runtime's exception state clean).
  static void thread_main(void* self) {
    Block& block = *static_cast<Block*>(self);
    std::string exception;
    try {
      block.thread_body_(block.context_);
    } catch (const std::exception& error) {
      exception = std::string("exception: ") + error.what();
    }
    if (!exception.empty()) block.fail(exception);
    block.exit_running_thread();
  }

  void exit_running_thread() {
    if (at_barrier_ > 0)
      fail("exited while " + std::to_string(at_barrier_) +
           " threads wait at __syncthreads(): every thread of the block must reach every "
           "__syncthreads()");
    fail_if_warp_waits_for_running("exited");
    if (running_thread_has_copies_in_flight())
      fail("exited with cp.async copies it never waited for (cp.async.wait_group)");
    set_state(*running_, ThreadState::kExited);
  }

  // The one place where a thread changes state, keeping the counts and warp masks in step.
  void set_state(ThreadSlot& thread, ThreadState state) {
    WarpLanes& warp = warp_of(thread);
    const unsigned lane_bit = 1u << (thread.linear % kWarpSize);
    warp.at_barrier &= ~lane_bit;
    warp.in_warp_op &= ~lane_bit;
    if (thread.state == ThreadState::kAtBarrier) --at_barrier_;
    thread.state = state;
    if (state == ThreadState::kAtBarrier) {
      ++at_barrier_;
      warp.at_barrier |= lane_bit;
    } else if (state == ThreadState::kInWarpOp) {
      warp.in_warp_op |= lane_bit;
    } else if (state == ThreadState::kExited) {
      ++exited_;
      warp.exited |= lane_bit;
    }
  }

  // The runnable threads, in the order in which the next round resumes them; under the warps
  // schedule only those of the lowest warp that has one.
  void plan_round(std::mt19937_64& random) {
    round_.clear();
    for (const ThreadSlot& thread : threads_) {
      if (thread.state != ThreadState::kRunnable) continue;
      if (schedule_.order == ThreadOrder::kWarps && !round_.empty() &&
          thread.linear / kWarpSize != round_.front() / kWarpSize)
        break;
      round_.push_back(thread.linear);
    }
    arrange(round_, schedule_.order, random);
  }

  void resume(ThreadSlot& thread) {
    running_ = &thread;
    ++thread.resumes;
    thread_index = thread.index;
    fibers_[thread.linear]->resume();
    running_ = nullptr;
  }

  void yield() { fibers_[running_->linear]->yield(); }

  // Records the error for the scheduler, which stops the block and throws; this fiber is never
  // resumed again.
  [[noreturn]] void fail(const std::string& message) {
    failure_ = where() + ": " + message;
    for (;;) yield();
  }

  const ThreadSlot& first_exited() const {
    return *std::find_if(threads_.begin(), threads_.end(), [](const ThreadSlot& thread) {
      return thread.state == ThreadState::kExited;
    });
  }

  static unsigned first_lane_of_warp(const ThreadSlot& thread) {
    return thread.linear - thread.linear % kWarpSize;
  }

  WarpLanes& warp_of(const ThreadSlot& thread) { return warps_[thread.linear / kWarpSize]; }

  // Lanes of the running thread's warp that exist: the last warp of a block may be partial.
  unsigned existing_lanes() const {
    const std::size_t count = std::min<std::size_t>(kWarpSize, threads_.size() - first_lane_of_warp(*running_));
    return count == kWarpSize ? ~0u : (1u << count) - 1;
  }

  static std::string describe(const WarpRequest& request) {
    if (is_matrix_operation(request.op)) return std::string(name_of(request.op)) + " (qualifiers " +
                                                  std::to_string(request.operand) + ")";
    return std::string(name_of(request.op)) + "(mask " + hex(request.mask) + ")";
  }

  // "lane 5 (thread (37,0,0))" for a lane of the running thread's warp.
  std::string describe_lane(unsigned lane) const {
    const ThreadSlot& thread = threads_[first_lane_of_warp(*running_) + lane];
    return "lane " + std::to_string(lane) + " (thread " + to_string(thread.index) + ")";
  }

  // Fails unless `request` is a valid call whose mask names lanes that can all still reach it.
  void check_warp_request(const WarpRequest& request) {
    const unsigned lane = running_->linear % kWarpSize;
    const unsigned first = first_lane_of_warp(*running_);
    const WarpLanes& warp = warp_of(*running_);
    const unsigned partners = request.mask & ~(1u << lane);
    if ((request.mask >> lane & 1u) == 0)
      fail(describe(request) + " by lane " + std::to_string(lane) + ", which its mask does not include");
    if ((request.mask & ~existing_lanes()) != 0)
      fail(describe(request) + ": the mask names lanes beyond the end of the block (" +
           std::to_string(threads_.size()) + " threads)");
    const int width = request.width;
    if (is_shuffle(request.op) && (width < 1 || width > 32 || (width & (width - 1)) != 0))
      fail(describe(request) + ": width must be a power of two from 1 to 32, not " + std::to_string(width));
    if ((partners & warp.exited) != 0)
      fail(describe(request) + ": " + describe_lane(lowest_lane(partners & warp.exited)) +
           " exited without reaching it");
    if ((partners & warp.at_barrier) != 0)
      fail(describe(request) + ": " + describe_lane(lowest_lane(partners & warp.at_barrier)) +
           " waits at __syncthreads() instead");
    for (unsigned other : LanesOf(partners & warp.in_warp_op)) {
      const WarpRequest& theirs = threads_[first + other].request;
      if (theirs.op != request.op || theirs.mask != request.mask ||
          (is_matrix_operation(request.op) && theirs.operand != request.operand))
        fail(describe(request) + ": " + describe_lane(other) + " waits at " + describe(theirs) + " instead");
    }
  }

  // Fails if a lane of the running thread's warp waits in a warp operation whose mask names
  // the running thread, which is about to do `action` instead of joining it.
  void fail_if_warp_waits_for_running(const char* action) {
    const unsigned lane = running_->linear % kWarpSize;
    const unsigned first = first_lane_of_warp(*running_);
    for (unsigned other : LanesOf(warp_of(*running_).in_warp_op))
      if ((threads_[first + other].request.mask >> lane & 1u) != 0)
        fail(std::string(action) + " while " + describe_lane(other) + " waits for it in " +
             describe(threads_[first + other].request));
  }

  // Every lane of `mask` has arrived: computes each lane's result and makes them runnable.
  void complete_warp_collective(unsigned first, unsigned mask) {
    const WarpRequest& request = threads_[first + lowest_lane(mask)].request;
    if (request.complete != nullptr) request.complete(first / kWarpSize);
    unsigned ballot = 0;
    for (unsigned lane : LanesOf(mask))
      if (threads_[first + lane].request.value != 0) ballot |= 1u << lane;
    for (unsigned lane : LanesOf(mask)) {
      ThreadSlot& thread = threads_[first + lane];
      thread.result = collective_result(thread.request, lane, first, ballot);
      set_state(thread, ThreadState::kRunnable);
    }
  }

  std::uint64_t collective_result(const WarpRequest& request, unsigned lane, unsigned first,
                                  unsigned ballot) const {
    switch (request.op) {
      case WarpOp::kBallot: return ballot;
      case WarpOp::kAll: return ballot == request.mask;
      case WarpOp::kAny: return ballot != 0;
      case WarpOp::kSyncWarp: return 0;
      default: break;
    }
    const unsigned source = source_lane(request, lane);
    // Reading a lane outside the mask is undefined in CUDA; make it visible as all-ones bits.
    if ((request.mask >> source & 1u) == 0) return kUndefinedShuffleBits;
    return threads_[first + source].request.value;
  }

  // The lane whose value a shuffle delivers to `lane`, following the CUDA programming guide:
  // lanes form segments of `width`; a source past the end of the lane's segment (or before its
  // start, for __shfl_up_sync) delivers the lane's own value.
  static unsigned source_lane(const WarpRequest& request, unsigned lane) {
    const int self = static_cast<int>(lane);
    const int width = request.width;
    const int segment_start = self & ~(width - 1);
    const int segment_end = segment_start + width;
    int source = self;
    switch (request.op) {
      case WarpOp::kShfl: source = segment_start + (request.operand & (width - 1)); break;
      case WarpOp::kShflUp: source = self - request.operand; break;
      case WarpOp::kShflDown: source = self + request.operand; break;
      case WarpOp::kShflXor: source = self ^ (request.operand & 31); break;
      default: break;
    }
    const bool outside = request.op == WarpOp::kShflUp ? source < segment_start : source >= segment_end;
    return static_cast<unsigned>(outside ? self : source);
  }

  // Fresh memory for shared variables, 0xff-filled so that reading before writing shows up.
  void* allocate_uninitialised(std::size_t bytes, std::size_t alignment) {
    void* memory = nullptr;
    if (posix_memalign(&memory, std::max(alignment, kSharedAlignment), bytes) != 0) throw std::bad_alloc();
    std::memset(memory, kUninitialisedByte, bytes);
    shared_memory_.push_back({memory, bytes});
    return memory;
  }

  const LaunchConfig& config_;
  const uint3 index_;
  const Schedule schedule_;
  void (*const thread_body_)(const void*);
  const void* const context_;
  const std::uint64_t serial_;
  Workspace& workspace_;
  std::vector<ThreadSlot>& threads_;
  std::vector<WarpLanes>& warps_;
  std::vector<unsigned>& round_;
  std::vector<std::unique_ptr<Fiber>>& fibers_;
  ThreadSlot* running_ = nullptr;
  std::size_t at_barrier_ = 0;  // threads waiting at __syncthreads()
  std::size_t exited_ = 0;
  std::string failure_;
  void* dynamic_shared_ = nullptr;
  struct SharedAllocation {
    void* start;
    std::size_t bytes;
  };
  std::vector<SharedAllocation> shared_memory_;  // the dynamic area and every __shared__ variable
};

// The block of the running kernel thread; throws when `what` is used outside any kernel.
Block& running_block_for(const char* what) {
  if (running_block == nullptr || !running_block->has_running_thread())
    throw KernelError(std::string(what) + " used outside a kernel");
  return *running_block;
}

std::vector<uint3> blocks_in_order(const dim3& grid, ThreadOrder order, std::mt19937_64& random) {
  std::vector<uint3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(uint3{x, y, z});
  arrange(blocks, order, random);
  return blocks;
}

#if SIMT_ASAN
// AddressSanitizer calls this with each error report: says which kernel thread was running, or
// explains the poisoned device memory that host code touched.
void annotate_sanitizer_report(const char* report) {
  if (running_block != nullptr && running_block->has_running_thread())
    std::fprintf(stderr, "simt: the error above happened in %s\n", running_block->where().c_str());
  else if (std::strstr(report, "use-after-poison") != nullptr)
    std::fprintf(stderr, "simt: host code dereferenced memory from cudaMalloc, which faults on a GPU; "
                         "copy it to the host with cudaMemcpy first\n");
}

[[maybe_unused]] const bool sanitizer_report_annotated =
    (__asan_set_error_report_callback(annotate_sanitizer_report), true);
#endif

}  // namespace

// ---- public interface (launch.h, device_api.h) ----------------------------------------------------

Schedule parse_schedule(const std::string& text) {
  if (text == "forward") return Schedule{ThreadOrder::kForward, 0};
  if (text == "reverse") return Schedule{ThreadOrder::kReverse, 0};
  if (text == "warps") return Schedule{ThreadOrder::kWarps, 0};
  const std::string prefix = "shuffle:";
  const std::string seed = text.substr(std::min(prefix.size(), text.size()));
  if (text.compare(0, prefix.size(), prefix) == 0 && !seed.empty() &&
      seed.find_first_not_of("0123456789") == std::string::npos)
    return Schedule{ThreadOrder::kShuffle, std::stoull(seed)};
  throw std::invalid_argument("SIMT_ORDER must be forward, reverse, shuffle:SEED or warps, not '" + text + "'");
}

std::string to_string(const Schedule& schedule) {
  switch (schedule.order) {
    case ThreadOrder::kForward: return "forward";
    case ThreadOrder::kReverse: return "reverse";
    case ThreadOrder::kShuffle: return "shuffle:" + std::to_string(schedule.seed);
    case ThreadOrder::kWarps: return "warps";
  }
  return "?";
}

Schedule current_schedule() { return active_schedule; }

void set_schedule(const Schedule& schedule) { active_schedule = schedule; }

void run_grid(const LaunchConfig& config, void (*thread_body)(const void*), const void* context) {
  if (running_block != nullptr)
    throw KernelError("launch of " + describe_kernel(config) + " from device code: not emulated");
  check_launch(config);
  finish_pending_work();  // the stream's earlier work first
  const Schedule schedule = active_schedule;
  std::mt19937_64 random(schedule.seed);  // the same seed gives the same orders, test by test
  const DeviceMemoryAccess device_memory;
  block_dim = config.block;
  grid_dim = config.grid;
  begin_launch(config.name, (std::size_t)config.block.x * config.block.y * config.block.z,
               config.dynamic_shared_bytes);
  for (const uint3& index : blocks_in_order(config.grid, schedule.order, random)) {
    block_index = index;
    Block block(config, index, schedule, thread_body, context);
    block.run(random);
  }
  end_launch();
}

void* dynamic_shared_base() { return running_block_for("extern __shared__ memory").dynamic_shared(); }

void* block_shared_variable(SharedSlot& slot, std::size_t bytes, std::size_t alignment) {
  return running_block_for("a __shared__ variable").shared_variable(slot, bytes, alignment);
}

std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int operand, int width) {
  return running_block_for(name_of(op)).warp_collective(WarpRequest{op, mask, value, operand, width});
}

void warp_matrix_operation(WarpOp op, int qualifiers, void (*complete)(unsigned warp)) {
  running_block_for(name_of(op)).warp_collective(WarpRequest{op, ~0u, 0, qualifiers, 32, complete});
}

bool is_shared_range(const void* pointer, std::size_t bytes) {
  return running_block_for("shared memory").holds_shared(pointer, bytes);
}

bool running_shared_access(const void* pointer, std::size_t bytes, ThreadPosition* position) {
  if (running_block == nullptr || !running_block->has_running_thread() ||
      !running_block->holds_shared(pointer, bytes))
    return false;
  *position = running_block->running_position();
  return true;
}

bool running_thread_position(ThreadPosition* position) {
  if (running_block == nullptr || !running_block->has_running_thread()) return false;
  *position = running_block->running_position();
  return true;
}

unsigned warp_of_running_thread() {
  const unsigned linear = thread_index.x + block_dim.x * (thread_index.y + block_dim.y * thread_index.z);
  return linear / kWarpSize;
}

}  // namespace simt

const uint3& threadIdx = simt::thread_index;
const uint3& blockIdx = simt::block_index;
const dim3& blockDim = simt::block_dim;
const dim3& gridDim = simt::grid_dim;

void __syncthreads() { simt::running_block_for("__syncthreads()").barrier(); }
