"""experiments.results.load and the collection of run folders into a sweep's tables, on
hand-written log.jsonl, eval.json and result.json files. Run by build/test_experiments."""
import json
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from experiments.python import require  # noqa: E402

require(("numpy", "scipy", "pandas"), "test_results.py")

from experiments import collect  # noqa: E402
from experiments.grid import Run  # noqa: E402
from experiments.results import ResultsError, load  # noqa: E402

STATS = {"step": 0, "event": "stats", "mean_abs": [0.1, 0.2, 0.4], "entry_var": [1, 2, 3], "data_var": [1, 1, 1],
         "grad_norm": [5, 4, 3], "rms": [0.2, 0.3, 0.5], "grad_norm_scaled": [1, 1.2, 1.5],
         "attn_logit_max": [7, 9], "param_norm": [2, 2], "fcproj_grad_norm": [0.5, 0.6], "mlp_hidden_rms": [1, 2],
         "logit_max": 3.5, "log_z_mean": 4.6}
EVAL = {"val_loss": 4.0, "unigram_ce": 5.0, "bigram_ce": 4.5, "accuracy": 0.25, "ppl_seq": 60.0,
        "rouge": {"rouge1_stem": 0.2, "rougeL_stem": 0.1},
        "layers": {"mean_abs": [0.5, 1.0, 2.0], "entry_var": [1, 2, 4], "data_var": [1, 1, 1], "grad_norm": [3, 2, 1],
                   "rms": [0.6, 1.1, 2.2], "grad_norm_scaled": [1.8, 2.2, None], "param_grad_norm": [1, 2],
                   "attn_logit_max": [5, 8], "param_norm": [3, 3], "fcproj_grad_norm": [0.1, 0.2],
                   "mlp_hidden_rms": [1, 1]},
        "sensitivity": {"block_mean": [1.5, 2.5], "block_max": [3, 4]},
        "uncertainty": {"mean_dx": [0.1, 0.2, 0.3], "w2_bound": [0.1, 0.3, 0.9], "relative_amplification": [1, 1.5, 0.7]}}


OUTCOME = dict(event="outcome", outcome="ok", spikes=2, max_loss=20.0, max_loss_step=1, max_attn_logit=9,
               max_mean_abs_L=0.4)


def write_run(folder, losses, stats=True, tail="", ev=EVAL, result=None, last=OUTCOME):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "log.jsonl"), "w") as f:
        for step, loss in enumerate(losses):
            f.write(json.dumps(dict(step=step, loss=loss, lr=1e-3, grad_norm=1.0, ms=1.0, tok_s=10.0)) + "\n")
            if step == 0 and stats:
                f.write(json.dumps(STATS) + "\n")
        f.write(json.dumps(dict(step=len(losses), val_loss=4.0, val_ppl=54.6)) + "\n")
        f.write(json.dumps(dict(step=len(losses), **last)) + "\n" + tail)
    if ev is not None:
        with open(os.path.join(folder, "eval.json"), "w") as f:
            json.dump(ev, f)
    if result is not None:
        with open(os.path.join(folder, "result.json"), "w") as f:
            json.dump(result, f)


class Load(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_a_run_folder(self):
        write_run(self.dir, [8.0, 7.0, 6.5], tail='{"step": 3, "loss": 6.')  # the last line cut short
        run = load(self.dir)
        self.assertEqual(list(run.steps.step), [0, 1, 2])
        self.assertEqual(list(run.steps.loss), [8.0, 7.0, 6.5])
        self.assertEqual(list(run.evals.val_loss), [4.0])
        self.assertEqual(list(run.events.event), ["outcome"])
        # stats: one row per layer; block series start at layer 1.
        self.assertEqual(list(run.stats.layer), [0, 1, 2])
        self.assertEqual(list(run.stats.mean_abs), [0.1, 0.2, 0.4])
        self.assertTrue(run.stats.attn_logit_max.isna().iloc[0])
        self.assertEqual(list(run.stats.attn_logit_max[1:]), [7, 9])
        self.assertEqual(list(run.stats.logit_max), [3.5] * 3)
        self.assertEqual(run.eval["val_loss"], 4.0)
        self.assertEqual(list(run.eval_layers.sens_mean[1:]), [1.5, 2.5])
        self.assertEqual(list(run.eval_layers.w2_bound), [0.1, 0.3, 0.9])

    def test_a_log_that_is_not_trains(self):
        write_run(self.dir, [8.0, 7.0])
        with open(os.path.join(self.dir, "log.jsonl"), "ab") as f:
            f.write(b"\xff\xfe not json\n{\"step\": 9, \"loss\": 1}\n")
        with self.assertRaisesRegex(ResultsError, r"log.jsonl: line 6 is not a log record"):
            load(self.dir)

    def test_nothing_to_load(self):
        with self.assertRaisesRegex(ResultsError, "not a ./train -out folder"):
            load(self.dir)
        with open(os.path.join(self.dir, "sweep.json"), "w") as f:
            f.write("{}")
        with self.assertRaisesRegex(ResultsError, "no results.csv yet"):
            load(self.dir)


class Collect(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_run_folders_into_tables(self):
        done = Run("pre", 1.0, 0.1, 1e-3, None, None, 1, self.dir)
        stopped = Run("pre", 1.0, 0.1, 1e-3, None, None, 2, self.dir)
        missing = Run("pre", 1.0, 0.1, 1e-3, None, None, 3, self.dir)
        losses = [8.0] + [float(x) for x in range(20, 0, -1)]  # the last 10: 10, 9, ..., 1
        write_run(done.dir, losses, result=dict(outcome="ok", spikes=2, train_seconds=3.0))
        write_run(stopped.dir, [8.2, 9.0], stats=False, ev=None,
                  result=dict(outcome="diverged", stopped_step=1, reason="rise", spikes=0),
                  last=dict(event="diverged", outcome="diverged", reason="rise", spikes=0, max_loss=9.0, max_loss_step=1))
        self.assertEqual(collect.collect(self.dir, [done, stopped, missing]), [missing.name])
        sweep = load(self.dir)
        first, second = sweep.results.iloc[0], sweep.results.iloc[1]
        self.assertEqual(list(sweep.results.run), [done.name, stopped.name])
        self.assertEqual((first.outcome, first.spikes, first.first_train_loss), ("ok", 2, 8.0))
        self.assertEqual(first.final_train_loss, 5.5)  # mean of 10..1
        self.assertEqual((first.val_loss, first.unigram_ce, first.rouge1_stem), (4.0, 5.0, 0.2))
        self.assertEqual((first.mean_abs_0, first.mean_abs_L, first.mean_abs_growth), (0.5, 2.0, 4.0))
        self.assertEqual((first.attn_logit_max, first.sens_mean_max, first.relative_amplification_L), (8, 2.5, 0.7))
        self.assertEqual((first.train_stats_step, first.train_mean_abs_0, first.train_mean_abs_L), (0, 0.1, 0.4))
        self.assertTrue(first[["grad_norm_scaled_L"]].isna().all())
        # What ./train's last record says of the whole run: its extremes.
        self.assertEqual((first.max_loss, first.max_loss_step, first.train_max_attn_logit, first.train_max_mean_abs_L),
                         (20.0, 1, 9, 0.4))
        self.assertEqual((second.outcome, second.stopped_step, second.first_train_loss), ("diverged", 1, 8.2))
        self.assertEqual((second.max_loss, second.max_loss_step), (9.0, 1))
        self.assertTrue(second[["train_max_attn_logit"]].isna().all())  # no stats records
        self.assertTrue(second[["val_loss", "mean_abs_0"]].isna().all())
        # layers: the finished run's 3 layers; init_layers: its step-0 stats record.
        self.assertEqual(list(sweep.layers.run), [done.name] * 3)
        self.assertEqual(list(sweep.layers.mean_abs), [0.5, 1.0, 2.0])
        self.assertEqual(list(sweep.init_layers.mean_abs), [0.1, 0.2, 0.4])
        self.assertEqual(list(sweep.init_layers.fcproj_grad_norm[1:]), [0.5, 0.6])
        with open(os.path.join(self.dir, "results.csv"), "rb") as f:
            self.assertTrue(f.readline().endswith(b"\r\n"))


if __name__ == "__main__":
    unittest.main()
