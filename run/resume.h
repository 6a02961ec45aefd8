// run/resume.h — what a ./train run starts from, and the checkpoint pairs it leaves for -resume 1
// (docs/train.md §7):
//
//   Run              everything a run needs, resolved and checked before any output is written
//   prepare_run      the device; the model resumed from the folder's newest checkpoint pair,
//                    loaded from -init FILE, or fresh; the batch shape as asked
//   fit_to_device    collective: the ranks' NCCL communicator (CUDA), then the micro-batch the
//                    device holds, the tokens per step and the micro-steps
//   save_checkpoint  writes model_N.bin and state_N.bin (N = steps done), each whole or not at all
//   resume_loader    puts a rank's data loader where the saved run left off
//   load_model       the weights and the optimiser range (and, resuming, its moments) into the backend
//   print_start      the start-up lines: backend, model, data, batch, ranks and optimiser
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "run/checkpoint.h"
#include "dataloader.h"
#include "distributed/process_group.h"
#include "util/errors.h"
#include "util/json.h"
#include "model.h"
#include "run/run_counts.h"
#include "run/run_dir.h"
#include "run/safetensors.h"
#include "run/setup.h"
#include "flags/train_flags.h"

struct Run {
    TrainOptions opt;  // resolved: B, T, total_batch and (with one rank) zero
    std::string device;
    ModelConfig cfg;
    std::string model_origin;           // "fresh SIZE", a checkpoint file, or "resumed from DIR/model_N.bin"
    std::vector<float> initial_params;  // from a checkpoint; empty for a fresh model
    TrainState state;                   // resumed optimiser state; steps_done = 0 when fresh
    bool resuming = false;
    int ranks = 1;       // processes training the model together (mpirun -np)
    int grad_accum = 1;  // micro-steps per step on each rank: total_batch / (ranks·B·T)
    std::shared_ptr<NcclComm> comm;  // CUDA with several ranks: their communicator (fit_to_device)
    FusionRequest fusion;            // CUDA: the products to fuse, or to time (-fused; resumed_fusion)
};

// True when the AdamW state is sharded over the ranks (ZeRO-1, docs/distributed.md): -zero 1 with more than one rank (prepare_run resolves opt.zero so).
inline bool sharded(const Run& r) { return r.opt.zero; }

// Where a run's first weights came from, as config.json records it ("model"): "fresh SIZE" for
// a size spelling, else the checkpoint file; "" for no -init.
inline std::string init_origin(const std::string& init) {
    ModelConfig size;
    return model_size(init, &size) ? "fresh " + init : init;
}

// A run id as config.json and messages write it: 16 hex digits.
inline std::string run_id_text(uint64_t id) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", (unsigned long long)id);
    return text;
}

// Checks that a checkpoint agrees with -ln / -dt when they were given.
inline void check_against_flags(const ModelConfig& m, const TrainOptions& o, const std::string& path) {
    if (o.given.count("ln") && placement_name(m.placement) != o.ln)
        throw InputError(path + ": checkpoint is " + placement_name(m.placement) + "-LN but -ln " + o.ln + " was given");
    if (o.given.count("dt") && m.dt != o.dt)
        throw InputError(path + ": checkpoint has dt " + json_float(m.dt) + " but -dt " + json_float(o.dt) + " was given");
}

// Refuses a resumed optimiser state that cannot belong to this run: a step count other than the
// one in its file name `n`, or a seed other than -seed.
inline void check_resumed_state(const TrainState& s, int n, const TrainOptions& o, const std::string& path) {
    if (s.steps_done != n)
        throw InputError(path + ": records " + std::to_string(s.steps_done) + " steps done but its name says " +
                         std::to_string(n) + "; the file was renamed or belongs to another run");
    if (s.seed != o.seed)
        throw InputError("flag -seed: " + std::to_string(o.seed) + " but the run being resumed has seed " +
                         std::to_string(s.seed) + " (" + path + ")");
}

// For a refusal of the newest checkpoint pair of `dir` (`saved`, ascending): the newest older pair
// whose files both read whole, named with what to do, or "" when there is none.
inline std::string older_whole_pair(const std::string& dir, const std::vector<int>& saved) {
    for (size_t i = saved.size() - 1; i-- > 0;) {
        const std::string model = numbered(dir, "model", saved[i]), state = numbered(dir, "state", saved[i]);
        try {
            std::vector<float> params;
            const ModelConfig cfg = read_checkpoint(model, &params);
            read_state(state, params.size(), cfg.placement);
            return "; the older pair " + model + " and " + state + " reads whole: move the newer pair out of " + dir +
                   " to resume from it";
        } catch (const InputError&) {
        }  // damaged too: look further back
    }
    return "";
}

// With -resume 1: reads the newest complete checkpoint pair of the folder into r (the model,
// its weights and the optimiser state) and returns true; false when there is none yet.
inline bool resume_from_folder(Run& r) {
    const TrainOptions& o = r.opt;
    const std::vector<int> saved = checkpoint_steps(o.out_dir);
    if (saved.empty()) {
        std::printf("resume: no complete checkpoint in %s; starting fresh\n", o.out_dir.c_str());
        return false;
    }
    const int n = saved.back();
    if (n > o.steps)
        throw InputError("flag -steps: " + std::to_string(o.steps) + " is below the newest checkpoint in " + o.out_dir +
                         " (after " + std::to_string(n) + " steps): resuming from an older one " +
                         "would leave two runs' checkpoints side by side");
    const std::string model_path = numbered(o.out_dir, "model", n), state_path = numbered(o.out_dir, "state", n);
    try {
        r.cfg = read_checkpoint(model_path, &r.initial_params);
        r.state = read_state(state_path, r.initial_params.size(), r.cfg.placement);
    } catch (const InputError& e) {
        throw InputError(e.what() + older_whole_pair(o.out_dir, saved));
    }
    check_against_flags(r.cfg, o, model_path);
    check_resumed_state(r.state, n, o, state_path);
    if (const uint64_t model_run = checkpoint_run_id(model_path); model_run != r.state.run_id)
        throw InputError(model_path + ": belongs to another run (run id " + run_id_text(model_run) + ") than " +
                         state_path + " (run id " + run_id_text(r.state.run_id) + ")");
    r.model_origin = "resumed from " + model_path;
    return true;
}

// Resuming without -fused given: the kinds of product the run fused, as its config.json records
// them ("fused_products", CUDA runs only), so that the resumed run rounds as the run did; every
// kind for a CUDA run recorded before the member existed (it fused every kind cuBLASLt took);
// what -fused asks otherwise (given, or a config.json of a CPU run or none).
inline FusionRequest resumed_fusion(const TrainOptions& o) {
    const FusionRequest asked = fusion_request(o.fused);
    const std::string path = in_folder(o.out_dir, "config.json");
    if (o.given.count("fused") || !path_exists(path)) return asked;
    const Json saved = read_json_file(path);
    if (saved.kind() != Json::Kind::Object) return asked;  // refused by resumed_config
    const Json* names = saved.get("fused_products");
    const Json* backend = saved.get("backend");
    if (!names && backend && backend->text().rfind("cuda", 0) == 0)
        return {false, EVERY_KIND_FUSED, "kept from " + path + ", which predates -fused: every kind"};
    if (!names) return asked;
    if (names->kind() != Json::Kind::Array)
        throw InputError(path + ": \"fused_products\" is " + names->str() + ", not a list of kinds of product");
    FusedKinds kinds = NO_KIND_FUSED;
    for (const Json& name : names->items()) {
        const int kind = name.kind() == Json::Kind::String ? epilogue_named(name.text()) : -1;
        if (kind < 0) throw InputError(path + ": \"fused_products\" lists " + name.str() + ", not a kind of product (" +
                                       kind_list(EVERY_KIND_FUSED) + ")");
        kinds[(Epilogue)kind] = true;
    }
    return {false, kinds, "kept from " + path};
}

// Without -resume 1 (or with nothing to resume): the model of -init, a fresh size or a
// checkpoint file to start from.
inline void start_from_init(Run& r, bool gpu) {
    const TrainOptions& o = r.opt;
    const std::string init = o.init.empty() ? (gpu ? "d12" : "d6") : o.init;
    if (model_size(init, &r.cfg)) {
        parse_placement(o.ln, &r.cfg.placement);
        r.cfg.dt = o.dt;
    } else {
        if (access(init.c_str(), F_OK) != 0)
            throw InputError("flag -init: '" + init + "' is neither a model size (d6, d12, d24, d36, d48 or " +
                             "l{L}h{NH}c{C}[v{V}][t{maxT}]) nor an existing checkpoint file");
        struct stat st;
        if (stat(init.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
            throw InputError("flag -init: '" + init + "' is a folder, not a checkpoint file (to continue the run " +
                             "in it: -out " + init + " -resume 1)");
        try {
            r.cfg = read_model_file(init, &r.initial_params);  // a checkpoint or GPT-2 safetensors
        } catch (const InputError& e) {
            throw InputError(std::string("flag -init: ") + e.what());
        }
        check_against_flags(r.cfg, o, init);
        if (const size_t nonfinite = count_nonfinite(r.initial_params))
            throw InputError("flag -init: " + init + ": " + std::to_string(nonfinite) + " of its " +
                             std::to_string(r.initial_params.size()) + " weights are not finite (NaN or inf); "
                             "training cannot start from them");
    }
    r.model_origin = init_origin(init);
    r.state.seed = o.seed;
}

// Refuses an input of the run (the -init checkpoint, the -config file, the shards of -train_data
// and, with evaluation or -sample_every, of -val_data; with -sample_every the -tokenizer) that is
// a file of the -out folder, which the run writes (run/run_dir.h).
inline void check_inputs_outside_run_folder(const TrainOptions& o) {
    std::vector<CommandInput> inputs;
    auto add = [&](const std::string& name, const std::string& path) { inputs.push_back({name + " " + path, file_id(path)}); };
    ModelConfig size;
    if (!o.init.empty() && !model_size(o.init, &size)) add("the -init file", o.init);
    if (!o.config_path.empty()) add("the -config file", o.config_path);
    for (const std::string& path : DataLoader::glob_files(o.train_data)) add("the -train_data shard", path);
    if (o.eval_every > 0 || o.sample_every > 0)
        for (const std::string& path : DataLoader::glob_files(o.val_data)) add("the -val_data shard", path);
    if (o.sample_every > 0) add("the -tokenizer file", o.tokenizer_path);
    check_inputs_outside_folder(o.out_dir, inputs);
}

// GPT-2's step of 524,288 tokens (docs/train.md §1), the default -total_batch on CUDA, and the
// share of the training tokens a default step may take at most: one sixteenth.
constexpr long long kGpt2StepTokens = 524288;
constexpr long long kDefaultStepShareOfData = 16;

// The default -total_batch on CUDA of one process: GPT-2's 524,288 tokens rounded down to a
// multiple of `micro_tokens` (B·T, at least one); on a corpus of `train_tokens` so small that this is
// more than 1/16 of it, 1/16 of it (at least one micro-step), said on one line. The bundled
// corpus's 287,625 tokens take one micro-step of 16 x 1024 tokens (docs/train.md §1).
inline long long default_gpu_total_batch(long long micro_tokens, uint64_t train_tokens) {
    const long long gpt2 = std::max(micro_tokens, kGpt2StepTokens / micro_tokens * micro_tokens);
    const long long share = (long long)std::min<uint64_t>(train_tokens / kDefaultStepShareOfData, kGpt2StepTokens);
    const long long fitted = std::max(micro_tokens, share / micro_tokens * micro_tokens);
    if (train_tokens == 0 || fitted >= gpt2) return gpt2;
    std::printf("batch: default total_batch %lld lowered to %lld tokens per step, at most 1/%lld of the %llu training "
                "tokens (at least one micro-step of %lld); give -total_batch to choose\n",
                gpt2, fitted, kDefaultStepShareOfData, (unsigned long long)train_tokens, micro_tokens);
    return fitted;
}

// Resolves the device, the model (resumed, loaded or fresh), and the batch shape before the
// device has its say (fit_to_device); `ranks` processes share every step.
inline Run prepare_run(const TrainOptions& o, int ranks) {
    Run r;
    r.opt = o;
    r.ranks = ranks;
    r.device = resolve_device(o.device);
    const bool gpu = r.device == "cuda";
    check_precision(r.device, o.precision, o.given.count("precision") > 0);
    check_fused(r.device, o.fused, o.given.count("fused") > 0);
    if (gpu && o.cpu_ops != "fast")
        throw InputError("flag -cpu_ops: chooses among the CPU's op sets, but this run is on cuda (give -device cpu)");
    r.resuming = o.resume && resume_from_folder(r);
    r.fusion = r.resuming && gpu ? resumed_fusion(o) : fusion_request(o.fused);
    if (r.fusion.timed && ranks > 1)  // each rank would time its own GPU and might choose otherwise
        r.fusion = {false, EVERY_KIND_FUSED, "-fused auto with several ranks: not timed, so that every rank runs the "
                                             "same products"};
    if (!r.resuming) start_from_init(r, gpu);
    validate_config(r.cfg, "model");
    TrainOptions& s = r.opt;  // the sizes resolved
    if (s.T == 0) s.T = std::min(gpu ? 1024 : 256, r.cfg.maxT);
    if (s.B == 0)
        s.B = default_batch(gpu ? 32 : 8, s.T, o.eval_every > 0 ? std::vector<std::string>{o.train_data, o.val_data}
                                                                   : std::vector<std::string>{o.train_data});
    if (s.T > r.cfg.maxT)
        throw InputError("flag -T: " + std::to_string(s.T) + " exceeds the model's maxT " + std::to_string(r.cfg.maxT));
    batch_positions(s.B, s.T);  // B*T checked before the device's memory plan multiplies it further
    s.zero = o.zero && ranks > 1;
    return r;
}

// The micro-batch on the device, then the steps' shape. Collective, after the ranks agreed on
// prepare_run: on CUDA with several ranks their NCCL communicator is made first, so that the
// device memory NCCL takes is in use when fit_device_batch asks what is free (docs/cuda_memory.md).
inline void fit_to_device(Run& r, ProcessGroup& group) {
    const bool gpu = r.device == "cuda";
    const int ranks = r.ranks;
    TrainOptions& s = r.opt;
    r.comm = make_device_comm(r.device, group, num_parameters(r.cfg), group.local_rank());
    s.B = fit_device_batch(r.device, s.precision, r.cfg, s.B, s.given.count("B") > 0, s.T, group.local_rank());
    const long long positions = batch_positions(s.B, s.T);
    if (s.total_batch == 0) {
        const long long one_process =
            gpu ? default_gpu_total_batch(positions, DataLoader::all_shard_tokens(s.train_data)) : positions;
        s.total_batch = default_total_batch(one_process, s.B, s.T, ranks);
    }
    r.grad_accum = step_counts(s.B, s.T, ranks, s.total_batch, s.steps).grad_accum;
    if (s.eval_every > 0) evaluation_tokens(s.eval_batches, s.B, s.T);
}

// Continues `loader`, rank `rank`'s, where a run saved `saved`: rank 0's position in the stream
// of windows, which is the number of windows all ranks read before (the same for any number of
// ranks); rank r reads from there + r on.
inline void resume_loader(DataLoader& loader, const LoaderState& saved, int rank) {
    const uint64_t position = saved.epoch * loader.num_windows() + saved.cursor + rank;
    loader.restore({position / loader.num_windows(), position % loader.num_windows()});
}

// Writes model_N.bin then state_N.bin (N = steps done), each whole or not at all; collective:
// with ZeRO-1 rank 0 gathers the moments of every rank's shard, and writes alone. The data
// position saved is rank 0's, the number of windows all ranks have read (resume_loader).
inline void save_checkpoint(Backend& model, const Run& r, TrainState& state, const DataLoader& train,
                            ProcessGroup& group) {
    const size_t P = num_parameters(r.cfg);
    state.m.resize(P);
    state.v.resize(P);
    if (sharded(r)) {
        const size_t mine = group.my_shard(P).size();
        std::vector<float> m(mine), v(mine);
        model.get_moments(m.data(), v.data());
        group.gather_to_root(m.data(), state.m.data(), P);
        group.gather_to_root(v.data(), state.v.data(), P);
    } else {
        model.get_moments(state.m.data(), state.v.data());
    }
    if (!group.is_root()) return;
    std::vector<float> params(P);
    model.get_params(params.data());
    state.loader = train.state();
    const std::string model_path = numbered(r.opt.out_dir, "model", state.steps_done);
    checked_write([&] {
        write_checkpoint(model_path, r.cfg, params.data(), state.run_id);
        try {
            write_state(numbered(r.opt.out_dir, "state", state.steps_done), state, r.cfg.placement);
        } catch (const InputError&) {
            std::remove(model_path.c_str());  // half a pair: the previous pair stays the newest
            throw;
        }
    });
    std::printf("saved %s\n", model_path.c_str());
}

// The weights (the checkpoint's or fresh ones of -seed), the share of the AdamW state this rank
// updates (all of it, or its shard with ZeRO-1) and, resuming, the saved moments of that share.
inline Range load_model(const Run& r, Backend& model, ProcessGroup& group) {
    const size_t P = num_parameters(r.cfg);
    if (r.initial_params.empty()) {
        std::vector<float> params(P);
        init_parameters(r.cfg, params.data(), r.state.seed);
        model.set_params(params.data());
    } else {
        model.set_params(r.initial_params.data());
    }
    const Range range = sharded(r) ? group.my_shard(P) : Range{0, P};
    model.set_optimizer_range(range);
    if (r.resuming) model.set_moments(r.state.m.data() + range.lo, r.state.v.data() + range.lo);
    return range;
}

// The start-up lines: backend, model, data, batch, ranks and optimiser.
inline void print_start(const Run& r, const Backend& model, const DataLoader& train, const DataLoader* val,
                        const Range& optimizer_range) {
    const TrainOptions& o = r.opt;
    std::printf("backend: %s\n", model.name().c_str());
    if (const FusionChoice* fused = model.fusion()) std::printf("fused products: %s\n", fused->line.c_str());
    print_model(r.cfg, r.model_origin);
    std::printf("train data: %s (%s, %llu tokens)\n", o.train_data.c_str(), counted(train.files().size(), "file").c_str(),
                (unsigned long long)train.total_tokens());
    if (val) {
        std::printf("val data: %s (%s, %llu tokens)\n", o.val_data.c_str(), counted(val->files().size(), "file").c_str(),
                    (unsigned long long)val->total_tokens());
        if (const std::string shared = shared_shard(train, *val); !shared.empty())
            std::printf("warning: the validation shard %s is also training data: the val loss then measures how well "
                        "the model remembers, not how it generalises\n", shared.c_str());
        if (uint64_t(o.eval_batches) > val->num_windows())
            std::printf("val batches: %d per evaluation but %llu distinct ones: batches after %llu repeat the first "
                        "ones (-allow_repeats 1)\n", o.eval_batches, (unsigned long long)val->num_windows(),
                        (unsigned long long)val->num_windows());
    }
    std::printf("batch: B=%d T=%d, %lld tokens per step (%s), shuffle %d, seed %llu\n", o.B, o.T, o.total_batch,
                counted(r.grad_accum * r.ranks, "micro-step").c_str(), (int)o.shuffle, (unsigned long long)r.state.seed);
    if (r.ranks > 1)
        std::printf("ranks: %d processes, each %s of B*T = %d tokens per step (%lld tokens); AdamW state %s\n",
                    r.ranks, counted(r.grad_accum, "micro-step").c_str(), o.B * o.T, o.total_batch / r.ranks,
                    sharded(r) ? ("sharded over the ranks (ZeRO-1, " + format_count(optimizer_range.size()) +
                                  " parameters on rank 0)").c_str()
                               : "replicated on every rank (-zero 0)");
    std::printf("optimiser: AdamW lr %g -> %g, warmup %d, %d steps, wd %g, betas (%g, %g), eps %g, clip %g\n", o.lr,
                o.lr_min, o.warmup, o.steps, o.wd, o.beta1, o.beta2, o.eps, o.clip);
}
