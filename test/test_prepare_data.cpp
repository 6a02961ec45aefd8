// Tests of prepare_data.py, run end to end with the plain python3 (standard library only):
// local .txt / .jsonl sources give shards that hold exactly [EOT] + the C++ tokenizer's ids of
// each document and record the tokenizer's fingerprint, its built-in BPE reproduces the reference
// ids of the tokenizer fixture, and bad input ends with one clear line and exit status 2 before
// anything is written: existing files of the name (unless --overwrite, which also removes the
// name's stale shards), a name that is not plain, an output that is an input, a corpus too small
// for a train and a val shard. A write that fails is exit status 4 and leaves the folder as it was.
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

// The GPT-2 tokenizer, read once for all tests.
const Tokenizer& gpt2() {
    static const Tokenizer tokenizer("data/gpt2_tokenizer.bin");
    return tokenizer;
}

// The tokens of a shard file, after checking its header: magic, version, token count, the
// fingerprint of the tokenizer that made it (GPT-2's unless given), the other words 0.
std::vector<int> read_shard(const std::string& path, uint32_t tokenizer = gpt2().fingerprint()) {
    const std::string shard = read_file(path);
    EXPECT_GE(shard.size(), 1024u) << path;
    if (shard.size() < 1024) return {};
    const auto word = [&](int i) { return *reinterpret_cast<const uint32_t*>(shard.data() + 4 * i); };
    EXPECT_EQ(word(0), 20240520u);
    EXPECT_EQ(word(1), 1u);
    EXPECT_EQ(uint64_t(word(2)) * 2 + 1024, shard.size());
    EXPECT_EQ(word(3), tokenizer) << path;
    for (int i = 4; i < 256; i++) EXPECT_EQ(word(i), 0u) << path << " word " << i;
    std::vector<int> tokens((shard.size() - 1024) / 2);
    for (size_t i = 0; i < tokens.size(); i++)
        tokens[i] = *reinterpret_cast<const uint16_t*>(shard.data() + 1024 + 2 * i);
    return tokens;
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
        {folder + "latin1.txt", "latin1.txt: not valid utf-8 (byte 3); --encoding names another, such as latin-1"},
        {folder + "good.txt --encoding klingon", "--encoding klingon: not a text encoding Python knows"},
        {folder + "good.txt --out " + folder + "a_file/out", "cannot create the output folder"},
        {folder + "good.txt --tokenizer " + folder + "good.txt", "good.txt: too short for a tokenizer file"},
        {"default --vocab " + folder + "no_npm", "no_npm/encoder.json: no such file"},
    };
    for (const auto& [arguments, problem] : cases) {
        const std::string out = arguments.find("--out") == std::string::npos ? " --out " + folder + "out" : "";  // never data/
        const ScriptRun run = prepare_data(arguments + out, folder);
        EXPECT_EQ(run.status, 2) << arguments;
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
    EXPECT_EQ(run.status, 2);
    EXPECT_TRUE(one_line_with(run.errors, "needs the Python package `datasets`")) << run.errors;
}

TEST(PrepareData, WritesTheShardThatTokenizeWrites) {
    // Two implementations (Python's BPE and fingerprint, C++'s) of one shard: [EOT] + the ids.
    if (!std::ifstream("tokenize")) GTEST_SKIP() << "./tokenize is not built";
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    ASSERT_EQ(prepare_data(folder + "story.txt --val_fraction 0 --workers 1 --out " + folder, folder).status, 0);
    ASSERT_EQ(std::system(("./tokenize -shard " + folder + "tokenize.bin < " + folder + "story.txt > /dev/null").c_str()), 0);
    EXPECT_EQ(read_file(folder + "story_train_000000.bin"), read_file(folder + "tokenize.bin"));
    const std::string fingerprints = folder + "fingerprints.txt";
    ASSERT_EQ(std::system(("python3 -c 'import prepare_data as p; print(p.tokenizer_fingerprint(p.read_tokenizer_file("
                           "\"data/gpt2_tokenizer.bin\").token_bytes), p.GPT2_FINGERPRINT)' > " + fingerprints).c_str()), 0);
    const std::string gpt2_fingerprint = std::to_string(gpt2().fingerprint());
    EXPECT_EQ(read_file(fingerprints), gpt2_fingerprint + " " + gpt2_fingerprint + "\n");
}

TEST(PrepareData, NeverOverwritesExistingShardsWithoutOverwrite) {
    // A short text that happens to be called mobydick.txt must not replace the Moby-Dick shards
    // (here copies of the bundled ones): its default name is mobydick, and they exist.
    const std::string folder = fresh_folder("prepare_data_");
    std::filesystem::create_directories(folder + "notes");
    std::filesystem::create_directories(folder + "data");
    for (const char* split : {"train", "val"})
        std::filesystem::copy_file(std::string("data/mobydick_") + split + "_000000.bin", folder + "data/mobydick_" + split + "_000000.bin");
    write_file(folder + "notes/mobydick.txt", "Call me Ishmael.");
    const ScriptRun run = prepare_data(folder + "notes/mobydick.txt --workers 1 --out " + folder + "data", folder);
    EXPECT_EQ(run.status, 2);
    EXPECT_TRUE(one_line_with(run.errors, folder + "data/mobydick_train_000000.bin already exists: --overwrite replaces"))
        << run.errors;
    for (const char* split : {"train", "val"})
        EXPECT_EQ(read_file(folder + "data/mobydick_" + split + "_000000.bin"),
                  read_file(std::string("data/mobydick_") + split + "_000000.bin")) << split;
    EXPECT_EQ(listing(folder + "data"), "mobydick_train_000000.bin mobydick_val_000000.bin");
}

TEST(PrepareData, OverwriteReplacesTheNamesFilesAndRemovesStaleShards) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    write_file(folder + "other_train_000000.bin", "another name's file");
    const std::string first = folder + "story.txt --workers 1 --out " + folder + " --shard_size 10";
    ASSERT_EQ(prepare_data(first + " --val_fraction 0.5", folder).status, 0);
    ASSERT_GT(listing(folder).find("story_train_000002.bin"), 0u);
    ASSERT_NE(listing(folder).find("story_val_000000.bin"), std::string::npos);
    // A smaller second run (one shard, no val) replaces the first run's files; none of them stays.
    const ScriptRun run = prepare_data(folder + "story.txt --workers 1 --out " + folder + " --val_fraction 0 --overwrite", folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    EXPECT_EQ(listing(folder), "other_train_000000.bin stderr.txt story.txt story_train_000000.bin");
    EXPECT_EQ(read_shard(folder + "story_train_000000.bin"), expected_tokens({kText}));
    EXPECT_EQ(read_file(folder + "other_train_000000.bin"), "another name's file");
}

TEST(PrepareData, KeepsTheNameAPlainNameInsideOut) {
    const std::string folder = fresh_folder("prepare_data_");
    std::filesystem::create_directories(folder + "a/b");
    write_file(folder + "notes_val.txt", kText);
    const std::string source = folder + "notes_val.txt --workers 1 --out " + folder + "a/b";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {source + " --name ../../evil", "--name '../../evil': must be a plain file name (not empty, no '/', not '.' or '..')"},
        {source + " --name ''", "--name '': must be a plain file name"},
        {source + " --name x/y", "--name 'x/y': must be a plain file name"},
        {source + " --name ..", "--name '..': must be a plain file name"},
        {source + " --name mobydick_train",
         "--name 'mobydick_train': its shards would also match mobydick_train_*.bin, the shards of the name 'mobydick'"},
        {source, "the name taken from " + folder + "notes_val.txt (give --name) 'notes_val': its shards would also match notes_val_*.bin"},
    };
    for (const auto& [arguments, problem] : cases) {
        const ScriptRun run = prepare_data(arguments, folder);
        EXPECT_EQ(run.status, 2) << arguments;
        EXPECT_TRUE(one_line_with(run.errors, problem)) << arguments << " gave: " << run.errors;
    }
    EXPECT_EQ(listing(folder), "a notes_val.txt stderr.txt") << "nothing written beside the output folder";
    EXPECT_EQ(listing(folder + "a"), "b");
    EXPECT_EQ(listing(folder + "a/b"), "");
}

TEST(PrepareData, RefusesACorpusTooSmallForATrainAndAValShard) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "tiny.txt", "hi there");  // [EOT] hi there: 3 tokens
    const ScriptRun run = prepare_data(folder + "tiny.txt --workers 1 --out " + folder + "out", folder);
    EXPECT_EQ(run.status, 2);
    EXPECT_TRUE(one_line_with(run.errors, "the corpus is 3 tokens: --val_fraction 0.1 leaves 3 for train and 0 for val, "
                                          "and each needs at least 2")) << run.errors;
    EXPECT_EQ(listing(folder + "out"), "");
    ASSERT_EQ(prepare_data(folder + "tiny.txt --workers 1 --val_fraction 0 --out " + folder + "out", folder).status, 0);
    EXPECT_EQ(read_shard(folder + "out/tiny_train_000000.bin"), expected_tokens({"hi there"}));
}

TEST(PrepareData, ReadsTheEncodingItIsGiven) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "latin1.txt", "caf\xE9 cr\xE8me br\xFBl\xE9" "e, \xA7 3, \xBD price.");
    const ScriptRun run = prepare_data(folder + "latin1.txt --encoding latin-1 --val_fraction 0 --workers 1 --out " + folder, folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    EXPECT_EQ(read_shard(folder + "latin1_train_000000.bin"),
              expected_tokens({"caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, \u00a7 3, \u00bd price."}));
}

TEST(PrepareData, RefusesAnOutputThatIsAnInputEvenWithOverwrite) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    ASSERT_EQ(prepare_data(folder + "story.txt --workers 1 --out " + folder + "d --val_fraction 0.25", folder).status, 0);
    const std::string train = read_file(folder + "d/story_train_000000.bin");
    std::filesystem::create_directory_symlink(folder + "d", folder + "link");
    std::filesystem::copy_file("data/gpt2_tokenizer.bin", folder + "t_train_000000.bin");
    const std::vector<std::pair<std::string, std::string>> cases = {
        // compact rewriting its own source shards: under the same name, and through a link to the folder
        {"compact --source " + folder + "d/story --name story --out " + folder + "d",
         folder + "d/story_train_000000.bin is the input " + folder + "d/story_train_000000.bin: an output cannot replace an input"},
        {"compact --source " + folder + "d/story --name story --out " + folder + "link",
         folder + "link/story_train_000000.bin is the input " + folder + "d/story_train_000000.bin"},
        // the tokenizer file, named like a shard of the output
        {folder + "story.txt --name t --out " + folder + " --tokenizer " + folder + "t_train_000000.bin",
         folder + "t_train_000000.bin is the input " + folder + "t_train_000000.bin"},
    };
    for (const auto& [arguments, problem] : cases) {
        const ScriptRun run = prepare_data(arguments + " --overwrite --workers 1", folder);
        EXPECT_EQ(run.status, 2) << arguments;
        EXPECT_TRUE(one_line_with(run.errors, problem)) << arguments << " gave: " << run.errors;
    }
    EXPECT_EQ(read_file(folder + "d/story_train_000000.bin"), train);
    EXPECT_EQ(read_file(folder + "t_train_000000.bin"), read_file("data/gpt2_tokenizer.bin"));
    EXPECT_EQ(listing(folder + "d"), "story_train_000000.bin story_val_000000.bin");
}

TEST(PrepareData, RefusesAnOutputFolderThatTakesNoFiles) {
    // sysfs takes no new files, from root either (whom access(W_OK) would let through).
    if (!std::filesystem::is_directory("/sys/kernel")) GTEST_SKIP() << "no /sys";
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    const ScriptRun run = prepare_data(folder + "story.txt --workers 1 --out /sys/kernel", folder);
    EXPECT_EQ(run.status, 2);
    EXPECT_TRUE(one_line_with(run.errors, "/sys/kernel: cannot create files in the output folder")) << run.errors;
}

TEST(PrepareData, AFailedWriteLeavesTheFolderAsItWas) {
    // A file-size limit of 2 KB: the 1 KB header and ~600 tokens do not fit. The earlier run's
    // shards stay as they were, and no temporary file is left.
    const std::string folder = fresh_folder("prepare_data_");
    std::string text;
    for (int i = 0; i < 40; i++) text += kText;
    write_file(folder + "story.txt", text);
    ASSERT_EQ(prepare_data(folder + "story.txt --workers 1 --out " + folder + "d --shard_size 200", folder).status, 0);
    const std::string before = listing(folder + "d"), first_shard = read_file(folder + "d/story_train_000000.bin");
    ASSERT_EQ(first_shard.size(), 1024u + 400u);
    const ScriptRun run = prepare_data(folder + "story.txt --workers 1 --out " + folder + "d --overwrite", folder, "ulimit -f 2;");
    EXPECT_EQ(run.status, 4);
    EXPECT_TRUE(one_line_with(run.errors, "d/story_train_000000.bin: cannot write (File too large)")) << run.errors;
    EXPECT_EQ(listing(folder + "d"), before);
    EXPECT_EQ(read_file(folder + "d/story_train_000000.bin"), first_shard);
}

TEST(PrepareData, CompactShardsRecordTheCompactTokenizer) {
    const std::string folder = fresh_folder("prepare_data_");
    write_file(folder + "story.txt", kText);
    ASSERT_EQ(prepare_data(folder + "story.txt --workers 1 --out " + folder + " --val_fraction 0.25", folder).status, 0);
    const ScriptRun run = prepare_data("compact --source " + folder + "story --vocab_size 300", folder);
    ASSERT_EQ(run.status, 0) << run.errors;
    const Tokenizer compact(folder + "story_v300_tokenizer.bin");
    EXPECT_NE(compact.fingerprint(), gpt2().fingerprint());
    for (const char* split : {"train", "val"}) {
        const std::vector<int> gpt2_ids = read_shard(folder + "story_" + split + "_000000.bin");
        const std::vector<int> compact_ids = read_shard(folder + "story_v300_" + split + "_000000.bin", compact.fingerprint());
        EXPECT_EQ(compact_ids.size(), gpt2_ids.size());
    }
    // Source shards that record another tokenizer than --tokenizer are refused.
    std::vector<uint16_t> tokens(20, 1);
    write_token_shard(folder + "odd_train_000000.bin", {20240520, 1, 20, 0x1234}, tokens);
    const ScriptRun odd = prepare_data("compact --source " + folder + "odd --vocab_size 16", folder);
    EXPECT_EQ(odd.status, 2);
    EXPECT_TRUE(one_line_with(odd.errors, folder + "odd_train_000000.bin: made by tokenizer 0x00001234, not by the --tokenizer file (0x" )) << odd.errors;
}
