"""python3 test/mutate.py --generated: the mutation audit of the refusals, bounds and rules,
with mutants generated from the code (test/mutation_sites.py, docs/mutation.md).

    python3 test/mutate.py --generated --list            every generated mutant, by name
    python3 test/mutate.py --generated                   run them all (see docs/mutation.md for the time)
    python3 test/mutate.py --generated eval.cpp training.h:80   only the names containing one of these
    python3 test/mutate.py --generated --tree DIR        the scratch copy (default /tmp/gpt2_mutate)
    python3 test/mutate.py --generated --at COMMIT       the sources and tests of an older commit
    python3 test/mutate.py --generated --rerun NAME...   those mutants again (after a test was added)

The working tree (or COMMIT) is copied to the scratch folder, every C++ mutant of the generated
set is compiled into its file there at once (mutation_sites.instrument_cpp) and the programs and
test binaries are built once, at -O1, CPU only.

Trace pass: every test case of every suite the mutants need (SUITES_OF) runs once on its own,
unmutated, with GPT2_MUTANT_TRACE set: the C++ programs and tests record each mutant the test
infects (a throw or exit status reached, a comparison or literal whose variant would give another
value there), and Python (test/mutation_trace/sitecustomize.py) each line of the mutated files
it runs. A case that fails here is left out (and said). Then each mutant in turn runs only the
test cases that infect it (C++) or reach its line (Python), fastest first, stopping at the first
failure: killed by that test; survived when none fails, or when no test case infects it. A test
that never infects a mutant cannot tell it from the original, so this selection changes no
verdict; it only leaves out runs whose outcome is known. A C++ mutant is switched on by
GPT2_MUTANT=K; a Python mutant is written into its file and put back.

The traces stay in DIR/traces/ and the verdicts go to DIR/results.tsv as they come, so a run
stopped (Ctrl-C) continues where it was with the same command; the summary at the end counts
killed and surviving mutants per file. Exit status 1 when a mutant survived."""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import mutation_sites

# The suites: how each runs (a test binary, or "py:MODULE" for a unittest module of test/py/,
# which build/test_experiments runs in make test) and the test source that must exist.
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
    "py_input": ("py:test_input", "test/py/test_input.py"),
    "py_file_kinds": ("py:test_file_kinds", "test/py/test_file_kinds.py"),
    "py_results": ("py:test_results", "test/py/test_results.py"),
    "py_sweep_runs": ("py:test_sweep_runs", "test/py/test_sweep_runs.py"),
}
PROGRAMS = ["run_dir", "cli", "file_kinds", "user_commands"]  # the suites that run ./train and ./eval
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
# A run of a mutant's test cases longer than this has hung (the mutant counts as killed): each
# case runs in seconds unmutated, the longest (an endless input stopped by the test's own timer)
# in under two minutes.
RUN_TIMEOUT_S = 240


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
    """The programs and the test binaries of `suites`, at -O1 without CUDA or MPI (one job at a
    time unless MAKEFLAGS says otherwise, e.g. MAKEFLAGS=-j2); returns (ok, the last lines of the
    output)."""
    binaries = sorted({SUITES[s][0] for s in suites if not SUITES[s][0].startswith("py:")} | {"build/test_experiments"})
    env = dict(os.environ, CXXFLAGS="-O1 -march=native")
    p = subprocess.run(["make", "NVCC=", "MPICXX=", "train", "eval", "tokenize"] + binaries, cwd=tree, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode == 0, "\n".join(p.stdout.splitlines()[-30:])


def test_cases(tree, suite):
    """The test cases of a suite, as its runner names them: Suite.Test (GoogleTest) or
    Class.method (unittest)."""
    runner = SUITES[suite][0]
    if runner.startswith("py:"):
        module = runner[3:]
        code = ("import sys, unittest; sys.path.insert(0, 'test/py'); m = __import__(%r)\n"
                "def ids(s):\n    for t in s:\n        yield from (ids(t) if isinstance(t, unittest.TestSuite) else [t.id()])\n"
                "print('\\n'.join(i.split('.', 1)[1] for i in ids(unittest.defaultTestLoader.loadTestsFromModule(m))))") % module
        out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=600).stdout
        return [line for line in out.split("\n") if line]
    out = subprocess.run([os.path.join(tree, runner), "--gtest_list_tests"], cwd=tree, capture_output=True, text=True).stdout
    cases, group = [], ""
    for line in out.split("\n"):
        if not line.strip():
            continue
        if not line.startswith(" "):
            group = line.split("#")[0].strip()
        else:
            cases.append(group + line.split("#")[0].strip())
    return cases


def run_cases(tree, suite, cases, env_extra, run_binary):
    """Runs `cases` of `suite` (one process, stopping at the first failure); returns the failed
    tests ([] when all passed), or a line saying that it crashed or hung."""
    runner = SUITES[suite][0]
    if runner.startswith("py:"):
        env = dict(os.environ, **env_extra)
        with tempfile.TemporaryFile("w+") as out:
            p = subprocess.Popen([sys.executable, f"test/py/{runner[3:]}.py", "-f"] + cases, cwd=tree, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                p.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # the programs the test started too
                p.wait()
                return [f"{runner} hung (over {RUN_TIMEOUT_S} s)"]
            out.seek(0)
            output = out.read()
        if p.returncode == 0:
            return []
        failed = [line.split(" ", 1)[1] for line in output.split("\n") if line.startswith(("FAIL: ", "ERROR: "))]
        return failed or [f"{runner} exited with status {p.returncode}"]
    return run_binary(runner, cwd=tree, env_extra=dict(env_extra, GTEST_FILTER=":".join(cases)), fail_fast=True,
                      timeout=RUN_TIMEOUT_S)


def suite_fingerprint(tree, suite, python_files):
    """What a suite's traces depend on: the programs and its test binary (their times), its test
    source and the Python files of the generated set (their contents)."""
    parts = []
    runner = SUITES[suite][0]
    for binary in ["train", "eval", "tokenize"] + ([] if runner.startswith("py:") else [runner]):
        path = os.path.join(tree, binary)
        parts.append(f"{binary} {os.stat(path).st_mtime_ns if os.path.exists(path) else 0}")
    for name in [SUITES[suite][1]] + list(python_files):
        with open(os.path.join(tree, name), "rb") as f:
            parts.append(f"{name} {hashlib.sha256(f.read()).hexdigest()}")
    return "\n".join(parts) + "\n"


def trace_pass(tree, suites, python_files, run_binary):
    """Runs every test case of `suites` once, unmutated, recording what it infects (C++: mutant
    numbers) and reaches (Python: FILE:LINE of `python_files`) in DIR/traces/SUITE/CASE; returns
    {suite: [(case, seconds, set of infections)]}, the cases that failed left out. A suite's traces
    are kept from an earlier run while what they depend on is unchanged (suite_fingerprint)."""
    traces = {}
    for suite in suites:
        folder = os.path.join(tree, "traces", suite)
        fingerprint = suite_fingerprint(tree, suite, python_files)
        stamp = os.path.join(folder, "fingerprint")
        if not os.path.exists(stamp) or open(stamp).read() != fingerprint:
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            with open(stamp, "w") as f:
                f.write(fingerprint)
        traces[suite] = []
        for case in test_cases(tree, suite):
            path = os.path.join(folder, case.replace("/", "_"))
            if not os.path.exists(path + ".done"):
                if os.path.exists(path):
                    os.remove(path)
                env = {"GPT2_MUTANT_TRACE": path, "PYTHONPATH": os.path.join(tree, "test", "mutation_trace"),
                       "GPT2_MUTANT_ROOT": tree, "GPT2_MUTANT_FILES": ",".join(os.path.join(tree, f) for f in python_files)}
                start = time.time()
                failed = run_cases(tree, suite, [case], env, run_binary)
                with open(path + ".done", "w") as f:
                    f.write(f"{time.time() - start:.1f} {'FAILED' if failed else 'passed'}\n")
                print(f"trace {suite} {case}: {'FAILED ' + failed[0] if failed else 'passed'} ({time.time() - start:.0f} s)",
                      flush=True)
            with open(path + ".done") as f:
                seconds, verdict = f.read().split()
            if verdict == "FAILED":
                print(f"trace {suite} {case}: fails unmutated, left out", flush=True)
                continue
            infections = set()
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    infections = {line.strip() for line in f if line.strip()}
            traces[suite].append((case, float(seconds), infections))
    return traces


def read_results(path):
    """name -> (verdict, killer, seconds, how many test cases ran) of the mutants already run
    (results.tsv; the last line of a name wins)."""
    results = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, verdict, killer, seconds, cases = line.rstrip("\n").split("\t")
                results[name] = (verdict, killer, float(seconds), int(cases))
    return results


def covering_cases(mutant, number, traces):
    """{suite: [cases]} of the test cases that infect the mutant (C++) or reach its line (Python),
    each suite's fastest first, the suites in the order of their fastest case."""
    key = f"{mutant.path}:{mutant.name.split(':')[1]}" if mutant.path.endswith(".py") else str(number)
    chosen = {}
    for suite, cases in traces.items():
        hits = sorted((seconds, case) for case, seconds, infections in cases if key in infections)
        if hits:
            chosen[suite] = hits
    order = sorted(chosen, key=lambda s: chosen[s][0][0])
    return {suite: [case for _, case in chosen[suite]] for suite in order}


def run_mutant(tree, mutant, number, cases, run_binary):
    """(verdict, killer): the covering test cases run until one fails: "killed" with its first
    failed test, else "survived"."""
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
        for suite, names in cases.items():
            failed = run_cases(tree, suite, names, env, run_binary)
            if failed:
                return "killed", f"{suite}: {failed[0]}"
        return "survived", "" if cases else "no test infects it"
    finally:
        if backup is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(backup)


def main(argv, run_binary):
    tree, commit, wanted, rerun = DEFAULT_TREE, None, [], "--rerun" in argv
    args = iter(argv)
    for a in args:
        if a == "--tree":
            tree = next(args)
        elif a == "--at":
            commit = next(args)
        elif a not in ("--list", "--rerun"):
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
    present = {s for s in SUITES if os.path.exists(os.path.join(tree, SUITES[s][1]))}
    chosen = [(m, k) for m, k in zip(mutants, ids) if not wanted or any(w in m.name for w in wanted)]
    needed = sorted({s for m, _ in chosen for s in SUITES_OF[m.path] if s in present})
    print(f"mutate --generated: {len(mutants)} mutants ({len(chosen)} chosen) in {tree} ({changed} files changed); "
          "building", flush=True)
    ok, log = build(tree, needed)
    if not ok:
        print("the instrumented build failed:\n" + log)
        return 2
    python_files = sorted({m.path for m in mutants if m.path.endswith(".py")})
    traces = trace_pass(tree, needed, python_files, run_binary)
    results_path = os.path.join(tree, "results.tsv")
    results = read_results(results_path)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that `finally` puts a Python file back
    for mutant, k in chosen:
        if mutant.name in results and not (rerun and results[mutant.name][0] == "survived"):
            continue
        start = time.time()
        cases = covering_cases(mutant, k, {s: traces[s] for s in SUITES_OF[mutant.path] if s in traces})
        verdict, killer = run_mutant(tree, mutant, k, cases, run_binary)
        count = sum(len(c) for c in cases.values())
        results[mutant.name] = (verdict, killer, time.time() - start, count)
        with open(results_path, "a", encoding="utf-8") as f:
            f.write(f"{mutant.name}\t{verdict}\t{killer}\t{time.time() - start:.0f}\t{count}\n")
        print(f"{mutant.name:40s} {verdict:8s} {killer} ({count} cases, {time.time() - start:.0f} s)", flush=True)
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
        print(f"survived: {m.name}  ({m.what}; {results[m.name][1] or str(results[m.name][3]) + ' test cases infect it'})")
    return 1 if survivors else 0
