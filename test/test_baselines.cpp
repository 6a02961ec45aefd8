// The baselines of measure/baselines.h on corpora small enough to work out by hand: add-one unigram and
// Witten–Bell bigram probabilities, their cross-entropies over evaluated (input, target) pairs,
// pairs not crossing shard boundaries, the evaluated tokens read through a DataLoader as ./train
// and ./eval read them, and bad shards refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "measure/baselines.h"
#include "test_files.h"

namespace {

// Train shard 0 1 0 1 2 over V = 4: counts 2, 2, 1, 0 (N = 5); pairs (0,1) (1,0) (0,1) (1,2).
class Baselines : public ::testing::Test {
protected:
    std::string dir;
    void SetUp() override {
        dir = fresh_folder("baselines_");
        write_token_shard(dir + "train_000.bin", {20240520, 1, 5}, {0, 1, 0, 1, 2});
    }
};

TEST_F(Baselines, UnigramIsAddOneOverTheVocabulary) {
    const TokenCounts c = count_tokens(dir + "train_*.bin", 4, true);
    EXPECT_EQ(c.tokens, 5u);
    EXPECT_DOUBLE_EQ(unigram_prob(c, 0), 3.0 / 9);
    EXPECT_DOUBLE_EQ(unigram_prob(c, 1), 3.0 / 9);
    EXPECT_DOUBLE_EQ(unigram_prob(c, 2), 2.0 / 9);
    EXPECT_DOUBLE_EQ(unigram_prob(c, 3), 1.0 / 9) << "a token never seen keeps its add-one share";
}

TEST_F(Baselines, BigramIsWittenBellInterpolatedWithTheUnigram) {
    const TokenCounts c = count_tokens(dir + "train_*.bin", 4, true);
    // After 0: count(0) = 2 pairs, 1 successor type: p(w|0) = (count(0,w) + 1·p(w)) / 3.
    EXPECT_DOUBLE_EQ(bigram_prob(c, 0, 1), (2 + 3.0 / 9) / 3);
    EXPECT_DOUBLE_EQ(bigram_prob(c, 0, 0), (3.0 / 9) / 3);
    // After 1: count(1) = 2, 2 types (0 and 2): p(2|1) = (1 + 2·2/9) / 4.
    EXPECT_DOUBLE_EQ(bigram_prob(c, 1, 2), (1 + 4.0 / 9) / 4);
    // 2 and 3 are never followed by anything: the unigram.
    EXPECT_DOUBLE_EQ(bigram_prob(c, 2, 3), 1.0 / 9);
    EXPECT_DOUBLE_EQ(bigram_prob(c, 3, 0), 3.0 / 9);
    for (int u = 0; u < 4; u++) {
        double total = 0;
        for (int w = 0; w < 4; w++) total += bigram_prob(c, u, w);
        EXPECT_NEAR(total, 1.0, 1e-15) << "p(.|" << u << ") sums to one";
    }
}

TEST_F(Baselines, CrossEntropiesAreMeansOverTheEvaluatedPairs) {
    const TokenCounts c = count_tokens(dir + "train_*.bin", 4, true);
    const int32_t inputs[] = {0, 1, 2}, targets[] = {1, 2, 3};
    BaselineLoss loss;
    loss.add(c, inputs, targets, 3);
    EXPECT_NEAR(loss.unigram_ce(), -(std::log(3.0 / 9) + std::log(2.0 / 9) + std::log(1.0 / 9)) / 3, 1e-14);
    EXPECT_NEAR(loss.bigram_ce(), -(std::log(7.0 / 9) + std::log(13.0 / 36) + std::log(1.0 / 9)) / 3, 1e-14);
    EXPECT_TRUE(std::isnan(BaselineLoss().unigram_ce())) << "no tokens, no cross-entropy";
}

TEST_F(Baselines, PairsDoNotCrossShardBoundaries) {
    const std::string two = fresh_folder("baselines_two_");
    write_token_shard(two + "t_000.bin", {20240520, 1, 2}, {0, 1});
    write_token_shard(two + "t_001.bin", {20240520, 1, 2}, {2, 3});
    const TokenCounts c = count_tokens(two + "t_*.bin", 4, true);
    EXPECT_EQ(c.tokens, 4u);
    EXPECT_EQ(c.followed[1], 0u) << "1 ends the first shard: no pair (1, 2)";
    EXPECT_DOUBLE_EQ(bigram_prob(c, 0, 1), (1 + 2.0 / 8) / 2);
}

TEST_F(Baselines, EvaluatedTokensAreTheDataLoadersValidationBatches) {
    // Val shard 0 1 2 3 0 at B = 1, T = 2: windows [0 1 2] and [2 3 0], targets 1 2 and 3 0.
    write_token_shard(dir + "val_000.bin", {20240520, 1, 5}, {0, 1, 2, 3, 0});
    DataLoader val(dir + "val_*.bin", 1, 2, 4, false, 0);
    const BaselineLoss loss = evaluated_baselines(dir + "train_*.bin", 4, false, val, 2, 2);
    EXPECT_EQ(loss.n, 4u);
    EXPECT_NEAR(loss.unigram_ce(), -(std::log(3.0 / 9) + std::log(2.0 / 9) + std::log(1.0 / 9) + std::log(3.0 / 9)) / 4,
                1e-14);
    EXPECT_TRUE(std::isnan(loss.bigram_ce())) << "bigram not asked for";
}

TEST_F(Baselines, BadTrainingShardsAreRefused) {
    EXPECT_THROW(count_tokens(dir + "nothing_*.bin", 4, false), InputError);
    EXPECT_THROW(count_tokens(dir + "train_*.bin", 2, false), InputError) << "token 2 is outside V = 2";
    write_token_shard(dir + "bad_000.bin", {12345, 1, 5}, {0, 1, 0, 1, 2});
    EXPECT_THROW(count_tokens(dir + "bad_*.bin", 4, false), InputError);
}

}  // namespace
