"""Benchmark: how often each decision rule is wrong, on simulated trials with realistic noise.

A trial's output tok/s is simulated as ``T * (1 + effect for the commit) * L * R``: ``L`` is
launch-to-launch noise (lognormal, sigma ``--launch-cv``), ``R`` the mean of ``--requests``
per-request factors (sigma ``--request-cv``), plus a slow linear drift of the machine across
the run (``--drift-pct`` over the whole run). Launches are ordered ABBA as compare orders
them. For each number of launches per arm, the rules are asked for a verdict:

* ours (core._experiments.stats.decide): 95% bootstrap interval beyond the +-2% margin and Mann-Whitney p < 0.05;
* asv: Mann-Whitney p < 0.002 and a ratio of at least 1.1 (either way);
* pyperf: Student t-test at 95% (any size of change);
* single run: one launch per arm, a change beyond +-5% (the "it dropped, it's a regression"
  reading);
* ours, adaptive: as compare runs it, 4 launches per arm, then 2 more per round while
  INCONCLUSIVE, up to the given number.

Reported: the false-positive rate on A/A (a REGRESSION or IMPROVEMENT where nothing changed)
and the power (REGRESSION found) at 2, 5 and 10% slowdowns.

Run: ``.venv/bin/python -m bench.verdict_rules [--reps 1000]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from scipy import stats

from core._experiments.stats import INCONCLUSIVE, REGRESSION, ArmTrial, decide

RULES = ("ours", "ours-adaptive", "asv", "pyperf", "single-run")


def simulate(rng, n: int, effect: float, args) -> tuple[list[float], list[float]]:
    """``n`` launches per arm in ABBA order; returns (base, head) tok/s in pair order."""
    order = ["base", "head", "head", "base"] * ((n + 1) // 2)
    total = len(order)
    out = {"base": [], "head": []}
    for i, role in enumerate(order):
        if len(out[role]) >= n:
            continue
        drift = 1 + args.drift_pct / 100 * i / total
        launch = np.exp(rng.normal(0, args.launch_cv))
        request = np.exp(rng.normal(0, args.request_cv, args.requests)).mean()
        out[role].append(100.0 * (1 + (effect if role == "head" else 0)) * drift * launch * request)
    return out["base"], out["head"]


def verdict(rule: str, base: list[float], head: list[float], rng, n_max: int, effect: float, args) -> str:
    """``REGRESSION``, ``IMPROVEMENT`` or something else, by ``rule``."""
    if rule == "ours":
        return decide([ArmTrial(x) for x in base], [ArmTrial(x) for x in head]).verdict
    if rule == "ours-adaptive":
        n = 4
        while True:
            b, h = simulate(rng, n, effect, args)
            v = decide([ArmTrial(x) for x in b], [ArmTrial(x) for x in h]).verdict
            if v != INCONCLUSIVE or n + 2 > n_max:
                return v
            n += 2
    ratio = np.median(head) / np.median(base)
    if rule == "asv":
        p = stats.mannwhitneyu(head, base, alternative="two-sided").pvalue
        return ("REGRESSION" if ratio < 1 else "IMPROVEMENT") if p < 0.002 and max(ratio, 1 / ratio) >= 1.1 else "-"
    if rule == "pyperf":
        p = stats.ttest_ind(head, base).pvalue
        return ("REGRESSION" if ratio < 1 else "IMPROVEMENT") if p < 0.05 else "-"
    if rule == "single-run":
        r = head[0] / base[0]
        return "REGRESSION" if r < 0.95 else "IMPROVEMENT" if r > 1.05 else "-"
    raise ValueError(rule)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--launches", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--launch-cv", type=float, default=0.015)
    parser.add_argument("--request-cv", type=float, default=0.05)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--drift-pct", type=float, default=1.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    started = time.time()
    for n in args.launches:
        for rule in RULES:
            row = {"launches_per_arm": 1 if rule == "single-run" else n, "rule": rule}
            for effect in (0.0, -0.02, -0.05, -0.10):
                hits = 0
                for _ in range(args.reps):
                    base, head = simulate(rng, n, effect, args)
                    v = verdict(rule, base, head, rng, n, effect, args)
                    hits += v in ("REGRESSION", "IMPROVEMENT") if effect == 0 else v == REGRESSION
                key = "false_positive_pct" if effect == 0 else f"power_{-int(effect * 100)}pct"
                row[key] = round(100 * hits / args.reps, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({"machine": f"{platform.node()} {platform.machine()}", "date": time.strftime("%Y-%m-%d"),
                      "seconds": round(time.time() - started), "noise": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
