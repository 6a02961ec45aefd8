// tokenize.cpp — command-line front end of the GPT-2 tokenizer (tokenizer.h).
//
//   ./tokenize < text.txt        prints the token ids of standard input, one per line
//   ./tokenize -d < ids.txt      reads token ids (separated by whitespace), writes their text
//   -tokenizer PATH              the tokenizer file (default data/gpt2_tokenizer.bin)
//   -h, --help                   prints the usage
//
// Bad flags or input: one line on standard error, exit status 2.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "errors.h"
#include "flags.h"
#include "tokenizer.h"

// What the command line asks for.
struct Options {
    bool decode = false;
    std::string tokenizer_path = "data/gpt2_tokenizer.bin";
};

// Parses the flags; throws InputError for an unknown flag or a missing value.
static Options parse_options(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "-d") {
            options.decode = true;
        } else if (flag == "-tokenizer") {
            if (i + 1 >= argc) throw InputError("-tokenizer: missing value");
            options.tokenizer_path = argv[++i];
        } else {
            throw InputError(flag + ": unknown flag (usage: ./tokenize [-d] [-tokenizer PATH] < input)");
        }
    }
    return options;
}

// All of standard input, as bytes.
static std::string read_stdin() {
    std::ios::sync_with_stdio(false);
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
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

// Writes the ids one per line to standard output.
static void print_ids(const std::vector<int>& ids) {
    std::string out;
    out.reserve(ids.size() * 6);
    for (int id : ids) (out += std::to_string(id)) += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
}

static const char* USAGE =
    "usage: ./tokenize [-d] [-tokenizer PATH] < input\n"
    "  (no flag)        prints the GPT-2 token ids of standard input, one per line\n"
    "  -d               reads token ids (separated by whitespace) and writes their text\n"
    "  -tokenizer PATH  the tokenizer file (data/gpt2_tokenizer.bin)\n";

int main(int argc, char** argv) {
    if (help_requested(argc, argv)) {
        std::fputs(USAGE, stdout);
        return 0;
    }
    try {
        const Options options = parse_options(argc, argv);
        const Tokenizer tokenizer(options.tokenizer_path);
        const std::string input = read_stdin();
        if (options.decode) {
            const std::string text = tokenizer.decode(parse_ids(input));
            std::fwrite(text.data(), 1, text.size(), stdout);
        } else {
            print_ids(tokenizer.encode(input));
        }
    } catch (const InputError& e) {
        std::fprintf(stderr, "tokenize: %s\n", e.what());
        return 2;
    }
    return 0;
}
