"""Benchmark: how a real engine's noise splits between launches and the windows within one
(issue 42), and what a launch and a window cost, measured as `specperf calibrate --windows`
computes it (core._experiments.calibrate.noise_split) on A/A launch pairs, one engine at a time.

Engines: ``--transformers-model DIR`` runs ``transformers serve`` on the GPU with that model
(a random-weight Llama from scripts/make_test_models.py, made with ``--make-model``), the
engine of tests/test_compare_gpu.py; without it, the embedded default's CPU test engine
(scripts/setup-test-engine) in ``--mode``. Each launch is a real trial
(:func:`core._measure.trial.measure`) of ``--windows`` windows of ``--requests`` requests;
a pair is two consecutive launches. Printed: each launch's window figures, then the split
line, and the launch and window seconds it is priced from (a launch: its wall time from
start to stop less its windows).

Run on the device: ``python3 -m bench.window_split --make-model /tmp/model --transformers-model
/tmp/model --pairs 5 --windows 4``; on the CPU machine: ``.venv/bin/python -m
bench.window_split --pairs 4 --windows 4``. Results in bench/WINDOWS_RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

from core._config import EngineConfig, HostConfig, WorkloadConfig
from core._experiments.calibrate import noise_split, plan_windows
from core._experiments.compare import arm_trial
from core._hosts import LocalHost
from core._measure.trial import measure

ROOT = Path(__file__).resolve().parent.parent


def _engine(args: argparse.Namespace) -> tuple[EngineConfig, str, str | None]:
    """(engine, mode, cwd)."""
    if args.transformers_model:
        engine = EngineConfig(
            kind="command", python=sys.executable, model=args.transformers_model, port=args.port, ready_timeout_s=300,
            command=["{python}", "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1", "--port",
                     "{port}", "--device", "cuda", "{model}"])
        return engine, "baseline", None
    from bot._settings import load_config
    from tests.conftest import TESTENV

    return load_config(None).engines["tiny-vllm"], args.mode, str(TESTENV / "engine-repo")


async def run(args: argparse.Namespace) -> None:
    engine, mode, cwd = _engine(args)
    workload = WorkloadConfig(output_len=args.output_len, concurrency=args.concurrency, requests=args.requests,
                              warmup_requests=args.concurrency, windows=args.windows)
    host = LocalHost("local", HostConfig(), "/tmp/specperf-window-split")
    trials, up_s, measured_s = [], 0.0, 0.0
    for launch in range(2 * args.pairs):
        started = time.monotonic()
        trial = await measure("bench", engine, mode, "bench", workload, "/tmp/specperf-window-split/logs", host=host,
                              cwd=cwd)
        wall = time.monotonic() - started
        figures = trial.sample.window_tok_s
        up_s += wall
        measured_s += trial.sample.window_s
        trials.append(arm_trial(trial))
        print(json.dumps({"launch": launch, "wall_s": round(wall, 1), "ready_s": round(trial.ready_s, 1),
                          "window_s": round(trial.sample.window_s, 2), "tok_s": round(trial.sample.output_tok_s, 1),
                          "window_tok_s": [round(f, 1) for f in figures]}), flush=True)
    cost = {"engines_up_s": up_s, "measured_s": measured_s, "launches": len(trials)}
    split = noise_split(trials[0::2], trials[1::2], cost)
    print(f"split: {split.line() if split else 'none'}")
    if split:
        for start_s, window_s in ((split.start_s, split.window_s), (300.0, 60.0)):
            priced = type(split)(split.between_pct, split.within_pct, split.windows, start_s, window_s)
            print(f"plan at start {start_s:.0f} s, window {window_s:.1f} s: {plan_windows(priced).line()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--mode", default="baseline")
    parser.add_argument("--port", type=int, default=18311)
    parser.add_argument("--transformers-model", help="serve this model with transformers serve on the GPU")
    parser.add_argument("--make-model", help="first make the random-weight test model in this folder")
    args = parser.parse_args()
    if args.make_model:
        spec = importlib.util.spec_from_file_location("make_test_models", ROOT / "scripts/make_test_models.py")
        models = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(models)
        models.make_target(Path(args.make_model))
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"{vars(args)}", flush=True)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
