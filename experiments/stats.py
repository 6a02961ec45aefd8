"""The statistics of the experiments (docs/protocol.md, *The primary tests*), each a named test or
estimate on scipy.stats, numpy and scipy.optimize, with its inputs and its conventions:

    mean_sd             mean, sample standard deviation and n of the finite values
    fisher_exact        Fisher's exact test of a 2×2 table of counts, two-sided
    sign_test           the exact binomial sign test of paired comparisons, two-sided
    welch               Welch's unequal-variance t-test of two samples, two-sided
    spearman            Spearman's rank correlation, two-sided p (exact by permutation for n ≤ 8)
    mean_ci, welch_ci   t intervals of a mean and of a difference of means (Welch)
    holm                Holm's adjustment of a family of p-values
    ols                 least squares with standard errors and t-tests of the coefficients
    fit_laws, aicc      growth laws of a profile y(x) (relative residuals), compared by AICc
    lr_sensitivity      Wortsman et al.'s LR sensitivity E_η[min(L(η), L_init) − L*]
    failure_edge        the learning rate at which runs fail half the time, bracketed by the grid
    mean_test           Student's one-sample t-test with its interval
    cell_contrast       a difference between two groups within cells (cell fixed effects)
    cell_slopes         two groups' slopes within cells, and the test of their difference
    cells_mean          a mean over cells weighted alike, one pooled residual variance
    combined_means      a weighted sum of independent means, Welch–Satterthwaite interval
    firth_logistic      Firth's penalised logistic regression (finite under separation)
    logistic_shift      the shift of a dose-response's 50% point in ln lr, with interval and p
    logistic_edge       one dose-response's 50% learning rate with its interval

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
# Effect sizes and their intervals, multiplicity

def mean_ci(values, level=0.95):
    """(mean, low, high) of the finite values: Student's t interval; None with fewer than two
    values."""
    x = finite_values(values)
    if len(x) < 2:
        return None
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def welch_ci(xs, ys, level=0.95):
    """(mean(x) − mean(y), low, high): the interval of Welch's test (the Welch–Satterthwaite
    degrees of freedom); None where welch() is None."""
    x, y = finite_values(xs), finite_values(ys)
    if welch(x, y) is None:
        return None
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    diff, half = float(x.mean() - y.mean()), float(stats.t.ppf(0.5 + level / 2, df) * math.sqrt(vx + vy))
    return diff, diff - half, diff + half


def holm(ps):
    """Holm's step-down adjustment of the p-values `ps` (None counts as 1): the adjusted p of the
    i-th smallest is max over j ≤ i of min(1, (m − j + 1)·p_(j))."""
    p = [1.0 if v is None else float(v) for v in ps]
    m, adjusted, running = len(p), [0.0] * len(p), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def ols(columns, y):
    """Ordinary least squares of y on the columns (an intercept is not added): (coefficients,
    standard errors, two-sided p of each coefficient against 0, residual sum of squares, residual
    degrees of freedom); None when the design has fewer rows than columns + 1 or is singular."""
    X, y = np.column_stack([np.asarray(c, dtype=float) for c in columns]), np.asarray(y, dtype=float)
    n, k = X.shape
    if n <= k or np.linalg.matrix_rank(X) < k:
        return None
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    rss = float(((y - X @ beta) ** 2).sum())
    df = n - k
    se = np.sqrt(np.diag(np.linalg.inv(X.T @ X)) * rss / df)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(beta / se), df)
    return beta, se, np.where(se > 0, p, 0.0), rss, df


def coefficient_ci(fit, i, level=0.95):
    """(estimate, low, high) of coefficient i of an ols() fit."""
    beta, se, _, _, df = fit
    half = stats.t.ppf(0.5 + level / 2, df) * se[i]
    return float(beta[i]), float(beta[i] - half), float(beta[i] + half)


# ---------------------------------------------------------------------------------------------
# E2: growth laws of a profile y(x) over the layers x

LAWS = ("linear", "quadratic", "power", "exponential")
# The free exponent of each nonlinear law, as a multiple of 1/span(x) for the exponential's rate.
POWER_RANGE = (0.05, 4.0)
RATE_RANGE = (-20.0, 20.0)


def aicc(rss, n, k):
    """Akaike's criterion with the small-sample correction for a least-squares fit with Gaussian
    errors: n·ln(RSS/n) + 2k + 2k(k+1)/(n−k−1), k = the law's coefficients + 1 (the variance);
    None when n ≤ k + 1."""
    if n <= k + 1:
        return None
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def relative_lstsq(basis, y):
    """Coefficients c minimising Σ((y − basis·c)/y)², the squared relative residuals, and that
    sum (the RSS of the fit on the relative scale)."""
    A = basis / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1
    c, *_ = np.linalg.lstsq(A / scale, np.ones_like(y), rcond=None)
    c = c / scale
    return c, float(((1 - A @ c) ** 2).sum())


def one_exponent_fit(x, y, term, bounds):
    """The law y = a + b·term(x, q) with the exponent q in `bounds`: for a given q, a and b are
    linear (relative_lstsq), so the fit is a one-dimensional minimisation over q: a scan of 201
    points brackets the minimum and scipy's bounded Brent method refines it. Returns (a, b, q, rss)."""
    def fit(q):
        basis = np.column_stack([np.ones_like(x), term(x, q)])
        if not np.isfinite(basis).all():
            return math.inf, (0.0, 0.0)
        c, rss = relative_lstsq(basis, y)
        return rss, c

    grid = np.linspace(bounds[0], bounds[1], 201)
    i = int(np.argmin([fit(q)[0] for q in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    q = float(optimize.minimize_scalar(lambda q: fit(q)[0], bounds=(lo, hi), method="bounded",
                                       options=dict(xatol=1e-10)).x)
    rss, (a, b) = fit(q)
    return float(a), float(b), q, rss


def fit_laws(xs, ys):
    """Fits four growth laws to a positive profile y(x), each by least squares of the relative
    residuals (y − f(x))/y, so that a profile spanning decades is fitted along its whole length
    (multiplicative errors):
        linear       a + b·x
        quadratic    a + b·x + c·x²
        power        a + b·x^p, p in POWER_RANGE (√x is p = 1/2)
        exponential  a + b·e^{r·x}, r·span(x) in RATE_RANGE (an offset exponential; r < 0 saturates)
    and compares them by AICc (k = coefficients + 1). Returns ({law: {"params", "rss", "aicc"}},
    the winner: the law of the lowest AICc, None when none could be compared or y is not
    positive)."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    fits = {}
    if len(y) == 0 or not np.isfinite(y).all() or (y <= 0).any():
        return {law: dict(params={}, rss=None, aicc=None) for law in LAWS}, None
    span = (x.max() - x.min()) or 1.0
    for law in LAWS:
        if law in ("linear", "quadratic"):
            degree = 1 if law == "linear" else 2
            c, rss = relative_lstsq(np.column_stack([x ** d for d in range(degree + 1)]), y)
            params = dict(zip("abc", map(float, c)))
        elif law == "power":
            a, b, p, rss = one_exponent_fit(x, y, lambda x, p: x ** p, POWER_RANGE)
            params = dict(a=a, b=b, p=p)
        else:
            a, b, r, rss = one_exponent_fit(x, y, lambda x, r: np.exp(r * x),
                                            (RATE_RANGE[0] / span, RATE_RANGE[1] / span))
            params = dict(a=a, b=b, r=r)
        fits[law] = dict(params=params, rss=rss, aicc=aicc(rss, len(x), len(params) + 1))
    compared = [law for law in LAWS if fits[law]["aicc"] is not None]
    return fits, (min(compared, key=lambda law: fits[law]["aicc"]) if compared else None)


def law_name(law, params):
    """The shape a winning fit says, by the sign or size of its free parameter: "linear",
    "convex quadratic" / "concave quadratic" (c), "sub-linear power" / "super-linear power" (p
    below or above 1), "exponential" (growing: b > 0 and r > 0) / "saturating exponential"."""
    if law == "quadratic":
        return "convex quadratic" if params["c"] > 0 else "concave quadratic"
    if law == "power":
        return "sub-linear power" if params["p"] < 1 else "super-linear power"
    if law == "exponential":
        return "exponential" if params["b"] > 0 and params["r"] > 0 else "saturating exponential"
    return law


# The shapes that grow at most linearly (claim 2's mean |x|).
AT_MOST_LINEAR = ("linear", "concave quadratic", "sub-linear power", "saturating exponential")


def law_rate(law, params):
    """The growth rate a fit says: ("slope", b) per layer for linear, ("curvature", c) for
    quadratic, ("exponent", p) for power, ("factor per layer", e^r) for exponential."""
    if law == "linear":
        return "slope", params["b"]
    if law == "quadratic":
        return "curvature", params["c"]
    if law == "power":
        return "exponent", params["p"]
    if law == "exponential":
        return "factor per layer", math.exp(params["r"])
    return None, None


def simulate_law_recovery(laws, depths, noise, draws, seed=1):
    """How often fit_laws names each known law right at the noise level `noise` (a relative
    Gaussian error on every point, as the residuals of real profiles): {(name, L): share of the
    `draws` profiles y_i = f(i)·(1 + noise·ε_i), i = 1..L, whose winner's law_name is the law's
    own}. `laws` maps a name (the law_name it should be read as) to f."""
    rng = np.random.default_rng(seed)
    recovered = {}
    for depth in depths:
        x = np.arange(1, depth + 1, dtype=float)
        for name, f in laws.items():
            hits = 0
            for _ in range(draws):
                y = f(x) * (1 + noise * rng.standard_normal(depth))
                fits, winner = fit_laws(x, y)
                hits += winner is not None and law_name(winner, fits[winner]["params"]) == name
            recovered[name, depth] = hits / draws
    return recovered


def relative_residual(fits, winner, n):
    """The RMS relative residual of the winning fit, sqrt(RSS/n): the noise level of a profile
    around its law."""
    return math.sqrt(fits[winner]["rss"] / n) if winner else None


# ---------------------------------------------------------------------------------------------
# E1: learning-rate sensitivity and the edge of stability

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


def best_lr(losses):
    """The learning rate of the lowest mean final loss: `losses` maps η to the final losses of
    its runs, a run that stopped counted at its initial loss (lr_sensitivity's convention)."""
    means = {lr: float(np.mean(v)) for lr, v in losses.items() if len(v)}
    return min(means, key=means.get) if means else None


def failure_edge(failed, best):
    """The edge of stability of a set of runs: `failed` maps a learning rate to the list of its
    runs' failures (True = failed); above the best learning rate `best` (so that a run too slow
    to learn at a small learning rate does not count as unstable), the failure rate f(η) and the
    learning rate at which it reaches 1/2, bracketed by the grid: η_hi, the smallest learning rate
    above `best` with f ≥ 1/2, and η_lo, the one below it (`best` itself at the least). The
    estimate interpolates f linearly in ln η between them. Returns a dict: rates {η: (failed,
    runs)} above and at `best`, low, high, edge (None when f stays below 1/2 up to the grid's
    end: not bracketed)."""
    above = sorted(lr for lr in failed if lr >= best)
    rates = {lr: (int(sum(failed[lr])), len(failed[lr])) for lr in above}
    share = {lr: k / n for lr, (k, n) in rates.items() if n}
    high = next((lr for lr in above if lr > best and share.get(lr, 0) >= 0.5), None)
    if high is None:
        return dict(rates=rates, low=above[-1] if above else None, high=None, edge=None)
    low = above[above.index(high) - 1]
    f_lo, f_hi = share[low], share[high]
    t = (0.5 - f_lo) / (f_hi - f_lo) if f_hi > f_lo and f_lo < 0.5 else 0.0
    edge = math.exp(math.log(low) + t * (math.log(high) - math.log(low))) if f_lo < 0.5 else low
    return dict(rates=rates, low=low, high=high, edge=edge)


# ---------------------------------------------------------------------------------------------
# Estimates within cells, and dose-response (docs/protocol.md, *The primary tests*)

def mean_test(values, value=0.0, level=0.95):
    """Student's one-sample t-test of the finite values against `value`: (mean, low, high, p two-sided);
    None with fewer than two values. No spread: p is 0 when the mean is not `value`, else 1."""
    x = finite_values(values)
    if len(x) < 2:
        return None
    mean, low, high = mean_ci(x, level)
    sd = x.std(ddof=1)
    p = float(2 * stats.t.sf(abs(mean - value) / (sd / math.sqrt(len(x))), len(x) - 1)) if sd > 0 else \
        float(mean == value)
    return mean, low, high, p


def cell_contrast(cells, values, groups, level=0.95):
    """The difference between two groups within cells (cell fixed effects): values = μ_cell + d·[group]
    + ε, one residual variance over all cells, fitted by least squares; only cells holding both groups
    enter (a cell with one group says nothing about d). `groups` holds booleans (True: the first group).
    Returns (d, low, high, p two-sided, cells used); None when fewer than two degrees of freedom
    remain or no cell holds both groups."""
    frame = {"cell": list(cells), "y": np.asarray(values, dtype=float), "g": np.asarray(groups, dtype=bool)}
    keep = np.isfinite(frame["y"])
    cell = np.array([str(c) for c in frame["cell"]])[keep]
    y, g = frame["y"][keep], frame["g"][keep]
    both = [c for c in dict.fromkeys(cell) if g[cell == c].any() and (~g[cell == c]).any()]
    if not both:
        return None
    mask = np.isin(cell, both)
    cell, y, g = cell[mask], y[mask], g[mask]
    columns = [(cell == c).astype(float) for c in both] + [g.astype(float)]
    fit = ols(columns, y)
    if fit is None or fit[4] < 2:
        return None
    d, low, high = coefficient_ci(fit, len(both), level)
    return d, low, high, float(fit[2][len(both)]), len(both)


def cell_slopes(cells, x, y, groups, level=0.95):
    """The slopes of y on x within cells, one per group: y = μ_cell + b_g·x + ε (cell fixed effects,
    one residual variance), so that only the variation of x inside a cell (between its seeds)
    informs a slope; the test of b_first − b_second = 0. Returns (b_first − b_second, low, high,
    p two-sided, b_first, b_second); None when the fit is singular or leaves fewer than two
    degrees of freedom."""
    x, y, g = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(groups, dtype=bool)
    cell = np.array([str(c) for c in cells])
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, g, cell = x[keep], y[keep], g[keep], cell[keep]
    names = list(dict.fromkeys(cell))
    columns = [(cell == c).astype(float) for c in names] + [x * g, x * ~g]
    fit = ols(columns, y)
    if fit is None or fit[4] < 2:
        return None
    beta, se, _, rss, df = fit
    k = len(names)
    X = np.column_stack(columns)
    cov = np.linalg.inv(X.T @ X) * rss / df
    d = float(beta[k] - beta[k + 1])
    sd = math.sqrt(cov[k, k] + cov[k + 1, k + 1] - 2 * cov[k, k + 1])
    half = stats.t.ppf(0.5 + level / 2, df) * sd
    p = float(2 * stats.t.sf(abs(d) / sd, df)) if sd > 0 else float(d != 0)
    return d, d - half, d + half, p, float(beta[k]), float(beta[k + 1])


def combined_means(terms, level=0.95):
    """A weighted sum of the means of independent samples, Σ w·mean(x), `terms` the pairs (w, x), with
    its t interval (the variances w²·var(x)/n added, Welch–Satterthwaite's degrees of freedom) and
    two-sided p against 0: (estimate, low, high, p); None with fewer than two values in a sample or
    no spread at all."""
    terms = [(w, finite_values(x)) for w, x in terms]
    if any(len(x) < 2 for _, x in terms):
        return None
    parts = [w * w * x.var(ddof=1) / len(x) for w, x in terms]
    var = sum(parts)
    if var == 0:
        return None
    df = var ** 2 / sum(v * v / (len(x) - 1) for v, (_, x) in zip(parts, terms))
    est, sd = float(sum(w * x.mean() for w, x in terms)), math.sqrt(var)
    half = float(stats.t.ppf(0.5 + level / 2, df) * sd)
    return est, est - half, est + half, float(2 * stats.t.sf(abs(est) / sd, df))


def firth_logistic(X, y, fixed=None, iterations=100):
    """Firth's penalised maximum-likelihood logistic regression of the 0/1 outcomes y on the columns
    of X (an intercept is not added): the log-likelihood plus ½·ln det of the Fisher information,
    which keeps the estimates finite where a plain fit separates (every run above some learning
    rate diverged, none below). `fixed` {column: value} holds coefficients at a value while the
    others are fitted (the penalty still takes every column), for the likelihood-ratio test.
    Newton steps on the modified score, halved while the penalised likelihood falls. Returns
    (coefficients, covariance = the inverse information, penalised log-likelihood); None when the
    information is singular."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    if np.linalg.matrix_rank(X) < X.shape[1]:
        return None  # the information Xᵀ·W·X is singular with X: rounding would hide it from slogdet
    beta = np.zeros(X.shape[1])
    fixed = fixed or {}
    for j, v in fixed.items():
        beta[j] = v
    free = np.array([j not in fixed for j in range(X.shape[1])])

    def penalised(b):
        eta = X @ b
        info = X.T @ (X * (np.exp(-np.logaddexp(0, -eta)) * np.exp(-np.logaddexp(0, eta)))[:, None])
        sign, logdet = np.linalg.slogdet(info)
        if sign <= 0:
            return -np.inf, None
        loglik = float((y * -np.logaddexp(0, -eta) + (1 - y) * -np.logaddexp(0, eta)).sum())
        return loglik + 0.5 * logdet, info

    current, info = penalised(beta)
    if info is None:
        return None
    for _ in range(iterations):
        pi = 1 / (1 + np.exp(-(X @ beta)))
        w = pi * (1 - pi)
        inverse = np.linalg.inv(info)
        h = w * np.einsum("ij,jk,ik->i", X, inverse, X)
        score = X.T @ (y - pi + h * (0.5 - pi))
        step = np.zeros_like(beta)
        step[free] = np.linalg.solve(info[np.ix_(free, free)], score[free])
        for _ in range(30):
            trial, trial_info = penalised(beta + step)
            if trial_info is not None and trial >= current - 1e-12:
                break
            step /= 2
        else:
            break
        beta, current, info = beta + step, trial, trial_info
        if np.abs(step).max() < 1e-9:
            break
    return beta, np.linalg.inv(info), current


def exp_or_inf(values):
    """e^v of each value as plain floats, inf where it overflows (a slope near 0 puts the 50% point and
    its interval's ends far out in ln lr)."""
    with np.errstate(over="ignore"):
        return tuple(float(v) for v in np.exp(np.asarray(values, dtype=float)))


def logistic_shift(log_lr, event, shifted, strata=None, moderator=None, level=0.95):
    """A dose-response: the probability of `event` (0/1 per run) against ln(learning rate), one
    logistic curve per stratum (its own intercept: a weight decay) with one common slope β, and the
    runs flagged `shifted` moved along ln lr: logit P = α_stratum + β·ln lr + γ·shifted (Firth's fit).
    The shift of the 50% learning rate of the flagged runs against the others is Δ = −γ/β in ln lr
    (×e^Δ in lr; positive: the flagged runs reach 50% at a larger lr). With `moderator` (0/1 per run,
    constant within a stratum) the model adds δ·shifted·moderator and the tested quantity is how
    much the moderator changes that shift: Δ = −δ/β (×e^Δ: the shift where the moderator holds over
    the shift where it does not). The interval is the delta method's; the test of γ = 0 (δ = 0) is
    the penalised likelihood ratio (χ² with one degree of freedom), which the verdict uses. Returns
    dict(ratio, low, high, p, slope, gamma); None when the fit fails, every run or none has the
    event, or the slope is not positive (no dose-response)."""
    log_lr, event = np.asarray(log_lr, dtype=float), np.asarray(event, dtype=float)
    shifted = np.asarray(shifted, dtype=float)
    if not 0 < event.sum() < len(event):
        return None
    strata = np.zeros(len(event), dtype=int) if strata is None else np.asarray([str(s) for s in strata])
    names = list(dict.fromkeys(strata))
    columns = [(strata == s).astype(float) for s in names] + [log_lr, shifted]
    if moderator is not None:
        columns.append(shifted * np.asarray(moderator, dtype=float))
    X = np.column_stack(columns)
    full = firth_logistic(X, event)
    if full is None:
        return None
    beta, cov, loglik = full
    slope, tested = len(names), X.shape[1] - 1
    b, g = beta[slope], beta[tested]
    if not b > 0:
        return None
    restricted = firth_logistic(X, event, fixed={tested: 0.0})
    if restricted is None:
        return None
    p = float(stats.chi2.sf(max(0.0, 2 * (loglik - restricted[2])), 1))
    delta = -g / b
    grad = np.array([g / b ** 2, -1 / b])  # ∂Δ/∂β, ∂Δ/∂(tested coefficient)
    block = cov[np.ix_([slope, tested], [slope, tested])]
    sd = math.sqrt(max(0.0, grad @ block @ grad))
    z = stats.norm.ppf(0.5 + level / 2)
    ratio, low, high = exp_or_inf([delta, delta - z * sd, delta + z * sd])
    return dict(ratio=ratio, low=low, high=high, p=p, slope=float(b), gamma=float(g))


def logistic_edge(log_lr, event, level=0.95):
    """One dose-response curve alone: logit P = α + β·ln lr (Firth's fit); the learning rate at which
    P = 1/2, e^{−α/β}, with its delta-method interval: (lr, low, high); None when every run or none
    has the event, or without a positive slope."""
    log_lr, event = np.asarray(log_lr, dtype=float), np.asarray(event, dtype=float)
    if not 0 < event.sum() < len(event):
        return None
    fit = firth_logistic(np.column_stack([np.ones(len(log_lr)), log_lr]), event)
    if fit is None or not fit[0][1] > 0:
        return None
    (a, b), cov, _ = fit
    centre = -a / b
    grad = np.array([-1 / b, a / b ** 2])
    sd = math.sqrt(max(0.0, grad @ cov @ grad))
    z = stats.norm.ppf(0.5 + level / 2)
    return exp_or_inf([centre, centre - z * sd, centre + z * sd])


def cells_mean(cells, values, value=0.0, level=0.95):
    """The mean of `values` over cells, each cell weighted alike (cell fixed effects: the average of
    the cell means), against `value`, with one residual variance pooled over the cells: (mean, low,
    high, p two-sided, cells); None with fewer than two degrees of freedom."""
    y = np.asarray(values, dtype=float)
    cell = np.array([str(c) for c in cells])
    keep = np.isfinite(y)
    y, cell = y[keep], cell[keep]
    names = list(dict.fromkeys(cell))
    df = len(y) - len(names)
    if not names or df < 2:
        return None
    means = np.array([y[cell == c].mean() for c in names])
    counts = np.array([(cell == c).sum() for c in names])
    rss = float(sum(((y[cell == c] - m) ** 2).sum() for c, m in zip(names, means)))
    mean = float(means.mean())
    sd = math.sqrt(rss / df * (1 / counts).sum()) / len(names)
    half = float(stats.t.ppf(0.5 + level / 2, df) * sd)
    p = float(2 * stats.t.sf(abs(mean - value) / sd, df)) if sd > 0 else float(mean != value)
    return mean, mean - half, mean + half, p, len(names)
