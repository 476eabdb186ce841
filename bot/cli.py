"""The ``specperf`` terminal command.

Config resolution: ``--config PATH``, else ``$SPECPERF_CONFIG``, else ``./specperf.toml``,
else the embedded default (the local CPU test engine, see ``bot/default.toml``).

Exit status: 0 success, 2 usage or config error, 3 engine error, 4 invalid measurement,
130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
import uvloop

import core

EXIT_USAGE, EXIT_ENGINE, EXIT_INVALID, EXIT_INTERRUPTED = 2, 3, 4, 130


def data_dir() -> Path:
    """specperf's data directory: ``$SPECPERF_HOME``, else ``$XDG_DATA_HOME/specperf``."""
    if home := os.environ.get("SPECPERF_HOME"):
        return Path(home)
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "specperf"


def load(path: str | None) -> core.Config:
    """The configuration, resolved as the module docstring says."""
    os.environ.setdefault("SPECPERF_TESTENV", str(Path.home() / ".cache/specperf/testenv"))
    path = path or os.environ.get("SPECPERF_CONFIG")
    if path is None and Path("specperf.toml").exists():
        path = "specperf.toml"
    if path is not None:
        return core.load_config(path)
    text = resources.files("bot").joinpath("default.toml").read_text()
    return core.parse_config(text, "<embedded default config>")


def _only(table: dict, given: str | None, what: str, default: str | None = None) -> str:
    if given:
        return given
    if default and default in table:
        return default
    if len(table) == 1:
        return next(iter(table))
    raise core.ConfigError(f"more than one {what} is configured ({', '.join(sorted(table))}); pick one with --{what}")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _print_trial(console: Console, trial: core.TrialResult) -> None:
    sample, figures = trial.sample, trial.engine
    table = Table(title=f"{trial.engine_name} / {trial.mode} / {trial.workload_name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("output tok/s (client)", _fmt(sample.output_tok_s))
    table.add_row("output tok/s (engine)", _fmt(figures.output_tok_s))
    table.add_row("requests/s", _fmt(sample.request_per_s, 3))
    table.add_row("acceptance length", _fmt(figures.acceptance_length, 3))
    table.add_row("output tokens", str(sample.output_tokens))
    table.add_row("window s", _fmt(sample.window_s, 2))
    table.add_row("engine ready s", _fmt(trial.ready_s, 1))
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        q = getattr(sample, name)
        label = name.removesuffix("_ms").upper()
        table.add_row(f"{label} p50 / p90 / p99 ms",
                      "-" if q is None else f"{q.p50:.2f} / {q.p90:.2f} / {q.p99:.2f}")
    console.print(table)
    if figures.source:
        console.print(f"engine figures from: {figures.source}")


async def _measure(args: argparse.Namespace, console: Console) -> int:
    config = load(args.config)
    engine_name = _only(config.engines, args.engine, "engine")
    workload_name = _only(config.workloads, args.workload, "workload", default="default")
    engine, workload = config.engine(engine_name), config.workload(workload_name)
    if config.client_cpus:
        try:
            os.sched_setaffinity(0, config.client_cpus)
        except OSError as exc:
            console.print(f"[yellow]warning: cannot pin the client to CPUs {config.client_cpus}: {exc}")
    home = data_dir()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(f"starting {engine_name} ({args.mode})", total=workload.requests)
        trial = await core.measure(
            engine_name, engine, args.mode, workload_name, workload, home / "logs",
            on_ready=lambda s: progress.update(task, description=f"ready in {s:.0f} s; measuring"),
            on_request_done=lambda r: progress.advance(task),
        )
    _print_trial(console, trial)
    out = Path(args.json) if args.json else home / "results" / (
        f"measure-{engine_name}-{args.mode}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trial.to_dict(), indent=2))
    console.print(f"results written to {out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specperf", description="Measure and compare LLM serving throughput.")
    parser.add_argument("--config", help="specperf.toml to use (default: ./specperf.toml or the embedded test engine)")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="launch an engine, run a workload, print and save the figures")
    m.add_argument("--engine", help="engine name from the config (default: the only one)")
    m.add_argument("--mode", default="baseline", help="mode name from the engine's modes (default: baseline)")
    m.add_argument("--workload", help="workload name from the config (default: 'default')")
    m.add_argument("--json", help="where to write the JSON result (default: the data directory)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specperf`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    console = Console(stderr=False)
    errors = Console(stderr=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops engines like Ctrl-C
    failures = (
        (core.ConfigError, "config error", EXIT_USAGE),
        (core.InvalidSampleError, "invalid measurement", EXIT_INVALID),
        (core.EngineError, "engine error", EXIT_ENGINE),
    )
    try:
        # uvloop: about a quarter less client CPU per streamed token (bench/RESULTS.md)
        return uvloop.run(_measure(args, console))
    except core.SpecperfError as exc:
        label, status = next((lbl, st) for kind, lbl, st in failures if isinstance(exc, kind))
        errors.print(Text(f"{label}: ", style="bold red") + Text(str(exc)))
        return status
    except KeyboardInterrupt:
        errors.print("interrupted; the engine's process group was stopped")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
