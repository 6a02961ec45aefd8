// Data-parallel ./train under mpirun (docs/distributed.md), on the CPU
// backend, a tiny model and tiny shards made here:
//   - 2 and 3 ranks give the step losses and final parameters of one process at the same
//     total batch (within 1e-6 relative), with the AdamW state sharded (ZeRO-1) or not;
//   - a run of 2 ranks resumes bit for bit on 2 ranks, and continues on 3;
//   - so do 1, 2 and 3 ranks of the emulated CUDA build (fp32; bf16 on 2 ranks), whose collectives run over the emulated
//     NCCL (test/simt/nccl), and that NCCL's calls give what NCCL documents on 3 ranks;
//   - bad setups are refused on every rank with one line and exit status 2, a rank that dies
//     takes the others down instead of leaving them waiting, and SIGTERM to one rank stops
//     every rank after the same step with a checkpoint pair that resumes bit for bit.
// Skips (saying why) when mpirun is missing or ./train was built without MPI. As root, mpirun
// needs --allow-run-as-root; --oversubscribe lets 3 ranks run on 2 cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "run/checkpoint.h"
#include "test_files.h"

namespace {

struct Result {
    int status;
    std::string out, err;
};

const char* MPIRUN = "mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1";

class Distributed : public ::testing::Test {
protected:
    std::string dir;
    ModelConfig cfg = tiny_model(2, Placement::Peri);
    std::string program = "./train -device cpu -threads 1";  // the emulated CUDA test changes it

    void SetUp() override {
        if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not found (Debian: openmpi-bin)";
        dir = fresh_folder("gpt2dist_");
        write_fresh_checkpoint(dir + "tiny.bin", cfg, 7);
        write_random_shard(dir + "train_000.bin", 4000, cfg.V, 1);
        write_random_shard(dir + "val_000.bin", 600, cfg.V, 2);
        const Result probe = run(std::string(MPIRUN) + " -np 2 ./train -h");
        if (probe.err.find("this build has no MPI") != std::string::npos)
            GTEST_SKIP() << "./train was built without MPI (no mpicxx at build time)";
    }

    Result run(const std::string& command) const {
        const std::string out = dir + "stdout", err = dir + "stderr";
        const int raw = std::system((command + " > " + out + " 2> " + err).c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(out), read_file(err)};
    }

    // The ./train command on the tiny model and data into DIR/out_name. total_batch 96 = 6 B·T:
    // 6, 3 or 2 micro-steps per rank for 1, 2 or 3 ranks.
    // `length`: the flags for how long it trains and how often it evaluates.
    std::string train_args(const std::string& out_name, const std::string& extra,
                           const std::string& length = "-steps 6 -eval_every 3") const {
        return program + " -init " + dir + "tiny.bin -train_data " + dir + "train_*.bin -val_data " +
               dir + "val_*.bin -B 2 -T 8 -total_batch 96 -warmup 1 -lr 3e-3 -eval_batches 3 -shuffle 1 -out " + dir +
               out_name + " " + length + " " + extra;
    }
    Result train(int ranks, const std::string& out_name, const std::string& extra = "",
                 const std::string& length = "-steps 6 -eval_every 3") const {
        const std::string args = train_args(out_name, extra, length);
        if (ranks == 0) return run(args);  // no mpirun at all
        return run(std::string(MPIRUN) + " -np " + std::to_string(ranks) + " " + args);
    }

    std::vector<double> numbers(const std::string& out_name, const std::string& key) const {
        std::vector<double> out;
        for (const std::string& line : log_lines(read_file(dir + out_name + "/log.jsonl"), "\"" + key + "\": "))
            if (line.find("\"event\"") == std::string::npos) out.push_back(json_number(line, key));
        return out;
    }
    std::vector<float> params(const std::string& out_name, int step) const {
        char name[32];
        std::snprintf(name, sizeof name, "/model_%08d.bin", step);
        std::vector<float> p;
        read_checkpoint(dir + out_name + name, &p);
        return p;
    }

    // The largest difference of a and b relative to b, element by element; the scale of each
    // comparison is the larger of |b_i| and 1e-3, so that values near zero compare absolutely.
    // `over` counts the elements beyond 1e-6.
    template <typename T>
    static double max_relative_difference(const std::vector<T>& a, const std::vector<T>& b, size_t* over = nullptr) {
        EXPECT_EQ(a.size(), b.size());
        double worst = 0;
        for (size_t i = 0; i < std::min(a.size(), b.size()); i++) {
            const double d = std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), 1e-3);
            worst = std::max(worst, d);
            if (over && d > 1e-6) ++*over;
        }
        return worst;
    }
    // ‖a − b‖ / ‖b‖ (L2 over all elements).
    static double norm_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
        EXPECT_EQ(a.size(), b.size());
        double diff = 0, norm = 0;
        for (size_t i = 0; i < std::min(a.size(), b.size()); i++) {
            diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
            norm += double(b[i]) * b[i];
        }
        return std::sqrt(diff / norm);
    }

    // Asserts that the run in `out_name` matches the one-process run in `one` of `steps` steps: every step and
    // validation loss within 1e-6 relative, the final parameters within 1e-6 in norm. Element by
    // element the parameters differ more: where a gradient is near zero, its sum in another order
    // can differ in sign, and AdamW's step m/√v is then ±lr either way (docs/distributed.md, "What scales and what does not").
    void expect_same_as_one_process(const std::string& out_name, const std::string& one_name = "one",
                                    int steps = 6) const {
        const std::vector<double> one = numbers(one_name, "loss"), many = numbers(out_name, "loss");
        ASSERT_EQ(one.size(), size_t(steps));
        const double losses = max_relative_difference(many, one);
        const double vals = max_relative_difference(numbers(out_name, "val_loss"), numbers(one_name, "val_loss"));
        const std::vector<float> a = params(out_name, steps), b = params(one_name, steps);
        size_t over = 0;
        const double worst = max_relative_difference(a, b, &over), weights = norm_relative_difference(a, b);
        std::printf("  %s vs one process: losses %.2e, val losses %.2e (max relative); final parameters %.2e "
                    "(norm relative), %.2e (max relative, %zu of %zu elements over 1e-6)\n",
                    out_name.c_str(), losses, vals, weights, worst, over, a.size());
        EXPECT_LE(losses, 1e-6);
        EXPECT_LE(vals, 1e-6);
        EXPECT_LE(weights, 1e-6);
    }

    // Starts `ranks` ranks of ./train into DIR/out_name in the background (stdout and stderr to
    // DIR/stdout, DIR/stderr); returns mpirun's pid.
    pid_t start(int ranks, const std::string& out_name, const std::string& length) const {
        return start_command(std::string(MPIRUN) + " -np " + std::to_string(ranks) + " " +
                             train_args(out_name, "", length));
    }
    // Starts `command` (an mpirun) in the background, output as start's; returns its pid.
    pid_t start_command(const std::string& command) const {
        const pid_t launcher = fork();
        if (launcher == 0) {
            execl("/bin/sh", "sh", "-c", ("exec " + command + " > " + dir + "stdout 2> " + dir + "stderr").c_str(),
                  nullptr);
            _exit(127);
        }
        return launcher;
    }
    // Waits (up to a minute) until DIR/out_name/log.jsonl has `steps` step records, then returns
    // the pid of one rank (a child of mpirun), or 0.
    pid_t a_rank_once_training(pid_t launcher, const std::string& out_name, size_t steps) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (numbers(out_name, "loss").size() < steps && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const std::string ranks = dir + "ranks";
        if (std::system(("pgrep -P " + std::to_string(launcher) + " > " + ranks).c_str()) != 0) return 0;
        return std::atoi(read_file(ranks).c_str());
    }
    // Waits up to 30 s for mpirun to end (`ended`), killing it and its ranks otherwise (a
    // stopped rank too); its wait status.
    int finish(pid_t launcher, bool* ended) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        int status = 0;
        pid_t done = 0;
        while ((done = waitpid(launcher, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        *ended = done == launcher;
        if (done == 0) {
            const std::string ranks = dir + "left_ranks";
            if (std::system(("pgrep -P " + std::to_string(launcher) + " > " + ranks).c_str()) == 0) {
                std::istringstream pids(read_file(ranks));
                for (pid_t pid; pids >> pid;) kill(pid, SIGKILL);
            }
            kill(launcher, SIGKILL);
            waitpid(launcher, &status, 0);
        }
        return status;
    }

    // Kills one rank of the job that mpirun `launcher` runs into DIR/out once it has trained a
    // step, and asserts that the job then ends (not a hang) with a non-zero status.
    void expect_a_killed_rank_ends_the_job(pid_t launcher) const {
        ASSERT_GT(launcher, 0);
        const pid_t rank = a_rank_once_training(launcher, "out", 1);
        ASSERT_GT(rank, 0) << "no rank process found under mpirun";
        kill(rank, SIGKILL);
        bool ended = false;
        const int status = finish(launcher, &ended);
        EXPECT_TRUE(ended) << "mpirun still running 30 s after a rank died";
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "status " << status;
    }

    // Asserts a refusal: status 2, `what` on stderr in exactly one line from ./train, no run folder.
    void expect_refused(const Result& r, const std::string& what, const std::string& out_name) const {
        EXPECT_EQ(r.status, 2) << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
        int lines = 0;
        for (size_t at = r.err.find("train: "); at != std::string::npos; at = r.err.find("train: ", at + 1)) lines++;
        EXPECT_EQ(lines, 1) << r.err;
        EXPECT_FALSE(exists(dir + out_name)) << "output folder left behind";
    }
};

TEST_F(Distributed, TwoAndThreeRanksMatchOneProcess) {
    ASSERT_EQ(train(0, "one").status, 0);
    for (int ranks : {1, 2, 3}) {
        const std::string name = "np" + std::to_string(ranks);
        const Result r = train(ranks, name);
        ASSERT_EQ(r.status, 0) << r.err;
        if (ranks > 1) {
            EXPECT_NE(r.out.find("ranks: " + std::to_string(ranks) + " processes, each " + std::to_string(6 / ranks) +
                                 " micro-steps"), std::string::npos) << r.out;
        }
        expect_same_as_one_process(name);
    }
    const Result replicated = train(2, "np2_replicated", "-zero 0");
    ASSERT_EQ(replicated.status, 0) << replicated.err;
    EXPECT_NE(replicated.out.find("replicated on every rank"), std::string::npos);
    expect_same_as_one_process("np2_replicated");
    // The AdamW state gathered from the shards is that of the one process.
    const size_t P = num_parameters(cfg);
    const TrainState one = read_state(dir + "one/state_00000006.bin", P, cfg.placement),
                     three = read_state(dir + "np3/state_00000006.bin", P, cfg.placement);
    EXPECT_LE(norm_relative_difference(three.m, one.m), 1e-5);
    EXPECT_LE(norm_relative_difference(three.v, one.v), 1e-5);
    EXPECT_EQ(three.loader.epoch, one.loader.epoch);
    EXPECT_EQ(three.loader.cursor, one.loader.cursor);
}

TEST_F(Distributed, ResumesBitForBitOnTheSameRanksAndContinuesOnOthers) {
    ASSERT_EQ(train(2, "full", "-save_every 3").status, 0);
    // The same run stopped after its checkpoint at step 3 (as if killed later), then resumed.
    std::filesystem::copy(dir + "full", dir + "resumed");
    std::remove((dir + "resumed/model_00000006.bin").c_str());
    std::remove((dir + "resumed/state_00000006.bin").c_str());
    const Result again = train(2, "resumed", "-save_every 3 -resume 1");
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_NE(again.out.find("continuing at step 3"), std::string::npos) << again.out;
    EXPECT_EQ(numbers("resumed", "loss"), numbers("full", "loss"));
    EXPECT_EQ(read_file(dir + "resumed/model_00000006.bin"), read_file(dir + "full/model_00000006.bin"));
    EXPECT_EQ(read_file(dir + "resumed/state_00000006.bin"), read_file(dir + "full/state_00000006.bin"));
    // The same pair continued by 3 ranks: the same data, so the same run up to the order of sums.
    std::remove((dir + "full/model_00000006.bin").c_str());
    std::remove((dir + "full/state_00000006.bin").c_str());
    const Result three = train(3, "full", "-save_every 3 -resume 1");
    ASSERT_EQ(three.status, 0) << three.err;
    ASSERT_EQ(train(0, "one").status, 0);
    expect_same_as_one_process("full");
}

TEST_F(Distributed, EmulatedCudaRanksMatchOneProcess) {
    // The CUDA backend's path over NCCL (the emulated NCCL of test/simt/nccl, over MPI) in the
    // emulated build, against one process without mpirun, 2 steps of 6 micro-steps: fp32 on 1, 2
    // and 3 ranks (one rank has nothing to exchange and calls no NCCL), and bf16 on 2 ranks, whose
    // bf16 weight copy must follow the gathered parameters.
    if (!exists("build/emu/train")) GTEST_SKIP() << "no emulated CUDA build (build/emu/train needs the CUDA headers)";
    const std::string length = "-steps 2 -eval_every 2";
    const std::pair<const char*, std::vector<int>> cases[] = {{"fp32", {1, 2, 3}}, {"bf16", {2}}};
    for (const auto& [precision, rank_counts] : cases) {
        const std::string flags = std::string(" -device cuda -precision ") + precision;
        const std::string one_name = std::string("cuda_") + precision + "_one";
        // Several ranks fuse every kind of product without timing them (-fused auto is not timed
        // there), so the one-process run fuses every kind too, rather than choosing by its timing.
        program = "ASAN_OPTIONS=detect_leaks=0 build/emu/train" + flags + " -fused all";
        const Result one = train(0, one_name, "", length);
        ASSERT_EQ(one.status, 0) << one.err;
        program = "build/emu/train" + flags;
        for (int ranks : rank_counts) {
            const std::string name = std::string("cuda_") + precision + "_np" + std::to_string(ranks);
            const std::string mpirun = std::string(MPIRUN) + " -x ASAN_OPTIONS=detect_leaks=0 -np " + std::to_string(ranks) + " ";
            const Result many = run(mpirun + train_args(name, "", length));
            ASSERT_EQ(many.status, 0) << many.err;
            EXPECT_NE(many.out.find("backend: cuda"), std::string::npos) << many.out;
            EXPECT_NE(many.out.find("ranks over NCCL"), std::string::npos) << many.out;
            if (ranks > 1)  // ranks do not time the fused products, each on its own GPU: they all fuse alike
                EXPECT_NE(many.out.find("(-fused auto with several ranks: not timed"), std::string::npos) << many.out;
            expect_same_as_one_process(name, one_name, 2);
        }
    }
}

TEST_F(Distributed, EmulatedNcclFollowsNcclSemantics) {
    // test/simt/nccl/nccl_test.cpp checks each emulated call on every rank and prints one line.
    if (!exists("build/emu/nccl_test")) GTEST_SKIP() << "no emulated NCCL test (build/emu/nccl_test needs MPI and the CUDA headers)";
    const Result r = run(std::string(MPIRUN) + " -x ASAN_OPTIONS=detect_leaks=0 -np 3 build/emu/nccl_test");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("nccl emulation: ok on 3 ranks"), std::string::npos) << r.out << r.err;
}

// The emulated CUDA build under mpirun, 2 ranks over the emulated NCCL, where a peer stops
// answering: rank 1 stops itself (SIGSTOP, SIMT_NCCL_STOP_AT) at its 4th collective, the first
// step's gradient sum (the 3 before it are the communicator's warm-up before the batch is
// fitted). Rank 0 waits in that sum, asking NCCL for asynchronous errors; after
// GPT2_NCCL_TIMEOUT = 2 s it ends the job with one line, not a hang.
TEST_F(Distributed, EmulatedCudaRankThatStopsAnsweringEndsTheJob) {
    if (!exists("build/emu/train")) GTEST_SKIP() << "no emulated CUDA build (build/emu/train needs the CUDA headers)";
    program = "build/emu/train -device cuda -precision fp32";
    const std::string args = train_args("out", "", "-steps 4 -eval_every 0");
    const auto begin = std::chrono::steady_clock::now();
    const pid_t launcher = start_command(std::string(MPIRUN) + " -x ASAN_OPTIONS=detect_leaks=0 -x GPT2_NCCL_TIMEOUT=2 -np 1 " +
                                         args + " : -np 1 -x SIMT_NCCL_STOP_AT=4 " + args);
    ASSERT_GT(launcher, 0);
    bool ended = false;
    const int status = finish(launcher, &ended);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_TRUE(ended) << "mpirun still running 30 s after a rank stopped answering";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "status " << status;
    const std::string err = read_file(dir + "stderr");
    const std::string line = "train: rank 0: ncclAllReduce has not finished after 2 s: a peer failed or stopped answering";
    EXPECT_NE(err.find(line), std::string::npos) << err;
    EXPECT_EQ(err.find(line), err.rfind(line)) << "said more than once:\n" << err;
    std::printf("  a rank that stopped answering ended the job after %.1f s\n", seconds);
}

// The same job where a peer dies (SIGKILL) while training: mpirun, or rank 0 finding the peer's
// process gone (the emulated NCCL's asynchronous ncclRemoteError), ends the job, not a hang.
TEST_F(Distributed, EmulatedCudaRankThatDiesEndsTheJob) {
    if (!exists("build/emu/train")) GTEST_SKIP() << "no emulated CUDA build (build/emu/train needs the CUDA headers)";
    program = "build/emu/train -device cuda -precision fp32";
    expect_a_killed_rank_ends_the_job(start_command(std::string(MPIRUN) + " -x ASAN_OPTIONS=detect_leaks=0 -np 2 " +
                                                    train_args("out", "", "-steps 100000 -eval_every 0")));
}

TEST_F(Distributed, RefusesTotalBatchNotDividedByRanks) {
    // 96 tokens do not split over 4 ranks of B·T = 16: every rank exits 2, one line says why.
    expect_refused(train(4, "out"), "-total_batch: 96 is not a multiple of ranks*B*T = 4*2*8 = 64", "out");
}

TEST_F(Distributed, WithoutTotalBatchTheSameFlagsTrainTheSameRunOrAreRefused) {
    // The default step is one process's B·T = 16 tokens whatever the ranks: mpirun -np 1 trains
    // the run of one process; 2 ranks cannot split it, and every rank refuses naming -total_batch.
    const auto without_total_batch = [&](const std::string& out_name) {
        std::string args = train_args(out_name, "");
        return args.replace(args.find(" -total_batch 96"), std::string(" -total_batch 96").size(), "");
    };
    const Result one = run(without_total_batch("one"));
    ASSERT_EQ(one.status, 0) << one.err;
    const Result np1 = run(std::string(MPIRUN) + " -np 1 " + without_total_batch("np1"));
    ASSERT_EQ(np1.status, 0) << np1.err;
    EXPECT_EQ(numbers("np1", "loss"), numbers("one", "loss"));
    EXPECT_EQ(json_number(read_file(dir + "np1/config.json"), "total_batch"), 16);
    expect_refused(run(std::string(MPIRUN) + " -np 2 " + without_total_batch("np2")),
                   "flag -total_batch: not given, and its default, one process's step of 16 tokens, is not a multiple "
                   "of ranks*B*T = 2*2*8 = 32; give -total_batch (a multiple of 32) to choose the step", "np2");
}

TEST_F(Distributed, RefusesRanksWithDifferentSettings) {
    const Result r = run(std::string(MPIRUN) + " -np 1 " + train_args("out", "-wd 0.1") + " : -np 1 " +
                         train_args("out", "-wd 0.2"));
    expect_refused(r, "rank 1 was started with other settings than rank 0", "out");
}

TEST_F(Distributed, ARankThatCannotStartStopsEveryRank) {
    // Rank 1 is given training data that does not exist: the others must not wait for it.
    std::string broken = train_args("out", "");
    broken.replace(broken.find(dir + "train_*.bin"), (dir + "train_*.bin").size(), dir + "missing_*.bin");
    const Result r = run(std::string(MPIRUN) + " -np 1 " + train_args("out", "") + " : -np 1 " + broken);
    expect_refused(r, "rank 1: " + dir + "missing_*.bin", "out");
}

TEST_F(Distributed, ARankThatDiesTakesTheOthersDown) {
    // A long run of 2 ranks; one of them is killed: mpirun must end, not hang.
    expect_a_killed_rank_ends_the_job(start(2, "out", "-steps 100000 -eval_every 0"));
}

TEST_F(Distributed, ASignalToOneRankStopsEveryRankWithACheckpointThatResumes) {
    const std::string length = "-steps 300 -eval_every 0 -save_every 0";
    ASSERT_EQ(train(2, "whole", "", length).status, 0);
    const std::vector<double> uninterrupted = numbers("whole", "loss");
    ASSERT_EQ(uninterrupted.size(), 300u);
    // SIGTERM to one rank only (as a scheduler might send it): the other learns of it at the
    // end of the step, and both stop there with one checkpoint pair.
    const pid_t launcher = start(2, "out", length);
    ASSERT_GT(launcher, 0);
    const pid_t rank = a_rank_once_training(launcher, "out", 2);
    ASSERT_GT(rank, 0) << "no rank process found under mpirun";
    kill(rank, SIGTERM);
    bool ended = false;
    const int status = finish(launcher, &ended);
    ASSERT_TRUE(ended) << "mpirun still running 30 s after the signal";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 143) << "status " << status;
    const size_t done = numbers("out", "loss").size();
    ASSERT_LT(done, 300u) << "the run ended before the signal";
    EXPECT_NE(read_file(dir + "stdout").find("stopped by SIGTERM after " + std::to_string(done) + " of 300 steps"),
              std::string::npos) << read_file(dir + "stdout");
    char model[32], state[32];
    std::snprintf(model, sizeof model, "/model_%08zu.bin", done);
    std::snprintf(state, sizeof state, "/state_%08zu.bin", done);
    EXPECT_TRUE(exists(dir + "out" + model) && exists(dir + "out" + state)) << model;
    const Result resumed = train(2, "out", "-resume 1", length);
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_EQ(numbers("out", "loss"), uninterrupted);
}

TEST_F(Distributed, OneProcessNeedsNoMpirun) {
    const Result r = train(0, "one", "", "-steps 2 -eval_every 0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("ranks:"), std::string::npos) << r.out;
    EXPECT_NE(read_file(dir + "one/config.json").find("\"ranks\": 1"), std::string::npos);
}

}  // namespace
