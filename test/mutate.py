#!/usr/bin/env python3
"""Mutation check of the test suite: does each planted bug make a test fail?

Run by hand from the repository root, after `make test` has built everything once (not part of
`make test` or CI; it takes about an hour on 2 cores):

    python3 test/mutate.py              every mutant
    python3 test/mutate.py NAME...      only those (the names are in the table below)
    python3 test/mutate.py --list       the mutants and what they change

Each mutant is one small bug: a file, a piece of text, and what replaces it everywhere in that
file (the text must occur exactly as often as the mutant expects: once, unless it says more). For each mutant in turn the script applies it, rebuilds the programs and test
binaries that depend on the file, runs the test binaries that cover it (whole binaries, as
`make test` runs them) and records which tests failed; then it puts the file back. A mutant
is "killed" when at least one test failed (a crash or a hang of a test binary counts too);
one whose text is not found says so ("not applied": the code moved and the mutant needs
updating). After each mutant the file is put back and its targets rebuilt, so the next mutant
(and the tree afterwards) starts from the real sources; at the end it prints the table
mutant | killed by. The files are restored even when a build fails or the script is
interrupted (and a backup left by a run killed outright is put back at the next start). Exit status 1 when a mutant survived or could not be applied.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate_generated as generated  # noqa: E402  (the generated set, docs/mutation.md)

EMU_CLI = "CUDA_BIN_DIR=build/emu:build/test_cli_cuda"   # the CUDA programs, emulated
EMU_KERNELS = "SIMT_ORDER=forward:build/emu/cuda_test_kernels"
TRAIN_LOOP = dict(targets=["train", "build/emu/train"], runs=["build/test_cli", EMU_CLI])
THREADED = dict(targets=["train", "build/test_threads"], runs=["build/test_threads", "build/test_cli"])
REFERENCE = dict(targets=["build/test_gradcheck_ops", "build/test_golden", "build/test_gradcheck_model"],
                 runs=["build/test_gradcheck_ops", "build/test_golden", "build/test_gradcheck_model"])
FAST = dict(targets=["train", "build/test_fast_ops", "build/test_gradcheck_ops"],
            runs=["build/test_fast_ops", "build/test_gradcheck_ops", "build/test_cli"])
KERNELS = dict(targets=["build/emu/cuda_test_kernels"], runs=[EMU_KERNELS])
SIMT_LAYER = dict(targets=["build/emu/cuda_test_simt"], runs=["SIMT_ORDER=forward:build/emu/cuda_test_simt"])
# A barrier deleted: the warps schedule (one warp ahead of the others, docs/simt.md) must see it.
WARPS_APART = dict(targets=["build/emu/cuda_test_kernels"], runs=["SIMT_ORDER=warps:build/emu/cuda_test_kernels"])
TENSOR_CORES = dict(targets=["build/emu/cuda_test_tensor_cores"], runs=["SIMT_ORDER=forward:build/emu/cuda_test_tensor_cores"])
LOADER = dict(targets=["build/test_dataloader"], runs=["build/test_dataloader"])
TOKENIZE = dict(targets=["tokenize", "build/test_tokenizer"], runs=["build/test_tokenizer"])
PREPARE = dict(targets=[], runs=["build/test_prepare_data"])
FLAGS = dict(targets=["train", "eval", "build/test_flags", "build/test_cli"], runs=["build/test_flags", "build/test_cli"])
RESUME = dict(targets=["train", "eval", "build/test_run_dir"], runs=["build/test_run_dir"])
COUNTS = dict(targets=["train", "build/test_flags"], runs=["build/test_flags"])
EXPERIMENTS = dict(targets=[], runs=["build/test_experiments"])  # Python: nothing to rebuild
# One module of test/py/ (GoogleTest's GTEST_FILTER picks its case of test_experiments).
PY_STATS = dict(targets=[], runs=["GTEST_FILTER=*test_stats:build/test_experiments"])
PY_REPORTS = dict(targets=[], runs=["GTEST_FILTER=*test_reports:build/test_experiments"])
PY_CLAIMS = dict(targets=[], runs=["GTEST_FILTER=*test_claims:build/test_experiments"])
OUTCOMES = dict(targets=["build/test_outcomes", "train"], runs=["build/test_outcomes"])
# A rule of training.h on its own: the synthetic loss sequences of test_outcomes must catch it
# (./train is not rebuilt, so its runs keep the real rules; that saves two builds of train.cpp).
OUTCOME_RULES = dict(targets=["build/test_outcomes"], runs=["build/test_outcomes"])
TRAFFIC = dict(targets=["build/emu/count/traffic_test"], runs=["build/emu/count/traffic_test"])

# (name, what the bug is, file, exact text, replacement, targets and runs). A bug in an op that
# has a textbook version (cpu_ops.h, what the double-precision checks run) and a fast one
# (cpu_fast_ops.h, what ./train runs) is planted in each separately.
MUTANTS = [
    ("fused-kind-ignored", "matmul_forward asks cuBLASLt for its bias fused even where that kind is to run plain",
     "cuda_ops.cuh", "if (bias && fused[Epilogue::Bias]) {", "if (bias) {", KERNELS),
    ("fused-slower-kept", "-fused auto keeps the slower of fused and plain", "cuda/fused_products.h",
     "!std::isnan(fused) && fused <= plain", "!std::isnan(fused) && fused >= plain",
     dict(targets=["build/test_fused_products"], runs=["build/test_fused_products"])),
    ("resume-fused-retimed", "a resumed CUDA run times its products again instead of keeping its run's choice",
     "run/resume.h", "r.fusion = r.resuming && gpu ? resumed_fusion(o) : fusion_request(o.fused);",
     "r.fusion = fusion_request(o.fused);", dict(targets=["build/emu/train"], runs=[EMU_CLI])),
    ("loop-backward-weight", "each micro-step's gradient weighted 1 instead of 1/micro_steps", "train.cpp",
     "t.model.backward(1.0f / micro_steps);", "t.model.backward(1.0f);", TRAIN_LOOP),
    ("loop-adamw-step", "AdamW's step counter off by one (bias correction at t = step + 2)", "train.cpp",
     "o.wd}, step + 1, clip_factor", "o.wd}, step + 2, clip_factor", TRAIN_LOOP),
    ("loop-lr-next-step", "the learning rate of step + 1 used at each step", "train.cpp",
     "learning_rate(step, o.steps,", "learning_rate(step + 1, o.steps,", TRAIN_LOOP),
    ("count-micro-steps-unchecked", "more micro-steps than an int counts accepted (wrapped, as -total_batch 2^40 was)",
     "run/run_counts.h", "if (micro_steps > kMaxIntCount)", "if (false)", COUNTS),
    ("train-eval-batches-repeat", "./train reads more evaluation batches than the shards hold without -allow_repeats",
     "train.cpp", "check_distinct_batches(\"-eval_batches\", o.eval_batches,", "(void)(\"-eval_batches\", o.eval_batches,",
     RESUME),
    ("eval-output-is-input", "./eval's -json / -pairs not compared with the files it reads", "eval.cpp",
     "check_not_an_input(name, file_id(path), inputs);", "(void)inputs;", RESUME),
    ("eval-output-run-file-unchecked", "./eval's -json / -pairs may replace a run folder's file", "eval.cpp",
     "        check_not_a_run_file(path, name);\n", "", RESUME),
    ("run-file-any-name", "every name in a run folder counts as a run file (sweep.py's eval.json refused)", "run/run_dir.h",
     "if (is_run_file(file_name_of(place)) && !run_files(folder_of(place)).empty())",
     "if (!run_files(folder_of(place)).empty())", RESUME),
    ("run-file-any-folder", "a run file's name counts in a folder that holds no run", "run/run_dir.h",
     "if (is_run_file(file_name_of(place)) && !run_files(folder_of(place)).empty())",
     "if (is_run_file(file_name_of(place)))", RESUME),
    ("run-file-link-unfollowed", "an output that is a link to a run folder's file is not followed", "run/run_dir.h",
     "    if (char* real = realpath(path.c_str(), nullptr)) {  // where a link leads",
     "    if (char* real = nullptr) {  // where a link leads", RESUME),
    ("eval-input-tokenizer-unlisted", "./eval's -tokenizer is not among the inputs an output is compared with",
     "eval.cpp", '{"the -tokenizer file " + o.tokenizer_path, file_id(o.tokenizer_path)}',
     '{"the -tokenizer file " + o.tokenizer_path, std::nullopt}', RESUME),
    ("eval-input-train-data-unlisted", "./eval's -train_data shards are not among its inputs", "eval.cpp",
     'for (const char* flag : {"-val_data", "-train_data"})', 'for (const char* flag : {"-val_data"})', RESUME),
    ("train-input-val-only-with-evaluation", "./train's validation shards not inputs with -sample_every alone",
     "run/resume.h", "    if (o.eval_every > 0 || o.sample_every > 0)", "    if (o.eval_every > 0)", RESUME),
    ("train-input-val-only-with-samples", "./train's validation shards not inputs with evaluation alone",
     "run/resume.h", "    if (o.eval_every > 0 || o.sample_every > 0)", "    if (o.sample_every > 0)", RESUME),
    ("train-input-tokenizer-unlisted", "./train's -tokenizer (read with -sample_every) not among its inputs",
     "run/resume.h", '    if (o.sample_every > 0) add("the -tokenizer file", o.tokenizer_path);\n', "", RESUME),
    ("resume-final-evaluation-skipped", "-resume 1 at the last step does not make the final evaluation", "train.cpp",
     "    if (t.val_data) {", "    if (t.val_data && t.first_step < o.steps) {", RESUME),
    ("resume-final-outcome-unread", "-resume 1 at the last step calls the run complete without its outcome record",
     "train.cpp", "if (at_end && group.max(group.is_root() && logged_final_outcome(o.out_dir, o.steps))) {",
     "if (at_end) {", RESUME),
    ("resume-run-id-zero-accepted", "a checkpoint without a run id accepted beside a state with one", "run/resume.h",
     "model_run != r.state.run_id)", "model_run != 0 && model_run != r.state.run_id)", RESUME),
    ("startup-stop-leaves-files", "a stop in the start-up evaluation leaves config.json and log.jsonl", "train.cpp",
     "    if (done == 0 && t.log) remove_unstarted_run(t.r.opt.out_dir);\n", "", RESUME),
    ("resume-older-pair-unnamed", "a damaged newest pair is refused without naming the older whole one", "run/resume.h",
     "        throw InputError(e.what() + older_whole_pair(o.out_dir, saved));", "        throw;", RESUME),
    ("eval-nonfinite-weights-by-loss", "./eval judges the model by its loss alone (a NaN weight the loss never reads passes)",
     "eval.cpp", "    const bool finite = nonfinite_weights == 0 && std::isfinite(r.val_loss);",
     "    const bool finite = std::isfinite(r.val_loss);", RESUME),
    ("eval-nonfinite-loss-unchecked", "./eval judges the model by its weights alone (an overflowing loss passes)",
     "eval.cpp", "    const bool finite = nonfinite_weights == 0 && std::isfinite(r.val_loss);",
     "    const bool finite = nonfinite_weights == 0;", RESUME),
    ("eval-accuracy-counts-catch-all", "./eval's accuracy counts a predicted catch-all id as correct", "eval.cpp",
     "            if (targets[n] == r.catch_all) continue;\n", "", RESUME),
    ("lr-min-above-lr", "-lr_min above -lr accepted (the rate rises)", "flags/train_flags.h",
     "if (o.lr_min > o.lr)", "if (false)", RESUME),
    ("flag-open-lower-bound", "a real flag's open lower bound not enforced (-eps 0 accepted)", "flags/flags.h",
     "(lo_open && x == lo)", "(false && x == lo)", FLAGS),
    ("flag-integer-maximum", "an integer flag's maximum not enforced (-shuffle 2 accepted)", "flags/flags.h",
     "if (x < lo || x > hi)\n", "if (x < lo)\n", FLAGS),
    ("resume-check-skips-wd", "-resume 1 does not compare -wd with config.json", "run/run_config.h",
     "if (!defines || (f.name", "if (!defines || f.name == \"wd\" || (f.name", RESUME),
    ("table-wd-may-change", "the table says -wd may change on -resume 1", "flags/train_flags.h",
     '{"wd", &O::wd, reals(0, 10), "0.1", MUST_MATCH,', '{"wd", &O::wd, reals(0, 10), "0.1", MAY_CHANGE,',
     dict(targets=["train", "build/test_flags", "build/test_run_dir"], runs=["build/test_flags", "build/test_run_dir"])),
    ("sumsq-parallel-index-fast", "sum_of_squares' parallel branch writes each thread's own (empty) partial sums (fast)",
     "cpu_fast_ops.h", "        part[k] = lane_sum<double>", "        partial[k] = lane_sum<double>", THREADED),
    ("sumsq-parallel-index-reference",
     "sum_of_squares' partial sums thread_local, so the worker threads write their own, empty ones (reference)",
     "cpu_ops.h", "    std::vector<double> partial(chunks, 0.0);\n",
     "    static thread_local std::vector<double> partial;\n    partial.assign(chunks, 0.0);\n", THREADED),
    ("encoder-backward-race", "encoder_backward's threads split the batch, so two add into one row", "cpu_ops.h",
     "#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= parallel_min_work())\n"
     "    for (int c0 = 0; c0 < C; c0 += CB) {\n"
     "        const int c1 = std::min(C, c0 + CB);\n"
     "        for (int b = 0; b < B; b++)",
     "    for (int c0 = 0; c0 < C; c0 += CB) {\n"
     "        const int c1 = std::min(C, c0 + CB);\n"
     "#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= parallel_min_work())\n"
     "        for (int b = 0; b < B; b++)", THREADED),
    ("gelu-constant-reference", "GELU's cubic constant 0.045 instead of 0.044715 (reference, forward and backward)",
     "cpu_ops.h", "Real(0.044715)", "Real(0.045)", dict(REFERENCE, occurrences=3)),
    ("gelu-constant-fast", "GELU's cubic constant 0.045 instead of 0.044715 (fast ops, forward and backward)",
     "cpu_fast_ops.h", "0.044715f", "0.045f", dict(FAST, occurrences=3)),
    ("gelu-constant-kernel", "GELU's cubic constant 0.045 instead of 0.044715 (CUDA kernels)", "gelu.cuh",
     "constexpr float GELU_CUBIC = 0.044715f;", "constexpr float GELU_CUBIC = 0.045f;", KERNELS),
    ("layernorm-eps-reference", "LayerNorm's eps added outside the square root (reference)", "cpu_ops.h",
     "const Real s = Real(1) / std::sqrt(var + Real(1e-5));", "const Real s = Real(1) / (std::sqrt(var) + Real(1e-5));",
     REFERENCE),
    ("layernorm-eps-fast", "LayerNorm's eps added outside the square root (fast ops)", "cpu_fast_ops.h",
     "const float s = 1.0f / std::sqrt(sq / C + eps);", "const float s = 1.0f / (std::sqrt(sq / C) + eps);", FAST),
    ("layernorm-eps-kernel", "LayerNorm's eps added outside the square root (CUDA kernel)", "layernorm.cuh",
     "1.0f / sqrtf(warp_sum(sq) / C + 1e-5f);", "1.0f / (sqrtf(warp_sum(sq) / C) + 1e-5f);", KERNELS),
    ("adamw-eps-cpu", "AdamW's eps inside the square root, m/sqrt(v + eps) (CPU, both models)", "cpu_ops.h",
     "(m_hat / (std::sqrt(v_hat) + eps)", "(m_hat / std::sqrt(v_hat + eps)",
     dict(targets=["build/test_gradcheck_ops", "build/test_optimizer"],
          runs=["build/test_gradcheck_ops", "build/test_optimizer"])),
    ("lt-alignment-undeclared",
     "cuBLASLt is not told the pointers' alignment (MIN_ALIGNMENT_*_BYTES unset: 256 assumed)", "matmul.cuh",
     "        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments[0]);\n"
     "        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments[1]);\n"
     "        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments[2]);\n"
     "        set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments[2]);\n", "", KERNELS),
    ("adamw-eps-kernel", "AdamW's eps inside the square root, m/sqrt(v + eps) (CUDA kernel)", "adamw.cuh",
     "(m_hat / (sqrtf(v_hat) + h.eps)", "(m_hat / sqrtf(v_hat + h.eps)", KERNELS),
    ("attention-mma-unmasked", "the tensor-core forward leaves its diagonal tile unmasked (keys after the query count)",
     "attention_mma.cuh", "        if (diagonal) mask_future_keys(s, row0, k0);\n", "", KERNELS),
    ("attention-mma-no-rescale", "the tensor-core forward does not rescale o when a row's maximum grows",
     "attention_mma.cuh",
     "            for (int n = 0; n < S::n_tiles; n++) o[n][2 * half] *= correction, o[n][2 * half + 1] *= correction;\n",
     "", KERNELS),
    ('attention-fwd-no-first-barrier', "the tensor-core forward reads q's fragments with no barrier after its copies",
     'attention_mma.cuh', "    cp_async_wait<0>();\n    __syncthreads();\n    uint32_t qf[S::chunks][4];  // this warp's 16 queries\n",
     "    cp_async_wait<0>();\n    uint32_t qf[S::chunks][4];  // this warp's 16 queries\n", WARPS_APART),
    ('attention-fwd-no-tile-barrier', "the tensor-core forward's one barrier a tile deleted (copies of tile j + 1 start while others read j - 1)",
     'attention_mma.cuh', "        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows)\n",
     '', WARPS_APART),
    ('attention-fwd-no-tile-wait', "the tensor-core forward does not wait for its copies of a tile before the tile's barrier",
     'attention_mma.cuh', "        cp_async_wait<0>();  // this thread's copies of tile j are in\n        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows)\n",
     "        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows)\n", WARPS_APART),
    ('attention-dq-no-first-barrier', "the dq kernel reads q's and dout's fragments with no barrier after their copies",
     'attention_mma.cuh', '    cp_async_wait<0>();\n    __syncthreads();\n    uint32_t qf[S::chunks][4], dof',
     '    cp_async_wait<0>();\n    uint32_t qf[S::chunks][4], dof', WARPS_APART),
    ('attention-dq-no-tile-barrier', "the dq kernel's one barrier a tile deleted",
     'attention_mma.cuh', "        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows, dout_rows)\n",
     '', WARPS_APART),
    ('attention-dq-no-tile-wait', "the dq kernel does not wait for its copies of a tile before the tile's barrier",
     'attention_mma.cuh', "        cp_async_wait<0>();  // this thread's copies of tile j are in\n        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows, dout_rows)\n",
     "        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows, dout_rows)\n", WARPS_APART),
    ('attention-dkdv-no-first-barrier', "the dk/dv kernel reads k's and v's fragments with no barrier after their copies",
     'attention_mma.cuh', '    cp_async_wait<0>();\n    __syncthreads();\n    uint32_t kf[S::chunks][4]',
     '    cp_async_wait<0>();\n    uint32_t kf[S::chunks][4]', WARPS_APART),
    ('attention-dkdv-no-tile-barrier', "the dk/dv kernel's one barrier a tile deleted",
     'attention_mma.cuh', "        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or k_rows, v_rows)\n",
     '', WARPS_APART),
    ("attention-dkdv-no-tile-wait", "the dk/dv kernel does not wait for its copies of a tile before the tile's barrier",
     "attention_mma.cuh", "        cp_async_wait<0>();  // this thread's copies of tile j are in\n        finish_row_values(tile_lse",
     "        finish_row_values(tile_lse", WARPS_APART),
    ("warps-in-step", "the warps schedule runs every warp in each round, as the other orders do",
     "test/simt/scheduler.cpp", "      if (schedule_.order == ThreadOrder::kWarps && !round_.empty() &&",
     "      if (false && !round_.empty() &&", SIMT_LAYER),
    ("cp-async-at-once", "the emulated cp.async copies when it starts, not when its group is waited for",
     "test/simt/async_copy.cpp", "  std::memset(dst, kInFlightByte, bytes);\n", "  std::memcpy(dst, src, bytes);\n", SIMT_LAYER),
    ("mma-emulated-a-registers", "the emulated mma.sync reads A's registers 1 and 2 swapped", "test/simt/tensor_cores.cpp",
     "reg = row / 8 + 2 * (k / 8);", "reg = 2 * (row / 8) + k / 8;", TENSOR_CORES),
    ("ldmatrix-emulated-untransposed", "the emulated ldmatrix .trans returns the matrix untransposed",
     "test/simt/tensor_cores.cpp", "s.transpose ? element(rows[2 * t], g) : element(rows[g], 2 * t)",
     "element(rows[g], 2 * t)", TENSOR_CORES),
    ("cost-crossentropy-no-exp", "the cost model's cross-entropy trip without the exp of its sum pass",
     "bench/kernel_costs.h",
     "(cvt + 13)", "(cvt + 1)", TRAFFIC),
    ("cost-layernorm-bwd-waves", "the LayerNorm backward declares half its column sums' wavefronts per row",
     "bench/kernel_costs.h", "rows * 4 * pass", "rows * 2 * pass", TRAFFIC),
    ("cost-adamw-undeclared", "AdamW's launch declares no warp instructions (rated by its roofline alone)",
     "bench/kernel_costs.h", "adamw_work(copy).instructions(", "0 * adamw_work(copy).instructions(", TRAFFIC),
    ("wte-run-one-piece", "a run of equal tokens over several chunks gets only the next chunk's piece", "encoder.cuh",
     "        if (next_last + 1 >= N || key_token(keys[next_last + 1]) != token) break;", "        break;", KERNELS),
    ("exp-fast-coefficient", "exp_fast's r^4 coefficient 1/25 instead of 1/24", "cpu_fast_ops.h",
     "p = p * r + 1.0f / 24;", "p = p * r + 1.0f / 25;", FAST),
    ("bench-keeps-first-model", "bench_gpu keeps the measured backend while the per-op timing builds its own model",
     "bench/bench_gpu.cpp", "    model.reset();  // the per-op timing below builds a model of its own\n", "",
     dict(targets=["build/emu/bench_gpu"], runs=[EMU_CLI])),
    ("nccl-wait-without-polling", "a rank waits for a collective by synchronising its stream (no polling, no timeout)",
     "cuda/nccl_comm.cuh", "            const cudaError_t state = cudaStreamQuery(stream);",
     "            const cudaError_t state = cudaStreamSynchronize(stream);",
     dict(targets=["build/emu/train"], runs=["build/test_distributed"])),
    ("cuda-falls-back-to-cpu", "-device cuda without a device silently trains on the CPU", "run/setup.h",
     'if (device == "cuda" && !present) throw', 'if (false) throw',
     dict(targets=["train"], runs=["build/test_cli"])),
    ("eval-skips-windows", "./eval reads every other validation window", "eval.cpp",
     "        val.next_batch();\n        loss_sum += backend.forward",
     "        val.next_batch();\n        val.next_batch();\n        loss_sum += backend.forward",
     dict(targets=["eval"], runs=["build/test_cli"])),
    ("stats-aicc-as-aic", "AICc computed as plain AIC (its small-sample correction dropped)", "experiments/stats.py",
     "return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)",
     "return n * math.log(max(rss, 1e-300) / n) + 2 * k", EXPERIMENTS),
    ("spearman-ties-by-position", "Spearman's tied values ranked by position instead of by their mean rank",
     "experiments/stats.py", 'rx, ry = stats.rankdata(xs, method="average"), stats.rankdata(ys, method="average")',
     'rx, ry = stats.rankdata(xs, method="ordinal"), stats.rankdata(ys, method="ordinal")', EXPERIMENTS),
    ("e1-initial-loss-max", "E1's L_init the largest first loss over the seeds instead of their mean",
     "experiments/e1.py", 'return mean_sd(values(rows, "first_train_loss"))[0]', "return rows.first_train_loss.max()",
     EXPERIMENTS),
    ("welch-pooled-variance", "Welch's test with a pooled variance (Student's t-test)", "experiments/stats.py",
     "stats.ttest_ind(x, y, equal_var=False)", "stats.ttest_ind(x, y, equal_var=True)", EXPERIMENTS),
    ("outcome-loss-nan-only", "an infinite training loss does not stop the run", "training.h",
     "        if (!std::isfinite(loss)) return stop(", "        if (std::isnan(loss)) return stop(", OUTCOME_RULES),
    ("outcome-grad-norm-nan-only", "an infinite gradient norm does not stop the run", "training.h",
     "        if (!std::isfinite(grad_norm)) return stop(", "        if (std::isnan(grad_norm)) return stop(",
     OUTCOME_RULES),
    ("outcome-final-nan-only", "an infinite final validation loss is not nonfinite", "training.h",
     '    if (!std::isfinite(val_loss)) return "nonfinite";', '    if (std::isnan(val_loss)) return "nonfinite";',
     OUTCOME_RULES),
    ("outcome-diverge-inclusive", "a window mean exactly at the divergence margin stops the run", "training.h",
     "mean > best_mean_ + rules_.diverge_rise", "mean >= best_mean_ + rules_.diverge_rise", OUTCOME_RULES),
    ("outcome-spike-inclusive", "a loss exactly on the spike line starts a spike", "training.h",
     "            if (loss > line) {", "            if (loss >= line) {", OUTCOME_RULES),
    ("outcome-warmup-late", "the divergence rule starts one step after warmup", "training.h",
     "step >= rules_.warmup && mean", "step > rules_.warmup && mean", OUTCOME_RULES),
    ("outcome-spikes-blind-in-warmup", "spikes counted only once W ordinary steps exist (the old rule)", "training.h",
     "        if (!reference_.empty()) {", "        if ((int)reference_.size() == rules_.window) {", OUTCOME_RULES),
    ("outcome-max-loss-step-0", "max_loss counts step 0, the loss at initialisation", "training.h",
     "if (step > 0 && std::isfinite(loss)", "if (step >= 0 && std::isfinite(loss)", OUTCOME_RULES),
    ("outcome-collapse-exclusive", "a final loss equal to unigram_ce is ok, not collapsed", "training.h",
     'return val_loss >= unigram_ce ? "collapsed" : "ok";', 'return val_loss > unigram_ce ? "collapsed" : "ok";',
     OUTCOME_RULES),
    ("outcome-max-loss-last-tie", "max_loss_step the last step at the highest loss, not the first", "training.h",
     "(std::isnan(extremes_.max_loss) || loss > extremes_.max_loss)",
     "(std::isnan(extremes_.max_loss) || loss >= extremes_.max_loss)", OUTCOME_RULES),
    ("outcome-stats-x0", "the extremes take mean |X_0| (the embedding) for mean |X_L|", "train.cpp",
     "t.outcome.observe_stats(stats.attn_logit_max, stats.stream.back().mean_abs);",
     "t.outcome.observe_stats(stats.attn_logit_max, stats.stream.front().mean_abs);", OUTCOMES),
    ("outcome-resume-forgets-stats", "-resume 1 replays the losses but not the stats records", "train.cpp",
     "        for (const LoggedStats& past : log->stats()) t.outcome.observe_stats(past.attn_logit_max, past.mean_abs_L);\n",
     "", OUTCOMES),
    ("outcome-resume-forgets-losses", "-resume 1 does not replay the kept steps' losses", "train.cpp",
     "        for (double past : log->losses()) t.outcome.observe(past, 0.0);\n", "", OUTCOMES),
    ("outcome-replay-first-layer", "the replayed stats take the first entry of mean_abs (X_0), not X_L", "run/run_dir.h",
     "mean_abs.empty() ? NAN : mean_abs.back()", "mean_abs.empty() ? NAN : mean_abs.front()", OUTCOMES),
    ("holm-without-running-max", "Holm's adjusted p-values without the running maximum (not monotone)",
     "experiments/stats.py", "running = max(running, min(1.0, (m - rank) * p[i]))",
     "running = min(1.0, (m - rank) * p[i])", PY_STATS),
    ("edge-below-best", "the edge counts failures below the best learning rate (a slow run read as unstable)",
     "experiments/stats.py", "above = sorted(lr for lr in failed if lr >= best)", "above = sorted(failed)",
     PY_STATS),
    ("fail-margin-inclusive", "a run exactly a quarter of the way to bigram_ce counts as failed", "experiments/e1.py",
     "short = (rows.val_loss > rows.unigram_ce - margin)", "short = (rows.val_loss >= rows.unigram_ce - margin)",
     PY_REPORTS),
    ("gate-exclusive", "a run exactly 0.75 nats below unigram_ce misses E2's gate", "experiments/e2.py",
     "(rows.val_loss <= rows.unigram_ce - GATE)", "(rows.val_loss < rows.unigram_ce - GATE)", PY_REPORTS),
    ("intersection-smallest-p", "a claim that needs several things takes the smallest p of its parts",
     "experiments/primary.py", "return Primary(max(p.p for p in parts), CLAIMED",
     "return Primary(min(p.p for p in parts), CLAIMED", PY_CLAIMS),
    ("verdict-ignores-direction", "a significant effect against the claim reads as support",
     "experiments/claim_rows.py", "if adjusted < ALPHA and primary_test.direction == CLAIMED:",
     "if adjusted < ALPHA:", PY_CLAIMS),
    ("against-only-when-all-parts", "a claim that needs several things is against only when every part points the "
     "other way", "experiments/primary.py", "    if against:\n", "    if len(against) == len(parts):\n", PY_CLAIMS),
    ("against-without-bonferroni", "a claim against in one of several parts takes that part's p alone",
     "experiments/primary.py", "Primary(min(1.0, len(parts) * min(p.p for p in against)), OPPOSITE",
     "Primary(min(p.p for p in against), OPPOSITE", PY_CLAIMS),
    ("matched-lrs-smallest", "the matched learning rates are the two smallest at which every configuration learns",
     "experiments/e1.py", "(common[-2:] if len(common) >= 2 else [])", "(common[:2] if len(common) >= 2 else [])",
     PY_REPORTS),
    ("local-text-uses-tiktoken", "prepare_data.py tokenises local text with tiktoken when installed",
     "prepare_data.py", "for document_tokens in tokenize_documents(documents, vocab, args.workers):",
     'for document_tokens in tokenize_documents(documents, vocab, args.workers, has_module("tiktoken")):',
     PREPARE),
    ("loader-never-shuffles-shards", "-shuffle 1 keeps the shards in file order (only windows shuffled)", "dataloader.h",
     "        if (shuffle_) shuffle_in_place(shard_order.begin(), shard_order.end(), rng);\n", "", LOADER),
    ("loader-never-shuffles-windows", "-shuffle 1 keeps each shard's windows in order (only shards shuffled)",
     "dataloader.h", "            if (shuffle_) shuffle_in_place(first, next, rng);\n", "", LOADER),
    ("shuffle-cyclic-only", "Fisher-Yates draws below n - 1 (Sattolo's algorithm: only cyclic orders)", "dataloader.h",
     "first + rng.below(n))", "first + rng.below(n - 1))", LOADER),
    ("loader-mixes-tokenizers", "shards that record different tokenizers are read together", "dataloader.h",
     "if (shard.tokenizer != first->tokenizer)", "if (false)", LOADER),
    ("input-kind-unchecked", "an input that is not a regular file (a folder, a FIFO) is read as one", "util/paths.h",
     "    if (!S_ISREG(st.st_mode)) {\n        close(fd);", "    if (false) {\n        close(fd);",
     dict(targets=["tokenize", "build/test_tokenizer"], runs=["build/test_tokenizer"])),
    ("tokenize-stdout-over-input", "./tokenize writes its output over the tokenizer file or standard input",
     "tokenize.cpp", "    check_not_an_input(\"standard output\", descriptor_id(1), inputs);\n", "", TOKENIZE),
    ("tokenize-shard-unchecked", "./tokenize -shard's path is not checked by creating it before the work",
     "tokenize.cpp", "    check_can_create(options.shard_path, shard);\n", "", TOKENIZE),
    ("prepare-overwrites-existing", "prepare_data.py replaces existing files of the name without --overwrite",
     "prepare_data.py", "        if self.earlier and not overwrite:", "        if False:", PREPARE),
    ("prepare-keeps-stale-shards", "prepare_data.py --overwrite leaves the earlier run's extra shards",
     "prepare_data.py", "            for path in set(self.earlier) - {path for path, _, _ in self.written}:",
     "            for path in []:",
     PREPARE),
    ("prepare-name-leaves-out", "prepare_data.py accepts a --name with '/' (../../evil writes outside --out)",
     "prepare_data.py", 'or "/" in name or (os.altsep and os.altsep in name)', "or (os.altsep and os.altsep in name)",
     PREPARE),
    ("prepare-name-clash", "prepare_data.py accepts a name whose shards another name's glob matches (mobydick_train)",
     "prepare_data.py", "    if clash and clash.start() > 0:", "    if False:", PREPARE),
    ("prepare-input-by-name", "prepare_data.py compares outputs with inputs by absolute path, not as files",
     "prepare_data.py", "return (info.st_dev, info.st_ino) if", "return os.path.abspath(path) if", PREPARE),
    ("prepare-accepts-tiny-corpus", "prepare_data.py writes a corpus too small for a val shard (none, exit 0)",
     "prepare_data.py", "    if train_count < 2 or (val_fraction > 0 and val_count < 2):", "    if train_count < 1:",
     PREPARE),
    ("prepare-output-folder-unchecked", "prepare_data.py does not create a file in --out before the work",
     "prepare_data.py", 'probe, probe_path = tempfile.mkstemp(prefix=".prepare_data_", suffix=".tmp", dir=path)\n'
     "        os.close(probe)\n        os.remove(probe_path)", "pass", PREPARE),
    ("prepare-leaves-temporary-files", "prepare_data.py leaves its temporary files (.NAME.XXXX.tmp) after a failed write",
     "prepare_data.py", "            if os.path.lexists(tmp):\n                os.remove(tmp)", "            pass", PREPARE),
    ("prepare-ignores-encoding", "prepare_data.py reads every file as UTF-8, whatever --encoding says",
     "prepare_data.py", "return data.decode(encoding)", 'return data.decode("utf-8", errors="replace")', PREPARE),
    ("prepare-bad-input-exit-1", "prepare_data.py exits 1 on bad input (the C++ tools exit 2)", "prepare_data.py",
     '        print(f"prepare_data.py: {e}", file=sys.stderr)\n        return 2',
     '        print(f"prepare_data.py: {e}", file=sys.stderr)\n        return 1', PREPARE),
    ("prepare-records-no-tokenizer", "prepare_data.py's shards record no tokenizer (header[3] = 0)",
     "prepare_data.py", "    header[SHARD_TOKENIZER_WORD] = fingerprint\n", "", PREPARE),
]

RUN_TIMEOUT_S = 1200  # a test binary that runs longer than this has hung: the mutant counts as killed


def make(targets):
    """Builds `targets` with make -j2; returns (ok, the last lines of its output)."""
    if not targets:
        return True, ""
    p = subprocess.run(["make", "-j2"] + targets, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode == 0, "\n".join(p.stdout.splitlines()[-15:])


def run_in_own_group(args, env, cwd, timeout):
    """Runs `args` (output discarded) in a process group of its own and returns the finished
    process, or None when it ran past `timeout` seconds: then the whole group is killed, the
    programs a test started included."""
    p = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        p.wait(timeout=timeout)
        return p
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None


def run_binary(spec, cwd=None, env_extra=None, fail_fast=False, timeout=None):
    """Runs one test binary, spec "BINARY" or "NAME=VALUE:BINARY" (as test/run_tests.sh takes),
    from `cwd` (default: here) with `env_extra` added to the environment, and returns the names
    of the tests that failed, or a line saying that it crashed or hung. With `fail_fast` the
    binary stops at its first failure (--gtest_fail_fast). A run longer than `timeout` seconds
    (default RUN_TIMEOUT_S) has hung."""
    timeout = timeout or RUN_TIMEOUT_S
    env = dict(os.environ, **(env_extra or {}))
    binary = spec
    if "=" in spec and ":" in spec:
        assignment, binary = spec.rsplit(":", 1)
        name, value = assignment.split("=", 1)
        env[name] = value
    label = binary if binary == spec else f"{binary} ({spec.rsplit(':', 1)[0]})"
    with tempfile.TemporaryDirectory(prefix="mutate_") as scratch:
        xml_path = os.path.join(scratch, "out.xml")
        args = [os.path.join(cwd or ".", binary), "--gtest_brief=1", f"--gtest_output=xml:{xml_path}"]
        p = run_in_own_group(args + (["--gtest_fail_fast"] if fail_fast else []), env, cwd, timeout)
        if p is None:
            return [f"{label} hung (over {timeout} s)"]
        failed = []
        if os.path.exists(xml_path) and os.path.getsize(xml_path) > 0:
            with open(xml_path, encoding="utf-8", errors="replace") as f:  # a mutant's failure
                report = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "?", f.read())  # may quote raw bytes
            for case in ET.fromstring(report).iter("testcase"):
                if case.find("failure") is not None:
                    failed.append(f"{case.get('classname')}.{case.get('name')}")
        if p.returncode != 0 and not failed:
            failed.append(f"{label} crashed (status {p.returncode})")
        return failed


def check_mutant(mutant):
    """Applies one mutant, builds, runs its tests and restores the file. Returns the table cell."""
    name, _, path, old, new, plan = mutant
    with open(path, encoding="utf-8") as f:
        original = f.read()
    if original.count(old) != plan.get("occurrences", 1):
        return f"NOT APPLIED: the text occurs {original.count(old)} times in {path}"
    backup = path + ".mutate-backup"
    shutil.copy2(path, backup)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(original.replace(old, new))
        ok, log = make(plan["targets"])
        if not ok:
            return "BUILD FAILED (not a test kill):\n" + log
        failed = []
        for spec in plan["runs"]:
            failed += run_binary(spec)
        return ", ".join(failed) if failed else "SURVIVED"
    finally:
        shutil.copy2(backup, path)   # the original bytes (and times) back
        os.remove(backup)
        os.utime(path)               # newer than what the mutant built, so that make rebuilds it
        restored, log = make(plan["targets"])  # the next mutant starts from a clean build
        if not restored:
            print("rebuilding from the restored sources failed:\n" + log, flush=True)


def main(argv):
    if "--generated" in argv:
        return generated.main([a for a in argv if a != "--generated"], run_binary)
    if "--list" in argv:
        for name, what, path, *_ in MUTANTS:
            print(f"{name:26s} {path:16s} {what}")
        return 0
    wanted = [a for a in argv if not a.startswith("-")]
    unknown = set(wanted) - {m[0] for m in MUTANTS}
    if unknown:
        print(f"mutate.py: unknown mutant {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
        return 2
    if not os.path.exists("test/mutate.py"):
        print("mutate.py: run it from the repository root", file=sys.stderr)
        return 2
    # A run killed outright (SIGKILL) leaves its backup behind: put that file back first.
    for backup in glob.glob("**/*.mutate-backup", recursive=True):
        print(f"restoring {backup[:-len('.mutate-backup')]} from an interrupted run")
        shutil.move(backup, backup[:-len(".mutate-backup")])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` restores the file
    chosen = [m for m in MUTANTS if not wanted or m[0] in wanted]
    rows = []
    for mutant in chosen:
        start = time.time()
        print(f"--- {mutant[0]}: {mutant[1]}", flush=True)
        cell = check_mutant(mutant)
        print(f"    {cell}  ({time.time() - start:.0f} s)", flush=True)
        rows.append((mutant[0], cell))
    print()
    print("| mutant | killed by |")
    print("|---|---|")
    for name, cell in rows:
        print(f"| {name} | {cell.splitlines()[0]} |")
    bad = [name for name, cell in rows if cell == "SURVIVED" or cell.startswith(("NOT APPLIED", "BUILD FAILED"))]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} mutants killed" + (f"; not killed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
