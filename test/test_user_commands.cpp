// What llm.c and nanoGPT users reach for, through the programs:
//   * ./eval -prompt TEXT: continuations of the user's text (nanoGPT's --start), encoded by the
//     GPT-2 tokenizer; greedy sampling against the same model run here token by token; -seed
//     repeats and changes the draws; bad prompts and tokenizers refused with one line, exit 2;
//   * ./train -config RUN/config.json: the same run again (losses identical), flags beside it
//     winning, the flags worked out from a given one worked out again; bad files refused;
//   * progress lines on stderr inside long phases (-progress X), none in short ones, with
//     stdout's step lines and log.jsonl as documented.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/json.h"
#include "measure/sampling.h"
#include "test_files.h"
#include "tokenizer.h"

namespace {

struct Result {
    int status;
    std::string out, err;
};

class UserCommands : public ::testing::Test {
protected:
    std::string dir;

    void SetUp() override {
        dir = fresh_folder("user_commands_");
        write_random_shard(dir + "train_000.bin", 4000, 96, 1);
        write_random_shard(dir + "val_000.bin", 2000, 96, 2);
    }

    Result run(const std::string& command) const {
        const int raw = std::system((command + " > " + dir + "stdout 2> " + dir + "stderr").c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "stdout"), read_file(dir + "stderr")};
    }

    // A fresh model of GPT-2's vocabulary (V = 50257) with 1 block, C = 16, maxT = 32.
    std::string gpt2_vocabulary_model() const {
        ModelConfig cfg;
        cfg.maxT = 32; cfg.L = 1; cfg.NH = 2; cfg.C = 16;
        write_fresh_checkpoint(dir + "gpt2v.bin", cfg, 5);
        return dir + "gpt2v.bin";
    }

    std::string data_flags() const { return " -train_data " + dir + "train_000.bin -val_data " + dir + "val_000.bin"; }

    // Exit status 2, one line on stderr naming `what`, nothing on stdout that looks like a sample.
    static void expect_refused(const Result& r, const std::string& what) {
        EXPECT_EQ(r.status, 2) << r.out << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.out.find("sample "), std::string::npos) << r.out;
    }
};

// The text between "[[" and "]]" of stdout's line "sample I: ...".
std::string continuation(const std::string& out, int i) {
    const std::string start = "sample " + std::to_string(i) + ": ";
    const size_t at = out.find(start);
    if (at == std::string::npos) return "<no sample " + std::to_string(i) + ">";
    const size_t open = out.find("[[", at), close = out.find("]]\n", open);
    return out.substr(open + 2, close - open - 2);
}

// ---- ./eval -prompt ----

TEST_F(UserCommands, PromptGreedyContinuationIsTheModelsArgmaxTokenByToken) {
    const std::string model = gpt2_vocabulary_model();
    const std::string prompt = "Call me Ishmael.";
    Result r = run("./eval -device cpu -model " + model + " -prompt '" + prompt + "' -temperature 0 -samples 2 -sample_len 6");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("sample 0: " + prompt + "[["), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("val loss"), std::string::npos) << "-prompt only samples";
    // the same greedy continuation, one token at a time from the whole-window forward pass
    std::vector<float> params;
    const ModelConfig cfg = read_checkpoint(model, &params);
    const Tokenizer tok("data/gpt2_tokenizer.bin");
    std::vector<int32_t> context;
    for (int id : tok.encode(prompt)) context.push_back(id);
    const size_t P = context.size();
    std::vector<int> expected;
    for (int k = 0; k < 6; k++) {
        CpuModel<float> m(cfg, 1, (int)context.size());
        std::copy(params.begin(), params.end(), m.params.begin());
        std::vector<int32_t> targets(context.size(), 0);
        m.forward(context.data(), targets.data());
        const int next = argmax(m.logits_data() + (context.size() - 1) * cfg.Vp, cfg.V);
        context.push_back(next);
        expected.push_back(next);
    }
    EXPECT_LT(P, prompt.size());  // BPE tokens, not bytes
    EXPECT_EQ(continuation(r.out, 0), tok.decode(expected));
    EXPECT_EQ(continuation(r.out, 1), tok.decode(expected));
}

TEST_F(UserCommands, PromptSamplesRepeatWithTheSeedAndChangeWithAnother) {
    const std::string model = gpt2_vocabulary_model();
    const std::string command = "./eval -device cpu -model " + model + " -prompt 'The whale' -samples 2 -sample_len 8 -seed ";
    const Result a = run(command + "3"), b = run(command + "3"), c = run(command + "4");
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(continuation(a.out, 0), continuation(c.out, 0));
    EXPECT_NE(continuation(a.out, 0), continuation(a.out, 1)) << "the samples of one run are different draws";
}

TEST_F(UserCommands, PromptRefusals) {
    const std::string model = gpt2_vocabulary_model();
    const std::string eval = "./eval -device cpu -model " + model;
    expect_refused(run(eval + " -prompt ''"), "flag -prompt: the value is empty");
    std::string long_text;
    for (int i = 0; i < 40; i++) long_text += " whale";
    expect_refused(run(eval + " -prompt '" + long_text + "'"), "flag -prompt: 40 tokens, but the model's maxT is 32");
    expect_refused(run(eval + " -prompt 'The whale' -sample_len 31"), "flag -sample_len");
    expect_refused(run(eval + " -prompt 'The whale' -tokenizer data/mobydick_v4096_tokenizer.bin"),
                   "has 4096 tokens but the model's vocabulary is 50257");
    expect_refused(run(eval + " -prompt 'The whale' -tokenizer " + dir + "missing.bin"), "flag -tokenizer");
    expect_refused(run(eval + " -prompt 'The whale' -json " + dir + "e.json"), "flag -json");
    EXPECT_FALSE(exists(dir + "e.json"));
    ModelConfig small = tiny_model(1, Placement::Pre);  // V = 96: GPT-2's ids of "The whale" are not its tokens
    write_fresh_checkpoint(dir + "v96.bin", small, 1);
    expect_refused(run("./eval -device cpu -model " + dir + "v96.bin -prompt 'The whale'"), "outside the model's vocabulary of 96");
}

TEST_F(UserCommands, PromptTakesTheRunsTokenizerAndAFlagBesideRunWins) {
    // A run of the compact vocabulary (README's short run) records its decode-only tokenizer: the
    // prompt is encoded by GPT-2's BPE and mapped to the compact ids, ", the." (GPT-2's ids 11,
    // 262, 13) to three kept tokens, CJK characters (bytes Moby-Dick never has) to the catch-all.
    Result trained = run("./train -device cpu -threads 1 -init l1h2c16v4096t32 -steps 1 -B 2 -T 8 -eval_every 0 "
                         "-train_data 'data/mobydick_v4096_train_*.bin' -tokenizer data/mobydick_v4096_tokenizer.bin -out " +
                         dir + "run");
    ASSERT_EQ(trained.status, 0) << trained.err;
    Result compact = run("./eval -device cpu -run " + dir + "run -prompt ', the.' -sample_len 4");
    ASSERT_EQ(compact.status, 0) << compact.err;
    EXPECT_NE(compact.out.find("prompt in the model's vocabulary: , the.\n"), std::string::npos) << compact.out;
    EXPECT_NE(compact.out.find("prompt: 3 tokens (tokenizer data/mobydick_v4096_tokenizer.bin)"), std::string::npos)
        << compact.out;
    EXPECT_NE(compact.out.find("sample 0: , the.[["), std::string::npos) << compact.out;
    compact = run("./eval -device cpu -run " + dir + "run -prompt ', the.' -sample_len 4 -samples 0");  // none asked
    ASSERT_EQ(compact.status, 0) << compact.err;
    EXPECT_NE(compact.out.find("0 samples of 4 tokens"), std::string::npos) << compact.out;
    EXPECT_EQ(compact.out.find("sample 0:"), std::string::npos) << compact.out;
    compact = run("./eval -device cpu -run " + dir + "run -prompt ', the.\u65e5' -sample_len 4");
    ASSERT_EQ(compact.status, 0) << compact.err;
    const size_t read_as = compact.out.find("prompt in the model's vocabulary: , the. \u2047");
    ASSERT_NE(read_as, std::string::npos) << compact.out;
    EXPECT_EQ(compact.out.substr(read_as, compact.out.find('\n', read_as) - read_as).find("\u65e5"), std::string::npos)
        << compact.out;
    // Without GPT-2's tokenizer (neither beside the compact one nor data/gpt2_tokenizer.bin where
    // ./eval runs) the prompt is refused naming the file that would encode it.
    const std::string repo = std::filesystem::current_path().string();
    std::filesystem::create_directories(dir + "elsewhere");
    std::filesystem::copy_file("data/mobydick_v4096_tokenizer.bin", dir + "elsewhere/v4096.bin");
    expect_refused(run("cd " + dir + "elsewhere && " + repo + "/eval -device cpu -model " + dir +
                       "run/model_00000001.bin -tokenizer v4096.bin -prompt 'The whale'"),
                   "flag -tokenizer: data/gpt2_tokenizer.bin: cannot open the tokenizer file (No such file or directory) (a "
                   "compact vocabulary's prompt is encoded by GPT-2's BPE in data/gpt2_tokenizer.bin, then mapped to its ids)");
    // Another decode-only tokenizer (GPT-2's vocabulary without its merges, as llm.c's) cannot encode.
    const std::string gpt2 = read_file("data/gpt2_tokenizer.bin");
    size_t end = 1024;
    for (uint32_t id = 0; id < 50257; id++) end += 1 + (unsigned char)gpt2[end];
    std::string decode_only = gpt2.substr(0, end);
    std::fill(decode_only.begin() + 16, decode_only.begin() + 20, '\0');  // header[4]: no merges
    std::ofstream(dir + "decode_only.bin", std::ios::binary) << decode_only;
    expect_refused(run("./eval -device cpu -model " + dir + "run/model_00000001.bin -tokenizer " + dir +
                       "decode_only.bin -prompt 'The whale'"),
                   "has no merges (a decode-only tokenizer, like llm.c's), so it cannot encode; a prompt needs a tokenizer "
                   "that encodes (or a compact vocabulary's, docs/data.md)");
    // GPT-2's tokenizer beside -run wins: ", the." is ids 11, 262, 13, inside the 4,096
    Result r = run("./eval -device cpu -run " + dir + "run -tokenizer data/gpt2_tokenizer.bin -prompt ', the.' -sample_len 4");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("prompt: 3 tokens (tokenizer data/gpt2_tokenizer.bin)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sample 0: , the.[["), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("warning: data/gpt2_tokenizer.bin has 50257 tokens but the model's vocabulary is 4096"),
              std::string::npos) << r.out;
}

// ---- ./train -config ----

// config.json's members but "command" (the command line that made it).
std::string settings(const std::string& config_text) {
    Json j = read_json(config_text, "config.json");
    j.remove("command");
    return j.lines();
}

TEST_F(UserCommands, ConfigRepeatsARecordedRunAndFlagsBesideItWin) {
    const std::string first = "./train -device cpu -threads 1 -init l1h2c16v96t16 -ln peri -dt 0.5 -lr 0.003 -steps 4 "
                              "-B 2 -T 8 -seed 9 -eval_every 2 -eval_batches 1 -save_every 0" + data_flags();
    Result a = run(first + " -out " + dir + "a");
    ASSERT_EQ(a.status, 0) << a.err;
    Result b = run("./train -device cpu -threads 1 -config " + dir + "a/config.json -out " + dir + "b");
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(read_file(dir + "a/log.jsonl").empty(), false);
    EXPECT_EQ(json_numbers(read_file(dir + "a/log.jsonl"), "loss"), json_numbers(read_file(dir + "b/log.jsonl"), "loss"));
    EXPECT_EQ(json_numbers(read_file(dir + "a/log.jsonl"), "val_loss"), json_numbers(read_file(dir + "b/log.jsonl"), "val_loss"));
    EXPECT_EQ(settings(read_file(dir + "a/config.json")), settings(read_file(dir + "b/config.json")));
    EXPECT_TRUE(read_file(dir + "a/model_00000004.bin") == read_file(dir + "b/model_00000004.bin"));

    // flags beside -config win; lr_min and warmup follow a given -lr and -steps again
    Result c = run("./train -device cpu -threads 1 -config " + dir + "a/config.json -lr 0.0001 -steps 2 -out " + dir + "c");
    ASSERT_EQ(c.status, 0) << c.err;
    const Json cc = read_json(read_file(dir + "c/config.json"), "c");
    EXPECT_EQ(cc.get("lr")->str(), "0.0001");
    EXPECT_EQ(cc.get("lr_min")->str(), "1e-05");
    EXPECT_EQ(cc.get("steps")->str(), "2");
    EXPECT_EQ(cc.get("warmup")->str(), "0");
    EXPECT_EQ(cc.get("placement")->str(), "\"peri\"");
    EXPECT_EQ(cc.get("dt")->str(), "0.5");
    EXPECT_EQ(cc.get("seed")->str(), "9");
    EXPECT_EQ(cc.get("model")->str(), "\"fresh l1h2c16v96t16\"");
}

TEST_F(UserCommands, ConfigRefusals) {
    const std::string train = "./train -device cpu -threads 1 -out " + dir + "out -config ";
    auto refused = [&](const Result& r, const std::string& what) {
        EXPECT_EQ(r.status, 2) << r.out << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(exists(dir + "out"));
    };
    refused(run(train + dir + "missing.json"), "flag -config: " + dir + "missing.json: cannot open the JSON file (No such file");
    std::ofstream(dir + "text.json") << "steps: 3\n";
    refused(run(train + dir + "text.json"), "not JSON");
    std::ofstream(dir + "other.json") << "{\"steps\": 3}\n";
    refused(run(train + dir + "other.json"), "is not the config.json of a ./train run");
    std::ofstream(dir + "bad.json") << "{\"placement\": \"peri\", \"steps\": 3, \"lr\": -1}\n";
    refused(run(train + dir + "bad.json"), "flag -lr: -1 is out of range (0, 10] (taken from " + dir + "bad.json)");
    std::ofstream(dir + "array.json") << "{\"placement\": \"peri\", \"steps\": [3]}\n";
    refused(run(train + dir + "array.json"), "records steps as [3]");
    // a recorded run's own config.json is an input: never the -out folder's file that -overwrite 1 replaces
    Result a = run("./train -device cpu -threads 1 -init l1h2c16v96t16 -steps 1 -B 2 -T 8 -eval_every 0" + data_flags() +
                   " -out " + dir + "a");
    ASSERT_EQ(a.status, 0) << a.err;
    const std::string before = read_file(dir + "a/config.json");
    Result again = run("./train -device cpu -threads 1 -config " + dir + "a/config.json -overwrite 1 -out " + dir + "a");
    EXPECT_EQ(again.status, 2) << again.err;
    EXPECT_NE(again.err.find("the -config file"), std::string::npos) << again.err;
    EXPECT_EQ(read_file(dir + "a/config.json"), before);
}

// ---- progress lines ----

// Every line of stdout that starts with "step" is a step line (docs/logs.md), a val-loss line or a
// sample; every log.jsonl line is a JSON object.
void expect_documented_output(const std::string& out, const std::string& log) {
    const std::regex step_line(R"(^step +\d+(/\d+ \| loss [-0-9.naif]+ \| lr \S+ \| grad norm \S+ \| \S+ ms \| \d+ tok/s \| \S+, ETA \S+| \| val loss .*| \| sample: .*)$)");
    std::stringstream lines(out);
    std::string line;
    while (std::getline(lines, line))
        if (line.rfind("step", 0) == 0) {
            EXPECT_TRUE(std::regex_match(line, step_line)) << line;
        }
    std::stringstream records(log);
    while (std::getline(records, line)) EXPECT_EQ(read_json(line, "log.jsonl").kind(), Json::Kind::Object) << line;
}

TEST_F(UserCommands, TrainPrintsProgressOnStderrInsideLongStepsOnly) {
    const std::string train = "./train -device cpu -threads 1 -init l2h2c64v96t64 -B 4 -T 64 -total_batch 512 -steps 3 "
                              "-eval_every 3 -eval_batches 2 -save_every 0" + data_flags();
    Result quick = run(train + " -out " + dir + "quick");
    ASSERT_EQ(quick.status, 0) << quick.err;
    EXPECT_EQ(quick.err, "") << "steps far shorter than 10 s print no progress";
    Result slow = run(train + " -progress 0.0005 -out " + dir + "slow");
    ASSERT_EQ(slow.status, 0) << slow.err;
    EXPECT_TRUE(std::regex_search(slow.err, std::regex(R"(train progress: step \d: micro-step [12] of 2 \(\d+\.\d s\)\n)"))) << slow.err;
    EXPECT_TRUE(std::regex_search(slow.err, std::regex(R"(train progress: (evaluation at step 0|final evaluation) \()"))) << slow.err;
    std::stringstream err(slow.err);
    for (std::string line; std::getline(err, line);) EXPECT_EQ(line.rfind("train progress: ", 0), 0u) << line;
    expect_documented_output(slow.out, read_file(dir + "slow/log.jsonl"));
    EXPECT_EQ(json_numbers(read_file(dir + "quick/log.jsonl"), "loss"), json_numbers(read_file(dir + "slow/log.jsonl"), "loss"));
}

TEST_F(UserCommands, EvalPrintsProgressOnStderrInsideLongEvaluationsOnly) {
    write_fresh_checkpoint(dir + "m.bin", tiny_model(2, Placement::Pre), 3);
    const std::string eval = "./eval -device cpu -threads 1 -model " + dir + "m.bin -val_data " + dir +
                             "val_000.bin -train_data " + dir + "train_000.bin -B 4 -T 16 -eval_batches 20 -diag_batches 2";
    Result quick = run(eval);
    ASSERT_EQ(quick.status, 0) << quick.err;
    EXPECT_EQ(quick.err, "");
    Result slow = run(eval + " -progress 0.0005");
    ASSERT_EQ(slow.status, 0) << slow.err;
    EXPECT_NE(slow.err.find("eval progress: evaluation: batch "), std::string::npos) << slow.err;
    EXPECT_NE(slow.err.find("eval progress: diagnostics: batch "), std::string::npos) << slow.err;
    EXPECT_EQ(quick.out.substr(0, quick.out.find("eval time")), slow.out.substr(0, slow.out.find("eval time")));
}

// ./eval's bounds at their edges: the largest value each allows runs, one more is refused in one
// line (a prompt of maxT tokens, a token id equal to V, -T, -prompt_len and -sample_len against
// maxT and -T, each -samples rule from 1 sample on).
TEST_F(UserCommands, EvalBoundsAtTheirEdges) {
    const std::string model = gpt2_vocabulary_model();  // maxT = 32
    const std::string eval = "./eval -device cpu -model " + model;
    std::string whales;
    for (int i = 0; i < 32; i++) whales += " whale";  // " whale" is one GPT-2 token
    expect_refused(run(eval + " -prompt '" + whales + "'"), "flag -prompt: 32 tokens, but the model's maxT is 32");
    Result fits = run(eval + " -prompt 'The whale' -sample_len 30");  // 2 + 30 tokens = maxT
    EXPECT_EQ(fits.status, 0) << fits.err;
    expect_refused(run(eval + " -prompt 'The whale' -sample_len 31"), "flag -sample_len: the prompt's 2 tokens + 31");
    // "The" is GPT-2's token 464: outside a vocabulary of 464, inside one of 465.
    for (int V : {464, 465}) {
        ModelConfig cfg;
        cfg.maxT = 32; cfg.L = 1; cfg.NH = 2; cfg.C = 16; cfg.V = V; cfg.Vp = 512;
        write_fresh_checkpoint(dir + "v.bin", cfg, 5);
        Result r = run("./eval -device cpu -model " + dir + "v.bin -prompt 'The' -sample_len 2");
        if (V == 464)
            expect_refused(r, "flag -prompt: the text has token 464 ('The'), outside the model's vocabulary of 464");
        else
            EXPECT_EQ(r.status, 0) << r.err;
    }
    const std::string evaluate = eval + " -val_data " + dir + "val_000.bin -eval_batches 1 -B 1";
    expect_refused(run(evaluate + " -T 33"), "flag -T: 33 exceeds the model's maxT 32");
    expect_refused(run(evaluate + " -T 16 -samples 1 -prompt_len 17 -sample_len 4"), "flag -prompt_len: 17 exceeds -T 16");
    Result edge = run(evaluate + " -T 16 -samples 1 -prompt_len 16 -sample_len 16");  // prompt_len = T, + sample_len = maxT
    EXPECT_EQ(edge.status, 0) << edge.err;
    EXPECT_NE(edge.out.find("sample 0:"), std::string::npos) << edge.out;
    expect_refused(run(evaluate + " -T 16 -samples 1 -prompt_len 16 -sample_len 17"),
                   "flag -sample_len: prompt_len + sample_len = 33 exceeds the model's maxT 32");
    // A -tokenizer with fewer tokens than the model's vocabulary.
    expect_refused(run(evaluate + " -tokenizer data/mobydick_v4096_tokenizer.bin"),
                   "flag -tokenizer: data/mobydick_v4096_tokenizer.bin: has 4096 tokens but the model's vocabulary is 50257");
    // Without a tokenizer (none where ./eval runs) an evaluation without samples goes on, ROUGE
    // off; one sample needs it.
    const std::string repo = std::filesystem::current_path().string();
    std::filesystem::create_directories(dir + "elsewhere");
    const std::string elsewhere = "cd " + dir + "elsewhere && " + repo + "/eval -device cpu -model " + model + " -val_data " +
                                  dir + "val_000.bin -eval_batches 1 -B 1 -T 16";
    Result no_tokenizer = run(elsewhere);
    EXPECT_EQ(no_tokenizer.status, 0) << no_tokenizer.err;
    expect_refused(run(elsewhere + " -samples 1 -prompt_len 4 -sample_len 4"), "flag -tokenizer: data/gpt2_tokenizer.bin");
    // A tokenizer that is not the validation shards' is dropped without samples, refused with one.
    const std::string other = eval + " -val_data data/mobydick_v4096_val_000000.bin -eval_batches 1 -B 1 -T 16";
    Result dropped = run(other);
    EXPECT_EQ(dropped.status, 0) << dropped.err;
    expect_refused(run(other + " -samples 1 -prompt_len 4 -sample_len 4"),
                   "flag -tokenizer: data/gpt2_tokenizer.bin is tokenizer ");
}

// ./eval -run refuses a config.json that is not an object, one whose recorded setting is not a
// value of its flag, and one that records no val_data, each in one line naming the file.
TEST_F(UserCommands, EvalRunFolderRefusals) {
    std::filesystem::create_directories(dir + "run");
    const std::string config = dir + "run/config.json";
    std::ofstream(config) << "[1, 2]\n";
    expect_refused(run("./eval -device cpu -run " + dir + "run"), "flag -run: " + config + ": not a JSON object");
    std::ofstream(config) << "{\"val_data\": \"" + dir + "val_000.bin\", \"T\": 0}\n";
    expect_refused(run("./eval -device cpu -run " + dir + "run"), "flag -run: " + config + ": ");
    std::ofstream(config) << "{\"T\": 16}\n";
    expect_refused(run("./eval -device cpu -run " + dir + "run"),
                   "flag -run: " + config + " records no val_data (a run of an older ./train): give -val_data");
}

}  // namespace
