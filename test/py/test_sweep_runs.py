"""sweep.py's runs as real processes: SIGTERM and SIGINT reach the running ./train programs, which
save a checkpoint; the sweep exits 143 or 130 with one line, and the same command then finishes it
with the results of an uninterrupted sweep. A finished run keeps what `./eval -run` needs and
records the data's tokenizer. Run by build/test_experiments (make test), after `make train eval`."""
import csv
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_sweep_runs.py")

import numpy as np  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)  # where ./train and ./eval are
VOCAB = 256  # a tokenizer holds at least the 256 bytes
STEPS = 1500
# What differs between two runs of the same sweep: the time they took.
TIMINGS = ("ms", "tok_s", "elapsed", "train_seconds", "eval_seconds", "seconds", "train_cpu_seconds", "eval_cpu_seconds")


def write_shard(path, tokens, seed):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.random.default_rng(seed).integers(0, VOCAB, tokens).astype("<u2").tobytes())


def write_tokenizer(path):
    """A decode-only tokenizer of VOCAB tokens, token i the byte i (tokenizer.h's format, version 2, no merges)."""
    header = [0] * 256
    header[:5] = (20240328, 2, VOCAB, VOCAB - 1, 0)
    with open(path, "wb") as f:
        f.write(struct.pack("<256I", *header) + b"".join(bytes([1, i]) for i in range(VOCAB)))


def step_records(run_dir):
    """The step records of a run's log.jsonl, without their timings."""
    with open(os.path.join(run_dir, "log.jsonl")) as f:
        records = [json.loads(line) for line in f if line.endswith("\n")]  # (not a line being written)
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records if "loss" in r]


def results_table(out):
    """OUT/results.csv without its timings."""
    with open(os.path.join(out, "results.csv"), newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMINGS} for row in csv.DictReader(f)]


class Runs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        write_shard(os.path.join(cls.dir, "train_000.bin"), 3000, 1)
        write_shard(os.path.join(cls.dir, "val_000.bin"), 600, 2)
        cls.tokenizer = os.path.join(cls.dir, "tokens.bin")
        write_tokenizer(cls.tokenizer)
        cls.args = ["--init", f"l2h2c16v{VOCAB}t16", "--B", "2", "--T", "8", "--train-data", f"{cls.dir}/train_*.bin",
                    "--val-data", f"{cls.dir}/val_*.bin", "--tokenizer", cls.tokenizer, "--train-bin", f"{BIN}/train",
                    "--eval-bin", f"{BIN}/eval", "--ln", "pre", "--dt", "1", "--lr", "1e-3", "--seeds", "1-2",
                    "--steps", str(STEPS), "--save-every", "0", "--eval-every", "0", "--eval-batches", "4",
                    "--eval-B", "2", "--stats-every", "0", "--jobs", "2", "--no-figures"]
        cls.reference = os.path.join(cls.dir, "reference")
        status, out, err = cls.sweep(cls.reference).wait_output()
        assert status == 0, out + err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    @classmethod
    def sweep(cls, out):
        return Process([sys.executable, os.path.join(REPO, "sweep.py")] + cls.args + ["--out", out])

    def run_dirs(self, out):
        runs = os.path.join(out, "runs")
        return sorted(os.path.join(runs, name) for name in os.listdir(runs))

    def test_a_signal_stops_the_runs_with_a_checkpoint_and_the_rerun_finishes_alike(self):
        for number, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
            with self.subTest(signal=number.name):
                out = os.path.join(self.dir, number.name)
                sweep = self.sweep(out)
                self.wait_for_steps(sweep, out, 2)
                sweep.process.send_signal(number)
                code, text, err = sweep.wait_output()
                self.assertEqual(code, status, text + err)
                self.assertEqual(err, f"sweep: stopped by {number.name}: the runs in progress saved a checkpoint; run "
                                      "the same command again to continue\n")
                for run in self.run_dirs(out):
                    self.assertFalse(os.path.exists(os.path.join(run, "result.json")))
                    # With -save_every 0 the only checkpoint before the last step is the one the signal made.
                    states = [n for n in os.listdir(run) if n.startswith("state_")]
                    self.assertEqual(len(states), 1, os.listdir(run))
                    self.assertLess(int(states[0][6:14]), STEPS)
                    with open(os.path.join(run, "train.log")) as f:
                        self.assertIn(f"stopped by {number.name}", f.read())
                if number == signal.SIGINT:
                    continue  # (the rest is SIGTERM's, alike)
                code, text, err = self.sweep(out).wait_output()  # the runs' folders are free again
                self.assertEqual(code, 0, text + err)
                self.assertEqual(results_table(out), results_table(self.reference))
                for run, reference in zip(self.run_dirs(out), self.run_dirs(self.reference)):
                    self.assertEqual(step_records(run), step_records(reference))

    def test_a_slurm_task_stops_after_its_run_saved_a_checkpoint(self):
        # --run NAME runs ./train in the main thread: the sweep waits for it to save its pair.
        out = os.path.join(self.dir, "task")
        name = os.path.basename(self.run_dirs(self.reference)[0])
        task = Process([sys.executable, os.path.join(REPO, "sweep.py")] + self.args + ["--out", out, "--run", name])
        self.wait_for_steps(task, out, 2, runs=1)
        task.process.send_signal(signal.SIGTERM)
        code, text, err = task.wait_output()
        self.assertEqual((code, err.count("\n")), (143, 1), text + err)
        states = [n for n in os.listdir(os.path.join(out, "runs", name)) if n.startswith("state_")]
        self.assertEqual(len(states), 1)

    def test_eval_run_of_a_sweep_run(self):
        for run in self.run_dirs(self.reference):
            with open(os.path.join(run, "config.json")) as f:
                self.assertEqual(json.load(f)["tokenizer"], self.tokenizer)
            self.assertTrue(os.path.isfile(os.path.join(run, f"state_{STEPS:08d}.bin")))
            json_out = os.path.join(self.dir, "eval_run.json")
            p = subprocess.run([f"{BIN}/eval", "-run", run, "-B", "2", "-T", "8", "-eval_batches", "4", "-json", json_out],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertNotIn("warning", p.stdout + p.stderr)  # the tokenizer is the model's
            with open(json_out) as f, open(os.path.join(run, "eval.json")) as g:
                self.assertEqual(json.load(f)["val_loss"], json.load(g)["val_loss"])

    def wait_for_steps(self, sweep, out, count, runs=2, timeout=60):
        """Waits until the `runs` runs of `sweep` (a Process) in `out` have logged `count` steps each."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if sweep.process.poll() is not None:
                self.fail("the sweep ended before its runs started: " + "".join(sweep.wait_output()[1:]))
            try:
                logged = [len(step_records(run)) for run in self.run_dirs(out)]
            except OSError:  # not started yet
                logged = []
            if len(logged) == runs and min(logged) >= count:
                return
            time.sleep(0.01)
        self.fail(f"the runs in {out} did not start")


class Process:
    """A command started now, its output collected."""
    def __init__(self, cmd):
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_output(self, timeout=120):
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err


if __name__ == "__main__":
    unittest.main()
