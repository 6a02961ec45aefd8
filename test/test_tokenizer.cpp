// Tests of tokenizer.h: GPT-2's byte-level BPE against ids from an independent encoder
// (test/fixtures/tokenizer_ids.txt, made by scripts/gen_tokenizer_fixture.js with the npm
// package gpt-3-encoder), exact round trips on arbitrary bytes, bad tokenizer files, the
// fingerprint that shards record, and ./tokenize (ids, text, shards, and outputs that would
// replace an input).
// Run from the repository root (as `make test` does): it reads data/ and test/fixtures/.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "test_files.h"
#include "tokenizer.h"

namespace {

const char* kTokenizerPath = "data/gpt2_tokenizer.bin";

// Writes `content` to `path`.
void write_file(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::binary) << content;
}

// The integers written in a text file, separated by whitespace.
std::vector<int> read_ids(const std::string& path) {
    std::ifstream in(path);
    return std::vector<int>(std::istream_iterator<int>(in), std::istream_iterator<int>());
}

// The GPT-2 tokenizer, read once for all tests.
const Tokenizer& gpt2() {
    static const Tokenizer tokenizer(kTokenizerPath);
    return tokenizer;
}

// `value` as 4 little-endian bytes.
std::string u32(uint32_t value) {
    std::string bytes(4, '\0');
    for (int i = 0; i < 4; i++) bytes[i] = static_cast<char>(value >> (8 * i));
    return bytes;
}

// A tokenizer file: the 256 single bytes, then `extra_tokens`, then `merges` (pairs of ids).
std::string tokenizer_file(const std::vector<std::string>& extra_tokens,
                           const std::vector<std::pair<int, int>>& merges, uint32_t magic = 20240328) {
    const uint32_t vocab_size = 256 + extra_tokens.size();
    std::string file = u32(magic) + u32(2) + u32(vocab_size) + u32(vocab_size - 1) + u32(merges.size());
    file += std::string(4 * 251, '\0');
    for (int b = 0; b < 256; b++) file += std::string(1, '\1') + std::string(1, static_cast<char>(b));
    for (const std::string& token : extra_tokens) file += std::string(1, static_cast<char>(token.size())) + token;
    for (const auto& [left, right] : merges) file += u32(left) + u32(right);
    return file;
}

// A small tokenizer: tokens 256 "bc", 257 "ab", 258 "abc", 259 "aa", 260 "aaaa", 261 "<eot>";
// merges by rank: (b,c) (a,b) (a,bc) (a,a) (aa,aa).
Tokenizer tiny_tokenizer() {
    const std::string path = fresh_folder("tokenizer_") + "tiny_tokenizer.bin";
    write_file(path, tokenizer_file({"bc", "ab", "abc", "aa", "aaaa", "<eot>"},
                                    {{'b', 'c'}, {'a', 'b'}, {'a', 256}, {'a', 'a'}, {259, 259}}));
    return Tokenizer(path);
}

// The message of the InputError that reading the tokenizer file at `path` throws.
std::string load_error_of_path(const std::string& path) {
    try {
        Tokenizer tokenizer(path);
    } catch (const InputError& e) {
        return e.what();
    }
    return "no error";
}

// The message of the InputError that reading `file_content` as a tokenizer file throws.
std::string load_error(const std::string& file_content) {
    const std::string path = fresh_folder("tokenizer_") + "bad_tokenizer.bin";
    write_file(path, file_content);
    return load_error_of_path(path);
}

// 32-bit FNV-1a of `bytes`, from its definition: start at the offset basis 2166136261; for each
// byte, xor it in, then multiply by the prime 16777619 (mod 2^32).
uint32_t fnv1a(const std::string& bytes) {
    uint32_t hash = 2166136261u;
    for (unsigned char byte : bytes) hash = (hash ^ byte) * 16777619u;
    return hash;
}

// The little-endian uint32 at byte `offset` of `file`.
uint32_t u32_at(const std::string& file, size_t offset) {
    uint32_t value = 0;
    for (int b = 3; b >= 0; b--) value = (value << 8) | static_cast<uint8_t>(file[offset + b]);
    return value;
}

// What one run of a shell command did.
struct CommandRun {
    int status;          // exit status (-1: killed by a signal)
    std::string errors;  // what it wrote on standard error
};

// Runs `command` with its standard error kept in `folder`.
CommandRun run_command(const std::string& command, const std::string& folder) {
    const int status = std::system((command + " 2> " + folder + "stderr.txt").c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(folder + "stderr.txt")};
}

// True when `errors` is exactly one line that contains `needle`.
bool one_line_with(const std::string& errors, const std::string& needle) {
    return errors.find(needle) != std::string::npos && errors.find('\n') == errors.size() - 1;
}

// ./tokenize's bounds at their edges: a flag without its value; an id of 9 digits read, one of
// 10 refused, a word that is no number refused; an input of exactly 1 GiB read; -shard with a tokenizer of 65536 ids written
// (they fit a uint16), of 65537 refused.
TEST(Tokenizer, FrontEndBoundsAtTheirEdges) {
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const std::string folder = fresh_folder("tokenizer_");
    for (const std::string flag : {"-shard", "-tokenizer"}) {
        const CommandRun run = run_command("./tokenize " + flag + " < /dev/null > /dev/null", folder);
        EXPECT_EQ(run.status, 2) << flag;
        EXPECT_TRUE(one_line_with(run.errors, flag + ": missing value")) << run.errors;
    }
    const CommandRun nine = run_command("echo 000000066 | ./tokenize -d > " + folder + "nine.txt", folder);
    EXPECT_EQ(nine.status, 0) << nine.errors;
    EXPECT_EQ(read_file(folder + "nine.txt"), "c");  // GPT-2's id 66 is the byte 'c'
    for (const std::string word : {"0000000066", "x12"}) {
        const CommandRun run = run_command("echo " + word + " | ./tokenize -d > /dev/null", folder);
        EXPECT_EQ(run.status, 2) << word;
        EXPECT_TRUE(one_line_with(run.errors, "standard input: '" + word + "' is not a token id")) << run.errors;
    }
    // Standard input of exactly the 1 GiB ./tokenize reads (blanks: no ids) is read whole.
    const CommandRun whole = run_command("yes ' ' | head -c 1073741824 | ./tokenize -d > /dev/null", folder);
    EXPECT_EQ(whole.status, 0) << whole.errors;
    for (int vocab : {65536, 65537}) {
        std::vector<std::string> extra{"ab"};
        for (int id = 257; id < vocab; id++) extra.push_back("t" + std::to_string(id));
        write_file(folder + "wide.bin", tokenizer_file(extra, {{'a', 'b'}}));
        const CommandRun run =
            run_command("printf ab | ./tokenize -tokenizer " + folder + "wide.bin -shard " + folder + "wide_shard.bin > /dev/null", folder);
        if (vocab == 65536) {
            EXPECT_EQ(run.status, 0) << run.errors;
            EXPECT_EQ(read_file(folder + "wide_shard.bin").size(), 1024u + 2 * 2);  // end of text, "ab"
        } else {
            EXPECT_EQ(run.status, 2);
            EXPECT_TRUE(one_line_with(run.errors, "-shard: the tokenizer's 65537 ids do not fit a shard's uint16")) << run.errors;
        }
    }
}

}  // namespace

TEST(Tokenizer, MatchesTheReferenceEncoderOnTheFixture) {
    const std::string text = read_file("test/fixtures/tokenizer_text.txt");
    const std::vector<int> expected = read_ids("test/fixtures/tokenizer_ids.txt");
    ASSERT_GT(text.size(), 4000u) << "test/fixtures/tokenizer_text.txt missing (run from the repository root)";
    ASSERT_GT(expected.size(), 1000u);
    const std::vector<int> ids = gpt2().encode(text);
    ASSERT_EQ(ids.size(), expected.size());
    for (size_t i = 0; i < ids.size(); i++)
        ASSERT_EQ(ids[i], expected[i]) << "first difference at token " << i << ", near text \""
                                       << gpt2().decode(std::vector<int>(expected.begin() + (i > 5 ? i - 5 : 0),
                                                                         expected.begin() + i + 1)) << "\"";
    EXPECT_EQ(gpt2().decode(expected), text);
}

TEST(Tokenizer, KnowsGpt2Vocabulary) {
    EXPECT_EQ(gpt2().vocab_size(), 50257);
    EXPECT_EQ(gpt2().eot(), 50256);
    EXPECT_EQ(gpt2().decode_token(50256), "<|endoftext|>");
    EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int>{15496, 995}));
    EXPECT_EQ(gpt2().encode(""), std::vector<int>{});
    // The end-of-text marker written in text is ordinary text, as in GPT-2's encoder.
    EXPECT_EQ(gpt2().encode("<|endoftext|>"), (std::vector<int>{27, 91, 437, 1659, 5239, 91, 29}));
}

TEST(Tokenizer, SplitsLikeGpt2Pattern) {
    using Pieces = std::vector<std::string>;
    const std::vector<std::pair<std::string, Pieces>> cases = {
        {"Hello  world", {"Hello", " ", " world"}},
        {"it's IT'S", {"it", "'s", " IT", "'", "S"}},
        {"we'll've", {"we", "'ll", "'ve"}},
        {"don\u2019t", {"don", "\u2019", "t"}},
        {"!!'s", {"!!'", "s"}},
        {"a\n\nb", {"a", "\n", "\n", "b"}},
        {"a \n b", {"a", " \n", " b"}},
        {"x  ", {"x", "  "}},
        {"  x", {" ", " x"}},
        {"\t\tx", {"\t", "\t", "x"}},
        {"\r\n\r\n", {"\r\n\r\n"}},
        {" ?! ", {" ?!", " "}},
        {" 123abc", {" 123", "abc"}},
        {"x_y", {"x", "_", "y"}},
        {"caf\u00e9's \u00fcber 42", {"caf\u00e9", "'s", " \u00fcber", " 42"}},
        {"\u0663\u0664five \u216b\u00bd\u00b2", {"\u0663\u0664", "five", " \u216b\u00bd\u00b2"}},
        {"\u4f60\u597d\uff0c\u4e16\u754c", {"\u4f60\u597d", "\uff0c", "\u4e16\u754c"}},
        {"e\u0301t\u00e9", {"e", "\u0301", "t\u00e9"}},
        {"a \U0001F600\U0001F600 b", {"a", " \U0001F600\U0001F600", " b"}},
        {"x\u3000\u3000y a\u00a0b", {"x", "\u3000", "\u3000", "y", " a", "\u00a0", "b"}},
        {"a\xC3(b\xFF", {"a", "\xC3(", "b", "\xFF"}},  // invalid UTF-8 bytes are "other" symbols
    };
    for (const auto& [text, pieces] : cases) EXPECT_EQ(gpt2_bpe::split_pieces(text), pieces) << text;
}

TEST(Tokenizer, MergesLowestRankFirstThenLeftToRight) {
    const Tokenizer tiny = tiny_tokenizer();
    EXPECT_EQ(tiny.encode("abc"), (std::vector<int>{258}));           // (b,c) before (a,b), then (a,bc)
    EXPECT_EQ(tiny.encode("abd"), (std::vector<int>{257, 'd'}));
    EXPECT_EQ(tiny.encode("aaa"), (std::vector<int>{259, 'a'}));      // leftmost pair first
    EXPECT_EQ(tiny.encode("aaaaa"), (std::vector<int>{260, 'a'}));
    EXPECT_EQ(tiny.encode("abab abc"), (std::vector<int>{257, 257, ' ', 258}));
    EXPECT_EQ(tiny.eot(), 261);
}

TEST(Tokenizer, RoundTripsRandomBytes) {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; trial++) {
        std::string text(rng() % 600, '\0');
        for (char& c : text) c = static_cast<char>(rng());
        ASSERT_EQ(gpt2().decode(gpt2().encode(text)), text) << "trial " << trial;
    }
}

TEST(Tokenizer, RoundTripsRandomUtf8) {
    // Code points drawn from ASCII, whitespace, Latin, combining marks, CJK, emoji and the edges
    // of the planes, so that every character class and sequence length appears.
    const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
        {0x00, 0x7F}, {0x09, 0x0D}, {0x20, 0x20}, {0x80, 0x2FF}, {0x300, 0x36F}, {0x2000, 0x206F},
        {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xFFF0, 0xFFFF}, {0x1F300, 0x1FAFF}, {0x10FF00, 0x10FFFF}};
    std::mt19937 rng(99);
    for (int trial = 0; trial < 300; trial++) {
        std::string text;
        for (int n = rng() % 300; n > 0; n--) {
            const auto& [first, last] = ranges[rng() % ranges.size()];
            const uint32_t cp = first + rng() % (last - first + 1);
            if (cp < 0x80) text += static_cast<char>(cp);
            else if (cp < 0x800) text += {char(0xC0 | cp >> 6), char(0x80 | (cp & 0x3F))};
            else if (cp < 0x10000) text += {char(0xE0 | cp >> 12), char(0x80 | (cp >> 6 & 0x3F)), char(0x80 | (cp & 0x3F))};
            else text += {char(0xF0 | cp >> 18), char(0x80 | (cp >> 12 & 0x3F)), char(0x80 | (cp >> 6 & 0x3F)), char(0x80 | (cp & 0x3F))};
        }
        ASSERT_EQ(gpt2().decode(gpt2().encode(text)), text) << "trial " << trial;
    }
}

TEST(Tokenizer, RoundTripsAdversarialText) {
    const std::vector<std::string> texts = {
        std::string("\0\0a\0", 4), "\xE2\x82", "\xE2\x82 x", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
        "\xFF\xFE\xFD", "\x80\x80\x80", "\xF0\x9F\x98", "a\xF0\x9F\x98\x80\x80", "'", "'s'S''s'''", " '", "' ",
        std::string(100000, ' '), std::string(50000, '\n'), std::string(100000, 'a'), "x" + std::string(30000, '\t') + "y",
        std::string(20000, '!'), "\u00a0\u3000\u2028\u0085\ufeff\x1c", "<|endoftext|><|endoftext|>",
    };
    for (const std::string& text : texts) EXPECT_EQ(gpt2().decode(gpt2().encode(text)), text) << text.substr(0, 20);
    std::string runs;
    for (int i = 0; i < 2000; i++) runs += "ab1 \r\n"[i % 6] + std::string(i % 7, "x\n 9?\u00e9"[i % 5]);
    EXPECT_EQ(gpt2().decode(gpt2().encode(runs)), runs);
}

TEST(Tokenizer, ReencodesTheBundledMobyDickShards) {
    // prepare_data.py wrote these shards: documents (chapters) each preceded by the end-of-text
    // token. Decoding a document and encoding it again must give the same tokens.
    for (const char* path : {"data/mobydick_train_000000.bin", "data/mobydick_val_000000.bin"}) {
        const std::string shard = read_file(path);
        ASSERT_GT(shard.size(), 1024u) << path;
        std::vector<int> tokens((shard.size() - 1024) / 2);
        for (size_t i = 0; i < tokens.size(); i++)
            tokens[i] = static_cast<uint8_t>(shard[1024 + 2 * i]) | static_cast<uint8_t>(shard[1025 + 2 * i]) << 8;
        ASSERT_EQ(tokens.front(), 50256);
        for (size_t begin = 1, end; begin < tokens.size(); begin = end + 1) {
            end = std::find(tokens.begin() + begin, tokens.end(), 50256) - tokens.begin();
            const std::vector<int> document(tokens.begin() + begin, tokens.begin() + end);
            ASSERT_EQ(gpt2().encode(gpt2().decode(document)), document) << path << " token " << begin;
        }
    }
}

TEST(Tokenizer, RejectsOutOfRangeIds) {
    EXPECT_THROW(gpt2().decode({15496, 50257}), InputError);
    EXPECT_THROW(gpt2().decode_token(-1), InputError);
}

TEST(Tokenizer, ReportsBadFiles) {
    EXPECT_THROW(Tokenizer("no/such/tokenizer.bin"), InputError);
    const std::string good = tokenizer_file({"ab", "<eot>"}, {{'a', 'b'}});
    EXPECT_NE(load_error(good.substr(0, 1000)).find("truncated"), std::string::npos);
    EXPECT_NE(load_error(good.substr(0, good.size() - 3)).find("truncated"), std::string::npos);
    EXPECT_NE(load_error(good + "x").find("unexpected bytes"), std::string::npos);
    EXPECT_NE(load_error(tokenizer_file({"ab"}, {}, 20240520)).find("bad magic"), std::string::npos);
    EXPECT_NE(load_error(tokenizer_file({"ab", "abc"}, {{'a', 'b'}, {256, 'd'}})).find("not in the vocabulary"), std::string::npos);
    EXPECT_NE(load_error(tokenizer_file({"ab", "abc"}, {{256, 'c'}, {'a', 'b'}})).find("no earlier merge"), std::string::npos);
    EXPECT_NE(load_error(tokenizer_file({"ab"}, {{'a', 'b'}, {'a', 'b'}})).find("already made"), std::string::npos);
    const std::string message = load_error(good.substr(0, 1000));
    EXPECT_EQ(message.rfind(testing::TempDir(), 0), 0u) << "the message names the file: " << message;
}

TEST(Tokenizer, DecodesWithLlmcDecodeOnlyFile) {
    // llm.c's gpt2_tokenizer.bin has the same layout with no merges (header[4] = 0).
    const std::string path = fresh_folder("tokenizer_") + "llmc_tokenizer.bin";
    write_file(path, tokenizer_file({"ab", "<|endoftext|>"}, {}));
    const Tokenizer decode_only(path);
    EXPECT_EQ(decode_only.decode({'x', 256, 257}), "xab<|endoftext|>");
    EXPECT_THROW(decode_only.encode("ab"), InputError);
}

TEST(Tokenizer, FrontEndPrintsIdsAndDecodes) {
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const std::string folder = fresh_folder("tokenizer_");
    const std::string ids_path = folder + "fixture_ids.txt", text_path = folder + "fixture_text.txt";
    ASSERT_EQ(std::system(("./tokenize < test/fixtures/tokenizer_text.txt > " + ids_path).c_str()), 0);
    EXPECT_EQ(read_file(ids_path), read_file("test/fixtures/tokenizer_ids.txt"));
    ASSERT_EQ(std::system(("./tokenize -d < " + ids_path + " > " + text_path).c_str()), 0);
    EXPECT_EQ(read_file(text_path), read_file("test/fixtures/tokenizer_text.txt"));
    EXPECT_NE(std::system("echo 12 x | ./tokenize -d > /dev/null 2>&1"), 0);
    EXPECT_NE(std::system("./tokenize -bogus < /dev/null > /dev/null 2>&1"), 0);
}

TEST(Tokenizer, FingerprintIsFnv1aOfTheVocabularyTable) {
    ASSERT_EQ(fnv1a(""), 0x811c9dc5u);  // FNV-1a's published 32-bit test vectors
    ASSERT_EQ(fnv1a("a"), 0xe40c292cu);
    ASSERT_EQ(fnv1a("foobar"), 0xbf9cf968u);
    // The table is the file from byte 1024 up to its merges (header[4] of them, 8 bytes each).
    const std::string file = read_file(kTokenizerPath);
    ASSERT_GT(file.size(), 1024u);
    const std::string table = file.substr(1024, file.size() - 1024 - 8 * size_t(u32_at(file, 16)));
    EXPECT_EQ(gpt2().fingerprint(), fnv1a(table));
    // The merges do not count (llm.c's decode-only file makes the same shards); the bytes of any token do.
    const std::string folder = fresh_folder("tokenizer_");
    write_file(folder + "merges.bin", tokenizer_file({"ab", "<eot>"}, {{'a', 'b'}}));
    write_file(folder + "decode_only.bin", tokenizer_file({"ab", "<eot>"}, {}));
    write_file(folder + "other.bin", tokenizer_file({"ab", "<eos>"}, {}));
    EXPECT_EQ(Tokenizer(folder + "merges.bin").fingerprint(), Tokenizer(folder + "decode_only.bin").fingerprint());
    EXPECT_NE(Tokenizer(folder + "other.bin").fingerprint(), Tokenizer(folder + "decode_only.bin").fingerprint());
}

TEST(Tokenizer, RefusesAFolderInOneLine) {
    const std::string folder = fresh_folder("tokenizer_");
    EXPECT_EQ(load_error_of_path(folder), folder + ": is a folder, not a tokenizer file");
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const CommandRun run = run_command("./tokenize -tokenizer " + folder + " < /dev/null", folder);
    EXPECT_EQ(run.status, 2) << "an uncaught exception ends with 134";
    EXPECT_TRUE(one_line_with(run.errors, "is a folder, not a tokenizer file")) << run.errors;
}

TEST(Tokenizer, FrontEndWritesAShard) {
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const std::string folder = fresh_folder("tokenizer_");
    const CommandRun run = run_command("./tokenize -shard " + folder + "fixture.bin < test/fixtures/tokenizer_text.txt > /dev/null", folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    const std::string shard = read_file(folder + "fixture.bin");
    std::vector<int> expected{50256};  // the end-of-text token, then the reference ids
    const std::vector<int> ids = read_ids("test/fixtures/tokenizer_ids.txt");
    expected.insert(expected.end(), ids.begin(), ids.end());
    ASSERT_EQ(shard.size(), 1024 + 2 * expected.size());
    EXPECT_EQ(u32_at(shard, 0), 20240520u);
    EXPECT_EQ(u32_at(shard, 4), 1u);
    EXPECT_EQ(u32_at(shard, 8), expected.size());
    EXPECT_EQ(u32_at(shard, 12), gpt2().fingerprint());
    EXPECT_EQ(shard.substr(16, 1024 - 16), std::string(1024 - 16, '\0'));
    std::vector<int> tokens;
    for (size_t i = 1024; i < shard.size(); i += 2) tokens.push_back(static_cast<uint8_t>(shard[i]) | static_cast<uint8_t>(shard[i + 1]) << 8);
    EXPECT_EQ(tokens, expected);
    EXPECT_FALSE(std::ifstream(folder + "fixture.bin.tmp")) << "written whole, through a temporary name";
}

TEST(Tokenizer, FrontEndRefusesOutputsThatAreInputsOrCannotBeWritten) {
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const std::string folder = fresh_folder("tokenizer_");
    const std::string tokenizer = folder + "tokenizer.bin", text = folder + "text.txt";
    write_file(tokenizer, read_file(kTokenizerPath));
    write_file(text, "Call me Ishmael.");
    std::filesystem::create_hard_link(tokenizer, folder + "hard_link.bin");
    std::filesystem::create_directory(folder + "sub");
    const std::string use = "./tokenize -tokenizer " + tokenizer;
    const std::vector<std::pair<std::string, std::string>> cases = {
        {use + " < " + text + " >> " + tokenizer, "standard output is the -tokenizer file " + tokenizer + ": an output cannot replace an input"},
        {use + " -d < " + text + " >> " + text, "standard output is standard input: an output cannot replace an input"},
        {use + " -shard " + text + " < " + text, "-shard " + text + " is standard input: an output cannot replace an input"},
        {use + " -shard " + folder + "hard_link.bin < " + text, "-shard " + folder + "hard_link.bin is the -tokenizer file " + tokenizer},
        {use + " -shard " + folder + "sub/../tokenizer.bin < " + text, "is the -tokenizer file"},
        {use + " -shard " + folder + "missing/x.bin < " + text, "-shard " + folder + "missing/x.bin: cannot create a file there (No such file or directory)"},
        {use + " -shard " + folder + "sub < " + text, "-shard " + folder + "sub is a folder"},
        {use + " -d -shard " + folder + "x.bin < " + text, "-shard: writes the ids of text, not with -d"},
        {use + " -shard " + folder + "x.bin < /dev/null", "standard input: no text to write as a shard"},
    };
    for (const auto& [command, problem] : cases) {
        const CommandRun run = run_command(command, folder);  // (refused: nothing on standard output)
        EXPECT_EQ(run.status, 2) << command;
        EXPECT_TRUE(one_line_with(run.errors, problem)) << command << " gave: " << run.errors;
    }
    EXPECT_EQ(read_file(tokenizer), read_file(kTokenizerPath)) << "the tokenizer file was written over";
    EXPECT_EQ(read_file(text), "Call me Ishmael.") << "standard input's file was written over";
    EXPECT_FALSE(std::ifstream(folder + "x.bin"));
    // A write that fails (a file-size limit, with SIGXFSZ ignored so that write() reports it) is
    // one line and exit status 4, leaving no file behind.
    const CommandRun full = run_command("trap '' XFSZ; ulimit -f 1; " + use + " -shard " + folder + "big.bin < " + text, folder);
    EXPECT_EQ(full.status, 4);
    EXPECT_TRUE(one_line_with(full.errors, folder + "big.bin: write failed")) << full.errors;
    EXPECT_FALSE(std::ifstream(folder + "big.bin"));
    EXPECT_FALSE(std::ifstream(folder + "big.bin.tmp"));
}
