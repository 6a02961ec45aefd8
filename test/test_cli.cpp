// ./train and ./eval as a user runs them: bad input is refused with one line and exit
// status 2 before any output appears; a divergence exits with status 3 and keeps the last good
// checkpoint; -resume 1 continues bit for bit. Runs the real binaries on a tiny model and tiny
// token shards made here (run from the repository root after `make`).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/json.h"
#include "loop_fixture.h"
#include "util/rng.h"
#include "test_files.h"

namespace {

struct Result {
    int status;
    std::string out, err;
};

// A scratch directory holding a tiny checkpoint and tiny train/val shards.
class Cli : public ::testing::Test {
protected:
    std::string dir;
    ModelConfig cfg;

    void SetUp() override {
        char tmpl[] = "/tmp/gpt2cli.XXXXXX";
        dir = mkdtemp(tmpl);
        cfg = tiny_model(2, Placement::Peri);
        write_fresh_checkpoint(dir + "/tiny.bin", cfg, 7);
        write_shard(dir + "/train_000.bin", random_tokens(3000, 1), 20240520, 1);
        write_shard(dir + "/val_000.bin", random_tokens(500, 2), 20240520, 1);
    }
    void TearDown() override { std::system(("rm -rf " + dir).c_str()); }

    std::vector<uint16_t> random_tokens(size_t n, uint64_t seed) const {
        Rng rng(seed);
        std::vector<uint16_t> t(n);
        for (auto& x : t) x = (uint16_t)rng.below(cfg.V);
        return t;
    }

    // Writes a shard of `tokens` whose header says `magic` and `version`.
    static void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int magic, int version) {
        write_token_shard(path, {magic, version, (int32_t)tokens.size()}, tokens);
    }

    // Runs a program with arguments; captures status, stdout and stderr.
    Result run(const std::string& program, const std::string& args) const {
        const std::string out = dir + "/stdout", err = dir + "/stderr";
        const int raw = std::system((program + " " + args + " > " + out + " 2> " + err).c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(out), read_file(err)};
    }

    // ./train on the tiny model and data, writing to DIR/out, plus extra flags.
    Result train(const std::string& extra) const {
        return run("./train", "-device cpu -threads 2 -init " + dir + "/tiny.bin -train_data " + dir +
                                  "/train_*.bin -val_data " + dir + "/val_*.bin -B 2 -T 8 -eval_every 0 -out " + dir +
                                  "/out " + extra);
    }

    // Asserts the run was refused as bad input: status 2, one stderr line mentioning `what`,
    // and no output directory created.
    void expect_refused(const Result& r, const std::string& what) const {
        EXPECT_EQ(r.status, 2) << r.err << r.out;
        EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(exists(dir + "/out")) << "output directory left behind";
    }

    // The "loss" values of the step records of a log.jsonl, in order.
    static std::vector<std::string> losses(const std::string& log) {
        std::vector<std::string> out;
        std::stringstream in(log);
        std::string line;
        while (std::getline(in, line)) {
            size_t at = line.find("\"loss\": ");
            if (at != std::string::npos && line.find("\"event\"") == std::string::npos)
                out.push_back(line.substr(at + 8, line.find(',', at) - at - 8));
        }
        return out;
    }
};

TEST_F(Cli, TrainsAndWritesLogAndFinalCheckpoint) {
    Result r = train("-steps 4 -save_every 0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("placement peri-LN, dt 0.5"), std::string::npos) << r.out;
    EXPECT_EQ(losses(read_file(dir + "/out/log.jsonl")).size(), 4u);
    EXPECT_TRUE(exists(dir + "/out/model_00000004.bin"));
    EXPECT_TRUE(exists(dir + "/out/state_00000004.bin"));
    ModelConfig saved = read_checkpoint_config(dir + "/out/model_00000004.bin");
    EXPECT_EQ(saved.placement, Placement::Peri);
    EXPECT_EQ(saved.dt, 0.5f);
    // config.json: the settings, defaults resolved.
    const std::string config = read_file(dir + "/out/config.json");
    for (const char* entry : {"\"placement\": \"peri\"", "\"dt\": 0.5", "\"L\": 2", "\"B\": 2", "\"T\": 8",
                              "\"total_batch\": 16", "\"steps\": 4", "\"lr_min\": 6e-05", "\"warmup\": 0",
                              "\"seed\": 42", "\"resumed_at_step\": null", "\"command\": \"./train -device cpu"})
        EXPECT_NE(config.find(entry), std::string::npos) << entry << " not in\n" << config;
}

TEST_F(Cli, TrainsAFreshCustomSize) {
    // The tiny model's sizes as a fresh -init size: the run starts from init_parameters' weights
    // for -seed, so its first loss is the one of a checkpoint holding exactly those weights.
    Result fresh = run("./train", "-device cpu -threads 2 -init l2h2c16v96t16 -ln peri -dt 0.5 -seed 7 -train_data " +
                                      dir + "/train_*.bin -val_data " + dir + "/val_*.bin -B 2 -T 8 -eval_every 0 "
                                      "-shuffle 0 -steps 2 -save_every 0 -out " + dir + "/fresh");
    ASSERT_EQ(fresh.status, 0) << fresh.err;
    EXPECT_NE(fresh.out.find("fresh l2h2c16v96t16"), std::string::npos) << fresh.out;
    ModelConfig saved = read_checkpoint_config(dir + "/fresh/model_00000002.bin");
    EXPECT_EQ(saved.L, 2); EXPECT_EQ(saved.NH, 2); EXPECT_EQ(saved.C, 16);
    EXPECT_EQ(saved.V, 96); EXPECT_EQ(saved.Vp, 128); EXPECT_EQ(saved.maxT, 16);
    Result loaded = train("-seed 7 -shuffle 0 -steps 2 -save_every 0");
    ASSERT_EQ(loaded.status, 0) << loaded.err;
    EXPECT_EQ(losses(read_file(dir + "/fresh/log.jsonl")), losses(read_file(dir + "/out/log.jsonl")));
}

TEST_F(Cli, RefusesUnusableCustomSize) {
    expect_refused(run("./train", "-device cpu -init l2h3c16v96t16 -train_data " + dir + "/train_*.bin -val_data " +
                                      dir + "/val_*.bin -out " + dir + "/out"),
                   "l2h3c16v96t16");
}

// ./train -cpu_ops reference trains with the textbook ops of cpu_ops.h (gpt2_cpu.h,
// ReferenceOps<float>) instead of the fast ops: on a few steps, in every placement, each number
// of its step, validation and stats records matches the fast run's within 1e-5 of the largest
// value of that key in the record.
TEST_F(Cli, ReferenceOpsTrainLikeTheFastOps) {
    for (const char* ln : {"pre", "post", "peri"}) {
        std::string logs[2];
        for (int k = 0; k < 2; k++) {
            const std::string ops = k ? "reference" : "fast", out = dir + "/" + ln + "_" + ops;
            Result r = run("./train", "-device cpu -threads 2 -init l2h2c16v96t16 -ln " + std::string(ln) +
                                          " -dt 0.5 -train_data " + dir + "/train_*.bin -val_data " + dir +
                                          "/val_*.bin -B 2 -T 8 -steps 4 -eval_every 2 -eval_batches 2 -stats_every 2 "
                                          "-save_every 0 -cpu_ops " + ops + " -out " + out);
            ASSERT_EQ(r.status, 0) << r.err;
            EXPECT_EQ(r.out.find("textbook ops") != std::string::npos, k == 1) << r.out;
            logs[k] = read_file(out + "/log.jsonl");
        }
        SCOPED_TRACE(std::string(ln) + "-LN");
        for (const char* key : {"loss", "grad_norm", "lr"}) expect_log_close(logs[1], logs[0], "\"tok_s\"", key, 1e-5);
        expect_log_close(logs[1], logs[0], "\"val_loss\"", "val_loss", 1e-5);
        for (const char* key : {"mean_abs_half", "entry_var_half", "data_var_half", "grad_norm_half", "rms_half",
                                "grad_norm_scaled_half", "attn_logit_max", "param_norm", "fcproj_grad_norm",
                                "mlp_hidden_rms", "logit_max", "log_z_mean"})
            expect_log_close(logs[1], logs[0], "\"stats\"", key, 1e-5);
    }
    expect_refused(train("-cpu_ops slow"), "-cpu_ops");
}

TEST_F(Cli, DefaultBatchShrinksToFitTheShards) {
    // The CPU default B = 8 at T = 100 needs 801 tokens per window; the val shard has 500.
    const std::string data = " -train_data " + dir + "/train_*.bin -val_data " + dir + "/val_*.bin -out " + dir;
    Result r = run("./train", "-device cpu -init l2h2c16v96t128 -T 100 -steps 1 -eval_batches 1" + data + "/out1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("default B=8 lowered to 4 so that one batch"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("batch: B=4 T=100"), std::string::npos) << r.out;
    // Without evaluation only the train shard (3000 tokens) counts: B = 8 fits.
    r = run("./train", "-device cpu -init l2h2c16v96t128 -T 100 -steps 1 -eval_every 0" + data + "/out2");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("batch: B=8 T=100"), std::string::npos) << r.out;
    // A -B given explicitly is never changed: it is refused when it does not fit.
    expect_refused(run("./train", "-device cpu -init l2h2c16v96t128 -T 100 -B 8 -steps 1" + data + "/out"),
                   "no shard holds one batch of B*T+1 = 801 tokens");
}

TEST_F(Cli, ModelTooLargeForMemoryIsOneLineNotACrash) {
    // 1.7e14 parameters: no allocator grants that, so this is the out-of-memory path.
    Result r = run("./train", "-device cpu -init l4000h1c60000 -B 2 -T 8 -train_data " + dir + "/train_*.bin -val_data " +
                                  dir + "/val_*.bin -out " + dir + "/out");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.err, "train: out of memory: the model or batch is too large for this machine\n");
    EXPECT_FALSE(exists(dir + "/out")) << "output directory left behind";
}

TEST_F(Cli, ResumeContinuesBitForBit) {
    ASSERT_EQ(train("-steps 8 -save_every 4 -warmup 2 -shuffle 1").status, 0);
    const std::vector<std::string> uninterrupted = losses(read_file(dir + "/out/log.jsonl"));
    ASSERT_EQ(uninterrupted.size(), 8u);
    // Pretend the run died after step 6: the last checkpoint is the one after 4 steps.
    std::remove((dir + "/out/model_00000008.bin").c_str());
    std::remove((dir + "/out/state_00000008.bin").c_str());
    Result r = train("-steps 8 -save_every 4 -warmup 2 -shuffle 1 -resume 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("resuming"), std::string::npos);
    EXPECT_EQ(losses(read_file(dir + "/out/log.jsonl")), uninterrupted);
    EXPECT_NE(read_file(dir + "/out/config.json").find("\"resumed_at_step\": 4"), std::string::npos);
}

TEST_F(Cli, DivergenceExitsWithStatus3AndKeepsLastCheckpoint) {
    Result r = train("-steps 50 -save_every 1 -lr 3 -warmup 0 -clip 0 -wd 0");
    ASSERT_EQ(r.status, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("diverged at step"), std::string::npos) << r.out;
    const std::string log = read_file(dir + "/out/log.jsonl");
    EXPECT_NE(log.find("\"event\": \"diverged\""), std::string::npos) << log;
    const int diverged_step = std::stoi(r.out.substr(r.out.find("diverged at step") + 17));
    if (diverged_step > 0) {
        char name[64];
        std::snprintf(name, sizeof name, "/out/model_%08d.bin", diverged_step);
        EXPECT_NO_THROW(read_checkpoint_config(dir + name));
    }
}

TEST_F(Cli, RefusesUnknownFlag) { expect_refused(train("-steps 2 -bogus 1"), "unknown flag -bogus"); }
TEST_F(Cli, RefusesMissingValue) { expect_refused(train("-steps"), "-steps needs a value"); }
TEST_F(Cli, RefusesOutOfRangeValue) { expect_refused(train("-lr -1"), "-lr"); }
TEST_F(Cli, RefusesUnknownPlacement) { expect_refused(train("-ln middle"), "-ln"); }
// An open lower bound (eps 0 would divide by zero in AdamW: a non-finite run) and an integer
// maximum (a switch is 0 or 1), refused before any work.
TEST_F(Cli, RefusesValuesAtAnOpenBoundOrAboveAMaximum) {
    expect_refused(train("-steps 2 -eps 0"), "flag -eps: 0 is out of range (0, 1]");
    expect_refused(train("-steps 2 -shuffle 2"), "flag -shuffle: 2 is out of range [0, 1]");
    expect_refused(train("-steps 2 -beta2 1"), "flag -beta2: 1 is out of range [0, 1)");
}
TEST_F(Cli, RefusesSequenceLongerThanMaxT) {
    expect_refused(run("./train", "-device cpu -init " + dir + "/tiny.bin -T 32 -out " + dir + "/out"), "maxT");
}
TEST_F(Cli, RefusesCheckpointContradictingLn) { expect_refused(train("-ln pre"), "tiny.bin"); }
TEST_F(Cli, RefusesCheckpointContradictingDt) { expect_refused(train("-dt 0.1"), "tiny.bin"); }

TEST_F(Cli, RefusesMissingCheckpoint) {
    expect_refused(run("./train", "-init " + dir + "/nope.bin -out " + dir + "/out"),
                   "flag -init: '" + dir + "/nope.bin' is neither a model size");
    expect_refused(run("./train", "-init l2h2c16t16v96 -out " + dir + "/out"),  // v and t swapped
                   "flag -init: 'l2h2c16t16v96' is neither a model size (d6, d12, d24, d36, d48 or l{L}h{NH}c{C}");
}

TEST_F(Cli, RefusesCheckpointWithWrongMagic) {
    std::string bytes = read_file(dir + "/tiny.bin");
    bytes[0] ^= 1;
    std::ofstream(dir + "/tiny.bin", std::ios::binary) << bytes;
    expect_refused(train(""), "bad magic");
}

TEST_F(Cli, RefusesTruncatedCheckpoint) {
    std::string bytes = read_file(dir + "/tiny.bin");
    std::ofstream(dir + "/tiny.bin", std::ios::binary) << bytes.substr(0, 500);
    expect_refused(train(""), "tiny.bin");
}

TEST_F(Cli, RefusesCheckpointLongerThanHeader) {
    std::ofstream(dir + "/tiny.bin", std::ios::binary | std::ios::app) << "xxxx";
    expect_refused(train(""), "bytes but its header needs");
}

TEST_F(Cli, RefusesMissingShard) {
    std::remove((dir + "/train_000.bin").c_str());
    expect_refused(train(""), "train_");
}

TEST_F(Cli, RefusesShardWithWrongMagic) {
    write_shard(dir + "/train_000.bin", random_tokens(3000, 1), 12345, 1);
    expect_refused(train(""), "train_000.bin");
}

TEST_F(Cli, RefusesTruncatedShard) {
    std::string bytes = read_file(dir + "/train_000.bin");
    std::ofstream(dir + "/train_000.bin", std::ios::binary) << bytes.substr(0, bytes.size() - 10);
    expect_refused(train(""), "train_000.bin");
}

TEST_F(Cli, RefusesTokenIdOutsideVocabulary) {
    std::vector<uint16_t> tokens = random_tokens(3000, 1);
    tokens[1234] = (uint16_t)cfg.V;
    write_shard(dir + "/train_000.bin", tokens, 20240520, 1);
    expect_refused(train(""), "train_000.bin");
}

TEST_F(Cli, RefusesCudaWithoutDevice) {
    // -device cuda alone: on a machine with a GPU the run trains on it (and says so); anywhere
    // else it must be refused, never fall back to the CPU.
    Result r = run("./train", "-device cuda -init " + dir + "/tiny.bin -train_data " + dir + "/train_*.bin -val_data " +
                                  dir + "/val_*.bin -B 2 -T 8 -steps 1 -eval_every 0 -out " + dir + "/out");
    if (r.status == 0 && r.out.find("backend: cuda") != std::string::npos) GTEST_SKIP() << "a CUDA device is present";
    expect_refused(r, "-device");
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
}

TEST_F(Cli, EvalReportsLossOfCheckpoint) {
    // The training-loop fixture's first loss is PyTorch's mean loss of its checkpoint over the
    // first three windows of its first shard: what ./eval must report for three batches.
    const GoldenExpect g = read_golden_expect(loop_fixture_path("loop.expect.bin"));
    ASSERT_EQ(g.micro_steps, 3);
    Result r = run("./eval", "-device cpu -model " + loop_fixture_path("loop.model.bin") + " -val_data " +
                                 loop_fixture_path("loop_train_000.bin") + " -B 2 -T 8 -eval_batches 3 -diag_batches 0 "
                                 "-json " + dir + "/eval.json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NEAR(json_number(read_file(dir + "/eval.json"), "val_loss"), g.step_loss[0], 1e-5);
    char printed[64];
    std::snprintf(printed, sizeof printed, "val loss %.4f", g.step_loss[0]);
    EXPECT_NE(r.out.find(printed), std::string::npos) << "no '" << printed << "' in:\n" << r.out;
}

TEST_F(Cli, TrainingLoopMatchesTheFixture) {
    const GoldenExpect g = read_golden_expect(loop_fixture_path("loop.expect.bin"));
    Result r = run("./train", "-device cpu -threads 2 " + loop_fixture_flags(g) + " -out " + dir + "/out");
    ASSERT_EQ(r.status, 0) << r.err;
    expect_run_matches_loop_fixture(dir + "/out", g);
}

TEST_F(Cli, TrainsWithTwoThreadsAtARealisticSize) {
    // B·T·C = 8·256·128 = 2^18 activations and 0.45M parameters: every threaded loop of the CPU
    // ops takes its parallel branch. The log must not depend on the thread count.
    const std::string args = "-device cpu -init l2h2c128v96t256 -B 8 -T 256 -steps 2 -eval_every 0 -save_every 0 "
                             "-shuffle 0 -train_data " + dir + "/train_*.bin -val_data " + dir + "/val_*.bin -out " + dir;
    Result two = run("./train", "-threads 2 " + args + "/two");
    ASSERT_EQ(two.status, 0) << two.err;
    Result three = run("./train", "-threads 3 " + args + "/three");
    ASSERT_EQ(three.status, 0) << three.err;
    const std::vector<std::string> a = losses(read_file(dir + "/two/log.jsonl"));
    EXPECT_EQ(a.size(), 2u);
    EXPECT_EQ(a, losses(read_file(dir + "/three/log.jsonl")));
    EXPECT_EQ(read_file(dir + "/two/model_00000002.bin"), read_file(dir + "/three/model_00000002.bin"));
}

TEST_F(Cli, EvalRefusesUnknownFlagAndMissingModel) {
    Result r = run("./eval", "-model " + dir + "/tiny.bin -what 3");
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("unknown flag -what"), std::string::npos) << r.err;
    r = run("./eval", "-model " + dir + "/missing.bin");
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("missing.bin"), std::string::npos) << r.err;
}

// -flags_json 1 prints the table of flags as JSON (docs/cli.md §1), and only that (stdout is one
// JSON document), and exits 0; beside other flags, or as -flags_json 0, it is refused as bad input.
TEST_F(Cli, FlagsJsonPrintsTheTableAndExits) {
    for (const std::string program : {"./train", "./eval"}) {
        const Result r = run(program, "-flags_json 1");
        EXPECT_EQ(r.status, 0) << program << ": " << r.err;
        EXPECT_EQ(r.err, "") << program;
        Json table;
        ASSERT_NO_THROW(table = read_json(r.out, program)) << r.out;
        EXPECT_EQ("./" + table.get("program")->text(), program);
        EXPECT_GT(table.get("flags")->items().size(), 10u) << r.out;
    }
    expect_refused(train("-flags_json 1"), "-flags_json");
    expect_refused(run("./train", "-flags_json 0 -out " + dir + "/out"), "-flags_json");
}

}  // namespace
