"""Fit the fitted best-of-N twin's free numbers to published best-of-N accuracy points.

Reads the published points (src/dprm/data/synth/published_bon.csv: generator, PRM, rule, n,
accuracy, with provenance per row) and fits, per generator and then per (generator, PRM) pair
(:mod:`dprm.data.synth.fitted_presets` says what is fixed and why):

1. the generator's skill and spread: for a spread, the skill at which pass@n of its ID
   questions matches (exact: quadrature over the stratified question difficulties; bisection);
   the spread at which majority@n then matches (simulated pools with common random numbers;
   bisection: majority@n at fixed pass@n grows with the spread);
3. per PRM, the score noise, so that highest-score@n matches (same pools; bisection), then the
   score bias, so that the candidates' mean score equals their mean correctness.

Deterministic given ``--seed``. Prints the residual of every published point (and the twin's
weighted best-of-N, which no source of these pairs publishes) and, with ``--write``, writes
src/dprm/data/synth/fitted_bon.csv (package data the twin reads).

Usage:
    python tools/fit_bon_twin.py            # fit and print the residuals
    python tools/fit_bon_twin.py --write    # ... and write the fitted numbers
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from importlib.resources import files
from statistics import NormalDist

import numpy as np

from dprm.data.synth import fitted_presets as F
from dprm.data.synth.bon_fitted import CURVE_NS, draw_fit_pools, pool_curves
from dprm.io import atomic_path

#: the fit's tolerance per published point (|twin - published|), and the tests'
TOLERANCE = 0.02
#: questions and pool size of the fit's simulated pools
FIT_QUESTIONS, FIT_TRIALS = 4000, 4
BRACKETS = {"skill": (-4.0, 12.0), "spread": (1.0, 12.0), "score_noise": (0.0, 30.0)}


def bisect(f, lo: float, hi: float, target: float, increasing: bool, steps: int = 30) -> float:
    """x in [lo, hi] with f(x) = target for a monotone f (clipped to the bracket)."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        above = f(mid) > target
        if above == increasing:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


_INV = NormalDist().inv_cdf


def pass_at(skill: float, spread: float, n: int, nodes: int = 4000) -> float:
    """pass@n of ID questions a_q = skill + spread z, z on ``nodes`` equal-probability strata."""
    z = np.array([_INV((i + 0.5) / nodes) for i in range(nodes)])
    p = 1 / (1 + np.exp(-(spread * z + skill)))
    return float(np.mean(1 - (1 - p) ** n))


def pair_with(gen: str, prm: str, **numbers) -> F.FittedPair:
    base = {"skill": 1.9, "spread": 3.6, "score_noise": 1.0, "score_bias": 0.0}
    return F.build_pair(gen, prm, F.FittedNumbers(**{**base, **numbers}))


def rule_at(pair: F.FittedPair, rule: str, n: int, seed: int) -> float:
    pools = draw_fit_pools(pair, FIT_QUESTIONS, n, seed)
    curves = pool_curves(pools["score"], pools["correct"], pools["groups"], ns=(n,),
                         trials=FIT_TRIALS, seed=seed)  # fmt: skip
    return float(curves[rule][0])


def mean_target(rows: list[dict], rule: str, gen: str) -> tuple[float, int]:
    """The mean published accuracy of ``rule`` over ``rows`` (one n), and that n."""
    hits = [r for r in rows if r["rule"] == rule]
    if not hits:
        sys.exit(f"published_bon.csv: no {rule!r} point for generator {gen}")
    ns = {int(r["n"]) for r in hits}
    if len(ns) != 1:
        sys.exit(f"published_bon.csv: {rule!r} points of {gen} at several n {ns}")
    return float(np.mean([float(r["accuracy"]) for r in hits])), ns.pop()


def fit_generator(gen: str, a_prm: str, rows: list[dict], seed: int) -> tuple[float, float]:
    """(skill, spread) of a generator: pass@n exactly, then majority@n."""
    pass_target, pass_n = mean_target(rows, "pass", gen)

    def skill_for(spread: float) -> float:
        return bisect(lambda s: pass_at(s, spread, pass_n), *BRACKETS["skill"], pass_target, True)

    def majority(spread: float) -> float:
        pair = pair_with(gen, a_prm, skill=skill_for(spread), spread=spread)
        return rule_at(pair, "majority", maj_n, seed)

    maj_target, maj_n = mean_target(rows, "majority", gen)
    spread = bisect(majority, *BRACKETS["spread"], maj_target, True, steps=16)
    return skill_for(spread), spread


def fit_prm(gen: str, prm: str, rows: list[dict], skill: float, spread: float, seed: int):
    """The PRM's score noise (highest@n), then its score bias (mean score = mean correct)."""
    hits = [r for r in rows if r["rule"] == "highest"]
    if len(hits) != 1:
        sys.exit(f"published_bon.csv: {gen}__{prm} needs one 'highest' point")
    n, target = int(hits[0]["n"]), float(hits[0]["accuracy"])

    def highest(noise: float) -> float:
        pair = pair_with(gen, prm, skill=skill, spread=spread, score_noise=noise)
        return rule_at(pair, "highest", n, seed)

    noise = bisect(highest, *BRACKETS["score_noise"], target, False, steps=16)
    pair = pair_with(gen, prm, skill=skill, spread=spread, score_noise=noise)
    pools = draw_fit_pools(pair, FIT_QUESTIONS, n, seed)
    base_logit = np.log(pools["score"]) - np.log1p(-pools["score"])
    mean_ok = float(pools["correct"].mean())

    def mean_score(bias: float) -> float:  # the bias shifts every candidate's logit alike
        return float(np.mean(1 / (1 + np.exp(-(base_logit + bias)))))

    return F.FittedNumbers(skill, spread, noise, bisect(mean_score, -20.0, 20.0, mean_ok, True))


def fit(seed: int) -> tuple[dict, list[dict]]:
    """Fitted numbers per pair and the published points."""
    points = F.published_points()
    by_pair: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in points:
        by_pair[(row["generator"], row["prm"])].append(row)
    fitted: dict[tuple[str, str], F.FittedNumbers] = {}
    for gen in sorted({g for g, _ in by_pair}):
        prms = [p for g, p in by_pair if g == gen]
        rows = [r for p in prms for r in by_pair[(gen, p)]]
        skill, spread = fit_generator(gen, prms[0], rows, seed)
        for prm in prms:
            fitted[(gen, prm)] = fit_prm(gen, prm, by_pair[(gen, prm)], skill, spread, seed)
    return fitted, points


def residuals(fitted: dict, points: list[dict], seed: int, questions: int = 4000) -> list[dict]:
    """The twin's curves (pools of 64) against every published point, and its full curves."""
    out = []
    for (gen, prm), numbers in fitted.items():
        pair = F.build_pair(gen, prm, numbers)
        pools = draw_fit_pools(pair, questions, 64, seed + 1)  # held-out draws
        curves = pool_curves(pools["score"], pools["correct"], pools["groups"], trials=8,
                             seed=seed + 1)  # fmt: skip
        print(f"\n{gen}__{prm}: {numbers}")
        print("   n " + " ".join(f"{n:>6d}" for n in CURVE_NS))
        for rule in ("highest", "weighted", "majority", "pass"):
            print(f"{rule:>9s} " + " ".join(f"{v:6.3f}" for v in curves[rule]))
        for row in points:
            if (row["generator"], row["prm"]) != (gen, prm):
                continue
            n = int(row["n"])
            twin = float(curves[row["rule"]][CURVE_NS.index(n)])
            gap = twin - float(row["accuracy"])
            out.append({"pair": f"{gen}__{prm}", "rule": row["rule"], "n": n,
                        "published": float(row["accuracy"]), "twin": twin, "gap": gap,
                        "within": abs(gap) <= TOLERANCE})  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="write fitted_bon.csv")
    args = parser.parse_args()
    fitted, points = fit(args.seed)
    rows = residuals(fitted, points, args.seed)
    print(f"\npair | rule | n | published | twin | gap | within ±{TOLERANCE:.2f}")
    for r in rows:
        print(f"{r['pair']} | {r['rule']} | {r['n']} | {r['published']:.3f} | {r['twin']:.3f} | "
              f"{r['gap']:+.3f} | {'yes' if r['within'] else 'NO'}")  # fmt: skip
    if args.write:
        target = files("dprm.data.synth").joinpath(F.FITTED_FILE)
        with atomic_path(target) as tmp:
            tmp.write_text(F.write_fitted(fitted))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
