// run/signals.h — stopping ./train like a user expects (docs/train.md §7), in two
// phases:
//   start-up (from install() until the run writes its folder, begin_training()): nothing is
//     written yet, so SIGINT, SIGTERM or SIGHUP ends the process at once, as the signal normally
//     would, whatever it is doing (reading data, waiting in a read);
//   training: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP (its terminal closed) asks the run to
//     stop after its current step, or at once in an evaluation (which is then dropped), and to
//     write the checkpoint pair of the steps done and exit with status 128 + the signal (130,
//     143, 129); a second one of any of them ends the process at once, as the signal normally
//     would.
// SIGPIPE, a closed standard output (`./train | head`), is ignored throughout: the lines printed
// after it are lost, and the run trains on, writing log.jsonl and its checkpoints as ever.
#pragma once
#include <unistd.h>

#include <csignal>

namespace stop_request {

inline volatile std::sig_atomic_t signal_number = 0;
inline volatile std::sig_atomic_t training = 0;  // 1 once begin_training() was called

// The signals that stop a run.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Sets the action for `sig` (sigaction is safe in a handler).
inline void set_action(int sig, void (*handler)(int)) {
    struct sigaction action = {};
    action.sa_handler = handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, nullptr);
}

// The handler. In start-up: the default action back and the signal raised again, so that it ends
// the process as it normally would once the handler returns. In training: records the signal,
// puts the default action back for the three (the next one ends the process), and says so on
// stderr (write(2) is safe in a handler).
inline void on_signal(int sig) {
    for (int stop : kStopSignals) set_action(stop, SIG_DFL);
    if (!training) {
        raise(sig);
        return;
    }
    signal_number = sig;
    const char message[] =
        "\nstopping after the current step or evaluation, with a checkpoint (send a signal again to quit at once)\n";
    if (::write(STDERR_FILENO, message, sizeof message - 1) < 0) {}
}

// Installs the handler for SIGINT, SIGTERM and SIGHUP, in start-up, and ignores SIGPIPE.
inline void install() {
    for (int sig : kStopSignals) set_action(sig, on_signal);
    set_action(SIGPIPE, SIG_IGN);
}

// From now on a signal stops the run after its current step, with a checkpoint: called before the
// run writes its folder.
inline void begin_training() { training = 1; }

// The signal that asked to stop, or 0.
inline int requested() { return signal_number; }

// The exit status after stopping for `sig`: 128 + sig, as a shell reports a process the signal ended.
inline int exit_status(int sig) { return 128 + sig; }

// "SIGINT", "SIGTERM" or "SIGHUP".
inline const char* name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP"; }

}  // namespace stop_request
