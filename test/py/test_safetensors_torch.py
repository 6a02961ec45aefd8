"""GPT-2 safetensors (docs/formats.md §5) against Python's side, run by build/test_experiments
after `make eval`:
  * Layout (numpy): ./eval -export writes, byte for byte, the file an independent Python writer
    (json.dumps, struct) makes of the same tensors, and, where the `safetensors` library is
    installed, its file's header (as JSON: it orders __metadata__ freely) and data;
  * Torch (skipped without torch): ./eval's loss on weights imported from safetensors equals the
    float64 PyTorch model of test/make_golden.py (written from docs/model.md's equations) on the
    same tensors, Pre- and Peri-LN; and, where transformers is installed, Hugging Face's
    GPT2LMHeadModel's loss on a Pre-LN file. torch and transformers are imported lazily."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy",), "test_safetensors_torch.py")

import numpy as np  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)  # where ./eval is


def gpt2_tensors(L, C, V, maxT, peri, seed):
    """Random float32 tensors of a GPT-2 in Hugging Face's names and (in, out) Conv1D shapes."""
    rng = np.random.default_rng(seed)
    shapes = {"wte.weight": (V, C), "wpe.weight": (maxT, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(L):
        h = f"h.{l}."
        shapes.update({h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
                       h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                       h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
                       h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
        for norm in ["ln_1", "ln_2"] + (["ln_1o", "ln_2o"] if peri else []):
            shapes[h + norm + ".weight"] = (C,)
            shapes[h + norm + ".bias"] = (C,)
    return {name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}


def write_safetensors(path, tensors, metadata):
    """The safetensors layout: u64 header length, compact JSON (metadata first, tensors sorted by
    name), spaces to a multiple of 8 bytes, then the little-endian data in the header's order."""
    header, data = {"__metadata__": metadata}, b""
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, "<u2").tobytes())


def run_eval(*args):
    result = subprocess.run([os.path.join(BIN, "eval"), "-device", "cpu", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"./eval {' '.join(args)}: status {result.returncode}: {result.stderr}")
    return result


class Layout(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.dir])

    def export_of(self, path):
        out = os.path.join(self.dir, "exported.safetensors")
        run_eval("-model", path, "-export", out, "-overwrite", "1")  # each call replaces the last export
        with open(out, "rb") as f:
            return f.read()

    def test_export_is_what_an_independent_python_writer_writes(self):
        for peri, metadata in ((False, {"format": "pt", "n_head": "2"}),
                               (True, {"dt": "0.25", "format": "pt", "n_head": "2", "placement": "peri"})):
            path = os.path.join(self.dir, "python.safetensors")
            write_safetensors(path, gpt2_tensors(2, 16, 40, 8, peri, 1), metadata)
            with open(path, "rb") as f:
                self.assertEqual(self.export_of(path), f.read(), f"peri={peri}")

    def test_export_is_what_the_safetensors_library_writes(self):
        try:
            from safetensors.numpy import save_file
        except ImportError:
            self.skipTest("the safetensors package is not installed")
        path = os.path.join(self.dir, "library.safetensors")
        save_file(gpt2_tensors(2, 16, 40, 8, True, 2), path,
                  metadata={"dt": "0.25", "format": "pt", "n_head": "2", "placement": "peri"})
        with open(path, "rb") as f:
            theirs = f.read()
        ours = self.export_of(path)
        # the library may write __metadata__'s members in any order: the same header as JSON, the
        # same length, the same data bytes
        n = struct.unpack("<Q", theirs[:8])[0]
        self.assertEqual(ours[:8], theirs[:8])
        self.assertEqual(json.loads(ours[8:8 + n]), json.loads(theirs[8:8 + n]))
        self.assertEqual(ours[8 + n:], theirs[8 + n:])


class Torch(unittest.TestCase):
    """./eval's loss on imported weights against PyTorch models of the same tensors."""

    @classmethod
    def setUpClass(cls):
        try:
            import torch
        except ImportError:
            raise unittest.SkipTest("torch is not installed")
        sys.path.insert(0, os.path.join(REPO, "test"))
        import make_golden
        make_golden.torch = torch
        cls.torch, cls.golden = torch, make_golden

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.dir])

    def file_of(self, P, placement, dt):
        """make_golden's parameters P (our layout, float64) as a GPT-2 safetensors file."""
        g = self.golden
        f32 = {k: v.to(self.torch.float32).numpy() for k, v in P.items()}
        t = {"wte.weight": f32["wte"][:g.V], "wpe.weight": f32["wpe"], "ln_f.weight": f32["lnfw"], "ln_f.bias": f32["lnfb"]}
        for l in range(g.L):
            h = f"h.{l}."
            t.update({h + "ln_1.weight": f32["ln1w"][l], h + "ln_1.bias": f32["ln1b"][l],
                      h + "attn.c_attn.weight": f32["qkvw"][l].T, h + "attn.c_attn.bias": f32["qkvb"][l],
                      h + "attn.c_proj.weight": f32["attprojw"][l].T, h + "attn.c_proj.bias": f32["attprojb"][l],
                      h + "ln_2.weight": f32["ln2w"][l], h + "ln_2.bias": f32["ln2b"][l],
                      h + "mlp.c_fc.weight": f32["fcw"][l].T, h + "mlp.c_fc.bias": f32["fcb"][l],
                      h + "mlp.c_proj.weight": f32["fcprojw"][l].T, h + "mlp.c_proj.bias": f32["fcprojb"][l]})
            if placement == "peri":
                t.update({h + "ln_1o.weight": f32["ln1ow"][l], h + "ln_1o.bias": f32["ln1ob"][l],
                          h + "ln_2o.weight": f32["ln2ow"][l], h + "ln_2o.bias": f32["ln2ob"][l]})
        metadata = {"format": "pt", "n_head": str(g.NH)}
        if placement != "pre" or dt != 1.0:
            metadata.update({"placement": placement, "dt": repr(dt)})
        path = os.path.join(self.dir, f"{placement}.safetensors")
        write_safetensors(path, t, metadata)
        return path

    def eval_loss(self, path, tokens):
        """./eval's val_loss on the first B·T+1 tokens, as one batch (B = 2, T = 8)."""
        shard = os.path.join(self.dir, "val_000.bin")
        write_shard(shard, tokens)
        out = os.path.join(self.dir, "eval.json")
        g = self.golden
        run_eval("-model", path, "-val_data", shard, "-train_data", shard, "-B", str(g.B), "-T", str(g.T),
                 "-eval_batches", "1", "-diag_batches", "0", "-json", out)
        with open(out) as f:
            return json.load(f)["val_loss"]

    def test_loss_of_imported_weights_is_the_torch_models(self):
        g = self.golden
        tokens = g.make_tokens()
        inputs, targets = g.batch(tokens, 0)
        for placement, dt in (("pre", 1.0), ("peri", 0.5), ("post", 0.5)):
            P = g.make_params(placement, 100)
            expected = float(g.forward_loss(P, placement, dt, inputs, targets))
            got = self.eval_loss(self.file_of(P, placement, dt), tokens.tolist())
            self.assertAlmostEqual(got, expected, delta=1e-5, msg=placement)

    def test_loss_of_a_pre_ln_file_is_transformers_gpt2s(self):
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError:
            self.skipTest("transformers is not installed")
        torch, g = self.torch, self.golden
        P = g.make_params("pre", 101)
        path = self.file_of(P, "pre", 1.0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=g.V, n_positions=g.MAXT, n_embd=g.C, n_layer=g.L, n_head=g.NH,
                                           activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
        with open(path, "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        state = {}
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            b, e = entry["data_offsets"]
            state[name] = torch.from_numpy(np.frombuffer(raw[8 + n + b:8 + n + e], "<f4").reshape(entry["shape"]).copy())
        missing, unexpected = model.transformer.load_state_dict(state, strict=False)
        self.assertEqual(unexpected, [])
        self.assertTrue(all(k.endswith("attn.bias") or k.endswith("masked_bias") for k in missing), missing)
        model.tie_weights()
        tokens = g.make_tokens()
        inputs, targets = g.batch(tokens, 0)
        with torch.no_grad():
            logits = model(inputs).logits
        expected = float(torch.nn.functional.cross_entropy(logits.reshape(-1, g.V), targets.reshape(-1)))
        self.assertAlmostEqual(self.eval_loss(path, tokens.tolist()), expected, delta=1e-4)


if __name__ == "__main__":
    unittest.main()
