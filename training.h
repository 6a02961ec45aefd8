// training.h — the pieces of one optimisation step that every backend shares (SPEC §2):
// the learning-rate schedule, gradient clipping and the divergence test.
#pragma once
#include <cmath>

// Learning rate at step s (0-based) of `steps`: linear warmup from lr/warmup to lr over
// `warmup` steps, then cosine decay reaching lr_min exactly at the last step.
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
