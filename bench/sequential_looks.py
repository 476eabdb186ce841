"""Benchmark: how often an A/A reads as a change over a whole compare, with its repeated looks.

A compare looks at its verdict after ``min_trials`` pairs (4) and again after every round of 2
more while INCONCLUSIVE, up to ``max_trials`` (8 by default: 3 looks; 16: 7 looks), each look at
the compare's alpha (0.05) with the product's rule (:func:`core._experiments.stats.decide`: a
change when the whole interval lies beyond the margin). One look's false change is at most
alpha; a compare's, over its looks, can be more where the noise is large against the margin.
This measures it for pair changes of normal noise (sd per pair, %) at the default 2% margin,
with each look at 0.05 (what compare does without a calibration) and two ways of spending 0.05
over the looks, for comparison only: Bonferroni's (each look at 0.05 / looks) and half at the
first look, the rest shared by the others.

Run: ``.venv/bin/python -m bench.sequential_looks [--draws 4000]``; results in
bench/WINDOWS_RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

from bench.window_planner import MARGIN_PCT, simulate
from core._experiments.stats import IMPROVEMENT, REGRESSION


def false_change(sd_pct: float, max_pairs: int, alpha_at: Callable[[int], float], draws: int, seed: int) -> float:
    """The share of ``draws`` A/A compares (pair log-ratios normal, sd ``sd_pct`` %, one window a
    launch: :func:`bench.window_planner.simulate`) whose final verdict is a change, looking at 4
    pairs and every 2 more up to ``max_pairs``; look k (from 0) at ``alpha_at(k)``."""
    rng = np.random.default_rng(seed)
    return sum(simulate(0.0, sd_pct, (4, 1), 1, 0.0, rng, max_pairs, lambda counts: alpha_at((len(counts) - 4) // 2))[0]
               in (REGRESSION, IMPROVEMENT) for _ in range(draws)) / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--sd-pct", type=float, action="append", default=None,
                        help="pair sd to simulate (default 1, 3, 5 and 17.2: the H100's one-window split)")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          f"margin {MARGIN_PCT}%, {args.draws} A/As a cell")
    print("| pair sd % | max_trials (looks) | each look at 0.05 | each at 0.05 / looks | first at 0.025, the rest share 0.025 |")
    print("|---|---|---|---|---|")
    for i, sd in enumerate(args.sd_pct or [1.0, 3.0, 5.0, 17.2]):
        for max_pairs in (8, 16):
            looks = 1 + (max_pairs - 4) // 2
            rates = [false_change(sd, max_pairs, rule, args.draws, 2026_12_07 + i)
                     for rule in (lambda k: 0.05, lambda k, n=looks: 0.05 / n,
                                  lambda k, n=looks: 0.025 if k == 0 else 0.025 / (n - 1))]
            print(f"| {sd:g} | {max_pairs} ({looks}) | " + " | ".join(f"{r:.2%}" for r in rates) + " |", flush=True)
    print(f"# {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
