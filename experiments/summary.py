"""results.md: every sweep's table, one line per configuration: its runs counted by outcome,
spikes, then the metrics as mean ± sd (n) over the runs that finished."""
from .grid import CUSTOM_SIZE, PLACEMENT_LABEL, fmt_num
from .stats import mean_sd
from .tables import CONFIG_KEYS, finished, fmt_stat, groups, outcome_counts, recorded, table, values
from .collect import OUTCOMES


def baselines_line(results):
    """One sentence with the baselines of the evaluated tokens (the same for every run)."""
    uni, _, n = mean_sd(values(results, "unigram_ce"))
    bi, _, _ = mean_sd(values(results, "bigram_ce"))
    if not n:
        return "Baselines: none recorded."
    return (f"Baselines on the evaluated validation tokens: unigram_ce {uni:.4f}, bigram_ce "
            f"{'—' if bi is None else f'{bi:.4f}'} nats (training-shard counts; docs/experiments.md, *Baselines*).")


def results_markdown(s, runs):
    """The text of results.md for settings `s` and `runs`, the grid joined to its results
    (tables.on_grid)."""
    size = CUSTOM_SIZE.fullmatch(s.init)
    model = "L={}, NH={}, C={}".format(*size.groups()[:3]) if size else s.init
    lines = [
        f"Model {model}{' (L per row)' if s.depth else ''}; {s.steps} steps of {s.total_batch or s.B * s.T} tokens; "
        f"AdamW, warmup {s.warmup}, cosine to {s.lr_min_ratio:g}·lr, β2 {s.beta2:g}, clip {s.clip:g}. Outcomes per "
        f"docs/train.md §8 (window {s.outcome_window}, divergence rise {s.diverge_rise:g} nat, spike rise "
        f"{s.spike_rise:g} nat). Metrics are mean ± std (n) over the runs that finished (ok and collapsed); "
        f"validation over {s.eval_batches} batches of {s.eval_B}×{s.T} tokens; ROUGE F1 of the argmax "
        f"predictions with Porter stemming.",
        "",
        baselines_line(finished(runs)),
        ""]
    rows = []
    for (ln, dt, wd, lr, depth, precision), group in groups(runs, CONFIG_KEYS):
        got = recorded(group)
        if not len(got):
            continue
        counts = outcome_counts(got)
        done = finished(got)
        growth = "—"
        if done.mean_abs_0.notna().any():
            m0, mL = mean_sd(values(done, "mean_abs_0"))[0], mean_sd(values(done, "mean_abs_L"))[0]
            growth = f"{m0:.3g} → {mL:.3g} (×{mL / m0:.3g})"
        usable = done[done.grad_norm_scaled_0.notna() & (done.grad_norm_scaled_L.fillna(0) != 0)]
        ratio = fmt_stat(list(usable.grad_norm_scaled_0 / usable.grad_norm_scaled_L), 3) if len(usable) else "—"
        rows.append([PLACEMENT_LABEL[ln], fmt_num(dt), fmt_num(wd), fmt_num(lr), depth or (size.group(1) if size else ""),
                     len(got)] + [counts[k] for k in OUTCOMES] +
                    [int(got.spikes.fillna(0).sum()), fmt_stat(values(done, "val_loss"), 3),
                     fmt_stat(list(done.val_loss - done.unigram_ce), 3), fmt_stat(values(done, "ppl_seq"), 1),
                     fmt_stat(values(done, "accuracy"), 3), fmt_stat(values(done, "rouge1_stem"), 3),
                     fmt_stat(values(done, "rougeL_stem"), 3), growth, ratio])
    lines += table(["LN", "Δt", "wd", "lr", "L", "runs", "ok", "collapsed", "diverged", "nonfinite", "spikes", "val loss",
                    "val − unigram", "ppl_seq", "accuracy", "ROUGE-1", "ROUGE-L", "mean_abs X_0 → X_L",
                    "‖∂L/∂X_0‖·RMS / ‖∂L/∂X_L‖·RMS"], rows)
    missing = list(runs.run[runs.outcome.isna()])
    if missing:
        lines += ["", f"Not recorded yet ({len(missing)}): {', '.join(missing)}"]
    return "\n".join(lines) + "\n"
