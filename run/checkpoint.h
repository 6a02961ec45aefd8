// run/checkpoint.h — the files that store a training run, read and written in one place
// (docs/formats.md):
//   * model checkpoints model_%08d.bin: the configuration and the parameters (§2);
//   * optimiser state files state_%08d.bin: AdamW moments, steps done, data position, seed (§3);
//   (writing any file whole or not at all, §4, is util/paths.h's write_file_atomically).
// Token shards are read by dataloader.h (§1).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataloader.h"
#include "util/errors.h"
#include "model.h"
#include "util/paths.h"  // write_file_atomically

// ---------------------------------------------------------------------------------------------
// Model checkpoints (docs/formats.md §2): int32 header[256] then float32 parameters in file
// order. Version 3 is llm.c's GPT-2 file (Pre-LN, Δt = 1); version 100 records placement and Δt.

// A uint64 stored in two consecutive int32 header entries (little-endian).
inline void put_u64(int32_t* h, uint64_t x) { std::memcpy(h, &x, sizeof x); }
inline uint64_t get_u64(const int32_t* h) {
    uint64_t x;
    std::memcpy(&x, h, sizeof x);
    return x;
}

constexpr int CHECKPOINT_MAGIC = 20240326;
constexpr int CHECKPOINT_VERSION_LLMC = 3;
constexpr int CHECKPOINT_VERSION_LN = 100;
constexpr size_t HEADER_INTS = 256;
constexpr int CHECKPOINT_RUN_ID_WORD = 10;  // [10..11]: the run id of ./train's run (0: none); llm.c reads [0..7]

// Builds the header for a model.
inline std::array<int32_t, HEADER_INTS> checkpoint_header(const ModelConfig& m, uint64_t run_id = 0) {
    std::array<int32_t, HEADER_INTS> h{};
    bool llmc = m.placement == Placement::Pre && m.dt == 1.0f;
    h[0] = CHECKPOINT_MAGIC;
    h[1] = llmc ? CHECKPOINT_VERSION_LLMC : CHECKPOINT_VERSION_LN;
    h[2] = m.maxT; h[3] = m.V; h[4] = m.L; h[5] = m.NH; h[6] = m.C; h[7] = m.Vp;
    if (!llmc) {
        h[8] = (int32_t)m.placement;
        std::memcpy(&h[9], &m.dt, sizeof(float));
    }
    put_u64(&h[CHECKPOINT_RUN_ID_WORD], run_id);
    return h;
}

// Reads and validates a checkpoint header; the file size must match it exactly.
inline ModelConfig read_checkpoint_config(const std::string& path) {
    const InputFile f = open_input(path, "checkpoint");
    std::array<int32_t, HEADER_INTS> h{};
    size_t got = std::fread(h.data(), sizeof(int32_t), HEADER_INTS, f.get());
    std::fseek(f.get(), 0, SEEK_END);
    long long file_bytes = std::ftell(f.get());
    if (got != HEADER_INTS) throw InputError(path + ": truncated checkpoint header");
    if (h[0] != CHECKPOINT_MAGIC)
        throw InputError(path + ": not a model checkpoint (bad magic " + std::to_string(h[0]) + ")");
    ModelConfig m;
    m.maxT = h[2]; m.V = h[3]; m.L = h[4]; m.NH = h[5]; m.C = h[6]; m.Vp = h[7];
    if (h[1] == CHECKPOINT_VERSION_LLMC) {
        m.placement = Placement::Pre; m.dt = 1.0f;
    } else if (h[1] == CHECKPOINT_VERSION_LN) {
        if (h[8] < 0 || h[8] > 2) throw InputError(path + ": unknown placement " + std::to_string(h[8]));
        m.placement = (Placement)h[8];
        std::memcpy(&m.dt, &h[9], sizeof(float));
    } else {
        throw InputError(path + ": unsupported checkpoint version " + std::to_string(h[1]));
    }
    validate_config(m, path);
    long long expected = (long long)(HEADER_INTS * sizeof(int32_t) + num_parameters(m) * sizeof(float));
    if (file_bytes != expected)
        throw InputError(path + ": file is " + std::to_string(file_bytes) + " bytes but its header needs " +
                         std::to_string(expected));
    return m;
}

// Reads a whole checkpoint: its configuration and parameters (file order).
inline ModelConfig read_checkpoint(const std::string& path, std::vector<float>* params) {
    ModelConfig m = read_checkpoint_config(path);
    params->resize(num_parameters(m));
    const InputFile f = open_input(path, "checkpoint");
    std::fseek(f.get(), (long)(HEADER_INTS * sizeof(int32_t)), SEEK_SET);
    size_t got = std::fread(params->data(), sizeof(float), params->size(), f.get());
    if (got != params->size()) throw InputError(path + ": truncated checkpoint");
    return m;
}

// How many of `params` are not finite (NaN or ±inf): weights no evaluation or training can use.
inline size_t count_nonfinite(const std::vector<float>& params) {
    size_t count = 0;
    for (float x : params) count += !std::isfinite(x);
    return count;
}

// The run id a checkpoint's header records (0: none, as in llm.c's files and older ones of ours).
inline uint64_t checkpoint_run_id(const std::string& path) {
    const InputFile f = open_input(path, "checkpoint");
    std::array<int32_t, HEADER_INTS> h{};
    if (std::fread(h.data(), sizeof h, 1, f.get()) != 1) throw InputError(path + ": truncated checkpoint header");
    return get_u64(&h[CHECKPOINT_RUN_ID_WORD]);
}

// Writes a checkpoint of the model with the given parameters (file order); `run_id`: of the
// ./train run that saves it (0: none).
inline void write_checkpoint(const std::string& path, const ModelConfig& m, const float* params, uint64_t run_id = 0) {
    std::array<int32_t, HEADER_INTS> h = checkpoint_header(m, run_id);
    write_file_atomically(path, {{h.data(), sizeof(h)}, {params, num_parameters(m) * sizeof(float)}});
}

// ---------------------------------------------------------------------------------------------
// Optimiser state files (docs/formats.md §3): state_%08d.bin beside model_%08d.bin, the number
// being the steps done. int32 header[256]: [0] magic, [1] version, [2] steps done, [3]
// placement; [4..5] num params, [6..7] seed, [8..9] loader epoch, [10..11] loader cursor
// (uint64 as two int32), [12..13] first loss (double bits), [14..15] run id (0: none); then
// float32 m[num params],
// v[num params] in file order.

constexpr int32_t STATE_MAGIC = 20251129;
constexpr int32_t STATE_VERSION = 1;

// What a run needs besides its parameters to continue where it stopped.
struct TrainState {
    int steps_done = 0;
    uint64_t seed = 0;
    LoaderState loader{};
    double first_loss = 0;
    uint64_t run_id = 0;  // of the run (config.json "run_id"); 0 in older files
    std::vector<float> m, v;  // AdamW moments, file order
};

// Writes the state of a run of a model with this placement, whole or not at all.
inline void write_state(const std::string& path, const TrainState& s, Placement placement) {
    int32_t h[HEADER_INTS] = {};
    h[0] = STATE_MAGIC; h[1] = STATE_VERSION; h[2] = s.steps_done; h[3] = (int32_t)placement;
    put_u64(&h[4], s.m.size()); put_u64(&h[6], s.seed);
    put_u64(&h[8], s.loader.epoch); put_u64(&h[10], s.loader.cursor);
    std::memcpy(&h[12], &s.first_loss, sizeof(double));
    put_u64(&h[14], s.run_id);
    write_file_atomically(path, {{h, sizeof h}, {s.m.data(), s.m.size() * sizeof(float)},
                                 {s.v.data(), s.v.size() * sizeof(float)}});
}

// Reads a state file written for a model of num_params parameters with this placement (the
// model file's); throws InputError if it does not match.
inline TrainState read_state(const std::string& path, size_t num_params, Placement placement) {
    const InputFile f = open_input(path, "optimiser state file");
    int32_t h[HEADER_INTS];
    if (std::fread(h, sizeof h, 1, f.get()) != 1) throw InputError(path + ": truncated optimiser state");
    if (h[0] != STATE_MAGIC || h[1] != STATE_VERSION) throw InputError(path + ": not an optimiser state file");
    if (get_u64(&h[4]) != num_params) throw InputError(path + ": parameter count does not match its model file");
    if (h[3] != (int32_t)placement)
        throw InputError(path + ": optimiser state of a " +
                         (h[3] >= 0 && h[3] <= 2 ? std::string(placement_name((Placement)h[3])) + "-LN" :
                                                   "placement " + std::to_string(h[3])) +
                         " model, but its model file is " + placement_name(placement) + "-LN");
    TrainState s;
    s.steps_done = h[2];
    s.seed = get_u64(&h[6]);
    s.loader = {get_u64(&h[8]), get_u64(&h[10])};
    std::memcpy(&s.first_loss, &h[12], sizeof(double));
    s.run_id = get_u64(&h[14]);
    s.m.resize(num_params);
    s.v.resize(num_params);
    if (std::fread(s.m.data(), sizeof(float), num_params, f.get()) != num_params ||
        std::fread(s.v.data(), sizeof(float), num_params, f.get()) != num_params)
        throw InputError(path + ": truncated optimiser state");
    if (std::fgetc(f.get()) != EOF) throw InputError(path + ": file is longer than its header says");
    return s;
}
