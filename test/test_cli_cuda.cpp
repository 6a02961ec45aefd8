// ./train and ./eval on the CUDA backend (-device cuda), as a user runs them, against the same
// programs on the CPU reference: the training loop around the kernels (gradient accumulation,
// clipping, the schedule, evaluation, the statistics records, checkpoints and bit-exact resume)
// on tiny shards and a tiny model made here.
//
// The CUDA programs are CUDA_BIN_DIR/train and CUDA_BIN_DIR/eval (and the GPU benchmark): by
// default the real ./train, ./eval and build/bench_gpu, whose tests skip themselves when they
// find no device; `make test` also
// runs this binary with CUDA_BIN_DIR=build/emu, programs whose CUDA code runs on the CPU
// through the test/simt layer, so the loop is checked on machines without a GPU too. The CPU
// runs always use ./train and ./eval. Run from the repository root after `make`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loop_fixture.h"
#include "test_files.h"

namespace {

struct Result {
    int status;
    std::string out, err;
};

class CliCuda : public ::testing::Test {
protected:
    std::string dir, cuda_bin;

    void SetUp() override {
        const char* bin = std::getenv("CUDA_BIN_DIR");
        cuda_bin = bin ? bin : ".";
        dir = fresh_folder("cli_cuda_");
        write_random_shard(dir + "train_000.bin", 3000, 96, 1);
        write_random_shard(dir + "val_000.bin", 500, 96, 2);
    }

    Result run(const std::string& command) const {
        const std::string out = dir + "stdout", err = dir + "stderr";
        const int raw = std::system((command + " > " + out + " 2> " + err).c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(out), read_file(err)};
    }

    // ./train on `device` (the CUDA programs for "cuda"): a fresh tiny Peri-LN model, two
    // micro-steps per step, evaluation every 3 steps, statistics every 2, checkpoints every 3.
    std::string train_command(const std::string& device, const std::string& out, const std::string& extra) const {
        const std::string program = device == "cuda" ? cuda_bin + "/train" : "./train";
        return program + " -device " + device + " -threads 1 -init l2h2c16v96t16 -ln peri -dt 0.5 -B 2 -T 8 "
               "-total_batch 32 -steps 6 -warmup 2 -lr 3e-3 -save_every 3 -stats_every 2 -eval_every 3 "
               "-eval_batches 2 -train_data '" + dir + "train_*.bin' -val_data '" + dir + "val_*.bin' -out " + dir +
               out + " " + extra;
    }
    Result train(const std::string& device, const std::string& out, const std::string& extra = "") const {
        return run(train_command(device, out, extra));
    }

    // The step records of the run in `out`, each cut before its timing ("ms" on): two runs that
    // computed alike have the same, to the last digit.
    std::vector<std::string> step_records(const std::string& out) const {
        std::vector<std::string> records = log_lines(read_file(dir + out + "/log.jsonl"), "\"tok_s\"");
        for (std::string& r : records) r = r.substr(0, r.find(", \"ms\""));
        return records;
    }
    // Removes the last checkpoint pair (step 6) of the run in `out`: -resume 1 then trains from step 3.
    void remove_last_checkpoint(const std::string& out) const {
        std::remove((dir + out + "/model_00000006.bin").c_str());
        std::remove((dir + out + "/state_00000006.bin").c_str());
    }

    // Runs `command` (a CUDA program) into *r. False when the real ./train finds no device (a
    // machine without a GPU: the test skips); a failure on any other error, and on "no device"
    // from programs named by CUDA_BIN_DIR (the emulated ones always have one).
    bool cuda_run(const std::string& command, Result* r) const {
        *r = run(command);
        if (!std::getenv("CUDA_BIN_DIR") && r->status == 2 && r->err.find("no CUDA device") != std::string::npos)
            return false;
        EXPECT_EQ(r->status, 0) << r->err;
        return r->status == 0;
    }
};

#define CUDA_COMMAND_OR_SKIP(command, r)                                         \
    do {                                                                         \
        if (!cuda_run(command, r)) {                                             \
            if (!HasFailure()) GTEST_SKIP() << "no CUDA device: " << (r)->err;   \
            return;                                                              \
        }                                                                        \
    } while (0)

// train("cuda", out, extra) into *r, or skip (see cuda_run).
#define CUDA_RUN_OR_SKIP(out, extra, r) CUDA_COMMAND_OR_SKIP(train_command("cuda", out, extra), r)

// With every product fused (-fused all) and with every product plain (-fused none).
TEST_F(CliCuda, Fp32TrainsLikeTheCpuStepForStep) {
    Result cpu = train("cpu", "cpu");
    ASSERT_EQ(cpu.status, 0) << cpu.err;
    const std::string b = read_file(dir + "cpu/log.jsonl");
    for (const std::string fused : {"all", "none"}) {
        SCOPED_TRACE("-fused " + fused);
        Result cuda;
        CUDA_RUN_OR_SKIP("cuda_" + fused, "-precision fp32 -fused " + fused, &cuda);
        EXPECT_NE(cuda.out.find("backend: cuda"), std::string::npos) << cuda.out;
        const std::string a = read_file(dir + "cuda_" + fused + "/log.jsonl");
        for (const char* key : {"loss", "grad_norm", "lr"}) expect_log_close(a, b, "\"tok_s\"", key, 1e-5);
        expect_log_close(a, b, "\"val_loss\"", "val_loss", 1e-5);
        for (const char* key : {"mean_abs", "entry_var", "data_var", "grad_norm", "mean_abs_half", "grad_norm_half"})
            expect_log_close(a, b, "\"stats\"", key, 1e-5);
        EXPECT_EQ(log_lines(a, "\"tok_s\"").size(), 6u);
    }
}

TEST_F(CliCuda, Fp32TrainingLoopMatchesTheFixture) {
    // The PyTorch float64 run of test/golden/loop.* (loop_fixture.h), on the CUDA program in fp32.
    const GoldenExpect g = read_golden_expect(loop_fixture_path("loop.expect.bin"));
    Result r;
    CUDA_COMMAND_OR_SKIP(cuda_bin + "/train -device cuda -precision fp32 " + loop_fixture_flags(g) + " -out " + dir + "loop",
                         &r);
    EXPECT_NE(r.out.find("backend: cuda"), std::string::npos) << r.out;
    expect_run_matches_loop_fixture(dir + "loop", g);
}

TEST_F(CliCuda, Bf16TrainsLikeTheCpuWithinBf16Tolerance) {
    Result cpu = train("cpu", "cpu");
    ASSERT_EQ(cpu.status, 0) << cpu.err;
    const std::string b = read_file(dir + "cpu/log.jsonl");
    for (const std::string fused : {"all", "none"}) {
        SCOPED_TRACE("-fused " + fused);
        Result cuda;
        CUDA_RUN_OR_SKIP("cuda_" + fused, "-precision bf16 -fused " + fused, &cuda);
        const std::string a = read_file(dir + "cuda_" + fused + "/log.jsonl");
        expect_log_close(a, b, "\"tok_s\"", "loss", 1e-2);
        expect_log_close(a, b, "\"val_loss\"", "val_loss", 1e-2);
    }
}

// The diagnostics of the stats records (docs/train.md §4): the RMS of the residual stream, the
// scale-free gradients, the attention-logit maximum, parameter norm, W_fcproj gradient norm and
// MLP hidden RMS per block, and the output-logit statistics, computed by the CUDA backend's own
// kernels and reductions, against the CPU reference's, in
// fp32 and in bf16. attn_logit_max is compared in fp32 only: this tiny model's attention logits
// are about 0.02, sums of products that cancel, and rounding q and k to bf16 moves them by
// several percent.
TEST_F(CliCuda, DiagnosticsInStatsRecordsMatchTheCpu) {
    Result fp32, bf16;
    CUDA_RUN_OR_SKIP("cuda_fp32", "-precision fp32", &fp32);
    CUDA_RUN_OR_SKIP("cuda_bf16", "-precision bf16", &bf16);
    Result cpu = train("cpu", "cpu");
    ASSERT_EQ(cpu.status, 0) << cpu.err;
    const std::string cpu_log = read_file(dir + "cpu/log.jsonl");
    const std::string fp32_log = read_file(dir + "cuda_fp32/log.jsonl"), bf16_log = read_file(dir + "cuda_bf16/log.jsonl");
    for (const char* key : {"rms", "rms_half", "grad_norm_scaled", "grad_norm_scaled_half", "attn_logit_max",
                            "logit_max", "log_z_mean", "param_norm", "fcproj_grad_norm", "mlp_hidden_rms"})
        expect_log_close(fp32_log, cpu_log, "\"stats\"", key, 1e-5);
    for (const char* key : {"rms_half", "grad_norm_scaled_half", "logit_max", "log_z_mean", "param_norm",
                            "fcproj_grad_norm", "mlp_hidden_rms"})
        expect_log_close(bf16_log, cpu_log, "\"stats\"", key, 2e-2);
}

// The start-up says which kinds of product run fused and why, and config.json records them.
// -fused auto (the default) times them; -fused none runs them all plain.
TEST_F(CliCuda, StartUpSaysWhichProductsRunFused) {
    Result r;
    CUDA_RUN_OR_SKIP("auto", "", &r);
    const size_t at = r.out.find("fused products: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("(-fused auto, timed at start-up: bias "), std::string::npos) << line;
    for (const char* kind : {"bias + GELU ", "GELU' ", "bias gradient "})  // bf16: all four kinds timed
        EXPECT_NE(line.find(kind), std::string::npos) << kind << " not timed: " << line;
    const std::string config = read_file(dir + "auto/config.json");
    EXPECT_NE(config.find("\"fused_products\": ["), std::string::npos) << config;

    CUDA_RUN_OR_SKIP("none", "-fused none", &r);
    EXPECT_NE(r.out.find("fused products: none (-fused none)\n"), std::string::npos) << r.out;
    EXPECT_NE(read_file(dir + "none/config.json").find("\"fused_products\": []"), std::string::npos);
    // -fused may change on resume: given, it is used instead of the run's choice.
    CUDA_RUN_OR_SKIP("none", "-resume 1 -fused all", &r);
    EXPECT_NE(r.out.find("fused products: bias, bias + GELU, GELU', bias gradient (-fused all)\n"), std::string::npos)
        << r.out;
}

// A resumed run continues bit for bit, keeping the kinds of product its run fused (config.json)
// rather than timing them again: after -fused auto, and after -fused none with the resume given
// no -fused (in bf16 a fused product rounds otherwise: the bias added before the product's
// rounding, not after).
TEST_F(CliCuda, ResumeContinuesBitForBit) {
    for (const std::string fused : {"auto", "none"}) {
        SCOPED_TRACE("-fused " + fused);
        Result r;
        CUDA_RUN_OR_SKIP(fused, "-fused " + fused, &r);
        const std::vector<std::string> uninterrupted = step_records(fused);
        remove_last_checkpoint(fused);
        CUDA_RUN_OR_SKIP(fused, "-resume 1", &r);
        EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("(kept from " + dir + fused + "/config.json)"), std::string::npos) << r.out;
        if (fused == "none") EXPECT_NE(r.out.find("fused products: none (kept"), std::string::npos) << r.out;
        EXPECT_EQ(step_records(fused), uninterrupted);  // the same loss and gradient norm, to the last digit
    }
}

// A CUDA run whose config.json predates "fused_products" fused every kind cuBLASLt took: resumed
// without -fused it keeps doing so, bit for bit.
TEST_F(CliCuda, ResumeOfARunWithoutFusedProductsFusesEveryKind) {
    Result r;
    CUDA_RUN_OR_SKIP("cuda", "-fused all", &r);
    const std::vector<std::string> uninterrupted = step_records("cuda");
    remove_last_checkpoint("cuda");
    const std::string path = dir + "cuda/config.json";
    std::string config = read_file(path);
    const size_t at = config.find("  \"fused_products\": [");
    ASSERT_NE(at, std::string::npos) << config;
    config.erase(at, config.find('\n', at) + 1 - at);
    std::ofstream(path) << config;
    CUDA_RUN_OR_SKIP("cuda", "-resume 1", &r);
    EXPECT_NE(r.out.find("fused products: bias, bias + GELU, GELU', bias gradient (kept from " + path +
                         ", which predates -fused: every kind)"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(step_records("cuda"), uninterrupted);
}

// A config.json whose "fused_products" names no kind of product is refused on resume, in one line
// naming the file.
TEST_F(CliCuda, ResumeRefusesAnUnknownFusedProduct) {
    Result r;
    CUDA_RUN_OR_SKIP("cuda", "-fused all", &r);  // "fused_products" not empty, so a name can be added before
    remove_last_checkpoint("cuda");
    const std::string path = dir + "cuda/config.json";
    std::string config = read_file(path);
    const size_t at = config.find("\"fused_products\": [");
    ASSERT_NE(at, std::string::npos) << config;
    config.insert(at + std::string("\"fused_products\": [").size(), "\"fast\", ");
    std::ofstream(path) << config;
    r = train("cuda", "cuda", "-resume 1");
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(path + ": \"fused_products\" lists \"fast\", not a kind of product"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
}

TEST_F(CliCuda, CheckpointReadsTheSameOnBothBackends) {
    Result r;
    CUDA_RUN_OR_SKIP("cuda", "-precision fp32", &r);
    const std::string model = dir + "cuda/model_00000006.bin";
    const double logged = json_number(log_lines(read_file(dir + "cuda/log.jsonl"), "\"val_loss\"").back(), "val_loss");
    const std::string eval_args = " -threads 1 -model " + model + " -val_data '" + dir +
                                  "val_*.bin' -B 2 -T 8 -eval_batches 2 -diag_batches 0 -json ";
    Result on_cuda = run(cuda_bin + "/eval -device cuda -precision fp32" + eval_args + dir + "cuda.json");
    ASSERT_EQ(on_cuda.status, 0) << on_cuda.err;
    Result on_cpu = run("./eval -device cpu" + eval_args + dir + "cpu.json");
    ASSERT_EQ(on_cpu.status, 0) << on_cpu.err;
    const double a = json_number(read_file(dir + "cuda.json"), "val_loss");
    const double b = json_number(read_file(dir + "cpu.json"), "val_loss");
    EXPECT_NEAR(a, logged, 1e-5 * logged);
    EXPECT_NEAR(b, logged, 1e-5 * logged);
}

TEST_F(CliCuda, BenchmarkMeasuresAndSummarises) {
    // The benchmark sits in build/ natively, beside the emulated programs otherwise. Without -B
    // it takes the largest B up to 64 whose memory plan fits the device.
    const bool emulated = std::getenv("CUDA_BIN_DIR") != nullptr;
    const std::string bench = emulated ? cuda_bin + "/bench_gpu" : "build/bench_gpu";
    if (!emulated && !exists(bench)) GTEST_SKIP() << bench << " is not built (no CUDA toolkit)";
    Result r = run(bench + " -init l2h2c16v96t16 -T 8 -steps 3 -warmup 1");
    ASSERT_EQ(r.status, 0) << r.err;
    if (!emulated && r.out.find("needs a CUDA GPU") != std::string::npos) GTEST_SKIP() << r.out;
    for (const char* line : {"bench: ", "l2h2c16v96t16", "3 steps after 1 warm-up", "ms/step", "tok/s", "TFLOP/s",
                             "MFU", "memory", "bench-summary: tok_s="})
        EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing from:\n" << r.out;
    EXPECT_GT(std::stod(r.out.substr(r.out.find("tok_s=") + 6)), 0.0) << r.out;
    // The first loss, of fresh weights on random tokens, is about ln V (scripts/gpu_check.sh
    // checks it on a GPU within 0.5).
    const size_t first = r.out.find("first_loss="), ln_v = r.out.find("ln_V=");
    ASSERT_NE(first, std::string::npos) << r.out;
    ASSERT_NE(ln_v, std::string::npos) << r.out;
    EXPECT_NEAR(std::stod(r.out.substr(ln_v + 5)), std::log(96.0), 1e-3) << r.out;
    EXPECT_NEAR(std::stod(r.out.substr(first + 11)), std::log(96.0), 0.5) << r.out;
}

// The GPU benchmark's path: build/ natively, beside the emulated programs otherwise; empty when
// it is not built.
std::string bench_program(const std::string& cuda_bin) {
    const std::string bench = std::getenv("CUDA_BIN_DIR") ? cuda_bin + "/bench_gpu" : "build/bench_gpu";
    return exists(bench) ? bench : "";
}

// -plan needs no GPU: it counts what the backend would allocate. The categories add up to the
// last line, and the numbers are the model's: d12's parameters and optimiser state are
// 124,475,904 parameters × (4 + 4 + 4 + 4 + 2) bytes in bf16.
TEST_F(CliCuda, PlanPrintsDeviceMemoryByCategoryWithoutAGpu) {
    const std::string bench = bench_program(cuda_bin);
    if (bench.empty()) GTEST_SKIP() << "build/bench_gpu is not built (no CUDA toolkit)";
    Result r = run(bench + " -plan -init d12 -B 8 -T 256 -precision bf16 -fit 139");
    ASSERT_EQ(r.status, 0) << r.err;
    double total = 0;
    for (const char* category : {"parameters and optimiser state", "activations", "attention statistics", "logits",
                                 "scratch"}) {
        const size_t at = r.out.find(category);
        ASSERT_NE(at, std::string::npos) << category << " missing from:\n" << r.out;
        total += std::stod(r.out.substr(at + std::string(category).size()));
    }
    EXPECT_NE(r.out.find(std::to_string(18ull * 124475904ull) + " bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("largest B that fits 139 GiB, 1 GiB of it kept free as ./train keeps it: "), std::string::npos) << r.out;
    // What the benchmark itself holds: the backend, then the per-op timing's model (never both),
    // and the B it takes from 64 down on a device with 139 GiB free.
    EXPECT_NE(r.out.find("bench_gpu at B = 8 holds at most "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bench_gpu's default B with 139 GiB free: 64 "), std::string::npos) << r.out;
    const size_t last = r.out.rfind("planned device memory: ");
    ASSERT_NE(last, std::string::npos) << r.out;
    EXPECT_EQ(r.out.find('\n', last), r.out.size() - 1) << "not the last line:\n" << r.out;
    EXPECT_NEAR(std::stod(r.out.substr(last + 23)), total / (1ull << 30), 0.01) << r.out;
    Result bad = run(bench + " -plan -init d12 -T 4096");
    EXPECT_EQ(bad.status, 2) << bad.out;
}

// The modelled milliseconds of op `op` in a -model table, or -1.
double modelled_ms(const std::string& table, const std::string& op) {
    std::istringstream lines(table);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream fields(line);
        std::vector<std::string> words;
        for (std::string w; fields >> w;) words.push_back(w);
        // "  adamw  1  3.734  1.9  0.972  3.6%  0.972  bytes/FLOPs": ms, then share, roofline, bound
        if (words.size() >= 5 && line.rfind("  " + op + " ", 0) == 0) return std::stod(words[words.size() - 4]);
    }
    return -1;
}

// -model names the card it models: an H200 unless -card names another (on the emulator, a
// device the cost model does not know, saying so on stderr; natively without a GPU, no device).
// An H100's memory is slower (3.35 TB/s against 4.8): AdamW, which streams its bytes, takes
// 4.8/3.35 times as long there; a large product, bound by the same tensor peak, as long. An
// unknown card, or -card without -model, is refused.
TEST_F(CliCuda, ModelNamesTheCardItModels) {
    const std::string bench = bench_program(cuda_bin);
    if (bench.empty()) GTEST_SKIP() << "build/bench_gpu is not built (no CUDA toolkit)";
    const std::string args = " -model -init d12 -B 4 -T 256";
    const Result h200 = run(bench + args);
    ASSERT_EQ(h200.status, 0) << h200.err;
    EXPECT_EQ(h200.out.rfind("bench -model: H200 (docs/cost_model.md), d12 ", 0), 0u) << h200.out;
    EXPECT_NE(h200.out.find("of 989 TFLOP/s dense bf16"), std::string::npos) << h200.out;
    if (std::getenv("CUDA_BIN_DIR")) {
        EXPECT_NE(h200.err.find("no figures for this device, SIMT emulator (CPU)"), std::string::npos) << h200.err;
    }
    const Result h100 = run(bench + args + " -card H100");
    ASSERT_EQ(h100.status, 0) << h100.err;
    EXPECT_EQ(h100.out.rfind("bench -model: H100 80GB HBM3 (docs/cost_model.md), d12 ", 0), 0u) << h100.out;
    EXPECT_EQ(h100.err, "");
    EXPECT_EQ(run(bench + args + " -card 'NVIDIA H100 80GB HBM3'").out, h100.out);
    const double adamw_h200 = modelled_ms(h200.out, "adamw"), adamw_h100 = modelled_ms(h100.out, "adamw");
    ASSERT_GT(adamw_h200, 0) << h200.out;
    EXPECT_NEAR(adamw_h100 / adamw_h200, 4.8 / 3.35, 0.01) << h100.out;
    const double head_h200 = modelled_ms(h200.out, "lm head matmul fwd");
    ASSERT_GT(head_h200, 0) << h200.out;
    EXPECT_EQ(modelled_ms(h100.out, "lm head matmul fwd"), head_h200) << h100.out;
    const Result unknown = run(bench + args + " -card A100");
    EXPECT_EQ(unknown.status, 2) << unknown.out;
    EXPECT_NE(unknown.err.find("flag -card: no figures for 'A100' (the cost model knows H100 80GB HBM3 (H100), H200)"),
              std::string::npos)
        << unknown.err;
    const Result measured = run(bench + " -card H100 -init l2h2c16v96t16 -T 8");
    EXPECT_EQ(measured.status, 2) << measured.out;
    EXPECT_NE(measured.err.find("flag -card: only with -model"), std::string::npos) << measured.err;
}

// bench_gpu holds one model at a time: it releases the backend it measured the step with before
// the per-op timing builds a model of its own. On an emulated device (SIMT_DEVICE_MEMORY) with
// room for one and a half backends it runs; with room for half of one it runs out of memory, so
// the limit is real. Emulated only: a GPU's memory cannot be set.
TEST_F(CliCuda, BenchmarkHoldsOneModelAtATime) {
    const std::string bench = bench_program(cuda_bin);
    if (!std::getenv("CUDA_BIN_DIR") || bench.empty()) GTEST_SKIP() << "needs the emulated benchmark";
    const std::string args = " -init l2h2c16v96t16 -B 2 -T 8";
    const Result plan = run(bench + " -plan" + args);
    ASSERT_EQ(plan.status, 0) << plan.err;
    double backend = 0;  // bytes
    for (const char* category : {"parameters and optimiser state", "activations", "attention statistics", "logits",
                                 "scratch"}) {
        const size_t at = plan.out.find(category);
        ASSERT_NE(at, std::string::npos) << plan.out;
        backend += std::stod(plan.out.substr(at + std::string(category).size()));
    }
    const auto on_device = [&](double bytes) {
        return run("SIMT_DEVICE_MEMORY=" + std::to_string((long long)bytes) + " " + bench + args + " -steps 1 -warmup 1");
    };
    const Result fits = on_device(1.5 * backend);
    EXPECT_EQ(fits.status, 0) << fits.err;
    EXPECT_NE(fits.out.find("per op"), std::string::npos) << fits.out;
    const Result too_small = on_device(0.5 * backend);
    EXPECT_NE(too_small.status, 0) << too_small.out;
    EXPECT_NE(too_small.err.find("out of memory"), std::string::npos) << too_small.err;
}

// A -B whose plan exceeds the free device memory is refused in one line, before anything is
// allocated (d48 at B = 64, T = 1024 plans far beyond the emulator's 16 GiB, or an H200's 139).
TEST_F(CliCuda, GivenBatchThatDoesNotFitTheDeviceIsRefused) {
    Result r = run(cuda_bin + "/train -device cuda -init d48 -B 64 -T 1024 -steps 1 -train_data '" + dir +
                   "train_*.bin' -eval_every 0 -out " + dir + "big");
    if (!std::getenv("CUDA_BIN_DIR") && r.err.find("no CUDA device") != std::string::npos) GTEST_SKIP() << r.err;
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("flag -B: B=64 needs "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
}

// -cpu_ops chooses among the CPU's op sets: on CUDA anything but the default is refused in one
// line naming the flag, before the run folder is made.
TEST_F(CliCuda, CpuOpsRefusedOnCuda) {
    Result r = train("cuda", "cpu_ops", "-cpu_ops reference");
    if (!std::getenv("CUDA_BIN_DIR") && r.err.find("no CUDA device") != std::string::npos) GTEST_SKIP() << r.err;
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("flag -cpu_ops:"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "cpu_ops")) << "no run folder";
}

// -fused chooses among the CUDA backend's products: all (or none) given on the CPU is refused in
// one line naming the flag, before the run folder is made (auto is accepted there: test_run_dir).
TEST_F(CliCuda, FusedRefusedOnTheCpu) {
    const Result r = train("cpu", "fused_cpu", "-fused all");
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("flag -fused:"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "fused_cpu")) << "no run folder";
}

}  // namespace
