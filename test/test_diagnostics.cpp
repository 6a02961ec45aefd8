// The diagnostics as ./eval's JSON and ./train's `stats` records carry them (docs/train.md §4;
// docs/experiments.md, *Diagnostics*), on the real programs with a tiny model and tiny shards
// made here: every field present with its length, the relations between fields that their
// definitions fix, and perplexity per sequence against exp of single-sequence losses. The
// values themselves are checked against finite differences and hand-worked cases in
// test_stability. Run from the repository root after `make`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "model.h"
#include "test_files.h"

namespace {

struct Result {
    int status;
    std::string out;
};

class Diagnostics : public ::testing::Test {
protected:
    std::string dir;
    ModelConfig cfg;

    void SetUp() override {
        dir = fresh_folder("diagnostics_");
        cfg = tiny_model(3, Placement::Pre);
        write_fresh_checkpoint(dir + "tiny.bin", cfg, 4);
        write_random_shard(dir + "train_000.bin", 3000, cfg.V, 1);
        write_random_shard(dir + "val_000.bin", 500, cfg.V, 2);
    }
    void TearDown() override { std::filesystem::remove_all(dir); }

    Result run(const std::string& command) const {
        const std::string log = dir + "out.txt";
        const int raw = std::system((command + " > " + log + " 2>&1").c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(log)};
    }
    // ./eval -device cpu on the tiny checkpoint with T = 8; returns the JSON text.
    std::string eval(const std::string& flags) const {
        const std::string json = dir + "eval.json";
        std::filesystem::remove(json);
        const Result r = run("./eval -device cpu -threads 1 -model " + dir + "tiny.bin -val_data '" + dir +
                             "val_*.bin' -T 8 -json " + json + " " + flags);
        EXPECT_EQ(r.status, 0) << r.out;
        return read_file(json);
    }
};

TEST_F(Diagnostics, EvalJsonHoldsEveryMeasurementWithItsLength) {
    const std::string j = eval("-B 2 -eval_batches 2 -diag_batches 1");
    const size_t L = cfg.L;
    for (const char* key : {"ppl_seq", "logit_max", "log_z_mean", "val_ppl", "sigma_rel", "sigma"})
        EXPECT_EQ(json_numbers(j, key).size(), 1u) << key;
    for (const char* key : {"rms", "grad_norm_scaled", "relative_amplification"})
        EXPECT_EQ(json_numbers(j, key).size(), L + 1) << key;
    for (const char* key : {"rms_half", "grad_norm_scaled_half"}) EXPECT_EQ(json_numbers(j, key).size(), 2 * L + 1) << key;
    for (const char* key : {"attn_logit_max", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms"})
        EXPECT_EQ(json_numbers(j, key).size(), L) << key;

    // The definitions tie the fields together (one diagnostic batch, so no averaging between).
    const std::vector<double> grad = json_numbers(j, "grad_norm"), rms = json_numbers(j, "rms"),
                              scaled = json_numbers(j, "grad_norm_scaled"), w2 = json_numbers(j, "w2_bound"),
                              amp = json_numbers(j, "relative_amplification");
    const double sigma_rel = json_number(j, "sigma_rel");
    EXPECT_EQ(sigma_rel, 0.01);  // the default
    EXPECT_NEAR(json_number(j, "sigma"), sigma_rel * rms[0], 1e-7 * rms[0]);
    for (size_t i = 0; i <= L; i++) {
        EXPECT_NEAR(scaled[i], grad[i] * rms[i], 1e-7 * scaled[i]) << i;
        const double want = w2[i] / std::sqrt((double)cfg.C) / rms[i] / sigma_rel;
        EXPECT_NEAR(amp[i], want, 1e-6 * want) << i;
    }
    EXPECT_NEAR(amp[0], 1.0, 0.2);  // the noise itself, relative to X_0
    // A fresh model's logits are tiny (weights of std 0.02): log Z ≈ ln V, and the largest logit
    // lies between log Z − ln V and log Z.
    const double log_z = json_number(j, "log_z_mean"), z_max = json_number(j, "logit_max");
    EXPECT_NEAR(log_z, std::log((double)cfg.V), 0.05);
    EXPECT_GT(z_max, log_z - std::log((double)cfg.V));
    EXPECT_LT(z_max, 1.0);
    // Jensen: the mean of exp over sequences is at least exp of the mean.
    EXPECT_GE(json_number(j, "ppl_seq"), json_number(j, "val_ppl") * (1 - 1e-7));
}

TEST_F(Diagnostics, PerplexityPerSequenceIsTheMeanOfExpOfEachSequenceLoss) {
    // The loader takes consecutive windows of T tokens: with B = 1, batch k is sequence k, so
    // one batch gives sequence 0's loss and two batches the mean of sequences 0 and 1. With
    // B = 2 one batch holds both sequences: ppl_seq = (e^{L0} + e^{L1}) / 2.
    const double l0 = json_number(eval("-B 1 -eval_batches 1 -diag_batches 0"), "val_loss");
    const double mean01 = json_number(eval("-B 1 -eval_batches 2 -diag_batches 0"), "val_loss");
    const double l1 = 2 * mean01 - l0;
    const std::string both = eval("-B 2 -eval_batches 1 -diag_batches 0");
    const double want = (std::exp(l0) + std::exp(l1)) / 2;
    EXPECT_NEAR(json_number(both, "ppl_seq"), want, 1e-5 * want);
    EXPECT_NEAR(json_number(both, "val_ppl"), std::exp(mean01), 1e-5 * want);
    // One sequence: both definitions agree.
    const std::string one = eval("-B 1 -eval_batches 1 -diag_batches 0");
    EXPECT_NEAR(json_number(one, "ppl_seq"), json_number(one, "val_ppl"), 1e-6 * json_number(one, "val_ppl"));
}

TEST_F(Diagnostics, AnAbsoluteSigmaIsUsedAsGivenAndReportedRelativeToX0) {
    const std::string j = eval("-B 2 -eval_batches 1 -diag_batches 1 -sigma 0.003");
    const double rms0 = json_numbers(j, "rms")[0];
    EXPECT_NEAR(json_number(j, "sigma"), 0.003, 1e-12);
    EXPECT_NEAR(json_number(j, "sigma_rel"), 0.003 / rms0, 1e-7 * 0.003 / rms0);
    const double w2 = json_numbers(j, "w2_bound")[0], amp = json_numbers(j, "relative_amplification")[0];
    EXPECT_NEAR(amp, w2 / std::sqrt((double)cfg.C) / rms0 / (0.003 / rms0), 1e-6 * amp);
}

TEST_F(Diagnostics, EvalRefusesANonPositiveOrDoubleSigma) {
    for (const char* flags : {"-sigma_rel 0", "-sigma_rel -1", "-sigma 0", "-sigma 0.1 -sigma_rel 0.01"}) {
        const Result r = run("./eval -device cpu -model " + dir + "tiny.bin -val_data '" + dir + "val_*.bin' -T 8 " +
                             flags + " -json " + dir + "refused.json");
        EXPECT_EQ(r.status, 2) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find("-sigma"), std::string::npos) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
        EXPECT_FALSE(exists(dir + "refused.json"));
    }
}

TEST_F(Diagnostics, StatsRecordsHoldTheMeasurements) {
    const Result r = run("./train -device cpu -threads 1 -init " + dir + "tiny.bin -train_data '" + dir +
                         "train_*.bin' -val_data '" + dir + "val_*.bin' -B 2 -T 8 -steps 3 -stats_every 2 "
                         "-eval_every 0 -save_every 0 -out " + dir + "run");
    ASSERT_EQ(r.status, 0) << r.out;
    std::vector<std::string> records;
    std::stringstream log(read_file(dir + "run/log.jsonl"));
    for (std::string line; std::getline(log, line);)
        if (line.find("\"event\": \"stats\"") != std::string::npos) records.push_back(line);
    ASSERT_EQ(records.size(), 2u);  // steps 0 and 2
    const size_t L = cfg.L;
    for (const std::string& s : records) {
        EXPECT_EQ(json_numbers(s, "rms").size(), L + 1);
        EXPECT_EQ(json_numbers(s, "rms_half").size(), 2 * L + 1);
        EXPECT_EQ(json_numbers(s, "grad_norm_scaled_half").size(), 2 * L + 1);
        for (const char* key : {"attn_logit_max", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms"})
            EXPECT_EQ(json_numbers(s, key).size(), L) << key;
        const std::vector<double> grad = json_numbers(s, "grad_norm"), rms = json_numbers(s, "rms"),
                                  scaled = json_numbers(s, "grad_norm_scaled");
        ASSERT_EQ(scaled.size(), L + 1);
        for (size_t i = 0; i <= L; i++) EXPECT_NEAR(scaled[i], grad[i] * rms[i], 1e-7 * scaled[i]) << i;
    }
    // Step 0 is the fresh model: logits near 0, so log Z ≈ ln V ≈ the loss, and attention logits
    // of q·k with entries of a few hundredths are far below 1.
    const double log_z = json_number(records[0], "log_z_mean");
    EXPECT_NEAR(log_z, std::log((double)cfg.V), 0.05);
    EXPECT_LT(json_number(records[0], "logit_max"), 1.0);
    for (double a : json_numbers(records[0], "attn_logit_max")) EXPECT_LT(std::fabs(a), 0.1);
    // The step-0 record and ./eval on the same checkpoint see the same weights.
    const std::string j = eval("-B 2 -eval_batches 1 -diag_batches 1");
    const std::vector<double> logged = json_numbers(records[0], "param_norm"), evaluated = json_numbers(j, "param_norm");
    ASSERT_EQ(logged.size(), evaluated.size());
    for (size_t l = 0; l < L; l++) EXPECT_NEAR(logged[l], evaluated[l], 1e-7 * evaluated[l]) << l;
}

}  // namespace
