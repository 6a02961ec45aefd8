// errors.h — the two ways a run ends early, shared by every program.
//   InputError: the user gave something unusable (flag, file, shape). Programs print one line
//               naming the flag or file and exit with status 2, before any work starts.
//   Divergence (not an exception): see train.cpp, exit status 3.
#pragma once
#include <stdexcept>
#include <string>

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
