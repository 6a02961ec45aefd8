"""The primary tests of the claims (docs/experiments.md, *The third round, pre-registered*), each a
function of a small table with one row per run (or per pair of runs) at one learning rate, and
the rule that joins a test made at each matched learning rate into one. claim_rows.py builds the
tables from the published experiments; power.py and test_claims build them from simulated runs
and call the same functions.

Every test returns a Primary: its two-sided p (None when it cannot be made, with `why`), the
direction its estimate points (CLAIMED, OPPOSITE, or MIXED when the matched learning rates
disagree) and its effect size in words."""
from collections import namedtuple

import numpy as np

from . import stats
from .e2 import ratio_test

CLAIMED, OPPOSITE, MIXED = "claimed", "opposite", "mixed"
Primary = namedtuple("Primary", "p direction effect why", defaults=(None,))


def not_tested(why):
    return Primary(None, None, "—", why)


def direction(claimed):
    return CLAIMED if claimed else OPPOSITE


def ci(est, low, high, spec=".2g"):
    return f"{est:{spec}} (95% CI {low:{spec}} to {high:{spec}})"


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


def agreeing(per_lr):
    """One test made at each matched learning rate ({lr: Primary}), joined: the direction must be the
    same at every one (then p is the largest of theirs); where they disagree the direction is
    MIXED (p the largest too, and the verdict inconclusive). Fewer than two learning rates, or a
    test not made at one of them: not tested."""
    if len(per_lr) < 2:
        return not_tested("fewer than two matched learning rates")
    for lr, p in per_lr.items():
        if p.p is None:
            return not_tested(f"at lr {lr:g}: {p.why}")
    directions = {p.direction for p in per_lr.values()}
    effect = "; ".join(f"lr {lr:g}: {p.effect}" for lr, p in per_lr.items())
    return Primary(max(p.p for p in per_lr.values()), directions.pop() if len(directions) == 1 else MIXED, effect)


# ---------------------------------------------------------------------------------------------
# E2: growth with depth (rows: ln, depth, and the value X_L of one gated run)

def placement_depths(rows, column):
    """{ln: (depths, ln X_L)} of the positive, finite values of `column`, per placement."""
    out = {}
    for ln in ("pre", "peri"):
        values = rows[column].astype(float)
        mine = rows[(rows.ln == ln) & np.isfinite(values) & (values > 0)]
        out[ln] = (mine.depth.to_numpy(dtype=float), np.log(mine[column].to_numpy(dtype=float)))
    return out


def growth_difference(rows, column="mean_abs"):
    """Claim 1: ln X_L = α_pl + p_pl·ln L + r_pl·L fitted jointly to both placements (one residual
    variance), the t-test of r_pre − r_peri = 0; claimed when Pre-LN's r is the larger."""
    data = placement_depths(rows, column)
    if any(len(set(L)) < 3 for L, _ in data.values()):
        return not_tested("fewer than three depths of a placement's runs")
    L = np.concatenate([data["pre"][0], data["peri"][0]])
    y = np.concatenate([data["pre"][1], data["peri"][1]])
    pre = np.concatenate([np.ones(len(data["pre"][0])), np.zeros(len(data["peri"][0]))])
    fit = stats.ols([np.ones_like(L), pre, np.log(L), pre * np.log(L), L, pre * L], y)
    if fit is None:
        return not_tested("the joint fit is singular")
    d, low, high = stats.coefficient_ci(fit, 5)
    return Primary(float(fit[2][5]), direction(d > 0), f"r_pre − r_peri = {ci(d, low, high)} per block")


def power_of_depth(L, y):
    """ln X_L = α + p·ln L: the ols() fit, or None."""
    return stats.ols([np.ones_like(L), np.log(L)], y)


def bound_part(fit, bound, name, below):
    """One part of claim 2: the power p of L against `bound`, claimed when it lies below (or, with
    below False, above) it."""
    p = float(fit[0][1])
    return Primary(stats.coefficient_test(fit, 1, bound), direction((p < bound) == below), f"{name} ∝ L^{p:.2g}")


def bounds(rows):
    """Claim 2: Peri-LN's mean|X_L| grows at most like L and its entry_var like L² (t-tests of the
    powers against 1 and 2, both below), and Pre-LN violates a bound (either power above it: the
    union's p is twice the smaller p of those above); the intersection of the three. The effect
    names each part's direction, so that a verdict says which part decided it."""
    fits = {}
    for column in ("mean_abs", "entry_var"):
        for ln, (L, y) in placement_depths(rows, column).items():
            fits[ln, column] = power_of_depth(L, y) if len(set(L)) >= 3 else None
    if any(f is None for f in fits.values()):
        return not_tested("fewer than three depths of a placement's runs")
    peri = [bound_part(fits["peri", "mean_abs"], 1.0, "Peri-LN mean\\|X_L\\|", True),
            bound_part(fits["peri", "entry_var"], 2.0, "Peri-LN entry_var", True)]
    pre = [bound_part(fits["pre", "mean_abs"], 1.0, "Pre-LN mean\\|X_L\\|", False),
           bound_part(fits["pre", "entry_var"], 2.0, "Pre-LN entry_var", False)]
    above = [p for p in pre if p.direction == CLAIMED]
    effect = " and ".join(p.effect for p in pre)
    violated = (Primary(min(1.0, 2 * min(p.p for p in above)), CLAIMED, effect) if above else
                Primary(max(p.p for p in pre), OPPOSITE, effect))
    within = both(peri)
    joined = both(peri + [violated])
    said = (f"Peri-LN {'within' if within.direction == CLAIMED else 'outside'} its bounds ({within.effect}, "
            f"p = {within.p:.2g}); Pre-LN {'outside' if violated.direction == CLAIMED else 'within'} them "
            f"({violated.effect}, p = {violated.p:.2g})")
    return joined._replace(effect=said)


def dt_tightens_in(pairs, name):
    """Claim 3 in one placement: pairs of the same depth and seed at Δt = 0.1 and 1 (columns
    QUANTITY_small, QUANTITY_large): sign tests of X_L(0.1) < X_L(1) for mean_abs and entry_var,
    both."""
    if not len(pairs):
        return not_tested(f"no {name} depth and seed with runs at both Δt")
    parts = []
    for q in ("mean_abs", "entry_var"):
        t = ratio_test(pairs[f"{q}_small"], pairs[f"{q}_large"])
        parts.append(Primary(t["p"], direction(t["smaller"] * 2 > t["pairs"]),
                             f"{name} {q}: smaller in {t['smaller']} of {t['pairs']} pairs, ×{t['ratio']:.2g}"))
    return both(parts)


def dt_tightens(pairs):
    """Claim 3: an intersection over the placements (rows: ln and the pair's columns), each tested
    on its own pairs (dt_tightens_in): supported only when both are tighter at Δt = 0.1, against
    when either is looser. Peri-LN's ratio is ≈ 1/Δt by construction, so Pre-LN's half carries
    the information (docs/experiments.md, *Review of the pre-registration*)."""
    return both([dt_tightens_in(pairs[pairs.ln == ln], name) for ln, name in (("pre", "Pre-LN"), ("peri", "Peri-LN"))])


def natural_slopes(runs):
    """Claim 4 (natural variation): over finished runs (rows: ln, mean_abs_L, sens_mean_max) at many
    learning rates and seeds, ln(largest block sensitivity) = a_pl + b_pl·ln mean|X_L| fitted
    jointly to both placements (one residual variance), the t-test of b_pre − b_peri = 0; claimed
    when Pre-LN's slope is the larger (Peri-LN's claim predicts b_peri ≈ 0)."""
    keep = runs[(runs.mean_abs_L > 0) & (runs.sens_mean_max > 0) & runs.ln.isin(["pre", "peri"])]
    counts = {ln: len(keep[keep.ln == ln]) for ln in ("pre", "peri")}
    if min(counts.values()) < 3:
        return not_tested("fewer than three finished runs of a placement with a sensitivity")
    x = np.log(keep.mean_abs_L.to_numpy(dtype=float))
    y = np.log(keep.sens_mean_max.to_numpy(dtype=float))
    pre = (keep.ln == "pre").to_numpy(dtype=float)
    fit = stats.ols([np.ones_like(x), pre, x, pre * x], y)
    if fit is None:
        return not_tested("the joint fit is singular")
    d, low, high = stats.coefficient_ci(fit, 3)
    peri_slope = float(fit[0][2])
    return Primary(float(fit[2][3]), direction(d > 0),
                   f"b_pre − b_peri = {ci(d, low, high)} (b_peri {peri_slope:.2g}; {counts['pre']} and "
                   f"{counts['peri']} runs)")


def slope_difference(slopes):
    """Claim 4's secondary (its sign is set by construction: Pre-LN's in (0, 1), Peri-LN's 0): the
    slope of ln(largest block sensitivity over blocks 2..L) against ln k per gated
    checkpoint (rows: ln, slope_deep), Welch's test of Pre- against Peri-LN; claimed when Pre-LN's
    is the larger."""
    pre = slopes[slopes.ln == "pre"].slope_deep.dropna()
    peri = slopes[slopes.ln == "peri"].slope_deep.dropna()
    test = stats.welch(pre, peri)
    if test is None:
        return not_tested("fewer than two intervened checkpoints of a placement")
    d, low, high = stats.welch_ci(pre, peri)
    return Primary(test[1], direction(d > 0), f"slope over blocks 2..L, Pre − Peri = {ci(d, low, high)}")


def amplification(pairs):
    """Claim 5: pairs of both placements at the same Δt, depth and seed (columns
    absolute_amplification_pre, _peri): the sign test of Peri-LN's absolute amplification below
    Pre-LN's."""
    if not len(pairs):
        return not_tested("no Δt, depth and seed with runs of both placements")
    t = ratio_test(pairs.absolute_amplification_peri, pairs.absolute_amplification_pre)
    return Primary(t["p"], direction(t["smaller"] * 2 > t["pairs"]),
                   f"Peri-LN smaller in {t['smaller']} of {t['pairs']} pairs, Pre/Peri ×{t['ratio']:.2g}")


# ---------------------------------------------------------------------------------------------
# E3: divergence counts (flags: one boolean per run)

def more_often(first, second):
    """Claims 6a, 6b: Fisher's exact test of the events in `first` against `second` (boolean
    flags), claimed when `first` has the higher rate; with the difference and Newcombe's
    interval."""
    first, second = np.asarray(first, dtype=bool), np.asarray(second, dtype=bool)
    if not len(first) or not len(second):
        return not_tested("no runs of one side")
    a, c = int(first.sum()), int(second.sum())
    d, low, high = stats.rate_difference(a, len(first), c, len(second))
    return Primary(stats.fisher_exact(a, len(first) - a, c, len(second) - c), direction(d > 0),
                   f"{a}/{len(first)} against {c}/{len(second)}, difference {ci(d, low, high, '+.2f')}")


# ---------------------------------------------------------------------------------------------
# E1: best on every metric

def best_everywhere(reference, others, lower):
    """Claim 7 at one learning rate: `reference` ({metric: values over the seeds}) against each of
    `others` ({label: {metric: values}}) by Welch's test, per metric; `lower` {metric: lower is
    better}. The intersection over every metric and competitor; the effect names the closest
    competitor (or the strongest one against)."""
    parts = []
    for label, theirs in others.items():
        for metric, lower_better in lower.items():
            test = stats.welch(reference.get(metric, []), theirs.get(metric, []))
            if test is not None:
                parts.append(Primary(test[1], direction((test[0] < 0) == lower_better), f"{metric} against {label}"))
    if not parts:
        return not_tested("no comparison with two seeds on each side")
    joined = both(parts)
    against = [p for p in parts if p.direction == OPPOSITE]
    decisive = min(against, key=lambda p: p.p) if against else max(parts, key=lambda p: p.p)
    return joined._replace(effect=("worse on " if against else "better on all; closest: ") +
                           f"{decisive.effect} (p = {decisive.p:.2g})")
