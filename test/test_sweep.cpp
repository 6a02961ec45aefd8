// sweep.py end to end, as a user runs it: a tiny grid of the real ./train and ./eval on a tiny
// model and tiny shards made here (seconds): tables and per-run files, resuming without redoing
// recorded runs, run outcomes recorded and counted, other settings refused, a preset's docs
// published only for its own grid, every preset end to end on a tiny grid with its experiment
// report, the published tables regenerated from docs/ alone. Also plot.py on two ./train runs,
// and ./eval's outputs (JSON, pairs, samples) and its refusals. Run from the repository root
// after `make` (as `make test` does); needs python3 with numpy, scipy and pandas (or
// /usr/bin/python3 with them). The statistics and the reports on hand-made runs are checked by
// test_experiments (test/py/).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/rng.h"
#include "test_files.h"

namespace {

long long mtime_ns(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return -1;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
    return n;
}

// The cells of each results.md table row that starts with "| Pre-LN", "| Peri-LN" or "| Post-LN":
// placement, Δt, wd, lr, L, runs, ok, collapsed, diverged, nonfinite, spikes, ...
std::vector<std::vector<std::string>> config_rows(const std::string& md) {
    std::vector<std::vector<std::string>> rows;
    for (const std::string& line : lines(md)) {
        if (line.rfind("| Pre-LN |", 0) != 0 && line.rfind("| Peri-LN |", 0) != 0 && line.rfind("| Post-LN |", 0) != 0)
            continue;
        std::vector<std::string> cells;
        std::stringstream in(line.substr(1));
        std::string cell;
        while (std::getline(in, cell, '|')) {
            const size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
            cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
        }
        rows.push_back(cells);
    }
    return rows;
}

struct Result {
    int status;
    std::string out;
};

class Sweep : public ::testing::Test {
protected:
    std::string dir;

    void SetUp() override {
        char tmpl[] = "/tmp/gpt2sweep.XXXXXX";
        dir = mkdtemp(tmpl);
        write_random_shard(dir + "/train_000.bin", 3000, 96, 1);
        write_random_shard(dir + "/val_000.bin", 600, 96, 2);
    }
    void TearDown() override { std::system(("rm -rf " + dir).c_str()); }

    // python3 sweep.py on the tiny model (L=2, NH=2, C=16, V=96) and data, plus `extra`.
    Result sweep(const std::string& out, const std::string& extra, const std::string& env = "") const {
        const std::string log = dir + "/sweep.out";
        const char* bin_dir = std::getenv("GPT2_BIN_DIR");  // where ./train and ./eval are (default .)
        const std::string bin = bin_dir ? bin_dir : ".";
        const std::string cmd = env + "python3 sweep.py --train-bin " + bin + "/train --eval-bin " + bin + "/eval "
                                "--init l2h2c16v96t16 --B 2 --T 8 --eval-B 2 "
                                "--eval-batches 2 --eval-every 3 --save-every 3 --stats-every 2 --threads 1 --jobs 2 "
                                "--train-data '" + dir + "/train_*.bin' --val-data '" + dir + "/val_*.bin' --out " +
                                dir + "/" + out + " " + extra + " > " + log + " 2>&1";
        const int raw = std::system(cmd.c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(log)};
    }
};

TEST_F(Sweep, RunsGridWritesTablesAndResumes) {
    const std::string grid = "--ln pre,peri --dt 1,0.5 --seeds 1-2 --steps 6 --warmup 2 --lr 1e-3";
    Result r = sweep("s", grid);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("8 runs (0 recorded, 8 to do), 2 at once"), std::string::npos) << r.out;

    // One results.csv row per run, every one finished (ok or collapsed: on random tokens either
    // may happen) and evaluated, with the baselines.
    const std::string csv = read_file(dir + "/s/results.csv");
    const std::vector<std::string> rows = lines(csv);
    ASSERT_EQ(rows.size(), 9u) << csv;
    EXPECT_EQ(rows[0].rfind("run,ln,dt,wd,lr,depth,precision,seed,outcome,stopped_step,reason,spikes", 0), 0u) << rows[0];
    EXPECT_EQ(count(csv, ",ok,") + count(csv, ",collapsed,"), 8u) << csv;
    // layers.csv: L + 1 = 3 layers per run.
    EXPECT_EQ(lines(read_file(dir + "/s/layers.csv")).size(), 1u + 8 * 3);
    // results.md: the baselines, one line per configuration with its 2 runs counted by outcome.
    const std::string md = read_file(dir + "/s/results.md");
    EXPECT_NE(md.find("unigram_ce "), std::string::npos) << md;
    EXPECT_NE(md.find("| Peri-LN | 0.5 | 0.1 | 0.001 | 2 | 2 |"), std::string::npos) << md;
    const auto table = config_rows(md);
    ASSERT_EQ(table.size(), 4u) << md;
    for (const auto& row : table) {
        EXPECT_EQ(row[5], "2") << md;
        EXPECT_EQ(std::stoi(row[6]) + std::stoi(row[7]), 2) << "ok + collapsed: " << md;
        EXPECT_EQ(row[8] + row[9], "00") << "none stopped: " << md;
    }

    const std::string run = dir + "/s/runs/peri_dt0.5_wd0.1_lr0.001_s2";
    EXPECT_TRUE(exists(run + "/model_00000006.bin"));
    EXPECT_TRUE(exists(run + "/state_00000006.bin")) << "the final pair is kept (./eval -run needs it)";
    EXPECT_FALSE(exists(run + "/model_00000003.bin")) << "intermediate checkpoint kept";
    EXPECT_FALSE(exists(run + "/state_00000003.bin")) << "intermediate optimiser state kept";
    EXPECT_TRUE(exists(run + "/config.json")) << "the run's config.json is kept";
    const std::string ev = read_file(run + "/eval.json");
    for (const char* key : {"\"val_loss\"", "\"unigram_ce\"", "\"bigram_ce\"", "\"rouge\"", "\"mean_abs\"",
                            "\"sensitivity\"", "\"w2_bound\""})
        EXPECT_NE(ev.find(key), std::string::npos) << key;
    EXPECT_NE(ev.find("\"placement\": \"peri\""), std::string::npos);
    EXPECT_NE(read_file(run + "/log.jsonl").find("\"event\": \"stats\""), std::string::npos);
    // Figures, or the one line saying why not.
    EXPECT_TRUE(exists(dir + "/s/hidden_states.png") || r.out.find("figures: none (matplotlib") != std::string::npos)
        << r.out;

    // Again: nothing is redone.
    const long long before = mtime_ns(run + "/result.json");
    r = sweep("s", grid + " --no-figures");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("8 runs (8 recorded, 0 to do)"), std::string::npos) << r.out;
    EXPECT_EQ(mtime_ns(run + "/result.json"), before);

    // A run whose record is lost is redone, alone (its final model is there: only evaluated).
    std::remove((dir + "/s/runs/pre_dt1_wd0.1_lr0.001_s1/result.json").c_str());
    r = sweep("s", grid + " --no-figures");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("(7 recorded, 1 to do)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("pre_dt1_wd0.1_lr0.001_s1: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", val loss "), std::string::npos) << r.out;
    EXPECT_EQ(mtime_ns(run + "/result.json"), before);

    // Other training settings into the same directory are refused; another learning rate is
    // another point of the grid.
    r = sweep("s", "--ln pre --dt 1 --seeds 1 --steps 7 --warmup 2 --lr 1e-3");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("other settings (steps: 6 → 7)"), std::string::npos) << r.out;
    r = sweep("s", "--ln pre --dt 1 --seeds 1 --steps 6 --warmup 2 --lr 2e-3 --no-figures");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("1 runs (0 recorded, 1 to do)"), std::string::npos) << r.out;
    EXPECT_TRUE(exists(dir + "/s/runs/pre_dt1_wd0.1_lr0.002_s1/result.json"));
}

TEST_F(Sweep, GpusRunsOneRunPerGpuAtOnce) {
    // A stand-in for ./train that records the GPU it was given, then trains on the CPU.
    const std::string train = dir + "/train_on_gpu";
    std::ofstream(train) << "#!/bin/sh\necho \"gpu=$CUDA_VISIBLE_DEVICES\" >&2\nexec " << realpath("train", nullptr)
                         << " \"$@\"\n";
    chmod(train.c_str(), 0755);
    // And a machine with two GPUs, as nvidia-smi -L lists them.
    std::ofstream(dir + "/nvidia-smi") << "#!/bin/sh\necho 'GPU 0: A (UUID: GPU-0)'\necho 'GPU 1: B (UUID: GPU-1)'\n";
    chmod((dir + "/nvidia-smi").c_str(), 0755);
    Result r = sweep("g", "--ln pre,peri --dt 1,0.5 --seeds 1 --steps 3 --warmup 1 --lr 1e-3 --no-figures --gpus 2 "
                          "--train-bin " + train, "PATH=" + dir + ":$PATH ");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("4 runs (0 recorded, 4 to do), 2 at once one per GPU"), std::string::npos) << r.out;
    int on[2] = {0, 0};
    for (const char* name : {"pre_dt1", "pre_dt0.5", "peri_dt1", "peri_dt0.5"}) {
        const std::string log = read_file(dir + "/g/runs/" + name + "_wd0.1_lr0.001_s1/train.log");
        const bool zero = log.find("gpu=0\n") != std::string::npos, one = log.find("gpu=1\n") != std::string::npos;
        EXPECT_TRUE(zero != one) << name << ": " << log;
        on[0] += zero;
        on[1] += one;
    }
    EXPECT_GT(on[0], 0);
    EXPECT_GT(on[1], 0);
}

TEST_F(Sweep, SlurmScriptRunsOneTaskPerRunAndSkipsFinishedOnes) {
    const std::string grid = "--ln pre,peri --dt 1 --seeds 1 --steps 3 --warmup 1 --lr 1e-3 --no-figures";
    const std::string script = dir + "/sweep.sbatch";
    Result r = sweep("s", grid + " --slurm " + script);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("2 array tasks (0 recorded, 2 to do)"), std::string::npos) << r.out;
    const std::string text = read_file(script);
    EXPECT_EQ(text.rfind("#!/bin/bash\n", 0), 0u);
    EXPECT_NE(text.find("#SBATCH --array=0-1\n"), std::string::npos) << text;
    EXPECT_FALSE(exists(dir + "/s/runs/pre_dt1_wd0.1_lr0.001_s1/result.json")) << "--slurm ran something";
    // Each array task as Slurm would start it: its own run, trained and evaluated.
    auto task = [&](int id) {
        const std::string log = dir + "/task.out";
        const int raw = std::system(("SLURM_ARRAY_TASK_ID=" + std::to_string(id) + " bash " + script + " > " + log +
                                     " 2>&1").c_str());
        return Result{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(log)};
    };
    for (int id : {0, 1}) {
        r = task(id);
        ASSERT_EQ(r.status, 0) << r.out;
    }
    for (const char* name : {"pre", "peri"})
        EXPECT_TRUE(exists(dir + "/s/runs/" + std::string(name) + "_dt1_wd0.1_lr0.001_s1/result.json")) << name;
    // A finished run's task does nothing; a lost record is redone by its task alone.
    const long long before = mtime_ns(dir + "/s/runs/peri_dt1_wd0.1_lr0.001_s1/result.json");
    r = task(1);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("peri_dt1_wd0.1_lr0.001_s1: recorded, skipped"), std::string::npos) << r.out;
    EXPECT_EQ(mtime_ns(dir + "/s/runs/peri_dt1_wd0.1_lr0.001_s1/result.json"), before);
    // The tables of the whole array afterwards.
    r = sweep("s", "--report " + dir + "/s --no-figures");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(config_rows(read_file(dir + "/s/results.md")).size(), 2u) << r.out;
}

TEST_F(Sweep, RecordsRunsThatStopAndDoesNotRedoThem) {
    const std::string grid = "--ln pre,post --dt 1 --wd 0 --seeds 1-2 --steps 40 --warmup 0 --clip 0 --lr 3 "
                             "--outcome-window 5 --no-figures";
    Result r = sweep("d", grid);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(count(r.out, ": diverged at step ") + count(r.out, ": nonfinite at step "), 4u) << r.out;
    const std::string csv = read_file(dir + "/d/results.csv");
    EXPECT_EQ(count(csv, ",diverged,") + count(csv, ",nonfinite,"), 4u) << csv;
    const std::string md = read_file(dir + "/d/results.md");
    const auto table = config_rows(md);
    ASSERT_EQ(table.size(), 2u) << md;
    for (const auto& row : table) {
        EXPECT_EQ(row[5] + row[6] + row[7], "200") << "2 runs, none ok or collapsed: " << md;
        EXPECT_EQ(std::stoi(row[8]) + std::stoi(row[9]), 2) << md;
    }
    const std::string result = read_file(dir + "/d/runs/pre_dt1_wd0_lr3_s1/result.json");
    EXPECT_TRUE(result.find("\"outcome\": \"diverged\"") != std::string::npos ||
                result.find("\"outcome\": \"nonfinite\"") != std::string::npos) << result;
    EXPECT_NE(result.find("\"stopped_step\": "), std::string::npos) << result;
    EXPECT_FALSE(exists(dir + "/d/runs/pre_dt1_wd0_lr3_s1/eval.json"));
    r = sweep("d", grid);
    EXPECT_NE(r.out.find("4 runs (4 recorded, 0 to do)"), std::string::npos) << r.out;
}

TEST_F(Sweep, PresetPublishesOnlyItsOwnGrid) {
    // --dry-run runs and writes nothing; it says whether the preset's docs would be replaced.
    auto dry = [&](const std::string& flags) {
        const std::string log = dir + "/dry.out";
        const int raw = std::system(("python3 sweep.py --preset e1 --dry-run --out " + dir + "/p " + flags + " > " +
                                     log + " 2>&1").c_str());
        EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << read_file(log);
        return read_file(log);
    };
    EXPECT_EQ(dry("--jobs 1 --threads 2").find("not publishing"), std::string::npos);
    EXPECT_NE(dry("--ln peri --spike-rise 2").find("/docs/e1_*: --ln, --spike-rise differ from the preset"),
              std::string::npos)
        << read_file(dir + "/dry.out");
    EXPECT_NE(dry("--lr 0.02").find("--lr differs from the preset"), std::string::npos) << read_file(dir + "/dry.out");
    EXPECT_FALSE(exists(dir + "/p")) << "--dry-run wrote into OUT";

    // An OUT that already holds runs of the preset at other seeds: the union would be published.
    // (--slurm writes OUT/sweep.json and the job array, and runs nothing.)
    ASSERT_EQ(std::system(("python3 sweep.py --preset e1 --seeds 4 --out " + dir + "/p --slurm " + dir +
                           "/p.sbatch > /dev/null").c_str()), 0);
    ASSERT_EQ(std::system(("mkdir -p " + dir + "/p/runs/pre_dt1_wd0.1_lr0.001_s4 && touch " + dir +
                           "/p/runs/pre_dt1_wd0.1_lr0.001_s4/log.jsonl").c_str()), 0);
    EXPECT_NE(dry("").find("/docs/e1_*: " + dir + "/p also holds runs of another grid"), std::string::npos)
        << read_file(dir + "/dry.out");
}

TEST_F(Sweep, SettingsThatTrainRefusesStopTheSweepAndCanBeCorrected) {
    // A setting the sweep does not check itself: ./train refuses it in the first run, and the
    // sweep stops with its message.
    const std::string grid = "--ln pre --dt 1 --seeds 1-2 --steps 4 --warmup 1 --no-figures";
    Result r = sweep("r", grid + " --total-batch 100");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("sweep: ./train refused the settings: train: flag -total_batch: 100 is not a multiple of "
                         "B*T = 16"),
              std::string::npos)
        << r.out;
    r = sweep("r", grid);  // the fixture's --init l2h2c16v96t16
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("2 runs done"), std::string::npos) << r.out;
}

// Every preset end to end on a tiny grid (the fixture's model, data and sizes override the
// preset's): the runs, the tables and the experiment report. The learning rates are given here;
// taking them from E1 is GpuProtocolRunsEndToEndOnTheCpu's. The GPU presets run on the CPU here.
TEST_F(Sweep, EveryPresetRunsEndToEndOnATinyGrid) {
    const std::string tiny = " --steps 6 --warmup 1 --dt 1 --seeds 1 --total-batch 0 --device cpu --no-figures";
    Result r = sweep("e1", "--preset e1 --ln pre,peri --lr 1e-3,3e-1 --lr-extend 0" + tiny);
    ASSERT_EQ(r.status, 0) << r.out;
    const std::string e1 = read_file(dir + "/e1/experiment.md");
    EXPECT_NE(e1.find("## E1: learning-rate sensitivity"), std::string::npos) << e1;
    EXPECT_NE(e1.find("| Pre-LN Δt=1 |"), std::string::npos) << e1;
    EXPECT_NE(e1.find("Failures per learning rate"), std::string::npos) << e1;
    EXPECT_NE(e1.find("Pre-LN, both Δt together, fails in half its runs at "), std::string::npos) << e1;
    EXPECT_EQ(lines(read_file(dir + "/e1/lr.csv")).size(), 1u + 4);
    EXPECT_NE(r.out.find("not publishing"), std::string::npos) << "a changed grid does not replace docs/e1_*";

    r = sweep("e3", "--preset e3 --ln pre,peri --lr 0.01,0.3" + tiny);
    ASSERT_EQ(r.status, 0) << r.out;
    const std::string e3 = read_file(dir + "/e3/experiment.md");
    EXPECT_NE(e3.find("## E3: divergence as a dose-response"), std::string::npos) << e3;
    // One row per shift test (4), event (4) and Δt (1).
    EXPECT_EQ(lines(read_file(dir + "/e3/tests.csv")).size(), 1u + 4 * 4) << read_file(dir + "/e3/tests.csv");

    // E2 with the intervention (a sweep.py feature the fourth round's E2 does not run).
    r = sweep("e2", "--preset e2 --depth 4,6 --ln pre --lr 3e-3 --init l2h2c16v96t16 --intervene 1" + tiny);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(exists(dir + "/e2/runs/pre_dt1_wd0.1_lr0.003_L6_s1/result.json")) << r.out;
    const std::string fits = read_file(dir + "/e2/fits.csv");
    EXPECT_EQ(count(fits, ",init,"), 4u) << "2 runs × 2 quantities at init: " << fits;
    EXPECT_EQ(count(fits, ",trained,"), 4u) << fits;
    EXPECT_EQ(lines(read_file(dir + "/e2/deep.csv")).size(), 1u + 2) << r.out;  // each run's deep half (3+ blocks)
    // The intervention: each finished run at k = 0.5, 1, 2, 4, one row per block.
    EXPECT_EQ(lines(read_file(dir + "/e2/intervention.csv")).size(), 1u + 4 * (4 + 6)) << r.out;

    // The GPU presets fix -fused all, which the CPU refuses; auto is the CPU's (nothing to fuse).
    for (const char* preset : {"gpu-e1", "gpu-e3"}) {
        r = sweep(preset, std::string("--preset ") + preset + " --ln peri --lr 1e-3 --jobs 2 --threads 1 --fused auto" +
                              tiny);
        ASSERT_EQ(r.status, 0) << preset << r.out;
    }
    EXPECT_TRUE(exists(dir + "/gpu-e1/runs/peri_dt1_wd0.1_lr0.001_s1/result.json")) << r.out;

    // The paper's presets train in bf16 on CUDA; on the CPU, which computes in fp32 and refuses
    // -precision bf16, they run with --precision fp32.
    for (const char* preset : {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"}) {
        r = sweep(preset, std::string("--preset ") + preset + " --ln pre --wd 0.1 --precision fp32 --jobs 1 --threads 1" +
                              tiny);
        ASSERT_EQ(r.status, 0) << preset << r.out;
        EXPECT_NE(r.out.find("1 runs done"), std::string::npos) << preset << r.out;
    }
}

// Shards in which the next token is the current one plus 1 (mod 96) nine times in ten: a tiny
// model learns something in 30 steps at a moderate learning rate, and diverges at lr 1.
void write_successor_shard(const std::string& path, int n, uint64_t seed) {
    Rng rng(seed);
    std::vector<uint16_t> tokens(n);
    int t = 0;
    for (auto& id : tokens) id = (uint16_t)(t = rng.uniform() < 0.9 ? (t + 1) % 96 : (int)rng.below(96));
    write_token_shard(path, {20240520, 1, n}, tokens);
}

// scripts/gpu_protocol.sh on the CPU on a tiny model and a small grid (E1_LRS, E2_DEPTHS,
// E3_LRS; one seed each, disjoint from every earlier round's so that the claims table gives
// verdicts), every part in order: E1, E2 (one seed), E3 (one seed), the claims table of them;
// every file where the script says, every claim with its verdict by the rule's words.
TEST_F(Sweep, GpuProtocolRunsEndToEndOnTheCpu) {
    write_successor_shard(dir + "/succ_train_000.bin", 3000, 1);
    write_successor_shard(dir + "/succ_val_000.bin", 600, 2);
    const char* bin_dir = std::getenv("GPT2_BIN_DIR");
    const std::string bin = bin_dir ? bin_dir : ".";
    const std::string out = dir + "/gpu", log = dir + "/gpu.out";
    const std::string cmd = "TRAIN_BIN=" + bin + "/train EVAL_BIN=" + bin + "/eval E1_SEEDS=401 E2_SEEDS=501 "
                            "E3_SEEDS=601 E1_LRS=1e-3,3e-2,1 E2_DEPTHS=2,4 E3_LRS=0.03,1 "
                            "scripts/gpu_protocol.sh --device cpu " +
                            out + " -- --init l2h2c16v96t16 --B 2 --T 8 --eval-B 2 --eval-batches 2 --eval-every 15 "
                            "--save-every 15 --stats-every 5 --steps 30 --warmup 3 --outcome-window 3 --fused auto "
                            "--threads 1 --jobs 2 --no-figures --train-data '" + dir + "/succ_train_*.bin' --val-data '" +
                            dir + "/succ_val_*.bin' > " + log + " 2>&1";
    const int raw = std::system(cmd.c_str());
    const std::string said = read_file(log);
    ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << said << read_file(out + "/cpu/e1.log")
                                                          << read_file(out + "/cpu/e2.log") << read_file(out + "/cpu/e3.log");
    for (const char* step : {"cpu e1: done", "cpu e2: done", "cpu e3: done", "cpu claims: "})
        EXPECT_NE(said.find(step), std::string::npos) << said;
    const std::string e1 = read_file(out + "/cpu/e1_experiment.md");
    EXPECT_NE(e1.find("Every Pre- and Peri-LN configuration learns"), std::string::npos) << e1;
    EXPECT_NE(read_file(out + "/cpu/e1_lr.csv").find(",failed,"), std::string::npos);
    EXPECT_TRUE(exists(out + "/cpu/e2_deep.csv"));
    EXPECT_TRUE(exists(out + "/cpu/e3_tests.csv"));
    const std::string claims = read_file(out + "/cpu/claims.md");
    int rows = 0;
    for (const std::string& line : lines(claims)) {
        if (line.size() < 4 || line[0] != '|' || !std::isdigit((unsigned char)line[2])) continue;
        rows++;
        EXPECT_TRUE(line.find("**supported**") != std::string::npos || line.find("**not supported**") != std::string::npos ||
                    line.find("**inconclusive** at this scale") != std::string::npos ||
                    line.find("**inconclusive**: it holds, but no further than the construction gives") !=
                        std::string::npos)
            << line;
    }
    EXPECT_EQ(rows, 7) << claims;
}

// plot.py on two tiny ./train runs, one with statistics: a PNG where matplotlib is installed
// (for python3 or /usr/bin/python3), else one line naming what is missing; always exit 2 and one
// line for a folder that is not a run.
TEST_F(Sweep, PlotComparesRunsOrSaysWhatIsMissing) {
    const char* bin_dir = std::getenv("GPT2_BIN_DIR");
    const std::string train = std::string(bin_dir ? bin_dir : ".") + "/train -device cpu -threads 1 -init l2h2c16v96t16 "
                              "-B 2 -T 8 -steps 6 -eval_every 3 -train_data '" + dir + "/train_*.bin' -val_data '" +
                              dir + "/val_*.bin' -out ";
    ASSERT_EQ(std::system((train + dir + "/a -ln pre -stats_every 2 > /dev/null").c_str()), 0);
    ASSERT_EQ(std::system((train + dir + "/b -ln peri -dt 0.1 > /dev/null").c_str()), 0);
    auto plot = [&](const std::string& args) {
        const int raw = std::system(("python3 plot.py " + args + " > " + dir + "/plot.out 2>&1").c_str());
        return Result{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "/plot.out")};
    };
    Result bad = plot(dir + "/a " + dir + "/nothing");
    EXPECT_EQ(bad.status, 2) << bad.out;
    EXPECT_EQ(bad.out, "plot.py: " + dir + "/nothing: no log.jsonl (is it a ./train -out folder?)\n");

    const bool matplotlib = std::system("python3 -c 'import matplotlib' 2>/dev/null") == 0 ||
                            std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") == 0;
    Result r = plot(dir + "/a " + dir + "/b --out " + dir + "/cmp.png");
    if (!matplotlib) {
        EXPECT_EQ(r.status, 2) << r.out;
        EXPECT_NE(r.out.find("matplotlib is not installed"), std::string::npos) << r.out;
        EXPECT_FALSE(exists(dir + "/cmp.png"));
        return;
    }
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "plot: " + dir + "/cmp.png\n");
    EXPECT_EQ(read_file(dir + "/cmp.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

// ---------------------------------------------------------------------------------------------
// ./eval on a tiny checkpoint: what -json, -pairs and -samples write, and what it refuses.

class Eval : public Sweep {
protected:
    ModelConfig cfg;

    void SetUp() override {
        Sweep::SetUp();
        cfg = tiny_model(3, Placement::Post);
        write_fresh_checkpoint(dir + "/tiny.bin", cfg, 3);
    }

    Result eval(const std::string& extra) const {
        const char* bin_dir = std::getenv("GPT2_BIN_DIR");
        const std::string bin = bin_dir ? bin_dir : ".";
        const std::string log = dir + "/eval.out";
        const std::string cmd = bin + "/eval -device cpu -threads 1 -model " + dir + "/tiny.bin -val_data '" + dir +
                                "/val_*.bin' -B 2 -T 8 -eval_batches 3 " + extra + " > " + log + " 2>&1";
        const int raw = std::system(cmd.c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(log)};
    }
};

TEST_F(Eval, WritesJsonPairsAndSamples) {
    Result r = eval("-json " + dir + "/e.json -pairs " + dir + "/p.jsonl -samples 3 -prompt_len 4 -sample_len 5 "
                    "-diag_batches 2 -directions 3");
    ASSERT_EQ(r.status, 0) << r.out;
    for (const char* what : {"val loss", "accuracy", "ROUGE F1", "Porter-stemmed", "sens_mean", "w2_bound", "sample 2:"})
        EXPECT_NE(r.out.find(what), std::string::npos) << what << "\n" << r.out;
    const std::string j = read_file(dir + "/e.json");
    EXPECT_NEAR(json_number(j, "val_ppl"), std::exp(json_number(j, "val_loss")), 1e-4 * json_number(j, "val_ppl"));
    EXPECT_EQ(json_number(j, "tokens"), 3 * 2 * 8);
    const double acc = json_number(j, "accuracy");
    EXPECT_TRUE(acc >= 0 && acc <= 1) << acc;
    for (const char* key : {"rouge1", "rouge2", "rougeL", "rouge1_stem", "rouge2_stem", "rougeL_stem"}) {
        const double v = json_number(j, key);
        EXPECT_TRUE(v >= 0 && v <= 1) << key << " " << v;
    }
    EXPECT_EQ(json_number(j, "sequences"), 6);
    for (const char* key : {"mean_abs", "entry_var", "data_var", "grad_norm", "mean_dx", "w2_bound"})
        EXPECT_EQ(json_numbers(j, key).size(), 4u) << key;  // L + 1
    for (const char* key : {"mean_abs_half", "grad_norm_half"}) EXPECT_EQ(json_numbers(j, key).size(), 7u) << key;
    for (const char* key : {"param_grad_norm", "block_mean", "block_max"}) EXPECT_EQ(json_numbers(j, key).size(), 3u) << key;
    EXPECT_EQ(json_numbers(j, "step_mean").size(), 6u);
    // Post-LN: every X_i after the first is a LayerNorm output (gain 1, bias 0): entry_var ≈ 1.
    const std::vector<double> entry_var = json_numbers(j, "entry_var");
    for (size_t i = 1; i < entry_var.size(); i++) EXPECT_NEAR(entry_var[i], 1.0, 1e-3) << i;
    // The noise at X_0 has norm about sigma·sqrt(C) (C = 16), sigma the absolute value used.
    const double sigma = json_number(j, "sigma");
    ASSERT_GT(sigma, 0);
    EXPECT_NEAR(json_numbers(j, "w2_bound")[0], 4 * sigma, sigma);
    EXPECT_EQ(count(j, "\"continuation\": "), 3u);
    const std::vector<std::string> pairs = lines(read_file(dir + "/p.jsonl"));
    ASSERT_EQ(pairs.size(), 6u);  // B × eval_batches sequences
    EXPECT_EQ(pairs[0].rfind("{\"id\": 0, \"prediction\": \"", 0), 0u) << pairs[0];
    EXPECT_NE(pairs[5].find("\"reference\": \""), std::string::npos) << pairs[5];
}

TEST_F(Eval, GreedySamplingIsDeterministic) {
    const std::string flags = "-samples 2 -prompt_len 4 -sample_len 6 -temperature 0 -diag_batches 0 -json ";
    ASSERT_EQ(eval(flags + dir + "/a.json").status, 0);
    ASSERT_EQ(eval(flags + dir + "/b.json").status, 0);
    auto samples = [](const std::string& json) {
        const size_t from = json.find("\"samples\""), to = json.find("\"seconds\"");
        return from == std::string::npos ? std::string() : json.substr(from, to - from);
    };
    const std::string a = read_file(dir + "/a.json"), b = read_file(dir + "/b.json");
    EXPECT_EQ(count(samples(a), "\"continuation\""), 2u) << a;
    EXPECT_EQ(samples(a), samples(b));
    EXPECT_NE(a.find("\"layers\": null"), std::string::npos);
}

TEST_F(Eval, RefusesBadInputWithOneLineAndNoOutput) {
    struct Case { std::string flags, says; };
    for (const Case& c : {Case{"-sigma -1", "-sigma"}, Case{"-directions 0", "-directions"},
                          Case{"-samples 1 -prompt_len 6 -sample_len 11", "-sample_len"},
                          Case{"-samples 1 -prompt_len 9", "-prompt_len"},
                          Case{"-tokenizer " + dir + "/none.bin", "none.bin"}, Case{"-B 0", "-B"},
                          Case{"-bogus 1", "unknown flag -bogus"}}) {
        Result r = eval(c.flags + " -json " + dir + "/out.json -pairs " + dir + "/out.jsonl");
        EXPECT_EQ(r.status, 2) << c.flags << "\n" << r.out;
        EXPECT_NE(r.out.find(c.says), std::string::npos) << c.flags << "\n" << r.out;
        EXPECT_EQ(count(r.out, "\n"), 1u) << c.flags << "\n" << r.out;
        EXPECT_FALSE(exists(dir + "/out.json")) << c.flags;
        EXPECT_FALSE(exists(dir + "/out.jsonl")) << c.flags;
    }
}

}  // namespace
