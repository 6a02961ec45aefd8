// measure/baselines.h — the cross-entropies a language model must beat (docs/train.md §8,
// docs/experiments.md "Baselines"): a unigram and a bigram model of the training tokens.
//
//   unigram (add-one over the V real tokens):  p(v) = (count(v) + 1) / (N + V)
//   bigram (Witten–Bell interpolation with that unigram):
//       p(w | u) = (count(u, w) + types(u) · p(w)) / (count(u) + types(u))
//   where count(u) is how often u is followed by a token, types(u) how many different tokens
//   follow it; a u never followed by anything falls back to p(w).
//
// Counts come from the training shards: every token, and every pair of consecutive tokens of
// one shard (for the bigram, the pairs of the first kBigramTokens tokens only, so that
// OpenWebText-sized data fits in memory). A baseline's cross-entropy is the mean of
// −ln p(target | input) over evaluated (input, target) pairs: the same B×T positions a model
// is evaluated on (the input is the token before the target).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "dataloader.h"
#include "util/errors.h"

// Token counts of a training corpus over a vocabulary of V tokens.
struct TokenCounts {
    int V = 0;
    uint64_t tokens = 0;                              // N
    std::vector<uint64_t> unigram;                    // (V)
    std::vector<uint64_t> followed;                   // (V) count(u): pairs that start with u
    std::vector<uint32_t> successor_types;            // (V) types(u)
    std::unordered_map<uint64_t, uint32_t> bigram;    // key u·V + w → count(u, w)
    bool with_bigram = false;
};

constexpr uint64_t kBigramTokens = 100'000'000;

// Adds one shard's tokens (n of them) to the counts; pairs only while fewer than kBigramTokens
// tokens have been paired.
inline void add_shard_counts(TokenCounts& c, const uint16_t* tok, size_t n) {
    for (size_t i = 0; i < n; i++) c.unigram[tok[i]]++;
    if (c.with_bigram) {
        for (size_t i = 0; i + 1 < n && c.tokens + i + 1 < kBigramTokens; i++) {
            uint32_t& pair = c.bigram[uint64_t(tok[i]) * c.V + tok[i + 1]];
            if (pair++ == 0) c.successor_types[tok[i]]++;
            c.followed[tok[i]]++;
        }
    }
    c.tokens += n;
}

// Counts every token (and, with `bigram`, every pair) of the shards matching `pattern`, which
// are validated first as DataLoader does (tokens below V). Throws InputError on a bad shard.
inline TokenCounts count_tokens(const std::string& pattern, int V, bool bigram) {
    const DataLoader check(pattern, 1, 1, V, false, 0);
    TokenCounts c;
    c.V = V;
    c.with_bigram = bigram;
    c.unigram.assign(V, 0);
    if (bigram) {
        c.followed.assign(V, 0);
        c.successor_types.assign(V, 0);
    }
    std::vector<uint16_t> tokens;
    for (const std::string& path : check.files()) {
        const InputFile f = open_input(path, "token shard");
        int32_t header[256];
        if (std::fread(header, sizeof header, 1, f.get()) != 1) throw InputError(path + ": cannot read the token shard");
        tokens.resize(uint32_t(header[2]));
        if (std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f.get()) != tokens.size())
            throw InputError(path + ": read error in the tokens");
        add_shard_counts(c, tokens.data(), tokens.size());
    }
    return c;
}

// Add-one unigram probability of token v.
inline double unigram_prob(const TokenCounts& c, int v) {
    return (double(c.unigram[v]) + 1.0) / (double(c.tokens) + c.V);
}

// Witten–Bell bigram probability of token w after token u.
inline double bigram_prob(const TokenCounts& c, int u, int w) {
    const double p1 = unigram_prob(c, w);
    if (c.followed[u] == 0) return p1;
    const auto it = c.bigram.find(uint64_t(u) * c.V + w);
    const double pair = it == c.bigram.end() ? 0.0 : it->second;
    const double types = c.successor_types[u];
    return (pair + types * p1) / (double(c.followed[u]) + types);
}

// Running sums of the two baselines' −ln p over evaluated (input, target) pairs.
struct BaselineLoss {
    double unigram_sum = 0, bigram_sum = 0;
    uint64_t n = 0;
    bool with_bigram = false;

    // Adds the n = B·T positions of one batch (inputs and targets as the DataLoader gives them).
    void add(const TokenCounts& c, const int32_t* inputs, const int32_t* targets, size_t count) {
        for (size_t i = 0; i < count; i++) {
            unigram_sum -= std::log(unigram_prob(c, targets[i]));
            if (c.with_bigram) bigram_sum -= std::log(bigram_prob(c, inputs[i], targets[i]));
        }
        n += count;
        with_bigram = c.with_bigram;
    }
    double unigram_ce() const { return n ? unigram_sum / n : NAN; }
    double bigram_ce() const { return n && with_bigram ? bigram_sum / n : NAN; }
};

// Both baselines (the bigram only when `bigram`) of the B·T targets of each of the first
// `batches` batches of `val`, from the counts of the training shards matching train_pattern:
// the tokens a model's validation loss is computed on. Leaves `val` reset.
inline BaselineLoss evaluated_baselines(const std::string& train_pattern, int V, bool bigram, DataLoader& val,
                                        int batches, size_t batch_tokens) {
    const TokenCounts counts = count_tokens(train_pattern, V, bigram);
    BaselineLoss baseline;
    val.reset();
    for (int i = 0; i < batches; i++) {
        val.next_batch();
        baseline.add(counts, val.inputs(), val.targets(), batch_tokens);
    }
    val.reset();
    return baseline;
}
