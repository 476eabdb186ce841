"""Benchmark: where the embedded default's launch-to-launch noise comes from (issue 24).

Arrangements of the CPU test engine (vLLM's CPU build, scripts/setup-test-engine) are measured
side by side: in each round every arrangement gets one launch per mode, in a rotated order,
so a change of the machine over the run (another tenant, a slower neighbour) lands on all of
them alike. Each launch is a real trial (:func:`core._measure.trial.measure`) of the commit ``main``
of the test engine repository.

Per arrangement and mode it reports the launches' output tok/s, their CV, the sd of pair
changes as `specperf calibrate` computes it (launches paired in order: 1-2, 3-4, ...; the sd of
``ln(second / first)`` in %), the wall time per launch, and a figure of merit that weighs
the two: ``sd x sqrt(minutes per launch)``, the spread of one minute's worth of launches (a
lower figure settles a verdict sooner). For each launch, two figures are computed from the
same requests: ``window`` (all measured requests: tokens / first sent .. last done, the
figure compare uses today) and ``median-of-4`` (the measured requests cut into 4 consecutive
windows, the median of their tok/s), so the two estimators are compared on the same launches.

Run: ``.venv/bin/python -m bench.launch_noise --rounds 4 [--only NAME,...] [--out FILE.json]``.
The machine (CPU model, count), the date and the load average before and after are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

from bot._settings import load_config
from core._config import HostConfig, WorkloadConfig
from core._hosts import LocalHost
from core._measure.trial import TrialResult, measure

TESTENV = Path(os.environ.get("SPECPERF_TESTENV", Path.home() / ".cache/specperf/testenv"))
MP = "VLLM_ENABLE_V1_MULTIPROCESSING"


def arrangements(engine, workload: WorkloadConfig) -> dict[str, tuple]:
    """name -> (engine config, workload, client CPUs): each one change against ``current``."""
    env = dict(engine.env)
    no_mp = {k: v for k, v in env.items() if k != MP}
    longer = workload.model_copy(update={"requests": 2 * workload.requests})
    more_warmup = workload.model_copy(update={"warmup_requests": 8})
    return {
        "current": (engine, workload, [0]),
        "multiprocessing": (engine.model_copy(update={"env": no_mp}), workload, [0]),
        "unpinned": (engine.model_copy(update={"cpus": None, "env": {**env, "VLLM_CPU_OMP_THREADS_BIND": "auto"}}),
                     workload, None),
        "client-beside": (engine, workload, [1]),
        "32-requests": (engine, longer, [0]),
        "warmup-8": (engine, more_warmup, [0]),
    }


def median_of_windows(trial: TrialResult, windows: int = 4) -> float:
    """Median tok/s of ``windows`` consecutive groups of the measured requests (concurrency 1:
    each group's tokens over its first send .. last end)."""
    requests = sorted(trial.sample.requests, key=lambda r: r.start_s)
    size = max(1, len(requests) // windows)
    rates = []
    for i in range(0, len(requests) - size + 1, size):
        group = requests[i:i + size]
        span = max(r.end_s for r in group) - min(r.start_s for r in group)
        rates.append(sum(r.output_tokens for r in group) / span)
    return statistics.median(rates)


def pair_sd_pct(values: list[float]) -> float | None:
    """sd (ddof 1) of ``ln(b / a)`` over consecutive pairs (a, b), in %; None below 2 pairs."""
    ratios = [math.log(b / a) for a, b in zip(values[0::2], values[1::2])]
    return 100 * statistics.stdev(ratios) if len(ratios) >= 2 else None


async def run(rounds: int, only: list[str] | None, modes: list[str], out: Path | None) -> list[dict]:
    config = load_config(None)
    engine = config.engines["tiny-vllm"]
    workload = config.workloads["default"]
    chosen = {k: v for k, v in arrangements(engine, workload).items() if not only or k in only}
    host = LocalHost("local", HostConfig(), str(Path("/tmp/specperf-noise")))
    rows: list[dict] = []
    for rnd in range(rounds):
        names = list(chosen)
        names = names[rnd % len(names):] + names[:rnd % len(names)]  # rotated: no arrangement always first
        for name in names:
            eng, wl, client_cpus = chosen[name]
            for mode in modes:
                os.sched_setaffinity(0, client_cpus or range(os.cpu_count() or 1))
                started = time.monotonic()
                trial = await measure("tiny-vllm", eng, mode, "default", wl, "/tmp/specperf-noise/logs", host=host,
                                      cwd=str(TESTENV / "engine-repo"))
                tpot = trial.sample.tpot_ms
                row = {"round": rnd, "arrangement": name, "mode": mode, "window_tok_s": trial.sample.output_tok_s,
                       "median4_tok_s": median_of_windows(trial), "ready_s": trial.ready_s,
                       "wall_s": time.monotonic() - started, "tpot_ms": tpot.mean if tpot else None,
                       "foreign_share": ((trial.window or {}).get("cpu") or {}).get("engine_cpus_foreign_share")}
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
                if out:
                    out.write_text(json.dumps(rows, indent=1))
    return rows


def table(rows: list[dict]) -> str:
    """Markdown table: per arrangement and mode, both estimators."""
    lines = ["| arrangement | mode | launches | tok/s (window) mean | CV % | pair sd % (window) | "
             "pair sd % (median of 4) | s per launch | sd x sqrt(min/launch) |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["arrangement"], r["mode"]) for r in rows}, key=lambda k: (k[1], k[0]))
    for name, mode in keys:
        mine = [r for r in rows if r["arrangement"] == name and r["mode"] == mode]
        window = [r["window_tok_s"] for r in mine]
        med = [r["median4_tok_s"] for r in mine]
        wall = statistics.mean(r["wall_s"] for r in mine)
        sd, sd_med = pair_sd_pct(window), pair_sd_pct(med)
        cv = 100 * statistics.stdev(window) / statistics.mean(window) if len(window) > 1 else float("nan")
        merit = f"{sd * math.sqrt(wall / 60):.2f}" if sd is not None else "-"
        lines.append(f"| {name} | {mode} | {len(mine)} | {statistics.mean(window):.1f} | {cv:.1f} | "
                     f"{'-' if sd is None else f'{sd:.1f}'} | {'-' if sd_med is None else f'{sd_med:.1f}'} | "
                     f"{wall:.0f} | {merit} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", help="comma-separated arrangement names")
    parser.add_argument("--modes", default="baseline,eagle3")
    parser.add_argument("--out", type=Path, help="rows as JSON, rewritten after each launch")
    parser.add_argument("--table", type=Path, help="print the table of a JSON file written by --out, and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"load {os.getloadavg()}")
    rows = asyncio.run(run(args.rounds, args.only.split(",") if args.only else None, args.modes.split(","), args.out))
    print(f"load after {os.getloadavg()}")
    print(table(rows))


if __name__ == "__main__":
    main()
