// train.cpp — ./train: trains GPT-2 with Pre-, Post- or Peri-LN and residual step Δt
// (SPEC §2, §4) on the CPU reference or the CUDA backend.
//
//   ./train -ln peri -dt 0.1                      the bundled corpus, default sizes
//   ./train -init d12 -train_data "owt/train_*.bin" -val_data "owt/val_*.bin" -out runs/x
//
// Exit status: 0 done, 2 bad input (one line naming the flag or file, before any work),
// 3 diverged (non-finite loss or gradient norm, or loss above the divergence threshold).
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
#include "checkpoint.h"
#include "dataloader.h"
#include "diagnostics.h"
#include "errors.h"
#include "flags.h"
#include "json.h"
#include "model.h"
#include "setup.h"
#include "training.h"

// ---------------------------------------------------------------------------------------------
// Options

struct TrainOptions {
    Placement placement;
    float dt;
    bool placement_given, dt_given;
    std::string init, train_data, val_data, out_dir, device, precision;
    int B, T, steps, warmup, eval_every, eval_batches, save_every, stats_every, threads;
    long long total_batch;
    double lr, lr_min, wd, beta1, beta2, eps, clip, diverge_margin;
    uint64_t seed;
    bool shuffle, resume;
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
    "  -diverge_margin X (1.0; 0 = off): diverged when loss > first loss + X after warmup\n"
    "  -seed N (42)  -shuffle 0|1 (1)  -eval_every N (100)  -eval_batches N (10)\n"
    "  -save_every N (250)  -out DIR (out)  -resume 0|1 (0)\n"
    "  -stats_every N (0 = off): hidden-state and gradient statistics per layer into log.jsonl\n"
    "  -device auto|cpu|cuda (auto)  -precision bf16|fp32 (bf16, CUDA only)  -threads N (CPU)\n";

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
    o.diverge_margin = f.real("diverge_margin", 1.0, 0.0, 1e9);
    o.seed = (uint64_t)f.integer("seed", 42, 0, (1LL << 62));
    o.shuffle = f.integer("shuffle", 1, 0, 1) == 1;
    o.eval_every = (int)f.integer("eval_every", 100, 0, 1 << 30);
    o.eval_batches = (int)f.integer("eval_batches", 10, 1, 1 << 30);
    o.save_every = (int)f.integer("save_every", 250, 0, 1 << 30);
    o.stats_every = (int)f.integer("stats_every", 0, 0, 1 << 30);
    o.out_dir = f.str("out", "out");
    o.resume = f.integer("resume", 0, 0, 1) == 1;
    f.finish();
    if (o.beta1 >= 1.0) throw InputError("flag -beta1: must be < 1");
    if (o.beta2 >= 1.0) throw InputError("flag -beta2: must be < 1");
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

static bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// The largest N ≤ max_steps with both model_N.bin and state_N.bin in dir, or -1.
static int newest_checkpoint(const std::string& dir, int max_steps) {
    for (int n = max_steps; n >= 1; n--)
        if (file_exists(numbered(dir, "state", n)) && file_exists(numbered(dir, "model", n))) return n;
    return -1;
}

// Creates dir and its parents; throws InputError when that fails.
static void make_dirs(const std::string& dir) {
    std::string path;
    std::stringstream parts(dir);
    std::string part;
    if (!dir.empty() && dir[0] == '/') path = "/";
    while (std::getline(parts, part, '/')) {
        if (part.empty()) continue;
        path += part + "/";
        if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw InputError(dir + ": cannot create output directory");
    }
}

// ---------------------------------------------------------------------------------------------
// log.jsonl

class RunLog {
public:
    // Opens DIR/log.jsonl. When resuming after `keep_before` steps, records of later steps (from
    // a run that went on past its last checkpoint) are dropped so the log reads as one run.
    RunLog(const std::string& dir, bool resuming, int keep_before) : path(dir + "/log.jsonl") {
        std::vector<std::string> kept;
        if (resuming) {
            std::ifstream in(path);
            std::string line;
            while (std::getline(in, line)) {
                long step = -1;
                if (std::sscanf(line.c_str(), "{\"step\": %ld", &step) == 1 && step < keep_before) kept.push_back(line);
            }
        }
        std::string text;
        for (const std::string& l : kept) text += l + "\n";
        write_text_atomically(path, text);
        file = std::fopen(path.c_str(), "a");
        if (!file) throw InputError(path + ": cannot open for appending");
    }
    ~RunLog() { std::fclose(file); }
    void write(const std::string& json) {
        std::fprintf(file, "%s\n", json.c_str());
        std::fflush(file);
    }

private:
    std::string path;
    FILE* file;
};


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
    int grad_accum = 1;
};

// Writes DIR/config.json: how this run was started, every setting resolved (defaults filled
// in), so that a run folder says what made it. Rewritten, with resumed_at_step, on -resume.
static void write_config(const Run& r, Backend& model, const DataLoader& train, const DataLoader* val) {
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
    field("grad_accum", std::to_string(r.grad_accum));
    field("steps", std::to_string(o.steps));
    field("lr", json_number(o.lr));
    field("lr_min", json_number(o.lr_min));
    field("warmup", std::to_string(o.warmup));
    field("wd", json_number(o.wd));
    field("beta1", json_number(o.beta1));
    field("beta2", json_number(o.beta2));
    field("eps", json_number(o.eps));
    field("clip", json_number(o.clip));
    field("diverge_margin", json_number(o.diverge_margin));
    field("seed", std::to_string(r.state.seed));
    field("shuffle", std::to_string((int)o.shuffle));
    field("eval_every", std::to_string(o.eval_every));
    field("eval_batches", std::to_string(o.eval_batches));
    field("save_every", std::to_string(o.save_every));
    field("stats_every", std::to_string(o.stats_every));
    field("resumed_at_step", r.resuming ? std::to_string(r.state.steps_done) : "null");
    write_text_atomically(o.out_dir + "/config.json", j.str());
}

// Checks that a checkpoint agrees with -ln / -dt when they were given.
static void check_against_flags(const ModelConfig& m, const TrainOptions& o, const std::string& path) {
    if (o.placement_given && m.placement != o.placement)
        throw InputError(path + ": checkpoint is " + placement_name(m.placement) + "-LN but -ln " +
                         placement_name(o.placement) + " was given");
    if (o.dt_given && m.dt != o.dt)
        throw InputError(path + ": checkpoint has dt " + json_number(m.dt) + " but -dt " + json_number(o.dt) + " was given");
}

// The micro-batch when -B is not given: `preferred`, halved while one window of B*T+1 tokens
// does not fit in the longest shard of the training data or, with evaluation on, of the
// validation data (the bundled validation shard's 30,132 tokens take B = 16 at T = 1024, not
// the GPU default 32). Says so when it halves.
static int default_batch(int preferred, int T, const TrainOptions& o) {
    uint64_t room = DataLoader::longest_shard_tokens(o.train_data);
    if (o.eval_every > 0) room = std::min(room, DataLoader::longest_shard_tokens(o.val_data));
    if (room == 0) return preferred;  // no readable shard: the loader will say what is wrong
    int B = preferred;
    while (B > 1 && uint64_t(B) * T + 1 > room) B /= 2;
    if (B != preferred)
        std::printf("batch: default B=%d lowered to %d so that one batch of B*T+1 tokens fits in the data's shards\n",
                    preferred, B);
    return B;
}

// Resolves the device, the model (resumed, loaded or fresh), and the batch shape.
static Run prepare(const TrainOptions& o) {
    Run r;
    r.opt = o;
    r.device = resolve_device(o.device);
    const bool gpu = r.device == "cuda";
    if (o.resume) {
        const int n = newest_checkpoint(o.out_dir, o.steps);
        if (n > 0) {
            const std::string model_path = numbered(o.out_dir, "model", n);
            r.cfg = read_checkpoint(model_path, &r.initial_params);
            check_against_flags(r.cfg, o, model_path);
            r.state = read_state(numbered(o.out_dir, "state", n), r.initial_params.size());
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
            r.cfg = read_checkpoint(init, &r.initial_params);
            check_against_flags(r.cfg, o, init);
            r.model_origin = init;
        }
        r.state.seed = o.seed;
    }
    validate_config(r.cfg, "model");
    if (r.opt.T == 0) r.opt.T = std::min(gpu ? 1024 : 256, r.cfg.maxT);
    if (r.opt.B == 0) r.opt.B = default_batch(gpu ? 32 : 8, r.opt.T, o);
    if (r.opt.T > r.cfg.maxT)
        throw InputError("flag -T: " + std::to_string(r.opt.T) + " exceeds the model's maxT " + std::to_string(r.cfg.maxT));
    const long long tokens = (long long)r.opt.B * r.opt.T;
    if (r.opt.total_batch == 0) r.opt.total_batch = gpu ? std::max(tokens, 524288LL) / tokens * tokens : tokens;
    if (r.opt.total_batch % tokens != 0)
        throw InputError("flag -total_batch: " + std::to_string(r.opt.total_batch) + " is not a multiple of B*T = " +
                         std::to_string(tokens));
    r.grad_accum = (int)(r.opt.total_batch / tokens);
    return r;
}

// Mean loss over the first `batches` batches of the validation data.
static double evaluate(Backend& model, DataLoader& val, int batches) {
    val.reset();
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        val.next_batch();
        sum += model.forward(val.inputs(), val.targets());
    }
    return sum / batches;
}

// Writes model_N.bin then state_N.bin (N = steps done), each whole or not at all.
static void save_checkpoint(Backend& model, const Run& r, TrainState& state, const DataLoader& train) {
    const size_t P = num_parameters(r.cfg);
    std::vector<float> params(P);
    state.m.resize(P);
    state.v.resize(P);
    model.get_params(params.data());
    model.get_moments(state.m.data(), state.v.data());
    state.loader = train.state();
    write_checkpoint(numbered(r.opt.out_dir, "model", state.steps_done), r.cfg, params.data());
    write_state(numbered(r.opt.out_dir, "state", state.steps_done), state, r.cfg.placement);
}

// What a `stats` record holds besides the gradient norms, read from the first micro-batch of
// the step between its forward and its backward.
struct ForwardStats {
    std::vector<StreamStats> stream;  // 2L + 1 half-block points
    std::vector<double> rms;          // RMS of the residual stream, same points
    std::vector<double> attn_logit_max, mlp_hidden_rms, param_norm;  // per block (L)
    LogitStats logits;
};

static ForwardStats forward_stats(Backend& model) {
    return {model.stream_stats(), model.stream_rms(), model.attn_logit_max(), model.mlp_hidden_rms(),
            model.block_param_norms(), model.logit_stats()};
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

// The log record of an evaluation at `step` (docs/logs.md §2).
static std::string val_record(int step, double val_loss) {
    return JsonRecord()
        .add("step", std::to_string(step))
        .add("val_loss", json_number(val_loss))
        .add("val_ppl", json_number(std::exp(val_loss)))
        .str();
}

// The log record of a divergence at `step` (docs/logs.md §3); a non-finite loss or norm is null.
static std::string diverged_record(int step, const std::string& reason, double loss, double grad_norm) {
    return JsonRecord()
        .add("step", std::to_string(step))
        .add("event", json_string("diverged"))
        .add("reason", json_string(reason))
        .add("loss", json_number(loss))
        .add("grad_norm", json_number(grad_norm))
        .str();
}

static int train(Run& r) {
    const TrainOptions& o = r.opt;
    DataLoader train_data(o.train_data, o.B, o.T, r.cfg.V, o.shuffle, r.state.seed);
    std::unique_ptr<DataLoader> val_data;
    if (o.eval_every > 0) val_data = std::make_unique<DataLoader>(o.val_data, o.B, o.T, r.cfg.V, false, 0);
    if (r.resuming) train_data.restore(r.state.loader);

    std::unique_ptr<Backend> model = make_backend(r.device, o.precision, r.cfg, o.B, o.T);
    if (r.initial_params.empty()) {
        std::vector<float> params(num_parameters(r.cfg));
        init_parameters(r.cfg, params.data(), r.state.seed);
        model->set_params(params.data());
    } else {
        model->set_params(r.initial_params.data());
    }
    if (r.resuming) model->set_moments(r.state.m.data(), r.state.v.data());

    std::printf("backend: %s\n", model->name().c_str());
    print_model(r.cfg, r.model_origin);
    std::printf("train data: %s (%zu files, %llu tokens)\n", o.train_data.c_str(), train_data.files().size(),
                (unsigned long long)train_data.total_tokens());
    if (val_data)
        std::printf("val data: %s (%zu files, %llu tokens)\n", o.val_data.c_str(), val_data->files().size(),
                    (unsigned long long)val_data->total_tokens());
    std::printf("batch: B=%d T=%d, %lld tokens per step (%d micro-steps), shuffle %d, seed %llu\n", o.B, o.T,
                o.total_batch, r.grad_accum, (int)o.shuffle, (unsigned long long)r.state.seed);
    std::printf("optimiser: AdamW lr %g -> %g, warmup %d, %d steps, wd %g, betas (%g, %g), eps %g, clip %g\n", o.lr,
                o.lr_min, o.warmup, o.steps, o.wd, o.beta1, o.beta2, o.eps, o.clip);

    make_dirs(o.out_dir);
    RunLog log(o.out_dir, r.resuming, r.state.steps_done);
    write_config(r, *model, train_data, val_data.get());
    std::printf("output: %s%s\n", o.out_dir.c_str(), r.resuming ? " (resuming)" : "");

    TrainState& state = r.state;
    const int first_step = state.steps_done;
    for (int step = first_step; step < o.steps; step++) {
        if (val_data && step % o.eval_every == 0) {
            const double val_loss = evaluate(*model, *val_data, o.eval_batches);
            std::printf("step %5d | val loss %.4f | val ppl %.2f\n", step, val_loss, std::exp(val_loss));
            log.write(val_record(step, val_loss));
        }
        const auto start = std::chrono::steady_clock::now();
        model->zero_grad();
        double loss = 0;
        const bool stats_step = o.stats_every > 0 && step % o.stats_every == 0;
        ForwardStats stats;
        for (int micro = 0; micro < r.grad_accum; micro++) {
            train_data.next_batch();
            loss += model->forward(train_data.inputs(), train_data.targets());
            if (stats_step && micro == 0) stats = forward_stats(*model);
            model->record_stream_grads(stats_step && micro == 0);
            model->backward(1.0f / r.grad_accum);
        }
        if (stats_step) {
            std::vector<double> grad_norms = model->stream_grad_norms();  // of loss / grad_accum
            for (double& g : grad_norms) g *= r.grad_accum;
            log.write(stats_record(step, stats, grad_norms, model->fcproj_grad_norms()));
        }
        loss /= r.grad_accum;
        const double norm = model->grad_norm();
        if (step == 0) state.first_loss = loss;
        const std::string reason = divergence_reason(loss, norm, state.first_loss, step, o.warmup, o.diverge_margin);
        if (!reason.empty()) {
            log.write(diverged_record(step, reason, loss, norm));
            std::printf("diverged at step %d: %s\n", step, reason.c_str());
            return 3;
        }
        const double lr = learning_rate(step, o.steps, o.lr, o.lr_min, o.warmup);
        model->update({lr, o.beta1, o.beta2, o.eps, o.wd}, step + 1, clip_factor(norm, o.clip));
        state.steps_done = step + 1;
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        const double tok_s = o.total_batch / (ms / 1000.0);
        std::printf("step %5d/%d | loss %.4f | lr %.2e | grad norm %.4f | %.1f ms | %.0f tok/s\n", step, o.steps, loss,
                    lr, norm, ms, tok_s);
        std::fflush(stdout);
        log.write(JsonRecord()
                      .add("step", std::to_string(step))
                      .add("loss", json_number(loss))
                      .add("lr", json_number(lr))
                      .add("grad_norm", json_number(norm))
                      .add("ms", json_number(ms))
                      .add("tok_s", json_number(tok_s))
                      .str());
        const bool last = state.steps_done == o.steps;
        if (last || (o.save_every > 0 && state.steps_done % o.save_every == 0)) {
            save_checkpoint(*model, r, state, train_data);
            std::printf("saved %s\n", numbered(o.out_dir, "model", state.steps_done).c_str());
        }
    }
    if (val_data && first_step < o.steps) {
        const double val_loss = evaluate(*model, *val_data, o.eval_batches);
        std::printf("step %5d | val loss %.4f | val ppl %.2f\n", o.steps, val_loss, std::exp(val_loss));
        log.write(val_record(o.steps, val_loss));
        if (!std::isfinite(val_loss)) {  // the last update broke the model
            log.write(diverged_record(o.steps, "final val loss is not finite", NAN, NAN));
            std::printf("diverged at step %d: final val loss is not finite\n", o.steps);
            return 3;
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    return run_program("train", USAGE, argc, argv, [&] {
        TrainOptions opt = parse_options(argc, argv);
        if (opt.threads > 0) omp_set_num_threads(opt.threads);
        Run run = prepare(opt);
        return train(run);
    });
}
