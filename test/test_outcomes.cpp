// The run-outcome rules of training.h (docs/train.md §8) on synthetic loss sequences: a spike
// that recovers, a sustained rise, a rise during warmup, a non-finite loss or gradient norm, a
// collapse, each rule's boundary; then ./train itself: the log records and exit status of a run
// that stops and of one that finishes, with unigram_ce computed as measure/baselines.h computes it, the
// extremes, a blow-up inside warmup, and the history replayed on -resume 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "measure/baselines.h"
#include "test_files.h"
#include "training.h"

namespace {

// Feeds `losses` (finite gradient norms) until the tracker stops the run; returns the step it
// stopped at, or -1.
int feed(OutcomeTracker& t, const std::vector<double>& losses) {
    for (size_t i = 0; i < losses.size(); i++)
        if (!t.observe(losses[i], 1.0).empty()) return (int)i;
    return -1;
}

std::vector<double> repeat(double loss, int n) { return std::vector<double>(n, loss); }

std::vector<double> join(std::vector<double> a, const std::vector<double>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TEST(Outcomes, SpikeThatRecoversIsCountedAndDoesNotStop) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    EXPECT_EQ(feed(t, join(join(repeat(5.0, 30), {7.0, 7.5}), repeat(5.0, 30))), -1);
    EXPECT_EQ(t.spikes(), 1);
    EXPECT_EQ(t.outcome(), "");
    EXPECT_EQ(t.extremes().max_loss, 7.5);
    EXPECT_EQ(t.extremes().max_loss_step, 31);
}

TEST(Outcomes, TwoSpikesAndSmallNoiseAreTold) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    std::vector<double> losses;
    for (int i = 0; i < 100; i++) losses.push_back(5.0 + (i % 2 ? 0.4 : -0.4));  // noise under the margin
    losses[40] = 6.6;  // 1.6 above the mean of the 20 before: a spike
    losses[70] = 9.0;
    EXPECT_EQ(feed(t, losses), -1);
    EXPECT_EQ(t.spikes(), 2);
}

TEST(Outcomes, BlowUpInsideWarmupThatRecoversIsASpike) {
    // Warmup 30 (the divergence rule waits for it); the loss falls from 8.3 and blows up to 17.8
    // at steps 6 and 7, before 20 steps exist: the reference is the mean of the steps before.
    OutcomeTracker t({20, 1.0, 1.0, 30});
    std::vector<double> losses;
    for (int i = 0; i < 60; i++) losses.push_back(6.0 + 2.3 * std::exp(-i / 10.0));
    losses[6] = 17.8;
    losses[7] = 12.0;
    EXPECT_EQ(feed(t, losses), -1);
    EXPECT_EQ(t.spikes(), 1);
    EXPECT_EQ(t.outcome(), "");
    EXPECT_EQ(t.extremes().max_loss, 17.8);
    EXPECT_EQ(t.extremes().max_loss_step, 6);
}

TEST(Outcomes, BlowUpInsideTheFirstWindowThatNeverRecoversIsNotStopped) {
    // Warmup 30, W 20: the loss leaves 8.3 at step 2 and sits near 11 for good. The first W-step
    // mean (step 19) already holds the blow-up, so it is the best mean, and nothing after warmup
    // rises above it: ./train's rule (a rise after warmup, docs/train.md §8) cannot see this
    // run, which finishes. The analysis's divergence event stands in for it (docs/protocol.md,
    // "Divergence": the last training loss above the first, or a collapse after a blow-up).
    OutcomeTracker t({20, 1.0, 1.0, 30});
    std::vector<double> losses = {8.3, 8.2};
    for (int i = 2; i < 600; i++) losses.push_back(11.0 + (i % 2 ? 0.2 : -0.2));
    EXPECT_EQ(feed(t, losses), -1);
    EXPECT_EQ(t.outcome(), "");
    EXPECT_GT(losses.back(), losses.front()) << "its last loss is above its first: the analysis counts it";
    EXPECT_EQ(t.extremes().max_loss, 11.2);
}

TEST(Outcomes, SpikeAtStepOneIsMeasuredAgainstStepZero) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    EXPECT_EQ(feed(t, join({8.0, 9.5, 8.0}, repeat(7.9, 10))), -1);
    EXPECT_EQ(t.spikes(), 1);
}

TEST(Outcomes, SpikeLineIsExclusive) {
    // The reference is the mean of the 4 steps before, 5; the line 6. A loss of exactly 6 is
    // ordinary, one above it a spike (every number here is exact in binary).
    OutcomeTracker at({4, 1.0, 1.0, 0});
    EXPECT_EQ(feed(at, join(join(repeat(5.0, 4), {6.0}), repeat(5.0, 4))), -1);
    EXPECT_EQ(at.spikes(), 0);
    OutcomeTracker above({4, 1.0, 1.0, 0});
    EXPECT_EQ(feed(above, join(join(repeat(5.0, 4), {6.0625}), repeat(5.0, 4))), -1);
    EXPECT_EQ(above.spikes(), 1);
    // Back to exactly the line ends a spike.
    OutcomeTracker back({4, 1.0, 1.0, 0});
    EXPECT_EQ(feed(back, join(repeat(5.0, 4), {7.0, 6.0})), -1);
    EXPECT_EQ(back.spikes(), 1);
}

TEST(Outcomes, SustainedRiseDivergesWhenTheWindowMeanPassesTheMargin) {
    // 40 steps at 5, then 6.5: the mean of the last 20 exceeds 5 + 1 once 14 of them are 6.5
    // (5·6 + 6.5·14 = 121 > 120), at step 40 + 13.
    OutcomeTracker t({20, 1.0, 1.0, 0});
    EXPECT_EQ(feed(t, join(repeat(5.0, 40), repeat(6.5, 30))), 53);
    EXPECT_EQ(t.outcome(), "diverged");
    EXPECT_EQ(t.spikes(), 0) << "a rise that never came back is not a transient spike";
    EXPECT_EQ(t.extremes().max_loss, 6.5);
    EXPECT_EQ(t.extremes().max_loss_step, 40) << "the first step at the highest loss";
}

TEST(Outcomes, DivergenceMarginIsExclusive) {
    // W = 4: the window mean reaches exactly the best mean 5 + 1 and stays there: no divergence;
    // one step at 6.5 lifts it to 6.125: diverged at that step.
    OutcomeTracker at({4, 1.0, 1.0, 0});
    EXPECT_EQ(feed(at, join(repeat(5.0, 4), repeat(6.0, 10))), -1);
    OutcomeTracker above({4, 1.0, 1.0, 0});
    EXPECT_EQ(feed(above, join(join(repeat(5.0, 4), repeat(6.0, 10)), {6.5})), 14);
    EXPECT_EQ(above.outcome(), "diverged");
}

TEST(Outcomes, DivergenceRuleStartsExactlyAtTheEndOfWarmup) {
    // The rise of SustainedRise passes the margin at step 53: with warmup 53 it stops there, with
    // warmup 54 one step later; with warmup 100 at step 100.
    for (int warmup : {53, 54, 100}) {
        OutcomeTracker t({20, 1.0, 1.0, warmup});
        EXPECT_EQ(feed(t, join(repeat(5.0, 40), repeat(6.5, 100))), warmup) << "warmup " << warmup;
        EXPECT_EQ(t.outcome(), "diverged");
    }
}

TEST(Outcomes, DecreasingLossNeverStops) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    std::vector<double> losses;
    for (int i = 0; i < 500; i++) losses.push_back(8.3 * std::exp(-i / 100.0) + 4.0);
    EXPECT_EQ(feed(t, losses), -1);
    EXPECT_EQ(t.spikes(), 0);
    EXPECT_EQ(t.extremes().max_loss_step, 1) << "step 0 does not count";
    EXPECT_EQ(t.extremes().max_loss, losses[1]);
}

TEST(Outcomes, ExtremesOfARunWithoutStepsAfterZeroOrStatsAreUnknown) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    EXPECT_EQ(t.observe(9.0, 1.0), "");
    EXPECT_TRUE(std::isnan(t.extremes().max_loss));
    EXPECT_EQ(t.extremes().max_loss_step, -1);
    EXPECT_TRUE(std::isnan(t.extremes().max_attn_logit));
    EXPECT_TRUE(std::isnan(t.extremes().max_mean_abs_L));
}

TEST(Outcomes, StatsExtremesAreTheLargestLogged) {
    OutcomeTracker t({20, 1.0, 1.0, 0});
    t.observe_stats({3.0, 40.0, 2.0}, 1.5);
    t.observe_stats({5.0, 7.0, NAN}, 0.5);
    t.observe_stats({1.0, 2.0, 3.0}, 12.0);
    EXPECT_EQ(t.extremes().max_attn_logit, 40.0);
    EXPECT_EQ(t.extremes().max_mean_abs_L, 12.0);
}

TEST(Outcomes, NonFiniteLossOrGradientNormStopsAtOnce) {
    OutcomeTracker a({20, 1.0, 1.0, 0});
    EXPECT_EQ(a.observe(5.0, 1.0), "");
    EXPECT_EQ(a.observe(6.0, 1.0), "");
    EXPECT_EQ(a.observe(NAN, 1.0), "loss is nan");
    EXPECT_EQ(a.outcome(), "nonfinite");
    EXPECT_EQ(a.extremes().max_loss, 6.0) << "the highest finite loss";
    EXPECT_EQ(a.extremes().max_loss_step, 1);
    OutcomeTracker b({20, 1.0, 1.0, 50});
    EXPECT_EQ(b.observe(INFINITY, 1.0), "loss is inf") << "also during warmup";
    OutcomeTracker c({20, 1.0, 1.0, 0});
    EXPECT_EQ(c.observe(5.0, INFINITY), "gradient norm is inf");
    EXPECT_EQ(c.outcome(), "nonfinite");
}

// Each non-finite value, of the loss or of the gradient norm, after ordinary steps and after
// warmup: the run stops there as nonfinite, its extremes those of the finite steps before.
TEST(Outcomes, InfinitiesStopLikeNanAtAStepAfterTheFirst) {
    const std::vector<std::pair<double, const char*>> values = {
        {NAN, "nan"}, {INFINITY, "inf"}, {-INFINITY, "-inf"}};
    for (const auto& [bad, word] : values)
        for (const bool in_loss : {true, false}) {
            OutcomeTracker t({3, 1.0, 1.0, 2});
            for (double loss : {5.0, 4.0, 4.5, 3.0}) ASSERT_EQ(t.observe(loss, 1.0), "");
            const std::string reason = in_loss ? t.observe(bad, 1.0) : t.observe(2.5, bad);
            EXPECT_EQ(reason, std::string(in_loss ? "loss is " : "gradient norm is ") + word) << bad;
            EXPECT_EQ(t.outcome(), "nonfinite") << bad;
            EXPECT_EQ(t.extremes().max_loss, 4.5) << bad;
            EXPECT_EQ(t.extremes().max_loss_step, 2) << bad;
        }
}

TEST(Outcomes, FinalEvaluationThatIsNotFiniteIsNonfinite) {
    for (double bad : {NAN, INFINITY, -INFINITY}) {
        EXPECT_STREQ(final_outcome(bad, 5.86), "nonfinite") << bad;
        EXPECT_STREQ(final_outcome(bad, NAN), "nonfinite") << bad << " without a baseline";
    }
}

TEST(Outcomes, FinishedRunCollapsesUnlessBelowUnigram) {
    EXPECT_STREQ(final_outcome(5.9, 5.86), "collapsed");
    EXPECT_STREQ(final_outcome(5.86, 5.86), "collapsed") << "equal is not below";
    EXPECT_STREQ(final_outcome(4.8, 5.86), "ok");
    EXPECT_STREQ(final_outcome(NAN, 5.86), "nonfinite");
}

// ./train on a tiny model (V = 96) and random shards.
class TrainOutcome : public ::testing::Test {
protected:
    std::string dir;
    void SetUp() override {
        dir = fresh_folder("outcomes_");
        write_random_shard(dir + "train_000.bin", 3000, 96, 1);
        write_random_shard(dir + "val_000.bin", 600, 96, 2);
    }
    int train(const std::string& flags) {
        const char* bin = std::getenv("GPT2_BIN_DIR");
        const std::string cmd = std::string(bin ? bin : ".") + "/train -device cpu -init l2h2c16v96t16 -B 2 -T 8 " +
                                "-train_data '" + dir + "train_*.bin' -val_data '" + dir + "val_*.bin' -out " + dir +
                                "out -threads 1 " + (flags.find("-save_every") == std::string::npos ? "-save_every 0 " : "") +
                                flags + " > " + dir + "train.out 2>&1";
        const int raw = std::system(cmd.c_str());
        return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    }
};

// The record of the run's end: its outcome or diverged record, the last line of the log.
std::string last_record(const std::string& log) {
    const size_t end = log.find_last_not_of('\n');
    return log.substr(log.rfind('\n', end) + 1, end - log.rfind('\n', end));
}

// The largest of the numbers of `key` over the log's records that have it (the last of each
// record's array when `last`), NaN when none has.
double largest(const std::string& log, const std::string& marker, const std::string& key, bool last) {
    double top = NAN;
    for (const std::string& line : log_lines(log, marker)) {
        const std::vector<double> v = json_numbers(line, key);
        if (v.empty()) continue;
        for (size_t i = last ? v.size() - 1 : 0; i < v.size(); i++) top = std::fmax(top, v[i]);
    }
    return top;
}

TEST_F(TrainOutcome, FinishedRunLogsItsOutcomeWithUnigramOfTheEvaluatedTokens) {
    ASSERT_EQ(train("-steps 4 -warmup 1 -eval_every 2 -eval_batches 3"), 0) << read_file(dir + "train.out");
    const std::string log = read_file(dir + "out/log.jsonl");
    const std::string record = last_record(log);
    ASSERT_NE(record.find("\"event\": \"outcome\""), std::string::npos) << log;
    EXPECT_TRUE(record.find("\"outcome\": \"ok\"") != std::string::npos ||
                record.find("\"outcome\": \"collapsed\"") != std::string::npos) << record;
    EXPECT_NE(record.find("\"spikes\": 0"), std::string::npos) << record;
    // The highest training loss after step 0, from the step records, and its step.
    double top = -1;
    int at = -1;
    for (const std::string& line : log_lines(log, "\"loss\": ")) {
        const int step = (int)json_numbers(line, "step")[0];
        const double loss = json_numbers(line, "loss")[0];
        if (step > 0 && loss > top) top = loss, at = step;
    }
    EXPECT_EQ(json_numbers(record, "max_loss"), std::vector<double>{top}) << record;
    EXPECT_EQ(json_numbers(record, "max_loss_step"), std::vector<double>{double(at)}) << record;
    EXPECT_EQ(record.find("max_attn_logit"), std::string::npos) << "no stats records, no stats extremes: " << record;
    DataLoader val(dir + "val_*.bin", 2, 8, 96, false, 0);
    const double expected = evaluated_baselines(dir + "train_*.bin", 96, false, val, 3, 16).unigram_ce();
    const std::vector<double> logged = json_numbers(record, "unigram_ce");
    ASSERT_EQ(logged.size(), 1u) << record;
    EXPECT_NEAR(logged[0], expected, 1e-6 * expected);
}

TEST_F(TrainOutcome, RunThatStopsExitsWithStatus3AndSaysWhy) {
    EXPECT_EQ(train("-steps 60 -lr 3 -warmup 0 -clip 0 -wd 0 -eval_every 0 -outcome_window 5"), 3)
        << read_file(dir + "train.out");
    const std::string log = read_file(dir + "out/log.jsonl");
    EXPECT_NE(log.find("\"event\": \"diverged\""), std::string::npos) << log;
    EXPECT_TRUE(log.find("\"outcome\": \"diverged\"") != std::string::npos ||
                log.find("\"outcome\": \"nonfinite\"") != std::string::npos) << log;
}

// lr 1 with warmup 20: the loss blows up inside warmup (from about 4.6 at step 0 past 9 by
// step 17, while the learning rate climbs to 1), falls back twice on the way (spikes, counted
// though warmup is not over) and rises for good: the divergence rule stops the run at step 20,
// when warmup ends. The record's extremes are those of the run up to that step: the highest loss
// among the step records after step 0 and the stopping step's own loss, the largest of the
// logged stats records.
TEST_F(TrainOutcome, BlowUpInsideWarmupIsSeen) {
    EXPECT_EQ(train("-steps 40 -warmup 20 -lr 1 -clip 0 -wd 0 -eval_every 0 -outcome_window 5 -stats_every 1"), 3)
        << read_file(dir + "train.out");
    const std::string log = read_file(dir + "out/log.jsonl");
    const std::string record = last_record(log);
    ASSERT_NE(record.find("\"event\": \"diverged\""), std::string::npos) << log;
    EXPECT_EQ(json_numbers(record, "step"), std::vector<double>{20}) << record;
    ASSERT_EQ(json_numbers(record, "spikes").size(), 1u) << record;
    EXPECT_GE(json_numbers(record, "spikes")[0], 1) << "blow-ups inside warmup that came back: " << record;
    double top = -1;
    int at = -1;
    for (const std::string& line : log_lines(log, "\"loss\": ")) {  // the step records, then the stop's
        const int step = (int)json_numbers(line, "step")[0];
        const double loss = json_numbers(line, "loss")[0];
        if (step > 0 && loss > top) top = loss, at = step;
    }
    EXPECT_GT(top, json_numbers(log_lines(log, "\"step\": 0, \"loss\"")[0], "loss")[0] + 4) << "a blow-up: " << log;
    EXPECT_EQ(json_numbers(record, "max_loss"), std::vector<double>{top}) << record;
    EXPECT_EQ(json_numbers(record, "max_loss_step"), std::vector<double>{double(at)}) << record;
    EXPECT_EQ(json_numbers(record, "max_attn_logit"),
              std::vector<double>{largest(log, "\"event\": \"stats\"", "attn_logit_max", false)}) << record;
    EXPECT_EQ(json_numbers(record, "max_mean_abs_L"),
              std::vector<double>{largest(log, "\"event\": \"stats\"", "mean_abs", true)}) << record;
}

// A run continued with -resume 1 replays the kept steps and stats records: it stops with the same
// record, spikes and extremes included, as the run that went through.
TEST_F(TrainOutcome, ResumeReplaysTheWholeHistory) {
    const std::string flags = "-steps 40 -warmup 20 -lr 1 -clip 0 -wd 0 -eval_every 0 -outcome_window 5 -stats_every 1 ";
    ASSERT_EQ(train(flags), 3) << read_file(dir + "train.out");  // -save_every 0: no checkpoint before the stop
    const std::string through = last_record(read_file(dir + "out/log.jsonl"));
    ASSERT_EQ(train(flags + "-save_every 10 -overwrite 1"), 3) << read_file(dir + "train.out");
    ASSERT_EQ(last_record(read_file(dir + "out/log.jsonl")), through);
    ASSERT_EQ(train(flags + "-save_every 10 -resume 1"), 3) << read_file(dir + "train.out");  // from step 20
    EXPECT_NE(read_file(dir + "train.out").find("continuing at step 20"), std::string::npos) << read_file(dir + "train.out");
    EXPECT_EQ(last_record(read_file(dir + "out/log.jsonl")), through);
}

// `log` with the value of member `key` of the line that starts with `prefix` (not the first line)
// replaced by the JSON text `value`.
std::string planted(const std::string& log, const std::string& prefix, const std::string& key, const std::string& value) {
    const size_t line = log.find("\n" + prefix);
    const size_t at = log.find("\"" + key + "\": ", line) + key.size() + 4;
    const size_t end = log[at] == '[' ? log.find(']', at) + 1 : log.find_first_of(",}", at);
    return log.substr(0, at) + value + log.substr(end);
}

// A finished run continued with -resume 1 -change_steps 1 keeps its steps' records and replays
// them: extremes planted in a kept step record (loss 50 at step 3) and a kept stats record (step
// 5: attention logit 10^6, mean |X_L| 10^5, the last entry of mean_abs) are the outcome's.
TEST_F(TrainOutcome, ResumeCarriesTheExtremesOfTheKeptRecords) {
    const std::string flags = "-warmup 2 -lr 1e-3 -eval_every 0 -stats_every 1 -save_every 10 ";
    ASSERT_EQ(train(flags + "-steps 10"), 0) << read_file(dir + "train.out");
    std::string log = read_file(dir + "out/log.jsonl");
    log = planted(log, "{\"step\": 3, \"loss\"", "loss", "50");
    log = planted(log, "{\"step\": 5, \"event\": \"stats\"", "attn_logit_max", "[1000000, 3]");
    log = planted(log, "{\"step\": 5, \"event\": \"stats\"", "mean_abs", "[1, 2, 100000]");
    std::ofstream(dir + "out/log.jsonl") << log;
    ASSERT_EQ(train(flags + "-steps 14 -resume 1 -change_steps 1"), 0) << read_file(dir + "train.out");
    const std::string record = last_record(read_file(dir + "out/log.jsonl"));
    ASSERT_NE(record.find("\"event\": \"outcome\""), std::string::npos) << record;
    EXPECT_EQ(json_numbers(record, "max_loss"), std::vector<double>{50}) << record;
    EXPECT_EQ(json_numbers(record, "max_loss_step"), std::vector<double>{3}) << record;
    EXPECT_GE(json_number(record, "spikes"), 1) << "the planted loss came back down at step 4: " << record;
    EXPECT_EQ(json_numbers(record, "max_attn_logit"), std::vector<double>{1e6}) << record;
    EXPECT_EQ(json_numbers(record, "max_mean_abs_L"), std::vector<double>{1e5}) << record;
}

TEST_F(TrainOutcome, OldMarginFlagIsGone) {
    EXPECT_EQ(train("-steps 2 -diverge_margin 1"), 2);
    EXPECT_NE(read_file(dir + "train.out").find("-diverge_margin"), std::string::npos);
}

TEST(Outcomes, SpikeReferenceHoldsExactlyWindowLosses) {
    // Window 2: after 2.0 and 2.8 the reference is their mean 2.4 and the line 3.4, so 3.6 is a
    // spike (against the last loss alone, 2.8, the line would be 3.8), and 2.0 ends it.
    OutcomeTracker t({2, 100.0, 1.0, 0});
    EXPECT_EQ(feed(t, {2.0, 2.8, 3.6, 2.0}), -1);
    EXPECT_EQ(t.spikes(), 1);
}

TEST(LearningRate, OneStepOfDecayEndsAtTheMinimum) {
    // Warmup 2 of 4 steps: the cosine spans the last two, step 2 at lr, step 3 (the last) at lr_min.
    EXPECT_DOUBLE_EQ(learning_rate(2, 4, 1.0, 0.1, 2), 1.0);
    EXPECT_DOUBLE_EQ(learning_rate(3, 4, 1.0, 0.1, 2), 0.1);
}

}  // namespace
