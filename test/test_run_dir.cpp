// ./train's run folder as a user meets it (docs/train.md §6, "Stopping and resuming", "Exit
// status"): a folder belongs to one run (a lock held against a second real process, another
// run's files refused unless -overwrite 1), a failed write stops the run with status 4 and a
// parseable log (through a file-size limit, which fails writes as a full disk does), -resume 1
// refuses changed settings, and SIGINT / SIGTERM stop with a checkpoint that resumes bit for bit.
// Also ./eval's checks before work and ./tokenize -h. Runs the real binaries (from the
// repository root after `make`) on a tiny model and tiny shards made here.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run/checkpoint.h"
#include "util/json.h"
#include "model.h"
#include "test_files.h"
#include "flags/train_flags.h"

namespace {

struct Result {
    int status;  // exit status, or -signal when a signal ended the process
    std::string out, err;
};

// The status of a waitpid() result as Result::status reports it.
int exit_code(int raw) { return WIFEXITED(raw) ? WEXITSTATUS(raw) : WIFSIGNALED(raw) ? -WTERMSIG(raw) : -1000; }

// The lines of `text`.
std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The value text of the first `"key": value` in JSON text (up to the next ',', '}' or newline).
std::string config_line(const std::string& text, const std::string& key) {
    const std::string tag = "\"" + key + "\": ";
    const size_t at = text.find(tag);
    if (at == std::string::npos) return "(absent)";
    const size_t from = at + tag.size();
    return text.substr(from, text.find_first_of(",}\n", from) - from);
}

class RunDir : public ::testing::Test {
protected:
    std::string dir;  // scratch folder, ends in "/"

    void SetUp() override {
        dir = fresh_folder("run_dir_");
        const ModelConfig cfg = tiny_model(2, Placement::Peri);
        write_fresh_checkpoint(dir + "tiny.bin", cfg, 7);
        write_random_shard(dir + "train_000.bin", 3000, cfg.V, 1);
        write_random_shard(dir + "other_000.bin", 3000, cfg.V, 3);
        write_random_shard(dir + "val_000.bin", 500, cfg.V, 2);
    }

    // ./train's flags for the tiny model and data, writing into DIR/out, plus `extra`.
    std::string train_args(const std::string& extra, const std::string& out = "out") const {
        return "./train -device cpu -threads 1 -init " + dir + "tiny.bin -train_data " + dir + "train_*.bin -val_data " +
               dir + "val_*.bin -B 2 -T 8 -eval_every 0 -warmup 2 -out " + dir + out + " " + extra;
    }

    // Starts `command` through /bin/sh with stdout and stderr into files under dir named after
    // `tag`. With `file_limit` > 0 every file the process writes is limited to that many bytes
    // and SIGXFSZ is ignored, so writes past it fail with an error, as on a full disk.
    pid_t start(const std::string& command, const std::string& tag, rlim_t file_limit = 0) const {
        const std::string out = dir + tag + ".stdout", err = dir + tag + ".stderr";
        const pid_t pid = fork();
        if (pid == 0) {
            if (file_limit > 0) {
                const rlimit limit = {file_limit, file_limit};
                setrlimit(RLIMIT_FSIZE, &limit);
                signal(SIGXFSZ, SIG_IGN);
            }
            const std::string line = "exec " + command + " > " + out + " 2> " + err;
            execl("/bin/sh", "sh", "-c", line.c_str(), (char*)nullptr);
            _exit(127);
        }
        return pid;
    }

    // Waits for a started process; its status and output.
    Result finish(pid_t pid, const std::string& tag) const {
        int raw = 0;
        waitpid(pid, &raw, 0);
        return {exit_code(raw), read_file(dir + tag + ".stdout"), read_file(dir + tag + ".stderr")};
    }

    Result run(const std::string& command, rlim_t file_limit = 0) const { return finish(start(command, "run", file_limit), "run"); }
    Result train(const std::string& extra, const std::string& out = "out") const { return run(train_args(extra, out)); }

    // Waits (up to a minute) until `path` holds at least `count` lines.
    void wait_for_lines(const std::string& path, size_t count) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
        while (lines(read_file(path)).size() < count && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_GE(lines(read_file(path)).size(), count) << path;
    }

    // Waits (up to a minute) until `path` holds `text`.
    void wait_for_text(const std::string& path, const std::string& text) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
        while (read_file(path).find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_NE(read_file(path).find(text), std::string::npos) << path;
    }

    // The "loss" text of the step records of a log.jsonl, in order.
    static std::vector<std::string> losses(const std::string& log) {
        std::vector<std::string> out;
        for (const std::string& line : lines(log)) {
            const size_t at = line.find("\"loss\": ");
            if (at != std::string::npos && line.find("\"event\"") == std::string::npos)
                out.push_back(line.substr(at + 8, line.find(',', at) - at - 8));
        }
        return out;
    }

    // Names of model_*.bin / state_*.bin / *.tmp files in DIR/out.
    std::vector<std::string> checkpoint_files() const {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(dir + "out")) {
            const std::string name = e.path().filename();
            if (name.find(".bin") != std::string::npos || name.find(".tmp") != std::string::npos) names.push_back(name);
        }
        std::sort(names.begin(), names.end());
        return names;
    }

    // Asserts a refusal: status 2 and one stderr line containing `what`.
    static void expect_refused(const Result& r, const std::string& what) {
        EXPECT_EQ(r.status, 2) << r.out << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
};

TEST_F(RunDir, FreshRunIntoAnotherRunsFolderIsRefusedAndLeavesItAlone) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    const std::string log = read_file(dir + "out/log.jsonl"), config = read_file(dir + "out/config.json");
    const std::vector<std::string> files = checkpoint_files();
    expect_refused(train("-steps 2 -seed 5"), "holds another run's files");
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
    EXPECT_EQ(read_file(dir + "out/config.json"), config);
    EXPECT_EQ(checkpoint_files(), files);
}

TEST_F(RunDir, OverwriteRemovesTheOldRunsFilesFirst) {
    ASSERT_EQ(train("-steps 4 -save_every 1").status, 0);
    std::ofstream(dir + "out/notes.txt") << "mine";
    Result r = train("-steps 2 -save_every 0 -overwrite 1");
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<std::string> expected = {"model_00000002.bin", "state_00000002.bin"};
    EXPECT_EQ(checkpoint_files(), expected);  // model_3, model_4 of the old run are gone
    EXPECT_EQ(losses(read_file(dir + "out/log.jsonl")).size(), 2u);
    EXPECT_EQ(read_file(dir + "out/notes.txt"), "mine");  // not a run file: kept
}

TEST_F(RunDir, UnusableOutputPathsAreRefused) {
    expect_refused(run("./train -device cpu -init " + dir + "tiny.bin -out '' -steps 1"), "flag -out: the value is empty (give a DIR)");
    std::ofstream(dir + "file") << "x";
    expect_refused(run("./train -device cpu -init " + dir + "tiny.bin -out " + dir + "file/run -steps 1"),
                   "exists and is not a folder");
}

TEST_F(RunDir, SecondProcessOnTheFolderIsRefusedAtOnce) {
    const pid_t first = start(train_args("-steps 1000000 -save_every 0"), "first");
    wait_for_lines(dir + "out/log.jsonl", 3);
    // Output reaches a file (no terminal) while the run goes on: stdout is line-buffered.
    EXPECT_NE(read_file(dir + "first.stdout").find("step     0/1000000"), std::string::npos);
    const std::string config = read_file(dir + "out/config.json");
    for (const char* extra : {"-steps 5", "-steps 1000000 -save_every 0 -resume 1", "-steps 5 -overwrite 1"}) {
        const auto begin = std::chrono::steady_clock::now();
        expect_refused(train(extra), "is in use by another ./train");
        EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(20)) << "not refused at once";
    }
    EXPECT_EQ(read_file(dir + "out/config.json"), config);
    kill(first, SIGTERM);
    Result r = finish(first, "first");
    EXPECT_EQ(r.status, 143) << r.err;
    EXPECT_NE(r.out.find("stopped by SIGTERM after"), std::string::npos) << r.out;
}

TEST_F(RunDir, SigintStopsWithACheckpointAndResumeContinuesBitForBit) {
    // Many micro-steps per step (total_batch 64 x B*T) so the run is still going when the signal comes.
    const std::string flags = "-steps 40 -save_every 0 -total_batch 1024 -shuffle 1";
    ASSERT_EQ(train(flags, "whole").status, 0);
    const std::vector<std::string> uninterrupted = losses(read_file(dir + "whole/log.jsonl"));
    ASSERT_EQ(uninterrupted.size(), 40u);

    const pid_t pid = start(train_args(flags), "stopped");
    wait_for_lines(dir + "out/log.jsonl", 2);
    kill(pid, SIGINT);
    Result r = finish(pid, "stopped");
    ASSERT_EQ(r.status, 130) << r.out << r.err;
    const std::vector<std::string> done = losses(read_file(dir + "out/log.jsonl"));
    ASSERT_LT(done.size(), 40u) << "the run ended before the signal";
    char name[32];
    std::snprintf(name, sizeof name, "model_%08zu.bin", done.size());
    EXPECT_NE(r.out.find("stopped by SIGINT after " + std::to_string(done.size()) + " of 40 steps"), std::string::npos) << r.out;
    const std::vector<std::string> pair = {name, "state" + std::string(name).substr(5)};
    EXPECT_EQ(checkpoint_files(), pair);

    Result resumed = train(flags + " -resume 1");
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_EQ(losses(read_file(dir + "out/log.jsonl")), uninterrupted);
    EXPECT_NE(resumed.out.find("done: " + std::to_string(40 - done.size()) + " steps"), std::string::npos) << resumed.out;
}

TEST_F(RunDir, ResumeRefusesSettingsThatContradictTheRun) {
    ASSERT_EQ(train("-steps 6 -save_every 3").status, 0);
    std::remove((dir + "out/model_00000006.bin").c_str());
    std::remove((dir + "out/state_00000006.bin").c_str());
    const std::string config = read_file(dir + "out/config.json"), log = read_file(dir + "out/log.jsonl");
    const std::pair<const char*, const char*> cases[] = {
        {"-B 1", "flag -B"}, {"-T 4", "flag -T"}, {"-total_batch 32", "flag -total_batch"},
        {"-shuffle 0", "flag -shuffle"}, {"-seed 5", "flag -seed"}, {"-lr 1e-3", "flag -lr"},
        {"-lr_min 0", "flag -lr_min"}, {"-clip 0", "flag -clip"}};
    for (const auto& [extra, flag] : cases)
        expect_refused(train("-steps 6 -save_every 3 -resume 1 " + std::string(extra)), flag);
    // The schedule's length, another training set, another -init.
    expect_refused(train("-steps 9 -save_every 3 -resume 1"), "flag -steps");
    const std::string other = "./train -device cpu -threads 1 -init " + dir + "tiny.bin -train_data " + dir +
                              "other_*.bin -B 2 -T 8 -eval_every 0 -warmup 2 -out " + dir + "out -steps 6 -save_every 3 -resume 1";
    expect_refused(run(other), "flag -train_data");
    expect_refused(run("./train -device cpu -threads 1 -init l2h2c16v96t16 -train_data " + dir +
                       "train_*.bin -B 2 -T 8 -eval_every 0 -warmup 2 -out " + dir + "out -steps 6 -save_every 3 -resume 1"),
                   "flag -init");
    EXPECT_EQ(read_file(dir + "out/config.json"), config);
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
    // The same settings resume, and config.json keeps the command that started the run.
    Result r = train("-steps 6 -save_every 3 -resume 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("resume: continuing at step 3 of 6"), std::string::npos) << r.out;
    // The steps 3, 4, 5 and the finished run's outcome record at step 6.
    EXPECT_NE(r.out.find("4 log records from after that checkpoint dropped"), std::string::npos) << r.out;
    EXPECT_EQ(json_numbers(read_file(dir + "out/config.json"), "resumed_at_step"), std::vector<double>{3});
    EXPECT_EQ(config_line(read_file(dir + "out/config.json"), "command"), config_line(config, "command"));
}

// A value of flag `f` other than `current` (its value in the run), within the flag's values: for
// a number twice it, else half-way to a bound; for a choice the first other one; for text the
// entry of `texts` (the test fails for a text flag without one).
std::string another_value(const TrainFlag& f, const std::string& current, const std::map<std::string, std::string>& texts) {
    const FlagValues& v = f.values;
    switch (v.kind) {
        case FlagValues::Kind::Integer: {
            const long long n = std::stoll(current);
            for (long long c : {n * 2, n - 1, n + 1})
                if (c != n && c >= v.min && c <= v.max) return std::to_string(c);
            break;
        }
        case FlagValues::Kind::Real: {
            const double x = std::stod(current);
            for (double c : {x * 2, (x + v.lo) / 2, (x + v.hi) / 2}) {
                const bool inside = (v.lo_open ? c > v.lo : c >= v.lo) && (v.hi_open ? c < v.hi : c <= v.hi);
                if (c != x && inside) return json_number(c);
            }
            break;
        }
        case FlagValues::Kind::Choice:
            for (const std::string& c : v.choices)
                if (c != current) return c;
            break;
        case FlagValues::Kind::Text:
            if (texts.count(f.name)) return texts.at(f.name);
            break;
    }
    ADD_FAILURE() << "no other value of -" << f.name << " than " << current;
    return current;
}

// A tiny model of maxT 64 at DIR/long.bin, room for -sample_every's 16 prompt tokens and 32
// sampled ones; returns its path.
std::string long_window_model(const std::string& dir) {
    ModelConfig cfg = tiny_model(2, Placement::Peri);
    cfg.maxT = 64;
    write_fresh_checkpoint(dir + "long.bin", cfg, 7);
    return dir + "long.bin";
}

// From the table of flags: every flag that defines the run, given another value than the run's,
// is refused on -resume 1 naming it, leaving the run's files alone; every other flag the run
// records, or shows in its backend, may change (the run here is complete, so the resume that
// accepts it trains nothing).
TEST_F(RunDir, ResumeRefusesEveryFlagThatDefinesTheRunAndAcceptsTheOthers) {
    const std::map<std::string, std::string> base = {
        {"device", "cpu"}, {"threads", "1"}, {"init", long_window_model(dir)}, {"train_data", dir + "train_*.bin"},
        {"val_data", dir + "val_*.bin"}, {"B", "2"}, {"T", "8"}, {"eval_every", "0"}, {"warmup", "2"},
        {"out", dir + "out"}, {"steps", "6"}, {"save_every", "3"}, {"resume", "1"}};
    auto command = [&](const std::string& name, const std::string& value) {
        std::string c = "./train";
        for (const auto& [flag, v] : base)
            if (flag != name) c += " -" + flag + " '" + v + "'";
        return c + (name.empty() ? "" : " -" + name + " '" + value + "'");
    };
    ASSERT_EQ(run(command("resume", "0")).status, 0);
    const std::string config = read_file(dir + "out/config.json"), log = read_file(dir + "out/log.jsonl");
    const Json saved = read_json(config, "config.json");
    const std::map<std::string, std::string> texts = {{"init", "l2h2c16v96t16"}, {"train_data", dir + "other_*.bin"},
                                                      {"val_data", dir + "other_*.bin"},
                                                      {"tokenizer", "data/mobydick_v4096_tokenizer.bin"}};
    const std::set<std::string> runs_the_command = {"out", "resume", "overwrite", "change_steps", "config"};
    // CUDA only: a value other than the run's (auto) is all, refused on this CPU run (auto is
    // accepted there: FusedAutoIsAcceptedOnTheCpu; test_cli_cuda resumes a CUDA run with it given
    // and without).
    const std::set<std::string> cuda_only = {"fused"};
    std::set<std::string> refused, accepted;
    for (const TrainFlag& f : train_flags()) {
        if (runs_the_command.count(f.name)) continue;
        // The run's value: given here, else recorded (a choice or number), else the default.
        const Json* recorded = f.record.name.empty() ? nullptr : saved.get(f.record.name);
        const std::string current = base.count(f.name)                                          ? base.at(f.name)
                                    : recorded && recorded->kind() != Json::Kind::Array ? recorded->text()
                                                                                        : f.fallback.value;
        const std::string other = another_value(f, current, texts);
        SCOPED_TRACE("-" + f.name + " " + other + " (the run's: " + current + ")");
        const Result r = run(command(f.name, other));
        if (cuda_only.count(f.name)) {
            expect_refused(r, "-" + f.name + ": " + other + " chooses how the CUDA backend");
        } else if (f.on_resume == MAY_CHANGE) {
            EXPECT_EQ(r.status, 0) << r.err;
            EXPECT_NE(r.out.find("is complete (6 of 6 steps"), std::string::npos) << r.out;
            accepted.insert(f.name);
        } else {
            expect_refused(r, "-" + f.name);
            const size_t at = r.err.find("-" + f.name);
            EXPECT_TRUE(at != std::string::npos && (r.err[at + f.name.size() + 1] == ':' || r.err[at + f.name.size() + 1] == ' '))
                << r.err;
            // Refused as a contradiction of the run (config.json, its checkpoint or its state).
            EXPECT_TRUE(r.err.find("-resume 1 would change") != std::string::npos || r.err.find(" was given") != std::string::npos ||
                        r.err.find("the run being resumed has") != std::string::npos)
                << r.err;
            refused.insert(f.name);
        }
        EXPECT_EQ(read_file(dir + "out/config.json"), config);
        EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
    }
    // What docs/train.md (§7, stopping and resuming) promises: a change here is a change of the contract.
    const std::set<std::string> defining = {"ln", "dt", "init", "train_data", "B", "T", "total_batch", "steps", "lr",
                                            "lr_min", "warmup", "wd", "beta1", "beta2", "eps", "clip", "outcome_window",
                                            "diverge_rise", "spike_rise", "seed", "shuffle"};
    EXPECT_EQ(refused, defining);
    EXPECT_EQ(accepted.size(), train_flags().size() - defining.size() - runs_the_command.size() - cuda_only.size());
    // -init is checked only when given: without it the run's own checkpoint resumes.
    std::map<std::string, std::string> without_init = base;
    without_init.erase("init");
    std::string c = "./train";
    for (const auto& [flag, v] : without_init) c += " -" + flag + " '" + v + "'";
    EXPECT_EQ(run(c).status, 0);
}

// A config.json that is not JSON is refused on -resume 1, naming the file, before anything changes.
TEST_F(RunDir, ResumeRefusesAConfigThatIsNotJson) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    std::remove((dir + "out/model_00000004.bin").c_str());
    std::remove((dir + "out/state_00000004.bin").c_str());
    { std::ofstream(dir + "out/config.json") << "{\"B\": 2,\n"; }
    const std::string log = read_file(dir + "out/log.jsonl");
    expect_refused(train("-steps 4 -save_every 2 -resume 1"), dir + "out/config.json: not JSON (expected a member name) at byte");
    { std::ofstream(dir + "out/config.json") << "[1, 2]\n"; }
    expect_refused(train("-steps 4 -save_every 2 -resume 1"), dir + "out/config.json: not a JSON object");
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
}

// A state file whose placement word is not its model file's (a file copied in from another run)
// is refused on resume, naming the file, and nothing of the run is changed.
TEST_F(RunDir, ResumeRefusesAStateOfAnotherPlacement) {
    ASSERT_EQ(train("-steps 6 -save_every 3").status, 0);
    std::remove((dir + "out/model_00000006.bin").c_str());
    std::remove((dir + "out/state_00000006.bin").c_str());
    const std::string state = dir + "out/state_00000003.bin";
    std::string bytes = read_file(state);
    const int32_t other = (int32_t)Placement::Post;  // header[3], the placement (docs/formats.md §3)
    ASSERT_GE(bytes.size(), 16u);
    bytes.replace(12, 4, reinterpret_cast<const char*>(&other), 4);
    { std::ofstream(state, std::ios::binary) << bytes; }
    const std::string log = read_file(dir + "out/log.jsonl");
    expect_refused(train("-steps 6 -save_every 3 -resume 1"),
                   state + ": optimiser state of a post-LN model, but its model file is peri-LN");
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
}

TEST_F(RunDir, ChangeStepsMovesTheScheduleEndOnPurposeAndIsRecorded) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    expect_refused(train("-steps 6 -save_every 2 -resume 1"), "flag -steps");
    Result r = train("-steps 6 -save_every 2 -resume 1 -change_steps 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("-steps changed from 4 to 6 at step 4"), std::string::npos) << r.out;
    const std::string config = read_file(dir + "out/config.json");
    EXPECT_NE(config.find("\"steps_changes\": [{\"at_step\": 4, \"from\": 4, \"to\": 6}]"), std::string::npos) << config;
    EXPECT_EQ(json_numbers(config, "steps"), std::vector<double>{6});
    EXPECT_EQ(losses(read_file(dir + "out/log.jsonl")).size(), 6u);
    // The new length is the run's now: resuming with it needs no flag.
    r = train("-steps 6 -save_every 2 -resume 1");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("is complete (6 of 6 steps"), std::string::npos) << r.out;
    expect_refused(train("-steps 8 -change_steps 1"), "flag -change_steps: only applies with -resume 1");
}

TEST_F(RunDir, ResumeRefusesAStateWhoseStepsContradictItsName) {
    ASSERT_EQ(train("-steps 4 -save_every 0").status, 0);
    std::rename((dir + "out/model_00000004.bin").c_str(), (dir + "out/model_00000002.bin").c_str());
    std::rename((dir + "out/state_00000004.bin").c_str(), (dir + "out/state_00000002.bin").c_str());
    expect_refused(train("-steps 4 -save_every 0 -resume 1"), "state_00000002.bin: records 4 steps done but its name says 2");
}

TEST_F(RunDir, ResumeRefusesACheckpointPairOfAnotherRun) {
    // The same sizes and settings from other initial weights: a pair of that run, copied in, is
    // not this run's (its step-0 loss differs from the one in log.jsonl).
    ModelConfig cfg = read_checkpoint_config(dir + "tiny.bin");
    std::vector<float> params(num_parameters(cfg));
    init_parameters(cfg, params.data(), 8);
    write_checkpoint(dir + "other.bin", cfg, params.data());
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    std::string other = train_args("-steps 4 -save_every 2", "out2");
    other.replace(other.find("tiny.bin"), 8, "other.bin");
    ASSERT_EQ(run(other).status, 0);
    std::remove((dir + "out/model_00000004.bin").c_str());  // the newest pair is then step 2's...
    std::remove((dir + "out/state_00000004.bin").c_str());
    for (const char* name : {"model_00000002.bin", "state_00000002.bin"})  // ...replaced by the other run's
        std::filesystem::copy_file(dir + "out2/" + name, dir + "out/" + name, std::filesystem::copy_options::overwrite_existing);
    expect_refused(train("-steps 4 -save_every 2 -resume 1"), "state_00000002.bin: belongs to another run");
}

TEST_F(RunDir, ResumeRefusesStepsBelowTheNewestCheckpoint) {
    ASSERT_EQ(train("-steps 6 -save_every 2").status, 0);
    expect_refused(train("-steps 3 -save_every 2 -resume 1"), "is below the newest checkpoint");
}

TEST_F(RunDir, ResumeOfAFinishedRunSaysSoAndChangesNothing) {
    ASSERT_EQ(train("-steps 3").status, 0);
    const std::string log = read_file(dir + "out/log.jsonl");
    Result r = train("-steps 3 -resume 1");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("is complete (3 of 3 steps"), std::string::npos) << r.out;
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
}

TEST_F(RunDir, FailedLogWriteStopsWithStatus4AndAParseableLog) {
    // Files are limited to 80,000 bytes: the checkpoint pairs (37 and 73 KB) fit, the log of
    // 2000 step records does not.
    Result r = run(train_args("-steps 2000 -save_every 100"), 80000);
    ASSERT_EQ(r.status, 4) << r.out << r.err;
    EXPECT_NE(r.err.find("log.jsonl: cannot write a log record"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    const std::string log = read_file(dir + "out/log.jsonl");
    ASSERT_FALSE(log.empty());
    EXPECT_EQ(log.back(), '\n');
    size_t records = 0;
    for (const std::string& line : lines(log)) {
        EXPECT_TRUE(line.front() == '{' && line.back() == '}' && json_numbers(line, "step").size() == 1) << line;
        records++;
    }
    EXPECT_LT(records, 2000u);
    // The last complete pair is readable; nothing half-written is left.
    const std::vector<std::string> files = checkpoint_files();
    ASSERT_FALSE(files.empty());
    EXPECT_EQ(files.size() % 2, 0u);
    for (const std::string& f : files) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
    EXPECT_NO_THROW(read_checkpoint_config(dir + "out/" + files[files.size() / 2 - 1]));
}

TEST_F(RunDir, FailedCheckpointWriteStopsWithStatus4AndLeavesNoHalfPair) {
    // 50,000 bytes: the model file (37 KB) is written, its optimiser state (73 KB) cannot be.
    Result r = run(train_args("-steps 6 -save_every 3"), 50000);
    ASSERT_EQ(r.status, 4) << r.out << r.err;
    EXPECT_NE(r.err.find("state_00000003.bin: write failed"), std::string::npos) << r.err;
    EXPECT_TRUE(checkpoint_files().empty()) << checkpoint_files()[0];
    EXPECT_EQ(losses(read_file(dir + "out/log.jsonl")).size(), 3u);
}

TEST_F(RunDir, StepLinesShowElapsedAndEtaAndTheRunEndsWithASummary) {
    std::string args = train_args("-steps 3 -eval_batches 1");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 3");
    Result r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("step     2/3 | loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", ETA "), std::string::npos) << r.out;
    const std::string last = lines(r.out).back();
    EXPECT_EQ(last.rfind("done: 3 steps in ", 0), 0u) << last;
    EXPECT_NE(last.find("| final train loss "), std::string::npos) << last;
    EXPECT_NE(last.find("| val loss " + config_line(lines(read_file(dir + "out/log.jsonl")).back(), "val_loss")),
              std::string::npos) << last;
    EXPECT_NE(last.find("checkpoint " + dir + "out/model_00000003.bin"), std::string::npos) << last;
}

TEST_F(RunDir, ResumeIgnoresAndRemovesFilesAKilledRunLeftHalfWritten) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    std::remove((dir + "out/model_00000004.bin").c_str());
    std::rename((dir + "out/state_00000004.bin").c_str(), (dir + "out/state_00000004.bin.tmp").c_str());
    std::ofstream(dir + "out/model_00000004.bin.tmp") << "half";
    Result r = train("-steps 4 -save_every 2 -resume 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("continuing at step 2 of 4"), std::string::npos) << r.out;
    const std::vector<std::string> expected = {"model_00000002.bin", "model_00000004.bin", "state_00000002.bin",
                                               "state_00000004.bin"};
    EXPECT_EQ(checkpoint_files(), expected);
}

TEST_F(RunDir, CpuFallbackSaysNoGpuAndDtIsWrittenAsGiven) {
    Result r = run("./train -threads 1 -init l2h2c16v96t16 -ln peri -dt 0.1 -train_data " + dir +
                   "train_*.bin -B 2 -T 8 -eval_every 0 -steps 1 -out " + dir + "out");
    ASSERT_EQ(r.status, 0) << r.err;
    if (r.out.find("backend: cpu") == std::string::npos) GTEST_SKIP() << "a CUDA device is present";
    EXPECT_EQ(r.out.rfind("device: no GPU found, running on the CPU (", 0), 0u) << r.out;
    EXPECT_NE(read_file(dir + "out/config.json").find("\"dt\": 0.1,"), std::string::npos);
}

TEST_F(RunDir, SweepDryRunQuotesItsGlobsAndPlotRefusesAMissingFolder) {
    Result r = run("python3 sweep.py --preset e1 --dry-run --out " + dir + "sweep");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("-train_data '"), std::string::npos) << r.out;
    r = run("python3 plot.py " + dir + " --out " + dir + "missing/x.png");
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "plot.py: --out " + dir + "missing/x.png: the folder " + dir + "missing does not exist\n");
}

TEST_F(RunDir, InitNamingAFolderSaysHowToResume) {
    expect_refused(run("./train -device cpu -init " + dir + " -out " + dir + "out"), "is a folder, not a checkpoint file");
}

TEST_F(RunDir, EvalChecksItsOutputsAndBatchesBeforeWork) {
    const std::string eval = "./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -T 8 ";
    expect_refused(run(eval + "-json " + dir + "missing/e.json"), "flag -json");
    expect_refused(run(eval + "-pairs " + dir), "flag -pairs");
    // 500 tokens hold 7 distinct batches of 8 x 8 + 1.
    expect_refused(run(eval + "-B 8 -eval_batches 8"), "flag -eval_batches: 8 batches but");
    Result r = run(eval + "-B 8 -eval_batches 8 -allow_repeats 1 -diag_batches 0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("batches 1-8 of the 7 distinct ones, in order; batches after 7 repeat"), std::string::npos) << r.out;
    r = run(eval + "-eval_batches 2 -diag_batches 1");
    EXPECT_NE(r.out.find("batches 1-2 (diagnostics 1-1) of the 7 distinct ones, in order, none repeated"),
              std::string::npos) << r.out;
    // The bundled GPT-2 tokenizer does not fit the tiny model's 96 tokens: said, not silent.
    EXPECT_NE(r.out.find("but the model's vocabulary is 96"), std::string::npos) << r.out;
}

TEST_F(RunDir, EvalLowersItsDefaultBatchToFitTheShard) {
    write_random_shard(dir + "small_000.bin", 100, 96, 4);  // B = 8 at T = 16 needs 129 tokens
    Result r = run("./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "small_*.bin -T 16 -eval_batches 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("default B=8 lowered to 4"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("B=4 T=16"), std::string::npos) << r.out;
}

TEST_F(RunDir, TokenizeHelpPrintsUsage) {
    Result r = run("./tokenize -h");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.rfind("usage: ./tokenize", 0), 0u) << r.out;
}


// ---------------------------------------------------------------------------------------------
// Nothing a user gives destroys a file or overflows a count (docs/train.md §3)

// Sets header word 3 (the tokenizer fingerprint, docs/formats.md §1) of the shard at `path`.
void set_shard_tokenizer(const std::string& path, int32_t fingerprint) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3 * sizeof(int32_t));
    f.write(reinterpret_cast<const char*>(&fingerprint), sizeof fingerprint);
}

TEST_F(RunDir, CountsThatOverflowAreRefusedBeforeAnyFileIsWritten) {
    // 2^40 tokens per step of B*T = 16: 2^36 micro-steps, which an int cannot count.
    expect_refused(train("-steps 2 -total_batch 1099511627776"), "micro-steps of 16 tokens per step, more than 2147483647");
    // 2^30 steps of 2^40 tokens: 2^70 tokens, beyond 64 bits.
    std::string args = train_args("-steps 1073741824 -total_batch 1099511627776");
    args.replace(args.find("-B 2 "), 5, "-B 65536 ");
    expect_refused(run(args), "flags -steps and -total_batch: steps*total_batch: 1073741824 x 1099511627776 overflows");
    expect_refused(train("-steps 2 -total_batch 8"), "flag -total_batch: 8 is not a multiple of B*T = 16");
    EXPECT_FALSE(std::filesystem::exists(dir + "out"));
}

TEST_F(RunDir, TrainRefusesMoreEvalBatchesThanTheShardsHoldUnlessAllowed) {
    std::string args = train_args("-steps 2 -eval_batches 32");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 2");
    // 500 tokens hold 31 distinct batches of 2 x 8 + 1.
    expect_refused(run(args), "flag -eval_batches: 32 batches but " + dir + "val_000.bin holds 31 distinct batches");
    EXPECT_FALSE(std::filesystem::exists(dir + "out"));
    Result r = run(args + " -allow_repeats 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("val batches: 32 per evaluation but 31 distinct ones"), std::string::npos) << r.out;
}

TEST_F(RunDir, ASignalInterruptsAnEvaluationAndTheStepsCheckpointStays) {
    ASSERT_EQ(train("-steps 2").status, 0);
    // Resumed at step 2 with an evaluation there of ten million batches (hours): SIGTERM ends it.
    std::string args = train_args("-steps 4 -resume 1 -change_steps 1 -eval_batches 10000000 -allow_repeats 1");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 2");
    const pid_t pid = start(args, "long");
    wait_for_lines(dir + "long.stdout", 6);  // through "output: ... (resuming)" and the resume line
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto sent = std::chrono::steady_clock::now();
    kill(pid, SIGTERM);
    Result r = finish(pid, "long");
    EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(20)) << "the evaluation went on";
    ASSERT_EQ(r.status, 143) << r.out << r.err;
    EXPECT_NE(r.out.find("stopped by SIGTERM in an evaluation after 2 of 4 steps: continue with the same command and "
                         "-resume 1"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("val loss"), std::string::npos) << r.out;
    const std::vector<std::string> pair = {"model_00000002.bin", "state_00000002.bin"};
    EXPECT_EQ(checkpoint_files(), pair);
    EXPECT_EQ(losses(read_file(dir + "out/log.jsonl")).size(), 2u);
}

TEST_F(RunDir, ASecondSignalOfEitherKindQuitsAtOnce) {
    // One step of 2^26 micro-steps (minutes): the first SIGTERM waits for its end, a SIGINT then ends the process.
    const pid_t pid = start(train_args("-steps 2 -total_batch 1073741824"), "slow");
    wait_for_text(dir + "slow.stdout", "output: ");  // training has begun (in start-up a signal ends ./train at once)
    kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (read_file(dir + "slow.stderr").find("stopping after the current step") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(pid, SIGINT);
    const auto sent = std::chrono::steady_clock::now();
    Result r = finish(pid, "slow");
    EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(10));
    EXPECT_EQ(r.status, -SIGINT) << r.out << r.err;  // ended by the signal itself, as a shell reports with 130
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;  // the blank line and one message
}

TEST_F(RunDir, ShardsOfDifferentTokenizersAreRefusedAcrossTrainAndValData) {
    set_shard_tokenizer(dir + "train_000.bin", 0x1234);
    set_shard_tokenizer(dir + "other_000.bin", 0x5678);
    set_shard_tokenizer(dir + "val_000.bin", 0x5678);
    std::string args = train_args("-steps 2");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 1");
    expect_refused(run(args), "made by tokenizer 0x00005678, but " + dir + "train_000.bin by tokenizer 0x00001234");
    // One glob over both: the loader refuses the mixture.
    args = train_args("-steps 2");
    args.replace(args.find(dir + "train_*.bin"), dir.size() + 11, "'" + dir + "*[nr]_000.bin'");
    expect_refused(run(args), "shards of different tokenizers cannot be read together");
}

// -fused auto, the default, has nothing to fuse on the CPU and is accepted there, given or not;
// all and none choose among CUDA products and are refused, naming the value.
TEST_F(RunDir, FusedAutoIsAcceptedOnTheCpu) {
    Result r = train("-steps 2 -fused auto");
    EXPECT_EQ(r.status, 0) << r.err;
    const std::string eval = "./eval -device cpu -model " + dir + "out/model_00000002.bin -val_data " + dir +
                             "val_*.bin -T 8 -B 2 -eval_batches 1 -diag_batches 0 -fused ";
    r = run(eval + "auto");
    EXPECT_EQ(r.status, 0) << r.err;
    for (const char* value : {"all", "none"}) {
        expect_refused(train(std::string("-steps 2 -overwrite 1 -fused ") + value),
                       std::string("flag -fused: ") + value + " chooses how the CUDA backend");
        expect_refused(run(eval + value), std::string("flag -fused: ") + value + " chooses how the CUDA backend");
    }
}

TEST_F(RunDir, ValidationDataThatIsTrainingDataIsWarnedAbout) {
    std::string args = train_args("-steps 2 -eval_batches 1");
    args.replace(args.find("val_*.bin"), 9, "train_000.bin");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 1");
    Result r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("warning: the validation shard " + dir + "train_000.bin is also training data"),
              std::string::npos) << r.out;
}

TEST_F(RunDir, TrainRefusesAnInputAmongItsOutputFolderFiles) {
    ASSERT_EQ(train("-steps 2").status, 0);
    std::filesystem::create_hard_link(dir + "out/model_00000002.bin", dir + "linked.bin");
    std::string args = train_args("-steps 2 -overwrite 1");
    args.replace(args.find(dir + "tiny.bin"), dir.size() + 8, dir + "linked.bin");
    expect_refused(run(args), "-out " + dir + "out/model_00000002.bin is the -init file " + dir + "linked.bin");
    // A shard under a name the run writes, in the -out folder (-overwrite 1 would remove it).
    std::filesystem::copy_file(dir + "train_000.bin", dir + "out/model_00000009.bin");
    args = train_args("-steps 2 -overwrite 1");
    args.replace(args.find(dir + "train_*.bin"), dir.size() + 11, dir + "out/model_00000009.bin");
    expect_refused(run(args), "-out " + dir + "out/model_00000009.bin is the -train_data shard");
}

TEST_F(RunDir, EvalRefusesAnOutputThatIsAnInput) {
    const std::string eval = "./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -T 8 ";
    const std::string model = read_file(dir + "tiny.bin");
    expect_refused(run(eval + "-json " + dir + "tiny.bin"), "flag -json " + dir + "tiny.bin is the -model file");
    EXPECT_EQ(read_file(dir + "tiny.bin"), model);
    std::filesystem::create_symlink(dir + "val_000.bin", dir + "link.json");
    expect_refused(run(eval + "-pairs " + dir + "link.json"), "is the -val_data shard " + dir + "val_000.bin");
    expect_refused(run(eval + "-json " + dir + "a.json -pairs " + dir + "a.json"),
                   "flag -pairs " + dir + "a.json and flag -json " + dir + "a.json lead to one file");
    if (geteuid() == 0)  // root passes access() for /sys: creating the file is the test
        expect_refused(run(eval + "-json /sys/x.json"), "flag -json /sys/x.json: cannot create a file there");
}

TEST_F(RunDir, ResumeRefusesAModelOfAnotherRunOfTheSameShape) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    ASSERT_EQ(train("-steps 4 -save_every 2 -lr 1e-3", "other").status, 0);
    std::remove((dir + "out/model_00000004.bin").c_str());
    std::remove((dir + "out/state_00000004.bin").c_str());
    std::filesystem::copy_file(dir + "other/model_00000002.bin", dir + "out/model_00000002.bin",
                               std::filesystem::copy_options::overwrite_existing);
    expect_refused(train("-steps 4 -save_every 2 -resume 1"), "out/model_00000002.bin: belongs to another run (run id ");
    std::filesystem::copy_file(dir + "other/state_00000002.bin", dir + "out/state_00000002.bin",
                               std::filesystem::copy_options::overwrite_existing);
    expect_refused(train("-steps 4 -save_every 2 -resume 1"), "out/config.json has \"");
}

TEST_F(RunDir, ElapsedContinuesAcrossResumeAndARefusedStepsChangeNamesTheFlag) {
    ASSERT_EQ(train("-steps 2").status, 0);
    std::vector<double> first;
    for (const std::string& line : lines(read_file(dir + "out/log.jsonl")))
        if (line.find("\"elapsed\"") != std::string::npos) first.push_back(json_number(line, "elapsed"));
    ASSERT_EQ(first.size(), 2u);
    expect_refused(train("-steps 4 -resume 1"), "give -change_steps 1 to change -steps on purpose");
    ASSERT_EQ(train("-steps 4 -resume 1 -change_steps 1").status, 0);
    std::vector<double> all;
    for (const std::string& line : lines(read_file(dir + "out/log.jsonl")))
        if (line.find("\"elapsed\"") != std::string::npos) all.push_back(json_number(line, "elapsed"));
    ASSERT_EQ(all.size(), 4u);
    EXPECT_GE(all[2], first[1]);  // counted on from the resumed run's time, not from 0
    EXPECT_GE(all[3], all[2]);
}

TEST_F(RunDir, BadSpellingsOfFlagsAndLearningRatesGetALineNamingThem) {
    expect_refused(train("-B4"), "flag -B4: flags and values are separate words: -B 4");
    expect_refused(train("-lr=1e-3 -steps 2"), "flags and values are separate words: -lr 1e-3");
    expect_refused(run("./train -device cpu -train_data ''"), "flag -train_data: the value is empty");
    expect_refused(train("-lr 0"), "flag -lr: 0 is out of range (0, 10]");
    expect_refused(train("-lr 1e-3 -lr_min 2e-3"), "flag -lr_min: 0.002 exceeds -lr 0.001");
    std::string args = train_args("-steps 2");
    Result r = run(args.replace(args.find("-threads 1 "), 11, "-threads 1000 "));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("warning: -threads 1000 is more than the "), std::string::npos) << r.out;
}

TEST_F(RunDir, EtaLeavesTheStartUpEvaluationOut) {
    // A start-up evaluation far longer than the 3 steps: the ETA after step 0 is about two steps' time.
    std::string args = train_args("-steps 3 -eval_batches 20000 -allow_repeats 1");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 100");
    Result r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    const size_t at = r.out.find("step     0/3");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    // "..., 1.3s, ETA 0.0s": elapsed counts the evaluation, the ETA the two steps left at step 0's pace.
    const size_t eta = line.find(", ETA "), comma = line.rfind("| ", eta);
    ASSERT_NE(eta, std::string::npos) << line;
    const double elapsed_s = std::atof(line.substr(comma + 2).c_str()), eta_s = std::atof(line.substr(eta + 6).c_str());
    EXPECT_GT(elapsed_s, 0.2) << line;
    EXPECT_LT(eta_s, elapsed_s / 4) << line;
}

TEST_F(RunDir, SamplesDuringTrainingLeaveTheRunExactlyAsWithout) {
    std::string base = train_args("-steps 5 -save_every 1 -shuffle 1 -eval_every 2 -eval_batches 2");
    base.replace(base.find(dir + "tiny.bin"), dir.size() + 8, long_window_model(dir));
    base.replace(base.find("-eval_every 0 "), 14, "");
    const std::string plain = base, sampled = base + " -sample_every 2 -sample_tokens 8 -tokenizer data/gpt2_tokenizer.bin";
    Result a = run(plain);
    ASSERT_EQ(a.status, 0) << a.err;
    Result b = run(std::string(sampled).replace(sampled.find("-out " + dir + "out"), 5 + dir.size() + 3, "-out " + dir + "sampled"));
    ASSERT_EQ(b.status, 0) << b.err;
    const std::string log_a = read_file(dir + "out/log.jsonl"), log_b = read_file(dir + "sampled/log.jsonl");
    EXPECT_EQ(losses(log_a).size(), 5u);
    EXPECT_EQ(losses(log_a), losses(log_b));
    EXPECT_EQ(json_numbers(log_a, "val_loss"), json_numbers(log_b, "val_loss"));
    for (int n = 1; n <= 5; n++)
        for (const char* stem : {"model", "state"}) {
            char name[32];
            std::snprintf(name, sizeof name, "%s_%08d.bin", stem, n);
            EXPECT_EQ(read_file(dir + "out/" + name), read_file(dir + "sampled/" + name)) << name;
        }
    // After steps 2, 4 and the last, under those counts of steps done (the weights' val loss and
    // checkpoint have the same number): printed and logged, 8 tokens each.
    const std::vector<std::string> samples = log_lines(log_b, "\"event\": \"sample\"");
    ASSERT_EQ(samples.size(), 3u) << log_b;
    EXPECT_EQ(lines(log_b).size(), lines(log_a).size() + 3);
    for (const char* step : {"step     2 | sample: ", "step     4 | sample: ", "step     5 | sample: "})
        EXPECT_NE(b.out.find(step), std::string::npos) << b.out;
    EXPECT_NE(b.out.find("step     2 | val loss"), std::string::npos) << b.out;
    EXPECT_EQ(json_numbers(samples[0], "step"), std::vector<double>{2}) << samples[0];
    EXPECT_EQ(log_lines(log_a, "\"event\": \"sample\"").size(), 0u);
    EXPECT_NE(samples[0].find("\"prompt\": \""), std::string::npos) << samples[0];
    EXPECT_NE(samples[0].find("\"text\": \""), std::string::npos) << samples[0];
}

TEST_F(RunDir, SamplingIsRefusedAtStartUpWithoutAFittingTokenizer) {
    expect_refused(train("-steps 2 -sample_every 1 -tokenizer " + dir + "none.bin"), "flag -tokenizer: ");
    expect_refused(train("-steps 2 -sample_every 1 -tokenizer " + dir), "flag -tokenizer: ");
    // The tiny model's maxT 16 leaves no room after the 16 prompt tokens.
    expect_refused(train("-steps 2 -sample_every 1"), "flag -sample_tokens: 16 prompt tokens + 32 exceed the model's maxT 16");
    // Shards of the compact tokenizer with GPT-2's: refused; with their own, samples.
    const std::string compact = "./train -device cpu -threads 1 -init l1h1c16v4096t32 -B 2 -T 8 -steps 1 -eval_every 0 "
                                "-train_data data/mobydick_v4096_train_*.bin -val_data data/mobydick_v4096_val_*.bin "
                                "-sample_every 1 -sample_tokens 4 -out " + dir + "compact ";
    expect_refused(run(compact), "flag -tokenizer: data/gpt2_tokenizer.bin is tokenizer ");
    EXPECT_FALSE(exists(dir + "compact"));
    Result r = run(compact + "-tokenizer data/mobydick_v4096_tokenizer.bin");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("step     1 | sample: "), std::string::npos) << r.out;
    // At the edges: 16 prompt tokens + 16 fill maxT 32 exactly; a tokenizer of fewer tokens than
    // the model's vocabulary (4096 for 8000) is refused.
    const std::string edge = "./train -device cpu -threads 1 -B 2 -T 8 -steps 1 -eval_every 0 "
                             "-train_data data/mobydick_v4096_train_*.bin -val_data data/mobydick_v4096_val_*.bin "
                             "-sample_every 1 -tokenizer data/mobydick_v4096_tokenizer.bin ";
    r = run(edge + "-init l1h1c16v4096t32 -sample_tokens 16 -out " + dir + "full_window");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("step     1 | sample: "), std::string::npos) << r.out;
    expect_refused(run(edge + "-init l1h1c16v8000t32 -sample_tokens 4 -out " + dir + "wide"),
                   "flag -tokenizer: data/mobydick_v4096_tokenizer.bin has 4096 tokens but the model's vocabulary is 8000");
    EXPECT_FALSE(exists(dir + "wide"));
}

TEST_F(RunDir, KeepCheckpointsLeavesTheNewestPairsAndResumeContinuesFromThem) {
    ASSERT_EQ(train("-steps 4 -save_every 1 -keep_checkpoints 2").status, 0);
    const std::vector<std::string> newest = {"model_00000003.bin", "model_00000004.bin", "state_00000003.bin",
                                             "state_00000004.bin"};
    EXPECT_EQ(checkpoint_files(), newest);
    // A run of 3 steps with K = 2, resumed to 4, ends as the same run without K does.
    const std::string resume = "-steps 4 -change_steps 1 -resume 1 -save_every 1";
    ASSERT_EQ(train("-steps 3 -save_every 1", "whole").status, 0);
    ASSERT_EQ(train(resume, "whole").status, 0);
    std::filesystem::remove_all(dir + "out");
    ASSERT_EQ(train("-steps 3 -save_every 1 -keep_checkpoints 2").status, 0);
    EXPECT_EQ(checkpoint_files(), (std::vector<std::string>{"model_00000002.bin", "model_00000003.bin",
                                                            "state_00000002.bin", "state_00000003.bin"}));
    Result r = train(resume + " -keep_checkpoints 2");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("resume: continuing at step 3 of 4"), std::string::npos) << r.out;
    EXPECT_EQ(checkpoint_files(), newest);
    EXPECT_EQ(read_file(dir + "out/model_00000004.bin"), read_file(dir + "whole/model_00000004.bin"));
    // K = 1 with pairs every 3 steps of 5: the pairs at 3 and then 5; the final one stays.
    ASSERT_EQ(train("-steps 5 -save_every 3 -keep_checkpoints 1", "one").status, 0);
    EXPECT_EQ(listing(dir + "one").find("model_00000003.bin"), std::string::npos) << listing(dir + "one");
    EXPECT_NE(listing(dir + "one").find("model_00000005.bin"), std::string::npos) << listing(dir + "one");
    EXPECT_NE(listing(dir + "one").find("state_00000005.bin"), std::string::npos) << listing(dir + "one");
}

TEST_F(RunDir, EvalRunTakesTheModelDataAndTokenizerOfARunFolder) {
    ASSERT_EQ(train("-steps 3 -save_every 1").status, 0);
    const std::string flags = " -device cpu -B 2 -T 8 -eval_batches 2 -diag_batches 0";
    Result from_run = run("./eval -run " + dir + "out" + flags);
    ASSERT_EQ(from_run.status, 0) << from_run.err;
    // (The shell expanded train_args' globs: config.json records the files.)
    EXPECT_NE(from_run.out.find("run: " + dir + "out: -model " + dir + "out/model_00000003.bin, -val_data " + dir +
                                "val_000.bin, -train_data " + dir + "train_000.bin, -tokenizer data/gpt2_tokenizer.bin"),
              std::string::npos) << from_run.out;
    Result explicit_flags = run("./eval -model " + dir + "out/model_00000003.bin -val_data " + dir + "val_*.bin -train_data " +
                                dir + "train_*.bin" + flags);
    ASSERT_EQ(explicit_flags.status, 0) << explicit_flags.err;
    const auto loss_line = [](const std::string& out) { return out.substr(out.find("val loss "), out.find('\n', out.find("val loss ")) - out.find("val loss ")); };
    EXPECT_EQ(loss_line(from_run.out), loss_line(explicit_flags.out));
    // A flag given beside -run wins.
    Result older = run("./eval -run " + dir + "out -model " + dir + "out/model_00000001.bin" + flags);
    ASSERT_EQ(older.status, 0) << older.err;
    EXPECT_NE(older.out.find("model: " + dir + "out/model_00000001.bin"), std::string::npos) << older.out;
    EXPECT_NE(loss_line(older.out), loss_line(from_run.out));
    // Without -B, -T and -eval_batches: the run's own, said; one given beside -run wins.
    Result own = run("./eval -run " + dir + "out -device cpu -diag_batches 0");
    ASSERT_EQ(own.status, 0) << own.err;
    EXPECT_NE(own.out.find("-B 2, -T 8, -eval_batches 10, -tokenizer"), std::string::npos) << own.out;
    EXPECT_NE(own.out.find("B=2 T=8, batches 1-10 of"), std::string::npos) << own.out;
    Result beside = run("./eval -run " + dir + "out -device cpu -diag_batches 0 -T 4 -eval_batches 3");
    ASSERT_EQ(beside.status, 0) << beside.err;
    EXPECT_NE(beside.out.find("-train_data " + dir + "train_000.bin, -B 2, -tokenizer"), std::string::npos) << beside.out;
    EXPECT_NE(beside.out.find("B=2 T=4, batches 1-3 of"), std::string::npos) << beside.out;
    // A sweep keeps the final model alone: -run takes it.
    std::filesystem::create_directories(dir + "swept");
    for (const char* name : {"config.json", "log.jsonl", "model_00000003.bin"})
        std::filesystem::copy_file(dir + "out/" + name, dir + "swept/" + name);
    Result swept = run("./eval -run " + dir + "swept" + flags);
    ASSERT_EQ(swept.status, 0) << swept.err;
    EXPECT_NE(swept.out.find("-model " + dir + "swept/model_00000003.bin"), std::string::npos) << swept.out;
    EXPECT_EQ(loss_line(swept.out), loss_line(from_run.out));
    // Not a run folder; a run folder without a checkpoint pair.
    expect_refused(run("./eval -run " + dir + flags), "flag -run: " + dir + "config.json is missing");
    std::filesystem::create_directories(dir + "empty");
    std::filesystem::copy_file(dir + "out/config.json", dir + "empty/config.json");
    expect_refused(run("./eval -run " + dir + "empty" + flags), "flag -run: " + dir + "empty holds no complete checkpoint pair (model_N.bin with state_N.bin) and no final model");
}


// ---------------------------------------------------------------------------------------------
// No output replaces a run folder's file or an input, however its path is spelled (docs/train.md §3): each rule, each input flag, each spelling ("./", "..", a link).

// Three other spellings of the file DIR/`name` (dir ends in "/"): through "./", through
// "sub/.." (DIR/sub is made) and a symbolic link DIR/link_TAG to it.
std::vector<std::string> other_spellings(const std::string& dir, const std::string& name, const std::string& tag) {
    std::filesystem::create_directories(dir + "sub");
    std::filesystem::create_symlink(dir + name, dir + "link_" + tag);
    return {dir + "./" + name, dir + "sub/../" + name, dir + "link_" + tag};
}

// The names and contents of the files in `folder`, to see that a refused command wrote nothing.
std::map<std::string, std::string> contents(const std::string& folder) {
    std::map<std::string, std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(folder)) files[e.path().filename()] = read_file(e.path());
    return files;
}

TEST_F(RunDir, EvalRefusesAnOutputThatWouldReplaceARunFoldersFile) {
    ASSERT_EQ(train("-steps 2").status, 0);
    std::filesystem::create_directory_symlink(dir + "out", dir + "alias");
    const auto before = contents(dir + "out");
    const std::string eval = "./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -T 8 -B 2 "
                             "-eval_batches 1 -diag_batches 0 ";
    int i = 0;
    for (const char* name : {"config.json", "log.jsonl", "model_00000002.bin", "state_00000002.bin", "model_00000009.bin"}) {
        const bool present = exists(dir + "out/" + name);
        std::vector<std::string> spellings = {dir + "out/./" + name, dir + "sub/../out/" + name, dir + "alias/" + name};
        std::filesystem::create_directories(dir + "sub");
        if (present) {  // a link to the file itself
            std::filesystem::create_symlink(dir + "out/" + name, dir + "to_" + name);
            spellings.push_back(dir + "to_" + name);
        }
        for (const std::string& path : spellings) {
            const std::string flag = i++ % 2 ? "-pairs" : "-json";
            expect_refused(run(eval + flag + " " + path), "flag " + flag + " " + path + " would replace ");
        }
    }
    // -run reads the folder: its config.json is an output of no command.
    expect_refused(run("./eval -device cpu -run " + dir + "out -json " + dir + "out/config.json"), "would replace");
    EXPECT_EQ(contents(dir + "out"), before);
    // Another name in a run folder (as sweep.py writes eval.json), or a run file's name in a
    // folder that holds no run: written.
    std::filesystem::create_directories(dir + "plain");
    Result r = run(eval + "-json " + dir + "out/eval.json -pairs " + dir + "plain/log.jsonl");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(exists(dir + "out/eval.json"));
    EXPECT_TRUE(exists(dir + "plain/log.jsonl"));
}

TEST_F(RunDir, EvalRefusesEveryInputAsAnOutputUnderAnotherSpelling) {
    std::filesystem::copy_file(dir + "other_000.bin", dir + "tok.bin");  // refused before it is read
    const std::string eval = "./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -train_data " +
                             dir + "train_*.bin -tokenizer " + dir + "tok.bin -T 8 ";
    const std::vector<std::pair<std::string, std::string>> inputs = {{"tiny.bin", "the -model file"},
                                                                     {"val_000.bin", "the -val_data shard"},
                                                                     {"train_000.bin", "the -train_data shard"},
                                                                     {"tok.bin", "the -tokenizer file"}};
    const auto before = contents(dir);
    int i = 0;
    for (const auto& [name, what] : inputs)
        for (const std::string& path : other_spellings(dir, name, name)) {
            const std::string flag = i++ % 2 ? "-pairs" : "-json";
            expect_refused(run(eval + flag + " " + path), "flag " + flag + " " + path + " is " + what + " " + dir);
        }
    for (const auto& [name, what] : inputs) EXPECT_EQ(read_file(dir + name), before.at(name)) << name;
}

TEST_F(RunDir, TrainRefusesEveryInputAmongItsFolderFilesUnderAnotherSpelling) {
    ASSERT_EQ(train("-steps 2").status, 0);
    // Inputs under names the run writes, in its folder (-overwrite 1 would remove them).
    std::filesystem::copy_file(dir + "tiny.bin", dir + "out/model_00000009.bin");
    std::filesystem::copy_file(dir + "train_000.bin", dir + "out/model_00000007.bin");
    std::filesystem::copy_file(dir + "val_000.bin", dir + "out/state_00000007.bin");
    std::filesystem::create_directories(dir + "sub");
    std::filesystem::create_symlink(dir + "out/state_00000007.bin", dir + "vlink.bin");
    const auto before = contents(dir + "out");
    // (flag to replace in train_args, its value, flags added, the refusal)
    const std::vector<std::vector<std::string>> cases = {
        {"-init " + dir + "tiny.bin", "-init " + dir + "out/./model_00000009.bin", "", "is the -init file"},
        {"-train_data " + dir + "train_*.bin", "-train_data " + dir + "sub/../out/model_00000007.bin", "",
         "is the -train_data shard"},
        {"-val_data " + dir + "val_*.bin -B 2 -T 8 -eval_every 0", "-val_data " + dir + "vlink.bin -B 2 -T 8 -eval_every 1",
         "", "is the -val_data shard"},
        {"-val_data " + dir + "val_*.bin", "-val_data " + dir + "out/./state_00000007.bin", "-sample_every 1",
         "is the -val_data shard"},
        {"-out " + dir + "out", "-out " + dir + "out -tokenizer " + dir + "out/../out/log.jsonl", "-sample_every 1",
         "is the -tokenizer file"},
    };
    for (const auto& c : cases) {
        std::string args = train_args("-steps 2 -overwrite 1 " + c[2]);
        args.replace(args.find(c[0]), c[0].size(), c[1]);
        expect_refused(run(args), c[3]);
    }
    EXPECT_EQ(contents(dir + "out"), before);
}

TEST_F(RunDir, ResumeMakesTheFinalEvaluationThatAStopLeftUndone) {
    ASSERT_EQ(train("-steps 2").status, 0);
    // Continued to 3 steps with a final evaluation of ten million batches (hours): SIGTERM in it.
    std::string args = train_args("-steps 3 -resume 1 -change_steps 1 -eval_batches 10000000 -allow_repeats 1");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 1000");
    const pid_t pid = start(args, "long");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (read_file(dir + "long.stdout").find("saved " + dir + "out/model_00000003.bin") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGTERM);
    Result r = finish(pid, "long");
    ASSERT_EQ(r.status, 143) << r.out << r.err;
    EXPECT_NE(r.out.find("stopped by SIGTERM in the final evaluation after 3 of 3 steps: its final evaluation was not "
                         "made: the same command with -resume 1 makes it"), std::string::npos) << r.out;
    EXPECT_EQ(log_lines(read_file(dir + "out/log.jsonl"), "\"event\": \"outcome\"").size(), 0u);
    // The same command (fewer batches, which may change) makes it and logs the outcome.
    args.replace(args.find("-eval_batches 10000000"), 22, "-eval_batches 2");
    r = run(args);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("resume: the final evaluation at step 3 of 3"), std::string::npos) << r.out;
    const std::string log = read_file(dir + "out/log.jsonl");
    const std::vector<std::string> outcome = log_lines(log, "\"event\": \"outcome\"");
    ASSERT_EQ(outcome.size(), 1u) << log;
    EXPECT_EQ(json_numbers(outcome[0], "step"), std::vector<double>{3});
    EXPECT_TRUE(std::isfinite(json_number(outcome[0], "val_loss"))) << outcome[0];
    EXPECT_EQ(log_lines(log, "\"val_loss\"").size(), 2u) << "the val record and the outcome: " << log;
    EXPECT_EQ(losses(log).size(), 3u);
    // Now complete: a further resume changes nothing.
    r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("is complete (3 of 3 steps"), std::string::npos) << r.out;
    EXPECT_EQ(read_file(dir + "out/log.jsonl"), log);
}

TEST_F(RunDir, AStopInTheStartUpEvaluationLeavesAFolderTheSameCommandStarts) {
    std::string args = train_args("-steps 2 -eval_batches 10000000 -allow_repeats 1");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 1");
    const pid_t pid = start(args, "long");
    wait_for_lines(dir + "long.stdout", 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (read_file(dir + "long.stdout").find("output: ") == std::string::npos && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGINT);
    Result r = finish(pid, "long");
    ASSERT_EQ(r.status, 130) << r.out << r.err;
    EXPECT_NE(r.out.find("after 0 of 2 steps: nothing trained"), std::string::npos) << r.out;
    EXPECT_EQ(listing(dir + "out"), "");
    args.replace(args.find("-eval_batches 10000000"), 22, "-eval_batches 2");
    r = run(args);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
}

TEST_F(RunDir, ATruncatedNewestStateIsRefusedNamingTheOlderWholePair) {
    ASSERT_EQ(train("-steps 4 -save_every 2").status, 0);
    std::filesystem::resize_file(dir + "out/state_00000004.bin", 2000);
    expect_refused(train("-steps 4 -save_every 2 -resume 1"),
                   "; the older pair " + dir + "out/model_00000002.bin and " + dir +
                   "out/state_00000002.bin reads whole: move the newer pair out of " + dir + "out to resume from it");
    // With the older pair damaged too, nothing is named.
    std::filesystem::resize_file(dir + "out/model_00000002.bin", 2000);
    Result r = train("-steps 4 -save_every 2 -resume 1");
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err.find("the older pair"), std::string::npos) << r.err;
}

TEST_F(RunDir, ResumeRefusesACheckpointWithoutARunIdBesideAStateWithOne) {
    ASSERT_EQ(train("-steps 2").status, 0);
    // The run's own weights, written as an older ./train (or llm.c's tools) writes them: run id 0.
    std::vector<float> params;
    const ModelConfig cfg = read_checkpoint(dir + "out/model_00000002.bin", &params);
    write_checkpoint(dir + "out/model_00000002.bin", cfg, params.data());
    expect_refused(train("-steps 2 -resume 1"), "out/model_00000002.bin: belongs to another run (run id 0000000000000000)");
}

TEST_F(RunDir, PrecisionBf16IsRefusedOnTheCpu) {
    expect_refused(train("-steps 2 -precision bf16"), "flag -precision: bf16 is the CUDA backend's mixed precision");
    expect_refused(run("./eval -device cpu -precision bf16 -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin"),
                   "flag -precision: bf16");
    EXPECT_FALSE(exists(dir + "out"));
    EXPECT_EQ(train("-steps 2 -precision fp32").status, 0);
}

// ./eval of weights that are not finite: NaN, +inf, -inf in one weight each.
TEST_F(RunDir, EvalOfNonFiniteWeightsGivesNullMetricsAndExitStatus3) {
    std::vector<float> params;
    const ModelConfig cfg = read_checkpoint(dir + "tiny.bin", &params);
    // In the embedding, which every loss reads; -inf in the position row 15, which T = 8 never
    // reads: the loss stays finite, the model is still not.
    const size_t unused_position = param_offsets(cfg)[P_WPE] + 15 * cfg.C;
    const std::vector<std::pair<float, size_t>> cases = {{NAN, 100}, {INFINITY, 137}, {-INFINITY, unused_position}};
    for (const auto& [bad, at] : cases) {
        std::vector<float> broken = params;
        broken[at] = bad;
        write_checkpoint(dir + "bad.bin", cfg, broken.data());
        Result r = run("./eval -device cpu -model " + dir + "bad.bin -val_data " + dir + "val_*.bin -train_data " + dir +
                       "train_*.bin -T 8 -B 2 -eval_batches 2 -json " + dir + "bad.json -pairs " + dir + "bad.jsonl");
        EXPECT_EQ(r.status, 3) << r.out << r.err;
        EXPECT_NE(r.out.find("nonfinite: 1 of the model's " + std::to_string(params.size()) + " weights are not finite"),
                  std::string::npos) << r.out;
        const std::string json = read_file(dir + "bad.json");
        for (const char* key : {"val_loss", "val_ppl", "accuracy", "ppl_seq", "logit_max", "log_z_mean"})
            EXPECT_TRUE(std::isnan(json_number(json, key))) << key << " in " << json;
        for (const char* key : {"rouge", "layers", "sensitivity", "uncertainty"})
            EXPECT_NE(json.find(std::string("\"") + key + "\": null"), std::string::npos) << key << " in " << json;
        EXPECT_TRUE(std::isfinite(json_number(json, "unigram_ce"))) << "the baselines need no model: " << json;
        EXPECT_FALSE(exists(dir + "bad.jsonl"));
    }
    // Finite weights whose outputs overflow (every embedding entry 3e38: their sum is beyond
    // float32): the loss is not finite, so neither is any metric.
    std::vector<float> huge = params;
    const ParamTensors<float> p = param_tensors(huge.data(), cfg);
    std::fill(p.wte, p.wte + (size_t)cfg.Vp * cfg.C, 3e38f);
    std::fill(p.wpe, p.wpe + (size_t)cfg.maxT * cfg.C, 3e38f);
    write_checkpoint(dir + "huge.bin", cfg, huge.data());
    Result r = run("./eval -device cpu -model " + dir + "huge.bin -val_data " + dir + "val_*.bin -T 8 -B 2 -eval_batches 1");
    EXPECT_EQ(r.status, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("nonfinite: the validation loss is not finite"), std::string::npos) << r.out;
}

// A compact-vocabulary model made to predict the catch-all id everywhere (the final LayerNorm's
// gain 0 makes its output the bias b at every position; the catch-all's embedding row 10·b wins
// every logit): every prediction names no token, so its accuracy is 0, not the catch-all's share.
TEST_F(RunDir, EvalAccuracyLeavesOutTheCatchAllIdOfACompactVocabulary) {
    ModelConfig cfg = tiny_model(1, Placement::Pre);
    cfg.V = cfg.Vp = 4096;
    std::vector<float> params(num_parameters(cfg));
    init_parameters(cfg, params.data(), 3);
    const ParamTensors<float> p = param_tensors(params.data(), cfg);
    for (int c = 0; c < cfg.C; c++) {
        p.lnfw[c] = 0;
        p.lnfb[c] = 1;
        p.wte[(size_t)(cfg.V - 1) * cfg.C + c] = 10;
    }
    write_checkpoint(dir + "catch_all.bin", cfg, params.data());
    const std::string eval = "./eval -device cpu -model " + dir + "catch_all.bin -val_data 'data/mobydick_v4096_val_*.bin' "
                             "-train_data 'data/mobydick_v4096_train_*.bin' -T 16 -B 4 -eval_batches 4 -diag_batches 0 ";
    Result r = run(eval + "-tokenizer data/mobydick_v4096_tokenizer.bin -json " + dir + "e.json");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const std::string json = read_file(dir + "e.json");
    EXPECT_EQ(json_number(json, "catch_all_id"), 4095) << json;
    EXPECT_EQ(json_number(json, "accuracy"), 0) << json;
    EXPECT_GT(json_number(json, "tokens"), json_number(json, "accuracy_tokens")) << "some targets are the catch-all: " << json;
    EXPECT_NE(r.out.find("of the catch-all id 4095 left out"), std::string::npos) << r.out;
    // The GPT-2 vocabulary has no catch-all: every token counts.
    r = run("./eval -device cpu -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -T 8 -B 2 -eval_batches 2 "
            "-diag_batches 0 -json " + dir + "g.json");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const std::string gpt2 = read_file(dir + "g.json");
    EXPECT_NE(gpt2.find("\"catch_all_id\": null"), std::string::npos) << gpt2;
    EXPECT_EQ(json_number(gpt2, "accuracy_tokens"), json_number(gpt2, "tokens")) << gpt2;
}

TEST_F(RunDir, RefusalsNameWhatToGive) {
    // A tokenizer that is not the shards': the file that is.
    expect_refused(run("./train -device cpu -threads 1 -init l1h1c16v4096t32 -B 2 -T 8 -steps 1 -eval_every 0 "
                       "-train_data 'data/mobydick_v4096_train_*.bin' -val_data 'data/mobydick_v4096_val_*.bin' "
                       "-sample_every 1 -sample_tokens 4 -out " + dir + "compact"),
                   "was made by tokenizer 0x8d87728c: give -tokenizer data/mobydick_v4096_tokenizer.bin");
    // A compact-vocabulary model on the GPT-2 shards: the shards of its vocabulary.
    expect_refused(run("./train -device cpu -threads 1 -init l1h1c16v4096t32 -B 2 -T 8 -steps 1 -out " + dir + "v"),
                   "outside the vocabulary of 4096; shards of that vocabulary: -train_data "
                   "\"data/mobydick_v4096_train_*.bin\" -val_data \"data/mobydick_v4096_val_*.bin\"");
}

TEST_F(RunDir, StartUpLinesCountInTheSingularAndACollapseSaysWhy) {
    // A model whose logits are loud (its embedding, the tied head, ×1000) and that barely moves
    // (lr 1e-6) predicts worse than a unigram table: collapsed, and why.
    std::vector<float> params;
    const ModelConfig cfg = read_checkpoint(dir + "tiny.bin", &params);
    const ParamTensors<float> p = param_tensors(params.data(), cfg);
    for (size_t i = 0; i < (size_t)cfg.Vp * cfg.C; i++) p.wte[i] *= 1000;
    write_checkpoint(dir + "loud.bin", cfg, params.data());
    std::string args = train_args("-steps 2 -eval_batches 1 -lr 1e-6");
    args.replace(args.find("-eval_every 0"), 13, "-eval_every 2");
    args.replace(args.find(dir + "tiny.bin"), dir.size() + 8, dir + "loud.bin");
    Result r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* line : {"(1 file, 3000 tokens)", "(1 file, 500 tokens)", "(1 micro-step)", "1 thread)"})
        EXPECT_NE(r.out.find(line), std::string::npos) << line << " in " << r.out;
    EXPECT_NE(r.out.find("outcome: collapsed (final val loss "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" is not below unigram_ce "), std::string::npos) << r.out;
}

// -resume 1 refuses a run folder whose config.json is gone, records other model sizes than the
// checkpoint's, another seed or run id than the state file's, or a step-0 loss in log.jsonl
// other than the state file's: each a file of another run.
TEST_F(RunDir, ResumeRefusesAConfigOfAnotherRunOrNone) {
    ASSERT_EQ(train("-steps 2 -save_every 1").status, 0);
    const std::string config = dir + "out/config.json", original = read_file(config);
    const std::string resume = "-steps 3 -change_steps 1 -resume 1";
    const auto with = [&](const std::string& from, const std::string& to) {
        std::string text = original;
        const size_t at = text.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        std::ofstream(config) << text.replace(at, from.size(), to);
    };
    with("\"C\": 16", "\"C\": 32");
    expect_refused(train(resume), "model_00000002.bin: a model with C 16, but the run's is 32");
    with("\"seed\": 42", "\"seed\": 5");  // the state file's seed is the run's, 42
    expect_refused(train(resume + " -seed 5"), "flag -seed: 5 but the run being resumed has seed 42");
    with("\"run_id\": \"", "\"run_id\": \"0");
    expect_refused(train(resume), "state_00000002.bin: belongs to another run (run id ");
    std::ofstream(config) << original;
    const std::string log = read_file(dir + "out/log.jsonl");
    const size_t loss = log.find("\"loss\": ") + 8;
    std::ofstream(dir + "out/log.jsonl") << log.substr(0, loss) + "1" + log.substr(loss);  // another step-0 loss
    expect_refused(train(resume), "state_00000002.bin: belongs to another run (its step-0 loss ");
    std::filesystem::remove(config);
    expect_refused(train(resume), "config.json: missing, so -resume 1 cannot check that it continues the same run");
}

// An -out whose path cannot be looked at (a link that leads to itself on the way) is refused in
// one line naming the part and the reason, before any work.
TEST_F(RunDir, OutThroughALinkLoopIsRefused) {
    std::filesystem::create_symlink(dir + "loop", dir + "loop");
    expect_refused(train("-steps 2", "loop/run"), "flag -out: " + dir + "loop/run: Too many levels of symbolic links");
}

}  // namespace
