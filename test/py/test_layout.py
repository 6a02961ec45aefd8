"""The layout of the sources (README "Code map"): the model and the kernels at the top level, the
machinery in the folders the Makefile names (SOURCE_DIRS). Checked from the files themselves:
every #include of the project names an existing file by its path from the repository root; the
includes go one way, util/ ← cuda/, distributed/ ← the top level ← the other folders (bench/
among them) ← the programs (no file includes one of a later layer); nothing that ./train and
./eval compile includes bench/ (the benchmarks wrap the op set from outside); no include cycle;
README's code map lists every source file, and nothing else. Standard library only. Run by
build/test_experiments (make test)."""
import os
import re
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C_SOURCES = (".h", ".cuh", ".cu", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def source_dirs():
    """The folders of machinery, as the Makefile's SOURCE_DIRS line names them."""
    text = read("Makefile")
    match = re.search(r"^SOURCE_DIRS\s*:=\s*(.+)$", text, re.M)
    return match.group(1).split()


def sources():
    """Every source file of the top level and the folders, as paths from the repository root."""
    found = []
    for folder in [""] + source_dirs():
        for name in sorted(os.listdir(os.path.join(REPO, folder) if folder else REPO)):
            path = os.path.join(folder, name) if folder else name
            if os.path.isfile(os.path.join(REPO, path)) and name.endswith(C_SOURCES + (".py",)):
                found.append(path)
    return found


# The folders below the top level: what the model and the kernels are built on, knowing nothing of
# them (as llm.c's llmc/ is to train_gpt2.cu).
FOUNDATIONS = ("cuda/", "distributed/")
# What the programs ./train and ./eval compile: their sources, and the CUDA backend's.
PROGRAM_SOURCES = ("train.cpp", "eval.cpp", "gpt2.cu")


def layer(path):
    """0: util/; 1: cuda/ and distributed/ (the kernels' shared parts, the process group); 2: the top
    level's headers and gpt2.cu (the model, the kernels, the data); 3: the other folders (the
    machinery around the model, and bench/: the cost model, the watched op set); 4: the programs
    (a .cpp file anywhere, and bench/'s CUDA translation unit)."""
    if path.endswith(".cpp") or (path.startswith("bench/") and path.endswith(".cu")):
        return 4
    if path.startswith("util/"):
        return 0
    if path.startswith(FOUNDATIONS):
        return 1
    if "/" not in path:
        return 2
    return 3


def includes(path):
    """The project's files that `path` includes ("..." includes that exist from the root)."""
    return INCLUDE.findall(read(path))


def is_system_like(name):
    """An include in quotes that is not one of ours: the CUDA toolkit's, cuBLAS's, NCCL's, MPI's."""
    return name.split("/")[0] in ("cuda", "cublas_v2.h", "cublasLt.h", "cuda_runtime.h", "cuda_bf16.h",
                                  "nccl.h", "mpi.h", "cuda_fp16.h")


class Layout(unittest.TestCase):
    def setUp(self):
        self.files = [f for f in sources() if f.endswith(C_SOURCES)]
        self.graph = {f: [i for i in includes(f) if not is_system_like(i)] for f in self.files}

    def test_every_include_is_a_path_from_the_root(self):
        bad = [f"{f}: \"{i}\"" for f, incs in self.graph.items() for i in incs
               if not os.path.isfile(os.path.join(REPO, i))]
        self.assertEqual(bad, [], "includes that name no file from the repository root")

    def test_includes_go_one_way(self):
        bad = [f"{f} (layer {layer(f)}) includes {i} (layer {layer(i)})" for f, incs in self.graph.items()
               for i in incs if os.path.isfile(os.path.join(REPO, i)) and layer(i) > layer(f)]
        bad += [f"{f} includes {i}" for f, incs in self.graph.items() if f.startswith("util/")
                for i in incs if not i.startswith("util/")]
        self.assertEqual(bad, [], "an include against the layers util/ <- cuda/, distributed/ <- top level <- folders <- programs")

    def test_the_programs_compile_nothing_of_bench(self):
        # Every file ./train and ./eval compile, followed through its includes.
        seen, todo = set(), list(PROGRAM_SOURCES)
        while todo:
            f = todo.pop()
            if f in seen or not os.path.isfile(os.path.join(REPO, f)):
                continue
            seen.add(f)
            todo.extend(i for i in includes(f) if not is_system_like(i))
        self.assertEqual(sorted(f for f in seen if f.startswith("bench/")), [],
                         "files of bench/ that ./train or ./eval compile: the benchmarks must wrap the op set from outside")

    def test_no_include_cycle(self):
        state = {}  # file -> 1 while on the path, 2 when done

        def visit(f, path):
            state[f] = 1
            for i in self.graph.get(f, []):
                if state.get(i) == 1:
                    return path + [f, i]
                if i in self.graph and state.get(i) is None:
                    cycle = visit(i, path + [f])
                    if cycle:
                        return cycle
            state[f] = 2
            return None

        for f in self.files:
            if state.get(f) is None:
                cycle = visit(f, [])
                self.assertIsNone(cycle, f"include cycle: {' -> '.join(cycle or [])}")

    def test_the_code_map_lists_every_source_file(self):
        readme = read("README.md")
        section = readme.split("\n## Code map\n", 1)[1].split("\n## ", 1)[0]
        named = set(re.findall(r"`([\w./-]+\.(?:h|cuh|cu|cpp|py))`", section))
        listed = set(sources())
        self.assertEqual(sorted(listed - named), [], "source files the code map leaves out")
        self.assertEqual(sorted(f for f in named - listed if not os.path.isfile(os.path.join(REPO, f))), [],
                         "files the code map names that do not exist")

    def test_the_folders_hold_the_machinery(self):
        # The top level holds the programs, the model, its CPU and CUDA ops and the data; a file
        # of a folder is found by the folder's name (README "Code map" says what each holds).
        top = [f for f in sources() if "/" not in f]
        self.assertTrue({"train.cpp", "eval.cpp", "model.h", "gpt2.h", "gpt2.cu", "cpu_ops.h", "layernorm.cuh",
                         "attention.cuh", "dataloader.h", "tokenizer.h", "prepare_data.py"} <= set(top))
        for folder in source_dirs():
            self.assertTrue(any(f.startswith(folder + "/") for f in sources()), f"{folder}/ holds no source")


if __name__ == "__main__":
    unittest.main()
