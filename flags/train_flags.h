// flags/train_flags.h — the flags of ./train (docs/cli.md §2), declared once: train_flags() gives each
// its option, values, default, help, whether it defines the run (and so must match on -resume 1)
// and where config.json records it. The parsing, `./train -h`, the flag tables of
// docs/cli.md (`make docs`), config.json and the resume check all come from this table.
#pragma once
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "util/errors.h"
#include "flags/flags.h"
#include "util/paths.h"  // DEFAULT_TRAIN_DATA, DEFAULT_VAL_DATA, DEFAULT_TOKENIZER

// Every setting of a run, one member per flag. A member whose default is worked out at start-up
// (prepare_run, run/resume.h) keeps its initial value here until then: 0 or empty.
struct TrainOptions {
    std::string ln;  // pre | post | peri
    float dt = 0;
    std::string init;  // "": the backend's default size
    std::string train_data, val_data;
    int B = 0, T = 0;          // 0: the backend's default
    long long total_batch = 0;  // 0: the backend's default
    int steps = 0;
    double lr = 0, lr_min = 0;
    int warmup = 0;
    double wd = 0, beta1 = 0, beta2 = 0, eps = 0, clip = 0;
    int outcome_window = 0;
    double diverge_rise = 0, spike_rise = 0;
    uint64_t seed = 0;
    bool shuffle = false;
    int eval_every = 0, eval_batches = 0, save_every = 0, stats_every = 0;
    bool allow_repeats = false;
    int keep_checkpoints = 0;           // 0: keep every pair
    int sample_every = 0, sample_tokens = 0;  // sample_every 0: no samples
    std::string tokenizer_path;
    std::string out_dir;
    bool resume = false, overwrite = false, change_steps = false;
    std::string device, precision;
    int threads = 0;  // 0: all cores
    std::string cpu_ops;
    std::string fused;  // -fused: auto, all or none
    bool zero = false;
    std::string config_path;  // -config: a recorded run's config.json to take settings from
    double progress = 0;      // seconds between progress lines on stderr

    std::set<std::string> given;  // the flags on the command line
    std::string command;          // the command line, for config.json
};

using TrainFlag = Flag<TrainOptions>;

// The flags of ./train, in the order of `./train -h`, the docs and config.json. MUST_MATCH marks
// a flag that defines the run (a star in the usage).
inline const std::vector<TrainFlag>& train_flags() {
    using O = TrainOptions;
    static const std::vector<TrainFlag> table = {
        // flag, option, values, default, on -resume 1, help[, where config.json records it]
        {"config", &O::config_path, text("FILE"), "", MAY_CHANGE,
         "a recorded run's config.json to start a new run with its settings: every flag it records (all but -out, "
         "-resume, -overwrite, -change_steps, -device, -precision, -fused, -threads, -progress, -zero); flags given "
         "beside it "
         "win (docs/cli.md §4)",
         NOT_RECORDED},
        {"ln", &O::ln, one_of({"pre", "post", "peri"}), "pre", MUST_MATCH,
         "LayerNorm placement: before each module, after the residual add, or around each module",
         recorded_as("placement")},
        {"dt", &O::dt, reals_above(0, 1e3), "1.0", MUST_MATCH, "residual step Δt: every residual branch is scaled by it",
         recorded_as("dt")},
        {"init", &O::init, text("SIZE|FILE"), worked_out("d6 on CPU, d12 on CUDA"), OnResume::MustMatchIfGiven,
         "a fresh size (d6, d12, d24, d36, d48, or l{L}h{NH}c{C}[v{V}][t{maxT}] such as l16h2c64: L blocks, NH heads, "
         "C channels; V 50257 and maxT 1024 unless given) or a file to start from: a checkpoint, or GPT-2 safetensors "
         "(a name ending in .safetensors, docs/formats.md §5) (a size spelling wins)",
         recorded_as("model")},
        {"train_data", &O::train_data, text("GLOB"), DEFAULT_TRAIN_DATA, MUST_MATCH,
         "training shards (the files matched, which -resume 1 compares)", recorded_as("train_files")},
        {"val_data", &O::val_data, text("GLOB"), DEFAULT_VAL_DATA, MAY_CHANGE, "validation shards",
         recorded_as("val_files")},
        {"B", &O::B, integers(1, 1 << 20), worked_out("8 on CPU, 32 on CUDA"), MUST_MATCH,
         "micro-batch; a default B is halved until one window of B·T+1 tokens fits in the shards and, on CUDA, its "
         "memory plan in the device, saying so; a B given is kept or refused"},
        {"T", &O::T, integers(1, 1 << 20), worked_out("256 on CPU, 1024 on CUDA"), MUST_MATCH,
         "sequence length, at most the model's maxT"},
        {"total_batch", &O::total_batch, integers(1, 1LL << 40), worked_out("B·T on CPU, 524288 on CUDA"), MUST_MATCH,
         "tokens per optimiser step over all ranks, a multiple of ranks·B·T (gradient accumulation); the default is "
         "one process's step whatever the ranks, refused under mpirun when ranks·B·T does not divide it (always on "
         "CPU)"},
        {"steps", &O::steps, integers(1, 1 << 30), "1000", MUST_MATCH,
         "optimiser steps (-change_steps 1 lets -resume 1 change them)"},
        {"lr", &O::lr, reals_above(0, 10), "6e-4", MUST_MATCH, "peak learning rate"},
        {"lr_min", &O::lr_min, reals(0, 10), worked_out("lr/10"), MUST_MATCH,
         "final learning rate, reached by cosine decay at the last step; at most -lr"},
        {"warmup", &O::warmup, integers(0, 1 << 30), worked_out("min(20, steps/10)"), MUST_MATCH,
         "linear warmup steps, at most -steps"},
        {"wd", &O::wd, reals(0, 10), "0.1", MUST_MATCH, "AdamW weight decay (2-D tensors only)"},
        {"beta1", &O::beta1, reals_below(0, 1), "0.9", MUST_MATCH, "AdamW β1"},
        {"beta2", &O::beta2, reals_below(0, 1), "0.95", MUST_MATCH, "AdamW β2"},
        {"eps", &O::eps, reals_above(0, 1), "1e-8", MUST_MATCH, "AdamW ε"},
        {"clip", &O::clip, reals(0, 1e9), "1.0", MUST_MATCH, "global gradient-norm clipping (0 = off)"},
        {"outcome_window", &O::outcome_window, integers(1, 1 << 30), "20", MUST_MATCH,
         "the window W (steps) of the run outcomes (docs/train.md §8)"},
        {"diverge_rise", &O::diverge_rise, reals_above(0, 1e9), "1.0", MUST_MATCH,
         "a rise (nats) of the mean loss of W steps over the best such mean that ends the run as diverged"},
        {"spike_rise", &O::spike_rise, reals_above(0, 1e9), "1.0", MUST_MATCH,
         "a rise (nats) over the mean of the W steps before that counts as a transient spike"},
        {"seed", &O::seed, integers(0, 1LL << 62), "42", MUST_MATCH, "initialisation and shuffling"},
        {"shuffle", &O::shuffle, integers(0, 1), "1", MUST_MATCH,
         "1 = shuffle the windows and the shard order each epoch, 0 = read them in order (docs/formats.md §1)"},
        {"eval_every", &O::eval_every, integers(0, 1 << 30), "100", MAY_CHANGE,
         "validation loss every N steps and at the end (0 = never)"},
        {"eval_batches", &O::eval_batches, integers(1, 1 << 30), "10", MAY_CHANGE,
         "validation batches per evaluation, the first ones of the shards; more than the shards hold distinct ones is "
         "refused unless -allow_repeats 1"},
        {"allow_repeats", &O::allow_repeats, integers(0, 1), "0", MAY_CHANGE,
         "1 = let -eval_batches read more batches than the validation shards hold distinct ones (they repeat, and the "
         "start-up says so); 0 refuses that"},
        {"save_every", &O::save_every, integers(0, 1 << 30), "250", MAY_CHANGE,
         "checkpoint every N steps (0 = only the final one, which is always written)"},
        {"keep_checkpoints", &O::keep_checkpoints, integers(0, 1 << 30), "0", MAY_CHANGE,
         "after each checkpoint pair is written, remove the pairs older than the newest N (0 = keep all); the "
         "final pair is always kept (docs/train.md §6)"},
        {"sample_every", &O::sample_every, integers(0, 1 << 30), "0", MAY_CHANGE,
         "every N steps and after the last one, rank 0 prints and logs a sampled continuation of the first 16 "
         "validation tokens (0 = off); the training run is the same with or without it (docs/train.md "
         "§5)"},
        {"sample_tokens", &O::sample_tokens, integers(1, 1 << 20), "32", MAY_CHANGE,
         "tokens per -sample_every continuation (16 + this at most the model's maxT)"},
        {"tokenizer", &O::tokenizer_path, text("FILE"), DEFAULT_TOKENIZER, MAY_CHANGE,
         "decodes the -sample_every samples; must cover the model's vocabulary and be the one the shards record"},
        {"stats_every", &O::stats_every, integers(0, 1 << 30), "0", MAY_CHANGE,
         "hidden-state and gradient statistics per layer (docs/statistics.md) into log.jsonl every N steps (0 = off)"},
        {"out", &O::out_dir, text("DIR"), "out", MAY_CHANGE, "output folder: one run per folder (docs/train.md §6)",
         NOT_RECORDED},
        {"resume", &O::resume, integers(0, 1), "0", MAY_CHANGE,
         "1 = continue the run in -out from its newest complete checkpoint pair, with the same settings", NOT_RECORDED},
        {"overwrite", &O::overwrite, integers(0, 1), "0", MAY_CHANGE,
         "1 = remove another run's files from -out before starting instead of refusing (not with -resume 1)", NOT_RECORDED},
        {"change_steps", &O::change_steps, integers(0, 1), "0", MAY_CHANGE,
         "with -resume 1: 1 = let -steps differ from the run's (the schedule's end moves; config.json records it)",
         NOT_RECORDED},
        {"device", &O::device, one_of({"auto", "cpu", "cuda"}), "auto", MAY_CHANGE,
         "auto = CUDA when a device is present, else the CPU with one line saying so (config.json: \"backend\")",
         NOT_RECORDED},
        {"precision", &O::precision, one_of({"bf16", "fp32"}), "bf16", MAY_CHANGE,
         "CUDA only: bf16 = mixed precision (bf16 products, LayerNorm outputs and activations; fp32 residual stream, "
         "master weights and moments), or fp32 throughout (config.json: \"backend\"); the CPU computes in fp32 and "
         "refuses a -precision bf16 given",
         NOT_RECORDED},
        {"threads", &O::threads, integers(1, 1024), worked_out("all cores"), MAY_CHANGE,
         "OpenMP threads of the CPU backend (config.json: \"backend\")", NOT_RECORDED},
        {"fused", &O::fused, one_of({"auto", "all", "none"}), "auto", MAY_CHANGE,
         "CUDA only (all and none are refused on the CPU, auto has nothing to fuse there): the matrix products run as one cuBLASLt product with their bias, GELU or "
         "bias-gradient epilogue; auto = each kind timed fused and plain at start-up, the faster kept (a resumed run "
         "keeps its run's, config.json \"fused_products\"), all = every kind cuBLASLt takes, none = the plain "
         "products and the project's kernels (docs/cuda.md §3)",
         NOT_RECORDED},
        {"cpu_ops", &O::cpu_ops, one_of({"reference", "fast"}), "fast", MAY_CHANGE,
         "CPU backend only (refused on CUDA): the ops that train, fast (cpu_fast_ops.h) or reference, the textbook ops of cpu_ops.h (slow, "
         "for stepping through what one reads); the two agree within 1e-5"},
        {"zero", &O::zero, integers(0, 1), "1", MAY_CHANGE,
         "under mpirun: 1 = each rank keeps the AdamW moments of its shard of the parameters only (ZeRO-1), 0 = every "
         "rank keeps all (docs/distributed.md); config.json records 1 only with several ranks"},
        {"progress", &O::progress, reals(0, 1e6), "10", MAY_CHANGE,
         "a progress line on stderr every X seconds inside a step or evaluation that runs longer (0 = none; "
         "docs/logs.md)",
         NOT_RECORDED},
    };
    return table;
}

// The closing lines of `./train -h`.
constexpr const char* TRAIN_USAGE_FOOTER =
    "* defines the run: -resume 1 refuses a value other than the run's (docs/train.md §7)\n";

inline std::string train_usage() {
    return usage_text("usage: ./train [-name value ...]", train_flags(), TRAIN_USAGE_FOOTER);
}

// The member of a recorded run's config.json that holds flag f's value as a flag takes it: the
// flag's own name (train_data and val_data: the globs), else where the table records it
// (placement, dt, model); null when absent.
inline const Json* recorded_value(const Json& config, const TrainFlag& f) {
    const Json* v = config.get(f.name);
    return v ? v : config.get(f.record.name);
}

// The flags whose recorded value -config leaves alone: those worked out from others (lr_min from
// lr, warmup from steps, total_batch from B and T) when one of those others is given beside it
// (they are worked out again), and zero, which a run of one rank records as 0 whatever was asked.
inline bool worked_out_from_a_given_flag(const std::string& flag, const std::set<std::string>& given) {
    if (flag == "zero") return true;
    if (flag == "lr_min") return given.count("lr");
    if (flag == "warmup") return given.count("steps");
    if (flag == "total_batch") return given.count("B") || given.count("T");
    return false;
}

// -config FILE: every flag that config.json records and the command line does not give, at the
// recorded (resolved) value, checked as if typed; taken flags count as given. Flags config.json
// does not record (-out, -resume, -overwrite, -change_steps, -device, -precision, -threads,
// -progress) keep their own values. A file that is not a run's config.json, or a value a flag
// refuses, is an InputError naming the file.
inline void take_recorded_settings(TrainOptions& o) {
    const Json config = read_json_file(o.config_path, "flag -config");
    if (config.kind() != Json::Kind::Object || !config.get("placement") || !config.get("steps"))
        throw InputError("flag -config: " + o.config_path + " is not the config.json of a ./train run");
    const std::set<std::string> typed = o.given;  // on the command line
    for (const TrainFlag& f : train_flags()) {
        const bool keep_own = f.record.name.empty() || o.given.count(f.name) || worked_out_from_a_given_flag(f.name, typed);
        const Json* v = keep_own ? nullptr : recorded_value(config, f);
        if (!v || v->kind() == Json::Kind::Null) continue;
        std::string text = v->text();
        if (v->kind() == Json::Kind::Array || v->kind() == Json::Kind::Object || (f.name == "init" && text.empty()))
            throw InputError("flag -config: " + o.config_path + " records " + f.record.name + " as " + v->str() +
                             ", not a value of -" + f.name);
        if (f.name == "init" && text.compare(0, 6, "fresh ") == 0) text.erase(0, 6);  // "fresh d6": the size
        try {
            f.store(o, check_flag_value(f.name, f.values, text));
        } catch (const InputError& e) {
            throw InputError(std::string(e.what()) + " (taken from " + o.config_path + ")");
        }
        o.given.insert(f.name);
    }
}

// The options of argv, every flag checked against its values and against the others, and the
// defaults that follow from other flags worked out (lr_min, warmup); throws InputError naming
// the first bad flag.
inline TrainOptions parse_train_options(int argc, char** argv) {
    TrainOptions o = read_flags(train_flags(), argc, argv);
    if (!o.config_path.empty()) take_recorded_settings(o);
    for (int i = 0; i < argc; i++) o.command += (i ? " " : "") + std::string(argv[i]);
    if (!o.given.count("lr_min")) o.lr_min = o.lr / 10;
    if (!o.given.count("warmup")) o.warmup = std::min(20, o.steps / 10);
    if (o.resume && o.overwrite) throw InputError("flag -overwrite: cannot be combined with -resume 1");
    if (o.change_steps && !o.resume) throw InputError("flag -change_steps: only applies with -resume 1");
    if (o.lr_min > o.lr)
        throw InputError("flag -lr_min: " + flag_number(o.lr_min) + " exceeds -lr " + flag_number(o.lr) +
                         " (the rate would rise during the decay)");
    if (o.warmup > o.steps)
        throw InputError("flag -warmup: " + std::to_string(o.warmup) + " exceeds -steps " + std::to_string(o.steps));
    return o;
}
