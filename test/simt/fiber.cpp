// Fibers on x86-64: a stack switch written in a few lines of assembly.
//
// Why not ucontext (swapcontext)? It saves and restores the signal mask with a system call on
// every switch, and a block of 256 threads doing warp reductions switches hundreds of
// thousands of times; in the virtual machines CI runs on that system call alone made the
// emulated suite several times slower. The switch below only moves the callee-saved registers
// and the stack pointer. The x87 control word and MXCSR are callee-saved too, but nothing in
// the layer or in kernels changes rounding modes, so all fibers simply share them.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "sanitizer.h"

#if !defined(__x86_64__)
#error "test/simt/fiber.cpp switches stacks with x86-64 assembly; port simt_switch_stack first"
#endif

// simt_switch_stack(save, load): pushes the callee-saved registers of the running context on
// its own stack, stores that stack pointer in *save, moves to the stack pointer `load`, pops the
// registers that were pushed there when that context was suspended, and returns into it.
extern "C" void simt_switch_stack(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .globl simt_switch_stack
    .hidden simt_switch_stack
    .type simt_switch_stack, @function
simt_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_switch_stack, .-simt_switch_stack
)");

namespace simt {
namespace {

constexpr int kSavedRegisters = 6;  // rbp, rbx, r12, r13, r14, r15, as pushed above

Fiber* resuming_fiber = nullptr;  // read by Fiber::run_entry on the first switch into a fiber

// AddressSanitizer must be told about every stack switch, or it mistakes the fiber's frames
// for garbage on the scheduler's stack (and the other way round). Both calls are no-ops
// without ASan. `fake_stack` carries ASan's per-stack state across the switch; passing
// nullptr to before_switch() says the stack being left is finished for good.
void before_switch(void** fake_stack, const void* target_bottom, std::size_t target_bytes) {
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(fake_stack, target_bottom, target_bytes);
#endif
}

void after_switch(void* fake_stack, const void** previous_bottom, std::size_t* previous_bytes) {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, previous_bottom, previous_bytes);
#endif
}

}  // namespace

Fiber::Fiber(std::size_t stack_bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;
  void* mapping = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  mapping_ = static_cast<char*>(mapping);
  // The lowest page stays inaccessible: a kernel that overflows its stack faults at once
  // instead of silently overwriting the neighbouring fiber's stack.
  mprotect(mapping_, page, PROT_NONE);
  stack_bottom_ = mapping_ + page;
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

void Fiber::start(void (*entry)(void*), void* argument) {
  entry_ = entry;
  argument_ = argument;
  // Lay out the stack as simt_switch_stack leaves a suspended context: saved registers below
  // a return address. "Returning" lands in run_entry with the stack aligned as after a call.
  void** top = reinterpret_cast<void**>(stack_bottom_ + stack_bytes_);
  *--top = nullptr;  // run_entry's own return address: it never returns, and 0 ends backtraces
  *--top = reinterpret_cast<void*>(&Fiber::run_entry);
  for (int i = 0; i < kSavedRegisters; ++i) *--top = nullptr;  // rbp = 0 ends backtraces too
  stack_pointer_ = top;
}

void Fiber::resume() {
  resuming_fiber = this;
  void* scheduler_fake_stack = nullptr;
  before_switch(&scheduler_fake_stack, stack_bottom_, stack_bytes_);
  simt_switch_stack(&scheduler_stack_pointer_, stack_pointer_);
  after_switch(scheduler_fake_stack, nullptr, nullptr);
}

void Fiber::yield() {
  before_switch(&sanitizer_fake_stack_, scheduler_stack_bottom_, scheduler_stack_bytes_);
  simt_switch_stack(&stack_pointer_, scheduler_stack_pointer_);
  after_switch(sanitizer_fake_stack_, &scheduler_stack_bottom_, &scheduler_stack_bytes_);
}

void Fiber::finish() {
  before_switch(nullptr, scheduler_stack_bottom_, scheduler_stack_bytes_);
  simt_switch_stack(&stack_pointer_, scheduler_stack_pointer_);
  // Not reached: nobody resumes a finished fiber without start()ing it again.
}

void Fiber::run_entry() {
  Fiber* self = resuming_fiber;
  after_switch(nullptr, &self->scheduler_stack_bottom_, &self->scheduler_stack_bytes_);
  self->entry_(self->argument_);
  self->finish();  // does not return
}

void Fiber::forget_abandoned_frames() {
#if SIMT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(stack_bottom_, stack_bytes_);
#endif
}

}  // namespace simt
