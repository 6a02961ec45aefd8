// fuzz_input.h — shared by the libFuzzer targets test/fuzz_*.cpp (docs/testing.md §4): the readers
// under test take a path, so each input is written to a scratch file first.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// The fuzzer's input as a file of this process (in $TMPDIR, else /dev/shm or /tmp), removed again
// when the input is done.
struct FuzzInputFile {
    std::string path;

    FuzzInputFile(const uint8_t* data, size_t size)
        : path(folder() + "/fuzz_input_" + std::to_string(getpid()) + ".bin") {
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f) std::abort();
        if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
        std::fclose(f);
    }
    ~FuzzInputFile() { std::remove(path.c_str()); }

    static std::string folder() {
        const char* tmp = std::getenv("TMPDIR");
        return tmp && *tmp ? tmp : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    }
};
