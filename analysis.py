"""analysis.py — the statistics of the experiments in docs/experiments.md (standard library only).

    edge_of_stability    the learning rate E3 runs at, from E1's outcomes
    lr_sensitivity       Wortsman et al.'s LR sensitivity E_η[min(L(η), L_init) − L*]
    fit_laws             linear, quadratic and exponential laws fitted to y(x), compared by AICc
    fisher_exact         Fisher's exact test of a 2×2 table, two-sided p
    sign_test            the exact sign test of paired comparisons, two-sided p

sweep.py imports it to write each experiment's tables; test/test_sweep.cpp (Analysis) checks it
against values computed independently.
"""
import itertools
import math


# ---------------------------------------------------------------------------------------------
# E3's learning rate

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
    lrs = sorted({lr for (ln, lr) in mine if lr > best_lr})
    for lr in lrs:
        bad = [(ln, o) for (ln, l), runs in sorted(mine.items()) if l == lr for o, _ in runs if o != "ok"]
        if bad:
            what = ", ".join(f"{ln}: {o}" for ln, o in bad)
            return lr, (f"the smallest learning rate above the best one ({best_lr:g}) at which a run did not end ok "
                        f"({what})")
    top = max(lr for (ln, lr) in mine)
    return top, "every run above the best learning rate ended ok; the largest learning rate of the grid"


# ---------------------------------------------------------------------------------------------
# E1: learning-rate sensitivity

def lr_sensitivity(final_loss, initial_loss):
    """Wortsman et al. (2023)'s LR sensitivity of one configuration: the mean over the grid of
    learning rates (log-spaced, so a log-uniform expectation) of min(L(η), L_init) − L*, where
    L(η) is the final loss at η (None for a run that stopped: it counts as L_init), L_init the
    loss at initialisation and L* the best final loss over the grid. `final_loss` maps η to L(η).
    Returns (L*, the η of L*, sensitivity), or (None, None, None) when no run finished."""
    finished = {lr: x for lr, x in final_loss.items() if x is not None and math.isfinite(x)}
    if not finished:
        return None, None, None
    best_lr = min(finished, key=finished.get)
    best = finished[best_lr]
    gaps = [min(finished.get(lr, initial_loss), initial_loss) - best for lr in final_loss]
    return best, best_lr, sum(gaps) / len(gaps)


# ---------------------------------------------------------------------------------------------
# E2: growth laws, y(x) for layer x

def solve(a, b):
    """Solves the small linear system a·p = b (lists) by Gaussian elimination with pivoting;
    None when it is singular."""
    n = len(b)
    m = [list(row) + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def polynomial_fit(xs, ys, degree):
    """Least-squares coefficients [c0, c1, ...] of y = Σ c_k x^k, or None."""
    k = degree + 1
    a = [[sum(x ** (i + j) for x in xs) for j in range(k)] for i in range(k)]
    b = [sum(y * x ** i for x, y in zip(xs, ys)) for i in range(k)]
    return solve(a, b)


def exponential_fit(xs, ys):
    """Least-squares (a, r) of y = a·exp(r·x): for each r the best a is closed-form; r is found
    by a scan over a wide range and a golden-section refinement."""
    span = (max(xs) - min(xs)) or 1.0

    def best_a(r):
        e = [math.exp(r * x) for x in xs]
        den = sum(v * v for v in e)
        a = sum(y * v for y, v in zip(ys, e)) / den if den > 0 and math.isfinite(den) else 0.0
        rss = sum((y - a * v) ** 2 for y, v in zip(ys, e)) if math.isfinite(den) else math.inf
        return rss, a

    grid = [(-20 + 40 * i / 400) / span for i in range(401)]
    scores = [best_a(r)[0] for r in grid]
    i = min(range(len(grid)), key=scores.__getitem__)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if best_a(m1)[0] < best_a(m2)[0]:
            hi = m2
        else:
            lo = m1
    r = (lo + hi) / 2
    return best_a(r)[1], r


LAWS = ("linear", "quadratic", "exponential")


def fit_laws(xs, ys):
    """Fits y = a + b·x (linear), y = a + b·x + c·x² (quadratic) and y = a·exp(r·x)
    (exponential) by least squares and compares them by AICc (Gaussian errors; k = number of
    coefficients + 1 for the variance): AICc = n·ln(RSS/n) + 2k + 2k(k+1)/(n−k−1). A law with
    n ≤ k + 1 points is not compared. Returns {law: {"params", "rss", "aicc"}} and the winner
    (lowest AICc; None when no law could be compared), as (fits, winner)."""
    n = len(xs)
    fits = {}
    for law in LAWS:
        if law == "exponential":
            a, r = exponential_fit(xs, ys)
            params = dict(a=a, r=r)
            pred = [a * math.exp(r * x) for x in xs]
        else:
            c = polynomial_fit(xs, ys, 1 if law == "linear" else 2)
            if c is None:
                continue
            params = dict(zip("abc", c))
            pred = [sum(ck * x ** i for i, ck in enumerate(c)) for x in xs]
        rss = sum((y - p) ** 2 for y, p in zip(ys, pred))
        k = len(params) + 1
        aicc = None
        if n > k + 1:
            aicc = n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)
        fits[law] = dict(params=params, rss=rss, aicc=aicc)
    ranked = [law for law in LAWS if law in fits and fits[law]["aicc"] is not None]
    winner = min(ranked, key=lambda law: fits[law]["aicc"]) if ranked else None
    return fits, winner


def law_rate(law, params):
    """The growth rate a law's winning fit says: the slope b (per layer) for linear, the
    curvature c for quadratic, the factor per layer exp(r) for exponential."""
    if law == "linear":
        return "slope", params["b"]
    if law == "quadratic":
        return "curvature", params["c"]
    if law == "exponential":
        return "factor per layer", math.exp(params["r"])
    return None, None


# ---------------------------------------------------------------------------------------------
# E3: Fisher's exact test

def fisher_exact(a, b, c, d):
    """Two-sided p of Fisher's exact test for the 2×2 table [[a, b], [c, d]]: the probability,
    under the hypergeometric law of tables with these margins, of a table no more likely than
    this one (ties within a relative 1e-7, as R's fisher.test)."""
    r1, r2, c1 = a + b, c + d, a + c
    n = r1 + r2
    lo, hi = max(0, c1 - r2), min(r1, c1)

    def prob(x):
        return math.comb(r1, x) * math.comb(r2, c1 - x) / math.comb(n, c1)

    observed = prob(a)
    return min(1.0, sum(p for p in (prob(x) for x in range(lo, hi + 1)) if p <= observed * (1 + 1e-7)))


def sign_test(k, n):
    """Two-sided p of the exact sign test: k of n paired differences have one sign, each sign
    having probability 1/2 under no effect; the binomial probability of a count no more likely
    than k (ties within a relative 1e-7, as R's binom.test). None when n = 0."""
    if n == 0:
        return None
    probs = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
    return min(1.0, sum(p for p in probs if p <= probs[k] * (1 + 1e-7)))


# ---------------------------------------------------------------------------------------------
# Welch's t-test (for metric comparisons between configurations)

def incomplete_beta(a, b, x):
    """The regularised incomplete beta function I_x(a, b) (continued fraction, Numerical
    Recipes' betacf)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - incomplete_beta(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)) / a
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + num / (c if abs(c) > 1e-300 else 1e-300)
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


def welch_t(xs, ys):
    """Welch's two-sample t-test: (t, degrees of freedom, two-sided p); None with fewer than two
    values on a side or no spread at all."""
    if len(xs) < 2 or len(ys) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    vx = sum((x - mx) ** 2 for x in xs) / (len(xs) - 1) / len(xs)
    vy = sum((y - my) ** 2 for y in ys) / (len(ys) - 1) / len(ys)
    if vx + vy == 0:
        return None
    t = (mx - my) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(xs) - 1) + vy ** 2 / (len(ys) - 1))
    return t, df, incomplete_beta(df / 2, 0.5, df / (df + t * t))


# ---------------------------------------------------------------------------------------------
# Rank correlation (for "the gradient grows with the activation")

def ranks(values):
    """Ranks 1..n of the values, ties given their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(xs, ys):
    """Spearman's rank correlation ρ and its two-sided p: exact for n ≤ 8 (the share of the n!
    orderings of the y ranks whose |ρ| is at least the observed one), else from the t
    approximation t = ρ·sqrt((n−2)/(1−ρ²)) with n−2 degrees of freedom; None with fewer than 4
    points or a constant series."""
    n = len(xs)
    if n < 4:
        return None
    rx, ry = ranks(xs), ranks(ys)
    rho = rank_correlation(rx, ry)
    if rho is None:
        return None
    if n <= 8:
        orders = list(itertools.permutations(ry))
        extreme = sum(1 for order in orders if abs(rank_correlation(rx, order)) >= abs(rho) - 1e-12)
        return rho, extreme / len(orders)
    if abs(rho) >= 1:
        return rho, 0.0
    t2 = rho * rho * (n - 2) / (1 - rho * rho)
    return rho, incomplete_beta((n - 2) / 2, 0.5, (n - 2) / (n - 2 + t2))


def rank_correlation(rx, ry):
    """Pearson's correlation of two rank vectors; None when one is constant."""
    n = len(rx)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)
