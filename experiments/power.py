"""The power of each primary test, before the runs (docs/experiments.md, *Power of the primary
tests*): simulated experiments at the protocol's number of seeds, each put through the same
function of primary.py that the claims table calls, under the effect the claim predicts and
under no difference between the placements.

    python3 -m experiments.power            # docs/power.csv and the table of docs/experiments.md

The effect is the paper's where it gives one (claim 6: divergence in 3 of 5 Pre-LN runs against
0 of 5 Peri-LN runs without weight decay, 1 of 5 with), else the second round's published tables
read as a pilot (their numbers are below, copied from docs/e*_*.csv at commit 803b20f): its
effect where it points the claimed way, its mirror image where it points the other way (so the
power is that of finding an effect of the pilot's size in the claimed direction), with the
pilot's spreads. A draw counts when its verdict would be "supported" at p < POWER_ALPHA, the
threshold the smallest of the eight p's must pass under Holm's procedure: a lower bound on the
power under Holm. The null draws count "supported" at the unadjusted ALPHA, the most a test
alone can be fooled."""
import math
import sys

import numpy as np
import pandas as pd

from . import primary
from .primary import CLAIMED

ALPHA = 0.05
TESTS = 8
POWER_ALPHA = ALPHA / TESTS
DRAWS = 400
DEPTHS = (4, 8, 16, 32, 64)
LRS = (1, 2)  # the two matched learning rates, by index
# The protocol's seeds per cell (docs/experiments.md, *The third round*).
SEEDS = {"E1": 5, "E2": 3, "E3": 12}

# ---------------------------------------------------------------------------------------------
# The pilot (second round, docs/e2_*.csv and docs/e1_*.csv at 803b20f)

# Claims 1, 2: ln X_L over the depths, after training, Δt = 1, gated runs: the power of L, the
# rate r per block (both-terms fit) and the residual sd of each placement's fit.
GROWTH = {"pre": dict(p=0.63, r=0.0096, sigma=0.059), "peri": dict(p=0.73, r=0.0105, sigma=0.130)}
# The power-law fits alone: (power, residual sd) of mean|X_L| and entry_var.
POWERS = {"pre": {"mean_abs": (0.83, 0.099), "entry_var": (1.65, 0.197)},
          "peri": {"mean_abs": (0.73, 0.153), "entry_var": (1.51, 0.338)}}
# Claim 3: ln(X_L(Δt = 1) / X_L(Δt = 0.1)) over the pairs of each placement (E2 at each
# configuration's own best lr: Pre-LN's pairs 1e-3 against 3e-3), (mean, sd). Peri-LN's is about
# ln(1/Δt) by construction.
DT_RATIO = {"pre": {"mean_abs": (0.74, 0.18), "entry_var": (1.38, 0.36)},
            "peri": {"mean_abs": (2.05, 0.25), "entry_var": (4.10, 0.54)}}
# Claim 4 (natural variation, E1's finished runs at Δt = 1 over 7 lrs × 3 seeds): per placement
# ln mean|X_L| (mean, sd over the runs) and the line ln(largest block sensitivity) = a + b·ln mean|X_L|
# with its residual sd.
NATURAL = {"pre": dict(x=(3.92, 3.81), a=1.34, b=0.55, sigma=0.77),
           "peri": dict(x=(2.33, 0.69), a=3.32, b=-0.77, sigma=0.95)}
# E1's learning rates at which runs finish (the new grid's 3e-4 … 0.3), for claim 4's runs.
NATURAL_LRS = 10
# Claim 5: ln(Pre/Peri absolute amplification) at E1's matched lrs 1e-3 and 3e-3 (L = 8), (mean, sd):
# Peri-LN's is the larger there, so the world of the claim is the mirror image.
AMPLIFICATION = {1: (1.95, 0.46), 2: (0.18, 0.63)}
# Claim 7: E1 at the matched lrs, per configuration (mean, sd) of the final loss, ppl_seq, accuracy
# and stemmed ROUGE-1; and over the grid the per-seed L* and LR sensitivity.
E1_PILOT = {
    1: {("peri", 0.1): dict(val_loss=(5.2243, 0.0138), ppl_seq=(200.8, 2.8), accuracy=(0.1578, 0.0045),
                            rouge1_stem=(0.1506, 0.0133)),
        ("pre", 1.0): dict(val_loss=(5.0878, 0.017), ppl_seq=(176.8, 2.9), accuracy=(0.1713, 0.002),
                           rouge1_stem=(0.1618, 0.0022)),
        ("pre", 0.1): dict(val_loss=(5.221, 0.0286), ppl_seq=(200.6, 5.4), accuracy=(0.1637, 0.0006),
                           rouge1_stem=(0.161, 0.0022)),
        ("peri", 1.0): dict(val_loss=(5.4517, 0.0138), ppl_seq=(249.2, 3.5), accuracy=(0.1282, 0.0075),
                            rouge1_stem=(0.0976, 0.001))},
    2: {("peri", 0.1): dict(val_loss=(5.0654, 0.0406), ppl_seq=(173.7, 6.4), accuracy=(0.167, 0.0052),
                            rouge1_stem=(0.1612, 0.0005)),
        ("pre", 1.0): dict(val_loss=(5.2624, 0.4418), ppl_seq=(222.2, 97.0), accuracy=(0.152, 0.0453),
                           rouge1_stem=(0.108, 0.0937)),
        ("pre", 0.1): dict(val_loss=(5.1543, 0.1605), ppl_seq=(190.7, 28.8), accuracy=(0.1615, 0.0082),
                           rouge1_stem=(0.1592, 0.0029)),
        ("peri", 1.0): dict(val_loss=(5.3373, 0.0698), ppl_seq=(225.5, 13.6), accuracy=(0.139, 0.0152),
                            rouge1_stem=(0.104, 0.0145))}}
E1_PER_SEED = {("peri", 0.1): {"L*": (4.7347, 0.0045), "LR sensitivity": (0.2926, 0.0128)},
               ("pre", 1.0): {"L*": (5.0265, 0.1231), "LR sensitivity": (0.4815, 0.1223)},
               ("pre", 0.1): {"L*": (5.1253, 0.1187), "LR sensitivity": (0.4372, 0.0789)},
               ("peri", 1.0): {"L*": (5.1073, 0.0292), "LR sensitivity": (0.3558, 0.0251)}}
# Claim 6 (the paper): divergence without and with weight decay, Pre- and Peri-LN.
DIVERGENCE = {("pre", 0.0): 3 / 5, ("pre", 0.1): 1 / 5, ("peri", 0.0): 0.0, ("peri", 0.1): 0.0}
# Claim 6b at the design's baseline: E3 runs where Pre-LN with weight decay diverges in about half its
# runs; without weight decay 3 in 4.
BASELINE = {0.0: 3 / 4, 0.1: 1 / 2}


# ---------------------------------------------------------------------------------------------
# One simulated experiment per claim: (rng, seeds, null) → the joined Primary

def depth_rows(rng, seeds, laws):
    """One row per placement, depth and seed: X_L from ln X_L = p·ln L + r·L + sigma·ε, per column
    of laws[ln] ({column: dict(p, r, sigma)})."""
    rows = []
    for ln, columns in laws.items():
        for depth in DEPTHS:
            for _ in range(seeds):
                rows.append(dict(ln=ln, depth=depth, **{c: math.exp(law["p"] * math.log(depth) + law["r"] * depth +
                                                                    law["sigma"] * rng.standard_normal())
                                                         for c, law in columns.items()}))
    return pd.DataFrame(rows)


def claim_1(rng, seeds, null):
    """Pre-LN grows at the pilot's r per block, Peri-LN at none (null: both as Pre-LN)."""
    peri = GROWTH["pre"] if null else dict(GROWTH["peri"], r=0.0)
    laws = {"pre": {"mean_abs": GROWTH["pre"]}, "peri": {"mean_abs": peri}}
    return primary.agreeing({lr: primary.growth_difference(depth_rows(rng, seeds, laws)) for lr in LRS})


def power_law(ln, mirrored):
    """The pilot's power law of a placement (r = 0); `mirrored` reflects each power about its bound
    (1 for mean|X_L|, 2 for entry_var)."""
    return {c: dict(p=2 * bound - p if mirrored else p, r=0.0, sigma=s)
            for (c, (p, s)), bound in zip(POWERS[ln].items(), (1.0, 2.0))}


def claim_2(rng, seeds, null):
    """Peri-LN below both bounds at its pilot powers, Pre-LN above them at the mirror of its pilot's
    (the pilot has Pre-LN below too). Null: both placements with Peri-LN's law."""
    laws = {"pre": power_law("peri", False) if null else power_law("pre", True), "peri": power_law("peri", False)}
    return primary.agreeing({lr: primary.bounds(depth_rows(rng, seeds, laws)) for lr in LRS})


def claim_3(rng, seeds, null):
    """X_L(Δt = 1)/X_L(Δt = 0.1) log-normal at each placement's pilot mean and sd (null: mean 0),
    over its pairs of five depths."""
    def pairs():
        n = len(DEPTHS) * seeds
        out = []
        for ln, ratios in DT_RATIO.items():
            frame = {"ln": [ln] * n}
            for q, (mean, sd) in ratios.items():
                frame[f"{q}_large"] = np.ones(n)
                frame[f"{q}_small"] = np.exp(-((0.0 if null else mean) + sd * rng.standard_normal(n)))
            out.append(pd.DataFrame(frame))
        return pd.concat(out, ignore_index=True)
    return primary.agreeing({lr: primary.dt_tightens(pairs()) for lr in LRS})


def claim_4(rng, seeds, null):
    """E1's finished runs at Δt = 1, NATURAL_LRS lrs × `seeds` per placement, each at the pilot's
    ln mean|X_L| spread and line (null: Peri-LN's slope is Pre-LN's)."""
    rows = []
    n = NATURAL_LRS * seeds
    for ln, law in NATURAL.items():
        b = NATURAL["pre"]["b"] if null else law["b"]
        x = rng.normal(*law["x"], size=n)
        y = law["a"] + b * x + law["sigma"] * rng.standard_normal(n)
        rows.append(pd.DataFrame(dict(ln=ln, mean_abs_L=np.exp(x), sens_mean_max=np.exp(y))))
    return primary.natural_slopes(pd.concat(rows, ignore_index=True))


def claim_5(rng, seeds, null):
    """Pre/Peri absolute amplification log-normal at the mirror of the pilot's at each matched lr
    (null: mean 0), over the pairs of two Δt and five depths."""
    def pairs(lr):
        mean, sd = AMPLIFICATION[lr]
        n = 2 * len(DEPTHS) * seeds
        return pd.DataFrame(dict(absolute_amplification_peri=np.ones(n),
                                 absolute_amplification_pre=np.exp((0.0 if null else mean) +
                                                                   sd * rng.standard_normal(n))))
    return primary.agreeing({lr: primary.amplification(pairs(lr)) for lr in LRS})


def claim_6a(rng, seeds, null):
    """Per Δt stratum, both wd and both lrs: Pre- against Peri-LN, both strata the claimed way."""
    strata = []
    for _ in (1.0, 0.1):
        flags = {ln: np.concatenate([rng.random(seeds) < DIVERGENCE[("pre" if null else ln, wd)]
                                     for wd in (0.0, 0.1) for _ in LRS]) for ln in ("pre", "peri")}
        strata.append(primary.more_often(flags["pre"], flags["peri"]))
    return primary.both(strata)


def pooled_wd(rng, seeds, rates, null):
    """Pre-LN without against with weight decay, both lrs and Δt pooled, at `rates` {wd: rate}
    (null: both at their mean)."""
    if null:
        rates = dict.fromkeys(rates, sum(rates.values()) / 2)
    first, second = (rng.random(2 * 2 * seeds) < rates[wd] for wd in (0.0, 0.1))
    return primary.more_often(first, second)


def claim_6b(rng, seeds, null):
    return pooled_wd(rng, seeds, {wd: DIVERGENCE[("pre", wd)] for wd in (0.0, 0.1)}, null)


def claim_6b_baseline(rng, seeds, null):
    return pooled_wd(rng, seeds, BASELINE, null)


LOWER_BETTER = {"val_loss": True, "ppl_seq": True, "accuracy": False, "rouge1_stem": False, "L*": True,
                "LR sensitivity": True}
REFERENCE = ("peri", 0.1)


def claim_world(pilot):
    """{configuration: {metric: (mean, sd)}} where the reference is better than each other
    configuration by the pilot's distance on every metric (null: every configuration the
    reference's)."""
    ref = pilot[REFERENCE]
    world = {REFERENCE: ref}
    for key, theirs in pilot.items():
        if key != REFERENCE:
            world[key] = {m: (ref[m][0] + (1 if LOWER_BETTER[m] else -1) * abs(theirs[m][0] - ref[m][0]), theirs[m][1])
                          for m in theirs}
    return world


def draw_metrics(rng, world, seeds, null):
    return {key: {m: list(rng.normal(*(world[REFERENCE][m] if null else spread), size=seeds))
                  for m, spread in metrics.items()} for key, metrics in world.items()}


def claim_7(rng, seeds, null):
    per_seed = draw_metrics(rng, claim_world(E1_PER_SEED), seeds, null)
    per_lr = {}
    for lr in LRS:
        at_lr = draw_metrics(rng, claim_world(E1_PILOT[lr]), seeds, null)
        runs = {key: {**at_lr[key], **per_seed[key]} for key in at_lr}
        per_lr[lr] = primary.best_everywhere(runs[REFERENCE], {k: v for k, v in runs.items() if k != REFERENCE},
                                             LOWER_BETTER)
    return primary.agreeing(per_lr)


# (claim, experiment whose seeds it uses, simulation, the effect in words)
WORLDS = (("1", "E2", claim_1, "r_pre 0.0096/block (pilot), r_peri 0"),
          ("2", "E2", claim_2, "Peri-LN L^0.73, L^1.51 (pilot); Pre-LN L^1.17, L^2.35 (pilot mirrored)"),
          ("3", "E2", claim_3, "Pre-LN ×2.1 mean\\|X_L\\|, ×4.0 entry_var; Peri-LN ×7.8, ×60 (pilot)"),
          ("4", "E1", claim_4, "b_pre 0.55, b_peri −0.77, residual sd 0.77, 0.95, 10 lrs (pilot)"),
          ("5", "E2", claim_5, "Pre/Peri ×7.0 and ×1.2 at the two lrs (pilot mirrored)"),
          ("6a", "E3", claim_6a, "3/5 and 1/5 against 0/5 (paper), per Δt"),
          ("6b", "E3", claim_6b, "3/5 against 1/5 (paper)"),
          ("6b baseline", "E3", claim_6b_baseline, "3/4 against 1/2 (the design's baseline)"),
          ("7", "E1", claim_7, "each competitor worse by the pilot's distance on each metric"))


def supported(found, alpha):
    return found.p is not None and found.p < alpha and found.direction == CLAIMED


def share_supported(simulate, seeds, null, alpha, draws=DRAWS, seed=1):
    """The share of `draws` simulated experiments whose primary test is supported at `alpha`."""
    rng = np.random.default_rng(seed)
    return sum(supported(simulate(rng, seeds, null), alpha) for _ in range(draws)) / draws


def power_table(draws=DRAWS):
    """Per primary test: its experiment, seeds, effect, power at the protocol's seeds and at twice
    as many, and the share supported when the placements do not differ."""
    rows = []
    for name, experiment, simulate, effect in WORLDS:
        seeds = SEEDS[experiment]
        rows.append(dict(test=name, experiment=experiment, seeds=seeds, effect=effect,
                         power=share_supported(simulate, seeds, False, POWER_ALPHA, draws),
                         power_double=share_supported(simulate, 2 * seeds, False, POWER_ALPHA, draws),
                         null=share_supported(simulate, seeds, True, ALPHA, draws)))
    return pd.DataFrame(rows)


def markdown(found):
    """The table of docs/experiments.md, *Power of the primary tests*."""
    lines = ["| test | seeds per cell | effect | power | with twice the seeds | supported with no difference |",
             "|---|---|---|---|---|---|"]
    return lines + [f"| {r.test} | {r.experiment}: {r.seeds} | {r.effect} | {r.power:.0%} | {r.power_double:.0%} | "
                    f"{r.null:.1%} |" for r in found.itertuples()]


def read_powers(path):
    """{test: power} of a power table written by main (POWER_FILE), or {} when there is none."""
    try:
        found = pd.read_csv(path, dtype={"test": str})
    except FileNotFoundError:
        return {}
    return dict(zip(found.test, found.power))


# Where main writes the table; the claims table reads its power column from there.
POWER_FILE = "power.csv"


def main(argv):
    """python3 -m experiments.power [DOCS]: prints the table and writes DOCS/power.csv (default docs/)."""
    import os
    docs = argv[0] if argv else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    found = power_table()
    found.to_csv(os.path.join(docs, POWER_FILE), index=False, float_format="%.4g")
    print("\n".join(markdown(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
