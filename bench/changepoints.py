"""Benchmark: change-point detectors on synthetic per-commit throughput series.

A series is ``n`` per-commit output tok/s values, ``100 * (1 - shift for i >= k) * noise``
with the step at ``k = n // 2`` (the first slower commit). Noise per point is lognormal with
sigma ``sd`` (1% or 2%: a per-commit median of a few launches on a quiet host); the
"outliers" variant adds a +-5% kick to 5% of points (one wild launch that a median of two
did not absorb). Every detector sees ``ln(values)``, so a shift reads the same at any level.

Detectors:

* ``binseg-rank``: what specperf ships (``core._history.changepoints.detect``): ``ruptures`` binary
  segmentation with the rank cost, penalty ``c * ln(n)`` (``--rank-c``, default the shipped
  ``PENALTY_C``; several values give one row each);
* ``edivisive``: MongoDB's ``signal-processing-algorithms`` E-divisive (what MongoDB and
  Apache Otava run, and what specperf used before), permutation test p <= 0.05, 100
  permutations (its defaults). It installs on Python 3.11 with numpy 1 only (the ``bench``
  extra brings it there); elsewhere its rows are left out and the recorded ones in
  ``bench/CHANGEPOINT_RESULTS.md`` stand;
* ``pelt-l2``: ``ruptures`` PELT, least-squares cost, penalty ``c * sigma^2 * ln(n)`` with
  sigma estimated from the series itself (MAD of first differences / sqrt 2), min segment 2;
* ``binseg-l2``: ``ruptures`` binary segmentation, same cost and penalty.

Reported per cell: hit rate (a change point within +-1 of ``k``), exact rate, mean number of
extra change points (false positives) per series, and on flat series the share with any
change point at all; time per call.

Run: ``.venv/bin/python -m bench.changepoints [--seeds 100] [--rank-c 2.5 3]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import ruptures

from core._history.changepoints import PENALTY_C
from core._history.changepoints import detect as shipped_detect

try:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive
except ImportError:  # Python 3.12+, numpy 2: the old detector cannot be installed
    e_divisive = None


def series(rng: np.random.Generator, n: int, shift: float, sd: float, outliers: bool) -> np.ndarray:
    """One synthetic series of ``n`` tok/s values; the step is at ``n // 2``."""
    level = np.where(np.arange(n) >= n // 2, 1 - shift, 1.0)
    noise = np.exp(rng.normal(0, sd, n))
    if outliers:
        noise *= np.where(rng.random(n) < 0.05, 1 + rng.choice([-0.05, 0.05], n), 1.0)
    return 100.0 * level * noise


def robust_sigma(x: np.ndarray) -> float:
    """Noise sd of a piecewise-constant series: MAD of first differences / sqrt(2)."""
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)) or 1e-9


def detect(method: str, values: np.ndarray, penalty_c: float, seed: int) -> list[int]:
    """Change points as first indices of new segments."""
    if method.startswith("binseg-rank"):
        return shipped_detect(values, penalty_c=float(method.partition("c=")[2]))
    x = np.log(values)
    if method == "edivisive":
        np.random.seed(seed)  # its permutation test draws from numpy's global generator
        return sorted(e_divisive(x, pvalue=0.05, permutations=100))
    pen = penalty_c * robust_sigma(x) ** 2 * np.log(len(x))
    algo = {"pelt-l2": ruptures.Pelt, "binseg-l2": ruptures.Binseg}[method]
    return algo(model="l2", min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)[:-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--penalty-c", type=float, default=3.0, help="the least-squares detectors' constant")
    parser.add_argument("--rank-c", type=float, nargs="+", default=[PENALTY_C], help="binseg-rank's constant(s)")
    parser.add_argument("--methods", nargs="+", default=["binseg-rank", "edivisive", "pelt-l2", "binseg-l2"])
    args = parser.parse_args()
    methods = [m for m in args.methods if m != "binseg-rank"]
    if "binseg-rank" in args.methods:
        methods[:0] = [f"binseg-rank c={c:g}" for c in args.rank_c]
    if e_divisive is None and "edivisive" in methods:
        methods.remove("edivisive")
        print("edivisive left out: signal-processing-algorithms is not installed (Python 3.11 and numpy 1 only); "
              "its recorded numbers are in bench/CHANGEPOINT_RESULTS.md")
    rows = []
    for outliers in (False, True):
        for sd in (0.01, 0.02):
            for n in (20, 40, 60):
                for shift in (0.0, 0.03, 0.05, 0.10):
                    for method in methods:
                        hits = exact = extra = anyflat = 0
                        spent = 0.0
                        for seed in range(args.seeds):
                            rng = np.random.default_rng(seed * 7919 + n)
                            values = series(rng, n, shift, sd, outliers)
                            start = time.perf_counter()
                            found = detect(method, values, args.penalty_c, seed)
                            spent += time.perf_counter() - start
                            if shift == 0:
                                anyflat += bool(found)
                                extra += len(found)
                                continue
                            k = n // 2
                            near = [c for c in found if abs(c - k) <= 1]
                            hits += bool(near)
                            exact += k in found
                            extra += len(found) - (1 if near else 0)
                        rows.append({"outliers": outliers, "sd_pct": sd * 100, "n": n, "shift_pct": shift * 100,
                                     "method": method, "hit_pct": 100 * hits / args.seeds,
                                     "exact_pct": 100 * exact / args.seeds,
                                     "extra_per_series": extra / args.seeds,
                                     "any_on_flat_pct": 100 * anyflat / args.seeds if shift == 0 else None,
                                     "ms_per_call": 1000 * spent / args.seeds})
    print(json.dumps({"machine": f"{platform.node()} {platform.processor() or platform.machine()} "
                                 f"python {platform.python_version()}",
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "seeds": args.seeds, "penalty_c": args.penalty_c, "rank_c": args.rank_c,
                      "ruptures": ruptures.__version__, "numpy": np.__version__}))
    print("| noise | n | shift | method | hit +-1 % | exact % | extra CPs/series | any CP on flat % | ms/call |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        noise = f"{r['sd_pct']:g}%" + (" +outliers" if r["outliers"] else "")
        flat = "-" if r["any_on_flat_pct"] is None else f"{r['any_on_flat_pct']:.0f}"
        hit = "-" if r["shift_pct"] == 0 else f"{r['hit_pct']:.0f}"
        exact = "-" if r["shift_pct"] == 0 else f"{r['exact_pct']:.0f}"
        print(f"| {noise} | {r['n']} | {r['shift_pct']:g}% | {r['method']} | {hit} | {exact} | "
              f"{r['extra_per_series']:.2f} | {flat} | {r['ms_per_call']:.1f} |")


if __name__ == "__main__":
    main()
