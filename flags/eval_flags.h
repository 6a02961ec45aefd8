// flags/eval_flags.h — the flags of ./eval (docs/cli.md §3), declared once: eval_flags() gives each its
// option, values, default and help. The parsing, `./eval -h` and the flag table of docs/cli.md
// (`make docs`) come from this table.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "util/errors.h"
#include "flags/flags.h"
#include "util/paths.h"  // DEFAULT_TRAIN_DATA, DEFAULT_VAL_DATA, DEFAULT_TOKENIZER, is_safetensors_name

// Every setting of an evaluation, one member per flag. A member whose default is worked out at
// start-up keeps its initial value here until then: 0 or empty.
struct EvalOptions {
    std::string run_dir;  // "": no run folder
    std::string model_path, val_data, train_data;
    int B = 0, T = 0;  // 0: the default
    int eval_batches = 0;
    bool allow_repeats = false;
    int diag_batches = 0, directions = 0;
    double sigma_rel = 0, sigma = 0;  // sigma: absolute, 0 when not given
    int noise_samples = 0;
    std::string json_path, pairs_path, export_path;
    bool overwrite = false;  // -export may replace an existing file
    std::string prompt;  // "": samples (if any) from the validation data
    int samples = 0, sample_len = 0, prompt_len = 0;
    double temperature = 0;
    int top_k = 0;
    std::string tokenizer_path;
    uint64_t seed = 0;
    std::string device, precision, fused;
    int threads = 0;  // 0: all cores
    double progress = 0;  // seconds between progress lines on stderr

    std::set<std::string> given;  // the flags on the command line
};

using EvalFlag = Flag<EvalOptions>;

// The flags of ./eval, in the order of `./eval -h` and the docs.
inline const std::vector<EvalFlag>& eval_flags() {
    using O = EvalOptions;
    static const std::vector<EvalFlag> table = {
        // flag, option, values, default, on -resume 1 (not ./eval's), help
        {"run", &O::run_dir, text("DIR"), "", MAY_CHANGE,
         "a ./train run folder: -model is its newest complete checkpoint pair's model (else its final model), "
         "-val_data, -train_data, -tokenizer, -B, -T and -eval_batches what its config.json records; each of those "
         "flags given beside -run wins"},
        {"model", &O::model_path, text("FILE"), worked_out("required unless -run"), MAY_CHANGE,
         "checkpoint to evaluate: model_%08d.bin of ./train, an llm.c GPT-2 fp32 file or GPT-2 safetensors (a name "
         "ending in .safetensors, docs/formats.md §5)"},
        {"val_data", &O::val_data, text("GLOB"), DEFAULT_VAL_DATA, MAY_CHANGE, "validation shards"},
        {"train_data", &O::train_data, text("GLOB"), DEFAULT_TRAIN_DATA, MAY_CHANGE,
         "training shards, for the counts of the unigram_ce and bigram_ce baselines; when not given and the default "
         "shards do not fit the model (a token ≥ V), one line says so and both are null"},
        {"B", &O::B, integers(1, 1 << 20), worked_out("8, halved until one batch fits in the longest shard"),
         MAY_CHANGE, "batch size"},
        {"T", &O::T, integers(1, 1 << 20), worked_out("256 on CPU, 1024 on CUDA, at most maxT"), MAY_CHANGE,
         "sequence length, at most the model's maxT"},
        {"eval_batches", &O::eval_batches, integers(1, 1 << 30), "10", MAY_CHANGE,
         "batches for loss, perplexity, accuracy, ROUGE and -pairs: the first ones of the shards"},
        {"allow_repeats", &O::allow_repeats, integers(0, 1), "0", MAY_CHANGE,
         "1 = read more batches than the shards hold distinct ones (they repeat, and the output says so); 0 refuses "
         "that"},
        {"diag_batches", &O::diag_batches, integers(0, 1 << 20), "1", MAY_CHANGE,
         "batches for the per-layer statistics, gradient norms, sensitivity and uncertainty (0 = none)"},
        {"directions", &O::directions, integers(1, 100000), "4", MAY_CHANGE,
         "random directions per block for the sensitivity ||J v||"},
        {"sigma_rel", &O::sigma_rel, reals_above(0, 1e6), "0.01", MAY_CHANGE,
         "Gaussian noise on the embedding output of standard deviation X·RMS(X_0), per diagnostic batch"},
        {"sigma", &O::sigma, reals_above(0, 1e6), "", MAY_CHANGE,
         "an absolute standard deviation instead of -sigma_rel (not both), e.g. to give runs the same noise"},
        {"noise_samples", &O::noise_samples, integers(1, 100000), "4", MAY_CHANGE, "noise draws per diagnostic batch"},
        {"json", &O::json_path, text("FILE"), "", MAY_CHANGE, "write every result as one JSON object"},
        {"pairs", &O::pairs_path, text("FILE"), "", MAY_CHANGE,
         "prediction/reference text pairs as JSONL {\"id\", \"prediction\", \"reference\"}, one line per sequence "
         "(for BERTScore etc.)"},
        {"export", &O::export_path, text("FILE"), "", MAY_CHANGE,
         "write the model as GPT-2 safetensors (FILE.safetensors, docs/formats.md §5) and stop: no evaluation; an "
         "existing FILE is refused without -overwrite 1"},
        {"overwrite", &O::overwrite, integers(0, 1), "0", MAY_CHANGE,
         "1 = -export may replace an existing file (never one this command reads)"},
        {"prompt", &O::prompt, text("TEXT"), "", MAY_CHANGE,
         "sample continuations of TEXT, encoded by -tokenizer (nanoGPT's --start), and stop: no evaluation, no "
         "validation data read; -samples of them (1 when -samples is not given) of -sample_len tokens each; a compact "
         "vocabulary's decode-only tokenizer encodes through GPT-2's BPE (docs/data.md)"},
        {"samples", &O::samples, integers(0, 100000), "0", MAY_CHANGE,
         "sampled continuations; prompt i is the first -prompt_len tokens of validation sequence i (with -prompt: "
         "of TEXT)"},
        {"sample_len", &O::sample_len, integers(1, 1 << 20), "64", MAY_CHANGE,
         "tokens generated per sample (with -prompt_len at most maxT)"},
        {"prompt_len", &O::prompt_len, integers(1, 1 << 20), "32", MAY_CHANGE, "prompt tokens per sample, at most T"},
        {"temperature", &O::temperature, reals(0, 1e3), "1.0", MAY_CHANGE, "sampling temperature (0 = greedy)"},
        {"top_k", &O::top_k, integers(0, 1 << 30), "40", MAY_CHANGE,
         "sample from the k likeliest tokens (0 = the whole vocabulary)"},
        {"tokenizer", &O::tokenizer_path, text("FILE"), DEFAULT_TOKENIZER, MAY_CHANGE,
         "decodes tokens for ROUGE, -pairs and -samples, and encodes -prompt; without this flag a missing default "
         "file only turns ROUGE off"},
        {"seed", &O::seed, integers(0, 1LL << 62), "1234", MAY_CHANGE, "directions, noise and sampling"},
        {"device", &O::device, one_of({"auto", "cpu", "cuda"}), "auto", MAY_CHANGE,
         "auto = CUDA when a device is present, else the CPU"},
        {"precision", &O::precision, one_of({"bf16", "fp32"}), "bf16", MAY_CHANGE,
         "CUDA only, as ./train's (bf16 given on the CPU is refused)"},
        {"fused", &O::fused, one_of({"auto", "all", "none"}), "auto", MAY_CHANGE,
         "CUDA only, as ./train's (all and none are refused on the CPU; nothing is kept from the run)"},
        {"threads", &O::threads, integers(1, 1024), worked_out("all cores"), MAY_CHANGE,
         "OpenMP threads of the CPU model"},
        {"progress", &O::progress, reals(0, 1e6), "10", MAY_CHANGE,
         "a progress line on stderr every X seconds inside an evaluation or sampling that runs longer (0 = none; "
         "docs/logs.md)"},
    };
    return table;
}

inline std::string eval_usage() {
    return usage_text("usage: ./eval -model FILE | -run DIR [-name value ...]", eval_flags());
}

// The options of argv, every flag checked against its values and against the others; throws
// InputError naming the first bad flag. (eval.cpp checks the output files before any work.)
inline EvalOptions parse_eval_options(int argc, char** argv) {
    EvalOptions o = read_flags(eval_flags(), argc, argv);
    if (o.model_path.empty() && o.run_dir.empty())
        throw InputError("flag -model: a checkpoint file is required (or -run DIR, a ./train run folder)");
    if (o.given.count("sigma") && o.given.count("sigma_rel"))
        throw InputError("flag -sigma: give -sigma (absolute) or -sigma_rel (relative), not both");
    if (!o.export_path.empty() && !is_safetensors_name(o.export_path))
        throw InputError("flag -export: " + o.export_path + " must end in .safetensors (the name -init and -model read as one)");
    for (const char* other : {"prompt", "json", "pairs"})
        if (!o.export_path.empty() && o.given.count(other))
            throw InputError(std::string("flag -") + other + ": -export only writes the model; give -" + other + " in another ./eval");
    if (o.overwrite && o.export_path.empty()) throw InputError("flag -overwrite: only applies with -export");
    for (const char* other : {"json", "pairs"})
        if (!o.prompt.empty() && o.given.count(other))
            throw InputError(std::string("flag -") + other + ": -prompt only samples (its samples are printed); drop -" + other);
    return o;
}
