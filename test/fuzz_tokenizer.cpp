// Fuzz target: the tokenizer-file reader (tokenizer.h). Any bytes must either load as a tokenizer
// that encodes and decodes a short text (decode(encode(s)) == s), or be refused with an InputError.
#include "fuzz_input.h"
#include "tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const FuzzInputFile input(data, size);
    const std::string& path = input.path;
    try {
        const Tokenizer tok(path);
        for (int id = 0; id < std::min(tok.vocab_size(), 64); id++) tok.decode_token(id);
        const std::string text = "Call me Ishmael. \xff\xfe 123";
        if (tok.decode(tok.encode(text)) != text) std::abort();  // (a decode-only file throws here)
    } catch (const InputError&) {
    }
    return 0;
}
