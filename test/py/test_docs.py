"""Every code name that README.md and the pages of docs/ put in backticks exists in the tree, so no
word of the documentation points at a function, file, flag or command that is not there.

What counts as a code name (docs/README.md, *Names in backticks*, says it for writers); anything
else in backticks (a formula, a value, an output line) is text and is not checked:
  * a command: a span that starts with "make ", "python3 " or "./" and a program's name: make's
    targets must be the Makefile's, python3's script a file of the tree, ./X a program built from
    X.cpp (or run from X.py, X.sh) somewhere in the tree;
  * a flag: a span that starts with "-" and a letter: its name must occur in the code as "-name",
    "--name" or the quoted "name" a table of flags holds;
  * a place in a file: a path, ":" and a line (`dataloader.h:296`), perhaps ":" and more (a
    mutant's name, `eval.cpp:481:throw`): the file must exist (the line is not checked);
  * a path: a span with an extension of the tree's files (.h .cuh .cu .cpp .py .sh .js .md .csv
    .json .png .bin .txt .safetensors), or whose first folder is one of the tree's: it must exist
    (a file, a folder, or a glob that matches one). A bare file name (no folder) may also be one a
    program writes or reads: the code must name it. Paths under build/, out/ and runs/ are what
    the programs write, and a path with a wildcard or a placeholder (eN, NAME, N, ...) is a
    pattern: neither is checked;
  * an identifier: a name of letters, digits and "_", possibly qualified (A::b, a.b) and followed
    by "(...)", "<...>" or "[...]". A plain name must occur as a whole word in the code or be the
    name of a file of the tree without its extension (a test binary's, test_checkpoint); in A::b
    the member b must be declared in a file that defines A (class, struct, enum, namespace or
    alias); ops.b must be an op some op set declares (CudaOps, ReferenceOps, FastOps), model.b a
    method Backend or Gpt2 declares. JSON fields, CSV columns and log events are identifiers: the
    code that writes them names them. A constant in capitals may drop a library's prefix
    (`NOT_SUPPORTED` for CUBLAS_STATUS_NOT_SUPPORTED): it counts when the code has a name ending
    in it. A span that begins or ends with "_" is a piece of a name (`_mma`), not a name.
  * names of what the code calls or runs beside the tree: the libraries' (std::, cuda*, cublas*,
    CUBLAS_*, CUDA_*, nccl*, NCCL_*, MPI_*, omp_*) are theirs and not checked, nor is a one-letter
    placeholder (ops.X); any other name of another tool (PTX's `wgmma`, Slurm's `scancel`) must be
    in EXTERNAL_NAMES below, with its owner.
"The code" is every source of the tree outside docs/ and README.md (C++, CUDA, Python, shell, the
Makefile, the CI script), its comments left out, so that a name one comment mentions does not make
another comment true. Standard library only. Run by build/test_experiments (make test)."""
import fnmatch
import glob
import os
import re
import shlex
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXTENSIONS = (".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".js", ".md", ".csv", ".json", ".png", ".bin", ".txt",
              ".safetensors")
EXTERNAL = re.compile(r"^(?:std::|cuda|cublas|CUBLAS_|CUDA_|nccl|NCCL_|MPI_|mpi_|omp_|__)")
CODE_EXTENSIONS = (".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".js")
OUTPUT_FOLDERS = ("build/", "out/", "runs/", "out_")
PLACEHOLDER = re.compile(r"(?:^|[/_.*-])(?:eN|[A-Z][A-Z0-9]*|r|k|j)(?:$|[/_.*-])")
# Names of other tools the docs mention in backticks, with their owner.
EXTERNAL_NAMES = {
    "wgmma": "PTX (sm_90)", "mbarrier": "PTX", "stmatrix": "PTX", "cp.async.bulk": "PTX", "ex2": "PTX",
    "swapcontext": "glibc", "arc4random": "glibc", "_dl_find_object": "glibc", "scancel": "Slurm",
    "total_batch_size": "llm.c's train_gpt2.cu",
}
# Pages whose names are not checked yet: the experiments' pages, checked once they are rewritten.
NOT_YET_CHECKED = ("docs/experiments.md", "docs/claims.md", "docs/e1_*", "docs/e2_*", "docs/e3_*")
IDENTIFIER = re.compile(r"^(?P<name>[A-Za-z_]\w*(?:(?:::|\.)[A-Za-z_]\w*)*)(?:\(.*\)|<[^<>]*>|\[[^\[\]]*\])?$")
WORD = re.compile(r"[A-Za-z_]\w*")


def doc_files():
    """README.md and every page of docs/ (but NOT_YET_CHECKED), as paths from the root."""
    pages = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    return ["README.md"] + [p for p in pages if not any(fnmatch.fnmatch(p, pattern) for pattern in NOT_YET_CHECKED)]


def code_files():
    """Every source of the tree outside docs/, README.md, build/ and version control."""
    found = []
    for folder, dirs, files in os.walk(REPO):
        rel = os.path.relpath(folder, REPO)
        dirs[:] = [d for d in dirs if not (rel == "." and d in ("build", "docs", ".git", "runs", "out"))
                   and d != "__pycache__"]
        for name in files:
            path = os.path.normpath(os.path.join(rel, name))
            if path == os.path.join("test", "py", "test_docs.py"):
                continue  # names the rules' examples, present and stale
            if name.endswith(CODE_EXTENSIONS) or name == "Makefile" or path == os.path.join(".ci", "run"):
                found.append(path)
    return found


def without_comments(path, text):
    """The text of a source with its comments blanked: // and /* */ in C-like files, # lines and
    docstrings' neighbours kept in Python (a # comment is blanked), # in shell and make."""
    if path.endswith((".h", ".cuh", ".cu", ".cpp", ".js")):
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        return re.sub(r'//[^\n]*', "", text)
    return re.sub(r"(?m)(^|\s)#[^\n]*", r"\1", text)


class Tree:
    """The words of the code, the files that define each name, and the Makefile's targets."""

    def __init__(self):
        self.words = set()
        self.code = {}
        for path in code_files():
            with open(os.path.join(REPO, path), encoding="utf-8", errors="replace") as f:
                text = without_comments(path, f.read())
            self.code[path] = text
            self.words.update(WORD.findall(text))
        with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
            makefile = f.read()
        self.targets = set()
        for line in makefile.splitlines():
            match = re.match(r"^([\w./$() -]+?)\s*:(?!=)", line)
            if match:
                self.targets.update(t for t in match.group(1).split() if "$" not in t)

        self.stems = set()
        for folder, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in (".git", "build", "__pycache__")]
            self.stems.update(os.path.splitext(name)[0] for name in files)
        self.all_text = "\n".join(self.code.values())

    def defines(self, name):
        """The files whose code defines `name` as a class, struct, enum, namespace or alias."""
        n = re.escape(name)
        pattern = re.compile(r"\b(?:class|struct|enum(?:\s+class)?)\s+" + n + r"\b(?!\s*;)|\bnamespace\s+" + n +
                             r"\s*\{|\busing\s+" + n + r"\s*=")
        return [path for path, text in self.code.items() if pattern.search(text)]

    def enumerates(self, name, member):
        """Whether an enum `name` of the code has the enumerator `member`."""
        pattern = re.compile(r"\benum(?:\s+class)?\s+" + re.escape(name) + r"\b[^{;]*\{([^}]*)\}")
        return any(re.search(r"\b" + re.escape(member) + r"\b", body)
                   for text in self.code.values() for body in pattern.findall(text))

    def declares(self, member, paths):
        """Whether one of `paths` declares `member`: a type, or a function, variable or constant after
        its type ("void member(", "auto member =", "int member;")."""
        pattern = re.compile(r"(?:\b(?:class|struct|enum(?:\s+class)?|using|namespace)\s+" + re.escape(member) +
                             r"\b)|(?<!\breturn)(?<!\belse)(?<!\bnew)(?<!\bthrow)(?<!\bcase)[\w>&*]\s+" +
                             re.escape(member) + r"\s*[(=;{\[,]")
        return any(pattern.search(self.code[p]) for p in paths if p in self.code)

    def has_word(self, word, paths=None):
        if paths is None:
            return word in self.words
        pattern = re.compile(r"\b" + re.escape(word) + r"\b")
        return any(pattern.search(self.code[p]) for p in paths)


def backticked(path):
    """(line number, span) for every `span` of a Markdown file outside fenced code blocks."""
    spans = []
    fenced = False
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced or line.startswith("    "):
                continue
            for span in re.findall(r"``?([^`]+?)``?", line):
                spans.append((number, span.strip()))
    return spans


def program_exists(name):
    """Whether a program `name` (train, bench_gpu, gpu_check.sh) is built or run from a file of the tree."""
    stem = os.path.splitext(name)[0]
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in (".git", "build", "__pycache__")]
        if any(f in files for f in (stem + ".cpp", stem + ".py", stem + ".sh", name)):
            return True
    return False


def path_exists(span):
    span = span.rstrip("/")
    return os.path.exists(os.path.join(REPO, span)) or bool(glob.glob(os.path.join(REPO, span)))


def top_folders():
    return {name for name in os.listdir(REPO) if os.path.isdir(os.path.join(REPO, name)) and not name.startswith(".")}


OP_SETS = ("cuda_ops.cuh", "gpt2_cpu.h")


def problem(tree, span):
    """Why `span` names nothing in the tree, or None when it does or is not a code name."""
    if span in EXTERNAL_NAMES or span.startswith("_") or span.endswith("_"):
        return None
    words = span.split()
    if words[0] == "make":
        try:
            words = shlex.split(span)
        except ValueError:
            return "not a command make can read (quotes)"
        missing = [t for t in words[1:] if not t.startswith("-") and "=" not in t and t not in tree.targets]
        return f"make has no target {missing[0]}" if missing else None
    if words[0] in ("python3", "/usr/bin/python3"):
        script = next((w for w in words[1:] if not w.startswith("-")), "")
        if not script.endswith(".py"):
            return None
        return None if os.path.isfile(os.path.join(REPO, script)) else f"no script {script}"
    if re.match(r"^\./[A-Za-z_][\w.]*$", words[0]):
        return None if program_exists(words[0][2:]) else f"no program {words[0][2:]}"
    if re.match(r"^--?[A-Za-z]", span):
        flag = re.match(r"^--?([A-Za-z][\w-]*)", span).group(1)
        dashes = "--" if span.startswith("--") else "-"
        if (dashes + flag) in tree.all_text or f'"{flag}"' in tree.all_text:
            return None
        return f"no program takes the flag {dashes}{flag}"
    place = re.match(r"^([\w./-]+\.(?:h|cuh|cu|cpp|py|sh)):\d+(:\S*)?$", span)
    if place:
        return None if path_exists(place.group(1)) else f"no file {place.group(1)}"
    match = IDENTIFIER.match(span)
    if match and not (match.group("name").endswith(EXTENSIONS) or "/" in match.group("name")):
        return identifier_problem(tree, match.group("name"))
    if " " in span or span.startswith((".", "/")) or not (span.endswith(EXTENSIONS) or "/" in span):
        return None
    first = span.split("/")[0]
    if "/" in span and not span.endswith(EXTENSIONS) and first not in top_folders():
        return None  # not a path: a slash in prose (lr/10, forward/backward)
    if span.startswith(OUTPUT_FOLDERS) or "*" in span or "%" in span or PLACEHOLDER.search(span) or "<" in span:
        return None
    if path_exists(span):
        return None
    if "/" not in span and (os.path.splitext(span)[0] in tree.stems or span in tree.all_text):
        return None  # a file of the tree elsewhere, or one a program names (config.json)
    return "no such file or folder"


def identifier_problem(tree, name):
    if EXTERNAL.match(name):
        return None
    if "::" in name:
        owner, member = name.rsplit("::", 1)
        owner_last = owner.split("::")[-1]
        if EXTERNAL.match(owner):
            return None
        defining = tree.defines(owner_last)
        if not defining:
            return f"nothing defines {owner_last}"
        if re.fullmatch(r"[A-Z]", member):
            return None
        if tree.declares(member, defining) or tree.enumerates(owner_last, member):
            return None
        return f"{owner_last} ({', '.join(defining)}) declares no {member}"
    if "." in name:
        head, member = name.split(".", 1)[0], name.rsplit(".", 1)[1]
        if re.fullmatch(r"[A-Z]", member):
            return None
        if head == "ops":
            return None if tree.declares(member, OP_SETS) else f"no op set ({', '.join(OP_SETS)}) declares {member}"
        if head == "model":
            return None if tree.declares(member, ["backend.h", "gpt2.h"]) else f"Backend and Gpt2 declare no {member}"
        return None if tree.has_word(member) else f"no {member} in the code"
    if tree.has_word(name) or name in tree.stems:
        return None
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and re.search(r"\w_" + re.escape(name) + r"\b", tree.all_text):
        return None  # a library's constant without its prefix
    return f"no {name} in the code"


class Docs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tree = Tree()

    def test_every_code_name_in_backticks_exists(self):
        bad = []
        for path in doc_files():
            for line, span in backticked(path):
                why = problem(self.tree, span)
                if why:
                    bad.append(f"{path}:{line}: `{span}`: {why}")
        self.assertEqual(bad, [], "code names in backticks that name nothing in the tree:\n" + "\n".join(bad))

    def test_every_link_points_at_a_file(self):
        bad = []
        for path in doc_files():
            with open(os.path.join(REPO, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    for target in re.findall(r"\]\(([^)\s]+)\)", line):
                        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                            continue
                        file = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
                        if not os.path.exists(os.path.join(REPO, file)):
                            bad.append(f"{path}:{number}: ({target}): no such file")
        self.assertEqual(bad, [], "links to files that do not exist:\n" + "\n".join(bad))

    def test_the_rules_catch_a_stale_name(self):
        # Names that once were and are not, and one of each kind that is.
        for stale in ["gpu::layernorm_forward", "ModelPasses", "ops.residual_backward", "cuda/no_such_file.h",
                      "-no_such_flag", "make no-such-target", "./no_such_program", "Gpt2::no_such_method",
                      "Blas::fused_gemm", "no_such_file.h", "run/no_such_file.h:12:throw"]:
            self.assertIsNotNone(problem(self.tree, stale), stale)
        for present in ["Gpt2::backward", "CudaOps::layernorm_forward", "layernorm_forward_kernel", "ops.matmul_forward",
                        "model.backward", "cuda_ops.cuh", "bench/", "-dt", "make test", "./train -h",
                        "python3 sweep.py --claims", "val_loss", "data/mobydick_val_*.bin", "config.json",
                        "test_checkpoint", "std::exp", "model.backward(1/micro-steps)", "lr/10",
                        "dataloader.h:296", "eval.cpp:481:throw"]:
            self.assertIsNone(problem(self.tree, present), present)


if __name__ == "__main__":
    unittest.main()
