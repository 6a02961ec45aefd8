#!/usr/bin/python3
"""Regenerate the golden fixtures in test/golden/ (run: `make golden`, or
/usr/bin/python3 test/make_golden.py from the repository root).

This is an independent float64 PyTorch implementation of the model and optimiser of
docs/model.md (the model; §5 the optimiser and schedule), written straight from the equations there. For each of the six
cases (placement pre/post/peri x dt 1.0/0.1) on a tiny model it writes

  test/golden/<placement>_dt<dt>.model.bin   the initial checkpoint, docs/formats.md §2 format
  test/golden/<placement>_dt<dt>.expect.bin  the tokens, the loss and every parameter
                                             gradient on batch 0, and 5 AdamW steps
                                             (loss, grad norm, lr per step; final params)

and one training-loop case, what ./train itself must log and save (three micro-steps per
step over two token shards, warmup and cosine decay, weight decay, clipping on some steps):

  test/golden/loop.model.bin, loop_train_000.bin, loop_train_001.bin   checkpoint and shards
  test/golden/loop.expect.bin                per step: loss, grad norm, lr; final params

test/golden/README.md documents the .expect.bin layout; test/golden.h reads it in C++.

Before writing anything the script checks itself: autograd gradients against central
finite differences, the explicit forward against torch.nn.functional's layer_norm / gelu /
softmax / cross_entropy, and the hand-written AdamW against
torch.optim.AdamW. It fails (AssertionError) when any check does not hold.
"""
import math
import os
import struct
import sys

# ---------------------------------------------------------------------------------------
# Fixed configuration of the fixtures (documented in test/golden/README.md and golden.h).
# ---------------------------------------------------------------------------------------
V, VP, MAXT, L, NH, C = 96, 128, 16, 3, 4, 32     # tiny model
B, T = 2, 8                                       # batch (T < maxT on purpose)
STEPS = 5
NUM_TOKENS = STEPS * B * T + 1
LR, LR_MIN, WARMUP = 1e-2, 1e-3, 2
BETA1, BETA2, EPS, WD = 0.9, 0.95, 1e-8, 0.1
CLIP = 0.5
LN_EPS = 1e-5
TOKEN_SEED = 4242                                 # same token stream for all six cases
PARAM_SEED_BASE = 1000                            # case i uses seed 1000 + i

PLACEMENTS = ("pre", "post", "peri")
PLACEMENT_ID = {"pre": 0, "post": 1, "peri": 2}
DTS = (1.0, 0.1)

CKPT_MAGIC = 20240326
EXPECT_MAGIC = 20251129
SHARD_MAGIC = 20240520

# The training-loop case (loop.*): the same model sizes and optimiser settings, a Peri-LN
# model run by ./train over two shards with gradient accumulation (test/golden/README.md).
LOOP_PLACEMENT, LOOP_DT = "peri", 0.5
LOOP_PARAM_SEED = PARAM_SEED_BASE + 6             # after the six model cases
LOOP_TOKEN_SEED = 4343
LOOP_SHARD_TOKENS = (100, 180)                    # 6 and 11 windows of B*T+1 tokens
LOOP_MICRO = 3                                    # micro-steps per step: total_batch = 3*B*T
LOOP_STEPS = 6                                    # 18 windows: the 18th is the first again
LOOP_CLIP = 0.85                                  # crossed by some steps, not by others
# AdamW's eps: 1e-6, not 1e-8. The gradient of the key biases is exactly 0 in exact arithmetic
# (softmax ignores a shift shared by all scores of a row), so in float32 it is rounding noise,
# which AdamW divides by sqrt(v_hat) + eps: a larger eps keeps that noise from moving them.
LOOP_EPS = 1e-6

# Parameter tensors in docs/formats.md §2 order: (name, shape, kind). kind says how the
# tensor is initialised: "w" N(0,0.02), "wres" N(0,0.02/sqrt(2L)), "bias" N(0,0.02)
# (perturbed from 0), "gain" 1+N(0,0.1), "lnbias" N(0,0.05) (perturbed from 1 and 0).
BASE_PARAMS = [
    ("wte", (VP, C), "w"),
    ("wpe", (MAXT, C), "w"),
    ("ln1w", (L, C), "gain"),
    ("ln1b", (L, C), "lnbias"),
    ("qkvw", (L, 3 * C, C), "w"),
    ("qkvb", (L, 3 * C), "bias"),
    ("attprojw", (L, C, C), "wres"),
    ("attprojb", (L, C), "bias"),
    ("ln2w", (L, C), "gain"),
    ("ln2b", (L, C), "lnbias"),
    ("fcw", (L, 4 * C, C), "w"),
    ("fcb", (L, 4 * C), "bias"),
    ("fcprojw", (L, C, 4 * C), "wres"),
    ("fcprojb", (L, C), "bias"),
    ("lnfw", (C,), "gain"),
    ("lnfb", (C,), "lnbias"),
]
PERI_PARAMS = [
    ("ln1ow", (L, C), "gain"),
    ("ln1ob", (L, C), "lnbias"),
    ("ln2ow", (L, C), "gain"),
    ("ln2ob", (L, C), "lnbias"),
]
# docs/model.md §5: weight decay only on these (the 2-D matrices; stacked over layers here).
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def import_torch():
    """Import torch lazily; exit with one clear message when it is not installed."""
    try:
        import torch
    except ImportError:
        sys.exit("make_golden.py needs PyTorch for Debian's python: "
                 "apt-get install python3-torch (then run /usr/bin/python3 test/make_golden.py)")
    return torch


torch = None  # set in main()


def param_specs(placement):
    """The (name, shape, kind) list of a placement, in checkpoint order."""
    return BASE_PARAMS + (PERI_PARAMS if placement == "peri" else [])


def make_params(placement, seed):
    """Draw the parameters of one case: the documented init (docs/model.md §3), then biases and LN gains/biases
    perturbed away from 0/1 so every code path matters; rounded to float32 (as they are
    stored) and returned as float64 tensors in checkpoint order."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape, kind in param_specs(placement):
        r = torch.randn(shape, generator=g, dtype=torch.float64)
        if kind == "w":
            p = 0.02 * r
        elif kind == "wres":
            p = (0.02 / math.sqrt(2 * L)) * r
        elif kind == "bias":
            p = 0.02 * r
        elif kind == "gain":
            p = 1.0 + 0.1 * r
        elif kind == "lnbias":
            p = 0.05 * r
        else:
            raise ValueError(kind)
        out[name] = p.to(torch.float32).to(torch.float64)
    return out


def make_tokens():
    """The fixed token stream, NUM_TOKENS ids in [0, V)."""
    g = torch.Generator().manual_seed(TOKEN_SEED)
    return torch.randint(0, V, (NUM_TOKENS,), generator=g, dtype=torch.int64)


def batch(tokens, s):
    """Inputs and targets (B,T) of step s: window tokens[s*B*T : s*B*T + B*T + 1]."""
    w = tokens[s * B * T: s * B * T + B * T + 1]
    return w[:-1].reshape(B, T), w[1:].reshape(B, T)


# ---------------------------------------------------------------------------------------
# The model, explicit formulas (docs/model.md §1–§2).
# ---------------------------------------------------------------------------------------
def layernorm(x, w, b):
    """LN(x) = (x - mean)/sqrt(var + 1e-5)*w + b over the last axis, biased variance."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def gelu(x):
    """GPT-2's tanh GELU: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(x, qkvw, qkvb, projw, projb):
    """Causal multi-head self-attention of x (B,T,C). qkv = x Wqkv^T + bqkv is split as
    GPT-2 does: channels [0,C) are q, [C,2C) k, [2C,3C) v; head h owns channels
    [h*hs, (h+1)*hs) of each, hs = C/NH. Scores scaled by 1/sqrt(hs), softmax over t' <= t,
    then the output projection y Wproj^T + bproj."""
    Bx, Tx, Cx = x.shape
    hs = Cx // NH
    qkv = x @ qkvw.T + qkvb
    q, k, v = qkv.split(Cx, dim=-1)
    q = q.reshape(Bx, Tx, NH, hs).transpose(1, 2)      # (B,NH,T,hs)
    k = k.reshape(Bx, Tx, NH, hs).transpose(1, 2)
    v = v.reshape(Bx, Tx, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)     # (B,NH,T,T)
    mask = torch.ones(Tx, Tx, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf"))
    att = att - att.max(-1, keepdim=True).values
    att = torch.exp(att)
    att = att / att.sum(-1, keepdim=True)
    y = (att @ v).transpose(1, 2).reshape(Bx, Tx, Cx)
    return y @ projw.T + projb


def mlp(x, fcw, fcb, projw, projb):
    """MLP(x) = Wfcproj GELU(Wfc x + bfc) + bfcproj."""
    return gelu(x @ fcw.T + fcb) @ projw.T + projb


def cross_entropy(logits, targets):
    """Mean over all positions of -log softmax(logits)[target] (logits (N,V), targets (N,))."""
    m = logits.max(-1, keepdim=True).values
    lse = torch.log(torch.exp(logits - m).sum(-1)) + m.squeeze(-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - picked).mean()


def forward_loss(P, placement, dt, inputs, targets):
    """Mean cross-entropy loss of the model with parameters P (dict of float64 tensors) on
    inputs/targets (B,T), for a placement and residual step dt, per docs/model.md §1–§2."""
    Bx, Tx = inputs.shape
    x = P["wte"][inputs] + P["wpe"][:Tx]
    for l in range(L):
        def attn(z):
            return attention(z, P["qkvw"][l], P["qkvb"][l], P["attprojw"][l], P["attprojb"][l])

        def ff(z):
            return mlp(z, P["fcw"][l], P["fcb"][l], P["fcprojw"][l], P["fcprojb"][l])

        def ln1(z):
            return layernorm(z, P["ln1w"][l], P["ln1b"][l])

        def ln2(z):
            return layernorm(z, P["ln2w"][l], P["ln2b"][l])

        if placement == "pre":
            h = x + dt * attn(ln1(x))
            x = h + dt * ff(ln2(h))
        elif placement == "post":
            h = ln1(x + dt * attn(x))
            x = ln2(h + dt * ff(h))
        elif placement == "peri":
            h = x + dt * layernorm(attn(ln1(x)), P["ln1ow"][l], P["ln1ob"][l])
            x = h + dt * layernorm(ff(ln2(h)), P["ln2ow"][l], P["ln2ob"][l])
        else:
            raise ValueError(placement)
    xf = layernorm(x, P["lnfw"], P["lnfb"])
    logits = xf @ P["wte"][:V].T            # only the real vocabulary rows
    return cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def forward_loss_functional(P, placement, dt, inputs, targets):
    """The same model written with torch.nn.functional's building blocks; only used to
    cross-check forward_loss."""
    F = torch.nn.functional
    Bx, Tx = inputs.shape
    hs = C // NH

    def ln(z, w, b):
        return F.layer_norm(z, (C,), w, b, eps=LN_EPS)

    def attn(z, l):
        qkv = F.linear(z, P["qkvw"][l], P["qkvb"][l])
        q, k, v = (t.view(Bx, Tx, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        # (Debian's torch 1.13 has no F.scaled_dot_product_attention.)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        causal = torch.ones(Tx, Tx, dtype=torch.bool).tril()
        y = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        return F.linear(y.transpose(1, 2).reshape(Bx, Tx, C), P["attprojw"][l], P["attprojb"][l])

    def ff(z, l):
        u = F.gelu(F.linear(z, P["fcw"][l], P["fcb"][l]), approximate="tanh")
        return F.linear(u, P["fcprojw"][l], P["fcprojb"][l])

    x = F.embedding(inputs, P["wte"]) + F.embedding(torch.arange(Tx), P["wpe"])
    for l in range(L):
        if placement == "pre":
            h = x + dt * attn(ln(x, P["ln1w"][l], P["ln1b"][l]), l)
            x = h + dt * ff(ln(h, P["ln2w"][l], P["ln2b"][l]), l)
        elif placement == "post":
            h = ln(x + dt * attn(x, l), P["ln1w"][l], P["ln1b"][l])
            x = ln(h + dt * ff(h, l), P["ln2w"][l], P["ln2b"][l])
        else:
            a = attn(ln(x, P["ln1w"][l], P["ln1b"][l]), l)
            h = x + dt * ln(a, P["ln1ow"][l], P["ln1ob"][l])
            m = ff(ln(h, P["ln2w"][l], P["ln2b"][l]), l)
            x = h + dt * ln(m, P["ln2ow"][l], P["ln2ob"][l])
    logits = F.linear(ln(x, P["lnfw"], P["lnfb"]), P["wte"])[..., :V]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def loss_and_grads(P, placement, dt, inputs, targets, fn=forward_loss):
    """Loss (float) and the gradient of every parameter (dict of float64 tensors)."""
    Q = {k: v.detach().clone().requires_grad_(True) for k, v in P.items()}
    loss = fn(Q, placement, dt, inputs, targets)
    loss.backward()
    return loss.item(), {k: Q[k].grad.detach().clone() for k in P}


# ---------------------------------------------------------------------------------------
# Optimiser (docs/model.md §5).
# ---------------------------------------------------------------------------------------
def lr_at(s, steps=STEPS, lr=LR, lr_min=LR_MIN, warmup=WARMUP):
    """Learning rate of 0-based step s of `steps`: linear warmup lr*(s+1)/warmup for
    s < warmup, then cosine decay reaching exactly lr_min at the last step (s = steps-1)."""
    if s < warmup:
        return lr * (s + 1) / warmup
    span = steps - 1 - warmup
    ratio = (s - warmup) / span if span > 0 else 0.0
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - lr_min)


def global_norm(G):
    """sqrt of the sum of squares of every gradient entry (padding rows included: 0)."""
    return math.sqrt(sum(float((g * g).sum()) for g in G.values()))


def step_loss_and_grads(P, placement, dt, micro_batches):
    """Loss and gradients of one optimiser step: the mean over its micro-batches (a list of
    (inputs, targets)) of their losses, and likewise of their gradients (gradient accumulation,
    README.md, ./train)."""
    losses, total = [], None
    for inputs, targets in micro_batches:
        loss, G = loss_and_grads(P, placement, dt, inputs, targets)
        losses.append(loss)
        total = G if total is None else {k: total[k] + G[k] for k in G}
    k = len(micro_batches)
    return sum(losses) / k, {name: g / k for name, g in total.items()}


def train(P0, placement, dt, step_batches, clip=CLIP, lr_of_step=lr_at, eps=EPS):
    """Clipped AdamW from P0, one step per entry of step_batches (each a list of micro-batch
    (inputs, targets)), step s at lr_of_step(s). Returns (per-step losses, grad norms before
    clipping, lrs, clipped flags, final params)."""
    P = {k: v.clone() for k, v in P0.items()}
    m = {k: torch.zeros_like(v) for k, v in P.items()}
    v2 = {k: torch.zeros_like(v) for k, v in P.items()}
    losses, norms, lrs, clipped = [], [], [], []
    for s, micro_batches in enumerate(step_batches):
        loss, G = step_loss_and_grads(P, placement, dt, micro_batches)
        norm = global_norm(G)
        did_clip = clip > 0 and norm > clip
        if did_clip:
            G = {k: g * (clip / norm) for k, g in G.items()}
        lr = lr_of_step(s)
        t = s + 1
        for k in P:
            m[k] = BETA1 * m[k] + (1 - BETA1) * G[k]
            v2[k] = BETA2 * v2[k] + (1 - BETA2) * G[k] ** 2
            mhat = m[k] / (1 - BETA1 ** t)
            vhat = v2[k] / (1 - BETA2 ** t)
            wd = WD if k in DECAYED else 0.0
            P[k] = P[k] - lr * (mhat / (torch.sqrt(vhat) + eps) + wd * P[k])
        losses.append(loss)
        norms.append(norm)
        lrs.append(lr)
        clipped.append(did_clip)
    return losses, norms, lrs, clipped, P


def train_with_torch_adamw(P0, placement, dt, step_batches, clip=CLIP, lr_of_step=lr_at, eps=EPS):
    """The same training run with torch.optim.AdamW (two groups: decayed / not), gradients
    accumulated by autograd over the micro-batches (each loss divided by their number) and
    manual clipping by clip/norm; only used to cross-check train(). Returns the final params."""
    Q = {k: v.clone().requires_grad_(True) for k, v in P0.items()}
    groups = [
        {"params": [Q[k] for k in Q if k in DECAYED], "weight_decay": WD},
        {"params": [Q[k] for k in Q if k not in DECAYED], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=eps, foreach=False)
    for s, micro_batches in enumerate(step_batches):
        opt.zero_grad(set_to_none=True)
        for inputs, targets in micro_batches:
            (forward_loss(Q, placement, dt, inputs, targets) / len(micro_batches)).backward()
        norm = math.sqrt(sum(float((q.grad ** 2).sum()) for q in Q.values()))
        if clip > 0 and norm > clip:
            for q in Q.values():
                q.grad.mul_(clip / norm)
        for gr in opt.param_groups:
            gr["lr"] = lr_of_step(s)
        opt.step()
    return {k: q.detach() for k, q in Q.items()}


# ---------------------------------------------------------------------------------------
# Self-checks.
# ---------------------------------------------------------------------------------------
def check_finite_differences(P, placement, dt, inputs, targets, G, seed):
    """Compare autograd gradients with central differences (h = 1e-5, float64) on 3
    random entries of every tensor, plus one entry of a padded wte row (must be 0).
    Returns the worst error |fd - autograd| / max(|autograd|, 1e-4)."""
    g = torch.Generator().manual_seed(seed)
    h = 1e-5
    worst = 0.0
    for name, t in P.items():
        flat_idx = torch.randint(0, t.numel(), (3,), generator=g).tolist()
        if name == "wte":
            flat_idx.append(V * C + 5)                 # row V: padding
        for i in flat_idx:
            Pp = {k: v.clone() for k, v in P.items()}
            Pm = {k: v.clone() for k, v in P.items()}
            Pp[name].view(-1)[i] += h
            Pm[name].view(-1)[i] -= h
            with torch.no_grad():
                fd = (forward_loss(Pp, placement, dt, inputs, targets).item()
                      - forward_loss(Pm, placement, dt, inputs, targets).item()) / (2 * h)
            ad = G[name].view(-1)[i].item()
            # error measured relative to the gradient, with an absolute floor of 1e-4
            # (central-difference truncation + rounding is ~1e-10 absolute here)
            err = abs(fd - ad) / max(abs(ad), 1e-4)
            worst = max(worst, err)
            assert err < 1e-5, f"finite difference mismatch {name}[{i}]: fd={fd} autograd={ad}"
    assert float(G["wte"][V:].abs().max()) == 0.0, "padded wte rows got a gradient"
    return worst


def check_functional(P, placement, dt, inputs, targets, loss, G):
    """Compare loss and gradients with the torch.nn.functional version of the model."""
    loss_f, G_f = loss_and_grads(P, placement, dt, inputs, targets, forward_loss_functional)
    assert abs(loss - loss_f) < 1e-12, f"functional loss mismatch {loss} vs {loss_f}"
    for k in G:
        d = float((G[k] - G_f[k]).abs().max())
        assert d < 1e-12, f"functional gradient mismatch on {k}: {d}"


# ---------------------------------------------------------------------------------------
# Writers.
# ---------------------------------------------------------------------------------------
def case_name(placement, dt):
    return f"{placement}_dt{dt:.1f}"


def float32_bits(x):
    """The int32 whose bits are the float32 x."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def write_checkpoint(path, P, placement, dt):
    """The docs/formats.md §2 fp32 checkpoint: int32 header[256], then every parameter as
    float32 in checkpoint order."""
    header = [0] * 256
    header[0] = CKPT_MAGIC
    legacy = placement == "pre" and dt == 1.0
    header[1] = 3 if legacy else 100
    header[2], header[3], header[4], header[5], header[6], header[7] = MAXT, V, L, NH, C, VP
    if not legacy:
        header[8] = PLACEMENT_ID[placement]
        header[9] = float32_bits(dt)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name, _, _ in param_specs(placement):
            f.write(P[name].to(torch.float32).contiguous().numpy().astype("<f4").tobytes())


def flat64(D, placement):
    """All tensors of dict D concatenated in checkpoint order, as little-endian float64 bytes."""
    return b"".join(D[name].contiguous().numpy().astype("<f8").tobytes()
                    for name, _, _ in param_specs(placement))


def write_expect(path, placement, tokens, loss0, G, losses, norms, lrs, final, micro_steps=0):
    """The .expect.bin layout documented in test/golden/README.md. tokens may be empty (the
    training-loop case keeps its tokens in shard files); micro_steps goes to header[6]
    (0 in the six model cases: one batch per step)."""
    n_params = sum(math.prod(shape) for _, shape, _ in param_specs(placement))
    n_tokens, steps = len(tokens), len(losses)
    header = [0] * 16
    header[0], header[1], header[2] = EXPECT_MAGIC, B, T
    header[3], header[4], header[5], header[6] = n_tokens, steps, n_params, micro_steps
    with open(path, "wb") as f:
        f.write(struct.pack("<16i", *header))
        f.write(struct.pack(f"<{n_tokens}i", *tokens.tolist()))
        f.write(struct.pack("<d", loss0))
        f.write(flat64(G, placement))
        f.write(struct.pack(f"<{steps}d", *losses))
        f.write(struct.pack(f"<{steps}d", *norms))
        f.write(struct.pack(f"<{steps}d", *lrs))
        f.write(flat64(final, placement))
    expected = 4 * (16 + n_tokens) + 8 * (1 + 2 * n_params + 3 * steps)
    assert os.path.getsize(path) == expected, path


def write_shard(path, tokens):
    """A token shard in llm.c's format (README.md, Data): int32 header[256] = {20240520, 1,
    count, 0...}, then the tokens as uint16."""
    header = [0] * 256
    header[0], header[1], header[2] = SHARD_MAGIC, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens.tolist()))


# ---------------------------------------------------------------------------------------
# The training-loop case: what ./train itself must produce (gradient accumulation over
# shard windows, the schedule, clipping, AdamW), read through its log and final checkpoint.
# ---------------------------------------------------------------------------------------
def shard_windows(shards):
    """The windows of one epoch with shuffling off (docs/data.md): the shards in order, each
    one's consecutive windows of B*T+1 tokens starting at 0, B*T, 2*B*T, ... while they fit.
    Returns (inputs, targets) pairs, each (B,T)."""
    out = []
    for tokens in shards:
        start = 0
        while start + B * T + 1 <= len(tokens):
            w = tokens[start: start + B * T + 1]
            out.append((w[:-1].reshape(B, T), w[1:].reshape(B, T)))
            start += B * T
    return out


def loop_step_batches(shards):
    """The micro-batches of every step: micro-step j of the run (j = s*LOOP_MICRO + i) reads
    window j of the epoch order, going back to the first window after the last."""
    windows = shard_windows(shards)
    return [[windows[(s * LOOP_MICRO + i) % len(windows)] for i in range(LOOP_MICRO)]
            for s in range(LOOP_STEPS)]


def loop_lr(s):
    """The learning rate of step s of the training-loop case."""
    return lr_at(s, LOOP_STEPS)


def make_loop_case():
    """The training-loop case: parameters, shards and the result of LOOP_STEPS steps, checked
    against torch.optim.AdamW. Returns what main() writes."""
    g = torch.Generator().manual_seed(LOOP_TOKEN_SEED)
    shards = [torch.randint(0, V, (n,), generator=g, dtype=torch.int64) for n in LOOP_SHARD_TOKENS]
    windows = shard_windows(shards)
    # the run must cross from the first shard to the second and wrap around to the first
    assert len(windows) < LOOP_STEPS * LOOP_MICRO < len(windows) + LOOP_MICRO * LOOP_STEPS
    dt = struct.unpack("<f", struct.pack("<f", LOOP_DT))[0]
    P = make_params(LOOP_PLACEMENT, LOOP_PARAM_SEED)
    step_batches = loop_step_batches(shards)
    loss0, G = step_loss_and_grads(P, LOOP_PLACEMENT, dt, step_batches[0])
    losses, norms, lrs, clipped, final = train(P, LOOP_PLACEMENT, dt, step_batches, LOOP_CLIP, loop_lr, LOOP_EPS)
    assert losses[0] == loss0
    ref = train_with_torch_adamw(P, LOOP_PLACEMENT, dt, step_batches, LOOP_CLIP, loop_lr, LOOP_EPS)
    for k in final:
        d = float((final[k] - ref[k]).abs().max())
        assert d < 1e-12, f"loop: AdamW mismatch vs torch.optim.AdamW on {k}: {d}"
    # clipping must trigger on some steps and not on others
    assert any(clipped) and not all(clipped), f"loop: clipped {clipped} (norms {norms})"
    print(f"{'loop':12s} windows/epoch={len(windows)} micro_steps={LOOP_MICRO} loss0={loss0:.10f} "
          f"clipped_steps={[s for s in range(LOOP_STEPS) if clipped[s]]}")
    print(f"{'':12s} step_loss={['%.6f' % x for x in losses]} "
          f"grad_norm={['%.4f' % x for x in norms]} lr={lrs}")
    return shards, P, loss0, G, losses, norms, lrs, final


def main():
    global torch
    torch = import_torch()
    torch.set_default_dtype(torch.float64)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    os.makedirs(out_dir, exist_ok=True)

    # The schedule must warm up, decay and end exactly at lr_min.
    assert lr_at(0) == LR / WARMUP and lr_at(WARMUP - 1) == LR and lr_at(STEPS - 1) == LR_MIN

    tokens = make_tokens()
    results = []
    # Compute and check every case first; write only when all checks passed.
    for i, (placement, dt_nominal) in enumerate((p, d) for p in PLACEMENTS for d in DTS):
        dt = struct.unpack("<f", struct.pack("<f", dt_nominal))[0]  # the float32 the file stores
        P = make_params(placement, PARAM_SEED_BASE + i)
        inputs, targets = batch(tokens, 0)
        loss0, G = loss_and_grads(P, placement, dt, inputs, targets)
        fd_err = check_finite_differences(P, placement, dt, inputs, targets, G, seed=7 + i)
        check_functional(P, placement, dt, inputs, targets, loss0, G)
        step_batches = [[batch(tokens, s)] for s in range(STEPS)]
        losses, norms, lrs, clipped, final = train(P, placement, dt, step_batches)
        assert losses[0] == loss0
        ref = train_with_torch_adamw(P, placement, dt, step_batches)
        for k in final:
            d = float((final[k] - ref[k]).abs().max())
            assert d < 1e-12, f"AdamW mismatch vs torch.optim.AdamW on {k}: {d}"
        assert any(clipped), f"{case_name(placement, dt_nominal)}: clipping never triggered"
        name = case_name(placement, dt_nominal)
        print(f"{name:12s} loss0={loss0:.10f} grad_norm0={norms[0]:.6f} "
              f"clipped_steps={[s for s in range(STEPS) if clipped[s]]} "
              f"final_step_loss={losses[-1]:.10f} fd_rel_err_max={fd_err:.2e}")
        print(f"{'':12s} step_loss={['%.6f' % x for x in losses]} "
              f"grad_norm={['%.4f' % x for x in norms]} lr={lrs}")
        results.append((name, placement, dt_nominal, P, loss0, G, losses, norms, lrs, final))

    loop = make_loop_case()

    for name, placement, dt_nominal, P, loss0, G, losses, norms, lrs, final in results:
        write_checkpoint(os.path.join(out_dir, name + ".model.bin"), P, placement, dt_nominal)
        write_expect(os.path.join(out_dir, name + ".expect.bin"), placement, tokens,
                     loss0, G, losses, norms, lrs, final)
    shards, P, loss0, G, losses, norms, lrs, final = loop
    for i, tokens in enumerate(shards):
        write_shard(os.path.join(out_dir, f"loop_train_{i:03d}.bin"), tokens)
    write_checkpoint(os.path.join(out_dir, "loop.model.bin"), P, LOOP_PLACEMENT, LOOP_DT)
    write_expect(os.path.join(out_dir, "loop.expect.bin"), LOOP_PLACEMENT, torch.zeros(0, dtype=torch.int64),
                 loss0, G, losses, norms, lrs, final, micro_steps=LOOP_MICRO)
    print(f"wrote {2 * len(results) + 2 + len(shards)} files to {out_dir}")


if __name__ == "__main__":
    main()
