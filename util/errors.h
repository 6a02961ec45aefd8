// util/errors.h — the ways a run ends early, shared by every program.
//   InputError: the user gave something unusable (flag, file, shape). Programs print one line
//               naming the flag or file and exit with status 2, before any work starts.
//   OutputError: a write the run depends on failed (disk full, folder removed or read-only).
//               Programs print one line and exit with status 4; ./train leaves its last
//               complete checkpoint pair as it was.
//   CollectiveError: a collective between the ranks of a data-parallel job failed, or did not
//               finish in time (a peer died or hangs). Programs print one line and exit with
//               status 1; under mpirun ./train then ends every rank.
//   Divergence (not an exception): see train.cpp, exit status 3.
#pragma once
#include <stdexcept>
#include <string>

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct OutputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct CollectiveError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A count with its noun, as messages and start-up lines write it: counted(1, "file") is
// "1 file", counted(3, "file") is "3 files".
inline std::string counted(long long n, const std::string& noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}
