// Tests of prepare_data.py, run end to end with the plain python3 (standard library only):
// local .txt / .jsonl sources give shards that hold exactly [EOT] + the C++ tokenizer's ids of
// each document, its built-in BPE reproduces the reference ids of the tokenizer fixture, and bad
// input ends with one clear line and a non-zero exit status.
// Run from the repository root (as `make test` does).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dataloader.h"
#include "test_files.h"
#include "tokenizer.h"

namespace {

// Writes `content` to `path`.
void write_file(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::binary) << content;
}

// What one run of prepare_data.py did.
struct ScriptRun {
    int status;          // exit status
    std::string errors;  // what it wrote on standard error
};

// Runs `ENVIRONMENT python3 prepare_data.py ARGUMENTS` quietly, keeping its standard error.
ScriptRun prepare_data(const std::string& arguments, const std::string& folder, const std::string& environment = "") {
    const std::string errors_path = folder + "stderr.txt";
    const std::string command = environment + " python3 prepare_data.py " + arguments + " > /dev/null 2> " + errors_path;
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(errors_path)};
}

// The tokens of a shard file, after checking its header.
std::vector<int> read_shard(const std::string& path) {
    const std::string shard = read_file(path);
    EXPECT_GE(shard.size(), 1024u) << path;
    if (shard.size() < 1024) return {};
    const auto word = [&](int i) { return *reinterpret_cast<const int32_t*>(shard.data() + 4 * i); };
    EXPECT_EQ(word(0), 20240520);
    EXPECT_EQ(word(1), 1);
    EXPECT_EQ(uint64_t(word(2)) * 2 + 1024, shard.size());
    std::vector<int> tokens((shard.size() - 1024) / 2);
    for (size_t i = 0; i < tokens.size(); i++)
        tokens[i] = *reinterpret_cast<const uint16_t*>(shard.data() + 1024 + 2 * i);
    return tokens;
}

// The GPT-2 tokenizer, read once for all tests.
const Tokenizer& gpt2() {
    static const Tokenizer tokenizer("data/gpt2_tokenizer.bin");
    return tokenizer;
}

// [EOT] followed by the ids of each document, in order.
std::vector<int> expected_tokens(const std::vector<std::string>& documents) {
    std::vector<int> tokens;
    for (const std::string& document : documents) {
        tokens.push_back(gpt2().eot());
        const std::vector<int> ids = gpt2().encode(document);
        tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    return tokens;
}

// True when `errors` is exactly one line that contains `needle`.
bool one_line_with(const std::string& errors, const std::string& needle) {
    return errors.find(needle) != std::string::npos && errors.find('\n') == errors.size() - 1;
}

const std::string kText =
    "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no money.\n\n"
    "It's 1851; the Pequod's crew can't\tsee  the whale. Caf\u00e9, \u4f60\u597d, \U0001F433!\n   ";

}  // namespace

TEST(PrepareData, TokenisesALocalTextFileIntoTrainAndVal) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    const ScriptRun run = prepare_data(folder + "story.txt --out " + folder + " --val_fraction 0.25 --workers 1", folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    const std::vector<int> train = read_shard(folder + "story_train_000000.bin");
    const std::vector<int> val = read_shard(folder + "story_val_000000.bin");
    std::vector<int> all = train;
    all.insert(all.end(), val.begin(), val.end());
    EXPECT_EQ(all, expected_tokens({kText}));
    EXPECT_EQ(val.size(), size_t(all.size() * 0.25 + 0.5));
    DataLoader loader(folder + "story_train_*.bin", 1, 8, 50257, false, 0);
    EXPECT_EQ(loader.total_tokens(), train.size());
}

TEST(PrepareData, BuiltInBpeMatchesTheReferenceIds) {
    // The built-in BPE, whatever is installed: a stand-in tiktoken module whose encoder refuses
    // to load comes first on the path, so a run that reached for tiktoken (or for the network,
    // where tiktoken fetches its tables) fails instead of testing another tokenizer.
    const std::string folder = fresh_folder("prepare_data_");
    std::filesystem::create_directories(folder + "no_tiktoken");
    write_file(folder + "no_tiktoken/tiktoken.py",
               "def get_encoding(name):\n    raise RuntimeError('tiktoken is hidden: this test checks the built-in BPE')\n");
    const ScriptRun run = prepare_data("test/fixtures/tokenizer_text.txt --name fixture --val_fraction 0 --workers 1 --out " + folder,
                                       folder, "PYTHONPATH=" + folder + "no_tiktoken");
    ASSERT_EQ(run.status, 0) << run.errors;
    std::ifstream ids_file("test/fixtures/tokenizer_ids.txt");
    std::vector<int> expected{50256};
    expected.insert(expected.end(), std::istream_iterator<int>(ids_file), std::istream_iterator<int>());
    ASSERT_GT(expected.size(), 1000u);
    EXPECT_EQ(read_shard(folder + "fixture_train_000000.bin"), expected);
    EXPECT_FALSE(std::filesystem::exists(folder + "fixture_val_000000.bin"));
}

TEST(PrepareData, ReadsFoldersAndJsonlInParallelIntoShards) {
    const std::string folder = fresh_folder("prepare_data_");
    std::filesystem::create_directories(folder + "corpus/sub");
    write_file(folder + "corpus/a.txt", "First document.\n");
    write_file(folder + "corpus/sub/b.jsonl", "{\"text\": \"Second \\u00e9 doc\"}\n\n{\"text\": \"Third, it's \\ud83d\\ude00\"}\n");
    write_file(folder + "corpus/ignored.csv", "not,text\n");
    const ScriptRun run = prepare_data(folder + "corpus --name mix --val_fraction 0 --shard_size 5 --workers 2 --out " + folder, folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    const std::vector<int> expected = expected_tokens({"First document.\n", "Second \u00e9 doc", "Third, it's \U0001F600"});
    std::vector<int> all;
    for (size_t shard = 0; shard * 5 < expected.size(); shard++) {
        const std::vector<int> tokens = read_shard(folder + "mix_train_00000" + std::to_string(shard) + ".bin");
        EXPECT_EQ(tokens.size(), std::min<size_t>(5, expected.size() - shard * 5));
        all.insert(all.end(), tokens.begin(), tokens.end());
    }
    EXPECT_EQ(all, expected);
}

TEST(PrepareData, ReportsBadInputInOneLine) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "empty.txt", "");
    write_file(folder + "bad.jsonl", "{\"text\": \"ok\"}\n{\"title\": 1}\n");
    write_file(folder + "latin1.txt", "caf\xE9\n");
    write_file(folder + "a_file", "x");
    write_file(folder + "good.txt", "Some text.");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {folder + "missing.txt", "missing.txt: no such file or folder"},
        {folder + "empty.txt", "no text found"},
        {folder + "bad.jsonl", "bad.jsonl:2: no \"text\" string field"},
        {folder + "latin1.txt", "latin1.txt: not valid UTF-8"},
        {folder + "good.txt --out " + folder + "a_file/out", "cannot create the output folder"},
        {folder + "good.txt --tokenizer " + folder + "good.txt", "good.txt: too short for a tokenizer file"},
        {"default --vocab " + folder + "no_npm", "no_npm/encoder.json: no such file"},
    };
    for (const auto& [arguments, problem] : cases) {
        const ScriptRun run = prepare_data(arguments, folder);
        EXPECT_NE(run.status, 0) << arguments;
        EXPECT_TRUE(one_line_with(run.errors, problem)) << arguments << " gave: " << run.errors;
    }
}

TEST(PrepareData, OpenWebTextSplitsDocumentsLikeNanoGpt) {
    // A stand-in for Hugging Face's `datasets` checks the calls and serves three documents.
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "datasets.py",
               "class Split(list):\n"
               "    def train_test_split(self, test_size, seed, shuffle):\n"
               "        assert (test_size, seed, shuffle) == (0.0005, 2357, True)\n"
               "        return {'train': Split(self[1:]), 'test': Split(self[:1])}\n"
               "def load_dataset(name, num_proc):\n"
               "    assert name == 'Skylion007/openwebtext'\n"
               "    return {'train': Split([{'text': 'Doc one.'}, {'text': 'Doc two,'}, {'text': ' three'}])}\n");
    const ScriptRun run = prepare_data("openwebtext --bpe builtin --workers 1 --out " + folder, folder, "PYTHONPATH=" + folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    EXPECT_EQ(read_shard(folder + "openwebtext_val_000000.bin"), expected_tokens({"Doc one."}));
    EXPECT_EQ(read_shard(folder + "openwebtext_train_000000.bin"), expected_tokens({"Doc two,", " three"}));
}

TEST(PrepareData, OpenWebTextNeedsDatasets) {
    if (std::system("python3 -c 'import datasets' > /dev/null 2>&1") == 0)
        GTEST_SKIP() << "`datasets` is installed: the source would download OpenWebText";
    const std::string folder = fresh_folder("prepare_data_");
    const ScriptRun run = prepare_data("openwebtext --out " + folder, folder);
    EXPECT_NE(run.status, 0);
    EXPECT_TRUE(one_line_with(run.errors, "needs the Python package `datasets`")) << run.errors;
}
