"""Benchmark: does the verdict's 95% interval cover the true change 95% of the time, and how
often is the verdict wrong, at the pair counts a compare uses (issue 42 item 0, issue 44).

Pair log-ratios are drawn as ``true change + noise``: normal noise (sd ``--sd-pct``), or
heavy-tailed (Student t with 3 degrees of freedom scaled to the same sd). At 4, 6, 8 and 12
pairs, three methods are asked for an interval and a verdict at a 3% margin:

* ``bca``: the 95% BCa bootstrap interval of the mean (scipy, 9,999 resamples) beside the paired
  t-test's p, every round opened by the base (so a place effect lands on the commit in every
  pair): what core._experiments.stats.decide and compare did until 2026-12-06;
* ``t``: the Student t interval and t-test from one standard error, rounds alternating (decide
  since then for concurrent pairing, where no place is favoured);
* ``t-placed``: the same with the pairs of a sequential compare in two groups (commit in the
  middle of its round, or at its edges; rounds alternating ABBA and BAAB), the change corrected
  for a favoured place: decide for one engine at a time. Drawn with a place effect of
  ``--place-pct`` added to the pairs with the commit in the middle and taken from those with it
  at the edges (the same noise draws for every method).

Reported per cell: the interval's coverage of the true change; at a true change of 0 the rate
of change verdicts (false change); at a true change of margin + 0.5 sd, the rate of NO CHANGE
(false no change).

Run: ``.venv/bin/python -m bench.verdict_coverage [--draws 600]``; results in
bench/COVERAGE_RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import numpy as np
from scipy import stats

from core._experiments.stats import IMPROVEMENT, NO_CHANGE, REGRESSION, ArmTrial, decide

MARGIN_PCT = 3.0


def noise(rng: np.random.Generator, n: int, sd: float, kind: str) -> np.ndarray:
    """``n`` noise values of sd ``sd`` (log scale): normal, or t with 3 df scaled to that sd."""
    if kind == "normal":
        return rng.normal(0.0, sd, n)
    return rng.standard_t(3, n) * sd / math.sqrt(3.0)


def bca_verdict(r: np.ndarray) -> tuple[float, float, str]:
    """The interval and verdict of the method used before 2026-12-06 (BCa + paired t-test)."""
    result = stats.bootstrap((r,), np.mean, confidence_level=0.95, n_resamples=9999, method="BCa",
                             random_state=np.random.default_rng(0))
    low, high = result.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):
        low, high = np.percentile(r, [2.5, 97.5])
    p = stats.ttest_1samp(r, 0.0).pvalue
    margin = math.log1p(MARGIN_PCT / 100)
    if (high < -margin or low > margin) and p < 0.05:
        return low, high, REGRESSION if high < -margin else IMPROVEMENT
    if -margin <= low and high <= margin:
        return low, high, NO_CHANGE
    return low, high, "INCONCLUSIVE"


def new_verdict(r: np.ndarray, middle: np.ndarray | None) -> tuple[float, float, str]:
    """decide's interval (log scale) and verdict on log-ratios ``r``; ``middle`` places the pairs."""
    base = [ArmTrial(100.0)] * r.size
    head = [ArmTrial(100.0 * math.exp(x), round_edge=None if middle is None else not bool(m))
            for x, m in zip(r, middle if middle is not None else [False] * r.size)]
    verdict = decide(base, head, margin_pct=MARGIN_PCT, min_pairs=4)
    return math.log1p(verdict.ci_low_pct / 100), math.log1p(verdict.ci_high_pct / 100), verdict.verdict


def cell(rng, n: int, sd: float, kind: str, place: float, draws: int) -> dict:
    margin = math.log1p(MARGIN_PCT / 100)
    middle = np.array([(i // 2) % 2 == 0 for i in range(n)])  # ABBA: commit in the middle; BAAB: at the edges
    out: dict[str, dict[str, float]] = {}
    for method in ("bca", "t", "t-placed"):
        out[method] = {"covered": 0, "false_change": 0, "false_no_change": 0}
    for _ in range(draws):
        for truth, counter in ((0.0, "false_change"), (margin + 0.5 * sd, "false_no_change")):
            base = truth + noise(rng, n, sd, kind)
            for method in out:
                # the method used before had every round opened by the base: the commit always in the middle
                placed = np.ones(n, dtype=bool) if method == "bca" else middle
                r = base + np.where(placed, place, -place)
                low, high, verdict = (bca_verdict(r) if method == "bca"
                                      else new_verdict(r, middle if method == "t-placed" else None))
                if truth == 0.0:
                    out[method]["covered"] += low <= truth <= high
                    out[method]["false_change"] += verdict in (REGRESSION, IMPROVEMENT)
                else:
                    out[method]["false_no_change"] += verdict == NO_CHANGE
    return {method: {k: round(100.0 * v / draws, 1) for k, v in counts.items()} for method, counts in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=600, help="simulated compares per cell")
    parser.add_argument("--sd-pct", type=float, default=2.0, help="sd of pair changes (percent)")
    parser.add_argument("--place-pct", type=float, default=0.0,
                        help="favour of the middle of a round (percent), as the host of issue 44 showed")
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sd, place = math.log1p(args.sd_pct / 100), math.log1p(args.place_pct / 100)
    started = time.monotonic()
    rows = []
    for kind in ("normal", "t3"):
        for n in (4, 6, 8, 12):
            result = cell(rng, n, sd, kind, place, args.draws)
            rows.append({"noise": kind, "pairs": n, **result})
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "draws": args.draws, "sd_pct": args.sd_pct, "place_pct": args.place_pct,
                      "margin_pct": MARGIN_PCT, "wall_s": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    main()
