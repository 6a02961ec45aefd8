// run/signals.h — stopping ./train like a user expects (docs/train.md §7): the first
// SIGINT (Ctrl-C) or SIGTERM asks the run to stop after its current step, or at once in an
// evaluation (which is then dropped), and to write the checkpoint pair of the steps done and exit
// with status 128 + the signal (130, 143); a second one of either kind ends the process at once,
// as the signal normally would (the shell reports 130 or 143 too).
#pragma once
#include <unistd.h>

#include <csignal>

namespace stop_request {

inline volatile std::sig_atomic_t signal_number = 0;

// The handler: records the signal, says so on stderr (write(2) is safe in a handler), and puts
// the default action back for both signals (sigaction is safe in a handler too), so that the
// next SIGINT or SIGTERM, whichever it is, ends the process.
inline void on_signal(int sig) {
    signal_number = sig;
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGINT, &fallback, nullptr);
    sigaction(SIGTERM, &fallback, nullptr);
    const char message[] =
        "\nstopping after the current step or evaluation, with a checkpoint (send a signal again to quit at once)\n";
    if (::write(STDERR_FILENO, message, sizeof message - 1) < 0) {}
}

// Installs the handler for SIGINT and SIGTERM.
inline void install() {
    struct sigaction action = {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

// The signal that asked to stop, or 0.
inline int requested() { return signal_number; }

// The exit status after stopping for `sig`: 128 + sig, as a shell reports a process the signal ended.
inline int exit_status(int sig) { return 128 + sig; }

// "SIGINT" or "SIGTERM".
inline const char* name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace stop_request
