// Fuzz target: ./train's optimiser-state reader (read_state in run/checkpoint.h, whose file layout docs/formats.md
// gives) and the resume check on it. Any bytes must either load as the state of a
// 16-parameter model or be refused with an InputError (a Pre-LN model's state). train.cpp is compiled in with its main()
// renamed, so the reader tested is the program's own.
#define main train_main
#include "../train.cpp"
#undef main

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const FuzzInputFile input(data, size);
    const std::string& path = input.path;
    try {
        const TrainState s = read_state(path, 16, Placement::Pre);
        if (s.m.size() != 16 || s.v.size() != 16) std::abort();
        TrainOptions o;
        o.seed = 42;
        check_resumed_state(s, 8, o, path);
    } catch (const InputError&) {
    }
    return 0;
}
