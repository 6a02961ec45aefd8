"""The claims of the paper, one function each, every one with its primary test named before the
runs (docs/experiments.md, *The third round, pre-registered*): a contrast between placements at
E1's two matched learning rates whose direction must agree at both (primary.agreeing), its
effect size, its p-value and the direction it points; beside it the second round's test, each
configuration at its own best learning rate, as a secondary row. claims.py adjusts the primary
p-values for multiplicity (Holm, across the claims) and turns each into a verdict by one rule
(`verdict`).

Each claim function takes the loaded experiments (claims.load_experiments) and returns
Claim(title, test, primaries, numbers): `primaries` is a list of (name, Primary) — one per claim,
two for claim 6, whose two halves are claims of their own in the family. The statistics
themselves are primary.py's, on tables built here."""
from collections import namedtuple

import numpy as np
import pandas as pd

from . import e1, e2, primary
from .grid import PLACEMENT_LABEL, fmt_num
from .primary import CLAIMED, OPPOSITE, agreeing, not_tested
from .tables import finished, p_value, recorded, two_digits

ALPHA = 0.05
Claim = namedtuple("Claim", "title test primaries numbers")


def verdict(primary_test, adjusted):
    """The rule from numbers to verdict (docs/experiments.md): supported when the estimate points
    the claimed way and the Holm-adjusted p is below ALPHA; not supported when it points the other
    way with an adjusted p below ALPHA; else inconclusive at this scale (also when not tested, and
    when the matched learning rates disagree)."""
    if primary_test.p is None:
        return f"**inconclusive** at this scale (not tested: {primary_test.why})"
    if adjusted < ALPHA and primary_test.direction == CLAIMED:
        return "**supported**"
    if adjusted < ALPHA and primary_test.direction == OPPOSITE:
        return "**not supported**"
    return "**inconclusive** at this scale" + (" (the matched learning rates disagree)"
                                               if primary_test.direction == primary.MIXED else "")


def label(key):
    """"Pre-LN Δt = 0.1" of a configuration key (ln, dt, ...)."""
    return f"{PLACEMENT_LABEL[key[0]]} Δt = {fmt_num(key[1])}"


def lrs_text(lrs):
    return " and ".join(fmt_num(lr) for lr in lrs) if lrs else "none"


def at_matched(x, test):
    """primary.agreeing over E1's matched learning rates of test(lr)."""
    return agreeing({lr: test(lr) for lr in x.matched})


def own_best(x, ln, dt):
    """The best learning rate of E1's configuration (ln, dt) (e1.best_of)."""
    return e1.best_of(x.e1[(x.e1.ln == ln) & (x.e1.dt == dt)])


# ---------------------------------------------------------------------------------------------
# E2: growth with depth, the intervention, noise

def e2_final(x):
    """One row per recorded E2 run with a profile: ln, dt, lr, depth, seed, whether it passed E2's gate
    (`gated`, the own-best-lr rows') and E1's "learns" line (`learned`, the matched-lr contrasts'),
    and, after training, X_L's mean_abs and entry_var and the absolute amplification of input noise
    at X_L."""
    layers = e2.profiles(x.e2_tables.layers)
    got = recorded(x.e2)
    got = got[got.run.isin(layers)]
    rows = [dict(run=r.run, ln=r.ln, dt=r.dt, lr=r.lr, depth=e2.depth_of(r, layers[r.run]), seed=r.seed, gated=g,
                 learned=not f, mean_abs=float(layers[r.run].mean_abs.iloc[-1]),
                 entry_var=float(layers[r.run].entry_var.iloc[-1]))
            for r, g, f in zip(got.itertuples(), e2.gated(got), e1.failed(got))]
    frame = pd.DataFrame(rows, columns=["run", "ln", "dt", "lr", "depth", "seed", "gated", "learned", "mean_abs",
                                        "entry_var"])
    diag = x.e2_diag[["run", "absolute_amplification", "amplification"]] if len(x.e2_diag) else None
    if diag is None:
        return frame.assign(absolute_amplification=np.nan, amplification=np.nan)
    return frame.merge(diag, on="run", how="left")


def matched_final(x):
    """e2_final's runs that enter the matched-lr contrasts: those below E1's failure line, the
    criterion that chose the matched lrs (docs/experiments.md, *Review of the pre-registration*)."""
    final = e2_final(x)
    return final[final.learned.astype(bool)]


def own_final(x):
    """e2_final's gated runs at their configuration's own best E1 lr (the secondary rows)."""
    final = e2_final(x)
    return own_best_rows(x, final[final.gated.astype(bool)])


def entered_note(x):
    """How many E2 runs of each placement and Δt entered the matched-lr contrasts, per lr and depth."""
    final = matched_final(x)
    depths = sorted(set(recorded(x.e2).depth.dropna().astype(int)))
    parts = []
    for lr in x.matched:
        counts = [f"{label((ln, dt))} " + "/".join(
            str(int(((final.ln == ln) & (final.dt == dt) & (final.lr == lr) & (final.depth == L)).sum()))
            for L in depths)
            for ln in ("pre", "peri") for dt in (1.0, 0.1)]
        parts.append(f"lr {fmt_num(lr)}: " + ", ".join(counts))
    return (f"runs below E1's line entering the contrasts, per L {'/'.join(map(str, depths))}: " + "; ".join(parts)
            if parts and depths else "")


def own_best_rows(x, frame):
    """The rows of `frame` (with ln, dt, lr) at their configuration's own best E1 learning rate."""
    best = {(ln, dt): own_best(x, ln, dt) for ln, dt in set(zip(frame.ln, frame.dt))}
    keep = [best[ln, dt] == lr for ln, dt, lr in zip(frame.ln, frame.dt, frame.lr)]
    return frame[np.array(keep, dtype=bool)] if len(frame) else frame


def gate_note(x):
    got = recorded(x.e2)
    return f"{int(e2.gated(got).sum())} of {len(got)} E2 runs pass the gate"


def e2_fit(x, ln, dt, quantity, lr, stage="trained"):
    d = x.e2_depth
    rows = d[(d.ln == ln) & (d.dt == dt) & (d.lr == lr) & (d.stage == stage) & (d.quantity == quantity)]
    return rows.iloc[0] if len(rows) else None


def matched_note(x):
    return (f"matched lrs {lrs_text(x.matched)} (E1: every Pre- and Peri-LN configuration learns at "
            f"{lrs_text(x.matched_set)})")


def primary_text(p):
    return p.effect if p.p is not None else f"not tested ({p.why})"


def claim_exponential_growth(x):
    final = matched_final(x)
    found = at_matched(x, lambda lr: primary.growth_difference(final[(final.dt == 1) & (final.lr == lr)]))
    secondary = []
    lr = own_best(x, "pre", 1.0)
    fit = e2_fit(x, "pre", 1.0, "mean_abs", lr)
    if fit is not None:
        secondary.append(f"Pre-LN Δt = 1 at its own best lr {fmt_num(lr)}, {fit.runs} gated runs: r = "
                         f"{primary.ci(fit.r, fit.r_low, fit.r_high)} per block (p = {p_value(fit.r_p)}), the power of "
                         f"L alone {fit.power_alone_p:.2g}, AICc prefers the {fit.preferred} in L")
    peri_lr = own_best(x, "peri", 1.0)
    peri = e2_fit(x, "peri", 1.0, "mean_abs", peri_lr)
    if peri is not None:
        secondary.append(f"Peri-LN Δt = 1 at its own {fmt_num(peri_lr)}: r = "
                         f"{primary.ci(peri.r, peri.r_low, peri.r_high)}")
    return Claim("1. Pre-LN hidden states grow exponentially with depth",
                 "E2 runs below E1's line, Δt = 1, both placements at each matched lr: ln mean\\|X_L\\| = α + p·ln L "
                 "+ r·L per "
                 "placement, fitted jointly; t-test of r_pre − r_peri = 0 (r_pre larger at both lrs)",
                 [("1", found)], f"{matched_note(x)}: {primary_text(found)}; {entered_note(x)}. Secondary, own best "
                 "lrs: " +
                 ("; ".join(secondary) or gate_note(x)) + high_lr_note(x))


def high_lr_note(x):
    """E3's runs (high learning rates): the largest mean |X_L| ./train logged, Pre- against Peri-LN."""
    if x.e3 is None or "train_max_mean_abs_L" not in x.e3:
        return ""
    got = recorded(x.e3)
    medians = {ln: got[got.ln == ln].train_max_mean_abs_L.median() for ln in ("pre", "peri")}
    if any(v != v for v in medians.values()):
        return ""
    return (f". At E3's lr {lrs_text(sorted(set(got.lr)))} (L = 8) the largest mean\\|X_L\\| logged: median "
            f"{two_digits(medians['pre'])} Pre-LN, {two_digits(medians['peri'])} Peri-LN")


def claim_peri_growth(x):
    final = matched_final(x)
    found = at_matched(x, lambda lr: primary.bounds(final[(final.dt == 1) & (final.lr == lr)]))
    own = own_final(x)
    own = primary.bounds(own[own.dt == 1])
    return Claim("2. Peri-LN: mean \\|x\\| grows at most linearly, its variance quadratically",
                 "E2 runs below E1's line, Δt = 1, at each matched lr: ln X_L = α + p·ln L per placement; t-tests of "
                 "p = 1 "
                 "(mean\\|X_L\\|) and p = 2 (entry_var): Peri-LN below both and Pre-LN above one (intersection; at "
                 "both lrs)",
                 [("2", found)], f"{matched_note(x)}: {primary_text(found)}. Secondary, each placement at its own "
                 f"best lr: {primary_text(own)}")


def dt_pairs(frame, keys=("ln", "lr", "depth", "seed")):
    """Runs of the same `keys` at Δt = 0.1 and 1 side by side (suffixes _small, _large)."""
    return frame[frame.dt == 0.1].merge(frame[frame.dt == 1.0], on=list(keys), suffixes=("_small", "_large"))


def claim_dt_tightens(x):
    pairs = dt_pairs(matched_final(x))
    found = at_matched(x, lambda lr: primary.dt_tightens(pairs[pairs.lr == lr]))
    own = primary.dt_tightens(dt_pairs(own_final(x), ("ln", "depth", "seed")))
    return Claim("3. Δt < 1 tightens both",
                 "E2 pairs below E1's line (same placement, lr, depth, seed) at each matched lr, per placement: sign "
                 "tests of X_L(Δt = 0.1) < X_L(Δt = 1) for mean\\|X_L\\| and entry_var (intersection over both "
                 "quantities and both placements; at both lrs)",
                 [("3", found)], f"{matched_note(x)}: {primary_text(found)}. Secondary, each configuration at its "
                 f"own best lr (Δt and lr confounded): {primary_text(own)}")


def claim_gradients(x):
    done = finished(x.e1[x.e1.ln.isin(e1.BRACKETED)])
    found = primary.natural_slopes(done[done.dt == 1.0])
    numbers = (f"E1's finished runs at Δt = 1 over lrs {lrs_text(sorted(set(done.lr)))}: {primary_text(found)}")
    slopes = e2.intervention_slopes(x.e2_tables.intervention, x.e2)
    intervened = at_matched(x, lambda lr: primary.slope_difference(slopes[slopes.lr == lr]))
    numbers += (f". Secondary, E2's intervention at the {matched_note(x)}, slope over blocks 2..L against ln k "
                f"(sign by construction: Pre-LN's in (0, 1), Peri-LN's 0): {primary_text(intervened)}")
    own = own_best_rows(x, slopes)
    if len(own):
        pre, peri = own[own.ln == "pre"], own[own.ln == "peri"]
        numbers += (f". Own best lrs: slope over all blocks Pre-LN {pre.slope.mean():.2f}, Peri-LN "
                    f"{peri.slope.mean():.2f} (0 by construction); over blocks 2..L {pre.slope_deep.mean():.2f} and "
                    f"{peri.slope_deep.mean():.2f}; block 1 the most sensitive in {pre.at_block_1.mean():.0%} and "
                    f"{peri.at_block_1.mean():.0%}")
    numbers += natural_note(x) + rho_note(x)
    return Claim("4. Pre-LN's gradients grow with its activations; Peri-LN's local sensitivity does not",
                 "E1's finished runs, Δt = 1, over its learning rates and seeds (natural variation): ln(largest block "
                 "sensitivity) = a + b·ln mean\\|X_L\\| per placement, fitted jointly; t-test of b_pre − b_peri = 0 "
                 "(Pre larger; Peri-LN's claim predicts b ≈ 0)",
                 [("4", found)], numbers)


def natural_note(x):
    """Natural variation across E1's learning rates (e1.natural_variation): per placement and Δt,
    the slope of ln(largest block sensitivity) against ln mean|X_L|."""
    found = e1.natural_variation(x.e1, x.e1_layers)
    text = {"max_sensitivity": "ln largest block sensitivity", "fcproj_grad_norm": "ln largest ‖∂L/∂W_fcproj‖"}
    return "".join(f". Natural variation over E1's lrs, slope of {text[q]} against ln mean\\|X_L\\|: " +
                   ", ".join(f"{label((r.ln, r.dt))} {primary.ci(r.slope, r.low, r.high)}" for r in rows.itertuples())
                   for q, rows in found.groupby("quantity", sort=False))


def rho_note(x):
    """Spearman's ρ between ‖∂L/∂W_fcproj‖ and the hidden RMS over the blocks, gated runs."""
    d = x.e2_diag[x.e2_diag.gated] if len(x.e2_diag) else x.e2_diag
    if not len(d):
        return ""
    sig = {ln: (int(((d.ln == ln) & (d.rho_p < 0.05) & (d.rho > 0)).sum()), int((d.ln == ln).sum()))
           for ln in ("pre", "peri")}
    return (f". ρ(‖∂L/∂W_fcproj‖, hidden RMS) significantly positive in {sig['pre'][0]} of {sig['pre'][1]} Pre-LN "
            f"and {sig['peri'][0]} of {sig['peri'][1]} Peri-LN runs")


def placement_pairs(frame):
    """Pre- and Peri-LN runs of the same Δt, lr, depth and seed side by side (suffixes _pre, _peri)."""
    keys = ["dt", "lr", "depth", "seed"]
    return (frame[frame.ln == "pre"].merge(frame[frame.ln == "peri"], on=keys, suffixes=("_pre", "_peri"))
            .dropna(subset=["absolute_amplification_pre", "absolute_amplification_peri"]))


def claim_noise(x):
    pairs = placement_pairs(matched_final(x))
    found = at_matched(x, lambda lr: primary.amplification(pairs[pairs.lr == lr]))
    own = own_final(x)
    own_pairs = (own[own.ln == "pre"].merge(own[own.ln == "peri"], on=["dt", "depth", "seed"],
                                           suffixes=("_pre", "_peri"))
                 .dropna(subset=["absolute_amplification_pre", "absolute_amplification_peri"]))
    numbers = (f"{matched_note(x)}: {primary_text(found)}. Secondary, each placement at its own best lr: "
               f"{primary_text(primary.amplification(own_pairs))}")
    if len(pairs):
        rel = e2.ratio_test(pairs.amplification_peri, pairs.amplification_pre)
        numbers += (f"; relative amplification (divided by the stream's growth), every matched pair: Peri-LN smaller "
                    f"in {rel['smaller']} of {rel['pairs']}")
    return Claim("5. Peri-LN bounds the amplification of input noise",
                 "E2 pairs below E1's line (same Δt, lr, depth, seed) at each matched lr: sign test of the absolute "
                 "amplification "
                 "W2(X_L)/W2(X_0), Peri- below Pre-LN (at both lrs)",
                 [("5", found)], numbers)


# ---------------------------------------------------------------------------------------------
# E3: divergence

def stratum_6a(got, dt):
    """Claim 6a in one Δt: Fisher's exact test of divergence, Pre- against Peri-LN, over both weight
    decays and both of E3's learning rates."""
    mine = got[got.dt == dt]
    found = primary.more_often(e1.diverged(mine[mine.ln == "pre"]), e1.diverged(mine[mine.ln == "peri"]))
    return found._replace(effect=f"Δt = {fmt_num(dt)}: {found.effect}")


def claim_divergence(x):
    got = recorded(x.e3)
    lrs = sorted(set(got.lr))
    pre, peri = got[got.ln == "pre"], got[got.ln == "peri"]
    six_a = (primary.both([stratum_6a(got, dt) for dt in (1.0, 0.1)]) if set(got.dt) >= {1.0, 0.1} else
             not_tested("E3 lacks Δt 1 or 0.1"))
    wds = sorted(set(got.wd))
    six_b = (primary.more_often(e1.diverged(pre[pre.wd == wds[0]]), e1.diverged(pre[pre.wd == wds[-1]]))
             if len(wds) == 2 else not_tested("E3 has no two weight decays"))
    numbers = [f"6a diverged, Pre-LN against Peri-LN, per Δt (both must agree): {primary_text(six_a)}",
               f"6b Pre-LN wd {fmt_num(wds[0]) if wds else '—'} against {fmt_num(wds[-1]) if wds else '—'}: "
               f"{primary_text(six_b)}"]
    if len(got):
        numbers.append(f"secondary, any collapse or stop (broad) Pre-LN {int(e1.broke(pre).sum())}/{len(pre)}, "
                       f"Peri-LN {int(e1.broke(peri).sum())}/{len(peri)}; failed (E1's line) Pre-LN "
                       f"{int(e1.failed(pre).sum())}/{len(pre)}, Peri-LN {int(e1.failed(peri).sum())}/{len(peri)}; "
                       f"Peri-LN diverged in {int(e1.diverged(peri).sum())} of {len(peri)} runs")
        if "train_max_attn_logit" in got and pre.train_max_attn_logit.notna().any():
            numbers.append(f"largest attention logit, median: Pre-LN {two_digits(pre.train_max_attn_logit.median())}, "
                           f"Peri-LN {two_digits(peri.train_max_attn_logit.median())}")
        shared = shared_runs(x.e1, x.e3)
        if shared:
            numbers.append(f"{shared} E3 runs are E1 runs too (the same placement, Δt, wd, lr and seed)")
    return Claim("6. Pre-LN diverges more often, more so without weight decay; Peri-LN never",
                 f"E3 at Pre-LN's divergence edge and the lr above it (lr {lrs_text(lrs)}): Fisher's exact test of "
                 "divergence (stopped, a last training loss above its first ≈ ln V, or collapsed after a blow-up 1 "
                 "nat above the initial loss), 6a Pre- against Peri-LN in each Δt (both lrs and wd; both strata the "
                 "claimed way), 6b Pre-LN without against with weight decay",
                 [("6a", six_a), ("6b", six_b)], "; ".join(numbers) if len(got) else "no E3 run")


def shared_runs(first, second):
    """How many recorded runs of `second` are runs of `first`: the same (placement, Δt, wd, lr, seed)."""
    keys = ["ln", "dt", "wd", "lr", "seed"]
    return len(recorded(first)[keys].merge(recorded(second)[keys]).drop_duplicates())


# ---------------------------------------------------------------------------------------------
# E1: best on every metric

# Claim 7's metrics: E1 quantity (per run at a learning rate, or per seed over the grid) → lower is better.
AT_LR = {"val_loss": True, "ppl_seq": True, "accuracy": False, "rouge1_stem": False}
PER_SEED = {"L*": True, "LR sensitivity": True}


def metrics_at(x, key, lr):
    """{metric: values} of E1's configuration `key` at learning rate `lr` (its finished runs) and over
    the grid (its per-seed L* and LR sensitivity)."""
    rows = finished(x.e1_measured[key]["rows"])
    rows = rows[rows.lr == lr]
    found = {metric: list(rows[metric].dropna()) for metric in AT_LR}
    found.update({metric: x.e1_measured[key][metric] for metric in PER_SEED})
    return found


def claim_best(x):
    keys = [k for k in x.e1_measured if k[0] in e1.BRACKETED]
    ref = next((k for k in keys if k[:2] == ("peri", 0.1)), None)
    lower = {**AT_LR, **PER_SEED}
    if ref is None:
        found = not_tested("no E1 runs of Peri-LN Δt = 0.1")
    else:
        found = at_matched(x, lambda lr: primary.best_everywhere(
            metrics_at(x, ref, lr), {label(k): metrics_at(x, k, lr) for k in keys if k != ref}, lower))
    numbers = f"{matched_note(x)}, Welch over the seeds: {primary_text(found)}"
    if ref is not None:
        secondary = primary.best_everywhere(own_best_metrics(x, ref),
                                            {label(k): own_best_metrics(x, k) for k in x.e1_measured if k != ref},
                                            {**OWN_BEST, **PER_SEED})
        numbers += f". Secondary, each at its own best lr, every configuration (Post-LN too): {primary_text(secondary)}"
    return Claim("7. Peri-LN with Δt = 0.1 is best on every metric",
                 "E1, Peri-LN Δt = 0.1 against each other Pre- and Peri-LN configuration at each matched lr: Welch's "
                 "tests of the final loss, ppl_seq, accuracy, ROUGE-1, and of L* and LR sensitivity (over the lrs "
                 "where a configuration finishes) (intersection; at both lrs)",
                 [("7", found)], numbers)


OWN_BEST = {"ppl_seq at the best lr": True, "accuracy at the best lr": False, "ROUGE-1 (stemmed) at the best lr": False}


def own_best_metrics(x, key):
    return {metric: x.e1_measured[key].get(metric, []) for metric in {**OWN_BEST, **PER_SEED}}


CLAIMS = (claim_exponential_growth, claim_peri_growth, claim_dt_tightens, claim_gradients, claim_noise,
          claim_divergence, claim_best)
