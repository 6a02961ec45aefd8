// training.h — the pieces of one optimisation step that every backend shares (docs/model.md §5):
// the learning-rate schedule, gradient clipping and the run-outcome rules.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

// Learning rate at step s (0-based) of `steps`: linear warmup from lr/warmup to lr over
// `warmup` steps, then cosine decay reaching lr_min exactly at the last step. When a single
// step follows the warmup it is both the peak and the last, and runs at lr.
inline double learning_rate(int s, int steps, double lr, double lr_min, int warmup) {
    if (s < warmup) return lr * (s + 1) / warmup;
    const int span = steps - 1 - warmup;
    const double progress = span > 0 ? double(s - warmup) / span : 0.0;
    return lr_min + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - lr_min);
}

// Factor that scales every gradient before the update: clip/norm when clipping is on
// (clip > 0) and the global norm exceeds it, else 1.
inline double clip_factor(double grad_norm, double clip) {
    return (clip > 0 && grad_norm > clip) ? clip / grad_norm : 1.0;
}

// Run outcomes (docs/train.md §8). A run ends as
//   nonfinite  a training loss or gradient norm (or the final validation loss) is not finite;
//   diverged   once warmup is over, the mean loss of the last `window` steps exceeds the best
//              mean of `window` consecutive steps seen so far by more than `diverge_rise`;
//   collapsed  it finished, but its final validation loss is not below unigram_ce;
//   ok         otherwise.
// The first two stop ./train (exit status 3). Beside the outcome, every run reports what it went
// through, warmup included: its transient spikes (from step 1 on, episodes in which the loss rose
// more than `spike_rise` above the mean of the up to `window` ordinary steps before it and then
// came back under that line) and its extremes (RunExtremes).
struct OutcomeRules {
    int window = 20;
    double diverge_rise = 1.0;  // nats
    double spike_rise = 1.0;    // nats
    int warmup = 0;             // steps before the divergence rule applies
};

// The extremes of a run so far, which every outcome record carries: the highest training loss
// of a step after step 0 (the finite ones) and that step (the first, on a tie); and, from the
// stats records (-stats_every), the largest attention logit of any block and the largest mean
// |X_L| (NaN while there is none).
struct RunExtremes {
    double max_loss = NAN;
    int max_loss_step = -1;
    double max_attn_logit = NAN;
    double max_mean_abs_L = NAN;
};

// Follows the training losses of one run, step by step from step 0.
class OutcomeTracker {
public:
    explicit OutcomeTracker(const OutcomeRules& rules) : rules_(rules) {}

    // Takes the loss and gradient norm of the next step. Returns "" while the run may go on,
    // else why it stops; outcome() then says "nonfinite" or "diverged".
    std::string observe(double loss, double grad_norm) {
        const int step = steps_++;
        if (step > 0 && std::isfinite(loss) && (std::isnan(extremes_.max_loss) || loss > extremes_.max_loss)) {
            extremes_.max_loss = loss;
            extremes_.max_loss_step = step;
        }
        if (!std::isfinite(loss)) return stop("nonfinite", "loss is " + nonfinite_text(loss));
        if (!std::isfinite(grad_norm)) return stop("nonfinite", "gradient norm is " + nonfinite_text(grad_norm));
        track_spikes(loss);
        recent_.push_back(loss);
        recent_sum_ += loss;
        if ((int)recent_.size() > rules_.window) {
            recent_sum_ -= recent_.front();
            recent_.pop_front();
        }
        if ((int)recent_.size() < rules_.window) return "";
        const double mean = recent_sum_ / rules_.window;
        best_mean_ = std::min(best_mean_, mean);
        if (step >= rules_.warmup && mean > best_mean_ + rules_.diverge_rise)
            return stop("diverged", "mean loss of the last " + std::to_string(rules_.window) + " steps " + text(mean) +
                                        " exceeds the best such mean " + text(best_mean_) + " by more than " +
                                        text(rules_.diverge_rise));
        return "";
    }

    // Takes a stats record's largest attention logit of each block and mean |X_L|.
    void observe_stats(const std::vector<double>& attn_logit_max, double mean_abs_L) {
        for (double x : attn_logit_max) extremes_.max_attn_logit = std::fmax(extremes_.max_attn_logit, x);
        extremes_.max_mean_abs_L = std::fmax(extremes_.max_mean_abs_L, mean_abs_L);
    }

    // "nonfinite" or "diverged" once observe() stopped the run, else "".
    const std::string& outcome() const { return outcome_; }
    // Spikes that recovered so far.
    int spikes() const { return spikes_; }
    const RunExtremes& extremes() const { return extremes_; }

private:
    // A spike starts when the loss exceeds the mean of the last (up to `window`) ordinary losses
    // by more than spike_rise; its losses stay out of that reference, and it counts once the loss
    // is back under the line. Step 0's loss is the first reference.
    void track_spikes(double loss) {
        if (!reference_.empty()) {
            const double line = reference_sum_ / reference_.size() + rules_.spike_rise;
            if (loss > line) {
                in_spike_ = true;
                return;
            }
            if (in_spike_) spikes_++;
            in_spike_ = false;
        }
        reference_.push_back(loss);
        reference_sum_ += loss;
        if ((int)reference_.size() > rules_.window) {
            reference_sum_ -= reference_.front();
            reference_.pop_front();
        }
    }

    std::string stop(const char* outcome, const std::string& reason) {
        outcome_ = outcome;
        return reason;
    }

    // "nan", "inf" or "-inf".
    static std::string nonfinite_text(double x) { return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

    static std::string text(double x) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", x);
        return buf;
    }

    OutcomeRules rules_;
    int steps_ = 0;
    std::deque<double> recent_, reference_;  // the last `window` losses; the last ordinary ones
    double recent_sum_ = 0, reference_sum_ = 0;
    double best_mean_ = INFINITY;
    bool in_spike_ = false;
    int spikes_ = 0;
    RunExtremes extremes_;
    std::string outcome_;
};

// The outcome of a run that trained to the end, from its final validation loss and the
// unigram cross-entropy of the same validation tokens.
inline const char* final_outcome(double val_loss, double unigram_ce) {
    if (!std::isfinite(val_loss)) return "nonfinite";
    return val_loss >= unigram_ce ? "collapsed" : "ok";
}
