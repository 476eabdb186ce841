"""Benchmark: GPU time per decided verdict with windows per launch planned from a noise split,
against today's plan of launches alone (issue 42 items 1-3), and the ways to use the plan.

At the seed's scale (a launch's start-up, warm-up and stop ``--start-s`` 300 s, a measured
window ``--window-s`` 60 s), over a grid of noise splits (between-launch and within-launch sd of
a pair change, %, as `specperf calibrate --windows` reports them; the grid's last rows are the
splits measured on real engines, see WINDOWS_RESULTS.md), each cell runs a compare at the
default 2% margin, a first look, then a round (2 pairs) at a time while INCONCLUSIVE, up to
``--max-pairs``, in these ways (:func:`policies`):

* ``today``: one window a launch, the first look after the launches of the plan from the
  one-window spread (:func:`core._experiments.calibrate.plan`; ``min_trials`` 4 without one), as
  compare ran before windows existed;
* ``planned first round``: launches x windows of :func:`core._experiments.calibrate.plan_windows`
  (90% power for a 5% change) before the first look (the planner of 2026-12-07 morning);
* ``first look at 4 x 1, then planned``: the first look at 4 launches of one window, as without
  a plan; the launches after it measure the planned windows;
* the same with a stricter alpha at the looks before the plan's launches (0.005), or before the
  launches carry the plan's information (0.005, 0.001: the sum over pairs of 1 / a pair's
  variance at its windows against the plan's; Haybittle and Peto's rule: interim looks at a small
  alpha, the planned one at the compare's). The plan's information at 0.001 is what compare does
  (:meth:`core._experiments.compare.CompareRequest.workload_for`,
  :class:`core._experiments.compare.PlannedLooks`).

Every way of a cell draws the same random numbers (a common seed per cell).

A compare is simulated by its pair changes: a launch pair's log-ratio is the true change plus
normal noise of variance ``between^2 + within^2 / W`` (the launch as the unit, its figure over
its W windows). Reported per cell and way: at a true 5% slowdown (the plan's goal) and 15% (the
demo's plant), the share decided REGRESSION and the GPU hours (both arms' launches x start +
windows x window) per REGRESSION; at no change (A/A), the share of change verdicts (false
change) over ``--aa-draws`` compares. The verdicts are the product's own
(:func:`core._experiments.stats.decide`).

Run: ``.venv/bin/python -m bench.window_planner [--draws 400]``; results in
bench/WINDOWS_RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Callable

import numpy as np

from core._experiments.calibrate import NoiseSplit, plan, plan_windows
from core._experiments.compare import PlannedLooks
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


def simulate(between_pct: float, within_pct: float, first: tuple[int, int], then_windows: int, change_pct: float,
             rng: np.random.Generator, max_pairs: int, alpha_of: Callable[[list[int]], float] = lambda w: 0.05
             ) -> tuple[str, int, int]:
    """One compare: a first look after ``first`` = (launch pairs, windows per launch), then a
    round of 2 pairs at ``then_windows`` at a time while INCONCLUSIVE. Returns (its final
    verdict, its launch pairs, its windows per arm). ``alpha_of``: the alpha of a look, from the
    windows of each launch pair so far."""
    def pairs(n: int, windows: int) -> list[float]:
        sd = math.sqrt(between_pct ** 2 + within_pct ** 2 / windows) / 100.0
        return list(math.log1p(-change_pct / 100.0) + rng.normal(0.0, sd, n))

    ratios, counts = pairs(*first), [first[1]] * first[0]
    while True:
        base = [ArmTrial(1000.0)] * len(ratios)
        head = [ArmTrial(1000.0 * math.exp(r)) for r in ratios]
        verdict = decide(base, head, margin_pct=MARGIN_PCT, alpha=alpha_of(counts)).verdict
        if verdict != INCONCLUSIVE or len(ratios) >= max_pairs:
            return verdict, len(ratios), sum(counts)
        ratios += pairs(2, then_windows)
        counts += [then_windows] * 2


def policies(split: NoiseSplit, max_pairs: int) -> list[tuple[str, tuple[int, int], int, Callable[[list[int]], float]]]:
    """(name, first look (pairs, windows), windows of the launches after it, the alpha of a look
    from the windows of the launch pairs so far) of each way."""
    today = plan(max(split.pair_sd_pct(1), 0.01), CHANGE_PCT, max_pairs=max_pairs)
    planned = plan_windows(split, CHANGE_PCT, max_pairs=max_pairs)
    w, n = planned.windows or 1, planned.pairs or 0

    def before(pairs: int, alpha: float) -> Callable[[list[int]], float]:
        return lambda counts: alpha if len(counts) < pairs else 0.05

    def informed(alpha: float) -> Callable[[list[int]], float]:
        """``alpha`` until the launches so far carry the plan's information, counted by the
        product's :meth:`core._experiments.compare.PlannedLooks.share`, or reach the cap (the
        last look, at 0.05 as compare's)."""
        looks = PlannedLooks(n, w, split.between_pct, split.within_pct) if n else None
        return lambda counts: (alpha if looks and looks.share(counts) < 1 - 1e-9 and len(counts) < max_pairs
                               else 0.05)

    return [("today", (min(max(4, today.pairs or 4), max_pairs), 1), 1, before(0, 0.05)),
            ("planned first round", (min(max(4, n or 4), max_pairs), w), w, before(0, 0.05)),
            ("first look at 4 x 1, then planned", (4, 1), w, before(0, 0.05)),
            ("4 x 1, then planned; before the plan's launches alpha 0.005", (4, 1), w, before(n, 0.005)),
            ("4 x 1, then planned; before the plan's information alpha 0.005", (4, 1), w, informed(0.005)),
            ("4 x 1, then planned; before the plan's information alpha 0.001 (what compare does)", (4, 1), w,
             informed(0.001))]


def cell(label: str, between: float, within: float, args: argparse.Namespace, seed: int) -> list[str]:
    """The cell's rows, one per way; every way draws the same random numbers (a common seed),
    so two ways that run the same compares read the same."""
    split = NoiseSplit(between, within, 3, args.start_s, args.window_s)
    rows = []
    for name, first, then, alpha_of in policies(split, args.max_pairs):
        rng = np.random.default_rng(seed)
        row = f"| {label} | {between:.1f} / {within:.1f} | {name} | {first[0]} x {first[1]}, then x {then} |"
        for change in args.change_pct:
            decided = spent = 0.0
            for _ in range(args.draws):
                verdict, n, windows = simulate(between, within, first, then, change, rng, args.max_pairs, alpha_of)
                spent += 2 * (n * args.start_s + windows * args.window_s) / 3600.0
                decided += verdict == REGRESSION
            per = f"{spent / decided:.2f}" if decided else "-"
            row += f" {decided / args.draws:.1%} | {per} |"
        false = sum(simulate(between, within, first, then, 0.0, rng, args.max_pairs, alpha_of)[0] in (REGRESSION, IMPROVEMENT)
                    for _ in range(args.aa_draws))
        rows.append(row + f" {false / args.aa_draws:.2%} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--aa-draws", type=int, default=4000, help="A/A compares per cell (a rate near 1%% needs thousands)")
    parser.add_argument("--start-s", type=float, default=300.0)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--max-pairs", type=int, default=16)
    parser.add_argument("--change-pct", type=float, action="append", default=None,
                        help="true slowdowns to simulate (default 5 and 15: the planner's goal and the demo's plant)")
    parser.add_argument("--split", action="append", default=[], metavar="LABEL:BETWEEN:WITHIN",
                        help="another split to add to the grid (a measured one)")
    args = parser.parse_args()
    args.change_pct = args.change_pct or [CHANGE_PCT, 15.0]
    grid = GRID + [(label, float(b), float(w)) for label, b, w in (s.rsplit(":", 2) for s in args.split)]
    started = time.monotonic()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          f"start {args.start_s:.0f} s, window {args.window_s:.0f} s, margin {MARGIN_PCT}%, plans for a {CHANGE_PCT}% slowdown, "
          f"{args.draws} compares per cell and slowdown, "
          f"{args.aa_draws} A/As, at most {args.max_pairs} pairs")
    print("| split | between / within sd % | way | launches x windows per arm | "
          + " | ".join(f"{c:g}% slowdown: decided REGRESSION | GPU h per REGRESSION" for c in args.change_pct)
          + " | A/A false change |")
    print("|---|---|---|---|" + "---|---|" * len(args.change_pct) + "---|")
    for i, (label, between, within) in enumerate(grid):
        for row in cell(label, between, within, args, 2026_12_07 + i):
            print(row, flush=True)
    print(f"# {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
