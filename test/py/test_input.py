"""Bad input to sweep.py, plot.py and prepare_data.py: one line naming the problem and exit status
2, checked before anything is written or started; no output that replaces an input or a ./train
run folder's file, whatever its name; a failed write in one line with exit status 4; the warmup
that follows --steps; complete help texts; the loss panel on a log scale, symlog where a value is
≤ 0. Run by build/test_experiments (make test), after `make train eval`."""
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
import prepare_data  # noqa: E402
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
                ("--ln: foo is not a value of train -ln (it takes pre|post|peri)", ["--ln", "foo"]),
                ("--dt: 0 is not a value of train -dt (it takes X in (0, 1000])", ["--dt", "0"]),
                ("--lr: cannot read 'abc' (a number, or ln/Δt=number", ["--lr", "abc"]),
                ("--warmup 30 exceeds --steps 20", ["--steps", "20", "--warmup", "30"]),
                ("--steps: 0 is not a value of train -steps (it takes N in [1, 2^30])", ["--steps", "0"]),
                ("--beta2: 1 is not a value of train -beta2 (it takes X in [0, 1))", ["--beta2", "1"]),
                ("--init l2h3c16v96t16: channels C=16 not divisible by heads NH=3", ["--init", "l2h3c16v96t16"]),
                ("--T 32: longer than the model's maxT = 16", ["--T", "32"]),
                ("--init nothing.bin: neither a model size", ["--init", "nothing.bin"]),
                (f"--train-data {self.dir}/none_*.bin: no file matches", ["--train-data", f"{self.dir}/none_*.bin"]),
                ("token id 95 is not below the model's vocabulary V = 64", ["--init", "l2h2c16v64t16"]),
                ("--depth needs --init of the form", ["--init", "d6", "--depth", "2,4"]),
                ("not found: build it first", ["--train-bin", f"{self.dir}/no_train"]),
                ("--run x: not a run of this grid", ["--run", "x"]),
                ("--lr: mid is not a value of train -ln (it takes pre|post|peri)", ["--lr", "mid/1=0.1"]),
                ("--precision: fp16 is not a value of train -precision (it takes bf16|fp32)", ["--precision", "fp16"]),
                ("--device: gpu is not a value of train -device (it takes auto|cpu|cuda)", ["--device", "gpu"]),
                ("--lr: no learning rate for pre/1 (give a number, or pre/1=lr)", ["--lr", "peri/1=0.1"]),
                ("--lr: 0.001 given twice for pre/1", ["--lr", "1e-3,pre/1=0.001"]),
                ("--lr-extend: 2 is out of range (must be < 2)", ["--lr-extend", "2"]),
                ("--docs: only with --claims", ["--docs", self.dir]),
                ("--lr: nan is not a finite number", ["--lr", "nan"]),
                ("--lr: inf is not a finite number", ["--lr", "1e-3,inf"]),
                ("--lr: nan is not a finite number", ["--lr", "pre/1=nan"]),
                ("--dt: nan is not a finite number", ["--dt", "nan"]),
                ("--dt: inf is not a finite number", ["--dt", "inf"]),
                ("--wd: nan is not a finite number", ["--wd", "nan"]),
                ("--clip: nan is not a finite number", ["--clip", "nan"]),
                ("--clip: inf is not a finite number", ["--clip", "inf"]),
                ("--lr-min-ratio: nan is not a finite number", ["--lr-min-ratio", "nan"])]:
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
        self.assertEqual((status, err), (2, f"sweep: --out {self.out}: is a regular file, not a folder\n"))
        with open(self.out) as f:
            self.assertEqual(f.read(), "mine")

    def test_no_output_replaces_an_input_or_a_run_file(self):
        shard = os.path.join(self.dir, "train_000.bin")
        with open(shard, "rb") as f:
            data = f.read()
        run = os.path.join(self.dir, "run")  # a ./train run folder
        os.makedirs(run)
        with open(os.path.join(run, "config.json"), "w") as f:
            f.write("{}")
        link = os.path.join(self.dir, "link.sbatch")
        os.symlink(shard, link)
        mine = os.path.join(self.dir, "notes.sh")
        with open(mine, "w") as f:
            f.write("mine\n")
        os.symlink(shard, os.path.join(self.dir, "pub_results.csv"))
        for says, args in [(f"--slurm {shard}: is the input {shard}", ["--slurm", shard]),
                           (f"--slurm {link}: is the input {shard}", ["--slurm", link]),
                           (f"--slurm {mine}: exists and is not a script sweep.py wrote", ["--slurm", mine]),
                           (f"--slurm {run}/config.json: is a file of the ./train run folder", ["--slurm",
                                                                                                 f"{run}/config.json"]),
                           (f"--publish {self.dir}/pub_results.csv: is the input {shard}",
                            ["--publish", os.path.join(self.dir, "pub")]),
                           (f"--train-bin {BIN}/train", ["--slurm", f"{BIN}/train"])]:
            with self.subTest(args=args):
                status, out, err = self.sweep(*args)
                if args[-1] == f"{BIN}/train":
                    self.assertIn(f"--slurm {BIN}/train: is the input {BIN}/train", err)
                else:
                    self.assertIn(says, err)
                self.assertEqual((status, err.count("\n")), (2, 1), err)
                self.assertFalse(os.path.exists(self.out))
        status, _, err = self.sweep("--out", run)
        self.assertEqual((status, err), (2, f"sweep: --out {run}: is a ./train run folder (it holds config.json or "
                                            "log.jsonl); give the sweep a folder of its own\n"))
        self.assertEqual(sorted(os.listdir(run)), ["config.json"])
        with open(shard, "rb") as f:
            self.assertEqual(f.read(), data)
        with open(mine) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_an_input_among_the_sweeps_run_folders(self):
        folder = os.path.join(self.out, "runs", "pre_dt1_wd0.1_lr0.001_s1")
        os.makedirs(folder)
        model = os.path.join(folder, "model_00000010.bin")
        shutil.copyfile(os.path.join(REPO, "data", "mobydick_v4096_train_000000.bin"), model)  # any file
        status, _, err = self.sweep("--init", model)
        self.assertEqual(status, 2, err)
        self.assertIn(f"{model}: an input inside {self.out}/runs, where the sweep writes and removes files", err)

    def test_a_folder_that_takes_no_file(self):
        # /sys/kernel refuses new files even to root (where chmod would not).
        for flag, path, says in [("--out", "/sys/kernel/sweep", "--out /sys/kernel/sweep: cannot create files there"),
                                 ("--out", os.path.join(self.dir, "x" * 300), "File name too long"),
                                 ("--out", os.path.join(self.dir, "train_000.bin", "out"), "Not a directory"),
                                 ("--publish", "/sys/kernel/e9", "--publish /sys/kernel: cannot create files there")]:
            with self.subTest(path=path):
                status, _, err = self.sweep("--dry-run", flag, path)
                self.assertEqual((status, err.count("\n")), (2, 1), err)
                self.assertIn(says, err)
        self.assertEqual(sorted(os.listdir(self.dir)), ["train_000.bin", "val_000.bin"])

    def test_a_write_that_fails_is_one_line_with_status_4(self):
        # Published tables rewritten under a file-size limit of 1 KB (results.md is larger): the
        # error is one line, exit status 4, no traceback, and what was there stays as it was.
        prefix = os.path.join(self.dir, "e3")
        for name in ("results.csv", "layers.csv", "init_layers.csv", "sweep.json"):
            shutil.copyfile(os.path.join(REPO, "docs", f"e3_{name}"), f"{prefix}_{name}")
        before = sorted(os.listdir(self.dir))
        p = limited_run([os.path.join(REPO, "sweep.py"), "--report", prefix, "--preset", "e3", "--no-figures"], 1024)
        self.assertEqual(p.returncode, 4, p.stdout + p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertRegex(p.stderr, rf"^sweep: {prefix}_results\.md: File too large\n$")
        self.assertEqual(sorted(os.listdir(self.dir)), before)

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


def limited_run(cmd, max_bytes):
    """Runs `python3 cmd` with files limited to `max_bytes` (a write beyond fails with EFBIG, as
    on a full disk; Python ignores SIGXFSZ)."""
    import resource
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return subprocess.run([sys.executable] + cmd, capture_output=True, text=True, preexec_fn=limit)


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

    def test_no_output_replaces_a_run_file(self):
        log = os.path.join(self.run, "log.jsonl")
        with open(log) as f:
            text = f.read()
        link = os.path.join(self.dir, "cmp.png")
        os.symlink(log, link)
        self.refused(f"--out {link}: is a file of the ./train run folder {self.run}", self.run, "--out", link)
        hard = os.path.join(self.dir, "hard.png")
        os.link(log, hard)
        self.refused(f"--out {hard}: is the input {log}", self.run, "--out", hard)
        self.refused("--out /sys/kernel: cannot create files there", self.run, "--out", "/sys/kernel/cmp.png")
        with open(log) as f:
            self.assertEqual(f.read(), text)

    def test_a_write_that_fails_is_one_line_with_status_4(self):
        out = os.path.join(self.dir, "cmp.png")
        p = limited_run([os.path.join(REPO, "plot.py"), self.run, "--out", out], 2048)
        self.assertEqual(p.returncode, 4, p.stdout + p.stderr)
        self.assertRegex(p.stderr, rf"^plot.py: {out}: File too large\n$")
        self.assertEqual(sorted(os.listdir(self.dir)), ["diverged", "run"])  # no image, no temporary file

    def test_values_below_zero_are_drawn_on_a_symlog_axis(self):
        # A Pre-LN block's largest attention logit can be negative: every block is drawn.
        with open(os.path.join(self.run, "log.jsonl"), "a") as f:
            f.write(json.dumps(dict(step=29, event="stats", mean_abs=[1.0, 2.0, 3.0], data_var=[1.0, 1.0, 1.0],
                                    grad_norm=[0.5, 0.4, 0.3], entry_var=[1.0, 2.0, 4.0], attn_logit_max=[-0.7, 3.0],
                                    logit_max=2.0, log_z_mean=4.0)) + "\n")
        fig = plot.figure(pyplot(), [plot.read_run(self.run)], None)
        by_title = {ax.get_title(): ax for ax in fig.axes}
        attention = by_title["largest attention logit of block i"]
        self.assertEqual(attention.get_yscale(), "symlog")
        self.assertEqual(list(attention.get_lines()[0].get_xdata()), [1, 2])
        self.assertEqual(list(attention.get_lines()[0].get_ydata()), [-0.7, 3.0])
        self.assertEqual(attention.get_xlabel(), "block i")
        self.assertIn("values ≤ 0 drawn", attention.get_ylabel())
        stream = by_title["mean |X_i|"]
        self.assertEqual((stream.get_yscale(), stream.get_xlabel()), ("log", "layer i (0 = embedding output, i = "
                                                                              "output of block i)"))
        self.assertEqual(by_title["largest logit: attention (any block, —) and output (--)"].get_yscale(), "log")

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


class PrepareData(unittest.TestCase):
    """prepare_data.py's refusals up front, and an output that is a link: its target replaced whole."""
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.text = os.path.join(self.dir, "story.txt")
        with open(self.text, "w") as f:
            f.write("Call me Ishmael. Some years ago, never mind how long precisely, I went to sea. " * 20)
        self.out = os.path.join(self.dir, "out")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def prepare(self, *args):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                status = prepare_data.main([self.text, "--workers", "1", "--out", self.out] + list(args))
            except SystemExit as e:
                status = e.code
        return status, err.getvalue()

    def test_a_name_too_long_is_refused_up_front(self):
        status, err = self.prepare("--name", "n" * 300)
        self.assertEqual(status, 2)
        self.assertEqual(err, "prepare_data.py: --name: 300 characters are too long for the file names made of it "
                              "(at most 224: a file name has at most 255 bytes)\n")
        self.assertEqual(self.prepare("--name", "n" * 224)[0], 0)
        self.assertEqual(self.prepare("--name", "n" * 225)[0], 2)
        self.assertEqual(sorted(os.listdir(self.out)), ["n" * 224 + "_train_000000.bin", "n" * 224 + "_val_000000.bin"])

    def test_tiktoken_asked_for_and_missing(self):
        sys.modules["tiktoken"] = None  # import tiktoken now fails, installed or not
        try:
            for source, says in (("openwebtext", "prepare_data.py: --bpe tiktoken needs the Python package `tiktoken` "
                                                 "(pip install tiktoken)\n"),
                                 (self.text, "prepare_data.py: --bpe tiktoken: only the openwebtext source encodes "
                                             "with tiktoken; the others use the built-in BPE (leave --bpe out)\n")):
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    status = prepare_data.main([source, "--bpe", "tiktoken", "--out", self.out])
                self.assertEqual((status, err.getvalue()), (2, says))
        finally:
            del sys.modules["tiktoken"]
        self.assertFalse(os.path.exists(self.out))

    def test_an_output_name_that_is_a_link_has_its_target_replaced_whole(self):
        # docs/cli.md §6: the link is followed, its target replaced by a new file (never opened
        # and written in place), the link kept.
        keep = os.path.join(self.dir, "keep.bin")
        with open(keep, "w") as f:
            f.write("mine")
        before = os.stat(keep).st_ino
        os.makedirs(self.out)
        os.symlink(keep, os.path.join(self.out, "story_val_000000.bin"))
        self.assertEqual(self.prepare("--overwrite")[0], 0)
        self.assertTrue(os.path.islink(os.path.join(self.out, "story_val_000000.bin")))
        with open(keep, "rb") as f:
            self.assertEqual(f.read(4), (20240520).to_bytes(4, "little"))  # a token shard now
        self.assertNotEqual(os.stat(keep).st_ino, before, "a new file, not the old one written through")
        self.assertEqual(sorted(os.listdir(self.out)), ["story_train_000000.bin", "story_val_000000.bin"])


if __name__ == "__main__":
    unittest.main()
