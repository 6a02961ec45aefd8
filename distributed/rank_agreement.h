// distributed/rank_agreement.h — ./train's ranks under mpirun start together or fail together (docs/distributed.md): a stage of start-up that fails on one rank fails on all
// with one line from rank 0, and every rank must run with the same settings.
#pragma once
#include <string>

#include "distributed/process_group.h"
#include "util/errors.h"
#include "util/json.h"

// How a rank other than 0 leaves after an agreed failure: silently, with `status`.
struct QuietExit {
    int status;
};
// Rank 0's InputError after an agreed failure: every rank knows it, so no rank aborts the job.
struct AgreedInputError : InputError {
    using InputError::InputError;
};

// Runs `start` (a stage of start-up) on every rank of `group` and fails all of them together
// when it threw InputError on any: rank 0 throws the message of the lowest failing rank, the
// other ranks QuietExit (they print nothing, so the user reads one line); every rank exits 2.
// A collective inside `start` must come first: a rank that failed before it would not take part.
template <typename Start>
void start_on_every_rank(ProcessGroup& group, Start start) {
    std::string error;
    try {
        start();
    } catch (const InputError& e) {
        error = e.what();
    }
    try {
        group.agree(error);
    } catch (const InputError& e) {
        if (!group.is_root()) throw QuietExit{2};
        throw AgreedInputError(e.what());
    }
}

// Refuses (InputError on every rank) ranks whose config.json would differ in anything but its
// "backend" (the thread count or the GPU, which may differ between ranks): every rank must train
// the same model on the same data and schedule.
inline void check_ranks_agree(ProcessGroup& group, Json config) {
    config.remove("backend");
    group.check_same_settings(config.lines());
}
