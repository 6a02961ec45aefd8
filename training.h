// training.h — the pieces of one optimisation step that every backend shares (SPEC §2):
// the learning-rate schedule, gradient clipping and the divergence test.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

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

// Why a step counts as diverged, or "" when it does not (README "Divergence"; sweep.py reads
// the resulting log record): a non-finite loss or gradient norm, or, once warmup is over and
// margin > 0, a loss above the loss of step 0 plus margin.
inline std::string divergence_reason(double loss, double grad_norm, double first_loss, int step, int warmup,
                                     double margin) {
    auto text = [](double x) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", x);
        return std::string(buf);
    };
    if (!std::isfinite(loss)) return "loss is " + std::string(std::isnan(loss) ? "nan" : "inf");
    if (!std::isfinite(grad_norm)) return "gradient norm is " + std::string(std::isnan(grad_norm) ? "nan" : "inf");
    if (margin > 0 && step >= warmup && loss > first_loss + margin)
        return "loss " + text(loss) + " exceeds the first loss " + text(first_loss) + " + " + text(margin);
    return "";
}
