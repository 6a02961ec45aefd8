#!/usr/bin/env python3
"""Mutation check of the test suite: does each planted bug make a test fail?

Run by hand from the repository root, after `make test` has built everything once (not part of
`make test` or CI; it takes about half an hour on 2 cores):

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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

EMU_CLI = "CUDA_BIN_DIR=build/emu:build/test_cli_cuda"   # the CUDA programs, emulated
EMU_KERNELS = "SIMT_ORDER=forward:build/emu/cuda_test_kernels"
TRAIN_LOOP = dict(targets=["train", "build/emu/train"], runs=["build/test_cli", EMU_CLI])
THREADED = dict(targets=["train", "build/test_threads"], runs=["build/test_threads", "build/test_cli"])
REFERENCE = dict(targets=["build/test_gradcheck_ops", "build/test_golden", "build/test_gradcheck_model"],
                 runs=["build/test_gradcheck_ops", "build/test_golden", "build/test_gradcheck_model"])
FAST = dict(targets=["train", "build/test_fast_ops", "build/test_gradcheck_ops"],
            runs=["build/test_fast_ops", "build/test_gradcheck_ops", "build/test_cli"])
KERNELS = dict(targets=["build/emu/cuda_test_kernels"], runs=[EMU_KERNELS])
EXPERIMENTS = dict(targets=[], runs=["build/test_experiments"])  # Python: nothing to rebuild

# (name, what the bug is, file, exact text, replacement, targets and runs). A bug in an op that
# has a textbook version (cpu_ops.h, what the double-precision checks run) and a fast one
# (cpu_fast_ops.h, what ./train runs) is planted in each separately.
MUTANTS = [
    ("loop-backward-weight", "each micro-step's gradient weighted 1 instead of 1/grad_accum", "train.cpp",
     "model->backward(1.0f / r.grad_accum);", "model->backward(1.0f);", TRAIN_LOOP),
    ("loop-adamw-step", "AdamW's step counter off by one (bias correction at t = step + 2)", "train.cpp",
     "o.wd}, step + 1, clip_factor", "o.wd}, step + 2, clip_factor", TRAIN_LOOP),
    ("loop-lr-next-step", "the learning rate of step + 1 used at each step", "train.cpp",
     "learning_rate(step, o.steps,", "learning_rate(step + 1, o.steps,", TRAIN_LOOP),
    ("sumsq-parallel-index-fast", "sum_of_squares' parallel branch writes each thread's own (empty) partial sums (fast)",
     "cpu_fast_ops.h", "        part[k] = lane_sum<double>", "        partial[k] = lane_sum<double>", THREADED),
    ("sumsq-parallel-index-reference",
     "sum_of_squares' partial sums thread_local, so the worker threads write their own, empty ones (reference)",
     "cpu_ops.h", "    std::vector<double> partial(chunks, 0.0);\n",
     "    static thread_local std::vector<double> partial;\n    partial.assign(chunks, 0.0);\n", THREADED),
    ("encoder-backward-race", "encoder_backward's threads split the batch, so two add into one row", "cpu_ops.h",
     "#pragma omp parallel for schedule(static) if ((size_t)B * Tn * C >= parallel_min_work())\n"
     "    for (int c0 = 0; c0 < C; c0 += CB) {\n"
     "        const int c1 = std::min(C, c0 + CB);\n"
     "        for (int b = 0; b < B; b++)",
     "    for (int c0 = 0; c0 < C; c0 += CB) {\n"
     "        const int c1 = std::min(C, c0 + CB);\n"
     "#pragma omp parallel for schedule(static) if ((size_t)B * Tn * C >= parallel_min_work())\n"
     "        for (int b = 0; b < B; b++)", THREADED),
    ("gelu-constant-reference", "GELU's cubic constant 0.045 instead of 0.044715 (reference, forward and backward)",
     "cpu_ops.h", "T(0.044715)", "T(0.045)", dict(REFERENCE, occurrences=3)),
    ("gelu-constant-fast", "GELU's cubic constant 0.045 instead of 0.044715 (fast ops, forward and backward)",
     "cpu_fast_ops.h", "0.044715f", "0.045f", dict(FAST, occurrences=3)),
    ("gelu-constant-kernel", "GELU's cubic constant 0.045 instead of 0.044715 (CUDA kernels)", "gelu.cuh",
     "constexpr float GELU_CUBIC = 0.044715f;", "constexpr float GELU_CUBIC = 0.045f;", KERNELS),
    ("layernorm-eps-reference", "LayerNorm's eps added outside the square root (reference)", "cpu_ops.h",
     "const T s = T(1) / std::sqrt(var + T(1e-5));", "const T s = T(1) / (std::sqrt(var) + T(1e-5));", REFERENCE),
    ("layernorm-eps-fast", "LayerNorm's eps added outside the square root (fast ops)", "cpu_fast_ops.h",
     "const float s = 1.0f / std::sqrt(sq / C + eps);", "const float s = 1.0f / (std::sqrt(sq / C) + eps);", FAST),
    ("layernorm-eps-kernel", "LayerNorm's eps added outside the square root (CUDA kernel)", "layernorm.cuh",
     "1.0f / sqrtf(warp_sum(sq) / C + 1e-5f);", "1.0f / (sqrtf(warp_sum(sq) / C) + 1e-5f);", KERNELS),
    ("adamw-eps-cpu", "AdamW's eps inside the square root, m/sqrt(v + eps) (CPU, both models)", "cpu_ops.h",
     "(m_hat / (std::sqrt(v_hat) + eps)", "(m_hat / std::sqrt(v_hat + eps)",
     dict(targets=["build/test_gradcheck_ops", "build/test_optimizer"],
          runs=["build/test_gradcheck_ops", "build/test_optimizer"])),
    ("adamw-eps-kernel", "AdamW's eps inside the square root, m/sqrt(v + eps) (CUDA kernel)", "adamw.cuh",
     "(m_hat / (sqrtf(v_hat) + h.eps)", "(m_hat / sqrtf(v_hat + h.eps)", KERNELS),
    ("exp-fast-coefficient", "exp_fast's r^4 coefficient 1/25 instead of 1/24", "cpu_fast_ops.h",
     "p = p * r + 1.0f / 24;", "p = p * r + 1.0f / 25;", FAST),
    ("cuda-falls-back-to-cpu", "-device cuda without a device silently trains on the CPU", "setup.h",
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
    ("local-text-uses-tiktoken", "prepare_data.py tokenises local text with tiktoken when installed",
     "prepare_data.py", "for document_tokens in tokenize_documents(documents, vocab, args.workers):",
     'for document_tokens in tokenize_documents(documents, vocab, args.workers, has_module("tiktoken")):',
     dict(targets=[], runs=["build/test_prepare_data"])),
]

RUN_TIMEOUT_S = 1200  # a test binary that runs longer than this has hung: the mutant counts as killed


def make(targets):
    """Builds `targets` with make -j2; returns (ok, the last lines of its output)."""
    if not targets:
        return True, ""
    p = subprocess.run(["make", "-j2"] + targets, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode == 0, "\n".join(p.stdout.splitlines()[-15:])


def run_binary(spec):
    """Runs one test binary, spec "BINARY" or "NAME=VALUE:BINARY" (as test/run_tests.sh takes),
    and returns the names of the tests that failed, or a line saying that it crashed or hung."""
    env = dict(os.environ)
    binary = spec
    if "=" in spec and ":" in spec:
        assignment, binary = spec.rsplit(":", 1)
        name, value = assignment.split("=", 1)
        env[name] = value
    label = binary if binary == spec else f"{binary} ({spec.rsplit(':', 1)[0]})"
    with tempfile.TemporaryDirectory(prefix="mutate_") as scratch:
        xml_path = os.path.join(scratch, "out.xml")
        try:
            p = subprocess.run([binary, "--gtest_brief=1", f"--gtest_output=xml:{xml_path}"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [f"{label} hung (over {RUN_TIMEOUT_S} s)"]
        failed = []
        if os.path.exists(xml_path) and os.path.getsize(xml_path) > 0:
            for case in ET.parse(xml_path).getroot().iter("testcase"):
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
