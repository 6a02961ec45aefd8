// Fuzz target: the GPT-2 safetensors reader (run/safetensors.h). Any bytes must either load as a
// model whose sizes are valid, with one float per parameter, that exports and loads back as the
// same floats bit for bit; or be refused with an InputError.
#include <cstring>

#include "fuzz_input.h"
#include "run/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const FuzzInputFile input(data, size);
    try {
        std::vector<float> params, again;
        const ModelConfig cfg = gpt2_from_safetensors(read_safetensors(input.path), input.path, &params);
        validate_config(cfg, "fuzz");
        if (params.size() != num_parameters(cfg)) std::abort();
        const std::string exported = input.path + ".safetensors";
        write_gpt2_safetensors(exported, cfg, params.data());
        const ModelConfig back = read_model_file(exported, &again);
        std::remove(exported.c_str());
        if (back.L != cfg.L || back.C != cfg.C || back.NH != cfg.NH || back.V != cfg.V || back.maxT != cfg.maxT ||
            back.placement != cfg.placement || back.dt != cfg.dt || again.size() != params.size() ||
            std::memcmp(again.data(), params.data(), params.size() * sizeof(float)) != 0)
            std::abort();
    } catch (const InputError&) {
    }
    return 0;
}
