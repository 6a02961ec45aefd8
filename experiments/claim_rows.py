"""The claims of the paper, one function each, every one with its primary test named before the
runs (docs/protocol.md, *The primary tests*): its effect size, its p-value and the direction it
points, what of its direction holds by construction, and its secondary rows. claims.py adjusts the
primary p-values for multiplicity (Holm, across the claims) and turns each into a verdict by one
rule (`verdict`).

Each claim function takes the loaded experiments (claims.load_experiments) and returns
Claim(title, test, construction, primaries, numbers): `primaries` is a list of (name, Primary) —
one per claim, two for claim 6, whose two halves are claims of their own in the family. The
statistics themselves are primary.py's, on tables built here and in e1.py, e2.py."""
from collections import namedtuple

import numpy as np

from . import e1, primary, stats
from .grid import PLACEMENT_LABEL, fmt_num
from .primary import CLAIMED, CONSTRUCTION, OPPOSITE, not_tested, over_range, per_dt
from .tables import finished, recorded

ALPHA = 0.05
Claim = namedtuple("Claim", "title test construction primaries numbers")


def verdict(primary_test, adjusted):
    """The rule from numbers to verdict (docs/protocol.md, *From the numbers to the verdict*):
    supported when the estimate points the claimed way and the Holm-adjusted p is below ALPHA; not
    supported when it points the other way with an adjusted p below ALPHA; else inconclusive at
    this scale (also when not tested, and always where the direction goes no further than the
    construction: what algebra alone gives never makes a verdict supported)."""
    if primary_test.p is None:
        return f"**inconclusive** at this scale (not tested: {primary_test.why})"
    if primary_test.direction == CONSTRUCTION:
        return "**inconclusive**: it holds, but no further than the construction gives"
    if adjusted < ALPHA and primary_test.direction == CLAIMED:
        return "**supported**"
    if adjusted < ALPHA and primary_test.direction == OPPOSITE:
        return "**not supported**"
    return "**inconclusive** at this scale"


def label(key):
    """"Pre-LN Δt = 0.1" of a configuration key (ln, dt, ...)."""
    return f"{PLACEMENT_LABEL[key[0]]} Δt = {fmt_num(key[1])}"


def lrs_text(lrs):
    return ", ".join(fmt_num(lr) for lr in lrs) if len(lrs) else "none"


def primary_text(p):
    return p.effect if p.p is not None else f"not tested ({p.why})"


def spread_text(values, spec=".2g"):
    """"mean ± sd (n)" of the finite values, "—" without any."""
    mean, sd, n = stats.mean_sd(values)
    if mean is None:
        return "—"
    return f"{mean:{spec}}" + (f" ± {sd:{spec}}" if sd is not None else "") + f" ({n})"


def in_range(x, frame):
    """The rows of `frame` at E1's learning rates (the range the tests run over, fixed before the runs)."""
    return frame[frame.lr.isin(x.range)]


def range_note(x):
    """E1's learning rates, with how many runs failed E1's line at each."""
    got = recorded(x.e1[x.e1.ln.isin(["pre", "peri"])])
    failed = [f"{int(e1.failed(got[got.lr == lr]).sum())}/{int((got.lr == lr).sum())}" for lr in x.range]
    learning = e1.learning_range(x.e1)
    return (f"E1's lrs {lrs_text(x.range)} (runs failing E1's line: {', '.join(failed)}; every configuration learns "
            f"at {lrs_text(learning)})")


# ---------------------------------------------------------------------------------------------
# E2: growth inside deep runs

def deep_cells(deep, column):
    """Per placement, lr and depth: the mean ± sd of `column` over the runs."""
    return "; ".join(f"{PLACEMENT_LABEL[ln]} lr {fmt_num(lr)} L = {int(depth)}: {spread_text(rows[column])}"
                     for (ln, lr, depth), rows in deep.groupby(["ln", "lr", "depth"], sort=True))


def gate_note(x):
    got = recorded(x.e2)
    return (f"{len(x.e2_deep)} of {len(got)} E2 runs finished with a profile (all enter; {int(x.e2_deep.gated.sum())} "
            f"of them also end 0.75 nats below unigram_ce)")


def claim_exponential_growth(x):
    deep = x.e2_deep[x.e2_deep.dt == 1.0]
    found = primary.rate_kept(deep)
    numbers = (f"{primary_text(found)}. Per run, the deep-half rate per block: {deep_cells(deep, 'rate')}. "
               f"{gate_note(x)}. Secondary: {primary_text(primary.rate_contrast(deep))}; inside each run, the rate "
               f"over the last quarter of the blocks minus over the quarter before it, Pre-LN "
               f"{primary.rate_curvature(deep, 'pre')}, Peri-LN {primary.rate_curvature(deep, 'peri')}")
    peri = deep[deep.ln == "peri"]
    depths = sorted(set(peri.depth))
    if len(depths) == 2:
        terms = [(sign, peri[peri.depth == d].rate) for sign, d in ((1.0, depths[1]), (-primary.KEPT_RATE, depths[0]))]
        kept = stats.combined_means(terms)
        if kept is not None:
            numbers += (f"; Peri-LN's rate at L = {depths[1]} − {primary.KEPT_RATE:g}·rate at L = {depths[0]}: "
                        f"{primary.ci(*kept[:3])} (p = {kept[3]:.2g})")
    return Claim("1. Pre-LN hidden states grow exponentially with depth",
                 "E2's runs at L = 64 and 128 (Δt = 1, lr 0.01 and 0.03): per run the rate r of ln mean\\|X_l\\| per "
                 "block over l ∈ [L/2, L]; Pre-LN's mean r at 128 − ¾·(mean r at 64), each lr alike (an exponential "
                 "keeps its rate, a linear or power law halves it)",
                 "none", [("1", found)], numbers)


def claim_peri_growth(x):
    deep = x.e2_deep[x.e2_deep.dt == 1.0]
    found = primary.pre_outside_bounds(deep)
    numbers = (f"{primary_text(found)}. Reported, not tested (by construction): {primary.peri_within_bounds(deep)}. "
               f"Per run the local power of mean\\|X_l\\|: {deep_cells(deep, 'power_mean')}")
    return Claim("2. Peri-LN: mean \\|x\\| grows at most linearly, its variance quadratically (Pre-LN not)",
                 "E2 (as claim 1): per run the local powers of l over l ∈ [L/2, L] (slopes of ln mean\\|X_l\\| and ln "
                 "entry_var_l on ln l); Pre-LN's, averaged over the (lr, L) cells, against a linear law's 1 and a "
                 "quadratic law's 2: above either (claimed), below both (against)",
                 "Peri-LN's half: each residual add is a LayerNorm output, so mean\\|X_L\\| ≤ mean\\|X_0\\| + Δt·Σ_l "
                 "(max\\|γ_l\\| + max\\|β_l\\|), linear in L given the learned gains (docs/protocol.md); reported, not "
                 "tested", [("2", found)], numbers)


# ---------------------------------------------------------------------------------------------
# E1: Δt, sensitivities, noise, metrics

def init_ratios(x):
    """Per placement, the ratio mean|X_L|(Δt = 1)/mean|X_L|(Δt = 0.1) at initialisation (step 0,
    ./train's first stats record) over E1's pairs: what the construction gives before any training."""
    init = x.e1_tables.init_layers
    if init is None or not len(init):
        return "—"
    last = init.sort_values("layer").groupby("run").last().mean_abs
    runs = x.e1.assign(init_mean_abs=x.e1.run.map(last))
    parts = []
    for ln in ("pre", "peri"):
        mine = runs[runs.ln == ln]
        pairs = mine[mine.dt == 0.1].merge(mine[mine.dt == 1.0], on=["lr", "seed"], suffixes=("_small", "_large"))
        ratio = np.log(pairs.init_mean_abs_large / pairs.init_mean_abs_small).dropna()
        if len(ratio):
            parts.append(f"{PLACEMENT_LABEL[ln]} ×{np.exp(ratio.mean()):.3g}")
    return ", ".join(parts) or "—"


def claim_dt_tightens(x):
    pairs = in_range(x, e1.dt_pairs(x.e1))
    found = over_range({lr: primary.dt_beyond_construction(pairs[pairs.lr == lr], 0.1) for lr in x.range})
    return Claim("3. Δt < 1 tightens both",
                 "E1's pairs (placement, lr, seed) at Δt = 0.1 and 1 at each of E1's lrs: the mean ln X_L(1)/X_L(0.1) "
                 "per placement, lr and quantity against the construction's ×10 (mean\\|X_L\\|) and ×100 (entry_var) "
                 "(Student's t): claimed above it everywhere, against below ×1 anywhere",
                 f"the direction: a stream made of branch outputs is Δt times smaller at Δt for the same function "
                 f"(LayerNorm's scale invariance; docs/protocol.md), ×10 and ×100 here; at initialisation "
                 f"mean\\|X_L\\| {init_ratios(x)}", [("3", found)], f"{range_note(x)}: {primary_text(found)}")


def claim_gradients(x):
    done = in_range(x, finished(x.e1[x.e1.ln.isin(["pre", "peri"])]))
    found = primary.within_cell_slopes(done)
    pooled = primary.pooled_slopes(done)
    numbers = (f"{range_note(x)}: {primary_text(found)}. Secondary, the third round's test (one slope per placement "
               f"over every lr, so that lrs with large activations and large sensitivities make a slope: confounded): "
               f"{primary_text(pooled)}")
    if pooled.p is not None:
        numbers += f" (p = {pooled.p:.2g})"
    return Claim("4. Pre-LN's gradients grow with its activations; Peri-LN's local sensitivity does not",
                 "E1's finished runs: ln(largest block sensitivity) = μ_cell + b_pl·ln "
                 "mean\\|X_L\\| with a cell per (placement, Δt, lr), so that only the seeds' variation inside a cell "
                 "informs b; t-test of b_pre − b_peri (Pre larger; Peri-LN's claim predicts b ≈ 0)",
                 "none in the primary test (the intervention's slope, 0 for Peri-LN by construction, is not run)",
                 [("4", found)], numbers)


def claim_noise(x):
    pairs = in_range(x, e1.placement_pairs(x.e1, x.e1_tables.layers))
    found = over_range({lr: primary.amplification_at(pairs[pairs.lr == lr]) for lr in x.range})
    relative = over_range({lr: primary.amplification_at(pairs[pairs.lr == lr], "log_relative") for lr in x.range})
    old = primary.amplification_at_two(pairs, x.range[-2:]) if len(x.range) >= 2 else not_tested("fewer than two lrs")
    return Claim("5. Peri-LN bounds the amplification of input noise",
                 "E1's pairs (Δt, lr, seed): ln(absolute amplification Pre/Peri), W2(X_L)/W2(X_0), the mean over the "
                 "two Δt cells at each of E1's lrs (t); the verdict follows the whole range (claimed at every lr)",
                 "none", [("5", found)],
                 f"{range_note(x)}: {primary_text(found)}. Beside it, the relative amplification (divided by the "
                 f"stream's growth): {primary_text(relative)}. Secondary, the third round's test (sign tests at the "
                 f"two largest lrs of the range only): {primary_text(old)}")


# ---------------------------------------------------------------------------------------------
# E3: divergence as a dose-response

EVENTS = (("diverged", "diverged (the primary event)", e1.diverged),
          ("ran away", "stopped or ended above its first loss", e1.ran_away),
          ("broke", "diverged or collapsed", e1.broke), ("failed", "failed (E1's line)", e1.failed))


def edges_text(got, event):
    """Per placement, Δt and weight decay, the 50% learning rate of `event` (stats.logistic_edge)."""
    parts = []
    for (ln, dt, wd), rows in got.groupby(["ln", "dt", "wd"], sort=True):
        found = stats.logistic_edge(np.log(rows.lr.to_numpy(dtype=float)), event(rows).to_numpy(dtype=float))
        parts.append(f"{PLACEMENT_LABEL[ln]} Δt {fmt_num(dt)} wd {fmt_num(wd)}: " +
                     ("—" if found is None else f"{found[0]:.2g} ({found[1]:.2g}–{found[2]:.2g})"))
    return "; ".join(parts)


def claim_divergence(x):
    got = recorded(x.e3)
    runs = got.assign(diverged=e1.diverged(got))
    six_a = per_dt(runs, primary.divergence_shift)
    six_b = per_dt(runs, primary.weight_decay_gap)
    numbers = [f"6a {primary_text(six_a)}", f"6b {primary_text(six_b)}"]
    if len(got):
        for ln in ("pre", "peri"):
            found = per_dt(runs, lambda r, ln=ln: primary.weight_decay_shift(r, ln))
            numbers.append(f"secondary, {PLACEMENT_LABEL[ln]}'s own weight-decay shift: {primary_text(found)}")
        numbers += [f"50% lr (95% CI) of each event, per configuration — {name}: {edges_text(got, event)}"
                    for _, name, event in EVENTS]
        numbers.append("runs: " + ", ".join(f"{PLACEMENT_LABEL[ln]} {int(e1.diverged(rows).sum())} of {len(rows)} diverged"
                                           for ln, rows in got.groupby("ln", sort=False)))
    return Claim("6. Pre-LN diverges at smaller learning rates than Peri-LN, more so without weight decay",
                 f"E3 (lr {lrs_text(sorted(set(got.lr)))}; wd 0, 0.1; Δt 1, 0.1): diverged = stopped, ended above its "
                 "first loss, or collapsed after a blow-up of 1 nat; a logistic curve in ln lr per Δt (an intercept per "
                 "wd, one slope; Firth): 6a Peri-LN's 50% lr against Pre-LN's; 6b the placement × weight-decay term "
                 "(Peri-LN's advantage without against with weight decay); each in both Δt",
                 "none", [("6a", six_a), ("6b", six_b)], "; ".join(numbers) if len(got) else "no E3 run")


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
        found = over_range({lr: primary.best_everywhere(metrics_at(x, ref, lr),
                                                        {label(k): metrics_at(x, k, lr) for k in keys if k != ref},
                                                        lower) for lr in x.range})
    return Claim("7. Peri-LN with Δt = 0.1 is best on every metric",
                 "E1, Peri-LN Δt = 0.1 against each other configuration at each of E1's lrs: Welch's tests "
                 "of the final loss, ppl_seq, accuracy, ROUGE-1, and of L* and LR sensitivity over the grid "
                 "(intersection over metrics, competitors and lrs)",
                 "none", [("7", found)], f"{range_note(x)}, Welch over the seeds: {primary_text(found)}")


CLAIMS = (claim_exponential_growth, claim_peri_growth, claim_dt_tightens, claim_gradients, claim_noise,
          claim_divergence, claim_best)
