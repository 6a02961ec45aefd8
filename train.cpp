// train.cpp — ./train: trains GPT-2 with Pre-, Post- or Peri-LN and residual step Δt
// (docs/model.md §5, docs/cli.md) on the CPU reference or the CUDA backend.
//
//   ./train -ln peri -dt 0.1                      the bundled corpus, default sizes
//   ./train -init d12 -train_data "owt/train_*.bin" -val_data "owt/val_*.bin" -out runs/x
//   ./train -config runs/x/config.json -seed 43 -out runs/y     x's settings, another seed
//   ./train -init gpt2/model.safetensors -lr 1e-4 -out ft        from OpenAI's GPT-2 weights
//
// Reading order: main() reads the flags (flags/train_flags.h) and prepares the run: the model resumed,
// loaded or fresh, the batch shape (run/resume.h); train() starts the data and the model on every
// rank, writes config.json (run/run_config.h) and loops over the steps; train_step() is one
// optimiser step: the micro-steps, the gradients summed, clipping, the update, the log record.
//
// Exit status (docs/train.md §3): 0 done, 1 out of memory, 2 bad input (one line naming the
// flag or file, before any work; also a -out folder in use or holding another run), 3 stopped as
// nonfinite or diverged (docs/train.md §8), 4 a write failed, 130 / 143 / 129 stopped by
// SIGINT / SIGTERM / SIGHUP after writing a checkpoint (run/signals.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "measure/baselines.h"
#include "dataloader.h"
#include "distributed/process_group.h"
#include "util/errors.h"
#include "flags/flags.h"
#include "util/json.h"
#include "run/log_records.h"
#include "distributed/mpi_group.h"
#include "util/progress.h"
#include "distributed/rank_agreement.h"
#include "run/resume.h"
#include "run/run_config.h"
#include "run/run_dir.h"
#include "measure/sampling.h"
#include "run/setup.h"
#include "run/signals.h"
#include "tokenizer.h"
#include "flags/train_flags.h"
#include "training.h"

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A duration for people: "4.2s", "12m05s", "3h07m".
static std::string duration_text(double seconds) {
    char buf[32];
    const long s = std::lround(seconds);
    if (seconds < 60) std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    else if (s < 3600) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
    return buf;
}

// What -sample_every samples with, on rank 0 (docs/train.md §5): the tokenizer,
// a CPU model of batch 1 over a (1, SAMPLE_PROMPT_TOKENS + -sample_tokens) window that gets a
// copy of the weights for each sample, and the prompt.
constexpr int SAMPLE_PROMPT_TOKENS = 16;
struct Sampler {
    Tokenizer tok;
    CpuModel<float> gen;
    std::vector<int32_t> prompt;  // the first SAMPLE_PROMPT_TOKENS tokens of the validation shards
};

// A run while it trains: its settings, model, data and ranks, rank 0's log, the outcome rules.
struct Training {
    Run& r;
    Backend& model;
    DataLoader& train_data;
    DataLoader* val_data;  // null with -eval_every 0
    ProcessGroup& group;
    RunLog* log;  // rank 0's; null on the other ranks
    OutcomeTracker outcome;
    int first_step;  // of this process: 0, or the step resumed at
    Clock::time_point start;
    double elapsed_before;  // seconds the run trained before this process (log.jsonl's last "elapsed")
    Clock::time_point eta_start;  // after the start-up evaluation: the ETA counts the steps from here
    int saved_at;         // the steps done of the newest checkpoint pair on disk (-1: none)
    double last_loss = NAN, last_val_loss = NAN;  // for the summary
    Sampler* sampler = nullptr;  // rank 0's with -sample_every N; null otherwise
    Progress* progress = nullptr;  // lines on stderr inside a long step or evaluation (rank 0's prints)

    // Seconds of training, over every process of the run (resumed ones included).
    double elapsed() const { return elapsed_before + seconds_since(start); }

    void record(const std::string& json) {
        if (log) log->write(json);
    }
};

// Whether the run logs stats records, so its outcome records carry their extremes.
static bool with_stats(const TrainOptions& o) { return o.stats_every > 0; }

// Mean loss over the first `batches` batches of the validation data, the same on every rank:
// rank r of W evaluates batches r, r + W, ... (its loader is dealt them) and the sum is shared.
// A SIGINT/SIGTERM ends the loop early: the caller then drops the result (interrupted()).
static double evaluate(Backend& model, DataLoader& val, int batches, ProcessGroup& group) {
    val.reset();
    double sum = 0;
    for (int i = group.rank(); i < batches && !stop_request::requested(); i += group.size()) {
        val.next_batch();
        sum += model.forward(val.inputs(), val.targets());
    }
    return group.sum(sum) / batches;
}

// The signal that asked any rank to stop, or 0; collective.
static int interrupted(ProcessGroup& group) { return group.max(stop_request::requested()); }

// One optimiser step (docs/model.md §5): grad_accum micro-steps on each rank, each a forward and
// a backward of the loss weighted 1/micro_steps; the gradients summed over the ranks (their mean
// over the whole step, before clipping, the same on every rank); the run-outcome rules on the
// step's loss and gradient norm; then clipping and the AdamW update, one line on the terminal and
// one log record. Returns 3 when the run stops here as nonfinite or diverged (before the update).
static int train_step(Training& t, int step) {
    const TrainOptions& o = t.r.opt;
    const int micro_steps = t.r.grad_accum * t.r.ranks;  // of the whole step, over all ranks
    const auto start = Clock::now();
    const bool stats_step = o.stats_every > 0 && step % o.stats_every == 0;
    ForwardStats stats;
    t.model.zero_grad();
    double loss = 0;
    for (int micro = 0; micro < t.r.grad_accum; micro++) {
        t.progress->update("step " + std::to_string(step) + ": micro-step " + std::to_string(micro + 1) + " of " +
                           std::to_string(t.r.grad_accum));
        t.train_data.next_batch();
        t.model.forward_to_logits(t.train_data.inputs(), t.train_data.targets());
        if (stats_step && micro == 0) stats = t.model.forward_stats();  // reads the logits
        t.model.record_stream_grads(stats_step && micro == 0);
        loss += t.model.backward(1.0f / micro_steps);  // the loss comes with its gradient
    }
    t.model.sum_grads(t.group);
    loss = t.group.sum(loss) / micro_steps;
    if (stats_step) {  // of rank 0's first micro-batch, the step's first
        std::vector<double> grad_norms = t.model.stream_grad_norms();  // of loss / micro_steps
        for (double& g : grad_norms) g *= micro_steps;
        t.record(stats_record(step, stats, grad_norms, t.model.fcproj_grad_norms()));
        t.outcome.observe_stats(stats.attn_logit_max, stats.stream.back().mean_abs);
    }
    const double norm = t.model.grad_norm();
    if (step == 0) t.r.state.first_loss = loss;
    const std::string reason = t.outcome.observe(loss, norm);
    if (t.group.max(t.group.is_root() && !reason.empty())) {  // rank 0 alone has the whole history
        t.record(diverged_record(step, t.outcome.outcome(), reason, loss, norm, t.outcome, with_stats(o)));
        std::printf("%s at step %d: %s\n", t.outcome.outcome().c_str(), step, reason.c_str());
        return 3;
    }
    const double lr = learning_rate(step, o.steps, o.lr, o.lr_min, o.warmup);
    t.model.update({lr, o.beta1, o.beta2, o.eps, o.wd}, step + 1, clip_factor(norm, o.clip));
    if (sharded(t.r)) t.model.gather_params(t.group);
    t.r.state.steps_done = step + 1;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const double tok_s = o.total_batch / (ms / 1000.0);
    const double elapsed = t.elapsed(), eta = seconds_since(t.eta_start) / (step + 1 - t.first_step) * (o.steps - step - 1);
    std::printf("step %5d/%d | loss %.4f | lr %.2e | grad norm %.4f | %.1f ms | %.0f tok/s | %s, ETA %s\n", step, o.steps,
                loss, lr, norm, ms, tok_s, duration_text(elapsed).c_str(), duration_text(eta).c_str());
    t.last_loss = loss;
    t.record(step_record(step, loss, lr, norm, ms, tok_s, elapsed));
    return 0;
}

// The checkpoint pair of the steps done (run/resume.h), then, with -keep_checkpoints K, the pairs
// beyond the newest K removed except the final one (rank 0; docs/train.md §6).
static void save(Training& t) {
    save_checkpoint(t.model, t.r, t.r.state, t.train_data, t.group);
    t.saved_at = t.r.state.steps_done;
    if (t.group.is_root()) remove_old_checkpoints(t.r.opt.out_dir, t.r.opt.keep_checkpoints, t.r.opt.steps);
}

// -sample_every: the continuation of the prompt by the weights after `steps_done` steps, printed
// and logged under that count (docs/logs.md), as the validation loss and the checkpoint of those
// weights are. The weights are copied into the sampler's own CPU model and drawn from with
// temperature 1 among the 40 likeliest tokens by an Rng of its own, seeded by the run's seed and
// the steps done (a resumed run draws the same): the training model, its data loaders and its
// optimiser are only read.
static void print_sample(Training& t, int steps_done) {
    Sampler& s = *t.sampler;
    t.model.get_params(s.gen.params.data());
    Rng rng(t.r.state.seed ^ (0xD1B54A32D192ED03ull * uint64_t(steps_done)));
    const std::vector<int32_t> continuation = continue_text(s.gen, s.prompt, t.r.opt.sample_tokens, 1.0, 40, rng);
    const std::string prompt = s.tok.decode(s.prompt), text = s.tok.decode(continuation);
    std::printf("step %5d | sample: %s[[%s]]\n", steps_done, prompt.c_str(), text.c_str());
    t.record(JsonRecord()
                 .add("step", std::to_string(steps_done))
                 .add("event", json_string("sample"))
                 .add("prompt", json_string(prompt))
                 .add("text", json_string(text))
                 .str());
}

// The validation loss at `step`, printed and logged; returns false, logging nothing, when a
// signal interrupted the evaluation.
static bool validate(Training& t, int step) {
    t.progress->begin("evaluation at step " + std::to_string(step));
    const double val_loss = evaluate(t.model, *t.val_data, t.r.opt.eval_batches, t.group);
    t.progress->end();
    if (interrupted(t.group)) return false;
    t.last_val_loss = val_loss;
    std::printf("step %5d | val loss %.4f | val ppl %.2f\n", step, val_loss, std::exp(val_loss));
    t.record(val_record(step, val_loss).str());
    return true;
}

// The end of a run a SIGINT/SIGTERM stopped (`where`: after a step, or in an evaluation): the
// checkpoint pair of the steps done, unless it is on disk already; with no step done, the run's
// config.json and log.jsonl removed (the same command starts it again); one line, and the exit
// status 130 / 143.
static int stop(Training& t, const char* where) {
    const int sig = interrupted(t.group);
    const int done = t.r.state.steps_done;
    if (done > 0 && t.saved_at != done) save(t);
    if (done == 0 && t.log) remove_unstarted_run(t.r.opt.out_dir);
    std::printf("stopped by %s %safter %d of %d steps: %s\n", stop_request::name(sig), where, done, t.r.opt.steps,
                done == t.r.opt.steps ? "its final evaluation was not made: the same command with -resume 1 makes it"
                : done > 0            ? "continue with the same command and -resume 1"
                                      : "nothing trained; the folder holds none of its files, so the same command "
                                        "starts it again");
    return stop_request::exit_status(sig);
}

// The end of a run that trained its last step: the final validation loss against unigram_ce of
// the same tokens decides between collapsed and ok (without validation data, -eval_every 0:
// ok), logged and printed with the run's summary; also on -resume 1 after a stop in that
// evaluation. Returns the exit status: 3 when the last update broke the model, else 0.
static int finish(Training& t) {
    const TrainOptions& o = t.r.opt;
    double unigram = NAN;
    std::string result = "ok";
    if (t.val_data) {
        t.progress->begin("final evaluation");
        const double val_loss = evaluate(t.model, *t.val_data, o.eval_batches, t.group);
        t.progress->end();
        if (interrupted(t.group)) return stop(t, "in the final evaluation ");
        t.last_val_loss = val_loss;
        if (t.group.is_root()) {  // over all evaluated batches: a loader of one rank's own
            DataLoader all_val(o.val_data, o.B, o.T, t.r.cfg.V, false, 0);
            unigram = evaluated_baselines(o.train_data, t.r.cfg.V, false, all_val, o.eval_batches, size_t(o.B) * o.T)
                          .unigram_ce();
        }
        std::printf("step %5d | val loss %.4f | val ppl %.2f | unigram_ce %.4f\n", o.steps, val_loss, std::exp(val_loss),
                    unigram);
        t.record(val_record(o.steps, val_loss).add("unigram_ce", json_number(unigram)).str());
        result = final_outcome(val_loss, unigram);
    }
    if (result == "nonfinite") {
        t.record(diverged_record(o.steps, result, "final val loss is not finite", NAN, NAN, t.outcome, with_stats(o)));
        std::printf("nonfinite at step %d: final val loss is not finite\n", o.steps);
        return 3;
    }
    t.record(outcome_record(o.steps, result, t.outcome, with_stats(o), t.last_val_loss, unigram));
    char why[160] = "";
    if (result == "collapsed")
        std::snprintf(why, sizeof why, " (final val loss %.4f is not below unigram_ce %.4f: nothing learned beyond "
                      "token frequencies)", t.last_val_loss, unigram);
    std::printf("outcome: %s%s, %s\n", result.c_str(), why, counted(t.outcome.spikes(), "transient spike").c_str());
    std::printf("done: %d steps%s in %s | final train loss %.4f | val loss %s | checkpoint %s\n", o.steps - t.first_step,
                t.first_step ? (" (from step " + std::to_string(t.first_step) + ")").c_str() : "",
                duration_text(seconds_since(t.start)).c_str(), t.last_loss,
                std::isfinite(t.last_val_loss) ? json_number(t.last_val_loss).c_str() : "not evaluated",
                numbered(o.out_dir, "model", o.steps).c_str());
    return 0;
}

// The sampler of -sample_every N (null when 0), its needs checked first, each refused with one
// line: a -tokenizer that loads, covers the model's vocabulary and is the one the training shards
// record, a window of SAMPLE_PROMPT_TOKENS + -sample_tokens within the model's maxT, and
// validation shards of the same tokenizer to take the prompt from. Rank 0 (`root`) alone gets
// one; the others check the same and return null.
static std::unique_ptr<Sampler> make_sampler(const Run& r, const DataLoader& train, bool root) {
    const TrainOptions& o = r.opt;
    if (o.sample_every == 0) return nullptr;
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = std::make_unique<Tokenizer>(o.tokenizer_path);
    } catch (const InputError& e) {
        throw InputError(std::string("flag -tokenizer: ") + e.what() + " (-sample_every decodes with it)");
    }
    if (tok->vocab_size() < r.cfg.V)
        throw InputError("flag -tokenizer: " + o.tokenizer_path + " has " + std::to_string(tok->vocab_size()) +
                         " tokens but the model's vocabulary is " + std::to_string(r.cfg.V));
    if (train.tokenizer() != 0 && tok->fingerprint() != train.tokenizer())
        throw InputError("flag -tokenizer: " + o.tokenizer_path + " is tokenizer " + tokenizer_name(tok->fingerprint()) +
                         " but " + o.train_data + " was made by tokenizer " + tokenizer_name(train.tokenizer()) +
                         ": give " + tokenizer_to_give(train.tokenizer(), o.train_data));
    const int W = SAMPLE_PROMPT_TOKENS + o.sample_tokens;
    if (W > r.cfg.maxT)
        throw InputError("flag -sample_tokens: " + std::to_string(SAMPLE_PROMPT_TOKENS) + " prompt tokens + " +
                         std::to_string(o.sample_tokens) + " exceed the model's maxT " + std::to_string(r.cfg.maxT));
    DataLoader prompt_source(o.val_data, 1, SAMPLE_PROMPT_TOKENS, r.cfg.V, false, 0);
    check_same_tokenizer(train, prompt_source);
    if (!root) return nullptr;
    if (tok->vocab_size() != r.cfg.V)
        std::printf("warning: %s has %d tokens but the model's vocabulary is %d: samples read the model's ids as this "
                    "tokenizer's\n", o.tokenizer_path.c_str(), tok->vocab_size(), r.cfg.V);
    prompt_source.next_batch();
    const int32_t* first = prompt_source.inputs();
    return std::unique_ptr<Sampler>(new Sampler{std::move(*tok), CpuModel<float>(r.cfg, 1, W),
                                                std::vector<int32_t>(first, first + SAMPLE_PROMPT_TOKENS)});
}

// Trains the run `r` prepared: data, model and config.json on every rank (refused together),
// then the steps from the one resumed at to -steps, with evaluations, checkpoints and a stop on
// SIGINT/SIGTERM; rank 0 alone owns `folder` (its lock, config.json, log.jsonl, checkpoints).
// Returns the exit status.
static int train(Run& r, RunFolder* folder, ProcessGroup& group) {
    const TrainOptions& o = r.opt;
    std::unique_ptr<DataLoader> train_data, val_data;
    std::unique_ptr<Backend> model;
    std::unique_ptr<Sampler> sampler;
    Json config;
    start_on_every_rank(group, [&] {
        train_data = std::make_unique<DataLoader>(o.train_data, o.B, o.T, r.cfg.V, o.shuffle, r.state.seed,
                                                  group.rank(), group.size());
        if (o.eval_every > 0) {
            val_data = std::make_unique<DataLoader>(o.val_data, o.B, o.T, r.cfg.V, false, 0, group.rank(), group.size());
            check_same_tokenizer(*train_data, *val_data);
            check_distinct_batches("-eval_batches", o.eval_batches, o.val_data, val_data->num_windows(), o.allow_repeats);
        }
        sampler = make_sampler(r, *train_data, group.is_root());
        if (r.resuming) resume_loader(*train_data, r.state.loader, group.rank());
        model = make_backend(r.device, o.precision, o.cpu_ops, r.fusion, r.cfg, o.B, o.T, group.local_rank(), r.comm);
        config = config_json(r, *model, *train_data, val_data.get());
    });
    const std::string config_path = in_folder(o.out_dir, "config.json");
    start_on_every_rank(group, [&] {
        check_ranks_agree(group, config);
        if (o.resume && group.is_root()) config = resumed_config(r, config_path, config);
    });
    if (!r.resuming) r.state.run_id = fresh_run_id(config, r.initial_params);
    if (r.state.run_id) config.set("run_id", Json::string(run_id_text(r.state.run_id)));  // 0: an older run's files
    print_start(r, *model, *train_data, val_data.get(), load_model(r, *model, group));
    // A run whose last step is saved is complete once its outcome is logged; a stop in its final
    // evaluation leaves that to do (rank 0 reads the log and decides for every rank).
    const bool at_end = r.resuming && r.state.steps_done == o.steps;
    if (at_end && group.max(group.is_root() && logged_final_outcome(o.out_dir, o.steps))) {
        std::printf("resume: the run in %s is complete (%d of %d steps, %s); nothing to train\n", o.out_dir.c_str(),
                    o.steps, o.steps, numbered(o.out_dir, "model", o.steps).c_str());
        return 0;
    }
    stop_request::begin_training();  // a signal now stops after a step, with a checkpoint (run/signals.h)
    std::unique_ptr<RunLog> log;
    int dropped = 0;  // log records of steps after the resumed checkpoint
    if (folder) {
        folder->create();
        log = std::make_unique<RunLog>(o.out_dir, r.resuming, r.state.steps_done, &dropped);
        checked_write([&] { write_text_atomically(config_path, config.lines()); });
    }
    std::printf("output: %s%s\n", o.out_dir.c_str(), r.resuming ? " (resuming)" : "");
    if (r.resuming)
        std::printf("resume: %s at step %d of %d from %s%s\n", at_end ? "the final evaluation" : "continuing",
                    r.state.steps_done, o.steps, numbered(o.out_dir, "model", r.state.steps_done).c_str(),
                    dropped ? ("; " + std::to_string(dropped) + " log records from after that checkpoint dropped").c_str() : "");

    const double elapsed_before = log ? log->elapsed() : 0;  // rank 0's, which alone prints and logs it
    Training t{r, *model, *train_data, val_data.get(), group, log.get(),
               OutcomeTracker({o.outcome_window, o.diverge_rise, o.spike_rise, o.warmup}), r.state.steps_done,
               Clock::now(), elapsed_before, Clock::now(), r.resuming ? r.state.steps_done : -1};
    t.sampler = sampler.get();
    Progress progress("train", group.is_root() ? o.progress : 0);
    t.progress = &progress;
    if (log) {  // resuming: the steps already done (rank 0 decides on the outcome for every rank)
        for (double past : log->losses()) t.outcome.observe(past, 0.0);
        if (!log->losses().empty()) t.last_loss = log->losses().back();
        for (const LoggedStats& past : log->stats()) t.outcome.observe_stats(past.attn_logit_max, past.mean_abs_L);
    }
    for (int step = t.first_step; step < o.steps; step++) {
        if (t.val_data && step % o.eval_every == 0 && !validate(t, step)) return stop(t, "in an evaluation ");
        if (step == t.first_step) t.eta_start = Clock::now();  // the ETA leaves the start-up evaluation out
        progress.begin("step " + std::to_string(step));
        const int stopped = train_step(t, step);
        progress.end();
        if (stopped) return stopped;
        const bool last = r.state.steps_done == o.steps;
        if (last || (o.save_every > 0 && r.state.steps_done % o.save_every == 0)) save(t);
        if (t.sampler && (last || r.state.steps_done % o.sample_every == 0)) print_sample(t, r.state.steps_done);
        if (!last && interrupted(group)) return stop(t, "");  // one rank's signal stops all
    }
    return finish(t);
}

// Under mpirun every rank runs main(); rank 0 alone prints (the others' stdout goes to
// /dev/null; their errors still reach stderr). A rank that fails on its own, after start-up or
// in a way the others cannot know, ends the whole job (ProcessGroup::abort) instead of leaving
// them waiting in a collective.
int main(int argc, char** argv) {
    std::unique_ptr<ProcessGroup> group = start_process_group(&argc, &argv);
    if (!group->is_root() && !std::freopen("/dev/null", "w", stdout)) return group->finish(1);
    bool together = false;  // true once every rank knows the status (a normal return, or a start-up failure)
    const int status = run_program("train", train_usage(), argc, argv, [&] {
        try {
            std::unique_ptr<RunFolder> folder;
            Run run;
            start_on_every_rank(*group, [&] {
                TrainOptions opt = parse_train_options(argc, argv);
                flush_subnormals_to_zero();
                set_threads(opt.threads);
                if (group->is_root()) {
                    folder = std::make_unique<RunFolder>(opt.out_dir, opt.resume, opt.overwrite);
                    check_inputs_outside_run_folder(opt);
                }
                stop_request::install();
                run = prepare_run(opt, group->size());
            });
            start_on_every_rank(*group, [&] { fit_to_device(run, *group); });
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
    }, flags_json("train", train_flags()));
    if (status != 0 && !together && group->size() > 1) group->abort(status);
    return group->finish(status);
}
