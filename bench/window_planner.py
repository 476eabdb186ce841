"""Benchmark: GPU time per decided verdict with windows per launch planned from a noise split,
against today's plan of launches alone (issue 42 items 1-3).

At the seed's scale (a launch's start-up, warm-up and stop ``--start-s`` 300 s, a measured
window ``--window-s`` 60 s), over a grid of noise splits (between-launch and within-launch sd of
a pair change, %, as `specperf calibrate --windows` reports them; the grid's last rows are the
splits measured on real engines, see WINDOWS_RESULTS.md), each cell compares two ways to run a
compare at the default 2% margin, launches added a round (2 per arm) at a time while
INCONCLUSIVE, up to ``--max-pairs``:

* ``today``: one window per launch, the first round's launches from the pair spread
  (:func:`core._experiments.calibrate.plan`), as compare planned before windows existed;
* ``planned``: launches x windows from :func:`core._experiments.calibrate.plan_windows`, the
  cheapest plan for the same goal (90% power for a 5% change).

A compare is simulated by its pair changes: a launch pair's log-ratio is the true change plus
normal noise of variance ``between^2 + within^2 / W`` (the launch as the unit, its figure over
its W windows). Reported per cell and way: at a true 5% slowdown, the share decided REGRESSION
and the mean GPU hours (both arms' launches x (start + W x window)) per REGRESSION; at no change
(A/A), the share of change verdicts (false change). The verdicts are the product's own
(:func:`core._experiments.stats.decide`).

Run: ``.venv/bin/python -m bench.window_planner [--draws 400]``; results in
bench/WINDOWS_RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import numpy as np

from core._experiments.calibrate import NoiseSplit, plan, plan_windows
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, REGRESSION, ArmTrial, decide

MARGIN_PCT = 2.0
CHANGE_PCT = 5.0
# (label, between-launch sd %, within-launch sd %): a grid, then splits measured on real engines
GRID = [
    ("launch-dominated", 2.0, 0.5),
    ("launch-dominated, noisy", 3.0, 1.5),
    ("even", 1.0, 1.0),
    ("even, noisy", 2.0, 2.0),
    ("window-dominated", 0.5, 2.0),
    ("window-dominated, noisy", 0.5, 4.0),
    ("window-only", 0.0, 3.0),
]


def simulate(between_pct: float, within_pct: float, windows: int, first_pairs: int, change_pct: float,
             rng: np.random.Generator, max_pairs: int) -> tuple[str, int]:
    """One compare: (its final verdict, its launch pairs)."""
    sd = math.sqrt(between_pct ** 2 + within_pct ** 2 / windows) / 100.0
    shift = math.log1p(-change_pct / 100.0)
    ratios = list(shift + rng.normal(0.0, sd, first_pairs))
    while True:
        base = [ArmTrial(1000.0)] * len(ratios)
        head = [ArmTrial(1000.0 * math.exp(r)) for r in ratios]
        verdict = decide(base, head, margin_pct=MARGIN_PCT).verdict
        if verdict != INCONCLUSIVE or len(ratios) >= max_pairs:
            return verdict, len(ratios)
        ratios += list(shift + rng.normal(0.0, sd, 2))


def cell(label: str, between: float, within: float, args: argparse.Namespace, rng: np.random.Generator) -> list[str]:
    split = NoiseSplit(between, within, 3, args.start_s, args.window_s)
    today = plan(max(split.pair_sd_pct(1), 0.01), CHANGE_PCT)
    planned = plan_windows(split, CHANGE_PCT, max_pairs=args.max_pairs)
    rows = []
    for name, windows, pairs in (("today", 1, today.pairs), ("planned", planned.windows, planned.pairs)):
        first = min(max(4, pairs or args.max_pairs), args.max_pairs)
        launch_h = (args.start_s + windows * args.window_s) / 3600.0
        decided = spent = 0.0
        for _ in range(args.draws):
            verdict, n = simulate(between, within, windows, first, CHANGE_PCT, rng, args.max_pairs)
            spent += 2 * n * launch_h
            decided += verdict == REGRESSION
        false = sum(simulate(between, within, windows, first, 0.0, rng, args.max_pairs)[0] in (REGRESSION, IMPROVEMENT)
                    for _ in range(args.draws))
        per = f"{spent / decided:.2f}" if decided else "-"
        rows.append(f"| {label} | {between:.1f} / {within:.1f} | {name} | {first} x {windows} | "
                    f"{decided / args.draws:.1%} | {spent / args.draws:.2f} | {per} | {false / args.draws:.1%} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--start-s", type=float, default=300.0)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--max-pairs", type=int, default=16)
    parser.add_argument("--split", action="append", default=[], metavar="LABEL:BETWEEN:WITHIN",
                        help="another split to add to the grid (a measured one)")
    args = parser.parse_args()
    grid = GRID + [(label, float(b), float(w)) for label, b, w in (s.rsplit(":", 2) for s in args.split)]
    started = time.monotonic()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          f"start {args.start_s:.0f} s, window {args.window_s:.0f} s, margin {MARGIN_PCT}%, a {CHANGE_PCT}% slowdown, "
          f"{args.draws} compares per cell and truth, at most {args.max_pairs} pairs")
    print("| split | between / within sd % | plan | first round (launches x windows per arm) | "
          "decided REGRESSION | GPU h per compare | GPU h per REGRESSION | A/A false change |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(2026_12_07)
    for label, between, within in grid:
        for row in cell(label, between, within, args, rng):
            print(row, flush=True)
    print(f"# {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
