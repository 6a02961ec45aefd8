// tokenize.cpp — command-line front end of the GPT-2 tokenizer (tokenizer.h).
//
//   ./tokenize < text.txt        prints the token ids of standard input, one per line
//   ./tokenize -d < ids.txt      reads token ids (separated by whitespace), writes their text
//   ./tokenize -shard PATH < text.txt
//                                writes the end-of-text token and the ids of standard input as one
//                                token shard (docs/formats.md §1), the one prepare_data.py makes
//                                of a .txt file with --val_fraction 0
//   -tokenizer PATH              the tokenizer file (default data/gpt2_tokenizer.bin)
//   -h, --help                   prints the usage
//
// Bad flags or input: one line on standard error, exit status 2, before any output; that
// includes an output (standard output, -shard) that is the tokenizer file or standard input, a
// -tokenizer that is not a regular file, and more than MAX_INPUT_BYTES of standard input.
// -shard PATH follows docs/cli.md §6: a file is written whole, a link's target replaced, a
// character device or FIFO (-shard /dev/stdout) written through (the "wrote" line then goes to
// standard error). A -shard write that fails (a full disk, ulimit -f): one line, exit status 4,
// no file left. A closed standard output ends ./tokenize as it ends any filter (SIGPIPE).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "dataloader.h"
#include "util/errors.h"
#include "flags/flags.h"
#include "util/paths.h"
#include "tokenizer.h"

// What the command line asks for.
struct Options {
    bool decode = false;
    std::string tokenizer_path = "data/gpt2_tokenizer.bin";
    std::string shard_path;  // empty: print the ids
};

// Parses the flags; throws InputError for an unknown flag or a missing value.
static Options parse_options(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "-d") {
            options.decode = true;
        } else if (flag == "-tokenizer" || flag == "-shard") {
            if (i + 1 >= argc) throw InputError(flag + ": missing value");
            (flag == "-tokenizer" ? options.tokenizer_path : options.shard_path) = argv[++i];
        } else {
            throw InputError(flag + ": unknown flag (usage: ./tokenize [-d | -shard PATH] [-tokenizer PATH] < input)");
        }
    }
    if (options.decode && !options.shard_path.empty()) throw InputError("-shard: writes the ids of text, not with -d");
    return options;
}

// Refuses an output that would replace an input (standard output or the -shard file being the
// tokenizer file or standard input, compared as files, not names) and a -shard path that cannot
// be written (util/paths.h: a folder, a dangling link, a folder that takes no file); all before
// any work.
static void check_outputs(const Options& options) {
    const std::vector<CommandInput> inputs = {
        {"the -tokenizer file " + options.tokenizer_path, file_id(options.tokenizer_path)},
        {"standard input", descriptor_id(0)},
    };
    check_not_an_input("standard output", descriptor_id(1), inputs);
    if (options.shard_path.empty()) return;
    const std::string shard = "-shard " + options.shard_path;
    check_not_an_input(shard, file_id(options.shard_path), inputs);
    check_can_create(options.shard_path, shard);
}

// The most standard input read: a larger corpus is prepare_data.py's work (docs/data.md), and an
// endless input (< /dev/zero) is refused here instead of filling the memory.
constexpr size_t MAX_INPUT_BYTES = size_t(1) << 30;

// All of standard input, as bytes; InputError beyond MAX_INPUT_BYTES.
static std::string read_stdin() {
    std::string text;
    char block[1 << 16];
    for (size_t got; (got = std::fread(block, 1, sizeof block, stdin)) > 0;) {
        text.append(block, got);
        if (text.size() > MAX_INPUT_BYTES)
            throw InputError("standard input: more than " + std::to_string(MAX_INPUT_BYTES) +
                             " bytes; ./tokenize reads at most that (prepare_data.py makes shards of a larger corpus)");
    }
    return text;
}

// The token ids written in `text`, separated by whitespace; throws InputError for anything else.
static std::vector<int> parse_ids(const std::string& text) {
    std::vector<int> ids;
    size_t pos = 0;
    while ((pos = text.find_first_not_of(" \t\r\n\v\f", pos)) != std::string::npos) {
        const size_t end = std::min(text.find_first_of(" \t\r\n\v\f", pos), text.size());
        const std::string word = text.substr(pos, end - pos);
        if (word.size() > 9 || word.find_first_not_of("0123456789") != std::string::npos)
            throw InputError("standard input: '" + word + "' is not a token id");
        ids.push_back(std::stoi(word));
        pos = end;
    }
    return ids;
}

// Writes the end-of-text token followed by `ids` to `path` as one token shard that records the
// tokenizer's fingerprint, whole or not at all; returns its token count.
static size_t write_shard(const std::string& path, const std::vector<int>& ids, const Tokenizer& tokenizer) {
    if (ids.empty()) throw InputError("standard input: no text to write as a shard");
    if (tokenizer.vocab_size() > 65536)
        throw InputError("-shard: the tokenizer's " + std::to_string(tokenizer.vocab_size()) + " ids do not fit a shard's uint16");
    if (ids.size() >= INT32_MAX) throw InputError("standard input: too many tokens for one shard");
    std::vector<uint16_t> tokens{static_cast<uint16_t>(tokenizer.eot())};
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    int32_t header[256] = {kShardMagic, kShardVersion, static_cast<int32_t>(tokens.size())};
    header[kShardTokenizerWord] = static_cast<int32_t>(tokenizer.fingerprint());
    try {
        write_file_atomically(path, {{header, sizeof header}, {tokens.data(), sizeof(uint16_t) * tokens.size()}});
    } catch (const InputError& e) {
        throw OutputError(e.what());
    }
    return tokens.size();
}

// Writes the ids one per line to standard output.
static void print_ids(const std::vector<int>& ids) {
    std::string out;
    out.reserve(ids.size() * 6);
    for (int id : ids) (out += std::to_string(id)) += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
}

static const char* USAGE =
    "usage: ./tokenize [-d | -shard PATH] [-tokenizer PATH] < input\n"
    "  (no flag)        prints the GPT-2 token ids of standard input, one per line\n"
    "  -d               reads token ids (separated by whitespace) and writes their text\n"
    "  -shard PATH      writes the end-of-text token and the ids of standard input as a token shard\n"
    "  -tokenizer PATH  the tokenizer file (data/gpt2_tokenizer.bin)\n";

int main(int argc, char** argv) {
    fail_writes_past_the_file_size_limit();
    if (help_requested(argc, argv)) {
        std::fputs(USAGE, stdout);
        return 0;
    }
    try {
        const Options options = parse_options(argc, argv);
        check_outputs(options);
        const Tokenizer tokenizer(options.tokenizer_path);
        const std::string input = read_stdin();
        if (options.decode) {
            const std::string text = tokenizer.decode(parse_ids(input));
            std::fwrite(text.data(), 1, text.size(), stdout);
        } else if (!options.shard_path.empty()) {
            const size_t count = write_shard(options.shard_path, tokenizer.encode(input), tokenizer);
            std::fprintf(output_target(options.shard_path, "-shard").descriptor == STDOUT_FILENO ? stderr : stdout,
                         "wrote %s (%zu tokens, tokenizer %s)\n", options.shard_path.c_str(), count,
                         tokenizer_name(tokenizer.fingerprint()).c_str());
        } else {
            print_ids(tokenizer.encode(input));
        }
    } catch (const InputError& e) {
        std::fprintf(stderr, "tokenize: %s\n", e.what());
        return 2;
    } catch (const OutputError& e) {
        std::fprintf(stderr, "tokenize: %s\n", e.what());
        return 4;
    }
    return 0;
}
