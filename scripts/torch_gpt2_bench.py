#!/usr/bin/env python3
"""Side by side on one GPU (docs/cost_model.md): this project's training step (build/bench_gpu), a
PyTorch GPT-2 of the same shape written here (bf16 autocast, scaled_dot_product_attention,
torch.compile where it works) and llm.c's CUDA trainer where a prebuilt one is given: tokens
per second and MFU of each in one table, from one command.

    python3 scripts/torch_gpt2_bench.py --bench-gpu build/bench_gpu --llmc build/anchors/llmc
    python3 scripts/torch_gpt2_bench.py --device cpu --init l2h2c32 --B 2 --T 64 --steps 2   # the logic, on a CPU

Every row is timed on the same model (d12 by default: GPT-2 124M, Pre-LN, its vocabulary padded
to 50304 rows), the same B and T (16 × 1024), in bf16, one micro-batch a step with forward,
backward, gradient clipping and AdamW; the median of the timed steps after the warm-up. MFU is
the same for all three: (6·P + 12·L·C·T) FLOPs per token (P the parameters, attention's T×T
products in full) over the dense bf16 tensor-core peak that bench_gpu reports for the device.

A row that cannot run here is skipped with one line saying why (no torch, no GPU, no llm.c
folder); the exit status is 1 only when a program that was there failed, 2 for bad arguments.
The last line is `side-by-side-summary: ...`, which scripts/gpu_check.sh puts in its row.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

# The named model sizes of model.h: (L, NH, C).
SIZES = {"d6": (6, 6, 384), "d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}
V = 50257  # GPT-2's vocabulary
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: llm.c reads its data/


def model_shape(init):
    """(L, NH, C) of a named size or of "l{L}h{NH}c{C}"; None when `init` is neither."""
    if init in SIZES:
        return SIZES[init]
    m = re.fullmatch(r"l(\d+)h(\d+)c(\d+)", init)
    return tuple(int(g) for g in m.groups()) if m else None


def num_parameters(L, C, Vp, maxT=1024):
    """Parameters of the model (model.h's param_sizes): wte (Vp, C), wpe (maxT, C), per block two
    LayerNorms, qkv, proj, fc, fcproj with their biases (12·C² + 13·C), the final LayerNorm."""
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


def flops_per_token(L, C, T, Vp):
    """Training FLOPs per token, as bench_gpu counts them: 6 per parameter, plus 12·L·C·T for
    attention's two T×T products (forward and backward)."""
    return 6 * num_parameters(L, C, Vp) + 12 * L * C * T


# ---- the PyTorch model ----

def torch_gpt2(torch, L, NH, C, Vp, maxT):
    """GPT-2 with Pre-LN blocks in PyTorch: x + Attn(LN(x)), then + MLP(LN(x)); the output head
    tied to the token embedding; the loss over the V real columns of the padded vocabulary."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):  # x (B, T, C)
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)  # each (B, T, C)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, NH, T, hs)
            x = x + self.proj(heads.transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for name, p in self.named_parameters():  # GPT-2's initialisation
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fcproj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, tokens, targets):  # tokens, targets (B, T)
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))  # (B, T, C)
            for block in self.blocks:
                x = block(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, Vp)
            return F.cross_entropy(logits[..., :V].float().flatten(0, 1), targets.flatten())

    return Gpt2()


def time_torch(torch, args, L, NH, C, Vp):
    """Median seconds per step of the PyTorch model, and how it ran ("compiled" or why not)."""
    device = torch.device(args.device)
    torch.manual_seed(1337)
    model = torch_gpt2(torch, L, NH, C, Vp, 1024).to(device)
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **fused)
    tokens = torch.randint(0, V, (args.B, args.T + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step(forward):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = forward(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    mode, forward = "compiled", model
    if not args.no_compile:
        try:
            forward = torch.compile(model)
            step(forward)  # compiles here
        except Exception as e:  # a compiler missing on the machine, an unsupported op
            mode, forward = f"eager (torch.compile failed: {type(e).__name__})", model
    else:
        mode = "eager (--no-compile)"
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step(forward)
    seconds = []
    for _ in range(args.steps):
        sync()
        start = time.perf_counter()
        loss = step(forward)
        sync()
        seconds.append(time.perf_counter() - start)
    if not math.isfinite(loss.item()):
        raise RuntimeError(f"the PyTorch model's loss is {loss.item()}")
    return statistics.median(seconds), mode


# ---- the other programs ----

def run(command, log, timeout, cwd=None):
    """Runs `command` (in folder `cwd`): its output as text and its exit status (124: timed out, 127: not there);
    the output also into the file `log` when there is one."""
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
        out, status = done.stdout, done.returncode
    except subprocess.TimeoutExpired as e:
        out, status = e.stdout or b"", 124
    except OSError as e:
        out, status = str(e).encode(), 127
    out = out.decode(errors="replace")
    if log:
        with open(log, "w") as f:
            f.write(out)
    return out, status


def see(args, name):
    """Where a program's log is, for a failure's line."""
    return f"; see {args.log_prefix}{name}" if args.log_prefix else ""


def log_path(args, name):
    return args.log_prefix + name if args.log_prefix else None


def time_bench_gpu(args):
    """bench_gpu's median seconds per step and the dense bf16 peak it names (TFLOP/s, or None);
    a string saying why instead when it measured nothing."""
    out, status = run([args.bench_gpu, "-init", args.init, "-B", str(args.B), "-T", str(args.T),
                       "-steps", str(args.steps), "-precision", "bf16"], log_path(args, "bench_gpu.log"), 600)
    summary = re.search(r"^bench-summary: .*ms_step=([0-9.]+)", out, re.M)
    peak = re.search(r"MFU +[0-9.]+% of ([0-9.]+) TFLOP/s", out)
    if status == 0 and summary:
        return float(summary.group(1)) / 1e3, float(peak.group(1)) if peak else None
    if status == 0 and "needs a CUDA GPU" in out:
        return "skipped: no CUDA GPU here", None
    return f"failed (exit status {status}{see(args, 'bench_gpu.log')})", None


def time_llmc(args):
    """llm.c's median seconds per step over its steps after the first five, or why not."""
    program = os.path.abspath(os.path.join(args.llmc, "train_gpt2cu"))
    if not os.access(program, os.X_OK):
        return f"skipped: no prebuilt llm.c at {program}"
    if args.init != "d12":
        return "skipped: llm.c's row is for d12 only"
    out, status = run([program, "-i", "data/mobydick_train_*.bin", "-j", "data/mobydick_val_*.bin", "-e", "d12",
                       "-b", str(args.B), "-t", str(args.T), "-d", str(args.B * args.T), "-x", str(args.steps + 10),
                       "-v", "0", "-s", "0", "-n", "0"], log_path(args, "llmc.log"), 600, cwd=ROOT)
    # llm.c's step lines: "step    7/30 | loss ... | 123.45 ms | ... | 132714 tok/s"
    ms = [float(x) for x in re.findall(r"^step +\d+/\d+ .*?\| *([0-9.]+) ms", out, re.M)]
    if status != 0 or len(ms) <= 5:
        return f"failed (exit status {status}, {len(ms)} steps{see(args, 'llmc.log')})"
    return statistics.median(ms[5:]) / 1e3


def table_row(name, seconds, tokens, flops, peak):
    """One line of the table: tok/s and MFU, or the reason there are none."""
    if isinstance(seconds, str):
        return f"{name:<44} {'-':>10} {'-':>9} {'-':>6}   {seconds}", None
    mfu = f"{100 * flops * tokens / seconds / (peak * 1e12):5.1f}%" if peak else "n/a"
    return f"{name:<44} {1e3 * seconds:10.1f} {tokens / seconds:9.0f} {mfu:>6}", f"{tokens / seconds:.0f} tok/s ({mfu.strip()} MFU)"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench-gpu", default="build/bench_gpu", help="this project's benchmark (default build/bench_gpu)")
    p.add_argument("--llmc", default="build/anchors/llmc", help="folder of llm.c's prebuilt train_gpt2cu (a row only where it is)")
    p.add_argument("--init", default="d12", help="model size: d6..d48 or l{L}h{NH}c{C} (default d12)")
    p.add_argument("--B", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--T", type=int, default=1024, help="sequence length (default 1024)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="PyTorch's untimed steps after compiling (default 5)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="PyTorch's device (cpu: to try the logic)")
    p.add_argument("--no-compile", action="store_true", help="PyTorch eager, without torch.compile")
    p.add_argument("--table", help="also write the table to this file")
    p.add_argument("--log-prefix", default="", help="keep each program's output in PREFIX + bench_gpu.log, llmc.log")
    args = p.parse_args()
    shape = model_shape(args.init)
    if shape is None or args.B < 1 or not 1 <= args.T <= 1024 or args.steps < 1 or args.warmup < 0:
        print(f"torch_gpt2_bench.py: bad arguments: --init {args.init} (d6..d48 or l{{L}}h{{NH}}c{{C}}), --B {args.B}, "
              f"--T {args.T} (1..1024), --steps {args.steps}, --warmup {args.warmup}", file=sys.stderr)
        return 2
    L, NH, C = shape
    Vp = 50304 if args.init in SIZES else (V + 63) // 64 * 64
    tokens, flops = args.B * args.T, flops_per_token(L, C, args.T, Vp)

    bench, peak = time_bench_gpu(args)
    try:
        import torch  # lazily: the rest of the project needs no torch
        if args.device == "cuda" and not torch.cuda.is_available():
            torch_row = ("PyTorch", "skipped: torch sees no CUDA device here")
        elif not hasattr(torch.nn.functional, "scaled_dot_product_attention"):  # added in torch 2.0
            torch_row = ("PyTorch", f"skipped: torch {torch.__version__} has no scaled_dot_product_attention "
                                    "(torch 2.0 or later)")
        else:
            try:
                torch_seconds, mode = time_torch(torch, args, L, NH, C, Vp)
                torch_row = (f"PyTorch {torch.__version__} ({mode})", torch_seconds)
            except Exception as e:
                torch_row = ("PyTorch", f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    except ImportError:
        torch_row = ("PyTorch", "skipped: torch is not installed here (import torch failed)")
    llmc = time_llmc(args)

    lines = [f"side by side: {args.init} (P = {num_parameters(L, C, Vp) / 1e6:.1f}M), bf16, B = {args.B}, T = {args.T}; "
             f"MFU against {peak or 'no known'} TFLOP/s dense bf16 (bench_gpu's peak for the device)",
             f"{'program':<44} {'ms/step':>10} {'tok/s':>9} {'MFU':>6}"]
    summary, failed = [], False
    for name, seconds in [("this project (bench_gpu)", bench), torch_row, ("llm.c train_gpt2cu", llmc)]:
        line, short = table_row(name, seconds, tokens, flops, peak)
        lines.append(line)
        summary.append(f"{name.split(' (')[0]} {short or seconds.split(':')[0]}")
        failed |= isinstance(seconds, str) and seconds.startswith("failed")
    text = "\n".join(lines)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")
    print("side-by-side-summary: " + "; ".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
