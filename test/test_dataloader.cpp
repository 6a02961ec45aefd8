// Tests of dataloader.h: docs/formats.md §1's sequential order, validation of shard files, reproducible
// shuffling that draws every order alike, resuming, the split of windows between data-parallel
// ranks, and the tokenizer that shards record.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dataloader.h"
#include "test_files.h"
#include "tokenizer.h"

namespace {

constexpr int kVocab = 60000;

// Writes a valid shard holding the tokens first, first+1, ..., first+count-1.
void write_shard(const std::string& path, int first, int count) {
    std::vector<uint16_t> tokens(count);
    for (int i = 0; i < count; i++) tokens[i] = static_cast<uint16_t>(first + i);
    write_token_shard(path, {20240520, 1, count}, tokens);
}

// The first input token of the current batch: it identifies the window in these tests,
// whose shards hold distinct, consecutive token values.
int window_id(const DataLoader& loader) { return loader.inputs()[0]; }

// The ids of the next `count` windows that `loader` serves.
std::vector<int> next_windows(DataLoader& loader, int count) {
    std::vector<int> ids;
    for (int i = 0; i < count; i++) {
        loader.next_batch();
        ids.push_back(window_id(loader));
    }
    return ids;
}

// The message of the InputError that opening `pattern` throws ("no error" when none).
std::string open_error(const std::string& pattern, int B = 2, int T = 3) {
    try {
        DataLoader loader(pattern, B, T, kVocab, false, 0);
    } catch (const InputError& e) {
        return e.what();
    }
    return "no error";
}

// Three shards of windows of 7 tokens (B=2, T=3): a holds 3 windows, b none, c 2 windows.
std::string three_shards() {
    const std::string folder = fresh_folder("dataloader_");
    write_shard(folder + "s_a.bin", 0, 3 * 6 + 1 + 4);  // 23 tokens: windows at 0, 6, 12
    write_shard(folder + "s_b.bin", 1000, 6);           // shorter than one window
    write_shard(folder + "s_c.bin", 2000, 13);          // windows at 2000, 2006
    return folder + "s_*.bin";
}

// The loader's bounds at their edges: B, T, the vocabulary and the world size from 1 (0 and a
// rank of -1 refused); a shard of one token counts (no window) beside others; a shard of exactly
// k*B*T tokens holds k-1 windows (each needs B*T+1), one token more makes k.
TEST(DataLoader, BoundsAtTheirEdges) {
    const std::string folder = fresh_folder("dataloader_");
    write_shard(folder + "a.bin", 0, 7);  // one window of B*T+1 = 7 at B = 2, T = 3
    const std::string path = folder + "a.bin";
    for (auto [B, T] : {std::pair{0, 3}, std::pair{2, 0}})
        EXPECT_THROW(DataLoader(path, B, T, kVocab, false, 0), InputError) << B << " " << T;
    EXPECT_NO_THROW(DataLoader(path, 6, 1, kVocab, false, 0));
    EXPECT_NO_THROW(DataLoader(path, 1, 6, kVocab, false, 0));
    try {
        DataLoader(path, 2, 3, 0, false, 0);
        ADD_FAILURE() << "a vocabulary of 0 was taken";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("vocabulary size must be positive"), std::string::npos) << e.what();
    }
    write_token_shard(folder + "empty.bin", {20240520, 1, 0}, {});  // a header of 0 tokens, nothing after it
    EXPECT_NE(open_error(folder + "empty.bin").find("header says 0 tokens (must be > 0)"), std::string::npos);
    std::vector<uint16_t> zeros(7, 0);  // token 0 only: within a vocabulary of 1
    write_token_shard(folder + "v1.bin", {20240520, 1, 7}, zeros);
    EXPECT_EQ(DataLoader(folder + "v1.bin", 2, 3, 1, false, 0).num_windows(), 1u);
    EXPECT_THROW(DataLoader(path, 2, 3, kVocab, false, 0, 0, 0), InputError);  // world size 0
    EXPECT_THROW(DataLoader(path, 2, 3, kVocab, false, 0, -1, 1), InputError);  // rank -1
    EXPECT_THROW(DataLoader(path, 2, 3, kVocab, false, 0, 1, 1), InputError);   // rank = world size
    // One token beside a shard of windows: read, no window of its own.
    std::filesystem::create_directories(folder + "two");
    write_shard(folder + "two/a.bin", 0, 7);
    write_shard(folder + "two/b.bin", 100, 1);
    EXPECT_EQ(DataLoader(folder + "two/*.bin", 2, 3, kVocab, false, 0).num_windows(), 1u);
    for (int k : {1, 2, 3}) {
        write_shard(folder + "k.bin", 0, k * 6);  // exactly k*B*T tokens
        if (k == 1)
            EXPECT_THROW(DataLoader(folder + "k.bin", 2, 3, kVocab, false, 0), InputError);
        else
            EXPECT_EQ(DataLoader(folder + "k.bin", 2, 3, kVocab, false, 0).num_windows(), uint64_t(k - 1)) << k;
        write_shard(folder + "k.bin", 0, k * 6 + 1);
        EXPECT_EQ(DataLoader(folder + "k.bin", 2, 3, kVocab, false, 0).num_windows(), uint64_t(k)) << k;
    }
}

// A token outside the vocabulary names prepare_data.py's shards of that vocabulary beside the
// refused file, whatever the refused file is called.
TEST(DataLoader, NamesTheShardsOfTheVocabularyBesideARefusedOne) {
    const std::string folder = fresh_folder("dataloader_");
    write_shard(folder + "bad.bin", 90, 10);  // tokens 90..99: 96..99 outside a vocabulary of 96
    write_shard(folder + "corpus_v96_train_000000.bin", 0, 10);
    try {
        DataLoader(folder + "bad.bin", 2, 3, 96, false, 0);
        ADD_FAILURE() << "tokens outside the vocabulary were taken";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("; shards of that vocabulary: -train_data \"" + folder +
                                             "corpus_v96_train_*.bin\" -val_data \"" + folder + "corpus_v96_val_*.bin\""),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace

TEST(DataLoader, SequentialOrderFollowsSpec) {
    DataLoader loader(three_shards(), 2, 3, kVocab, false, 7);
    EXPECT_EQ(loader.files().size(), 3u);
    EXPECT_EQ(loader.total_tokens(), 23u + 6u + 13u);
    EXPECT_EQ(loader.num_windows(), 5u);
    loader.next_batch();
    for (int i = 0; i < 6; i++) {
        EXPECT_EQ(loader.inputs()[i], i);
        EXPECT_EQ(loader.targets()[i], i + 1);
    }
    // Windows in order, the short shard skipped, then back to the first shard (wrap-around).
    EXPECT_EQ(next_windows(loader, 7), (std::vector<int>{6, 12, 2000, 2006, 0, 6, 12}));
    EXPECT_EQ(loader.targets()[5], 18);
}

TEST(DataLoader, ResetReturnsToTheFirstBatch) {
    DataLoader loader(three_shards(), 2, 3, kVocab, true, 7);
    const std::vector<int> first = next_windows(loader, 3);
    next_windows(loader, 4);
    loader.reset();
    EXPECT_EQ(next_windows(loader, 3), first);
}

TEST(DataLoader, ShuffleIsReproducibleAndCoversEveryWindowEachEpoch) {
    const std::string folder = fresh_folder("dataloader_");
    for (int s = 0; s < 4; s++) write_shard(folder + "shard_" + std::to_string(s) + ".bin", 10000 * s, 6 * 25 + 1);
    const std::string pattern = folder + "shard_*.bin";
    DataLoader a(pattern, 2, 3, kVocab, true, 42), b(pattern, 2, 3, kVocab, true, 42), c(pattern, 2, 3, kVocab, true, 43);
    const std::vector<int> epoch0 = next_windows(a, 100), epoch1 = next_windows(a, 100);
    EXPECT_EQ(next_windows(b, 200), [&] { auto both = epoch0; both.insert(both.end(), epoch1.begin(), epoch1.end()); return both; }());
    EXPECT_NE(next_windows(c, 100), epoch0);
    EXPECT_NE(epoch0, epoch1);
    for (const auto& epoch : {epoch0, epoch1}) {
        EXPECT_EQ(std::set<int>(epoch.begin(), epoch.end()).size(), 100u);
        for (int id : epoch) EXPECT_EQ(id % 10000 % 6, 0) << "windows start at multiples of B*T";
    }
    DataLoader sequential(pattern, 2, 3, kVocab, false, 42);
    EXPECT_NE(next_windows(sequential, 100), epoch0);
}

TEST(DataLoader, ShuffleKeepsEachShardTogether) {
    const std::string folder = fresh_folder("dataloader_");
    for (int s = 0; s < 5; s++) write_shard(folder + "shard_" + std::to_string(s) + ".bin", 10000 * s, 6 * 10 + 1);
    DataLoader loader(folder + "shard_*.bin", 2, 3, kVocab, true, 5);
    const std::vector<int> epoch = next_windows(loader, 50);
    for (int i = 0; i < 50; i++) EXPECT_EQ(epoch[i] / 10000, epoch[i / 10 * 10] / 10000) << "window " << i;
}

// Pearson's chi-square statistic of `counts` against `cells` equally likely cells (cells with no
// count included).
double chi_square_uniform(const std::map<std::vector<int>, int>& counts, int cells) {
    double total = 0, sum = 0;
    for (const auto& [cell, count] : counts) total += count;
    const double expected = total / cells;
    for (const auto& [cell, count] : counts) sum += (count - expected) * (count - expected) / expected;
    return sum + (cells - int(counts.size())) * expected;
}

TEST(DataLoader, ShuffleDrawsEveryOrderOfShardsAndOfWindowsAlike) {
    // Four shards of four windows each. Shuffling promises (docs/data.md) the shards in a random
    // order and the windows of each shard in a random order, afresh each epoch: each of the
    // 4! = 24 orders equally likely, for the shards and for the windows of a shard. Over 2400
    // epochs (2400 shard orders, 9600 window orders) Pearson's chi-square of the 24 counts against
    // uniform (23 degrees of freedom) exceeds 70.5 with probability 1e-6 for a uniform shuffle
    // (scipy.stats.chi2.isf(1e-6, 23)); this seed gives 30 and 32. A loader that keeps the shards
    // in file order gives 55,200 (every sample in one cell), one that keeps the windows in order
    // 220,800, and one that draws only the 6 cyclic orders (Fisher-Yates with rng.below(n - 1),
    // Sattolo's algorithm) about 7,200 and 28,800.
    const std::string folder = fresh_folder("dataloader_");
    for (int s = 0; s < 4; s++) write_shard(folder + "shard_" + std::to_string(s) + ".bin", 10000 * s, 6 * 4 + 1);
    DataLoader loader(folder + "shard_*.bin", 2, 3, kVocab, true, 2024);
    ASSERT_EQ(loader.num_windows(), 16u);
    const int epochs = 2400;
    std::map<std::vector<int>, int> shard_orders, window_orders;
    for (int epoch = 0; epoch < epochs; epoch++) {
        const std::vector<int> windows = next_windows(loader, 16);
        std::vector<int> shards;
        for (int s = 0; s < 4; s++) {
            shards.push_back(windows[4 * s] / 10000);
            std::vector<int> order;
            for (int w = 0; w < 4; w++) order.push_back(windows[4 * s + w] % 10000 / 6);
            window_orders[order]++;
        }
        shard_orders[shards]++;
    }
    EXPECT_EQ(shard_orders.size(), 24u);
    EXPECT_EQ(window_orders.size(), 24u);
    EXPECT_LT(chi_square_uniform(shard_orders, 24), 70.5) << "the shard order is not uniformly random";
    EXPECT_LT(chi_square_uniform(window_orders, 24), 70.5) << "the window order within a shard is not uniformly random";
}

TEST(DataLoader, ResumesAtTheSavedPosition) {
    for (bool shuffle : {false, true}) {
        DataLoader first(three_shards(), 2, 3, kVocab, shuffle, 11);
        next_windows(first, 8);  // into the second epoch
        const LoaderState saved = first.state();
        EXPECT_EQ(saved.epoch, 1u);
        EXPECT_EQ(saved.cursor, 3u);
        const std::vector<int> expected = next_windows(first, 12);
        DataLoader resumed(three_shards(), 2, 3, kVocab, shuffle, 11);
        resumed.restore(saved);
        EXPECT_EQ(next_windows(resumed, 12), expected) << "shuffle " << shuffle;
    }
}

TEST(DataLoader, RejectsAStateThatDoesNotFit) {
    DataLoader loader(three_shards(), 2, 3, kVocab, false, 0, 1, 2);
    EXPECT_THROW(loader.restore({0, 5}), InputError);  // only 5 windows
    EXPECT_THROW(loader.restore({0, 2}), InputError);  // position 2 belongs to rank 0
    loader.restore({0, 3});
    EXPECT_EQ(loader.state().cursor, 3u);
}

TEST(DataLoader, RanksTogetherReadEveryWindowOnce) {
    const std::string folder = fresh_folder("dataloader_");
    for (int s = 0; s < 3; s++) write_shard(folder + "shard_" + std::to_string(s) + ".bin", 10000 * s, 6 * (3 + s) + 2);
    const std::string pattern = folder + "shard_*.bin";  // 3 + 4 + 5 = 12 windows
    for (bool shuffle : {false, true}) {
        for (int world_size : {1, 2, 3, 5}) {
            std::multiset<int> seen;
            for (int rank = 0; rank < world_size; rank++) {
                DataLoader loader(pattern, 2, 3, kVocab, shuffle, 3, rank, world_size);
                const int reads = (12 - rank + world_size - 1) / world_size;  // stream positions < 12
                for (int id : next_windows(loader, reads)) seen.insert(id);
            }
            EXPECT_EQ(seen.size(), 12u);
            EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 12u)
                << "world size " << world_size << ", shuffle " << shuffle;
        }
    }
    EXPECT_THROW(DataLoader(pattern, 2, 3, kVocab, false, 0, 2, 2), InputError);
}

TEST(DataLoader, ReportsBadShards) {
    const std::string folder = fresh_folder("dataloader_");
    const std::vector<uint16_t> tokens(20, 1);
    write_token_shard(folder + "magic.bin", {20240326, 1, 20}, tokens);
    write_token_shard(folder + "version.bin", {20240520, 2, 20}, tokens);
    write_token_shard(folder + "zero.bin", {20240520, 1, 0}, {});
    write_token_shard(folder + "truncated.bin", {20240520, 1, 21}, tokens);
    write_token_shard(folder + "longer.bin", {20240520, 1, 19}, tokens);
    write_token_shard(folder + "vocab.bin", {20240520, 1, 20}, std::vector<uint16_t>(20, kVocab));
    std::ofstream(folder + "short.bin") << "tiny";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"magic.bin", "bad magic 20240326"},      {"version.bin", "unsupported shard version 2"},
        {"zero.bin", "header says 0 tokens"},     {"truncated.bin", "file is 1064 bytes but"},
        {"longer.bin", "need 1062"},              {"vocab.bin", "token 0 is 60000, outside the vocabulary"},
        {"short.bin", "too short for the 1024-byte shard header"},
    };
    for (const auto& [file, problem] : cases) {
        const std::string message = open_error(folder + file);
        EXPECT_NE(message.find(folder + file + ": "), std::string::npos) << message;
        EXPECT_NE(message.find(problem), std::string::npos) << message;
    }
    EXPECT_NE(open_error(folder + "none_*.bin").find("no file matches"), std::string::npos);
}

TEST(DataLoader, RequiresOneShardHoldingABatch) {
    const std::string folder = fresh_folder("dataloader_");
    write_shard(folder + "a.bin", 0, 7);
    write_shard(folder + "b.bin", 100, 6);
    EXPECT_EQ(open_error(folder + "*.bin"), "no error");              // a.bin: exactly B*T+1 tokens
    EXPECT_NE(open_error(folder + "b.bin").find("no shard holds one batch of B*T+1 = 7 tokens"), std::string::npos);
    EXPECT_NE(open_error(folder + "*.bin", 2, 4).find("no shard holds"), std::string::npos);
    EXPECT_THROW(DataLoader(folder + "a.bin", 0, 3, kVocab, false, 0), InputError);
}

TEST(DataLoader, ReadsTheBundledMobyDick) {
    DataLoader train("data/mobydick_train_*.bin", 4, 64, 50257, true, 1);
    DataLoader val("data/mobydick_val_*.bin", 4, 64, 50257, false, 1);
    EXPECT_EQ(train.files(), std::vector<std::string>{"data/mobydick_train_000000.bin"});
    EXPECT_GT(train.total_tokens(), 250000u);
    EXPECT_GT(val.total_tokens(), 25000u);
    EXPECT_EQ(val.num_windows(), (val.total_tokens() - 1) / 256);
    val.next_batch();
    EXPECT_EQ(val.inputs()[0], 50256);  // every document starts with <|endoftext|>
    train.next_batch();
    EXPECT_EQ(train.inputs()[1], train.targets()[0]);
}

TEST(DataLoader, RefusesShardsOfDifferentTokenizersInOneGlob) {
    const std::string folder = fresh_folder("dataloader_");
    const std::vector<uint16_t> tokens(20, 1);
    write_token_shard(folder + "a_1.bin", {20240520, 1, 20, 0x1234abcd}, tokens);
    write_token_shard(folder + "a_2.bin", {20240520, 1, 20, 0}, tokens);  // older: records none
    write_token_shard(folder + "a_3.bin", {20240520, 1, 20, 0x1234abcd}, tokens);
    write_token_shard(folder + "b_1.bin", {20240520, 1, 20, 0x0000beef}, tokens);
    write_token_shard(folder + "c_1.bin", {20240520, 1, 20, 0}, tokens);
    EXPECT_EQ(DataLoader(folder + "a_*.bin", 2, 3, kVocab, false, 0).tokenizer(), 0x1234abcdu);
    EXPECT_EQ(DataLoader(folder + "c_*.bin", 2, 3, kVocab, false, 0).tokenizer(), 0u);
    EXPECT_EQ(DataLoader(folder + "[ac]_*.bin", 2, 3, kVocab, false, 0).tokenizer(), 0x1234abcdu)
        << "shards that record no tokenizer go with any";
    EXPECT_EQ(open_error(folder + "*_1.bin"),
              folder + "b_1.bin: made by tokenizer 0x0000beef, but " + folder +
                  "a_1.bin by tokenizer 0x1234abcd: shards of different tokenizers cannot be read together");
}

TEST(DataLoader, ComparesTheTokenizersAndFilesOfTwoLoaders) {
    const std::string folder = fresh_folder("dataloader_");
    const std::vector<uint16_t> tokens(20, 1);
    write_token_shard(folder + "train_1.bin", {20240520, 1, 20, 7}, tokens);
    write_token_shard(folder + "train_2.bin", {20240520, 1, 20, 7}, tokens);
    write_token_shard(folder + "val_1.bin", {20240520, 1, 20, 7}, tokens);
    write_token_shard(folder + "other_1.bin", {20240520, 1, 20, 8}, tokens);
    write_token_shard(folder + "old_1.bin", {20240520, 1, 20, 0}, tokens);
    std::filesystem::create_symlink(folder + "train_2.bin", folder + "val_2.bin");
    const auto loader = [&](const std::string& glob) { return DataLoader(folder + glob, 2, 3, kVocab, false, 0); };
    const DataLoader train = loader("train_*.bin");
    EXPECT_NO_THROW(check_same_tokenizer(train, loader("val_1.bin")));
    EXPECT_NO_THROW(check_same_tokenizer(train, loader("old_1.bin")));
    try {
        check_same_tokenizer(train, loader("other_*.bin"));
        ADD_FAILURE() << "shards of tokenizers 7 and 8 accepted together";
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), folder + "other_*.bin: made by tokenizer 0x00000008, but " + folder +
                                             "train_*.bin by tokenizer 0x00000007: shards of different tokenizers cannot be used in one run");
    }
    EXPECT_EQ(shared_shard(train, loader("val_1.bin")), "") << "same content, another file";
    EXPECT_EQ(shared_shard(train, loader("val_*.bin")), folder + "val_2.bin") << "a link to a training shard";
    EXPECT_EQ(shared_shard(train, loader("./train_1.bin")), folder + "./train_1.bin") << "a training shard named another way";
}

TEST(DataLoader, TheBundledShardsRecordTheirTokenizers) {
    const uint32_t gpt2 = Tokenizer("data/gpt2_tokenizer.bin").fingerprint();
    const uint32_t compact = Tokenizer("data/mobydick_v4096_tokenizer.bin").fingerprint();
    EXPECT_NE(gpt2, compact);
    EXPECT_EQ(DataLoader("data/mobydick_train_*.bin", 4, 64, 50257, false, 1).tokenizer(), gpt2);
    EXPECT_EQ(DataLoader("data/mobydick_val_*.bin", 4, 64, 50257, false, 1).tokenizer(), gpt2);
    EXPECT_EQ(DataLoader("data/mobydick_v4096_train_*.bin", 4, 64, 4096, false, 1).tokenizer(), compact);
    EXPECT_EQ(DataLoader("data/mobydick_v4096_val_*.bin", 4, 64, 4096, false, 1).tokenizer(), compact);
    EXPECT_NE(open_error("data/mobydick_*train_*.bin", 4, 64).find("shards of different tokenizers cannot be read together"),
              std::string::npos)
        << "GPT-2 ids and compact ids in one glob";
}
