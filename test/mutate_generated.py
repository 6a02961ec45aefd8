"""python3 test/mutate.py --generated: the mutation audit of the refusals, bounds and rules,
with mutants generated from the code (test/mutation_sites.py, docs/mutation.md).

    python3 test/mutate.py --generated --list            every generated mutant, by name
    python3 test/mutate.py --generated                   run them all (hours: see docs/mutation.md)
    python3 test/mutate.py --generated eval.cpp training.h:80   only the names containing one of these
    python3 test/mutate.py --generated --tree DIR        the scratch copy (default /tmp/gpt2_mutate)
    python3 test/mutate.py --generated --at COMMIT       the sources and tests of an older commit
    python3 test/mutate.py --generated --fast            without the slow suites (SLOW); a later run
                                                         without --fast runs only those for the survivors

The working tree (or COMMIT) is copied to the scratch folder, every C++ mutant of the generated
set is compiled into its file there at once (mutation_sites.instrument_cpp) and the programs and
test binaries are built once, at -O1, CPU only. Then every suite the mutants need runs once as it
is (all must pass), and each mutant in turn: a C++ mutant switched on by GPT2_MUTANT=K, a Python
mutant written into its file (and put back); the suites that cover its file (SUITES_OF, fastest
first, each stopping at its first failure) run until one fails: the mutant is killed by that test.
The results go to DIR/results.tsv as they come, so that a run stopped (Ctrl-C) continues where it
was with the same command; the summary at the end counts killed and surviving mutants per file.
Exit status 1 when a mutant survived."""
import os
import shutil
import signal
import subprocess
import sys
import time

import mutation_sites

# The suites: how each runs (test/run_tests.sh's spelling) and the test source that must exist.
SUITES = {
    "paths": ("build/test_paths", "test/test_paths.cpp"),
    "checkpoint": ("build/test_checkpoint", "test/test_checkpoint.cpp"),
    "dataloader": ("build/test_dataloader", "test/test_dataloader.cpp"),
    "tokenizer": ("build/test_tokenizer", "test/test_tokenizer.cpp"),
    "flags": ("build/test_flags", "test/test_flags.cpp"),
    "outcomes": ("build/test_outcomes", "test/test_outcomes.cpp"),
    "baselines": ("build/test_baselines", "test/test_baselines.cpp"),
    "safetensors": ("build/test_safetensors", "test/test_safetensors.cpp"),
    "file_kinds": ("build/test_file_kinds", "test/test_file_kinds.cpp"),
    "user_commands": ("build/test_user_commands", "test/test_user_commands.cpp"),
    "cli": ("build/test_cli", "test/test_cli.cpp"),
    "run_dir": ("build/test_run_dir", "test/test_run_dir.cpp"),
    "prepare_data": ("build/test_prepare_data", "test/test_prepare_data.cpp"),
    "sweep": ("build/test_sweep", "test/test_sweep.cpp"),
    "py_input": ("GTEST_FILTER=*test_input:build/test_experiments", "test/py/test_input.py"),
    "py_file_kinds": ("GTEST_FILTER=*test_file_kinds:build/test_experiments", "test/py/test_file_kinds.py"),
    "py_results": ("GTEST_FILTER=*test_results:build/test_experiments", "test/py/test_results.py"),
    "py_sweep_runs": ("GTEST_FILTER=*test_sweep_runs:build/test_experiments", "test/py/test_sweep_runs.py"),
}
PROGRAMS = ["run_dir", "cli", "file_kinds", "user_commands"]  # the suites that run ./train and ./eval
SLOW = ("run_dir", "cli", "sweep", "py_sweep_runs")  # minutes each on 2 cores: left out with --fast
SWEEP = ["py_input", "py_file_kinds", "py_results", "py_sweep_runs", "sweep"]
# The generated set's sources, each with the suites that cover it.
SUITES_OF = {
    "train.cpp": PROGRAMS + ["outcomes"],
    "eval.cpp": PROGRAMS + ["safetensors"],
    "tokenize.cpp": ["tokenizer", "file_kinds"],
    "training.h": ["outcomes", "cli", "run_dir"],
    "dataloader.h": ["dataloader", "baselines"] + PROGRAMS,
    "run/run_dir.h": ["run_dir", "file_kinds", "cli"],
    "run/checkpoint.h": ["checkpoint"] + PROGRAMS,
    "run/resume.h": PROGRAMS,
    "run/run_config.h": ["run_dir", "user_commands", "cli"],
    "run/run_counts.h": ["flags", "cli", "run_dir"],
    "run/safetensors.h": ["safetensors", "file_kinds", "user_commands"],
    "run/setup.h": PROGRAMS,
    "flags/flags.h": ["flags"] + PROGRAMS,
    "flags/train_flags.h": ["flags"] + PROGRAMS,
    "flags/eval_flags.h": ["flags"] + PROGRAMS,
    "util/paths.h": ["paths", "checkpoint", "tokenizer", "file_kinds", "run_dir", "cli"],
    "util/json.h": ["flags", "run_dir", "user_commands", "file_kinds"],
    "tokenizer.h": ["tokenizer", "user_commands", "file_kinds"],
    "model.h": ["checkpoint", "safetensors", "cli"],
    "measure/baselines.h": ["baselines", "cli"],
    "prepare_data.py": ["prepare_data", "py_file_kinds", "py_input"],
    "plot.py": ["py_input", "py_file_kinds", "sweep"],
    "experiments/cli.py": SWEEP,
    "experiments/checks.py": SWEEP,
    "experiments/grid.py": SWEEP,
    "experiments/runner.py": SWEEP,
    "experiments/collect.py": SWEEP,
    "experiments/files.py": SWEEP + ["py_file_kinds", "prepare_data"],
    "sweep.py": SWEEP,
}
DEFAULT_TREE = "/tmp/gpt2_mutate"


def generated_mutants(root):
    """Every mutant of the generated set in the sources under `root`, in file order, each with
    its number (GPT2_MUTANT) and the suites that cover its file."""
    out = []
    for path in SUITES_OF:
        if not os.path.exists(os.path.join(root, path)):
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            out += mutation_sites.mutants_of(path, f.read())
    return out


def copy_tree(tree, commit):
    """The repository's files (tracked and untracked but not ignored; or COMMIT's) copied into
    `tree`, each only when its content differs (so that make rebuilds only what changed); returns
    the folder copied from and how many files changed."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = repo
    if commit:
        source = tree + ".source"
        shutil.rmtree(source, ignore_errors=True)
        os.makedirs(source)
        subprocess.run(f"git -C {repo} archive {commit} | tar -x -C {source}", shell=True, check=True)
        names = subprocess.run(["find", ".", "-type", "f"], cwd=source, capture_output=True, text=True).stdout.split()
    else:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.split("\n")
    changed = 0
    instrumented = {path for path in SUITES_OF if not path.endswith(".py")}  # instrument() writes those
    for name in filter(None, names):
        src, dst = os.path.join(source, name), os.path.join(tree, name)
        if not os.path.isfile(src) or os.path.islink(src) or os.path.normpath(name) in instrumented:
            continue
        with open(src, "rb") as f:
            data = f.read()
        if os.path.exists(dst):
            with open(dst, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        shutil.copymode(src, dst)
        changed += 1
    return source, changed


def instrument(tree, source, mutants, ids):
    """Writes every C++ file of the generated set into `tree` with its mutants compiled in
    (only when that text differs from what is there); returns how many files it wrote."""
    written = 0
    by_path = {}
    for mutant, k in zip(mutants, ids):
        if not mutant.path.endswith(".py"):
            by_path.setdefault(mutant.path, ([], []))
            by_path[mutant.path][0].append(mutant)
            by_path[mutant.path][1].append(k)
    for path, (group, numbers) in by_path.items():
        with open(os.path.join(source, path), encoding="utf-8") as f:
            text = mutation_sites.instrument_cpp(f.read(), group, numbers)
        target = os.path.join(tree, path)
        if os.path.exists(target):
            with open(target, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        written += 1
    return written


def build(tree, suites):
    """The programs and the test binaries of `suites`, at -O1 without CUDA or MPI; returns
    (ok, the last lines of the output)."""
    binaries = sorted({SUITES[s][0].rsplit(":", 1)[-1] for s in suites})
    env = dict(os.environ, CXXFLAGS="-O1 -march=native")
    p = subprocess.run(["make", "-j2", "NVCC=", "MPICXX=", "train", "eval", "tokenize"] + binaries, cwd=tree, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode == 0, "\n".join(p.stdout.splitlines()[-30:])


def read_results(path):
    """name -> (verdict, killer, seconds, the suites run) of the mutants already run (results.tsv;
    the last line of a name wins)."""
    results = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, verdict, killer, seconds, suites = line.rstrip("\n").split("\t")
                results[name] = (verdict, killer, float(seconds), suites.split(","))
    return results


def run_mutant(tree, mutant, number, suites, run_binary):
    """(verdict, killer): the suites run in turn until one fails; "killed" with its first failed
    test, or "survived"."""
    env = {}
    backup = None
    if mutant.path.endswith(".py"):
        path = os.path.join(tree, mutant.path)
        with open(path, encoding="utf-8") as f:
            backup = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(backup[:mutant.start] + mutant.text + backup[mutant.end:])
    else:
        env["GPT2_MUTANT"] = str(number)
    try:
        for suite in suites:
            failed = run_binary(SUITES[suite][0], cwd=tree, env_extra=env, fail_fast=True)
            if failed:
                return "killed", f"{suite}: {failed[0]}"
        return "survived", ""
    finally:
        if backup is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(backup)


def main(argv, run_binary):
    tree, commit, wanted, fast = DEFAULT_TREE, None, [], "--fast" in argv
    args = iter(argv)
    for a in args:
        if a == "--tree":
            tree = next(args)
        elif a == "--at":
            commit = next(args)
        elif a not in ("--list", "--fast"):
            wanted.append(a)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--list" in argv:
        for mutant in generated_mutants(repo):
            print(f"{mutant.name:40s} {mutant.what}")
        return 0
    os.makedirs(tree, exist_ok=True)
    tree = os.path.abspath(tree)
    source, changed = copy_tree(tree, commit)
    mutants = generated_mutants(source)
    ids = list(range(len(mutants)))
    changed += instrument(tree, source, mutants, ids)
    suites_of = {path: [s for s in suites if os.path.exists(os.path.join(tree, SUITES[s][1])) and not (fast and s in SLOW)]
                 for path, suites in SUITES_OF.items()}
    chosen = [(m, k) for m, k in zip(mutants, ids) if not wanted or any(w in m.name for w in wanted)]
    needed = sorted({s for m, _ in chosen for s in suites_of[m.path]})
    print(f"mutate --generated: {len(mutants)} mutants ({len(chosen)} chosen) in {tree}; building", flush=True)
    ok, log = build(tree, needed)
    if not ok:
        print("the instrumented build failed:\n" + log)
        return 2
    baseline_path = os.path.join(tree, "baseline.tsv")
    rebuilt = changed > 0 or "g++" in log
    if rebuilt and os.path.exists(baseline_path):
        os.remove(baseline_path)
    seconds = {}
    if os.path.exists(baseline_path):
        with open(baseline_path, encoding="utf-8") as f:
            seconds = {suite: float(t) for suite, t in (line.split() for line in f)}
    for suite in needed:  # every suite passes with no mutant switched on, and how long it takes
        if suite in seconds:
            continue
        start = time.time()
        failed = run_binary(SUITES[suite][0], cwd=tree)
        seconds[suite] = time.time() - start
        print(f"baseline {suite}: {'FAILED ' + ', '.join(failed[:3]) if failed else 'passed'} ({seconds[suite]:.0f} s)",
              flush=True)
        if failed:
            return 2
        with open(baseline_path, "a", encoding="utf-8") as f:
            f.write(f"{suite} {seconds[suite]:.1f}\n")
    results_path = os.path.join(tree, "results.tsv")
    results = read_results(results_path)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` puts a Python file back
    for mutant, k in chosen:
        done = results.get(mutant.name, ("", "", 0, []))
        suites = sorted((s for s in suites_of[mutant.path] if s not in done[3]), key=lambda s: seconds[s])
        if done[0] == "killed" or not suites:
            continue
        start = time.time()
        verdict, killer = run_mutant(tree, mutant, k, suites, run_binary)
        ran = done[3] + suites
        results[mutant.name] = (verdict, killer, done[2] + time.time() - start, ran)
        with open(results_path, "a", encoding="utf-8") as f:
            f.write(f"{mutant.name}\t{verdict}\t{killer}\t{results[mutant.name][2]:.0f}\t{','.join(ran)}\n")
        print(f"{mutant.name:40s} {verdict:8s} {killer} ({time.time() - start:.0f} s)", flush=True)
    return summary([m for m, _ in chosen], results)


def summary(mutants, results):
    """Prints the killed and surviving mutants per file and overall; 1 when one survived."""
    by_file = {}
    for m in mutants:
        verdict = results.get(m.name, ("not run",))[0]
        by_file.setdefault(m.path, {}).setdefault(verdict, []).append(m)
    total = {"killed": 0, "survived": 0}
    print("\n| file | mutants | killed | survived |\n|---|---|---|---|")
    for path, verdicts in by_file.items():
        killed, survived = len(verdicts.get("killed", [])), len(verdicts.get("survived", []))
        total["killed"] += killed
        total["survived"] += survived
        print(f"| {path} | {killed + survived} | {killed} | {survived} |")
    run = total["killed"] + total["survived"]
    print(f"\n{total['killed']} of {run} generated mutants killed ({100 * total['killed'] / max(run, 1):.1f}%)")
    survivors = [m for m in mutants if results.get(m.name, ("",))[0] == "survived"]
    for m in survivors:
        print(f"survived: {m.name}  ({m.what}; suites run: {', '.join(results[m.name][3])})")
    return 1 if survivors else 0
