// run/log_records.h — the records ./train appends to DIR/log.jsonl (docs/logs.md), one JSON object
// on one line each: a step, an evaluation, the statistics of a step, a stop (nonfinite or
// diverged) and the outcome of a finished run.
#pragma once
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "diagnostics.h"
#include "util/json.h"
#include "training.h"

// The record of one optimiser step (docs/logs.md §1).
inline std::string step_record(int step, double loss, double lr, double grad_norm, double ms, double tok_s,
                               double elapsed) {
    return JsonRecord()
        .add("step", std::to_string(step))
        .add("loss", json_number(loss))
        .add("lr", json_number(lr))
        .add("grad_norm", json_number(grad_norm))
        .add("ms", json_number(ms))
        .add("tok_s", json_number(tok_s))
        .add("elapsed", json_number(elapsed))
        .str();
}

// The record of an evaluation at `step` (docs/logs.md §2); the final one adds unigram_ce.
inline JsonRecord val_record(int step, double val_loss) {
    JsonRecord r;
    r.add("step", std::to_string(step))
        .add("val_loss", json_number(val_loss))
        .add("val_ppl", json_number(std::exp(val_loss)));
    return r;
}

// The `stats` record for the current micro-batch (docs/train.md §4): per layer (the residual
// stream X_0 .. X_L) and, with suffix _half, at all 2L + 1 half-block points; then per block
// and for the output logits. fcproj_grad_norms is of the whole step's gradient.
inline std::string stats_record(int step, const ForwardStats& f, const std::vector<double>& grad_norms,
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

// Adds what a run went through to its outcome or diverged record (docs/logs.md §3, §5): its
// transient spikes and extremes (training.h, RunExtremes), the stats ones with -stats_every.
inline JsonRecord& add_history(JsonRecord& r, const OutcomeTracker& t, bool with_stats) {
    const RunExtremes& e = t.extremes();
    r.add("spikes", std::to_string(t.spikes()))
        .add("max_loss", json_number(e.max_loss))
        .add("max_loss_step", std::to_string(e.max_loss_step));
    if (with_stats) r.add("max_attn_logit", json_number(e.max_attn_logit)).add("max_mean_abs_L", json_number(e.max_mean_abs_L));
    return r;
}

// The record of a run stopped as `outcome` (nonfinite or diverged) at `step` (docs/logs.md §3);
// a non-finite loss or norm is null; the history is that of the steps before.
inline std::string diverged_record(int step, const std::string& outcome, const std::string& reason, double loss,
                                   double grad_norm, const OutcomeTracker& t, bool with_stats) {
    JsonRecord r;
    r.add("step", std::to_string(step))
        .add("event", json_string("diverged"))
        .add("outcome", json_string(outcome))
        .add("reason", json_string(reason))
        .add("loss", json_number(loss))
        .add("grad_norm", json_number(grad_norm));
    return add_history(r, t, with_stats).str();
}

// The record of a finished run's outcome, ok or collapsed, with its history (docs/logs.md §5).
inline std::string outcome_record(int step, const std::string& outcome, const OutcomeTracker& t, bool with_stats,
                                  double val_loss, double unigram_ce) {
    JsonRecord r;
    r.add("step", std::to_string(step)).add("event", json_string("outcome")).add("outcome", json_string(outcome));
    return add_history(r, t, with_stats).add("val_loss", json_number(val_loss)).add("unigram_ce", json_number(unigram_ce)).str();
}
