"""Benchmark: how often the regression summary reports a step in a short history series,
against how often it reports something on a flat one.

A series is ``n`` commits (4..10), each with ``trials`` launches; launch ``j`` of commit ``i``
reads ``100 * (1 - shift if i >= k) * exp(c_i + e_ij)`` output tok/s, with ``c_i`` the
commit-to-commit noise (a different day, a different boot: sd ``commit_sd``, shared by
the commit's trials) and ``e_ij`` the launch-to-launch noise (sd ``trial_sd``). The step is at
``k = n // 2`` ("mid") or ``k = n - 1`` (only the newest commit is slower, "last").

Two rules are measured on the same series:

* ``before``: the summary before issue 18 on every series, whatever its length: E-divisive
  change points confirmed on the trials and by ``z >= 3`` against the series' noise, and the
  trailing drift (``core._history.changepoints.analyze``): reported when a change point is confirmed or the
  drift is flagged;
* ``now``: ``core._history.summary.build_summary`` as it is: under ``SHORT_SERIES_POINTS`` points no
  change-point test, the trial-level test of the newest commit against the first by the
  compare rule; from there on the rule above. Reported when the summary is not quiet.

Run: ``.venv/bin/python -m bench.summary_short [--seeds 100] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import platform
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from core._history.changepoints import analyze as analyze_series
from core._history.series import Series, SeriesPoint
from core._history.summary import build_summary

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def make_series(rng: np.random.Generator, n: int, shift: float, at: int, trials: int, trial_sd: float,
                commit_sd: float) -> Series:
    """One synthetic series (one point a day, ending at ``NOW``)."""
    points = []
    for i in range(n):
        level = 100.0 * (1 - shift if i >= at else 1.0) * np.exp(rng.normal(0, commit_sd))
        values = [float(v) for v in level * np.exp(rng.normal(0, trial_sd, trials))]
        when = NOW - dt.timedelta(days=n - 1 - i)
        points.append(SeriesPoint(
            sha=hashlib.sha1(f"{i}".encode()).hexdigest(), refs=[], output_tok_s=float(np.median(values)),
            acceptance_length=None, trials_output_tok_s=values, trials_acceptance_length=[], run_ids=[i],
            first_measured_at=when, last_measured_at=when, verdicts=[]))
    return Series("e", "h", "baseline", "w", points, "first-parent")


def reported_before(s: Series) -> bool:
    """The rule before issue 18: a confirmed change point (z >= 3) or a flagged drift."""
    a = analyze_series([p.output_tok_s for p in s.points], [p.trials_output_tok_s for p in s.points])
    return bool(a.change_points) or bool(a.drift and a.drift.flagged)


def reported_now(s: Series) -> bool:
    """The summary as it is: not quiet."""
    return not build_summary([s], since=NOW - dt.timedelta(days=30), now=NOW).quiet


def cell(args: tuple) -> dict:
    n, shift, position, trials, trial_sd, commit_sd, seeds = args
    at = n // 2 if position == "mid" else n - 1
    before = now = 0
    for seed in range(seeds):
        s = make_series(np.random.default_rng(seed * 7919 + n), n, shift, at, trials, trial_sd, commit_sd)
        before += reported_before(s)
        now += reported_now(s)
    return {"n": n, "shift": shift, "position": position, "trials": trials, "trial_sd": trial_sd,
            "commit_sd": commit_sd, "seeds": seeds, "before": 100 * before / seeds, "now": 100 * now / seeds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=4, help="launches per commit")
    args = parser.parse_args()
    cells = []
    for commit_sd in (0.005, 0.01):
        for n in range(4, 11):
            cells.append((n, 0.0, "-", args.trials, 0.01, commit_sd, args.seeds))
            for shift in (0.05, 0.10, 0.15):
                for position in ("mid", "last"):
                    cells.append((n, shift, position, args.trials, 0.01, commit_sd, args.seeds))
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(cell, cells))
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, Python {platform.python_version()}, "
          f"{args.seeds} seeds, {args.trials} trials per commit, {time.perf_counter() - start:.0f} s")
    print("| commit sd | n | step | at | reported before % | reported now % |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        step = "flat" if r["shift"] == 0 else f"-{100 * r['shift']:.0f}%"
        print(f"| {100 * r['commit_sd']:.1f}% | {r['n']} | {step} | {r['position']} | {r['before']:.0f} | "
              f"{r['now']:.0f} |")


if __name__ == "__main__":
    main()
