// Kernel launches and shared memory for the SIMT emulation.
//
// The emulated build rewrites (test/simt/rewrite_cuda.py) each
//     kernel<<<grid, block, shared_bytes, stream>>>(args...);
// into
//     ::simt::launch(kernel, "kernel", grid, block, shared_bytes, stream)(args...);
// and each shared-memory declaration inside a function into a call of static_shared() or
// dynamic_shared_memory() below. The scheduler (scheduler.cpp) then runs the grid: blocks one
// after another, the threads of a block as fibers that switch at barriers and warp operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <typeinfo>
#include <utility>

namespace simt {

// A kernel misused a barrier or a warp operation, or a launch was invalid. The message names
// the kernel, its block and thread, and the scheduling order, so the failing test says which
// kernel is broken and how to reproduce it.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- scheduling order ------------------------------------------------------------------------
// Between two synchronisation points the runnable threads of a block run one after another, in
// this order; blocks run in the same order. A kernel that is missing a __syncthreads() computes
// different results under different orders. kWarps runs the warps apart: the lowest warp with a
// runnable lane runs alone (its lanes forward, its warp operations waiting only for its own
// lanes) until every lane of it waits at __syncthreads() or has exited, then the next warp; so
// one warp runs ahead to the next block barrier while the others lag behind at the previous one.
enum class ThreadOrder { kForward, kReverse, kShuffle, kWarps };

struct Schedule {
  ThreadOrder order = ThreadOrder::kForward;
  std::uint64_t seed = 0;  // for kShuffle
};

// Parses "forward", "reverse", "shuffle:SEED" or "warps" (the syntax of the SIMT_ORDER environment
// variable, which sets the schedule at startup); throws std::invalid_argument otherwise.
Schedule parse_schedule(const std::string& text);
std::string to_string(const Schedule& schedule);
Schedule current_schedule();
void set_schedule(const Schedule& schedule);

// ---- launching --------------------------------------------------------------------------------
struct LaunchConfig {
  const void* kernel;              // identifies the kernel for cudaFuncSetAttribute limits
  const char* name;                // the kernel expression as written at the launch
  const std::type_info* signature; // the kernel's function type, for messages
  dim3 grid;
  dim3 block;
  std::size_t dynamic_shared_bytes;
};

// Runs thread_body(context) once for every thread of the grid; throws KernelError when the
// launch configuration is invalid or a thread misuses a barrier or warp operation.
void run_grid(const LaunchConfig& config, void (*thread_body)(const void*), const void* context);

// What ::simt::launch(...) returns: calling it with the kernel's arguments runs the grid.
template <typename... Params>
class KernelLaunch {
 public:
  KernelLaunch(void (*kernel)(Params...), const LaunchConfig& config)
      : kernel_(kernel), config_(config) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params),
                  "kernel launched with the wrong number of arguments");
    const Call call{kernel_, std::tuple<Params...>(std::forward<Args>(args)...)};
    run(call, std::index_sequence_for<Params...>{});
  }

 private:
  // The kernel and its arguments, converted to the parameter types once, like CUDA's
  // parameter buffer.
  struct Call {
    void (*kernel)(Params...);
    std::tuple<Params...> parameters;
  };

  template <std::size_t... I>
  void run(const Call& call, std::index_sequence<I...>) const {
    run_grid(config_, &run_thread<I...>, &call);
  }

  // One thread: the kernel, called with its own copies of the parameters.
  template <std::size_t... I>
  static void run_thread(const void* context) {
    const Call& call = *static_cast<const Call*>(context);
    call.kernel(std::get<I>(call.parameters)...);
  }

  void (*kernel_)(Params...);
  LaunchConfig config_;
};

// Streams order work on a GPU; here all work runs synchronously in launch order, so the stream
// is accepted and ignored.
template <typename... Params>
KernelLaunch<Params...> launch(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block,
                               std::size_t dynamic_shared_bytes = 0, cudaStream_t = nullptr) {
  const LaunchConfig config{reinterpret_cast<const void*>(kernel), name,
                            &typeid(void(Params...)), grid, block, dynamic_shared_bytes};
  return KernelLaunch<Params...>(kernel, config);
}

}  // namespace simt

// nvcc's cuda_runtime.h offers this overload, taking the kernel itself, only to nvcc builds.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

namespace simt {

// ---- shared memory ----------------------------------------------------------------------------
// `extern __shared__ T name[];` becomes `T* name = ::simt::dynamic_shared_memory<T>();`.
// Each block gets a fresh heap buffer of exactly the launch's dynamic shared size, filled with
// 0xff bytes (NaN as float): reading before writing shows up in results, and AddressSanitizer
// catches any access past its end.
void* dynamic_shared_base();

template <typename T>
T* dynamic_shared_memory() {
  return static_cast<T*>(dynamic_shared_base());
}

// Where one `__shared__` declaration keeps its storage, and for which block it was made.
struct SharedSlot {
  std::uint64_t block_serial = 0;
  void* storage = nullptr;
};

// Returns slot.storage, first allocating it (0xff-filled, bounds-checked by AddressSanitizer)
// when the slot belongs to an earlier block.
void* block_shared_variable(SharedSlot& slot, std::size_t bytes, std::size_t alignment);

// `__shared__ T name[N];` inside a function becomes
//     auto& name = ::simt::static_shared<T[N]>([] {});
// The lambda's type is unique to that declaration (and to each instantiation of an enclosing
// template), which gives every declaration its own slot.
template <typename T, typename Site>
T& static_shared(Site) {
  static SharedSlot slot;
  return *static_cast<T*>(block_shared_variable(slot, sizeof(T), alignof(T)));
}

}  // namespace simt
