// ./train, ./eval and ./tokenize given paths that are not plain files (docs/cli.md §6), as a user
// meets them: every output flag on /dev/stdout (read back through a pipe), a FIFO with a reader,
// a link to a file (the target replaced, the link kept), a dangling link and a link loop; every
// input flag on a folder, a FIFO without a writer and /dev/zero (one line, exit status 2, before
// any work, no hang, no memory exhausted); a file-size limit (ulimit -f, SIGXFSZ not ignored) as a
// full disk; SIGHUP and a closed standard output (| head -1) during training; signals during a
// blocking write or read; and the refusals before work of docs/cli.md §6 (non-finite -init
// weights, an existing -export, two outputs that lead to one file). Every command runs under
// timeout(1): a hang fails its test instead of holding the suite. prepare_data.py, sweep.py and
// plot.py get the same paths in test/py/test_file_kinds.py. Runs the real binaries from the
// repository root after `make`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run/checkpoint.h"
#include "run/signals.h"
#include "test_files.h"

namespace {

namespace fs = std::filesystem;

struct Result {
    int status;  // exit status (124: timed out), or -signal when a signal ended the shell
    std::string out, err;
};

// Lines of `text`.
size_t line_count(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

// True when `path` is a symbolic link (not followed).
bool is_link(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// True when `path` is a FIFO (not followed).
bool is_fifo(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

class FileKinds : public ::testing::Test {
protected:
    std::string dir;  // scratch folder, ends in "/"
    ModelConfig cfg;

    void SetUp() override {
        dir = fresh_folder("file_kinds_");
        cfg = tiny_model(1, Placement::Peri);
        write_fresh_checkpoint(dir + "tiny.bin", cfg, 7);
        write_random_shard(dir + "train_000.bin", 3000, cfg.V, 1);
        write_random_shard(dir + "val_000.bin", 500, cfg.V, 2);
        fs::create_directory(dir + "folder");
        ASSERT_EQ(mkfifo((dir + "fifo").c_str(), 0644), 0);
        fs::create_symlink(dir + "nowhere/x", dir + "dangling");
        fs::create_symlink(dir + "loop_b", dir + "loop_a");
        fs::create_symlink(dir + "loop_a", dir + "loop_b");
    }

    // Runs `script` with bash, under `timeout -k 5 SECONDS`, stdout and stderr into files of dir.
    Result sh(const std::string& script, int seconds = 120) const {
        std::ofstream(dir + "script.sh") << script << "\n";
        const std::string command = "timeout -k 5 " + std::to_string(seconds) + " bash " + dir + "script.sh > " + dir +
                                    "sh.stdout 2> " + dir + "sh.stderr";
        const int raw = std::system(command.c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -WTERMSIG(raw), read_file(dir + "sh.stdout"), read_file(dir + "sh.stderr")};
    }

    // `program` with the flags of `base` ("-name value" pairs), those of `changes` (pairs too,
    // values without spaces) given instead or added.
    static std::string with(const std::string& program, const std::string& base, const std::string& changes) {
        std::vector<std::pair<std::string, std::string>> flags;
        for (const std::string& words : {base, changes}) {
            std::istringstream in(words);
            for (std::string name, value; in >> name >> value;) {
                auto same = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == name; });
                if (same != flags.end()) same->second = value;
                else flags.emplace_back(name, value);
            }
        }
        std::string command = program;
        for (const auto& [name, value] : flags) command += " " + name + " " + value;
        return command;
    }

    // ./eval of the tiny model on the tiny data, one batch, with the flags of `changes`.
    std::string eval(const std::string& changes) const {
        return with("./eval", "-device cpu -threads 1 -model " + dir + "tiny.bin -val_data " + dir + "val_*.bin -train_data " +
                                  dir + "train_*.bin -tokenizer data/gpt2_tokenizer.bin -T 8 -B 2 -eval_batches 1 -diag_batches 0",
                    changes);
    }

    // ./train of the tiny model on the tiny data into DIR/out, with the flags of `changes`.
    std::string train(const std::string& changes) const {
        return with("./train", "-device cpu -threads 1 -init " + dir + "tiny.bin -train_data " + dir + "train_*.bin -val_data " +
                                   dir + "val_*.bin -B 2 -T 8 -eval_every 0 -out " + dir + "out",
                    changes);
    }

    // ./tokenize -shard PATH of a short text.
    std::string shard_to(const std::string& path) const {
        return "echo 'Call me Ishmael.' | ./tokenize -tokenizer data/gpt2_tokenizer.bin -shard " + path;
    }

    // A refusal: status 2, one line on stderr that holds `what`.
    static void expect_refused(const Result& r, const std::string& what) {
        EXPECT_EQ(r.status, 2) << r.out << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err;
        EXPECT_EQ(line_count(r.err), 1u) << r.err;
    }
};

// ---- outputs ------------------------------------------------------------------------------

TEST_F(FileKinds, EvalWritesJsonAndPairsThroughStandardOutputAndError) {
    // Through a pipe: /dev/stdout stays what it is and the pipe gets the table, then the JSON.
    Result r = sh(eval("-json /dev/stdout") + " | cat > " + dir + "piped; exit ${PIPESTATUS[0]}");
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string piped = read_file(dir + "piped");
    EXPECT_LT(piped.find("val loss"), piped.find("\"val_loss\": ")) << piped;
    EXPECT_NE(piped.find("json: /dev/stdout"), std::string::npos) << piped;
    EXPECT_TRUE(is_link("/dev/stdout")) << "/dev/stdout was replaced";
    EXPECT_FALSE(exists("/dev/stdout.tmp"));
    r = sh(eval("-pairs /dev/stdout") + " | cat > " + dir + "piped; exit ${PIPESTATUS[0]}");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(read_file(dir + "piped").find("{\"id\": 0, \"prediction\": "), std::string::npos);
    // Standard error, and standard output redirected to a file: written through, after the table.
    r = sh(eval("-pairs /dev/stderr -json /dev/stdout") + " > " + dir + "file.txt");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("{\"id\": 1, \"prediction\": "), std::string::npos) << r.err;
    const std::string file = read_file(dir + "file.txt");
    EXPECT_LT(file.find("val loss"), file.find("\"val_loss\": ")) << file;
    EXPECT_NE(file.find("eval time"), std::string::npos) << "the lines after the JSON were lost: " << file;
}

TEST_F(FileKinds, EvalWritesIntoAFifoThatHasAReader) {
    for (const std::string flag : {"-json", "-pairs"}) {
        SCOPED_TRACE(flag);
        const Result r = sh("cat " + dir + "fifo > " + dir + "got &\n" + eval(flag + " " + dir + "fifo") + "\nstatus=$?\nwait\nexit $status");
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_NE(read_file(dir + "got").find(flag == "-json" ? "\"val_loss\": " : "\"prediction\": "), std::string::npos);
        EXPECT_TRUE(is_fifo(dir + "fifo"));
        EXPECT_FALSE(exists(dir + "fifo.tmp"));
    }
    // -export into a FIFO: the bytes of the same export into a file.
    ASSERT_EQ(mkfifo((dir + "pipe.safetensors").c_str(), 0644), 0);
    ASSERT_EQ(sh(eval("-export " + dir + "file.safetensors")).status, 0);
    const Result r = sh("cat " + dir + "pipe.safetensors > " + dir + "got &\n" + eval("-export " + dir + "pipe.safetensors") +
                        "\nstatus=$?\nwait\nexit $status");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_file(dir + "got"), read_file(dir + "file.safetensors"));
    EXPECT_TRUE(is_fifo(dir + "pipe.safetensors"));
}

TEST_F(FileKinds, EvalReplacesALinksTargetAndKeepsTheLink) {
    fs::create_directory(dir + "elsewhere");
    for (const std::string flag : {"-json", "-pairs", "-export"}) {
        SCOPED_TRACE(flag);
        const std::string name = flag == "-export" ? "m.safetensors" : flag.substr(1) + ".txt";
        std::ofstream(dir + "elsewhere/" + name) << "old";
        fs::create_symlink(dir + "elsewhere/" + name, dir + "link_" + name);
        Result r = sh(eval(flag + " " + dir + "link_" + name));
        if (flag == "-export") {  // an existing file, the link's target: replaced only with -overwrite 1
            expect_refused(r, "flag -export " + dir + "link_" + name + ": the file exists; give -overwrite 1");
            EXPECT_EQ(read_file(dir + "elsewhere/" + name), "old");
            r = sh(eval(flag + " " + dir + "link_" + name + " -overwrite 1"));
        }
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_TRUE(is_link(dir + "link_" + name));
        EXPECT_NE(read_file(dir + "elsewhere/" + name), "old");
        EXPECT_GT(read_file(dir + "elsewhere/" + name).size(), 100u);
        EXPECT_FALSE(exists(dir + "elsewhere/" + name + ".tmp"));
    }
}

TEST_F(FileKinds, EvalRefusesADanglingLinkALoopAndAFolderAsOutputs) {
    for (const std::string flag : {"-json", "-pairs", "-export"}) {
        SCOPED_TRACE(flag);
        if (flag == "-export") {  // its name must end in .safetensors
            fs::create_symlink(dir + "nowhere/x.safetensors", dir + "dangling.safetensors");
            fs::create_symlink(dir + "loop.safetensors", dir + "loop.safetensors");
            fs::create_directory(dir + "folder.safetensors");
        }
        const std::string end = flag == "-export" ? ".safetensors" : "";
        expect_refused(sh(eval(flag + " " + dir + "dangling" + end)), "is a symbolic link to " + dir + "nowhere/x" + end +
                                                                         ", which does not exist");
        EXPECT_FALSE(exists(dir + "nowhere"));
        expect_refused(sh(eval(flag + " " + dir + (end.empty() ? "loop_a" : "loop.safetensors"))), "is a symbolic link in a loop");
        expect_refused(sh(eval(flag + " " + dir + "folder" + end)), "flag " + flag + " " + dir + "folder" + end + " is a folder");
    }
    // /dev/stdout cannot be an -export: the name must say safetensors.
    expect_refused(sh(eval("-export /dev/stdout")), "must end in .safetensors");
}

TEST_F(FileKinds, TokenizeWritesAShardThroughStandardOutputAFifoOrALink) {
    ASSERT_EQ(sh(shard_to(dir + "file.bin")).status, 0);
    const std::string shard = read_file(dir + "file.bin");
    ASSERT_GT(shard.size(), 1024u);
    Result r = sh(shard_to("/dev/stdout") + " | cat > " + dir + "piped; exit ${PIPESTATUS[1]}");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_file(dir + "piped"), shard) << "only the shard's bytes on standard output";
    EXPECT_NE(r.err.find("wrote /dev/stdout (" + std::to_string((shard.size() - 1024) / 2) + " tokens"), std::string::npos)
        << r.err;
    r = sh("cat " + dir + "fifo > " + dir + "got &\n" + shard_to(dir + "fifo") + "\nstatus=$?\nwait\nexit $status");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_file(dir + "got"), shard);
    std::ofstream(dir + "target.bin") << "old";
    fs::create_symlink(dir + "target.bin", dir + "link.bin");
    ASSERT_EQ(sh(shard_to(dir + "link.bin")).status, 0);
    EXPECT_TRUE(is_link(dir + "link.bin"));
    EXPECT_EQ(read_file(dir + "target.bin"), shard);
    expect_refused(sh(shard_to(dir + "dangling")), "-shard " + dir + "dangling is a symbolic link to");
    expect_refused(sh(shard_to(dir + "loop_a")), "-shard " + dir + "loop_a is a symbolic link in a loop");
    expect_refused(sh(shard_to(dir + "folder")), "-shard " + dir + "folder is a folder");
}

TEST_F(FileKinds, TrainRefusesAnOutFolderThatIsNone) {
    expect_refused(sh(train("-out " + dir + "fifo -steps 1")), "flag -out: " + dir + "fifo exists and is not a folder");
    expect_refused(sh(train("-out /dev/stdout -steps 1")), "flag -out: /dev/stdout exists and is not a folder");
    expect_refused(sh(train("-out " + dir + "dangling -steps 1")), "flag -out: " + dir + "dangling is a symbolic link that leads nowhere");
    expect_refused(sh(train("-out " + dir + "loop_a -steps 1")), "Too many levels of symbolic links");
    // A link to a folder is the folder.
    fs::create_symlink(dir + "folder", dir + "link_folder");
    ASSERT_EQ(sh(train("-out " + dir + "link_folder -steps 1")).status, 0);
    EXPECT_TRUE(exists(dir + "folder/model_00000001.bin"));
}

// ---- inputs -------------------------------------------------------------------------------

TEST_F(FileKinds, TrainRefusesInputsThatAreNotFilesBeforeAnyWork) {
    const std::string kinds[][2] = {{dir + "folder", "is a folder"}, {dir + "fifo", "is a FIFO (named pipe)"},
                                    {"/dev/zero", "is a character device"}};
    for (const auto& [path, kind] : kinds) {
        SCOPED_TRACE(path);
        const std::string fresh = "./train -device cpu -threads 1 -train_data " + dir + "train_*.bin -val_data " + dir +
                                  "val_*.bin -B 2 -T 8 -steps 1 -out " + dir + "out ";
        expect_refused(sh(fresh + "-init " + path + " -eval_every 0"), path == dir + "folder" ? "is a folder, not a checkpoint file"
                                                                                              : "flag -init: " + path + ": " + kind);
        expect_refused(sh(fresh + "-init l1h2c16v96t16 -config " + path), "flag -config: " + path + ": " + kind + ", not a JSON file");
        expect_refused(sh(train("-steps 1 -train_data " + path)), path + ": " + kind + ", not a token shard");
        expect_refused(sh(train("-steps 1 -eval_every 1 -val_data " + path)), path + ": " + kind + ", not a token shard");
        expect_refused(sh(train("-steps 1 -sample_every 1 -sample_tokens 1 -tokenizer " + path)),
                       "flag -tokenizer: " + path + ": " + kind + ", not a tokenizer file");
        EXPECT_FALSE(exists(dir + "out")) << "an output folder was made";
    }
}

TEST_F(FileKinds, ResumeRefusesRunFilesThatAreNotFiles) {
    ASSERT_EQ(sh(train("-steps 2")).status, 0);
    const std::string config = read_file(dir + "out/config.json");
    for (const std::string name : {"config.json", "log.jsonl", "model_00000002.bin", "state_00000002.bin"}) {
        SCOPED_TRACE(name);
        fs::rename(dir + "out/" + name, dir + "kept");
        for (const std::string kind : {"folder", "fifo"}) {
            if (kind == "folder") fs::create_directory(dir + "out/" + name);
            else ASSERT_EQ(mkfifo((dir + "out/" + name).c_str(), 0644), 0);
            expect_refused(sh(train("-steps 3 -resume 1 -change_steps 1")),
                           dir + "out/" + name + ": is " + (kind == "folder" ? "a folder" : "a FIFO (named pipe)") + ", not ");
            fs::remove(dir + "out/" + name);
        }
        fs::rename(dir + "kept", dir + "out/" + name);
    }
    EXPECT_EQ(read_file(dir + "out/config.json"), config);
    EXPECT_EQ(sh(train("-steps 3 -resume 1 -change_steps 1")).status, 0) << "the run was left as it was";
}

TEST_F(FileKinds, EvalRefusesInputsThatAreNotFilesBeforeAnyWork) {
    ASSERT_EQ(sh(train("-steps 1")).status, 0);
    for (const std::string& path : {dir + "folder", dir + "fifo", std::string("/dev/zero")}) {
        SCOPED_TRACE(path);
        const std::string model = "./eval -device cpu -T 8 -eval_batches 1 -model " + dir + "tiny.bin ";
        const std::string val = "-val_data " + dir + "val_*.bin ";
        expect_refused(sh("./eval -device cpu " + val + "-model " + path), path + ": is ");
        expect_refused(sh(model + "-val_data " + path), path + ": is ");
        expect_refused(sh(model + val + "-train_data " + path), path + ": is ");
        expect_refused(sh(model + val + "-tokenizer " + path), "flag -tokenizer: " + path + ": is ");
        // -run whose config.json is not a file (a link to /dev/zero for the device).
        fs::rename(dir + "out/config.json", dir + "config.json");
        if (path == "/dev/zero") fs::create_symlink(path, dir + "out/config.json");
        else if (path == dir + "folder") fs::create_directory(dir + "out/config.json");
        else ASSERT_EQ(mkfifo((dir + "out/config.json").c_str(), 0644), 0);
        expect_refused(sh("./eval -device cpu -run " + dir + "out"), "flag -run: " + dir + "out/config.json: is ");
        fs::remove(dir + "out/config.json");
        fs::rename(dir + "config.json", dir + "out/config.json");
        EXPECT_FALSE(exists(dir + "out/eval.json"));
    }
}

TEST_F(FileKinds, TokenizeRefusesATokenizerThatIsNotAFileAndEndlessInput) {
    for (const std::string& path : {dir + "folder", dir + "fifo", std::string("/dev/zero")})
        expect_refused(sh("echo hi | ./tokenize -tokenizer " + path), path + ": is ");
    // Standard input that never ends is refused at its bound (1 GiB), not read until memory runs out.
    expect_refused(sh("./tokenize -tokenizer data/gpt2_tokenizer.bin < /dev/zero", 300),
                   "standard input: more than 1073741824 bytes");
}

// ---- limits and signals -------------------------------------------------------------------

TEST_F(FileKinds, AFileSizeLimitIsAFullDiskInEveryProgram) {
    // SIGXFSZ is left to its default here (as in a shell with `ulimit -f`): each program turns
    // it into a failed write, exit status 4 with one line, and leaves no temporary.
    ASSERT_EQ(sh(eval("-export " + dir + "whole.safetensors")).status, 0);
    ASSERT_GT(fs::file_size(dir + "whole.safetensors"), 8192u);
    const std::string limit = "ulimit -f 8\n";  // 8 KiB
    Result r = sh(limit + eval("-export " + dir + "x.safetensors"));
    EXPECT_EQ(r.status, 4) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    r = sh(limit + eval("-eval_batches 300 -allow_repeats 1 -pairs " + dir + "pairs.jsonl -json " + dir + "x.json"));
    EXPECT_EQ(r.status, 4) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    std::string text;
    for (int i = 0; i < 2000; i++) text += "Call me Ishmael. ";
    std::ofstream(dir + "long.txt") << text;
    r = sh(limit + "./tokenize -tokenizer data/gpt2_tokenizer.bin -shard " + dir + "x.bin < " + dir + "long.txt");
    EXPECT_EQ(r.status, 4) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    r = sh("ulimit -f 64\n./train -device cpu -threads 1 -init l2h2c128v96t16 -train_data " + dir + "train_*.bin -B 2 -T 8 "
           "-eval_every 0 -steps 2 -out " + dir + "out");  // a checkpoint of about 1.6 MB
    EXPECT_EQ(r.status, 4) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_EQ(listing(dir + "out"), "config.json log.jsonl") << "no half-written checkpoint";
    for (const std::string left : {"x.safetensors", "x.safetensors.tmp", "pairs.jsonl.tmp", "x.json.tmp", "x.bin", "x.bin.tmp"})
        EXPECT_FALSE(exists(dir + left)) << left;
}

TEST_F(FileKinds, SighupStopsTrainingWithACheckpoint) {
    // A run that would not end by itself, stopped once it has logged a step.
    const Result r = sh(train("-steps 1000000 -save_every 0") + " &\npid=$!\n"
                        "for i in $(seq 600); do [ -s " + dir + "out/log.jsonl ] && break; sleep 0.1; done\n"
                        "kill -HUP $pid; wait $pid");
    ASSERT_EQ(r.status, 129) << r.out << r.err;
    const size_t at = r.out.find("stopped by SIGHUP after ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const int done = std::atoi(r.out.c_str() + at + 24);
    ASSERT_GT(done, 0) << r.out;
    char pair[2][32];
    std::snprintf(pair[0], sizeof pair[0], "model_%08d.bin", done);
    std::snprintf(pair[1], sizeof pair[1], "state_%08d.bin", done);
    EXPECT_TRUE(exists(dir + "out/" + pair[0]) && exists(dir + "out/" + pair[1])) << listing(dir + "out");
    EXPECT_NE(r.err.find("stopping after the current step"), std::string::npos) << r.err;
}

TEST_F(FileKinds, AClosedStandardOutputDoesNotStopTraining) {
    const Result r = sh(train("-steps 3") + " | head -1; exit ${PIPESTATUS[0]}");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(line_count(r.out), 1u) << r.out;
    EXPECT_EQ(line_count(read_file(dir + "out/log.jsonl")), 4u) << "three steps and the outcome record";
    EXPECT_TRUE(exists(dir + "out/model_00000003.bin"));
}

TEST_F(FileKinds, ASignalEndsABlockingWriteOrReadAtOnce) {
    // ./eval waiting for a reader of its -json FIFO, and ./tokenize for more standard input.
    // (The shell holds the FIFO open for writing and reading, so ./tokenize's read waits.)
    for (const std::string& command : {eval("-json " + dir + "fifo"),
                                       "exec 3<>" + dir + "fifo; ./tokenize -tokenizer data/gpt2_tokenizer.bin < " + dir + "fifo"}) {
        SCOPED_TRACE(command);
        const auto start = std::chrono::steady_clock::now();
        const Result r = sh(command + " &\npid=$!\nsleep 3\nkill -TERM $pid; wait $pid");
        EXPECT_EQ(r.status, 128 + SIGTERM) << r.out << r.err;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    }
}

// run/signals.h itself: in start-up a stop signal ends the process as it normally would, even one
// waiting in a read; once training has begun it is recorded, to stop after the current step.
TEST(StopRequest, EndsStartUpAtOnceAndStopsTrainingAfterItsStep) {
    int never[2];
    ASSERT_EQ(pipe(never), 0);
    const pid_t waiting = fork();
    if (waiting == 0) {
        stop_request::install();
        char byte;
        if (read(never[0], &byte, 1) < 0) {}  // no writer ever writes
        _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(waiting, SIGTERM);
    int raw = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (waitpid(waiting, &raw, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() >= deadline) {
        kill(waiting, SIGKILL);
        waitpid(waiting, &raw, 0);
        ADD_FAILURE() << "the signal did not end the read";
    }
    EXPECT_TRUE(WIFSIGNALED(raw) && WTERMSIG(raw) == SIGTERM) << raw;
    const pid_t training = fork();
    if (training == 0) {
        stop_request::install();
        stop_request::begin_training();
        raise(SIGHUP);
        raise(SIGPIPE);  // ignored throughout
        _exit(stop_request::requested() == SIGHUP ? 7 : 1);
    }
    waitpid(training, &raw, 0);
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 7) << raw;
    close(never[0]);
    close(never[1]);
}

// ---- refusals before work -----------------------------------------------------------------

TEST_F(FileKinds, TrainRefusesNonFiniteInitWeightsWritingNothing) {
    std::vector<float> params;
    read_checkpoint(dir + "tiny.bin", &params);
    const std::string fresh = "./train -device cpu -threads 1 -train_data " + dir + "train_*.bin -B 2 -T 8 -eval_every 0 "
                              "-steps 1 -out " + dir + "out -init ";
    for (float bad : {NAN, INFINITY, -INFINITY}) {
        params[params.size() - 1] = bad;  // the last weight: ln_f's bias, or Peri-LN's
        write_checkpoint(dir + "bad.bin", cfg, params.data());
        expect_refused(sh(fresh + dir + "bad.bin"),
                       "flag -init: " + dir + "bad.bin: 1 of its " + std::to_string(params.size()) + " weights are not finite");
        EXPECT_FALSE(exists(dir + "out"));
    }
    ASSERT_EQ(sh("./eval -device cpu -model " + dir + "bad.bin -export " + dir + "bad.safetensors").status, 0);
    expect_refused(sh(fresh + dir + "bad.safetensors"), "weights are not finite");
    EXPECT_FALSE(exists(dir + "out"));
    ASSERT_EQ(sh(train("-steps 1")).status, 0) << "-out is free for the next run";
}

TEST_F(FileKinds, EvalExportNeverReplacesAFileUnasked) {
    ASSERT_EQ(sh(eval("-export " + dir + "m.safetensors")).status, 0);
    const std::string first = read_file(dir + "m.safetensors");
    expect_refused(sh(eval("-export " + dir + "m.safetensors")), "the file exists; give -overwrite 1 to replace it");
    EXPECT_EQ(read_file(dir + "m.safetensors"), first);
    ASSERT_EQ(sh("./eval -device cpu -model " + dir + "m.safetensors -export " + dir + "m.safetensors -overwrite 1").status, 2)
        << "the model read cannot be the export";
    EXPECT_EQ(read_file(dir + "m.safetensors"), first);
    expect_refused(sh(eval("-overwrite 1")), "flag -overwrite: only applies with -export");
}

TEST_F(FileKinds, TwoOutputsThatLeadToOneFileAreRefusedExistingOrNot) {
    fs::create_symlink(dir + "folder", dir + "link_folder");
    const std::string pairs[][2] = {{dir + "folder/a.json", dir + "folder/./a.json"},
                                    {dir + "folder/a.json", dir + "link_folder/a.json"},
                                    {dir + "folder/a.json", dir + "folder/../folder/a.json"},
                                    {"/dev/stdout", "/dev/stdout"}};
    for (const auto& [json, pairs_path] : pairs) {
        SCOPED_TRACE(json + " " + pairs_path);
        expect_refused(sh(eval("-json " + json + " -pairs " + pairs_path)), "lead to one file: give each output a file of its own");
        EXPECT_FALSE(exists(dir + "folder/a.json"));
    }
    ASSERT_EQ(sh(eval("-json " + dir + "folder/a.json -pairs " + dir + "folder/b.json")).status, 0);
}

}  // namespace
