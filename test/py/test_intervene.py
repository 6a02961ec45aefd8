"""Claim 4's intervention tool (experiments/intervene.py) on tiny checkpoints that ./train writes
here: exactly the four branch-output tensors are scaled; a hand-worked case, Pre-LN with k = 0,
whose every block is then the identity (sensitivity exactly 1, the stream unchanged); Peri-LN,
whose output LayerNorms undo the scaling (the same sensitivities at k = 1 and 4, up to
LayerNorm's ε); refusals of files that are not checkpoints. Needs ./train and ./eval (make).
Run by build/test_experiments."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_intervene.py")

import numpy as np  # noqa: E402

from experiments import intervene  # noqa: E402
from experiments.grid import InputError  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)
L, C, V = 2, 16, 96


def shard(path, n, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *[rng.randrange(V) for _ in range(n)]))


class Intervention(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        shard(os.path.join(cls.dir, "train_000.bin"), 3000, 1)
        shard(os.path.join(cls.dir, "val_000.bin"), 600, 2)
        cls.model = {ln: cls.train(ln) for ln in ("pre", "peri")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    @classmethod
    def train(cls, ln):
        out = os.path.join(cls.dir, ln)
        subprocess.run([os.path.join(BIN, "train"), "-device", "cpu", "-init", f"l{L}h2c{C}v{V}t16", "-ln", ln,
                        "-B", "2", "-T", "8", "-steps", "3", "-warmup", "1", "-lr", "1e-2", "-eval_every", "0",
                        "-threads", "1", "-train_data", os.path.join(cls.dir, "train_*.bin"),
                        "-val_data", os.path.join(cls.dir, "val_*.bin"), "-out", out],
                       check=True, stdout=subprocess.DEVNULL)
        return os.path.join(out, "model_00000003.bin")

    def evaluate(self, model):
        out = model + ".json"
        subprocess.run([os.path.join(BIN, "eval"), "-device", "cpu", "-model", model, "-B", "2", "-T", "8",
                        "-eval_batches", "1", "-diag_batches", "1", "-directions", "2", "-threads", "1",
                        "-val_data", os.path.join(self.dir, "val_*.bin"),
                        "-train_data", os.path.join(self.dir, "train_*.bin"), "-json", out],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)

    def scaled(self, ln, k):
        path = os.path.join(self.dir, f"{ln}_k{k}.bin")
        intervene.scale_branch_outputs(self.model[ln], path, k)
        return path

    def test_exactly_the_branch_outputs_are_scaled(self):
        raw = np.fromfile(self.model["peri"], dtype="<i4")
        scaled = np.fromfile(self.scaled("peri", 2.0), dtype="<i4")
        self.assertTrue((raw[:256] == scaled[:256]).all())
        before, after = raw[256:].view("<f4"), scaled[256:].view("<f4")
        # The layout of docs/formats.md §2 by hand for L = 2, C = 16, Vp = 128, maxT = 16, Peri-LN.
        sizes = [("wte", 128 * C), ("wpe", 16 * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
                 ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
                 ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * 4 * C * C), ("fcprojb", L * C),
                 ("lnfw", C), ("lnfb", C), ("ln1ow", L * C), ("ln1ob", L * C), ("ln2ow", L * C), ("ln2ob", L * C)]
        self.assertEqual(len(before), sum(n for _, n in sizes))
        at = 0
        for name, n in sizes:
            want = 2 * before[at:at + n] if name in intervene.SCALED else before[at:at + n]
            self.assertTrue((after[at:at + n] == want).all(), name)  # ×2 is exact in float32
            at += n

    def test_pre_ln_with_no_branches_is_the_identity(self):
        # k = 0: every branch outputs 0, each block maps X to X: J = I, so every per-token gain
        # ‖(J v)_n‖ of a unit v_n is 1, and X_0 = X_1 = X_2.
        ev = self.evaluate(self.scaled("pre", 0.0))
        for gain in ev["sensitivity"]["block_mean"] + ev["sensitivity"]["block_max"]:
            self.assertAlmostEqual(gain, 1.0, delta=1e-5)
        mean_abs = ev["layers"]["mean_abs"]
        self.assertEqual(mean_abs[0], mean_abs[1])
        self.assertEqual(mean_abs[0], mean_abs[2])
        # With its branches (k = 1) the model is not the identity.
        self.assertGreater(abs(self.evaluate(self.model["pre"])["sensitivity"]["block_mean"][0] - 1), 1e-3)

    def test_peri_ln_undoes_the_scaling(self):
        plain = self.evaluate(self.model["peri"])
        four = self.evaluate(self.scaled("peri", 4.0))
        for a, b in zip(plain["sensitivity"]["block_mean"], four["sensitivity"]["block_mean"]):
            self.assertAlmostEqual(a, b, delta=1e-2 * a)
        self.assertAlmostEqual(plain["val_loss"], four["val_loss"], delta=1e-3)

    def test_refuses_what_is_not_a_checkpoint(self):
        text = os.path.join(self.dir, "text.bin")
        with open(text, "w") as f:
            f.write("not a checkpoint" * 100)
        with self.assertRaisesRegex(InputError, "not a model checkpoint"):
            intervene.scale_branch_outputs(text, text + ".out", 2.0)
        cut = os.path.join(self.dir, "cut.bin")
        with open(self.model["pre"], "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:-8])
        with self.assertRaisesRegex(InputError, "the header describes"):
            intervene.scale_branch_outputs(cut, cut + ".out", 2.0)
        self.assertFalse(os.path.exists(cut + ".out") or os.path.exists(text + ".out"))


if __name__ == "__main__":
    unittest.main()
