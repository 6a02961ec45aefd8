// eval.cpp — ./eval: loads a checkpoint and reports, on validation shards, its loss and
// perplexity (of the mean loss and per sequence), the output logits' maximum and mean
// log-partition, teacher-forced next-token accuracy, ROUGE of the argmax predictions against the
// targets, and the stability diagnostics of measure/stability.h and diagnostics.h (hidden-state
// statistics, raw and scale-free gradient norms, attention-logit maxima, block norms, local
// sensitivity and output uncertainty, per layer); optionally text pairs for external scorers
// and sampled continuations.
//
//   ./eval -model out/model_00001000.bin [-val_data GLOB] [-eval_batches N] [-json FILE]
//   ./eval -run out -prompt "Call me Ishmael."      continuations of a text, no evaluation
//   ./eval -run out -export out.safetensors         the model as GPT-2 safetensors, no evaluation
//
// The loss and val_ppl come from the chosen backend (-device). Everything else runs on the
// CPU reference model (CpuModel<float>): on the CPU backend that is the same model, on CUDA a
// second copy of the weights on the host.
//
// Exit status: 0 done, 1 out of memory, 2 bad input (one line naming the flag or file, before
// any work), 3 the model's weights or validation loss are not finite (its metrics null), 4 an
// output file could not be written.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "dataloader.h"
#include "flags/eval_flags.h"
#include "flags/flags.h"
#include "util/json.h"
#include "gpt2_cpu.h"
#include "model.h"
#include "util/paths.h"
#include "util/progress.h"
#include "measure/rouge.h"
#include "run/run_counts.h"
#include "run/run_dir.h"
#include "run/safetensors.h"
#include "measure/sampling.h"
#include "run/setup.h"
#include "measure/stability.h"
#include "tokenizer.h"
#include "measure/baselines.h"

// ---------------------------------------------------------------------------------------------
// Results

struct Results {
    double val_loss = 0, accuracy = 0;
    int catch_all = -1;               // the compact vocabulary's "other" id accuracy leaves out; -1: none
    long long accuracy_tokens = 0;    // the evaluated tokens whose target is not that id
    BaselineLoss baselines;  // unigram_ce, bigram_ce of the evaluated tokens (measure/baselines.h)
    double ppl_seq = 0;  // mean over sequences of exp(the sequence's mean token loss)
    LogitStats logits;   // over every evaluated position
    long long tokens = 0;
    // ROUGE F1, mean over sequences: [0] plain, [1] Porter-stemmed; each rouge1, rouge2, rougeL.
    bool have_rouge = false;
    double rouge[2][3] = {{0, 0, 0}, {0, 0, 0}};
    long long sequences = 0;
    std::vector<std::pair<std::string, std::string>> pairs;  // prediction, reference
    // Diagnostics, averaged over the diagnostic batches.
    int diag_batches = 0;
    std::vector<double> mean_abs, entry_var, data_var, grad_norm, param_grad_norm;  // half-block series
    std::vector<double> rms, grad_norm_scaled;                                        // half-block series
    std::vector<double> attn_logit_max, param_norm, fcproj_grad_norm, mlp_hidden_rms;  // per block
    stability::Sensitivity sensitivity;
    stability::Uncertainty uncertainty;
    std::vector<std::pair<std::string, std::string>> samples;  // prompt, continuation
};

// Adds b into a elementwise (a empty: copies).
static void accumulate(std::vector<double>& a, const std::vector<double>& b) {
    if (a.empty()) a.assign(b.size(), 0.0);
    for (size_t i = 0; i < b.size(); i++) a[i] += b[i];
}
static void scale(std::vector<double>& a, double s) {
    for (double& x : a) x *= s;
}

// The catch-all id of a compact vocabulary (docs/data.md, *Compact vocabulary*): its last id V-1,
// when `tok` decodes it to " ⁇", the text of every token the vocabulary left out; -1 otherwise.
static int catch_all_id(const Tokenizer* tok, int V) {
    return tok && tok->vocab_size() >= V && tok->decode_token(V - 1) == " \u2047" ? V - 1 : -1;
}

// Loss (on the backend), accuracy and ROUGE (on the CPU reference) over the first eval_batches.
// Accuracy counts the positions whose target is not the catch-all id: predicting "some other
// token" names no token. `ref` is a CPU model (CpuModel<float>, or the CPU backend itself).
template <class Model>
static void evaluate_metrics(const EvalOptions& o, Backend& backend, Model& ref, bool same_model,
                             DataLoader& val, const Tokenizer* tok, Results& r, Progress& progress) {
    const int B = ref.B, T = ref.T, V = ref.cfg.V;
    double loss_sum = 0, ppl_sum = 0, log_z_sum = 0;
    long long correct = 0, counted = 0;
    r.catch_all = catch_all_id(tok, V);
    r.logits.logit_max = -INFINITY;
    val.reset();
    progress.begin("evaluation: batch 1 of " + std::to_string(o.eval_batches));
    for (int i = 0; i < o.eval_batches; i++) {
        progress.update("evaluation: batch " + std::to_string(i + 1) + " of " + std::to_string(o.eval_batches));
        val.next_batch();
        loss_sum += backend.forward(val.inputs(), val.targets());
        if (!same_model) ref.forward(val.inputs(), val.targets());
        ppl_sum += diag::sequence_perplexity_sum(ref.losses_data(), B, T);
        const LogitStats z = diag::logit_statistics(ref.logits_data(), ref.N, V, ref.cfg.Vp);
        r.logits.logit_max = std::max(r.logits.logit_max, z.logit_max);
        log_z_sum += z.log_z_mean;
        const float* logits = ref.logits_data();
        const int32_t* targets = val.targets();
        std::vector<int> pred(B * T);
        for (int n = 0; n < B * T; n++) {
            pred[n] = argmax(logits + (size_t)n * ref.cfg.Vp, V);
            if (targets[n] == r.catch_all) continue;
            counted++;
            correct += pred[n] == targets[n];
        }
        if (!tok) continue;
        for (int b = 0; b < B; b++) {
            std::string p, t;
            for (int k = 0; k < T; k++) {
                p += tok->decode_token(pred[b * T + k]);
                t += tok->decode_token(targets[b * T + k]);
            }
            for (int stem = 0; stem < 2; stem++) {
                const rouge::Scores s = rouge::score(t, p, stem == 1);
                r.rouge[stem][0] += s.rouge1.f1;
                r.rouge[stem][1] += s.rouge2.f1;
                r.rouge[stem][2] += s.rougeL.f1;
            }
            r.sequences++;
            if (!o.pairs_path.empty()) r.pairs.emplace_back(p, t);
        }
    }
    progress.end();
    r.val_loss = loss_sum / o.eval_batches;
    r.ppl_seq = ppl_sum / ((double)o.eval_batches * B);
    r.logits.log_z_mean = log_z_sum / o.eval_batches;
    r.tokens = (long long)o.eval_batches * B * T;
    r.accuracy_tokens = counted;
    r.accuracy = counted ? (double)correct / counted : NAN;
    r.have_rouge = tok != nullptr;
    if (r.sequences)
        for (auto& row : r.rouge)
            for (double& x : row) x /= r.sequences;
}

// Statistics, gradient norms, sensitivity and uncertainty on the first diag_batches batches:
// each a mean over the batches, except attn_logit_max (their maximum) and param_norm (of the
// weights). The scale-free gradient is each batch's ‖∂L/∂X_i‖·RMS(X_i), then averaged.
template <class Model>
static void evaluate_diagnostics(const EvalOptions& o, Model& m, DataLoader& val, Results& r,
                                 Progress& progress) {
    r.diag_batches = o.diag_batches;
    if (o.diag_batches == 0) return;
    Rng directions(o.seed), noise(o.seed + 1);
    stability::Sensitivity sens;
    stability::Uncertainty unc;
    val.reset();
    progress.begin("diagnostics: batch 1 of " + std::to_string(o.diag_batches));
    for (int i = 0; i < o.diag_batches; i++) {
        progress.update("diagnostics: batch " + std::to_string(i + 1) + " of " + std::to_string(o.diag_batches));
        val.next_batch();
        m.forward(val.inputs(), val.targets());
        const ForwardStats f = m.forward_stats();
        std::vector<double> mean_abs, entry_var, data_var;
        for (const StreamStats& s : f.stream) {
            mean_abs.push_back(s.mean_abs);
            entry_var.push_back(s.entry_var);
            data_var.push_back(s.data_var);
        }
        accumulate(r.mean_abs, mean_abs);
        accumulate(r.entry_var, entry_var);
        accumulate(r.data_var, data_var);
        const std::vector<double>& rms = f.rms;
        accumulate(r.rms, rms);
        accumulate(r.mlp_hidden_rms, f.mlp_hidden_rms);
        const std::vector<double>& attn = f.attn_logit_max;
        r.param_norm = f.param_norm;  // of the weights: the same for every batch
        if (r.attn_logit_max.empty()) r.attn_logit_max = attn;
        for (size_t l = 0; l < attn.size(); l++) r.attn_logit_max[l] = std::max(r.attn_logit_max[l], attn[l]);
        // Sensitivity and uncertainty before backward: backward leaves the activations alone, but
        // keep the order obvious (the tangent pass reads the clean forward's activations).
        const stability::Sensitivity s = stability::local_sensitivity(m, o.directions, directions);
        accumulate(sens.block_mean, s.block_mean);
        accumulate(sens.step_mean, s.step_mean);
        if (sens.block_max.empty()) { sens.block_max = s.block_max; sens.step_max = s.step_max; }
        for (size_t k = 0; k < s.block_max.size(); k++) sens.block_max[k] = std::max(sens.block_max[k], s.block_max[k]);
        for (size_t k = 0; k < s.step_max.size(); k++) sens.step_max[k] = std::max(sens.step_max[k], s.step_max[k]);
        const double sigma_rel = o.sigma > 0 ? o.sigma / rms[0] : o.sigma_rel;
        const stability::Uncertainty u = stability::relative_output_uncertainty(m, sigma_rel, o.noise_samples, noise);
        unc.sigma += u.sigma;
        unc.sigma_rel += u.sigma_rel;
        accumulate(unc.mean_dx, u.mean_dx);
        accumulate(unc.relative_amplification, u.relative_amplification);
        std::vector<double> sq = u.w2_bound;
        for (double& x : sq) x *= x;
        accumulate(unc.w2_bound, sq);  // mean of squares, rooted below
        m.zero_grad();
        m.record_stream_grads(true);
        m.backward(1.0);
        m.record_stream_grads(false);
        const std::vector<double> grad_norms = m.stream_grad_norms();
        accumulate(r.grad_norm, grad_norms);
        accumulate(r.grad_norm_scaled, diag::products(grad_norms, rms));
        accumulate(r.param_grad_norm, stability::block_param_grad_norms(m));
        accumulate(r.fcproj_grad_norm, m.fcproj_grad_norms());
    }
    progress.end();
    const double inv = 1.0 / o.diag_batches;
    for (auto* v : {&r.mean_abs, &r.entry_var, &r.data_var, &r.grad_norm, &r.param_grad_norm, &r.rms,
                    &r.grad_norm_scaled, &r.fcproj_grad_norm, &r.mlp_hidden_rms, &sens.block_mean, &sens.step_mean,
                    &unc.mean_dx, &unc.w2_bound, &unc.relative_amplification})
        scale(*v, inv);
    for (double& x : unc.w2_bound) x = std::sqrt(x);
    sens.directions = o.directions;
    unc.sigma *= inv;  // the means of the batches' absolute and relative σ
    unc.sigma_rel *= inv;
    unc.samples = o.noise_samples;
    r.sensitivity = sens;
    r.uncertainty = unc;
}

// Sampled continuations (measure/sampling.h): prompt i is the first prompt_len tokens of validation
// sequence i (row i % B of batch i / B), continued by sample_len tokens in a (1, prompt_len +
// sample_len) window.
static void generate_samples(const EvalOptions& o, int T, const ModelConfig& cfg, const std::vector<float>& params,
                             DataLoader& val, const Tokenizer& tok, Results& r, Progress& progress) {
    if (o.samples == 0) return;
    CpuModel<float> gen(cfg, 1, o.prompt_len + o.sample_len);
    std::copy(params.begin(), params.end(), gen.params.begin());
    Rng rng(o.seed + 2);
    val.reset();
    progress.begin("sampling: sample 1 of " + std::to_string(o.samples));
    for (int i = 0; i < o.samples; i++) {
        progress.update("sampling: sample " + std::to_string(i + 1) + " of " + std::to_string(o.samples));
        if (i % o.B == 0) val.next_batch();
        const int32_t* row = val.inputs() + (size_t)(i % o.B) * T;
        const std::vector<int32_t> prompt(row, row + o.prompt_len);
        const std::vector<int32_t> continuation = continue_text(gen, prompt, o.sample_len, o.temperature, o.top_k, rng);
        r.samples.emplace_back(tok.decode(prompt), tok.decode(continuation));
    }
    progress.end();
}

// The prompt's tokens in a compact vocabulary `tok` read from `path` (docs/data.md, *Compact
// vocabulary*), whose catch-all id is `other`: encoded by GPT-2's BPE, the vocabulary it was made
// from (gpt2_tokenizer.bin beside `path`, else DEFAULT_TOKENIZER), and mapped to the compact
// ids, every token the vocabulary left out to `other`, as prepare_data.py mapped the shards.
static std::vector<int> encode_compact(const std::string& text, const Tokenizer& tok, const std::string& path, int other) {
    const std::string beside = folder_of(path) + "/" + file_name_of(DEFAULT_TOKENIZER);
    const std::string gpt2_path = path_exists(beside) ? beside : DEFAULT_TOKENIZER;
    const std::string why = " (a compact vocabulary's prompt is encoded by GPT-2's BPE in " + gpt2_path +
                            ", then mapped to its ids)";
    try {
        const Tokenizer gpt2(gpt2_path);
        return compact_ids(tok, gpt2, gpt2.encode(text), other);
    } catch (const InputError& e) {
        throw InputError(std::string("flag -tokenizer: ") + e.what() + why);
    }
}

// -prompt TEXT: the user's text as the model's tokens, encoded by -tokenizer, or for a compact
// vocabulary's decode-only tokenizer by encode_compact. Refused (flag -prompt or -tokenizer,
// exit 2): another tokenizer that cannot encode, a token the model does not have, a prompt that
// leaves no room in the model's maxT for -sample_len tokens.
static std::vector<int32_t> encode_prompt(const EvalOptions& o, const ModelConfig& cfg, const Tokenizer& tok) {
    std::vector<int> ids;
    const int other = catch_all_id(&tok, cfg.V);
    if (!tok.encodes() && other >= 0) {
        ids = encode_compact(o.prompt, tok, o.tokenizer_path, other);
    } else {
        try {
            ids = tok.encode(o.prompt);
        } catch (const InputError& e) {
            throw InputError(std::string("flag -tokenizer: ") + e.what() +
                             "; a prompt needs a tokenizer that encodes (or a compact vocabulary's, docs/data.md)");
        }
    }
    for (int id : ids)
        if (id >= cfg.V)
            throw InputError("flag -prompt: the text has token " + std::to_string(id) + " ('" + tok.decode_token(id) +
                             "'), outside the model's vocabulary of " + std::to_string(cfg.V) +
                             ": the tokenizer is not the model's (give -tokenizer)");
    const int P = (int)ids.size();
    if (P >= cfg.maxT)
        throw InputError("flag -prompt: " + std::to_string(P) + " tokens, but the model's maxT is " +
                         std::to_string(cfg.maxT) + " (at most " + std::to_string(cfg.maxT - 1) +
                         " tokens leave room for a sampled one)");
    if (P + o.sample_len > cfg.maxT)
        throw InputError("flag -sample_len: the prompt's " + std::to_string(P) + " tokens + " +
                         std::to_string(o.sample_len) + " exceed the model's maxT " + std::to_string(cfg.maxT) +
                         " (give -sample_len " + std::to_string(cfg.maxT - P) + " or less)");
    return std::vector<int32_t>(ids.begin(), ids.end());
}

// -prompt TEXT: -samples continuations (1 when -samples is not given) of the user's text, each
// -sample_len tokens drawn with -temperature and -top_k from -seed; printed as
// "sample i: TEXT[[continuation]]".
static int sample_prompt(const EvalOptions& o, const ModelConfig& cfg, const std::vector<float>& params) {
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = std::make_unique<Tokenizer>(o.tokenizer_path);
    } catch (const InputError& e) {
        throw InputError(std::string("flag -tokenizer: ") + e.what());
    }
    if (tok->vocab_size() < cfg.V)
        throw InputError("flag -tokenizer: " + o.tokenizer_path + " has " + std::to_string(tok->vocab_size()) +
                         " tokens but the model's vocabulary is " + std::to_string(cfg.V));
    if (tok->vocab_size() != cfg.V)
        std::printf("warning: %s has %d tokens but the model's vocabulary is %d: the prompt and samples read the "
                    "model's ids as this tokenizer's and may mean nothing\n",
                    o.tokenizer_path.c_str(), tok->vocab_size(), cfg.V);
    const std::vector<int32_t> prompt = encode_prompt(o, cfg, *tok);
    if (!tok->encodes())  // a compact vocabulary: what the model reads, rare tokens as the catch-all
        std::printf("prompt in the model's vocabulary: %s\n", tok->decode(std::vector<int>(prompt.begin(), prompt.end())).c_str());
    const int count = o.given.count("samples") ? o.samples : 1, P = (int)prompt.size();
    std::printf("prompt: %d tokens (tokenizer %s); %d sample%s of %d tokens, temperature %g, top_k %d, seed %llu\n", P,
                o.tokenizer_path.c_str(), count, count == 1 ? "" : "s", o.sample_len, o.temperature, o.top_k,
                (unsigned long long)o.seed);
    CpuModel<float> gen(cfg, 1, P + o.sample_len);
    std::copy(params.begin(), params.end(), gen.params.begin());
    Rng rng(o.seed);
    Progress progress("eval", o.progress);
    for (int i = 0; i < count; i++) {
        progress.begin("sampling: sample " + std::to_string(i + 1) + " of " + std::to_string(count));
        const std::vector<int32_t> continuation = continue_text(gen, prompt, o.sample_len, o.temperature, o.top_k, rng);
        progress.end();
        std::printf("sample %d: %s[[%s]]\n", i, o.prompt.c_str(), tok->decode(continuation).c_str());
    }
    return 0;
}

// -export FILE: the model as GPT-2 safetensors (docs/formats.md §5), whole or not at all.
static int export_model(const EvalOptions& o, const ModelConfig& cfg, const std::vector<float>& params) {
    checked_write([&] { write_gpt2_safetensors(o.export_path, cfg, params.data()); });
    std::printf("export: %s (GPT-2 safetensors, %s-LN%s)\n", o.export_path.c_str(), placement_name(cfg.placement),
                cfg.placement == Placement::Pre && cfg.dt == 1.0f ? ", OpenAI's layout" : ", with this project's metadata");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Reporting

static void print_table(const Results& r, int L) {
    std::printf("val loss %.4f | val ppl %.2f | ppl per sequence %.2f | accuracy %.4f (%lld tokens", r.val_loss,
                std::exp(r.val_loss), r.ppl_seq, r.accuracy, r.accuracy_tokens);
    if (r.catch_all >= 0) std::printf("; the %lld of the catch-all id %d left out", r.tokens - r.accuracy_tokens, r.catch_all);
    std::printf(")\n");
    std::printf("baselines on the same tokens: unigram_ce %.4f | bigram_ce %.4f\n", r.baselines.unigram_ce(),
                r.baselines.bigram_ce());
    std::printf("output logits: largest %.4g | mean log-partition %.4f\n", r.logits.logit_max, r.logits.log_z_mean);
    if (r.have_rouge) {
        std::printf("ROUGE F1 (argmax predictions vs targets, %lld sequences):  rouge1   rouge2   rougeL\n", r.sequences);
        for (int stem = 0; stem < 2; stem++)
            std::printf("  %-52s %.4f   %.4f   %.4f\n", stem ? "Porter-stemmed" : "plain", r.rouge[stem][0],
                        r.rouge[stem][1], r.rouge[stem][2]);
    }
    if (r.diag_batches > 0) {
        std::printf("per layer (%d batch%s; i = 0 embedding, i = l after block l; block columns are block l = i):\n",
                    r.diag_batches, r.diag_batches == 1 ? "" : "es");
        std::printf("  %5s %10s %10s %10s %10s | %10s %9s %9s | %10s %10s\n", "i", "mean_abs", "entry_var",
                    "data_var", "grad_norm", "param_grad", "sens_mean", "sens_max", "noise_dx", "w2_bound");
        for (int i = 0; i <= L; i++) {
            std::printf("  %5d %10.4g %10.4g %10.4g %10.4g | ", i, r.mean_abs[2 * i], r.entry_var[2 * i],
                        r.data_var[2 * i], r.grad_norm[2 * i]);
            if (i == 0) std::printf("%10s %9s %9s | ", "-", "-", "-");
            else
                std::printf("%10.4g %9.4g %9.4g | ", r.param_grad_norm[i - 1], r.sensitivity.block_mean[i - 1],
                            r.sensitivity.block_max[i - 1]);
            std::printf("%10.4g %10.4g\n", r.uncertainty.mean_dx[i], r.uncertainty.w2_bound[i]);
        }
        std::printf("  sensitivity: mean/max of ||J v|| over %d random directions (unit per token) and all tokens;\n"
                    "  noise: sigma %g (= %g RMS(X_0)) on X_0, %d samples; w2_bound = sqrt(mean ||dx||^2)\n",
                    r.sensitivity.directions, r.uncertainty.sigma, r.uncertainty.sigma_rel, r.uncertainty.samples);
        std::printf("scale-free (i as above):\n  %5s %10s %12s %10s | %10s %10s %10s %10s\n", "i", "rms",
                    "grad*rms", "rel_amp", "attn_max", "param_norm", "fcproj_g", "mlp_rms");
        for (int i = 0; i <= L; i++) {
            std::printf("  %5d %10.4g %12.4g %10.4g | ", i, r.rms[2 * i], r.grad_norm_scaled[2 * i],
                        r.uncertainty.relative_amplification[i]);
            if (i == 0) std::printf("%10s %10s %10s %10s\n", "-", "-", "-", "-");
            else
                std::printf("%10.4g %10.4g %10.4g %10.4g\n", r.attn_logit_max[i - 1], r.param_norm[i - 1],
                            r.fcproj_grad_norm[i - 1], r.mlp_hidden_rms[i - 1]);
        }
        std::printf("  grad*rms = ||dL/dX_i|| * RMS(X_i); rel_amp = (w2_bound/sqrt(C)/RMS(X_i)) / sigma_rel;\n"
                    "  attn_max = largest q.k/sqrt(hs); fcproj_g = ||dL/dW_fcproj||; mlp_rms = RMS of the GELU output\n");
    }
    for (size_t i = 0; i < r.samples.size(); i++)
        std::printf("sample %zu: %s[[%s]]\n", i, r.samples[i].first.c_str(), r.samples[i].second.c_str());
}

static std::string to_json(const EvalOptions& o, const ModelConfig& cfg, const std::string& backend, int T,
                           const Results& r, double seconds) {
    JsonObject j;
    auto field = [&](const std::string& name, const std::string& value) { j.add(name, value); };
    field("model", json_string(o.model_path));
    const Json model = model_json(cfg);
    for (const auto& [name, value] : model.members()) field(name, value.str());
    field("backend", json_string(backend));
    field("val_data", json_string(o.val_data));
    field("B", std::to_string(o.B));
    field("T", std::to_string(T));
    field("eval_batches", std::to_string(o.eval_batches));
    field("tokens", std::to_string(r.tokens));
    field("val_loss", json_number(r.val_loss));
    field("val_ppl", json_number(std::exp(r.val_loss)));
    field("unigram_ce", json_number(r.baselines.unigram_ce()));
    field("bigram_ce", json_number(r.baselines.bigram_ce()));
    field("ppl_seq", json_number(r.ppl_seq));
    field("logit_max", json_number(r.logits.logit_max));
    field("log_z_mean", json_number(r.logits.log_z_mean));
    field("accuracy", json_number(r.accuracy));
    field("accuracy_tokens", std::to_string(r.accuracy_tokens));
    field("catch_all_id", r.catch_all >= 0 ? std::to_string(r.catch_all) : "null");
    if (r.have_rouge) {
        const char* names[3] = {"rouge1", "rouge2", "rougeL"};
        std::string s = "{";
        for (int stem = 0; stem < 2; stem++)
            for (int k = 0; k < 3; k++)
                s += std::string(s.size() > 1 ? ", " : "") + "\"" + names[k] + (stem ? "_stem" : "") + "\": " +
                     json_number(r.rouge[stem][k]);
        field("rouge", s + ", \"sequences\": " + std::to_string(r.sequences) + "}");
    } else {
        field("rouge", "null");
    }
    field("diag_batches", std::to_string(r.diag_batches));
    if (r.diag_batches > 0) {
        std::string s = "{";
        const std::pair<const char*, const std::vector<double>*> series[] = {
            {"mean_abs", &r.mean_abs}, {"entry_var", &r.entry_var}, {"data_var", &r.data_var}, {"grad_norm", &r.grad_norm},
            {"rms", &r.rms}, {"grad_norm_scaled", &r.grad_norm_scaled}};
        for (const auto& [name, v] : series) s += std::string(s.size() > 1 ? ",\n    " : "\n    ") + "\"" + name + "\": " + json_array(*v, 0, 2);
        for (const auto& [name, v] : series) s += std::string(",\n    \"") + name + "_half\": " + json_array(*v);
        const std::pair<const char*, const std::vector<double>*> blocks[] = {
            {"param_grad_norm", &r.param_grad_norm}, {"attn_logit_max", &r.attn_logit_max},
            {"param_norm", &r.param_norm}, {"fcproj_grad_norm", &r.fcproj_grad_norm},
            {"mlp_hidden_rms", &r.mlp_hidden_rms}};
        for (const auto& [name, v] : blocks) s += std::string(",\n    \"") + name + "\": " + json_array(*v);
        s += "}";
        field("layers", s);
        const stability::Sensitivity& se = r.sensitivity;
        field("sensitivity", "{\"directions\": " + std::to_string(se.directions) + ",\n    \"block_mean\": " +
                                 json_array(se.block_mean) + ",\n    \"block_max\": " + json_array(se.block_max) +
                                 ",\n    \"step_mean\": " + json_array(se.step_mean) + ",\n    \"step_max\": " +
                                 json_array(se.step_max) + "}");
        const stability::Uncertainty& u = r.uncertainty;
        field("uncertainty", "{\"sigma_rel\": " + json_number(u.sigma_rel) + ", \"sigma\": " + json_number(u.sigma) +
                                 ", \"samples\": " + std::to_string(u.samples) + ",\n    \"mean_dx\": " +
                                 json_array(u.mean_dx) + ",\n    \"w2_bound\": " + json_array(u.w2_bound) +
                                 ",\n    \"relative_amplification\": " + json_array(u.relative_amplification) + "}");
    } else {
        field("layers", "null");
        field("sensitivity", "null");
        field("uncertainty", "null");
    }
    std::string samples = "[";
    for (size_t i = 0; i < r.samples.size(); i++)
        samples += std::string(i ? ",\n    " : "\n    ") + "{\"prompt\": " + json_string(r.samples[i].first) +
                   ", \"continuation\": " + json_string(r.samples[i].second) + "}";
    field("samples", samples + "]");
    field("seconds", json_number(seconds));
    return j.str();
}

// ---------------------------------------------------------------------------------------------

// Which validation batches the evaluation reads, in words: metrics and diagnostics each read the
// first batches in order, of `distinct` the shards hold. More than that repeats batches: refused
// (naming the flag) unless -allow_repeats 1, and then stated.
static std::string batches_read(const EvalOptions& o, uint64_t distinct) {
    const int sample_batches = (o.samples + o.B - 1) / o.B;
    const int most = std::max({o.eval_batches, o.diag_batches, sample_batches});
    const std::string span = "batches 1-" + std::to_string(o.eval_batches) +
                             (o.diag_batches ? " (diagnostics 1-" + std::to_string(o.diag_batches) + ")" : "") +
                             " of the " + std::to_string(distinct) + " distinct ones, in order";
    if ((uint64_t)most <= distinct) return span + ", none repeated";
    const char* flag = most == o.eval_batches ? "-eval_batches" : most == o.diag_batches ? "-diag_batches" : "-samples";
    check_distinct_batches(flag, most, o.val_data, distinct, o.allow_repeats);
    return span + "; batches after " + std::to_string(distinct) + " repeat the first ones (-allow_repeats 1)";
}

// The files this evaluation reads: the checkpoint, the tokenizer and the shards of -val_data and
// -train_data, each as messages name it and by identity (util/paths.h).
static std::vector<CommandInput> eval_inputs(const EvalOptions& o) {
    std::vector<CommandInput> inputs = {{"the -model file " + o.model_path, file_id(o.model_path)},
                                        {"the -tokenizer file " + o.tokenizer_path, file_id(o.tokenizer_path)}};
    for (const char* flag : {"-val_data", "-train_data"})
        for (const std::string& path : DataLoader::glob_files(flag[1] == 'v' ? o.val_data : o.train_data))
            inputs.push_back({std::string("the ") + flag + " shard " + path, file_id(path)});
    return inputs;
}

// Refuses, before any work, an output (-json, -pairs, -export) that is one of the files read, that
// would replace a file of a ./train run folder (run/run_dir.h), that cannot be created or is no
// place for an output (a folder, a dangling link: util/paths.h), that leads to the file another
// one does (existing or not), and an -export over an existing file without -overwrite 1.
static void check_outputs(const EvalOptions& o) {
    std::vector<CommandInput> inputs = eval_inputs(o);
    std::vector<CommandOutput> outputs;
    for (const auto& [flag, path] : {std::pair{"-json", o.json_path}, std::pair{"-pairs", o.pairs_path},
                                     std::pair{"-export", o.export_path}}) {
        if (path.empty()) continue;
        const std::string name = std::string("flag ") + flag + " " + path;
        check_not_an_input(name, file_id(path), inputs);
        check_not_a_run_file(path, name);
        const OutputTarget target = check_can_create(path, name);
        if (std::string(flag) == "-export" && !o.overwrite && file_id(target.path))
            throw InputError(name + ": the file exists; give -overwrite 1 to replace it, or another name");
        outputs.push_back({name, target});
    }
    check_distinct_outputs(outputs);
}

// The model of a run folder `config` describes: its newest complete checkpoint pair's (after a
// finished run, the final one) or, where no pair is left (a sweep keeps only the final model),
// the final model_N.bin of its -steps; "" for none.
static std::string run_model(const std::string& dir, const Json& config) {
    const std::vector<int> steps = checkpoint_steps(dir);
    if (!steps.empty()) return numbered(dir, "model", steps.back());
    const Json* recorded = config.get("steps");
    if (!recorded || recorded->kind() != Json::Kind::Number || !(recorded->as_number() >= 1) ||
        recorded->as_number() > (1 << 30))
        return "";  // not a -steps ./train accepts
    const std::string final_model = numbered(dir, "model", (int)recorded->as_number());
    return file_id(final_model) ? final_model : "";
}

// -run DIR: the model, data, tokenizer and batches of a ./train run folder. The model is
// run_model's; -val_data, -train_data, -tokenizer, -B, -T and -eval_batches are what
// DIR/config.json records (checked as the flags would be; a run of an older ./train, without
// them: ./eval's defaults, except -val_data, then required). A flag given beside -run wins, as
// explicit flags do in llm.c and nanoGPT. A folder without config.json or without a model is
// refused. Returns the line saying what was taken.
static std::string take_run_folder(EvalOptions& o) {
    const std::string path = in_folder(o.run_dir, "config.json");
    if (!path_exists(path)) throw InputError("flag -run: " + path + " is missing: " + o.run_dir + " is not a ./train run folder");
    const Json config = read_json_file(path, "flag -run");
    if (config.kind() != Json::Kind::Object) throw InputError("flag -run: " + path + ": not a JSON object");
    std::string taken;
    for (const EvalFlag& flag : eval_flags()) {
        const bool recorded_setting = flag.name == "val_data" || flag.name == "train_data" || flag.name == "tokenizer" ||
                                      flag.name == "B" || flag.name == "T" || flag.name == "eval_batches";
        const Json* value = config.get(flag.name);
        const Json::Kind kind = flag.values.kind == FlagValues::Kind::Text ? Json::Kind::String : Json::Kind::Number;
        if (!recorded_setting || o.given.count(flag.name) || !value || value->kind() != kind) continue;
        try {
            flag.store(o, check_flag_value(flag.name, flag.values, value->text()));
        } catch (const InputError& e) {
            throw InputError("flag -run: " + path + ": " + e.what());
        }
        taken += std::string(taken.empty() ? "" : ", ") + "-" + flag.name + " " + value->text();
    }
    if (!o.given.count("val_data") && !config.get("val_data"))
        throw InputError("flag -run: " + path + " records no val_data (a run of an older ./train): give -val_data");
    if (!o.given.count("model")) {
        o.model_path = run_model(o.run_dir, config);
        if (o.model_path.empty())
            throw InputError("flag -run: " + o.run_dir + " holds no complete checkpoint pair (model_N.bin with state_N.bin) "
                             "and no final model");
        taken = "-model " + o.model_path + (taken.empty() ? "" : ", ") + taken;
    }
    return "run: " + o.run_dir + ": " + (taken.empty() ? "nothing taken" : taken) +
           " (from the folder; flags given beside -run win)";
}

// Clears what `r` measured of a model whose weights or validation loss are not finite: every
// metric of its outputs is then NaN (null in the JSON), none of them a result; the baselines,
// which do not depend on the model, stay.
static void drop_model_metrics(Results& r) {
    r.val_loss = r.accuracy = r.ppl_seq = NAN;
    r.logits.logit_max = r.logits.log_z_mean = NAN;
    r.have_rouge = false;
    r.diag_batches = 0;
    r.pairs.clear();
    r.samples.clear();
}

static int evaluate(EvalOptions o) {
    const auto start = std::chrono::steady_clock::now();
    const std::string run_line = o.run_dir.empty() ? "" : take_run_folder(o);
    check_outputs(o);
    std::vector<float> params;
    const ModelConfig cfg = read_model_file(o.model_path, &params);
    if (!o.export_path.empty()) return export_model(o, cfg, params);
    if (!o.prompt.empty()) return sample_prompt(o, cfg, params);
    const std::string device = resolve_device(o.device);
    check_precision(device, o.precision, o.given.count("precision") > 0);
    check_fused(device, o.fused, o.given.count("fused") > 0);
    const int T = o.T ? o.T : std::min(device == "cuda" ? 1024 : 256, cfg.maxT);
    if (T > cfg.maxT)
        throw InputError("flag -T: " + std::to_string(T) + " exceeds the model's maxT " + std::to_string(cfg.maxT));
    if (o.samples > 0 && o.prompt_len > T)
        throw InputError("flag -prompt_len: " + std::to_string(o.prompt_len) + " exceeds -T " + std::to_string(T));
    if (o.samples > 0 && o.prompt_len + o.sample_len > cfg.maxT)
        throw InputError("flag -sample_len: prompt_len + sample_len = " + std::to_string(o.prompt_len + o.sample_len) +
                         " exceeds the model's maxT " + std::to_string(cfg.maxT));

    // The tokenizer decodes predictions for ROUGE, -pairs and -samples. Without -tokenizer a
    // missing default file only turns ROUGE off; a given file must load and cover the vocabulary.
    std::unique_ptr<Tokenizer> tok;
    std::string tok_problem;
    try {
        tok = std::make_unique<Tokenizer>(o.tokenizer_path);
        if (tok->vocab_size() < cfg.V)
            throw InputError(o.tokenizer_path + ": has " + std::to_string(tok->vocab_size()) +
                             " tokens but the model's vocabulary is " + std::to_string(cfg.V));
        if (tok->vocab_size() != cfg.V)
            std::printf("warning: %s has %d tokens but the model's vocabulary is %d: the text decoded for ROUGE, "
                        "-pairs and -samples reads the model's ids as this tokenizer's and may mean nothing\n",
                        o.tokenizer_path.c_str(), tok->vocab_size(), cfg.V);
    } catch (const InputError& e) {
        if (o.given.count("tokenizer") || !o.pairs_path.empty() || o.samples > 0)
            throw InputError(std::string("flag -tokenizer: ") + e.what());
        tok.reset();
        tok_problem = e.what();
    }

    if (o.B) batch_positions(o.B, T);  // checked before the device's memory plan multiplies it further
    o.B = fit_device_batch(device, o.precision, cfg, o.B ? o.B : default_batch(8, T, {o.val_data}), o.B != 0, T);
    evaluation_tokens(std::max(o.eval_batches, o.diag_batches), o.B, T);
    DataLoader val(o.val_data, o.B, T, cfg.V, false, 0);
    const std::string batches = batches_read(o, val.num_windows());
    if (tok && val.tokenizer() != 0 && tok->fingerprint() != val.tokenizer()) {
        const std::string problem = o.tokenizer_path + " is tokenizer " + tokenizer_name(tok->fingerprint()) + " but " +
                                    o.val_data + " was made by tokenizer " + tokenizer_name(val.tokenizer()) + ": give " +
                                    tokenizer_to_give(val.tokenizer(), o.val_data);
        if (o.given.count("tokenizer") || !o.pairs_path.empty() || o.samples > 0)
            throw InputError("flag -tokenizer: " + problem);
        tok.reset();
        tok_problem = problem;
    }
    // Accuracy, ROUGE and the diagnostics run on a CPU model: on the CPU the backend's own, on
    // CUDA a host copy of the weights.
    std::unique_ptr<Backend> backend;
    CpuBackend<>* cpu = nullptr;
    std::unique_ptr<CpuModel<float>> host_copy;
    if (device == "cpu") {
        auto made = std::make_unique<CpuBackend<>>(cfg, o.B, T);
        cpu = made.get();
        backend = std::move(made);
    } else {
        backend = make_backend(device, o.precision, "fast", fusion_request(o.fused), cfg, o.B, T);
        host_copy = std::make_unique<CpuModel<float>>(cfg, o.B, T);
        std::copy(params.begin(), params.end(), host_copy->params.begin());
    }
    backend->set_params(params.data());
    const bool same_model = cpu != nullptr;

    if (!run_line.empty()) std::printf("%s\n", run_line.c_str());
    std::printf("backend: %s%s\n", backend->name().c_str(),
                same_model ? "" : " (accuracy, ROUGE and diagnostics on the CPU reference)");
    if (const FusionChoice* fused = backend->fusion()) std::printf("fused products: %s\n", fused->line.c_str());
    print_model(cfg, o.model_path);
    std::printf("val data: %s (%s, %llu tokens), B=%d T=%d, %s\n", o.val_data.c_str(), counted(val.files().size(), "file").c_str(),
                (unsigned long long)val.total_tokens(), o.B, T, batches.c_str());
    if (!tok) std::printf("rouge: off (%s)\n", tok_problem.c_str());
    std::fflush(stdout);

    Results r;
    // Without -train_data, default training shards that do not fit the model (another corpus or
    // vocabulary) only turn the baselines off, as a missing default tokenizer turns ROUGE off.
    try {
        check_same_tokenizer(o.train_data, DataLoader::recorded_tokenizer(o.train_data), o.val_data, val.tokenizer());
        r.baselines = evaluated_baselines(o.train_data, cfg.V, true, val, o.eval_batches, size_t(o.B) * T);
    } catch (const InputError& e) {
        if (o.given.count("train_data")) throw;
        std::printf("baselines: off (%s; give -train_data)\n", e.what());
    }
    // A model with non-finite weights, or whose loss is not finite, has no metrics: said, written
    // as null, and the exit status 3 (docs/train.md §3).
    Progress progress("eval", o.progress);
    const size_t nonfinite_weights = count_nonfinite(params);
    auto measure = [&](auto& ref) {  // the metrics, then (when they are finite) the diagnostics
        if (nonfinite_weights > 0) return;
        evaluate_metrics(o, *backend, ref, same_model, val, tok.get(), r, progress);
        if (std::isfinite(r.val_loss)) evaluate_diagnostics(o, ref, val, r, progress);
    };
    if (cpu)
        measure(*cpu);
    else
        measure(*host_copy);
    const bool finite = nonfinite_weights == 0 && std::isfinite(r.val_loss);
    if (finite) {
        if (tok) generate_samples(o, T, cfg, params, val, *tok, r, progress);
    } else {
        drop_model_metrics(r);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    print_table(r, cfg.L);
    if (!finite)
        std::printf("nonfinite: %s; no metric of the model is a result (null in -json, no -pairs)\n",
                    nonfinite_weights ? (std::to_string(nonfinite_weights) + " of the model's " +
                                         std::to_string(params.size()) + " weights are not finite").c_str()
                                      : "the validation loss is not finite");
    if (!o.pairs_path.empty() && finite) {
        std::string text;
        for (size_t i = 0; i < r.pairs.size(); i++)
            text += "{\"id\": " + std::to_string(i) + ", \"prediction\": " + json_string(r.pairs[i].first) +
                    ", \"reference\": " + json_string(r.pairs[i].second) + "}\n";
        checked_write([&] { write_text_atomically(o.pairs_path, text); });
        std::printf("pairs: %s (%zu)\n", o.pairs_path.c_str(), r.pairs.size());
    }
    if (!o.json_path.empty()) {
        checked_write([&] { write_text_atomically(o.json_path, to_json(o, cfg, backend->name(), T, r, seconds)); });
        std::printf("json: %s\n", o.json_path.c_str());
    }
    std::printf("eval time %.1f s\n", seconds);
    return finite ? 0 : 3;
}

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);  // a closed standard output (| head) does not stop the files being written
    return run_program("eval", eval_usage(), argc, argv, [&] {
        EvalOptions opt = parse_eval_options(argc, argv);
        flush_subnormals_to_zero();
        set_threads(opt.threads);
        return evaluate(opt);
    }, flags_json("eval", eval_flags()));
}
