"""prepare_data.py, sweep.py and plot.py given paths that are not plain files (docs/cli.md §6),
with the answers of ./train, ./eval and ./tokenize (test/test_file_kinds.cpp): an output on
/dev/stdout (read back through a pipe) or a FIFO with a reader is written through; a link to a
file has its target replaced and stays a link; a dangling link, a link loop or a folder is
refused in one line with exit status 2; an input that is a folder, a FIFO without a writer or
/dev/zero is refused in one line with exit status 2 before anything is read or written; a
--shard_size below a batch is refused (1) or warned about (5); a file-size limit (ulimit -f) is
exit status 4 with no temporary file left. Every program runs under a timeout, so that a hang
fails its test. Run by build/test_experiments (make test), after `make train eval`."""
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas", "matplotlib"), "test_file_kinds.py")

import numpy as np  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)  # where ./train and ./eval are
TIMEOUT = 300  # seconds for any one program: a hang fails the test


def write_shard(path, tokens, vocab, seed):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.random.default_rng(seed).integers(0, vocab, tokens).astype("<u2").tobytes())


def is_link(path):
    return os.path.islink(path)


def is_fifo(path):
    return stat.S_ISFIFO(os.lstat(path).st_mode)


class FileKinds(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = lambda *names: os.path.join(self.dir, *names)
        write_shard(self.path("train_000.bin"), 3000, 96, 1)
        write_shard(self.path("val_000.bin"), 600, 96, 2)
        os.makedirs(self.path("folder"))
        os.mkfifo(self.path("fifo"))
        os.symlink(self.path("nowhere", "x"), self.path("dangling"))
        os.symlink(self.path("loop_b"), self.path("loop_a"))
        os.symlink(self.path("loop_a"), self.path("loop_b"))
        with open(self.path("story.txt"), "w") as f:
            f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 20)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_tool(self, args, shell_prefix=""):
        """(status, stdout, stderr) of a command line (a list) run from the repository root."""
        command = " ".join(f"'{a}'" for a in args)
        p = subprocess.run(["bash", "-c", shell_prefix + command], cwd=REPO, capture_output=True, timeout=TIMEOUT)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def with_reader(self, fifo, args):
        """Runs `args` while `cat FIFO` reads what it writes there; (status, what cat read)."""
        got = self.path("got")
        reader = subprocess.Popen(["bash", "-c", f"cat '{fifo}' > '{got}'"])
        try:
            status, _, err = self.run_tool(args)
            reader.wait(timeout=TIMEOUT)
        finally:
            reader.kill()
        with open(got, "rb") as f:
            return status, f.read(), err

    def refused(self, says, args, shell_prefix=""):
        status, out, err = self.run_tool(args, shell_prefix)
        self.assertEqual(status, 2, out + err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(says, err)

    # ---- prepare_data.py

    def prepare(self, *args):
        return [sys.executable, "prepare_data.py", "--workers", "1", "--val_fraction", "0", *args]

    def test_prepare_data_refuses_inputs_that_are_not_files(self):
        os.mkfifo(self.path("pipe.txt"))
        os.symlink("/dev/zero", self.path("zero.txt"))
        os.mkfifo(self.path("folder", "inside.txt"))
        for path, says in [(self.path("pipe.txt"), "is a FIFO (named pipe), not a text file"),
                           (self.path("zero.txt"), "is a character device, not a text file"),
                           (self.path("folder"), "inside.txt: is a FIFO (named pipe), not a text file")]:
            with self.subTest(path=path):
                self.refused(says, self.prepare(path, "--out", self.path("out")))
        for path, kind in [(self.path("folder"), "a folder"), (self.path("fifo"), "a FIFO (named pipe)"),
                           ("/dev/zero", "a character device")]:
            with self.subTest(tokenizer=path):
                self.refused(f"{path}: is {kind}, not a tokenizer file",
                             self.prepare(self.path("story.txt"), "--tokenizer", path, "--out", self.path("out")))
        os.mkfifo(self.path("mine_train_000000.bin"))
        self.refused("mine_train_000000.bin: is a FIFO (named pipe), not a token shard",
                     self.prepare("compact", "--source", self.path("mine"), "--out", self.path("out")))
        self.assertFalse(glob.glob(self.path("out", "*.bin")))

    def test_prepare_data_outputs_of_each_kind(self):
        shard = self.path("story_train_000000.bin")
        out = ["--out", self.dir, "--overwrite"]
        # A link to a file elsewhere: that file is replaced, the link kept.
        os.makedirs(self.path("elsewhere"))
        with open(self.path("elsewhere", "target.bin"), "w") as f:
            f.write("old")
        os.symlink(self.path("elsewhere", "target.bin"), shard)
        status, _, err = self.run_tool(self.prepare(self.path("story.txt"), *out))
        self.assertEqual(status, 0, err)
        self.assertTrue(is_link(shard))
        self.assertGreater(os.path.getsize(self.path("elsewhere", "target.bin")), 1024)
        self.assertFalse(glob.glob(self.path("elsewhere", "*.tmp")))
        for kind, make, says in [("FIFO", os.mkfifo, "is a FIFO (named pipe): prepare_data.py writes regular files only"),
                                 ("dangling link", lambda p: os.symlink(self.path("nowhere", "y"), p),
                                  "is a symbolic link to"),
                                 ("loop", lambda p: os.symlink(p, p), "is a symbolic link in a loop"),
                                 ("folder", os.makedirs, "is a folder")]:
            with self.subTest(kind=kind):
                os.remove(shard) if not os.path.isdir(shard) or os.path.islink(shard) else shutil.rmtree(shard)
                make(shard)
                self.refused(says, self.prepare(self.path("story.txt"), *out))
                self.assertEqual(sorted(glob.glob(self.path(".*.tmp"))), [])

    def test_output_folders_of_each_kind(self):
        # An --out that is no folder: refused in one line naming what it is; a link to a folder is it.
        with open(self.path("file"), "w") as f:
            f.write("mine")
        for path, says in [(self.path("fifo"), "is a FIFO (named pipe), not a folder"),
                           ("/dev/stdout", "is a FIFO (named pipe), not a folder"),  # the pipe run_tool reads
                           ("/dev/null", "is a character device, not a folder"),
                           (self.path("file"), "is a regular file, not a folder"),
                           (self.path("dangling"), f"is a symbolic link to {self.path('nowhere', 'x')}, which does not exist"),
                           (self.path("loop_a"), "is a symbolic link in a loop")]:
            with self.subTest(path=path):
                self.refused(f"--out {path}: {says}", self.prepare(self.path("story.txt"), "--out", path))
                self.refused(f"--out {path}: {says}", self.sweep("--out", path))
        self.assertFalse(os.path.exists(self.path("nowhere")))
        os.symlink(self.path("folder"), self.path("link_folder"))
        status, _, err = self.run_tool(self.prepare(self.path("story.txt"), "--out", self.path("link_folder")))
        self.assertEqual(status, 0, err)
        self.assertTrue(os.path.exists(self.path("folder", "story_train_000000.bin")))

    def test_prepare_data_shard_size_floor(self):
        self.refused("--shard_size 1: must be at least 2 tokens",
                     self.prepare(self.path("story.txt"), "--shard_size", "1", "--out", self.path("out")))
        self.assertFalse(os.path.exists(self.path("out")))
        status, _, err = self.run_tool(self.prepare(self.path("story.txt"), "--shard_size", "300", "--out", self.path("out")))
        self.assertEqual(status, 0, err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("warning: --shard_size 300 is below 2049 tokens", err)

    # ---- sweep.py

    def sweep(self, *args):
        return [sys.executable, "sweep.py", "--init", "l2h2c16v96t16", "--B", "2", "--T", "8",
                "--train-data", self.path("train_*.bin"), "--val-data", self.path("val_*.bin"),
                "--train-bin", f"{BIN}/train", "--eval-bin", f"{BIN}/eval", "--ln", "pre", "--dt", "1", "--lr", "1e-3",
                "--seeds", "1", *args]

    def test_sweep_refuses_inputs_that_are_not_files(self):
        out = ["--out", self.path("out")]
        for path, kind in [(self.path("folder"), "a folder"), (self.path("fifo"), "a FIFO (named pipe)"),
                           ("/dev/zero", "a character device")]:
            with self.subTest(path=path):
                if path != self.path("folder"):  # a folder is no checkpoint to name as --init
                    self.refused(f"{path}: is {kind}", self.sweep("--init", path, *out))
                self.refused(f"{path}: is {kind}", self.sweep("--tokenizer", path, *out))
                self.refused(f"{path}: is {kind}", self.sweep("--train-data", path, *out))
        # --lr-from and --report folders whose files are FIFOs.
        os.makedirs(self.path("e1"))
        os.mkfifo(self.path("e1", "sweep.json"))
        self.refused("e1/sweep.json: is a FIFO (named pipe)", [sys.executable, "sweep.py", "--preset", "e3",
                                                               "--lr-from", self.path("e1"), *out])
        self.refused("e1/sweep.json: is a FIFO (named pipe)", [sys.executable, "sweep.py", "--report", self.path("e1")])
        os.mkfifo(self.path("pub_results.csv"))
        self.refused("pub_results.csv: is a FIFO (named pipe)", [sys.executable, "sweep.py", "--report", self.path("pub")])
        self.refused(f"--out {self.path('fifo')}: is a FIFO (named pipe), not a folder", self.sweep("--out", self.path("fifo")))
        self.assertFalse(os.path.exists(self.path("out")))

    def test_sweep_slurm_script_of_each_kind(self):
        out = ["--out", self.path("out")]
        command = " ".join(f"'{a}'" for a in self.sweep("--slurm", "/dev/stdout", *out)) + " | cat"
        p = subprocess.run(["bash", "-c", command + "; exit ${PIPESTATUS[0]}"], cwd=REPO, capture_output=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"#!/bin/bash\n# Written by sweep.py", p.stdout)
        self.assertTrue(is_link("/dev/stdout"))
        status, got, err = self.with_reader(self.path("fifo"), self.sweep("--slurm", self.path("fifo"), *out))
        self.assertEqual(status, 0, err)
        self.assertTrue(got.startswith(b"#!/bin/bash\n# Written by sweep.py"), got[:100])
        self.assertTrue(is_fifo(self.path("fifo")))
        # A link to a script sweep.py wrote: the script is replaced, the link kept.
        script = self.path("folder", "job.sbatch")
        with open(script, "wb") as f:
            f.write(got)
        os.symlink(script, self.path("job.sbatch"))
        os.utime(script, (0, 0))
        status, _, err = self.run_tool(self.sweep("--slurm", self.path("job.sbatch"), *out))
        self.assertEqual(status, 0, err)
        self.assertTrue(is_link(self.path("job.sbatch")))
        self.assertGreater(os.stat(script).st_mtime, 0)
        for path, says in [(self.path("dangling"), "is a symbolic link to"), (self.path("loop_a"), "is a symbolic link in a loop"),
                           (self.path("folder"), "is a folder")]:
            with self.subTest(path=path):
                self.refused(f"--slurm {path}: {says}", self.sweep("--slurm", path, "--out", self.path("out2")))
        self.assertFalse(os.path.exists(self.path("nowhere")))

    # ---- plot.py

    def train_run(self):
        run = self.path("run")
        status, _, err = self.run_tool([f"{BIN}/train", "-device", "cpu", "-threads", "1", "-init", "l1h2c16v96t16",
                                        "-train_data", self.path("train_*.bin"), "-val_data", self.path("val_*.bin"),
                                        "-B", "2", "-T", "8", "-steps", "3", "-eval_every", "0", "-out", run])
        self.assertEqual(status, 0, err)
        return run

    def plot(self, *args):
        return [sys.executable, "plot.py", *args]

    def test_plot_outputs_and_inputs_of_each_kind(self):
        run = self.train_run()
        os.mkfifo(self.path("pipe.png"))
        status, got, err = self.with_reader(self.path("pipe.png"), self.plot(run, "--out", self.path("pipe.png")))
        self.assertEqual(status, 0, err)
        self.assertTrue(got.startswith(b"\x89PNG"), got[:16])
        self.assertTrue(is_fifo(self.path("pipe.png")))
        with open(self.path("folder", "old.png"), "w") as f:
            f.write("old")
        os.symlink(self.path("folder", "old.png"), self.path("link.png"))
        status, _, err = self.run_tool(self.plot(run, "--out", self.path("link.png")))
        self.assertEqual(status, 0, err)
        self.assertTrue(is_link(self.path("link.png")))
        with open(self.path("folder", "old.png"), "rb") as f:
            self.assertEqual(f.read(4), b"\x89PNG")
        os.symlink(self.path("nowhere", "x.png"), self.path("dangling.png"))
        os.symlink(self.path("self.png"), self.path("self.png"))
        for path, says in [(self.path("dangling.png"), "is a symbolic link to"),
                           (self.path("self.png"), "is a symbolic link in a loop"),
                           ("/dev/stdout", "not an image name")]:
            with self.subTest(path=path):
                self.refused(f"--out {path}: {says}", self.plot(run, "--out", path))
        os.rename(os.path.join(run, "log.jsonl"), self.path("log.jsonl"))
        os.mkfifo(os.path.join(run, "log.jsonl"))
        self.refused(f"{run}/log.jsonl: is a FIFO (named pipe)", self.plot(run, "--out", self.path("x.png")))
        self.assertFalse(os.path.exists(self.path("x.png")))

    def test_a_file_size_limit_is_a_failed_write(self):
        # SIGXFSZ at its default in the shell (Python ignores it itself): a failed write, exit
        # status 4 in one line, no temporary file left.
        run = self.train_run()
        status, _, err = self.run_tool(self.plot(run, "--out", self.path("small.png")), shell_prefix="ulimit -f 4; ")
        self.assertEqual(status, 4, err)
        self.assertEqual(err.count("\n"), 1, err)
        status, _, err = self.run_tool(self.prepare(self.path("story.txt"), "--shard_size", "100000", "--out",
                                                    self.path("out")), shell_prefix="ulimit -f 1; ")
        self.assertEqual(status, 4, err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertEqual(sorted(os.listdir(self.dir)), sorted(["train_000.bin", "val_000.bin", "folder", "fifo", "dangling",
                                                               "loop_a", "loop_b", "story.txt", "run", "out"]))
        self.assertEqual(os.listdir(self.path("out")), [])


if __name__ == "__main__":
    unittest.main()
