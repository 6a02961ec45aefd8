"""The runner: each run is `./train ... -out OUT/runs/NAME -resume 1`, then `./eval -model FINAL
-json OUT/runs/NAME/eval.json`, as subprocesses, several at once (threads of this process),
on GPUs of their own with --gpus N, or as the tasks of a Slurm job array (--slurm FILE).

A run is recorded when OUT/runs/NAME/result.json exists: its outcome (docs/train.md §8)
and timings. An interrupted run continues from its last checkpoint; a run that finished
training but not its evaluation is only evaluated."""
import contextlib
import json
import math
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time

from .collect import FINISHED
from .files import copy_whole, identity, write_text
from .grid import init_for
from .results import log_records, read_json, ResultsError
from .settings import SETTINGS, ZERO_MEANS_DEFAULT

# How a Slurm script written by sweep.py begins (a --slurm FILE that exists must begin so).
SLURM_HEAD = "#!/bin/bash\n# Written by sweep.py"


def flags(values, program):
    """The flags of `program` ("train" or "eval") for the settings `values`, as the settings
    table names them (the grid's axes are passed per run)."""
    out = []
    for setting in SETTINGS:
        flag, value = getattr(setting, program), values[setting.name]
        if (flag is None or setting.kind == "list" or value is None or
                (value == 0 and setting.name in ZERO_MEANS_DEFAULT)):
            continue
        out += [flag, repr(value) if isinstance(value, float) else str(value)]
    return out


def train_command(s, run):
    """./train for one run: its grid values, then every shared setting (-init with the run's depth)."""
    return ([s.train_bin, "-ln", run.ln, "-dt", repr(run.dt), "-wd", repr(run.wd), "-lr", repr(run.lr),
             "-lr_min", repr(run.lr * s.lr_min_ratio), "-seed", str(run.seed)] +
            (["-precision", run.precision] if run.precision else []) +
            flags(dict(vars(s), init=init_for(s.init, run.depth)), "train") + ["-out", run.dir, "-resume", "1"])


def eval_command(s, run, model=None, out=None, eval_batches=None):
    """./eval of a run's final model into its eval.json, or of `model` into `out` (with
    `eval_batches` instead of the sweep's: the intervention reads the diagnostics only)."""
    values = dict(vars(s), eval_batches=eval_batches or s.eval_batches)
    return ([s.eval_bin, "-model", model or final_model(s, run)] +
            (["-precision", run.precision] if run.precision else []) + flags(values, "eval") +
            ["-json", out or os.path.join(run.dir, "eval.json")])


def final_model(s, run):
    return os.path.join(run.dir, f"model_{s.steps:08d}.bin")


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=1) + "\n")


def refusal(log_path):
    """./train's one-line refusal ("train: ...") in a run's train.log, or "" when there is none."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.startswith("train: ")]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def finished_outcome(ev, log):
    """The result fields of a run that trained to the end, from its eval.json and log records."""
    loss, unigram = ev.get("val_loss"), ev.get("unigram_ce")
    spikes = next((r.get("spikes") for r in reversed(log) if r.get("event") == "outcome"), None)
    if loss is None or not math.isfinite(loss):
        return dict(outcome="nonfinite", stopped_step=None, reason="final validation loss is not finite", spikes=spikes)
    collapsed = unigram is not None and loss >= unigram
    return dict(outcome="collapsed" if collapsed else "ok", val_loss=loss, unigram_ce=unigram, spikes=spikes,
                reason=f"val loss {loss:.4g} ≥ unigram_ce {unigram:.4g}" if collapsed else None)


def run_log(run):
    try:
        return log_records(os.path.join(run.dir, "log.jsonl"))
    except ResultsError:
        return []


class Stopped(Exception):
    """A sweep stopped by SIGINT or SIGTERM (args[0], the signal's number)."""


class Signals:
    """SIGINT and SIGTERM while a sweep runs, as ./train takes them (docs/train.md
    §7). The programs run in sessions of their own, so that a signal reaches each of
    them once, from here: the first signal is passed on to every running ./train and ./eval
    (./train saves a checkpoint after its step and exits), no program starts after it, and
    Stopped is raised in the main thread; a second signal is passed on too (./train then quits
    at once, its last checkpoint kept) and ends this process at once."""
    def __init__(self):
        self.received = None
        self.lock = threading.RLock()  # re-entered by the handler when the signal lands inside run()
        self.children = set()

    @contextlib.contextmanager
    def forwarding(self):
        """Takes SIGINT and SIGTERM (handle) inside the `with` block, as before after it."""
        before = {number: signal.signal(number, self.handle) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for child in list(self.children):  # a program the signal left running saves its checkpoint first
                child.wait()
            for number, handler in before.items():
                signal.signal(number, handler)

    def run(self, cmd, **popen):
        """subprocess.run of cmd in a session of its own: (its exit status, the CPU seconds it used,
        user and system), or (None, 0.0) (not started) when a signal came first."""
        with self.lock:
            if self.received is not None:
                return None, 0.0
            child = subprocess.Popen(cmd, start_new_session=True, **popen)
            self.children.add(child)
        # os.wait4 reaps the child with its resource usage (when a signal interrupts this wait, the
        # child stays listed: forwarding waits for it).
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        with self.lock:
            self.children.discard(child)
        return child.returncode, round(usage.ru_utime + usage.ru_stime, 1)

    def handle(self, signum, frame):
        with self.lock:
            first = self.received is None
            self.received = signum
            for child in self.children:
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass
        if not first:
            print(f"sweep: second {signal.Signals(signum).name}: the runs in progress stopped at once (each "
                  "continues from its last checkpoint); run the same command again to continue",
                  file=sys.stderr, flush=True)
            os._exit(128 + signum)
        raise Stopped(signum)


class Sweep:
    """Runs the runs of a grid; `refused` holds ./train's message when it refused its input (exit
    2: every run would be refused alike, so the sweep stops). `signals` runs the programs."""
    def __init__(self, s, signals):
        self.s = s
        self.signals = signals
        self.lock = threading.Lock()
        self.refused = None
        self.done = 0
        self.free_gpus = queue.Queue()  # with --gpus N: the GPU numbers no run is using
        for gpu in range(s.gpus):
            self.free_gpus.put(gpu)

    def say(self, text):
        with self.lock:
            try:
                print(text, flush=True)
            except OSError:  # a closed standard output (| head): the runs and their files go on
                pass

    def execute(self, cmd, log_path, gpu=None):
        """Runs cmd with its output in log_path; on GPU number `gpu` alone when given. Returns (its
        exit status, its CPU seconds), or (None, 0.0) when the sweep is stopping (a signal) and it was
        not started."""
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)) if gpu is not None else None
        with open(log_path, "a", encoding="utf-8") as log:
            log.write("$ " + ("" if gpu is None else f"CUDA_VISIBLE_DEVICES={gpu} ") + " ".join(cmd) + "\n")
            log.flush()
            try:
                return self.signals.run(cmd, cwd=self.s.repo, stdout=log, stderr=subprocess.STDOUT, env=env)
            except OSError as e:
                log.write(f"cannot run {cmd[0]}: {e}\n")
                return 127, 0.0

    def clean(self, run, keep_final):
        """Drops what a recorded run no longer needs: the intermediate checkpoint pairs (and the
        final pair too for a run that stopped early). A finished run keeps its final pair, the
        model and its optimiser state, which `./eval -run` needs."""
        final = os.path.basename(final_model(self.s, run))
        final_pair = (final, "state_" + final[len("model_"):])
        for name in os.listdir(run.dir):
            if name.startswith(("state_", "model_")) and not (keep_final and name in final_pair):
                os.remove(os.path.join(run.dir, name))

    def run_one(self, run, total):
        """Trains and evaluates one run unless it is recorded (on a GPU of its own with --gpus);
        returns its result dict (None when it failed)."""
        if not self.s.gpus:
            return self.train_and_evaluate(run, total, None)
        gpu = self.free_gpus.get()
        try:
            return self.train_and_evaluate(run, total, gpu)
        finally:
            self.free_gpus.put(gpu)

    def run_safely(self, run, total):
        try:
            return self.run_one(run, total)
        except Exception as e:  # one broken run must not stop the others
            return self.failed(run, f"{type(e).__name__}: {e}", "train.log")

    def train_and_evaluate(self, run, total, gpu):
        s = self.s
        result_path = os.path.join(run.dir, "result.json")
        result = read_json(result_path)
        if result is not None or self.refused or self.signals.received is not None:
            return result
        os.makedirs(run.dir, exist_ok=True)
        start = time.time()
        eval_json = os.path.join(run.dir, "eval.json")
        result = dict(name=run.name, ln=run.ln, dt=run.dt, wd=run.wd, lr=run.lr, depth=run.depth,
                      precision=run.precision, seed=run.seed)
        if not os.path.exists(final_model(s, run)):
            status, result["train_cpu_seconds"] = self.execute(train_command(s, run), os.path.join(run.dir, "train.log"),
                                                               gpu)
            if self.signals.received is not None:
                return None  # stopped by a signal: it continues from its checkpoint next time
            if status == 3:
                event = next((r for r in reversed(run_log(run)) if r.get("event") == "diverged"), {})
                result.update(outcome=event.get("outcome", "diverged"), stopped_step=event.get("step"),
                              reason=event.get("reason", "./train exited with status 3"), spikes=event.get("spikes"))
            elif status == 2:
                self.refused = refusal(os.path.join(run.dir, "train.log")) or "see " + os.path.join(run.dir, "train.log")
                return None
            elif status != 0 or not os.path.exists(final_model(s, run)):
                return self.failed(run, f"./train exited with status {status}", "train.log")
        result["train_seconds"] = round(time.time() - start, 1)
        if "outcome" not in result:
            if read_json(eval_json) is None:
                t0 = time.time()
                status, result["eval_cpu_seconds"] = self.execute(eval_command(s, run),
                                                                  os.path.join(run.dir, "eval.log"), gpu)
                if self.signals.received is not None:
                    return None
                if status != 0 or read_json(eval_json) is None:
                    return self.failed(run, f"./eval exited with status {status}", "eval.log")
                result["eval_seconds"] = round(time.time() - t0, 1)
            result.update(finished_outcome(read_json(eval_json), run_log(run)))
        write_json(result_path, result)
        self.clean(run, keep_final=result["outcome"] in FINISHED)
        with self.lock:
            self.done += 1
            done = self.done
        what = (f"{result['outcome']} at step {result['stopped_step']}: {result['reason']}"
                if result["outcome"] not in FINISHED else
                f"{result['outcome']}, val loss {result['val_loss']:.4f} (unigram_ce " +
                (f"{result['unigram_ce']:.4f})" if result.get("unigram_ce") is not None else "not computed)"))
        self.say(f"[{done}/{total}] {run.name}: {what} ({time.time() - start:.0f} s)")
        return result

    def failed(self, run, why, log_name):
        self.say(f"FAILED {run.name}: {why}; see {os.path.join(run.dir, log_name)} (it will be retried next time)")
        return None


def use_private_binaries(s):
    """Runs copies of ./train and ./eval in OUT/bin, so that rebuilding them during a sweep
    disturbs nothing."""
    bin_dir = os.path.join(s.out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for attr, name in (("train_bin", "train"), ("eval_bin", "eval")):
        copy = os.path.join(bin_dir, name)
        if identity(copy) != identity(getattr(s, attr)):  # (a Slurm task's command names the copy itself)
            copy_whole(getattr(s, attr), copy, mode=0o777)
        setattr(s, attr, copy)


def write_slurm_script(s, runs, argv, script):
    """Writes s.slurm: an sbatch job array, task i runs runs[i] through `sweep.py ARGV --run NAME`
    (from this directory, with the copies of the binaries in OUT/bin) unless it is recorded."""
    drop = {"--slurm": 1, "--gpus": 1, "--jobs": 1, "--dry-run": 0}
    args, i = [], 0
    while i < len(argv):
        name = argv[i].split("=")[0]
        if name in drop:
            i += 1 + (drop[name] if "=" not in argv[i] else 0)
            continue
        args.append(argv[i])
        i += 1
    args += ["--out", s.out, "--train-bin", s.train_bin, "--eval-bin", s.eval_bin]
    logs = os.path.join(s.out, "slurm")
    os.makedirs(logs, exist_ok=True)
    resources = "#SBATCH --gpus-per-task=1" if s.device == "cuda" else f"#SBATCH --cpus-per-task={s.threads or 1}"
    names = " ".join(shlex.quote(r.name) for r in runs)
    text = f"""{SLURM_HEAD}: one array task per run of the sweep in {s.out}.
# Submit with `sbatch {os.path.basename(s.slurm)}`; a task whose run is recorded does nothing, so
# the same script may be submitted again. When all are done: python3 sweep.py --report {shlex.quote(s.out)}
#SBATCH --job-name=sweep
#SBATCH --array=0-{len(runs) - 1}
#SBATCH --ntasks=1
{resources}
#SBATCH --output={logs}/%A_%a.log
set -euo pipefail
RUNS=({names})
RUN=${{RUNS[$SLURM_ARRAY_TASK_ID]}}
if [ -e {shlex.quote(os.path.join(s.out, "runs"))}/"$RUN"/result.json ]; then
  echo "$RUN: recorded, skipped"
  exit 0
fi
cd {shlex.quote(os.getcwd())}
exec {shlex.quote(sys.executable)} {shlex.quote(script)} {shlex.join(args)} --run "$RUN"
"""
    write_text(s.slurm, text, mode=0o777)
    todo = sum(1 for r in runs if read_json(os.path.join(r.dir, "result.json")) is None)
    print(f"sweep: wrote {s.slurm}: {len(runs)} array tasks ({len(runs) - todo} recorded, {todo} to do); "
          f"submit it with: sbatch {s.slurm}", flush=True)
