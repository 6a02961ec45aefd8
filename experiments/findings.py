"""README's *What the runs found*, generated from the published tables (like the claims table):
every number of that paragraph comes from docs/e1_*, docs/e2_*, docs/e3_* through this module, and
`sweep.py --claims` writes it between README's `<!-- found:begin -->` and `<!-- found:end -->`.
It reads the experiments loaded by claims.load_experiments and says which protocol's tables they
are: the seeds of the presets of the third round (settings.py), or older ones while its runs are
pending."""
import numpy as np

from . import e1, e2, e3
from .claim_rows import e2_final, label, lrs_text
from .grid import PLACEMENT_LABEL, fmt_num, parse_list
from .settings import PRESETS
from .tables import finished, p_value, recorded, two_digits

BEGIN, END = "<!-- found:begin -->", "<!-- found:end -->"


def seeds_of(runs):
    return sorted({int(s) for s in recorded(runs).seed})


def which_protocol(x):
    """One sentence: whose tables these are (the third round's seeds, or not yet)."""
    current = all(seeds_of(runs) == parse_list(PRESETS[name]["seeds"], "int", "--seeds")
                  for name, runs in (("e1", x.e1), ("e2", x.e2), ("e3", x.e3)))
    counts = (f"E1 {len(recorded(x.e1))} runs, E2 {len(recorded(x.e2))} runs, E3 {len(recorded(x.e3))} runs, seeds "
              f"{fmt_seeds(x.e1)}, {fmt_seeds(x.e2)} and {fmt_seeds(x.e3)}")
    if current:
        return f"The tables under `docs/` are the third round's ({counts})."
    return (f"The tables under `docs/` are still the second round's ({counts}); the third round, pre-registered in "
            "[docs/experiments.md](docs/experiments.md), has not run yet, so the claims table's primary tests (made "
            "at matched learning rates) are mostly not tested on them, and the secondary rows carry the second "
            "round's comparisons.")


def fmt_seeds(runs):
    s = seeds_of(runs)
    return f"{s[0]}–{s[-1]}" if s and s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def e1_lines(x):
    edges = []
    for key in ((ln, dt) for ln in ("pre", "peri") for dt in (1.0, 0.1)):
        rows = x.e1[(x.e1.ln == key[0]) & (x.e1.dt == key[1])]
        edge = e1.edge_of(rows)
        if edge:
            edges.append(f"{label(key)} {e1.edge_text(edge)}")
    failing, fail_edge = e1.pre_ln_edge(x.e1)
    found, div_edge = e1.divergence_edge(x.e1)
    post = finished(x.e1[x.e1.ln == "post"])
    lines = [f"- **E1** (L = 8): the learning rate at which half the runs fail (bracket): {'; '.join(edges)}. "
             f"Pre-LN's two Δt together fail in half their runs at {fmt_num(failing) if failing else '—'} and "
             f"diverge (stop, end above their first loss, or collapse after a blow-up) in half at "
             f"{e1.edge_text(div_edge) if div_edge else '—'}. Every Pre- and Peri-LN configuration learns at "
             f"{lrs_text(x.matched_set)}; the matched learning rates are {lrs_text(x.matched)}."]
    if len(post):
        lines[-1] += (f" Post-LN's best final loss is {two_digits(post.val_loss.min())}, against unigram_ce "
                      f"{two_digits(post.unigram_ce.mean(), like=1.0)}.")
    return lines


def e2_lines(x):
    got = recorded(x.e2)
    done = got[got.outcome.isin(("ok", "collapsed"))]
    margin = done.unigram_ce - done.val_loss
    lines = [f"- **E2**: {int(e2.gated(got).sum())} of {len(got)} runs pass the gate; per run the final loss is "
             f"{margin.min():.2f}–{margin.max():.2f} nats below unigram_ce (per configuration and depth, means "
             f"{cell_means(done).min():.2f}–{cell_means(done).max():.2f})."]
    final = e2_final(x)
    final = final[final.gated.astype(bool)]
    deepest = final[final.depth == final.depth.max()] if len(final) else final
    if len(deepest):
        medians = [f"{label((ln, dt))} at lr {fmt_num(lr)} {two_digits(rows.mean_abs.median())}"
                   for (ln, dt, lr), rows in deepest.groupby(["ln", "dt", "lr"], sort=False)]
        lines.append(f"  Median mean\\|X_L\\| at L = {int(deepest.depth.iloc[0])}: {'; '.join(medians)}.")
    fits = x.e2_depth[(x.e2_depth.stage == "trained") & (x.e2_depth.quantity == "mean_abs") & (x.e2_depth.dt == 1.0)]
    if len(fits):
        lines.append("  Growth with depth, Δt = 1 (ln mean\\|X_L\\| = α + r·L + p·ln L): " + "; ".join(
            f"{label((f.ln, f.dt))} at lr {fmt_num(f.lr)}: r = {f.r:.2g} per block (95% CI {f.r_low:.2g} to "
            f"{f.r_high:.2g}), the power of L alone {f.power_alone_p:.2g}" for f in fits.itertuples()) + ".")
    slopes = e2.intervention_slopes(x.e2_tables.intervention, x.e2)
    if len(slopes):
        lines.append("  The intervention's slope of ln(largest block sensitivity) against ln k: " + "; ".join(
            f"{PLACEMENT_LABEL[ln]} {rows.slope.mean():.2f} over all blocks, {rows.slope_deep.mean():.2f} over "
            f"blocks 2..L" for ln, rows in slopes.groupby("ln", sort=False)) +
            " (Peri-LN's 0 holds by construction: its output LayerNorm undoes k).")
    return lines


def cell_means(done):
    return done.groupby(["ln", "dt", "lr", "depth"]).apply(lambda r: (r.unigram_ce - r.val_loss).mean())


def e3_lines(x):
    got = recorded(x.e3)
    if not len(got):
        return []
    parts = []
    for ln in ("pre", "peri"):
        mine = got[got.ln == ln]
        blew_up = mine.max_loss > 8.5
        parts.append(f"{PLACEMENT_LABEL[ln]}: diverged {int(e1.diverged(mine).sum())} of {len(mine)}, stopped "
                     f"{int(mine.outcome.isin(['diverged', 'nonfinite']).sum())}, failed (E1's line) "
                     f"{int(e1.failed(mine).sum())}, training loss above 8.5 after step 0 in "
                     f"{int(blew_up.sum())} ({int((blew_up & ~e1.diverged(mine)).sum())} recovering), spikes {int(mine.spikes.sum())}, median largest attention logit "
                     f"{two_digits(mine.train_max_attn_logit.median())}, median largest mean\\|X_L\\| "
                     f"{two_digits(mine.train_max_mean_abs_L.median())}")
    ranks = e3.tests(got)
    row = ranks[(ranks.counted == "failed") & ranks.test.str.startswith("Pre-LN vs Peri-LN")]
    rank = f"; final loss, rank-sum p = {p_value(row.rank_p.iloc[0])}" if len(row) else ""
    return [f"- **E3** at lr {lrs_text(sorted(set(got.lr)))}: " + "; ".join(parts) + rank + "."]


def e1_best_line(x):
    m = x.e1_measured
    ref = next((k for k in m if k[:2] == ("peri", 0.1)), None)
    if ref is None or not m[ref]["L*"]:
        return []
    others = [np.mean(v["L*"]) for k, v in m.items() if k != ref and v["L*"]]
    return [f"- **Claim 7's pilot**: Peri-LN Δt = 0.1's L* {np.mean(m[ref]['L*']):.3f} against "
            f"{min(others):.3f}–{max(others):.3f} for the other configurations (means over the seeds)."]


def findings(x):
    """The lines of README's *What the runs found*."""
    return ([f"**What the runs found.** {which_protocol(x)}", ""] + e1_lines(x) + e2_lines(x) + e3_lines(x) +
            e1_best_line(x))
