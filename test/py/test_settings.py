"""experiments/settings.py against ./train's and ./eval's own tables of flags (`-flags_json 1`,
docs/cli.md §1): every flag a setting is passed as exists in the program's table, every default
and preset value is one that flag takes, the defaults Python keeps beside a program's rule are
that rule's; and flag_table.py's reading of a table (cached per binary, one line for a missing or
old binary). Run by build/test_experiments (make test), after `make train eval`."""
import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_settings.py")

from experiments import cli, flag_table  # noqa: E402
from experiments.grid import PLACEMENTS, InputError, make_grid, parse_list  # noqa: E402
from experiments.settings import PRESETS, PROGRAM_DEFAULT, SETTINGS, ZERO_MEANS_DEFAULT, default_warmup, \
    defaults  # noqa: E402

BIN = os.environ.get("GPT2_BIN_DIR", REPO)  # where ./train and ./eval are
TRAIN, EVAL = os.path.join(BIN, "train"), os.path.join(BIN, "eval")
# The grid's axes and the ./train flag each value is passed as (runner.train_command).
GRID_FLAGS = {"ln": ("ln", "-ln"), "dt": ("dt", "-dt"), "wd": ("wd", "-wd"), "lr": ("lr", "-lr"),
              "seeds": ("int", "-seed"), "precision": ("precision", "-precision"), "post_lr": ("lr", "-lr"),
              "post_seeds": ("int", "-seed")}


def passed_values(settings):
    """(setting name, binary, flag, value) of every value the settings pass to ./train or ./eval."""
    out = []
    for s in SETTINGS:
        value = settings.get(s.name)
        if value is None or (value == 0 and s.name in ZERO_MEANS_DEFAULT):
            continue
        if s.kind == "list":
            if s.name in GRID_FLAGS:
                kind, flag = GRID_FLAGS[s.name]
                for v in parse_list(value, kind, "--" + s.name):
                    out.append((s.name, TRAIN, flag, v[2] if isinstance(v, tuple) else v))
            continue
        for binary, flag in ((TRAIN, s.train), (EVAL, s.eval)):
            if flag:
                out.append((s.name, binary, flag, value))
    return out


class SettingsAgainstThePrograms(unittest.TestCase):
    def test_every_flag_a_setting_is_passed_as_is_in_the_programs_table(self):
        # (fails when ./train or ./eval renames or drops a flag that settings.py passes)
        train, evaluate = flag_table.flag_table(TRAIN), flag_table.flag_table(EVAL)
        for s in SETTINGS:
            if s.train:
                self.assertTrue(s.train[1:] in train, f"--{s.name}: ./train has no flag {s.train}")
            if s.eval:
                self.assertTrue(s.eval[1:] in evaluate, f"--{s.name}: ./eval has no flag {s.eval}")
            if s.default is PROGRAM_DEFAULT:
                self.assertTrue(s.train or s.eval, f"--{s.name}: a program's default, but no flag")

    def test_the_defaults_and_every_presets_values_are_values_the_flags_take(self):
        base = defaults(TRAIN, EVAL)
        for name, preset in [("defaults", {})] + list(PRESETS.items()):
            settings = {**base, **preset}
            for setting, binary, flag, value in passed_values(settings):
                with self.subTest(preset=name, setting=setting, value=value):
                    if flag_table.flag_row(binary, flag)["values"]["kind"] != "text":
                        self.assertTrue(flag_table.in_values(flag_table.flag_row(binary, flag), value),
                                        f"{name}: --{setting} {value} is not a value of {binary} {flag}")

    def test_a_programs_default_is_taken_as_the_settings_type(self):
        base = defaults(TRAIN, EVAL)
        for s in SETTINGS:
            if s.default is PROGRAM_DEFAULT:
                row = flag_table.flag_row(TRAIN if s.train else EVAL, s.train or s.eval)
                value = base[s.name]
                if s.kind == "list":
                    self.assertEqual(value, row["default_value"], s.name)
                else:
                    self.assertIsInstance(value, s.kind, s.name)
                    self.assertEqual(value, float(row["default_value"]), s.name)

    def test_the_defaults_kept_beside_a_programs_rule_follow_that_rule(self):
        train = flag_table.flag_table(TRAIN)
        # --warmup None is ./train's default, min(20, steps/10), which default_warmup computes.
        self.assertEqual(train["warmup"]["default"], "min(20, steps/10)")
        self.assertEqual([default_warmup(n) for n in (1, 9, 10, 199, 200, 201, 5000)], [0, 0, 1, 19, 20, 20, 20])
        # --lr-min-ratio 0.1 is ./train's -lr_min default, lr/10.
        self.assertEqual(train["lr_min"]["default"], "lr/10")
        self.assertEqual(next(s.default for s in SETTINGS if s.name == "lr_min_ratio"), 0.1)
        # The placements the figures order and label are -ln's.
        self.assertEqual(sorted(PLACEMENTS), sorted(train["ln"]["values"]["choices"]))


class ThirdRoundE1(unittest.TestCase):
    """The third round's E1 grid as docs/rounds.md pre-registered it (*E1, refined where the placements
    part*), now history: the sentences stay as they were written."""

    def test_the_decision_is_in_the_history(self):
        with open(os.path.join(REPO, "docs", "rounds.md"), encoding="utf-8") as f:
            doc = " ".join(f.read().split())
        self.assertIn("lr ∈ {3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.13, 0.17, 0.23, 0.3, 1} × seeds 101–105", doc)
        self.assertIn("only the half-decade lrs 3e-4 … 1 with seeds 101–103", doc)


class FourthRoundGrids(unittest.TestCase):
    """The grids of the presets e1, e2, e3 as the fourth round designs them (docs/protocol.md, *The
    design*, after its review), typed here from that design: E1 Pre-, Peri-LN × Δt {1, 0.1} × lr
    {1e-3, 3e-3, 0.01, 0.03} × seeds 401–422; E2 Pre-, Peri-LN × Δt 1 × lr {0.01, 0.03} × L {64, 128}
    × seeds 501–503 (501–504 less the budget's pre-registered cut, *Budget*); E3 Pre-, Peri-LN × Δt
    {1, 0.1} × wd {0, 0.1} × lr {0.1, 0.13, 0.17, 0.23, 0.31, 0.42, 0.56, 0.75, 1} × seeds 601–605."""
    DESIGN = {
        "e1": dict(ln={"pre", "peri"}, dt={1.0, 0.1}, wd={0.1}, lr={1e-3, 3e-3, 0.01, 0.03}, depth={None},
                   seed=set(range(401, 423))),
        "e2": dict(ln={"pre", "peri"}, dt={1.0}, wd={0.1}, lr={0.01, 0.03}, depth={64, 128}, seed=set(range(501, 504))),
        "e3": dict(ln={"pre", "peri"}, dt={1.0, 0.1}, wd={0.0, 0.1},
                   lr={0.1, 0.13, 0.17, 0.23, 0.31, 0.42, 0.56, 0.75, 1.0}, depth={None}, seed=set(range(601, 606))),
    }

    def test_every_preset_runs_the_whole_design_and_nothing_else(self):
        base = defaults(TRAIN, EVAL)
        for name, design in self.DESIGN.items():
            s = argparse.Namespace(**{**base, **PRESETS[name], "out": "/nowhere"})
            runs = make_grid(s)
            cells = {tuple(getattr(r, k) for k in ("ln", "dt", "wd", "lr", "depth", "seed")) for r in runs}
            want = {(ln, dt, wd, lr, depth, seed) for ln in design["ln"] for dt in design["dt"] for wd in design["wd"]
                    for lr in design["lr"] for depth in design["depth"] for seed in design["seed"]}
            self.assertEqual(cells, want, name)
            self.assertEqual(len(runs), len(want), name)
        self.assertEqual([len(make_grid(argparse.Namespace(**{**base, **PRESETS[n], "out": "/x"})))
                          for n in ("e1", "e2", "e3")], [352, 24, 360])


class ReadingATable(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="settings_")

    def tearDown(self):
        shutil.rmtree(self.folder)

    def fake_program(self, name, script):
        path = os.path.join(self.folder, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + script + "\n")
        os.chmod(path, 0o755)
        return path

    def table_printing(self, name, flags, mtime):
        rows = [dict(name=n, syntax="N in [0, 9]", values=dict(kind="integer", min=0, max=9), default=str(d),
                     default_value=str(d), default_number=d, help="") for n, d in flags]
        path = self.fake_program(name, "cat <<'EOF'\n" + json.dumps(dict(program="train", flags=rows)) + "\nEOF")
        os.utime(path, ns=(mtime, mtime))
        return path

    def test_a_table_is_read_again_only_when_the_binary_changes(self):
        path = self.table_printing("train", [("steps", 3)], 10**18)
        self.assertEqual(flag_table.default_of(flag_table.flag_row(path, "-steps")), 3)
        self.table_printing("train", [("steps", 5)], 10**18)  # same path and time: the cached table
        self.assertEqual(flag_table.default_of(flag_table.flag_row(path, "-steps")), 3)
        self.table_printing("train", [("steps", 5)], 10**18 + 1)  # rebuilt
        self.assertEqual(flag_table.default_of(flag_table.flag_row(path, "-steps")), 5)
        with self.assertRaisesRegex(InputError, "has no flag -lr"):
            flag_table.flag_row(path, "-lr")

    def test_a_missing_or_old_binary_is_one_line(self):
        with self.assertRaisesRegex(InputError, "not found: build it first"):
            flag_table.flag_table(os.path.join(self.folder, "nothing"))
        old = self.fake_program("old", "echo 'train: unknown flag -flags_json' >&2; exit 2")
        with self.assertRaisesRegex(InputError, r"unknown flag -flags_json\): built before -flags_json\? rebuild it"):
            flag_table.flag_table(old)

    def test_sweep_py_with_an_old_binary_exits_2_with_one_line(self):
        old = self.fake_program("old", "echo 'train: unknown flag -flags_json' >&2; exit 2")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["--train-bin", old, "--dry-run", "--out", os.path.join(self.folder, "out")],
                              "doc", "sweep.py")
        self.assertEqual(status, 2)
        self.assertEqual(err.getvalue().count("\n"), 1, err.getvalue())
        self.assertIn("rebuild it (make train eval)", err.getvalue())
        self.assertFalse(os.path.exists(os.path.join(self.folder, "out")))

    def test_sweep_py_refuses_a_value_outside_the_flags_range_naming_the_flags_values(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["--beta2", "1", "--dry-run", "--out", os.path.join(self.folder, "out")], "doc", "sweep.py")
        self.assertEqual(status, 2)
        self.assertEqual(err.getvalue(), "sweep: --beta2: 1 is not a value of train -beta2 (it takes X in [0, 1))\n")


if __name__ == "__main__":
    unittest.main()
