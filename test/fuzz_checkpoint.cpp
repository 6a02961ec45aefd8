// Fuzz target: the model checkpoint reader (run/checkpoint.h). Any bytes must either load as a model whose
// sizes are valid and whose every parameter tensor lies inside the buffer read, or be refused
// with an InputError.
#include "fuzz_input.h"
#include "run/checkpoint.h"
#include "model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const FuzzInputFile input(data, size);
    const std::string& path = input.path;
    try {
        std::vector<float> params;
        const ModelConfig cfg = read_checkpoint(path, &params);
        validate_config(cfg, "fuzz");
        if (params.size() != num_parameters(cfg)) std::abort();
        const auto sizes = param_sizes(cfg), offsets = param_offsets(cfg);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++)
            if (sizes[i] > 0 && offsets[i] + sizes[i] > params.size()) std::abort();
    } catch (const InputError&) {
    }
    return 0;
}
