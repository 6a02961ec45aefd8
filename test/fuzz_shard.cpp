// Fuzz target: the token-shard reader (dataloader.h). Any bytes must either load as a shard and
// yield batches whose ids are below the vocabulary, or be refused with an InputError.
#include "dataloader.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const FuzzInputFile input(data, size);
    const std::string& path = input.path;
    const int V = 50257;
    DataLoader::longest_shard_tokens(path);
    try {
        DataLoader loader(path, 1, 4, V, true, 1);
        for (uint64_t i = 0; i < std::min<uint64_t>(loader.num_windows() + 1, 8); i++) {
            loader.next_batch();
            for (int k = 0; k < 4; k++)
                if (loader.inputs()[k] < 0 || loader.inputs()[k] >= V || loader.targets()[k] >= V) std::abort();
        }
        loader.restore(loader.state());
    } catch (const InputError&) {
    }
    return 0;
}
