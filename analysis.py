"""analysis.py — the statistics of the experiments in docs/experiments.md (standard library only).

    edge_of_stability    the learning rate E3 runs at, from E1's outcomes
    lr_sensitivity       Wortsman et al.'s LR sensitivity E_η[min(L(η), L_init) − L*]
    fit_laws             linear, quadratic and exponential laws fitted to y(x), compared by AICc
    fisher_exact         Fisher's exact test of a 2×2 table, two-sided p

sweep.py imports it to write each experiment's tables; test_sweep runs its self-checks
(`python3 analysis.py --self-test`).
"""
import math


# ---------------------------------------------------------------------------------------------
# E3's learning rate

def edge_of_stability(outcomes, placements):
    """The edge-of-stability learning rate of an E1 sweep: the smallest learning rate at which a
    run of one of `placements` did not end ok; when every such run ended ok, the largest learning
    rate (E3 then tests it, and says so). `outcomes` maps (placement, lr) to the outcomes of its
    runs. Returns (lr, a sentence saying why), or (None, why not)."""
    lrs = sorted({lr for (ln, lr) in outcomes if ln in placements})
    if not lrs:
        return None, "no recorded run of " + ", ".join(placements)
    for lr in lrs:
        bad = [(ln, o) for (ln, l), outs in sorted(outcomes.items()) if l == lr and ln in placements
               for o in outs if o != "ok"]
        if bad:
            what = ", ".join(f"{ln}: {o}" for ln, o in bad)
            return lr, f"the smallest learning rate at which a run did not end ok ({what})"
    return lrs[-1], "every run ended ok; the largest learning rate of the grid"
