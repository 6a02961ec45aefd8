"""Bad input to sweep.py and plot.py: one line naming the problem and exit status 2, checked before
anything is written or started; the warmup that follows --steps; complete help texts; the loss
panel on a log scale. Run by build/test_experiments (make test), after `make train eval`."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas", "matplotlib"), "test_input.py")

import numpy as np  # noqa: E402

import plot  # noqa: E402
import sweep  # noqa: E402
from experiments import cli  # noqa: E402
from experiments.figures import pyplot  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)  # where ./train and ./eval are


def write_shard(path, tokens, vocab, seed):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.random.default_rng(seed).integers(0, vocab, tokens).astype("<u2").tobytes())


class Sweep(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.out = os.path.join(self.dir, "out")
        write_shard(os.path.join(self.dir, "train_000.bin"), 3000, 96, 1)
        write_shard(os.path.join(self.dir, "val_000.bin"), 600, 96, 2)
        self.tiny = ["--init", "l2h2c16v96t16", "--B", "2", "--T", "8", "--train-data", f"{self.dir}/train_*.bin",
                     "--val-data", f"{self.dir}/val_*.bin", "--train-bin", f"{BIN}/train", "--eval-bin", f"{BIN}/eval",
                     "--out", self.out, "--ln", "pre", "--dt", "1", "--lr", "1e-3", "--seeds", "1"]

    def tearDown(self):
        shutil.rmtree(self.dir)

    def sweep(self, *args, tiny=True):
        """(exit status, stdout, stderr) of sweep.py with the tiny model and data, then `args`."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main((self.tiny if tiny else []) + list(args), sweep.__doc__, sweep.__file__)
            except SystemExit as e:  # argparse's own refusals
                status = e.code
        return status, out.getvalue(), err.getvalue()

    def refused(self, says, *args, tiny=True):
        status, out, err = self.sweep(*args, tiny=tiny)
        self.assertEqual(status, 2, out + err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(says, err)
        self.assertFalse(os.path.exists(self.out), f"{args}: {self.out} was written")

    def test_each_bad_input_is_one_line_before_anything_is_written(self):
        for says, args in [
                ("sweep: --lr: 0.002 given twice (each value is one run folder)", ["--lr", "2e-3,2e-3"]),
                ("--lr: 0.002 given twice", ["--lr", "2e-3,0.002"]),
                ("--seeds: 2 given twice", ["--seeds", "1-3,2"]),
                ("--jobs: -1 is out of range (must be ≥ 0)", ["--jobs", "-1"]),
                ("--gpus: -1 is out of range (must be ≥ 0)", ["--gpus", "-1"]),
                ("--ln: cannot read 'foo' (pre, post or peri)", ["--ln", "foo"]),
                ("--dt: 0 is out of range (must be > 0 and ≤ 1000)", ["--dt", "0"]),
                ("--lr: cannot read 'abc' (a number, or ln/Δt=number", ["--lr", "abc"]),
                ("--warmup 30 exceeds --steps 20", ["--steps", "20", "--warmup", "30"]),
                ("--steps: 0 is out of range (must be ≥ 1)", ["--steps", "0"]),
                ("--beta2: 1 is out of range (must be < 1)", ["--beta2", "1"]),
                ("--init l2h3c16v96t16: channels C=16 not divisible by heads NH=3", ["--init", "l2h3c16v96t16"]),
                ("--T 32: longer than the model's maxT = 16", ["--T", "32"]),
                ("--init nothing.bin: neither a model size", ["--init", "nothing.bin"]),
                (f"--train-data {self.dir}/none_*.bin: no file matches", ["--train-data", f"{self.dir}/none_*.bin"]),
                ("token id 95 is not below the model's vocabulary V = 64", ["--init", "l2h2c16v64t16"]),
                ("--depth needs --init of the form", ["--init", "d6", "--depth", "2,4"]),
                ("not found: build it first", ["--train-bin", f"{self.dir}/no_train"]),
                ("--run x: not a run of this grid", ["--run", "x"]),
                ("--lr: cannot read 'mid/1=0.1' (a number, or ln/Δt=number for one configuration)",
                 ["--lr", "mid/1=0.1"]),
                ("--lr: no learning rate for pre/1 (give a number, or pre/1=lr)", ["--lr", "peri/1=0.1"]),
                ("--lr: 0.001 given twice for pre/1", ["--lr", "1e-3,pre/1=0.001"]),
                ("--lr-extend: 2 is out of range (must be < 2)", ["--lr-extend", "2"]),
                ("--docs: only with --claims", ["--docs", self.dir])]:
            with self.subTest(args=args):
                self.refused(says, *args)

    def test_learning_rate_from_a_missing_e1_sweep(self):
        self.refused("--lr-from /nowhere: no sweep.json there (run the e1 preset first)", "--preset", "e3",
                     "--lr-from", "/nowhere", "--out", self.out, tiny=False)
        e1 = os.path.join(self.dir, "e1")
        os.makedirs(e1)
        with open(os.path.join(e1, "sweep.json"), "w") as f:
            f.write("{}")
        self.refused(f"--lr-from {e1}: no results.csv yet", "--preset", "e2", "--lr-from", e1, "--out", self.out,
                     tiny=False)

    def test_claims_of_a_folder_without_experiments(self):
        status, _, err = self.sweep("--claims", "--docs", self.dir, tiny=False)
        self.assertEqual(status, 2)
        self.assertEqual(err, f"sweep: --claims: no {self.dir}/e1_results.csv (publish the experiments first)\n")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "claims.md")))

    def test_out_naming_a_file(self):
        with open(self.out, "w") as f:
            f.write("mine")
        status, _, err = self.sweep()
        self.assertEqual((status, err), (2, f"sweep: --out {self.out}: is a file, not a folder\n"))
        with open(self.out) as f:
            self.assertEqual(f.read(), "mine")

    def test_model_of_another_vocabulary_than_the_data(self):
        # The default data is the bundled corpus with its 4,096-id tokenizer beside it.
        self.refused("--init l2h2c64: the model's vocabulary V = 50257 is not the data's: its tokenizer "
                     f"{REPO}/data/mobydick_v4096_tokenizer.bin has V = 4096", "--init", "l2h2c64", "--out", self.out,
                     "--train-bin", f"{BIN}/train", "--eval-bin", f"{BIN}/eval", tiny=False)

    def test_gpus_the_machine_does_not_have(self):
        fake = os.path.join(self.dir, "bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-0)'\n")
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        path = os.environ["PATH"]
        os.environ["PATH"] = fake + os.pathsep + path
        try:
            self.refused("--gpus 2: this machine has 1 GPU (nvidia-smi -L)", "--gpus", "2")
        finally:
            os.environ["PATH"] = path

    def test_warmup_follows_steps_as_trains_default(self):
        for steps, warmup in ((4, 0), (20, 2), (300, 20)):
            status, out, err = self.sweep("--steps", str(steps), "--dry-run")
            self.assertEqual(status, 0, out + err)
            self.assertIn(f" -warmup {warmup} ", out)
            self.assertFalse(os.path.exists(self.out))
        status, out, _ = self.sweep("--steps", "4", "--warmup", "3", "--dry-run")
        self.assertIn(" -warmup 3 ", out)

    def test_every_setting_is_one_flag_of_train_or_eval(self):
        status, out, err = self.sweep("--steps", "7", "--clip", "0.5", "--sigma", "0.2", "--dry-run")
        self.assertEqual(status, 0, err)
        train, ev = out.splitlines()[1:3]
        for flag in ("-steps 7", "-clip 0.5", "-B 2", "-T 8", "-init l2h2c16v96t16", "-lr 0.001", "-lr_min 0.0001",
                     "-seed 1", "-stats_every 50", "-threads 1", "-resume 1"):
            self.assertEqual(train.count(f" {flag}"), 1, (flag, train))
        for flag in ("-B 8", "-T 8", "-sigma 0.2", "-eval_batches 16", "-directions 4"):
            self.assertEqual(ev.count(f" {flag}"), 1, (flag, ev))
        self.assertNotIn("-tokenizer", ev)  # no tokenizer beside the data: ./eval's own

    def test_grid_union_of_a_rerun(self):
        # A rerun into the same OUT keeps the union of the grids, each value once.
        self.assertEqual(cli.union("seeds", "1-2", "1"), "1,2")
        self.assertEqual(cli.union("lr", "2e-3,1e-2", "0.002,3e-2"), "0.002,0.01,0.03")
        self.assertEqual(cli.union("lr", "pre/1=1e-3,1e-2", "pre/1=0.001,peri/0.1=3e-2"),
                         "pre/1=0.001,0.01,peri/0.1=0.03")
        self.assertEqual(cli.union("ln", None, "pre,peri"), "pre,peri")
        self.assertIsNone(cli.union("depth", None, None))

    def test_help_is_complete(self):
        parser = cli.parser(sweep.__doc__)
        for action in parser._actions:
            self.assertTrue(action.help and action.help != "==SUPPRESS==", action.option_strings)
        text = parser.format_help()
        self.assertIn("the tables are still written.", text)  # the whole description, not its first line
        help_text = io.StringIO()
        with contextlib.redirect_stdout(help_text), self.assertRaises(SystemExit):
            plot.main(["-h"])
        self.assertIn("restarts under\n/usr/bin/python3.", help_text.getvalue())

    def test_missing_packages_are_named(self):
        # Without site-packages (-S) this interpreter has no numpy, and the restart is marked done.
        env = dict(os.environ, GPT2_LN_SYSTEM_PYTHON="1")
        for tool in ("sweep.py", "plot.py"):
            p = subprocess.run([sys.executable, "-S", os.path.join(REPO, tool), "--help"], capture_output=True,
                               text=True, env=env)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertIn(f"{tool}: needs numpy", p.stderr)
            self.assertIn("(Debian: apt-get install python3-numpy", p.stderr)


class Plot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.run = os.path.join(self.dir, "run")
        os.makedirs(self.run)
        with open(os.path.join(self.run, "log.jsonl"), "w") as f:
            for step in range(30):
                f.write(json.dumps(dict(step=step, loss=5.0 - 0.01 * step, lr=1e-3, grad_norm=1.0)) + "\n")
        self.diverged = os.path.join(self.dir, "diverged")
        os.makedirs(self.diverged)
        with open(os.path.join(self.diverged, "log.jsonl"), "w") as f:
            for step in range(30):
                f.write(json.dumps(dict(step=step, loss=5.0 if step < 20 else 2000.0, grad_norm=1.0)) + "\n")
            f.write(json.dumps(dict(step=29, event="diverged", outcome="diverged")) + "\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def refused(self, says, *args):
        with self.assertRaises(plot.PlotError) as caught:
            plot.main(list(args))
        self.assertIn(says, str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))

    def test_bad_input(self):
        bad = os.path.join(self.dir, "bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "log.jsonl"), "wb") as f:
            f.write(np.random.default_rng(1).integers(0, 256, 3000).astype(np.uint8).tobytes().replace(b"\n", b"x")
                    + b"\n" + b'{"step": 1, "loss": 2}\n')
        self.refused(f"{bad}/log.jsonl: line 1 is not a log record", bad)
        with open(os.path.join(bad, "log.jsonl"), "w"):
            pass
        self.refused(f"{bad}/log.jsonl: no step records (has the run started?)", bad)
        self.refused(f"{self.dir}/nothing: no log.jsonl", os.path.join(self.dir, "nothing"))
        log = os.path.join(self.run, "log.jsonl")
        self.refused("not an image name (it must end in .png, .pdf, .svg)", self.run, "--out", log)
        self.refused(f"--out {self.dir}: is a folder", self.run, "--out", self.dir)
        self.refused("--step -5: must be ≥ 0", self.run, "--step", "-5")
        self.refused("--step 3: none of the runs has stats records", self.run, "--step", "3")
        self.assertEqual(sorted(os.listdir(self.dir)), ["bad", "diverged", "run"])  # no stray file
        with open(log) as f:
            self.assertEqual(len(f.readlines()), 30)

    def test_a_diverged_run_does_not_flatten_the_others(self):
        runs = [plot.read_run(self.run), plot.read_run(self.diverged)]
        fig = plot.figure(pyplot(), runs, None)
        loss = fig.axes[0]
        self.assertEqual(loss.get_yscale(), "log")
        low, high = loss.get_ylim()
        self.assertGreater(high, 2000)
        self.assertLess(low, 4.8)
        out = os.path.join(self.dir, "cmp.png")
        self.assertEqual(plot.main([self.run, self.diverged, "--out", out]), 0)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
