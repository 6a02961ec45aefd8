// backend.h — what ./train and ./eval need from a backend (CPU reference or CUDA), so the
// training loop is written once. A backend owns the parameters, their gradients, the AdamW
// moments and the activations of one micro-batch of fixed shape (B, T).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model.h"

// Hidden-state statistics of the residual stream X_i (N = B·T rows × C), SPEC §5.
struct StreamStats {
    double mean_abs = 0;   // mean over n, c of |X[n,c]|
    double entry_var = 0;  // mean over n of the variance over c of X[n,·]
    double data_var = 0;   // mean over c of the variance over n of X[·,c]
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // e.g. "cpu (fp32, 2 threads)"
    virtual const ModelConfig& config() const = 0;
    virtual int batch_size() const = 0;    // B
    virtual int seq_len() const = 0;       // T

    // Forward pass of one micro-batch: inputs, targets (B·T token ids). Keeps what backward
    // needs and returns the mean cross-entropy over the B·T positions.
    virtual float forward(const int32_t* inputs, const int32_t* targets) = 0;
    // Sets every gradient to zero.
    virtual void zero_grad() = 0;
    // Backward pass of the last forward: gradients of loss_weight · (mean loss) are ADDED to
    // the parameter gradients (loss_weight = 1 / micro-steps for gradient accumulation).
    virtual void backward(float loss_weight) = 0;
    // Global L2 norm of all parameter gradients.
    virtual double grad_norm() = 0;
    // AdamW update at step t (1-based), gradients multiplied by grad_scale first (clipping);
    // weight decay on the 2-D tensors only (SPEC §2).
    virtual void update(const AdamWHyper& h, int t, double grad_scale) = 0;

    // Copies between the backend and host fp32 buffers in file order (num_parameters floats).
    virtual void get_params(float* out) = 0;
    virtual void set_params(const float* in) = 0;
    virtual void get_moments(float* m, float* v) = 0;
    virtual void set_moments(const float* m, const float* v) = 0;

    // The residual stream after the embedding (i = 0) and after each block (i = 1..L) of the
    // last forward, summarised (SPEC §5). Returns L + 1 entries.
    virtual std::vector<StreamStats> stream_stats() = 0;
};
