"""scripts/torch_gpt2_bench.py (docs/cost_model.md) without a GPU: its table from fake programs that
print what bench_gpu and llm.c's trainer print, with torch hidden (a clean skip line) and, where
torch is installed, a tiny run of the PyTorch model on the CPU. Run by build/test_experiments."""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "torch_gpt2_bench.py")

# bench_gpu's lines the script reads: 100 ms a step, and the device's peak of 1000 TFLOP/s.
FAKE_BENCH = """#!/bin/bash
echo "  MFU       1.0% of 1000 TFLOP/s dense bf16"
echo "bench-summary: tok_s=20480 ms_step=100.0 mfu_pct=1.0 mem_gib=1.0 B=2 first_loss=10.9 ln_V=10.8249"
"""
# llm.c's step lines: 500 ms for the first five steps (not counted), then 200, 250, 300.
FAKE_LLMC = """#!/bin/bash
for ms in 500 500 500 500 500 200 300 250; do
  echo "step    1/8 | loss 10.900000 (+0.00z)| norm 1.0000 (+0.00z)| lr 6.00e-04 | $ms.00 ms | 1.0% bf16 MFU | 1000 tok/s"
done
"""


def program(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def torch_with_sdpa_installed():
    """torch 2.0 or later, whose scaled_dot_product_attention the PyTorch model uses."""
    probe = "import torch; torch.nn.functional.scaled_dot_product_attention"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


class SideBySide(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        d = self.dir.name
        program(os.path.join(d, "bench_gpu"), FAKE_BENCH)
        os.mkdir(os.path.join(d, "llmc"))
        program(os.path.join(d, "llmc", "train_gpt2cu"), FAKE_LLMC)
        # A torch module that cannot be imported, first on the path: torch absent.
        os.mkdir(os.path.join(d, "no_torch"))
        with open(os.path.join(d, "no_torch", "torch.py"), "w") as f:
            f.write("raise ImportError('no torch')\n")

    def bench(self, *args, hide_torch=True):
        env = dict(os.environ, PYTHONPATH=os.path.join(self.dir.name, "no_torch")) if hide_torch else None
        d = self.dir.name
        return subprocess.run([sys.executable, SCRIPT, "--bench-gpu", os.path.join(d, "bench_gpu"), "--llmc",
                               os.path.join(d, "llmc"), "--table", os.path.join(d, "table.txt"), *args],
                              capture_output=True, text=True, env=env, cwd=REPO)

    def test_table_of_every_program_and_a_clean_skip_without_torch(self):
        r = self.bench("--B", "2", "--T", "1024")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        # d12: P = 50304·768 + 1024·768 + 12·(12·768² + 13·768) + 2·768 = 124,475,904;
        # 6·P + 12·12·768·1024 = 860,101,632 FLOPs per token; 2048 tokens a step.
        lines = r.stdout.splitlines()
        project = next(line for line in lines if line.startswith("this project"))
        self.assertIn("100.0     20480   1.8%", project)  # 20480 tok/s · 860.1 MFLOP / 1000 TFLOP/s
        llmc = next(line for line in lines if line.startswith("llm.c"))
        self.assertIn("250.0      8192   0.7%", llmc)  # the median of 200, 300, 250 ms
        torch_line = next(line for line in lines if line.startswith("PyTorch"))
        self.assertIn("skipped: torch is not installed here", torch_line)
        self.assertIn("P = 124.5M", lines[0])
        self.assertIn("against 1000.0 TFLOP/s", lines[0])
        with open(os.path.join(self.dir.name, "table.txt")) as f:
            self.assertEqual(f.read(), "\n".join(lines[:-1]) + "\n")
        self.assertEqual(lines[-1], "side-by-side-summary: this project 20480 tok/s (1.8% MFU); PyTorch skipped; "
                                    "llm.c train_gpt2cu 8192 tok/s (0.7% MFU)")

    def test_a_program_that_fails_fails_the_table_and_a_missing_one_is_skipped(self):
        program(os.path.join(self.dir.name, "llmc", "train_gpt2cu"), "#!/bin/bash\necho 'no CUDA device'\nexit 1\n")
        r = self.bench("--B", "2")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("failed (exit status 1, 0 steps)", r.stdout)
        os.remove(os.path.join(self.dir.name, "llmc", "train_gpt2cu"))
        r = self.bench("--B", "2")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("skipped: no prebuilt llm.c at", r.stdout)

    def test_bad_arguments(self):
        for args in (["--init", "d13"], ["--T", "2048"], ["--B", "0"]):
            r = self.bench(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.dir.name, "table.txt")))

    @unittest.skipUnless(torch_with_sdpa_installed(), "torch 2.0 or later is not installed here")
    def test_tiny_pytorch_run_on_the_cpu(self):
        r = self.bench("--device", "cpu", "--init", "l2h2c32", "--B", "2", "--T", "32", "--steps", "2", "--warmup", "1",
                       "--no-compile", hide_torch=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        torch_line = next(line for line in r.stdout.splitlines() if line.startswith("PyTorch"))
        self.assertIn("eager (--no-compile)", torch_line)
        self.assertNotIn("skipped", torch_line)


if __name__ == "__main__":
    unittest.main()
