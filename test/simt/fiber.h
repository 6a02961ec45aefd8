// Fibers: the execution contexts in which the SIMT layer runs the threads of one CUDA block.
//
// A fiber is a function running on its own stack. Exactly one fiber runs at a time on the
// calling OS thread; control moves only at explicit switch points: the scheduler resumes a
// fiber, the fiber runs until it yields (at __syncthreads(), a warp shuffle, ...) or returns,
// and control comes back to the scheduler. Because nothing is preempted, the order in which
// CUDA threads interleave is chosen entirely by the scheduler, which is what makes races
// reproducible and lets the scheduler detect a barrier that can never be reached.
#pragma once

#include <cstddef>

namespace simt {

class Fiber {
 public:
  explicit Fiber(std::size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Prepares the fiber so that the next resume() runs entry(argument) from the top of its
  // stack. Whatever the fiber was doing before is forgotten.
  void start(void (*entry)(void*), void* argument);

  // Called by the scheduler: runs the fiber until it calls yield() or finish().
  void resume();

  // Called from inside the fiber: hands control back to the scheduler; returns when the
  // scheduler resumes this fiber again.
  void yield();

  // Called from inside the fiber when its entry function is done: hands control back to the
  // scheduler for good. A finished fiber can be start()ed again. (Deliberately not declared
  // [[noreturn]]: AddressSanitizer would precede each call with a system call that cleans up
  // after the abandoned stack frames, and finish() is called once for every CUDA thread.)
  void finish();

  // Makes the whole stack addressable again for AddressSanitizer. Needed after a fiber was
  // abandoned mid-run (the scheduler gave up on a block): the frames it left behind still
  // carry poisoned red zones that would trip the next fiber using this stack.
  void forget_abandoned_frames();

 private:
  static void run_entry();  // first function executed on a fresh fiber stack

  char* mapping_ = nullptr;        // the stack, plus one inaccessible guard page below it
  std::size_t mapping_bytes_ = 0;
  char* stack_bottom_ = nullptr;   // lowest usable address
  std::size_t stack_bytes_ = 0;
  void* stack_pointer_ = nullptr;  // saved while the fiber is not running
  void* scheduler_stack_pointer_ = nullptr;
  void (*entry_)(void*) = nullptr;
  void* argument_ = nullptr;
  // AddressSanitizer bookkeeping for stack switches (unused without ASan).
  void* sanitizer_fake_stack_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_bytes_ = 0;
};

}  // namespace simt
