"""The claims of the paper, one function each, every one with its primary test named before the
runs (docs/experiments.md, *Claims: primary tests and the verdict rule*): what the test is, its
effect size with a 95% interval, its p-value and the direction it points, and the secondary
numbers a reader wants beside it. claims.py adjusts the primary p-values for multiplicity
(Holm, across the claims) and turns each into a verdict by one rule (`verdict`).

Each claim function takes the loaded experiments (claims.load_experiments) and returns
Claim(title, test, primaries, numbers): `primaries` is a list of (name, Primary) — one per claim,
two for claim 6, whose two halves are claims of their own in the family."""
from collections import namedtuple

import numpy as np

from . import e1, e2, e3, stats
from .grid import PLACEMENT_LABEL, fmt_num
from .tables import finished, p_value, recorded, two_digits

ALPHA = 0.05
CLAIMED, OPPOSITE = "claimed", "opposite"
# p: the test's two-sided p (None: not tested); direction: where the estimate points (CLAIMED or
# OPPOSITE); effect: the effect size and its interval, in words; why: when not tested, why.
Primary = namedtuple("Primary", "p direction effect why", defaults=(None,))
Claim = namedtuple("Claim", "title test primaries numbers")


def not_tested(why):
    return Primary(None, None, "—", why)


def both(parts):
    """A claim that needs several things at once (an intersection-union test): its direction is
    claimed when every part points the claimed way, with the largest of their p's; else the
    evidence against it, the smallest p of the parts that point the other way."""
    if any(p.p is None for p in parts):
        return next(p for p in parts if p.p is None)
    against = [p for p in parts if p.direction == OPPOSITE]
    if against:
        return Primary(min(p.p for p in against), OPPOSITE, "; ".join(p.effect for p in parts))
    return Primary(max(p.p for p in parts), CLAIMED, "; ".join(p.effect for p in parts))


def verdict(primary, adjusted):
    """The rule from numbers to verdict (docs/experiments.md): supported when the estimate points
    the claimed way and the Holm-adjusted p is below ALPHA; not supported when it points the other
    way with an adjusted p below ALPHA; else inconclusive at this scale (also when not tested)."""
    if primary.p is None:
        return f"**inconclusive** at this scale (not tested: {primary.why})"
    if adjusted < ALPHA:
        return "**supported**" if primary.direction == CLAIMED else "**not supported**"
    return "**inconclusive** at this scale"


def ci(est, low, high, spec=".2g"):
    return f"{est:{spec}} (95% CI {low:{spec}} to {high:{spec}})"


def direction(claimed):
    return CLAIMED if claimed else OPPOSITE


# ---------------------------------------------------------------------------------------------
# E2: growth with depth

def e2_fit(x, ln, dt, quantity, stage="trained"):
    rows = x.e2_depth[(x.e2_depth.ln == ln) & (x.e2_depth.dt == dt) & (x.e2_depth.stage == stage) &
                      (x.e2_depth.quantity == quantity)]
    return rows.iloc[0] if len(rows) else None


def gate_note(x):
    got = recorded(x.e2)
    return f"{int(e2.gated(got).sum())} of {len(got)} E2 runs pass the gate"


def within_tally(x, ln, quantity):
    fits = e2.fitted(x.e2_fits)
    mine = fits[(fits.ln == ln) & (fits.stage == "trained") & (fits.quantity == quantity) & fits.winner.notna()]
    counts = mine.law.value_counts()
    return (f"{len(mine)} within-run fits at L ≥ {e2.WITHIN_DEPTH}: " +
            (", ".join(f"{law} {n}" for law, n in counts.items()) if len(mine) else "none"))


def claim_exponential_growth(x):
    fit = e2_fit(x, "pre", 1.0, "mean_abs")
    if fit is None:
        primary = not_tested(f"fewer than three depths with gated Pre-LN Δt = 1 runs; {gate_note(x)}")
        numbers = gate_note(x)
    else:
        primary = Primary(fit.r_p, direction(fit.r > 0),
                          f"r = {ci(fit.r, fit.r_low, fit.r_high)} per block (×{np.exp(fit.r):.3g} per block)")
        init = e2_fit(x, "pre", 1.0, "mean_abs", "init")
        numbers = (f"Pre-LN Δt = 1, {fit.runs} gated runs at L = {fit.depths}: {primary.effect}; the power of L alone "
                   f"p = {fit.power_alone_p:.2g}; AICc prefers the {fit.preferred} in L" +
                   (f"; at init r = {ci(init.r, init.r_low, init.r_high)}" if init is not None else "") +
                   f". {within_tally(x, 'pre', 'mean_abs')}")
    return Claim("1. Pre-LN hidden states grow exponentially with depth",
                 "E2 after training, Pre-LN Δt = 1, gated runs: ln mean\\|X_L\\| = α + r·L + p·ln L over depths L; "
                 "t-test of r = 0 (r > 0: exponential in L beyond a power of L)",
                 [("1", primary)], numbers + high_lr_note(x))


def high_lr_note(x):
    """E3's runs (high learning rate): the largest mean |X_L| ./train logged, Pre- against Peri-LN."""
    if x.e3 is None or "train_max_mean_abs_L" not in x.e3:
        return ""
    got = recorded(x.e3)
    medians = {ln: got[got.ln == ln].train_max_mean_abs_L.median() for ln in ("pre", "peri")}
    if any(v != v for v in medians.values()):
        return ""
    return (f". At E3's lr {fmt_num(float(got.lr.iloc[0]))} (L = 8) the largest mean\\|X_L\\| logged: median "
            f"{two_digits(medians['pre'])} Pre-LN, {two_digits(medians['peri'])} Peri-LN")


def claim_peri_growth(x):
    fits = {q: e2_fit(x, "peri", 1.0, q) for q in e2.QUANTITIES}
    if any(f is None for f in fits.values()):
        primary = not_tested(f"fewer than three depths with gated Peri-LN Δt = 1 runs; {gate_note(x)}")
        numbers = gate_note(x)
    else:
        m, v = fits["mean_abs"], fits["entry_var"]
        parts = [Primary(m.p_linear_p, direction(m.power_alone_p < 1), f"mean\\|X_L\\| ∝ L^{m.power_alone_p:.2g}"),
                 Primary(v.p_quadratic_p, direction(v.power_alone_p < 2), f"entry_var ∝ L^{v.power_alone_p:.2g}")]
        primary = both(parts)
        pre = {q: e2_fit(x, "pre", 1.0, q) for q in e2.QUANTITIES}
        numbers = (f"Peri-LN Δt = 1, {m.runs} gated runs at L = {m.depths}: {primary.effect} (tests of the powers "
                   f"against 1 and 2: p = {m.p_linear_p:.2g}, {v.p_quadratic_p:.2g})" +
                   (f"; Pre-LN Δt = 1 beside it: L^{pre['mean_abs'].power_alone_p:.2g} and "
                    f"L^{pre['entry_var'].power_alone_p:.2g}" if all(f is not None for f in pre.values()) else "") +
                   f". {within_tally(x, 'peri', 'mean_abs')}; entry_var: {within_tally(x, 'peri', 'entry_var')}")
    return Claim("2. Peri-LN: mean \\|x\\| grows at most linearly, its variance quadratically",
                 "E2 after training, Peri-LN Δt = 1, gated runs: ln X_L = α + p·ln L; t-tests of p = 1 (mean\\|X_L\\|) "
                 "and p = 2 (entry_var), both below (intersection: the larger p)",
                 [("2", primary)], numbers)


def claim_dt_tightens(x):
    pairs = e2.dt_pairs(x.e2, x.e2_tables)
    if not len(pairs):
        primary = not_tested(f"no placement, depth and seed with both Δt gated; {gate_note(x)}")
        numbers = gate_note(x)
    else:
        parts = []
        for q in e2.QUANTITIES:
            t = e2.ratio_test(pairs[f"{q}_small"], pairs[f"{q}_large"])
            parts.append(Primary(t["p"], direction(t["smaller"] * 2 > t["pairs"]),
                                 f"{q}: smaller in {t['smaller']} of {t['pairs']} pairs, ×" +
                                 (ci(t["ratio"], t["low"], t["high"]) if t["low"] is not None else f"{t['ratio']:.2g}")))
        primary = both(parts)
        numbers = f"X_L after training, Δt = 0.1 against Δt = 1 (ratio = Δt 1 / Δt 0.1): {primary.effect}"
    return Claim("3. Δt < 1 tightens both",
                 "E2 after training, gated pairs (same placement, depth, seed): sign tests of X_L(Δt = 0.1) < "
                 "X_L(Δt = 1) for mean\\|X_L\\| and entry_var (intersection: the larger p)",
                 [("3", primary)], numbers)


def claim_gradients(x):
    slopes = e2.intervention_slopes(x.e2_tables.intervention, x.e2)
    pre, peri = slopes[slopes.ln == "pre"], slopes[slopes.ln == "peri"]
    test = stats.welch(pre.slope, peri.slope) if len(slopes) else None
    if test is None:
        primary = not_tested("no intervention on gated checkpoints of both placements" +
                             ("" if x.e2_tables.intervention is not None else " (E2 has no intervention table)"))
        numbers = gate_note(x)
    else:
        diff = stats.welch_ci(pre.slope, peri.slope)
        primary = Primary(test[1], direction(diff[0] > 0), f"slope Pre − Peri = {ci(*diff)}")
        numbers = (f"Slope of ln(largest block sensitivity) against ln k, k ∈ "
                   f"{{{', '.join(fmt_num(k) for k in sorted(set(x.e2_tables.intervention.k)))}}}: Pre-LN "
                   f"{pre.slope.mean():.2f} ± {pre.slope.std():.2f} ({len(pre)} checkpoints), Peri-LN "
                   f"{peri.slope.mean():.2f} ± {peri.slope.std():.2f} ({len(peri)}); {primary.effect}; over blocks "
                   f"2..L {pre.slope_deep.mean():.2f} and {peri.slope_deep.mean():.2f}; block 1 the most sensitive in "
                   f"{pre.at_block_1.mean():.0%} and {peri.at_block_1.mean():.0%} of the evaluations")
    numbers += rho_note(x)
    return Claim("4. Pre-LN's gradients grow with its activations; Peri-LN's local sensitivity does not",
                 "E2's gated checkpoints with the branch outputs scaled by k: slope of ln(largest block sensitivity) "
                 "against ln k, Pre- against Peri-LN (Welch)",
                 [("4", primary)], numbers)


def rho_note(x):
    """Spearman's ρ between ‖∂L/∂W_fcproj‖ and the hidden RMS over the blocks, gated runs."""
    d = x.e2_diag[x.e2_diag.gated] if len(x.e2_diag) else x.e2_diag
    if not len(d):
        return ""
    sig = {ln: (int(((d.ln == ln) & (d.rho_p < 0.05) & (d.rho > 0)).sum()), int((d.ln == ln).sum()))
           for ln in ("pre", "peri")}
    return (f". ρ(‖∂L/∂W_fcproj‖, hidden RMS) significantly positive in {sig['pre'][0]} of {sig['pre'][1]} Pre-LN "
            f"and {sig['peri'][0]} of {sig['peri'][1]} Peri-LN runs")


def claim_noise(x):
    d = x.e2_diag[x.e2_diag.gated] if len(x.e2_diag) else x.e2_diag
    keys = ["dt", "depth", "seed"]
    pairs = (d[d.ln == "pre"].merge(d[d.ln == "peri"], on=keys, suffixes=("_pre", "_peri"))
             .dropna(subset=["absolute_amplification_pre", "absolute_amplification_peri"]) if len(d) else d)
    if not len(pairs):
        primary = not_tested(f"no Δt, depth and seed with both placements gated; {gate_note(x)}")
        numbers = gate_note(x)
    else:
        t = e2.ratio_test(pairs.absolute_amplification_peri, pairs.absolute_amplification_pre)
        primary = Primary(t["p"], direction(t["smaller"] * 2 > t["pairs"]),
                          f"Peri-LN smaller in {t['smaller']} of {t['pairs']} pairs, Pre/Peri ×" +
                          (ci(t["ratio"], t["low"], t["high"]) if t["low"] is not None else f"{t['ratio']:.2g}"))
        rel = e2.ratio_test(pairs.amplification_peri, pairs.amplification_pre)
        numbers = (f"Absolute amplification W2(X_L)/W2(X_0): {primary.effect}; relative (divided by the stream's "
                   f"growth) Peri-LN smaller in {rel['smaller']} of {rel['pairs']} (sign test p = {p_value(rel['p'])})")
    return Claim("5. Peri-LN bounds the amplification of input noise",
                 "E2 after training, gated pairs (same Δt, depth, seed): sign test of the absolute amplification "
                 "W2(X_L)/W2(X_0), Peri- below Pre-LN",
                 [("5", primary)], numbers)


def claim_divergence(x):
    got = recorded(x.e3)
    found = e3.tests(got) if len(got) else None
    primaries, numbers = [], []
    for name, test, claimed_first in (("6a", "Pre-LN vs Peri-LN (all wd, Δt)", True),
                                      ("6b", None, True)):
        if found is None:
            primaries.append((name, not_tested("no E3 run")))
            continue
        if test is None:
            test = next((t for t in found.test if t.startswith("Pre-LN: wd ")), None)
        rows = found[(found.test == test) & (found.counted == "failed")] if test else found.iloc[0:0]
        if not len(rows):
            primaries.append((name, not_tested("no such comparison in E3")))
            continue
        t = rows.iloc[0]
        effect = (f"{t.first_failed}/{t.first_runs} against {t.second_failed}/{t.second_runs}, difference "
                  f"{ci(t.difference, t.difference_low, t.difference_high, '+.2f')}")
        primaries.append((name, Primary(t.p, direction(t.difference > 0), effect)))
        stopped = found[(found.test == test) & (found.counted == "stopped")].iloc[0]
        numbers.append(f"{name} {test.replace(' (all wd, Δt)', '').replace(' (all Δt)', '')}: failed {effect} "
                       f"(Fisher p = {p_value(t.p)}); stopped {stopped.first_failed}/{stopped.first_runs} against "
                       f"{stopped.second_failed}/{stopped.second_runs}; final loss rank-sum p = {p_value(t.rank_p)}")
    if found is not None:
        peri = got[got.ln == "peri"]
        numbers.append(f"Peri-LN failed in {int(e1.failed(peri).sum())} of {len(peri)} runs")
        pre = got[got.ln == "pre"]
        if "train_max_attn_logit" in got and pre.train_max_attn_logit.notna().any():
            numbers.append(f"largest attention logit, median: Pre-LN {two_digits(pre.train_max_attn_logit.median())}, "
                           f"Peri-LN {two_digits(peri.train_max_attn_logit.median())}")
    lr = fmt_num(float(got.lr.iloc[0])) if len(got) else "—"
    return Claim("6. Pre-LN diverges more often, more so without weight decay; Peri-LN never",
                 f"E3 at Pre-LN's edge (lr {lr}): Fisher's exact test of failures (E1's rule), 6a Pre- against "
                 "Peri-LN, 6b Pre-LN without against with weight decay",
                 primaries, "; ".join(numbers) if numbers else "no E3 run")


# Claim 7's metrics: (E1 quantity, lower is better).
METRICS = (("L*", True), ("ppl_seq at the best lr", True), ("accuracy at the best lr", False),
           ("ROUGE-1 (stemmed) at the best lr", False), ("LR sensitivity", True))


def learns(x, key):
    """Does E1's configuration `key` learn: its mean L* below unigram_ce − FAIL_SHARE·(unigram_ce −
    bigram_ce) (E1's failure margin)?"""
    done = finished(x.e1)
    uni, bi = done.unigram_ce.mean(), done.bigram_ce.mean()
    return float(np.mean(x.e1_measured[key]["L*"])) < uni - e1.FAIL_SHARE * (uni - bi)


def claim_best(x):
    m = x.e1_measured
    ref = next((k for k in m if k[:2] == ("peri", 0.1)), None)
    if ref is None or len(m[ref]["L*"]) < 2:
        primary, numbers = not_tested("no E1 runs of Peri-LN Δt = 0.1 over several seeds"), "—"
    else:
        parts, shown = [], []
        for quantity, lower in METRICS:
            found = []
            for k in m:
                if k == ref or (quantity == "LR sensitivity" and not learns(x, k)):
                    continue
                test = stats.welch(m[ref].get(quantity, []), m[k].get(quantity, []))
                if test is not None:
                    found.append((k, test[1], (test[0] < 0) == lower))
                    parts.append(Primary(test[1], direction(found[-1][2]), f"{quantity} against {label(k)}"))
            against = [t for t in found if not t[2]]
            if against:
                k, p, _ = min(against, key=lambda t: t[1])
                shown.append(f"{quantity}: **worse** than {label(k)} (p = {p_value(p)})")
            elif found:
                k, p, _ = max(found, key=lambda t: t[1])
                shown.append(f"{quantity}: better than every other, closest {label(k)} (p = {p_value(p)})")
        primary = both(parts) if parts else not_tested("no comparison")
        primary = primary._replace(effect="best on every metric" if primary.direction == CLAIMED else
                                   "not best on every metric")
        numbers = (f"Peri-LN Δt = 0.1 against each other configuration of E1 (Welch, {len(m[ref]['L*'])} seeds; LR "
                   "sensitivity among those that learn): " + "; ".join(shown))
    return Claim("7. Peri-LN with Δt = 0.1 is best on every metric",
                 "E1, Peri-LN Δt = 0.1 against every other configuration, Welch's tests of L*, and at each one's best "
                 "lr ppl_seq, accuracy, ROUGE-1, and of LR sensitivity (intersection: the largest p, or the smallest "
                 "against it)",
                 [("7", primary)], numbers)


def label(key):
    """"Pre-LN Δt = 0.1" of a configuration key (ln, dt, ...)."""
    return f"{PLACEMENT_LABEL[key[0]]} Δt = {fmt_num(key[1])}"


CLAIMS = (claim_exponential_growth, claim_peri_growth, claim_dt_tightens, claim_gradients, claim_noise,
          claim_divergence, claim_best)
