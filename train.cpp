// train.cpp — ./train: trains GPT-2 with Pre-, Post- or Peri-LN and residual step Δt
// (docs/model.md §5, docs/cli.md) on the CPU reference or the CUDA backend.
//
//   ./train -ln peri -dt 0.1                      the bundled corpus, default sizes
//   ./train -init d12 -train_data "owt/train_*.bin" -val_data "owt/val_*.bin" -out runs/x
//
// Exit status (README "Exit status"): 0 done, 1 out of memory, 2 bad input (one line naming the
// flag or file, before any work; also a -out folder in use or holding another run), 3 stopped as
// nonfinite or diverged (README "Run outcomes"), 4 a write failed, 130 / 143 stopped by
// SIGINT / SIGTERM after writing a checkpoint.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend.h"
#include "baselines.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "diagnostics.h"
#include "distributed.h"
#include "errors.h"
#include "flags.h"
#include "json.h"
#include "model.h"
#include "mpi_group.h"
#include "run_dir.h"
#include "setup.h"
#include "signals.h"
#include "training.h"

// ---------------------------------------------------------------------------------------------
// Options

struct TrainOptions {
    Placement placement;
    float dt;
    bool placement_given, dt_given;
    std::string init, train_data, val_data, out_dir, device, precision, cpu_ops;
    int B, T, steps, warmup, eval_every, eval_batches, save_every, stats_every, threads, outcome_window;
    long long total_batch;
    double lr, lr_min, wd, beta1, beta2, eps, clip, diverge_rise, spike_rise;
    uint64_t seed;
    bool shuffle, resume, overwrite, change_steps, zero;
    std::string command;  // the command line, for config.json
};

static const char* USAGE =
    "usage: ./train [-name value ...]\n"
    "  -ln pre|post|peri   LayerNorm placement (pre)        -dt X          residual step (1.0)\n"
    "  -init d6|d12|d24|d36|d48|SIZE|FILE  fresh size or checkpoint (d6 on CPU, d12 on CUDA);\n"
    "        SIZE = l{L}h{NH}c{C}[v{V}][t{maxT}], e.g. l16h2c64 (V 50257, maxT 1024 unless given)\n"
    "  -train_data GLOB  -val_data GLOB  token shards (the bundled corpus)\n"
    "  -B N  -T N  -total_batch TOKENS  micro-batch, sequence length, tokens per step (B*T)\n"
    "  -steps N (1000)  -lr X (6e-4)  -lr_min X (lr/10)  -warmup N (20, at most steps/10)  -wd X (0.1)\n"
    "  -beta1 X (0.9)  -beta2 X (0.95)  -eps X (1e-8)  -clip X (1.0; 0 = off)\n"
    "  -outcome_window N (20)  -diverge_rise X (1.0)  -spike_rise X (1.0): run outcomes (README)\n"
    "  -seed N (42)  -shuffle 0|1 (1)  -eval_every N (100)  -eval_batches N (10)\n"
    "  -save_every N (250)  -out DIR (out)  -resume 0|1 (0)\n"
    "  -overwrite 0|1 (0): remove another run's files from -out instead of refusing to start\n"
    "  -change_steps 0|1 (0): with -resume 1, let -steps differ from the run's (the schedule's end moves)\n"
    "  -stats_every N (0 = off): hidden-state and gradient statistics per layer into log.jsonl\n"
    "  -device auto|cpu|cuda (auto)  -precision bf16|fp32 (bf16, CUDA only)  -threads N (CPU)\n"
    "  -cpu_ops fast|reference (fast): the CPU's op set; reference = the textbook ops of cpu_ops.h (slow)\n"
    "  -zero 0|1 (1): under mpirun, shard the AdamW state over the ranks (ZeRO-1; README)\n";

// Parses and range-checks every flag; throws InputError naming the first bad one.
static TrainOptions parse_options(int argc, char** argv) {
    Flags f(argc, argv);
    TrainOptions o;
    for (int i = 0; i < argc; i++) o.command += (i ? " " : "") + std::string(argv[i]);
    parse_placement(f.str("ln", "pre", {"pre", "post", "peri"}), &o.placement);
    o.placement_given = f.given("ln");
    o.dt = (float)f.real("dt", 1.0, 0.0, 1e3, true);
    o.dt_given = f.given("dt");
    o.device = f.str("device", "auto", {"auto", "cpu", "cuda"});
    o.precision = f.str("precision", "bf16", {"bf16", "fp32"});
    o.threads = (int)f.integer("threads", 0, 1, 1024);
    o.cpu_ops = f.str("cpu_ops", "fast", {"fast", "reference"});
    o.init = f.str("init", "");
    o.train_data = f.str("train_data", DEFAULT_TRAIN_DATA);
    o.val_data = f.str("val_data", DEFAULT_VAL_DATA);
    o.B = (int)f.integer("B", 0, 1, 1 << 20);
    o.T = (int)f.integer("T", 0, 1, 1 << 20);
    o.total_batch = f.integer("total_batch", 0, 1, 1LL << 40);
    o.steps = (int)f.integer("steps", 1000, 1, 1 << 30);
    o.lr = f.real("lr", 6e-4, 0.0, 10.0);
    o.lr_min = f.real("lr_min", o.lr / 10, 0.0, 10.0);
    o.warmup = (int)f.integer("warmup", std::min(20, o.steps / 10), 0, 1 << 30);
    o.wd = f.real("wd", 0.1, 0.0, 10.0);
    o.beta1 = f.real("beta1", 0.9, 0.0, 1.0);
    o.beta2 = f.real("beta2", 0.95, 0.0, 1.0);
    o.eps = f.real("eps", 1e-8, 0.0, 1.0, true);
    o.clip = f.real("clip", 1.0, 0.0, 1e9);
    o.outcome_window = (int)f.integer("outcome_window", 20, 1, 1 << 30);
    o.diverge_rise = f.real("diverge_rise", 1.0, 0.0, 1e9, true);
    o.spike_rise = f.real("spike_rise", 1.0, 0.0, 1e9, true);
    o.seed = (uint64_t)f.integer("seed", 42, 0, (1LL << 62));
    o.shuffle = f.integer("shuffle", 1, 0, 1) == 1;
    o.eval_every = (int)f.integer("eval_every", 100, 0, 1 << 30);
    o.eval_batches = (int)f.integer("eval_batches", 10, 1, 1 << 30);
    o.save_every = (int)f.integer("save_every", 250, 0, 1 << 30);
    o.stats_every = (int)f.integer("stats_every", 0, 0, 1 << 30);
    o.out_dir = f.str("out", "out");
    o.resume = f.integer("resume", 0, 0, 1) == 1;
    o.overwrite = f.integer("overwrite", 0, 0, 1) == 1;
    o.change_steps = f.integer("change_steps", 0, 0, 1) == 1;
    o.zero = f.integer("zero", 1, 0, 1) == 1;
    f.finish();
    if (o.beta1 >= 1.0) throw InputError("flag -beta1: must be < 1");
    if (o.beta2 >= 1.0) throw InputError("flag -beta2: must be < 1");
    if (o.resume && o.overwrite) throw InputError("flag -overwrite: cannot be combined with -resume 1");
    if (o.change_steps && !o.resume) throw InputError("flag -change_steps: only applies with -resume 1");
    if (o.warmup > o.steps)
        throw InputError("flag -warmup: " + std::to_string(o.warmup) + " exceeds -steps " + std::to_string(o.steps));
    return o;
}

// ---------------------------------------------------------------------------------------------
static std::string numbered(const std::string& dir, const char* stem, int step) {
    char name[64];
    std::snprintf(name, sizeof name, "/%s_%08d.bin", stem, step);
    return dir + name;
}

// ---------------------------------------------------------------------------------------------
// The run

// Everything a run needs, resolved and validated before any output is written.
struct Run {
    TrainOptions opt;
    std::string device;
    ModelConfig cfg;
    std::string model_origin;
    std::vector<float> initial_params;  // from a checkpoint; empty for a fresh model
    TrainState state;                   // resumed optimiser state; steps_done = 0 when fresh
    bool resuming = false;
    int ranks = 1;       // processes training the model together (mpirun -np)
    int grad_accum = 1;  // micro-steps per step on each rank: total_batch / (ranks·B·T)
};

// The text of DIR/config.json: how this run was started, every setting resolved (defaults filled
// in), so that a run folder says what made it. Rewritten, with resumed_at_step, on -resume.
static std::string config_text(const Run& r, Backend& model, const DataLoader& train, const DataLoader* val) {
    const TrainOptions& o = r.opt;
    JsonObject j;
    auto field = [&](const std::string& name, const std::string& value) { j.add(name, value); };
    auto files = [](const DataLoader& d) {
        std::string list = "[";
        for (const std::string& f : d.files()) list += (list.size() > 1 ? ", " : "") + json_string(f);
        return list + "]";
    };
    field("command", json_string(o.command));
    field("backend", json_string(model.name()));
    field("model", json_string(r.model_origin));
    add_model_json(j, r.cfg);
    field("train_files", files(train));
    field("train_tokens", std::to_string(train.total_tokens()));
    field("val_files", val ? files(*val) : "[]");
    field("B", std::to_string(o.B));
    field("T", std::to_string(o.T));
    field("total_batch", std::to_string(o.total_batch));
    field("ranks", std::to_string(r.ranks));
    field("grad_accum", std::to_string(r.grad_accum));
    field("zero", std::to_string((int)(o.zero && r.ranks > 1)));
    field("steps", std::to_string(o.steps));
    field("lr", json_number(o.lr));
    field("lr_min", json_number(o.lr_min));
    field("warmup", std::to_string(o.warmup));
    field("wd", json_number(o.wd));
    field("beta1", json_number(o.beta1));
    field("beta2", json_number(o.beta2));
    field("eps", json_number(o.eps));
    field("clip", json_number(o.clip));
    field("outcome_window", std::to_string(o.outcome_window));
    field("diverge_rise", json_number(o.diverge_rise));
    field("spike_rise", json_number(o.spike_rise));
    field("seed", std::to_string(r.state.seed));
    field("shuffle", std::to_string((int)o.shuffle));
    field("eval_every", std::to_string(o.eval_every));
    field("eval_batches", std::to_string(o.eval_batches));
    field("save_every", std::to_string(o.save_every));
    field("stats_every", std::to_string(o.stats_every));
    field("resumed_at_step", r.resuming ? std::to_string(r.state.steps_done) : "null");
    return j.str();
}

// The settings every rank must share: config.json less its "backend" line (the thread count
// or the GPU, which may differ between ranks).
static std::string shared_settings(const std::string& config) {
    std::string out;
    std::stringstream in(config);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("  \"backend\": ", 0) != 0) out += line + "\n";
    return out;
}

// Checks that a checkpoint agrees with -ln / -dt when they were given.
static void check_against_flags(const ModelConfig& m, const TrainOptions& o, const std::string& path) {
    if (o.placement_given && m.placement != o.placement)
        throw InputError(path + ": checkpoint is " + placement_name(m.placement) + "-LN but -ln " +
                         placement_name(o.placement) + " was given");
    if (o.dt_given && m.dt != o.dt)
        throw InputError(path + ": checkpoint has dt " + json_float(m.dt) + " but -dt " + json_float(o.dt) + " was given");
}

// Refuses a resumed optimiser state that cannot belong to this run: a step count other than the
// one in its file name `n`, or a seed other than -seed.
static void check_resumed_state(const TrainState& s, int n, const TrainOptions& o, const std::string& path) {
    if (s.steps_done != n)
        throw InputError(path + ": records " + std::to_string(s.steps_done) + " steps done but its name says " +
                         std::to_string(n) + "; the file was renamed or belongs to another run");
    if (s.seed != o.seed)
        throw InputError("flag -seed: " + std::to_string(o.seed) + " but the run being resumed has seed " +
                         std::to_string(s.seed) + " (" + path + ")");
}

// True when the AdamW state is sharded over the ranks (ZeRO-1, README "Training on several GPUs
// or nodes"): -zero 1 with more than one rank.
static bool sharded(const Run& r) { return r.opt.zero && r.ranks > 1; }

// Continues `loader`, rank `rank`'s, where a run saved `saved`: rank 0's position in the stream
// of windows, which is the number of windows all ranks read before (the same for any number of
// ranks); rank r reads from there + r on.
static void resume_loader(DataLoader& loader, const LoaderState& saved, int rank) {
    const uint64_t position = saved.epoch * loader.num_windows() + saved.cursor + rank;
    loader.restore({position / loader.num_windows(), position % loader.num_windows()});
}

// Runs `start` (a stage of start-up) on every rank of `group` and fails all of them together
// when it threw InputError on any: rank 0 throws the message of the lowest failing rank, the
// other ranks QuietExit (they print nothing, so the user reads one line); every rank exits 2.
// A collective inside `start` must come first: a rank that failed before it would not take part.
struct QuietExit {
    int status;
};
struct AgreedInputError : InputError {
    using InputError::InputError;
};
template <typename Start>
void start_on_every_rank(ProcessGroup& group, Start start) {
    std::string error;
    try {
        start();
    } catch (const InputError& e) {
        error = e.what();
    }
    try {
        group.agree(error);
    } catch (const InputError& e) {
        if (!group.is_root()) throw QuietExit{2};
        throw AgreedInputError(e.what());
    }
}

// Resolves the device, the model (resumed, loaded or fresh), and the batch shape; `ranks`
// processes share every step.
static Run prepare(const TrainOptions& o, int ranks, int gpu_index) {
    Run r;
    r.opt = o;
    r.ranks = ranks;
    r.device = resolve_device(o.device);
    const bool gpu = r.device == "cuda";
    if (gpu && o.cpu_ops != "fast")
        throw InputError("flag -cpu_ops: chooses among the CPU's op sets, but this run is on cuda (give -device cpu)");
    if (o.resume) {
        const std::vector<int> saved = checkpoint_steps(o.out_dir);
        if (!saved.empty()) {
            const int n = saved.back();
            if (n > o.steps)
                throw InputError("flag -steps: " + std::to_string(o.steps) + " is below the newest checkpoint in " +
                                 o.out_dir + " (after " + std::to_string(n) + " steps): resuming from an older one " +
                                 "would leave two runs' checkpoints side by side");
            const std::string model_path = numbered(o.out_dir, "model", n);
            r.cfg = read_checkpoint(model_path, &r.initial_params);
            check_against_flags(r.cfg, o, model_path);
            r.state = read_state(numbered(o.out_dir, "state", n), r.initial_params.size(), r.cfg.placement);
            check_resumed_state(r.state, n, o, numbered(o.out_dir, "state", n));
            r.resuming = true;
            r.model_origin = "resumed from " + model_path;
        } else {
            std::printf("resume: no complete checkpoint in %s; starting fresh\n", o.out_dir.c_str());
        }
    }
    if (!r.resuming) {
        const std::string init = o.init.empty() ? (gpu ? "d12" : "d6") : o.init;
        if (model_size(init, &r.cfg)) {
            r.cfg.placement = o.placement;
            r.cfg.dt = o.dt;
            r.model_origin = "fresh " + init;
        } else {
            if (access(init.c_str(), F_OK) != 0)
                throw InputError("flag -init: '" + init + "' is neither a model size (d6, d12, d24, d36, d48 or " +
                                 "l{L}h{NH}c{C}[v{V}][t{maxT}]) nor an existing checkpoint file");
            struct stat st;
            if (stat(init.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
                throw InputError("flag -init: '" + init + "' is a folder, not a checkpoint file (to continue the run " +
                                 "in it: -out " + init + " -resume 1)");
            r.cfg = read_checkpoint(init, &r.initial_params);
            check_against_flags(r.cfg, o, init);
            r.model_origin = init;
        }
        r.state.seed = o.seed;
    }
    validate_config(r.cfg, "model");
    if (r.opt.T == 0) r.opt.T = std::min(gpu ? 1024 : 256, r.cfg.maxT);
    if (r.opt.B == 0)
        r.opt.B = default_batch(gpu ? 32 : 8, r.opt.T, o.eval_every > 0 ? std::vector<std::string>{o.train_data, o.val_data}
                                                                          : std::vector<std::string>{o.train_data});
    if (r.opt.T > r.cfg.maxT)
        throw InputError("flag -T: " + std::to_string(r.opt.T) + " exceeds the model's maxT " + std::to_string(r.cfg.maxT));
    r.opt.B = fit_device_batch(r.device, o.precision, r.cfg, r.opt.B, o.B != 0, r.opt.T, gpu_index);
    const long long tokens = (long long)r.opt.B * r.opt.T * ranks;  // one micro-step of every rank
    if (r.opt.total_batch == 0) r.opt.total_batch = gpu ? std::max(tokens, 524288LL) / tokens * tokens : tokens;
    if (r.opt.total_batch % tokens != 0)
        throw InputError("flag -total_batch: " + std::to_string(r.opt.total_batch) + " is not a multiple of " +
                         (ranks > 1 ? "ranks*B*T = " + std::to_string(ranks) + "*" + std::to_string(r.opt.B) + "*" +
                                          std::to_string(r.opt.T) + " = "
                                    : std::string("B*T = ")) +
                         std::to_string(tokens));
    r.grad_accum = (int)(r.opt.total_batch / tokens);
    return r;
}

// Mean loss over the first `batches` batches of the validation data, the same on every rank:
// rank r of W evaluates batches r, r + W, ... (its loader is dealt them) and the sum is shared.
static double evaluate(Backend& model, DataLoader& val, int batches, ProcessGroup& group) {
    val.reset();
    double sum = 0;
    for (int i = group.rank(); i < batches; i += group.size()) {
        val.next_batch();
        sum += model.network().forward(val.inputs(), val.targets());
    }
    return group.sum(sum) / batches;
}

// Writes model_N.bin then state_N.bin (N = steps done), each whole or not at all; collective:
// with ZeRO-1 rank 0 gathers the moments of every rank's shard, and writes alone. The data
// position saved is rank 0's, the number of windows all ranks have read (resume_loader).
static void save_checkpoint(Backend& model, const Run& r, TrainState& state, const DataLoader& train,
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
        write_checkpoint(model_path, r.cfg, params.data());
        try {
            write_state(numbered(r.opt.out_dir, "state", state.steps_done), state, r.cfg.placement);
        } catch (const InputError&) {
            std::remove(model_path.c_str());  // half a pair: the previous pair stays the newest
            throw;
        }
    });
    std::printf("saved %s\n", model_path.c_str());
}

// A duration for people: "4.2s", "12m05s", "3h07m".
static std::string duration_text(double seconds) {
    char buf[32];
    const long s = std::lround(seconds);
    if (seconds < 60) std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    else if (s < 3600) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
    return buf;
}

// The `stats` record for the current micro-batch (README, *Outputs*): per layer (the residual
// stream X_0 .. X_L) and, with suffix _half, at all 2L + 1 half-block points; then per block
// and for the output logits. fcproj_grad_norms is of the whole step's gradient.
static std::string stats_record(int step, const ForwardStats& f, const std::vector<double>& grad_norms,
                                const std::vector<double>& fcproj_grad_norms) {
    const std::vector<StreamStats>& stats = f.stream;
    std::vector<double> mean_abs, entry_var, data_var;
    for (const StreamStats& s : stats) {
        mean_abs.push_back(s.mean_abs);
        entry_var.push_back(s.entry_var);
        data_var.push_back(s.data_var);
    }
    JsonRecord r;
    r.add("step", std::to_string(step)).add("event", json_string("stats"));
    const std::vector<double> grad_norm_scaled = diag::products(grad_norms, f.rms);
    const std::pair<const char*, const std::vector<double>*> series[] = {
        {"mean_abs", &mean_abs}, {"entry_var", &entry_var}, {"data_var", &data_var}, {"grad_norm", &grad_norms},
        {"rms", &f.rms}, {"grad_norm_scaled", &grad_norm_scaled}};
    for (const auto& [name, values] : series) r.add(name, json_array(*values, 0, 2));
    for (const auto& [name, values] : series) r.add(std::string(name) + "_half", json_array(*values));
    const std::pair<const char*, const std::vector<double>*> blocks[] = {
        {"attn_logit_max", &f.attn_logit_max}, {"param_norm", &f.param_norm},
        {"fcproj_grad_norm", &fcproj_grad_norms}, {"mlp_hidden_rms", &f.mlp_hidden_rms}};
    for (const auto& [name, values] : blocks) r.add(name, json_array(*values));
    r.add("logit_max", json_number(f.logits.logit_max)).add("log_z_mean", json_number(f.logits.log_z_mean));
    return r.str();
}

// The log record of an evaluation at `step` (docs/logs.md §2); the final one adds unigram_ce.
static JsonRecord val_record(int step, double val_loss) {
    JsonRecord r;
    r.add("step", std::to_string(step))
        .add("val_loss", json_number(val_loss))
        .add("val_ppl", json_number(std::exp(val_loss)));
    return r;
}

// The log record of a run stopped as `outcome` (nonfinite or diverged) at `step` (docs/logs.md
// §3); a non-finite loss or norm is null; `spikes` counts the transient spikes before it.
static std::string diverged_record(int step, const std::string& outcome, const std::string& reason, double loss,
                                   double grad_norm, int spikes) {
    return JsonRecord()
        .add("step", std::to_string(step))
        .add("event", json_string("diverged"))
        .add("outcome", json_string(outcome))
        .add("reason", json_string(reason))
        .add("loss", json_number(loss))
        .add("grad_norm", json_number(grad_norm))
        .add("spikes", std::to_string(spikes))
        .str();
}

// `config` with the member "steps_changes": the earlier changes of -steps recorded in `saved`
// and, when this resume changes it (-change_steps 1), {"at_step": N, "from": old, "to": new}.
static std::string record_steps_change(const Run& r, const std::string& saved, const std::string& config) {
    const std::map<std::string, std::string> old = config_values(saved);
    std::string changes = old.count("steps_changes") ? old.at("steps_changes") : "[]";
    const std::string from = old.count("steps") ? old.at("steps") : "null", to = std::to_string(r.opt.steps);
    if (from != to) {
        changes.pop_back();  // the closing ']'
        changes += std::string(changes.size() > 1 ? ", " : "") + "{\"at_step\": " + std::to_string(r.state.steps_done) +
                   ", \"from\": " + from + ", \"to\": " + to + "}]";
        std::printf("resume: -steps changed from %s to %s at step %d (-change_steps 1); the schedule now ends at step %s\n",
                    from.c_str(), to.c_str(), r.state.steps_done, to.c_str());
    }
    return changes == "[]" ? config : with_member(config, "steps_changes", changes);
}

// On -resume 1 with a config.json in the folder: refuses settings that contradict it (and a
// contradicting -init) and returns `config` keeping the run's original command and model.
// Resuming a checkpoint without a config.json is refused: nothing would say what the run was.
static std::string check_resumed_config(const Run& r, const std::string& path, const std::string& config) {
    std::ifstream in(path);
    if (!in) {
        if (r.resuming) throw InputError(path + ": missing, so -resume 1 cannot check that it continues the same run");
        return config;
    }
    const std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    check_same_settings(path, saved, config, r.opt.change_steps ? std::vector<std::string>{"steps"} : std::vector<std::string>{});
    const std::string first_loss = logged_first_loss(r.opt.out_dir);
    if (r.resuming && !first_loss.empty() && first_loss != json_number(r.state.first_loss))
        throw InputError(numbered(r.opt.out_dir, "state", r.state.steps_done) + ": belongs to another run (its step-0 loss " +
                         json_number(r.state.first_loss) + " is not the " + first_loss + " of log.jsonl)");
    if (!r.opt.init.empty()) {
        ModelConfig size;
        const std::string origin = json_string(model_size(r.opt.init, &size) ? "fresh " + r.opt.init : r.opt.init);
        const std::string was = config_values(saved)["model"];
        if (origin != was)
            throw InputError("flag -init: " + r.opt.init + " but the run being resumed started from " + was + " (" +
                             path + ")");
    }
    return record_steps_change(r, saved, keep_saved_members(config, saved, {"command", "model"}));
}

// The run's last line: steps, final train and val loss, wall time, where the checkpoint is.
static void print_summary(const TrainOptions& o, int first_step, double loss, double val_loss, double seconds) {
    std::printf("done: %d steps%s in %s | final train loss %.4f | val loss %s | checkpoint %s\n", o.steps - first_step,
                first_step ? (" (from step " + std::to_string(first_step) + ")").c_str() : "",
                duration_text(seconds).c_str(), loss, std::isfinite(val_loss) ? json_number(val_loss).c_str() : "not evaluated",
                numbered(o.out_dir, "model", o.steps).c_str());
}

static int train(Run& r, RunFolder* folder, ProcessGroup& group) {
    const TrainOptions& o = r.opt;
    std::unique_ptr<DataLoader> train_data, val_data;
    std::unique_ptr<Backend> model;
    const std::string config_path = in_folder(o.out_dir, "config.json");
    std::string config;
    start_on_every_rank(group, [&] {
        train_data = std::make_unique<DataLoader>(o.train_data, o.B, o.T, r.cfg.V, o.shuffle, r.state.seed,
                                                  group.rank(), group.size());
        if (o.eval_every > 0)
            val_data = std::make_unique<DataLoader>(o.val_data, o.B, o.T, r.cfg.V, false, 0, group.rank(), group.size());
        if (r.resuming) resume_loader(*train_data, r.state.loader, group.rank());
        model = make_backend(r.device, o.precision, o.cpu_ops, r.cfg, o.B, o.T, group.local_rank());
        config = config_text(r, *model, *train_data, val_data.get());
    });
    start_on_every_rank(group, [&] {
        group.check_same_settings(shared_settings(config));
        if (o.resume && group.is_root()) config = check_resumed_config(r, config_path, config);
    });
    const size_t P = num_parameters(r.cfg);
    if (r.initial_params.empty()) {
        std::vector<float> params(P);
        init_parameters(r.cfg, params.data(), r.state.seed);
        model->set_params(params.data());
    } else {
        model->set_params(r.initial_params.data());
    }
    const Range optimizer_range = sharded(r) ? group.my_shard(P) : Range{0, P};
    model->set_optimizer_range(optimizer_range);
    if (r.resuming)
        model->set_moments(r.state.m.data() + optimizer_range.lo, r.state.v.data() + optimizer_range.lo);

    std::printf("backend: %s\n", model->name().c_str());
    print_model(r.cfg, r.model_origin);
    std::printf("train data: %s (%zu files, %llu tokens)\n", o.train_data.c_str(), train_data->files().size(),
                (unsigned long long)train_data->total_tokens());
    if (val_data)
        std::printf("val data: %s (%zu files, %llu tokens)\n", o.val_data.c_str(), val_data->files().size(),
                    (unsigned long long)val_data->total_tokens());
    std::printf("batch: B=%d T=%d, %lld tokens per step (%d micro-steps), shuffle %d, seed %llu\n", o.B, o.T,
                o.total_batch, r.grad_accum * r.ranks, (int)o.shuffle, (unsigned long long)r.state.seed);
    if (r.ranks > 1)
        std::printf("ranks: %d processes, each %d micro-steps of B*T = %d tokens per step (%lld tokens); AdamW state %s\n",
                    r.ranks, r.grad_accum, o.B * o.T, o.total_batch / r.ranks,
                    sharded(r) ? ("sharded over the ranks (ZeRO-1, " + format_count(optimizer_range.size()) +
                                  " parameters on rank 0)").c_str()
                               : "replicated on every rank (-zero 0)");
    std::printf("optimiser: AdamW lr %g -> %g, warmup %d, %d steps, wd %g, betas (%g, %g), eps %g, clip %g\n", o.lr,
                o.lr_min, o.warmup, o.steps, o.wd, o.beta1, o.beta2, o.eps, o.clip);

    if (r.resuming && r.state.steps_done == o.steps) {
        std::printf("resume: the run in %s is complete (%d of %d steps, %s); nothing to train\n", o.out_dir.c_str(),
                    o.steps, o.steps, numbered(o.out_dir, "model", o.steps).c_str());
        return 0;
    }
    // Rank 0 alone owns the folder: its lock, config.json, log.jsonl and the checkpoints.
    std::unique_ptr<RunLog> log;
    int dropped = 0;
    if (folder) {
        folder->create();
        log = std::make_unique<RunLog>(o.out_dir, r.resuming, r.state.steps_done, &dropped);
        checked_write([&] { write_text_atomically(config_path, config); });
    }
    auto record = [&](const std::string& json) {
        if (log) log->write(json);
    };
    std::printf("output: %s%s\n", o.out_dir.c_str(), r.resuming ? " (resuming)" : "");
    if (r.resuming)
        std::printf("resume: continuing at step %d of %d from %s%s\n", r.state.steps_done, o.steps,
                    numbered(o.out_dir, "model", r.state.steps_done).c_str(),
                    dropped ? ("; " + std::to_string(dropped) + " log records from after that checkpoint dropped").c_str() : "");

    TrainState& state = r.state;
    const int first_step = state.steps_done;
    const auto run_start = std::chrono::steady_clock::now();
    double last_loss = NAN, last_val_loss = NAN;
    OutcomeTracker outcome({o.outcome_window, o.diverge_rise, o.spike_rise, o.warmup});
    if (log)  // resuming: the steps already done (rank 0 decides on the outcome for every rank)
        for (double past : log->losses()) outcome.observe(past, 0.0);
    const int micro_steps = r.grad_accum * r.ranks;  // of the whole step, over all ranks
    for (int step = first_step; step < o.steps; step++) {
        if (val_data && step % o.eval_every == 0) {
            const double val_loss = last_val_loss = evaluate(*model, *val_data, o.eval_batches, group);
            std::printf("step %5d | val loss %.4f | val ppl %.2f\n", step, val_loss, std::exp(val_loss));
            record(val_record(step, val_loss).str());
        }
        const auto start = std::chrono::steady_clock::now();
        Network& net = model->network();
        Diagnostics& diagnostics = model->diagnostics();
        net.zero_grad();
        double loss = 0;
        const bool stats_step = o.stats_every > 0 && step % o.stats_every == 0;
        ForwardStats stats;
        for (int micro = 0; micro < r.grad_accum; micro++) {
            train_data->next_batch();
            net.forward_to_logits(train_data->inputs(), train_data->targets());
            if (stats_step && micro == 0) stats = diagnostics.forward_stats();  // reads the logits
            diagnostics.record_stream_grads(stats_step && micro == 0);
            loss += net.backward(1.0f / micro_steps);  // the loss comes with its gradient
        }
        // Every rank's gradients summed (each was already weighted 1 / micro_steps): the mean
        // over the whole step, before clipping, the same on every rank.
        model->sum_grads(group);
        loss = group.sum(loss) / micro_steps;
        if (stats_step) {  // of rank 0's first micro-batch, the step's first
            std::vector<double> grad_norms = diagnostics.stream_grad_norms();  // of loss / micro_steps
            for (double& g : grad_norms) g *= micro_steps;
            record(stats_record(step, stats, grad_norms, diagnostics.fcproj_grad_norms()));
        }
        const double norm = net.grad_norm();
        if (step == 0) state.first_loss = loss;
        const std::string reason = outcome.observe(loss, norm);
        if (group.max(group.is_root() && !reason.empty())) {  // rank 0 alone has the whole history
            record(diverged_record(step, outcome.outcome(), reason, loss, norm, outcome.spikes()));
            std::printf("%s at step %d: %s\n", outcome.outcome().c_str(), step, reason.c_str());
            return 3;
        }
        const double lr = learning_rate(step, o.steps, o.lr, o.lr_min, o.warmup);
        model->update({lr, o.beta1, o.beta2, o.eps, o.wd}, step + 1, clip_factor(norm, o.clip));
        if (sharded(r)) model->gather_params(group);
        state.steps_done = step + 1;
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        const double tok_s = o.total_batch / (ms / 1000.0);
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
        const double eta = elapsed / (step + 1 - first_step) * (o.steps - step - 1);
        std::printf("step %5d/%d | loss %.4f | lr %.2e | grad norm %.4f | %.1f ms | %.0f tok/s | %s, ETA %s\n", step,
                    o.steps, loss, lr, norm, ms, tok_s, duration_text(elapsed).c_str(), duration_text(eta).c_str());
        last_loss = loss;
        record(JsonRecord()
                      .add("step", std::to_string(step))
                      .add("loss", json_number(loss))
                      .add("lr", json_number(lr))
                      .add("grad_norm", json_number(norm))
                      .add("ms", json_number(ms))
                      .add("tok_s", json_number(tok_s))
                      .str());
        const bool last = state.steps_done == o.steps;
        const bool saving = last || (o.save_every > 0 && state.steps_done % o.save_every == 0);
        if (saving) save_checkpoint(*model, r, state, *train_data, group);
        if (const int sig = group.max(stop_request::requested()); sig && !last) {  // one rank's signal stops all
            if (!saving) save_checkpoint(*model, r, state, *train_data, group);
            std::printf("stopped by %s after %d of %d steps: continue with the same command and -resume 1\n",
                        stop_request::name(sig), state.steps_done, o.steps);
            return stop_request::exit_status(sig);
        }
    }
    // The outcome of a finished run: collapsed or ok from the final validation loss against
    // unigram_ce of the same tokens; without validation data (-eval_every 0) only "ok".
    double unigram = NAN;
    std::string result = "ok";
    if (val_data && first_step < o.steps) {
        const double val_loss = last_val_loss = evaluate(*model, *val_data, o.eval_batches, group);
        if (group.is_root()) {  // over all evaluated batches: a loader of one rank's own
            DataLoader all_val(o.val_data, o.B, o.T, r.cfg.V, false, 0);
            unigram = evaluated_baselines(o.train_data, r.cfg.V, false, all_val, o.eval_batches, size_t(o.B) * o.T)
                          .unigram_ce();
        }
        std::printf("step %5d | val loss %.4f | val ppl %.2f | unigram_ce %.4f\n", o.steps, val_loss, std::exp(val_loss),
                    unigram);
        record(val_record(o.steps, val_loss).add("unigram_ce", json_number(unigram)).str());
        result = final_outcome(val_loss, unigram);
    }
    if (result == "nonfinite") {  // the last update broke the model
        record(diverged_record(o.steps, result, "final val loss is not finite", NAN, NAN, outcome.spikes()));
        std::printf("nonfinite at step %d: final val loss is not finite\n", o.steps);
        return 3;
    }
    record(JsonRecord()
                  .add("step", std::to_string(o.steps))
                  .add("event", json_string("outcome"))
                  .add("outcome", json_string(result))
                  .add("spikes", std::to_string(outcome.spikes()))
                  .add("val_loss", json_number(last_val_loss))
                  .add("unigram_ce", json_number(unigram))
                  .str());
    std::printf("outcome: %s, %d transient spike%s\n", result.c_str(), outcome.spikes(), outcome.spikes() == 1 ? "" : "s");
    print_summary(o, first_step, last_loss, last_val_loss,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count());
    return 0;
}

// Under mpirun every rank runs main(); rank 0 alone prints (the others' stdout goes to
// /dev/null; their errors still reach stderr). A rank that fails on its own, after start-up or
// in a way the others cannot know, ends the whole job (ProcessGroup::abort) instead of leaving
// them waiting in a collective.
int main(int argc, char** argv) {
    std::unique_ptr<ProcessGroup> group = start_process_group(&argc, &argv);
    if (!group->is_root() && !std::freopen("/dev/null", "w", stdout)) return group->finish(1);
    bool together = false;  // true once every rank knows the status (a normal return, or a start-up failure)
    const int status = run_program("train", USAGE, argc, argv, [&] {
        try {
            std::unique_ptr<RunFolder> folder;
            Run run;
            start_on_every_rank(*group, [&] {
                TrainOptions opt = parse_options(argc, argv);
                flush_subnormals_to_zero();
                if (opt.threads > 0) omp_set_num_threads(opt.threads);
                if (group->is_root()) folder = std::make_unique<RunFolder>(opt.out_dir, opt.resume, opt.overwrite);
                stop_request::install();
                run = prepare(opt, group->size(), group->local_rank());
            });
            const int result = train(run, folder.get(), *group);
            together = true;
            return result;
        } catch (const QuietExit& e) {
            together = true;
            return e.status;
        } catch (const AgreedInputError&) {
            together = true;
            throw;
        }
    });
    if (status != 0 && !together && group->size() > 1) group->abort(status);
    return group->finish(status);
}
