"""Writes the seed corpora of the fuzz targets (docs/testing.md §4) into test/fuzz/<target>/:
small valid files of each format (the layouts of docs/formats.md) and a few
broken ones. Run from the repository root: python3 test/fuzz/make_seeds.py"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)))


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def header(words):
    return struct.pack("<256i", *(list(words) + [0] * (256 - len(words))))


# Token shards: int32 header[256] (20240520, 1, count), then uint16 tokens.
tokens = list(range(20))
shard = header([20240520, 1, len(tokens)]) + struct.pack(f"<{len(tokens)}H", *tokens)
write("shard", "valid", shard)
write("shard", "truncated", shard[:-3])
write("shard", "bad_magic", header([20240521, 1, 20]) + shard[1024:])

# Checkpoints: int32 header[256] (20240326, version, maxT, V, L, NH, C, Vp[, placement, dt bits]),
# then the float32 parameters. maxT 2, V 3, Vp 4, L 1, NH 1, C 2.
maxT, V, Vp, L, NH, C = 2, 3, 4, 1, 1, 2
def num_params(peri):
    n = Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    return n + (4 * L * C if peri else 0)
dt_bits = struct.unpack("<i", struct.pack("<f", 0.1))[0]
pre = header([20240326, 3, maxT, V, L, NH, C, Vp]) + struct.pack(f"<{num_params(False)}f", *[0.5] * num_params(False))
peri = header([20240326, 100, maxT, V, L, NH, C, Vp, 2, dt_bits]) + struct.pack(f"<{num_params(True)}f", *[0.5] * num_params(True))
write("checkpoint", "llmc_pre", pre)
write("checkpoint", "peri_dt01", peri)
write("checkpoint", "truncated", peri[:1100])

# Optimiser states for 16 parameters: int32 header[256] (20251129, 1, steps, placement, params
# (uint64), seed (uint64), epoch, cursor (uint64), first loss (float64)), then m and v.
def state(steps, seed):
    h = struct.pack("<iiiiQQQQd", 20251129, 1, steps, 0, 16, seed, 0, 3, 10.5) + b"\0" * (1024 - 56)
    return h + struct.pack("<32f", *[0.01] * 32)
write("state", "valid", state(8, 42))
write("state", "other_seed", state(8, 7))
write("state", "wrong_steps", state(4, 42))
write("state", "longer", state(8, 42) + b"x")

# Tokenizer files: uint32 header[256] (20240328, 2, V, eot, merges), V tokens (length byte +
# bytes), merges (left, right). 256 bytes, "ab", "<|endoftext|>"; one merge a + b.
vocab = [bytes([b]) for b in range(256)] + [b"ab", b"<|endoftext|>"]
body = b"".join(bytes([len(t)]) + t for t in vocab)
tok = struct.pack("<256I", *([20240328, 2, len(vocab), 257, 1] + [0] * 251)) + body + struct.pack("<2I", 97, 98)
write("tokenizer", "valid", tok)
write("tokenizer", "decode_only", struct.pack("<256I", *([20240328, 2, len(vocab), 257, 0] + [0] * 251)) + body)
write("tokenizer", "bad_merge", tok[:-8] + struct.pack("<2I", 98, 97))

# Flags: arguments separated by NUL bytes.
for name, args in {"placement": ["-ln", "peri", "-dt", "0.1"], "schedule": ["-steps", "1000", "-warmup", "20", "-lr", "6e-4"],
                   "size": ["-init", "l2h2c16v96t16", "-B", "4", "-T", "64"], "bad": ["-B", "x", "-steps"],
                   "resume": ["-out", "runs/x", "-resume", "1", "-overwrite", "0"]}.items():
    write("flags", name, b"\0".join(a.encode() for a in args))

# config.json: one JSON object, one member per line (docs/cli.md §4), a resumed one, and broken ones.
config = ('{\n  "command": "./train -ln peri -dt 0.1",\n  "backend": "cpu (fp32, 2 threads)",\n  "model": "fresh d6",\n'
          '  "placement": "peri",\n  "dt": 0.1,\n  "L": 6,\n  "train_files": ["data/mobydick_train_000000.bin"],\n'
          '  "B": 8,\n  "lr": 0.0006,\n  "eps": 1e-08,\n  "seed": 42,\n  "resumed_at_step": null\n}\n')
write("config", "valid", config.encode())
write("config", "resumed", config.replace('"resumed_at_step": null', '"resumed_at_step": 250,\n  "steps_changes": '
                                          '[{"at_step": 250, "from": 1000, "to": 2000}]').encode())
write("config", "escapes", b'{"command": "\\u00e9\\ud83d\\ude00 \\"x\\" \\\\ \\n", "yes": true, "no": false}')
write("config", "truncated", config[:40].encode())
write("config", "not_object", b"[1, -0, 1e999, 0.5e-3]")

# GPT-2 safetensors (docs/formats.md §5): u64 header length, a JSON header padded to 8 bytes,
# the F32 data. A Pre-LN model with L 1, C 2, V 3, maxT 2 and n_head 1 in __metadata__, the same
# as Peri-LN with its four extra norms, and broken ones.
import json  # noqa: E402


def safetensors(shapes, metadata):
    header, data = {"__metadata__": metadata}, b""
    for name in sorted(shapes):
        n = 1
        for d in shapes[name]:
            n *= d
        header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [len(data), len(data) + 4 * n]}
        data += struct.pack(f"<{n}f", *[0.25] * n)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def gpt2_shapes(peri):
    shapes = {"wte.weight": [V, C], "wpe.weight": [maxT, C], "ln_f.weight": [C], "ln_f.bias": [C],
              "h.0.attn.c_attn.weight": [C, 3 * C], "h.0.attn.c_attn.bias": [3 * C],
              "h.0.attn.c_proj.weight": [C, C], "h.0.mlp.c_fc.weight": [C, 4 * C], "h.0.mlp.c_fc.bias": [4 * C],
              "h.0.mlp.c_proj.weight": [4 * C, C]}
    norms = ["ln_1", "ln_2"] + (["ln_1o", "ln_2o"] if peri else [])
    for name in [f"{n}.weight" for n in norms] + [f"{n}.bias" for n in norms] + ["attn.c_proj.bias", "mlp.c_proj.bias"]:
        shapes["h.0." + name] = [C]
    return shapes


pre_st = safetensors(gpt2_shapes(False), {"format": "pt", "n_head": "1"})
write("safetensors", "pre", pre_st)
write("safetensors", "peri_dt01", safetensors(gpt2_shapes(True), {"dt": "0.1", "format": "pt", "n_head": "1", "placement": "peri"}))
write("safetensors", "truncated", pre_st[:-5])
