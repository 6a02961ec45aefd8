// fuzz_input.h — shared by the libFuzzer targets test/fuzz_*.cpp (README "Fuzzing"): the readers
// under test take a path, so each input is written to one scratch file per process first.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// Writes the fuzzer's input to this process's scratch file (in $TMPDIR, else /tmp) and returns
// its path.
inline std::string input_file(const uint8_t* data, size_t size) {
    static const std::string path = [] {
        const char* tmp = std::getenv("TMPDIR");
        return std::string(tmp && *tmp ? tmp : "/tmp") + "/fuzz_input_" + std::to_string(getpid()) + ".bin";
    }();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}
