"""The statistics of the experiments (docs/experiments.md, "The protocol"), each a named test or
estimate on scipy.stats, numpy and scipy.optimize, with its inputs and its conventions:

    mean_sd             mean, sample standard deviation and n of the finite values
    fisher_exact        Fisher's exact test of a 2×2 table of counts, two-sided
    sign_test           the exact binomial sign test of paired comparisons, two-sided
    welch               Welch's unequal-variance t-test of two samples, two-sided
    spearman            Spearman's rank correlation, two-sided p (exact by permutation for n ≤ 8)
    fit_laws, aicc      least-squares growth laws of a profile y(x), compared by AICc
    lr_sensitivity      Wortsman et al.'s LR sensitivity E_η[min(L(η), L_init) − L*]
    edge_of_stability   the learning rate E3 runs at, from E1's outcomes

Every function takes plain sequences (lists, numpy arrays or pandas Series) and returns plain
floats, or None where the statistic is not defined (too few values, no spread).
"""
import functools
import itertools
import math
import statistics
import warnings

import numpy as np
from scipy import optimize, stats


def finite_values(values):
    """The finite numbers of `values` as a float array (None and NaN dropped)."""
    x = np.array([np.nan if v is None else v for v in values], dtype=float)
    return x[np.isfinite(x)]


def mean_sd(values):
    """(mean, sample standard deviation (n − 1; None for one value), n) of the finite values;
    (None, None, 0) without any. Python's statistics module sums exactly, so that equal values
    have a standard deviation of exactly 0."""
    x = [float(v) for v in finite_values(values)]
    if not x:
        return None, None, 0
    return statistics.fmean(x), (statistics.stdev(x) if len(x) > 1 else None), len(x)


# ---------------------------------------------------------------------------------------------
# Tests

def fisher_exact(a, b, c, d):
    """Two-sided p of Fisher's exact test for the table [[a, b], [c, d]] (scipy: the tables no
    more likely than the observed one under the hypergeometric law, as R's fisher.test)."""
    return float(stats.fisher_exact([[a, b], [c, d]], alternative="two-sided")[1])


def sign_test(k, n):
    """Two-sided p of the exact sign test: k of n paired differences have one sign, each sign
    having probability 1/2 under no effect (scipy's binomtest, as R's binom.test). None when n = 0."""
    return float(stats.binomtest(k, n, 0.5).pvalue) if n else None


def welch(xs, ys):
    """Welch's two-sample t-test, two-sided: (t, p); None with fewer than two finite values on a
    side or no spread at all."""
    x, y = finite_values(xs), finite_values(ys)
    if len(x) < 2 or len(y) < 2 or x.var() + y.var() == 0:
        return None
    with warnings.catch_warnings():  # a constant side is fine; scipy warns of lost precision in it
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(x, y, equal_var=False)
    return float(result.statistic), float(result.pvalue)


EXACT_SPEARMAN_N = 8  # up to 8! = 40320 orderings


def spearman(xs, ys):
    """Spearman's ρ, Pearson's correlation of the ranks (tied values get their mean rank), and
    its two-sided p: for n ≤ 8 exact, the share of the n! orderings of the y ranks whose |ρ|
    reaches the observed one (the permutation test, every ordering enumerated); above, from Student's t with n − 2
    degrees of freedom (scipy's pearsonr on the ranks, as spearmanr). None with fewer than 4
    points or a constant series."""
    rx, ry = stats.rankdata(xs, method="average"), stats.rankdata(ys, method="average")
    n = len(rx)
    if n < 4 or rx.std() == 0 or ry.std() == 0:
        return None
    rho = float(rank_correlation(rx, ry))
    if n > EXACT_SPEARMAN_N:
        return rho, float(stats.pearsonr(rx, ry)[1])
    null = rank_correlation(rx, ry[orderings(n)])  # ρ under every ordering of the y ranks
    return rho, float(np.mean(np.abs(null) >= abs(rho) - 1e-12))


@functools.lru_cache(maxsize=None)
def orderings(n):
    """The n! orderings of range(n), one per row."""
    return np.array(list(itertools.permutations(range(n))))


def rank_correlation(rx, ry, axis=-1):
    """Pearson's correlation of the rank vector rx with each rank vector along `axis` of ry."""
    dx = rx - rx.mean()
    dy = ry - ry.mean(axis=axis, keepdims=True)
    return (dy * dx).sum(axis=axis) / np.sqrt((dx * dx).sum() * (dy * dy).sum(axis=axis))


# ---------------------------------------------------------------------------------------------
# E2: growth laws of a profile y(x) over the layers x

LAWS = ("linear", "quadratic", "exponential")


def aicc(rss, n, k):
    """Akaike's criterion with the small-sample correction for a least-squares fit with Gaussian
    errors: n·ln(RSS/n) + 2k + 2k(k+1)/(n−k−1), k = the law's coefficients + 1 (the variance);
    None when n ≤ k + 1."""
    if n <= k + 1:
        return None
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def exponential_fit(x, y):
    """Least-squares (a, r) of y = a·e^{r·x}. For a given r the best a is linear least squares,
    so the fit is a one-dimensional minimisation over r: a scan of r·(span of x) over [−20, 20]
    brackets the minimum, scipy's bounded Brent method refines it."""
    def best_a(r):
        e = np.exp(r * x)
        den = e @ e
        if not np.isfinite(den) or den == 0:
            return math.inf, 0.0
        a = (y @ e) / den
        return float(((y - a * e) ** 2).sum()), float(a)

    span = (x.max() - x.min()) or 1.0
    grid = np.linspace(-20, 20, 401) / span
    i = int(np.argmin([best_a(r)[0] for r in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    r = optimize.minimize_scalar(lambda r: best_a(r)[0], bounds=(lo, hi), method="bounded",
                                 options=dict(xatol=1e-12)).x
    return best_a(r)[1], float(r)


def fit_laws(xs, ys):
    """Fits y = a + b·x (linear), y = a + b·x + c·x² (quadratic) by least squares (numpy) and
    y = a·e^{r·x} (exponential_fit), and compares them by AICc. Returns ({law: {"params",
    "rss", "aicc"}}, the winner: the law of the lowest AICc, None when none could be compared)."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    fits = {}
    for law in LAWS:
        if law == "exponential":
            a, r = exponential_fit(x, y)
            params, pred = dict(a=a, r=r), a * np.exp(r * x)
        else:
            coef = np.polynomial.polynomial.polyfit(x, y, 1 if law == "linear" else 2)
            params, pred = dict(zip("abc", map(float, coef))), np.polynomial.polynomial.polyval(x, coef)
        rss = float(((y - pred) ** 2).sum())
        fits[law] = dict(params=params, rss=rss, aicc=aicc(rss, len(x), len(params) + 1))
    compared = [law for law in LAWS if fits[law]["aicc"] is not None]
    return fits, (min(compared, key=lambda law: fits[law]["aicc"]) if compared else None)


def law_rate(law, params):
    """The growth rate a fit says: ("slope", b) per layer for linear, ("curvature", c) for
    quadratic, ("factor per layer", e^r) for exponential."""
    if law == "linear":
        return "slope", params["b"]
    if law == "quadratic":
        return "curvature", params["c"]
    if law == "exponential":
        return "factor per layer", math.exp(params["r"])
    return None, None


# ---------------------------------------------------------------------------------------------
# E1 and E3's learning rate

def lr_sensitivity(final_loss, initial_loss):
    """Wortsman et al. (2023)'s LR sensitivity of one configuration: the mean over the grid of
    learning rates (log-spaced, so a log-uniform expectation) of min(L(η), L_init) − L*, with
    L(η) the final loss at η (None for a run that stopped: it counts as L_init), L_init the loss
    at initialisation and L* the best final loss over the grid. `final_loss` maps η to L(η).
    Returns (L*, the η of L*, sensitivity), or (None, None, None) when no run finished."""
    finished = {lr: x for lr, x in final_loss.items() if x is not None and math.isfinite(x)}
    if not finished:
        return None, None, None
    best_lr = min(finished, key=finished.get)
    best = finished[best_lr]
    gaps = [min(finished.get(lr, initial_loss), initial_loss) - best for lr in final_loss]
    return best, best_lr, float(np.mean(gaps))


def edge_of_stability(results, placements):
    """The edge-of-stability learning rate of an E1 sweep: among the learning rates above the one
    of the lowest final loss of `placements`' runs (so that a run too slow to learn at a small
    learning rate does not count as unstable), the smallest at which one of those runs did not
    end ok; when every such run ended ok, the largest learning rate (E3 then tests it, and says
    so). `results` maps (placement, lr) to a list of (outcome, final loss or None) of its runs.
    Returns (lr, a sentence saying why), or (None, why not)."""
    mine = {(ln, lr): runs for (ln, lr), runs in results.items() if ln in placements}
    finished = [(loss, lr) for (ln, lr), runs in mine.items() for outcome, loss in runs if loss is not None]
    if not finished:
        return None, "no finished run of " + ", ".join(placements)
    best_lr = min(finished)[1]
    for lr in sorted({lr for (ln, lr) in mine if lr > best_lr}):
        bad = [(ln, o) for (ln, l), runs in sorted(mine.items()) if l == lr for o, _ in runs if o != "ok"]
        if bad:
            what = ", ".join(f"{ln}: {o}" for ln, o in bad)
            return lr, (f"the smallest learning rate above the best one ({best_lr:g}) at which a run did not end ok "
                        f"({what})")
    top = max(lr for (ln, lr) in mine)
    return top, "every run above the best learning rate ended ok; the largest learning rate of the grid"
