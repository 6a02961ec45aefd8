// run/run_counts.h — the counts ./train and ./eval derive from their flags (docs/train.md §3):
// token positions of a batch, tokens of one micro-step over the ranks, micro-steps per step,
// tokens of the whole run and of an evaluation. Each is computed in 64 bits with its overflow
// checked; a count that overflows, or that leaves nothing to do, is an InputError naming the
// flags, raised before any file is written.
#pragma once
#include <climits>
#include <string>

#include "util/errors.h"

// a·b when it fits in 64 bits; otherwise an InputError "`what`: a × b overflows ...".
inline long long checked_product(long long a, long long b, const std::string& what) {
    long long product = 0;
    if (__builtin_mul_overflow(a, b, &product))
        throw InputError(what + ": " + std::to_string(a) + " x " + std::to_string(b) +
                         " overflows a 64-bit count; lower the flags");
    return product;
}

// The largest count that a model's or loop's int may hold: positions of a batch, micro-steps.
constexpr long long kMaxIntCount = INT_MAX;

// The token positions of one batch, B·T, which the model indexes with an int.
inline long long batch_positions(long long B, long long T) {
    const long long positions = checked_product(B, T, "flags -B and -T: B*T");
    if (positions > kMaxIntCount)
        throw InputError("flags -B and -T: B*T = " + std::to_string(positions) + " token positions per batch exceed " +
                         std::to_string(kMaxIntCount) + ", the most a batch can index");
    return positions;
}

// The counts of one ./train run, all checked.
struct StepCounts {
    long long positions;      // B·T, of one micro-step of one rank
    long long micro_tokens;   // ranks·B·T, one micro-step of every rank
    int grad_accum;           // micro-steps per step on each rank: total_batch / micro_tokens
    long long run_tokens;     // steps · total_batch, the tokens the whole run trains on
};

// The counts of a run of `steps` steps of `total_batch` tokens, over `ranks` ranks with
// micro-batches of B x T. Refuses a total_batch that is not a positive multiple of ranks·B·T,
// more micro-steps than an int counts, and any product that overflows 64 bits.
inline StepCounts step_counts(long long B, long long T, long long ranks, long long total_batch, long long steps) {
    StepCounts c;
    c.positions = batch_positions(B, T);
    c.micro_tokens = checked_product(ranks, c.positions, "ranks*B*T");
    if (total_batch < 1 || total_batch % c.micro_tokens != 0)
        throw InputError("flag -total_batch: " + std::to_string(total_batch) + " is not a multiple of " +
                         (ranks > 1 ? "ranks*B*T = " + std::to_string(ranks) + "*" + std::to_string(B) + "*" +
                                          std::to_string(T) + " = "
                                    : std::string("B*T = ")) +
                         std::to_string(c.micro_tokens));
    const long long micro_steps = total_batch / c.micro_tokens;
    if (micro_steps > kMaxIntCount)
        throw InputError("flag -total_batch: " + std::to_string(total_batch) + " tokens make " +
                         std::to_string(micro_steps) + " micro-steps of " + std::to_string(c.micro_tokens) +
                         " tokens per step, more than " + std::to_string(kMaxIntCount) + "; lower -total_batch");
    c.grad_accum = (int)micro_steps;
    c.run_tokens = checked_product(steps, total_batch, "flags -steps and -total_batch: steps*total_batch");
    return c;
}

// The default -total_batch under `ranks` ranks: `one_process`, the tokens per step of one
// process with the same flags (B·T on the CPU, default_gpu_total_batch on CUDA), whatever the
// number of ranks, so that `mpirun -np N` with the same flags trains the same run as one process
// (docs/distributed.md). When ranks·B·T does not divide it (on the CPU with
// several ranks, always) the run is refused: its step is then chosen with -total_batch, as llm.c's
// total_batch_size is given explicitly.
inline long long default_total_batch(long long one_process, long long B, long long T, long long ranks) {
    const long long micro_tokens = checked_product(ranks, batch_positions(B, T), "ranks*B*T");
    if (one_process % micro_tokens != 0)
        throw InputError("flag -total_batch: not given, and its default, one process's step of " +
                         std::to_string(one_process) + " tokens, is not a multiple of ranks*B*T = " +
                         std::to_string(ranks) + "*" + std::to_string(B) + "*" + std::to_string(T) + " = " +
                         std::to_string(micro_tokens) + "; give -total_batch (a multiple of " +
                         std::to_string(micro_tokens) + ") to choose the step");
    return one_process;
}

// The tokens of an evaluation of `batches` batches of B x T, checked.
inline long long evaluation_tokens(long long batches, long long B, long long T) {
    return checked_product(batches, batch_positions(B, T), "flag -eval_batches: eval_batches*B*T");
}
