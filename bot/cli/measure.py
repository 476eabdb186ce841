"""``specperf measure``: one trial of one engine and mode, printed as a table and saved as JSON."""

from __future__ import annotations

import argparse
import datetime as dt

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

import core
from bot import _app as app
from bot._common import (
    check_output_path,
    data_dir,
    database,
    fmt,
    host_args,
    json_arg,
    open_host,
    owner,
    pin_client,
    write_json,
)
from bot._runs import reconcile_runs
from bot._settings import load_config
from core._config import DisturbanceConfig
from core._env.disturbance import judge_window
from core._env.hygiene import clean_gpus
from core._env.probe import probe_async
from core._measure.trial import TrialResult, measure


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``measure`` subcommand to ``sub``."""
    m = sub.add_parser("measure", help="launch an engine, run a workload, print and save the figures")
    m.add_argument("--engine", help="engine name from the config (default: the only one)")
    m.add_argument("--mode", default="baseline", help="mode name from the engine's modes (default: baseline)")
    m.add_argument("--workload", help="workload name from the config (default: 'default', or the only one)")
    json_arg(m, "the result", " (default: a file in the data directory)")
    host_args(m)
    m.set_defaults(run=run)


def print_trial(console: Console, trial: TrialResult,
                limits: DisturbanceConfig | None = None) -> None:
    """One trial's figures as a two-column table, then whether its window was disturbed."""
    sample, figures = trial.sample, trial.engine
    table = Table(title=f"{trial.engine_name} / {trial.mode} / {trial.workload_name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("output tok/s (client)", fmt(sample.output_tok_s))
    table.add_row("output tok/s (engine)", fmt(figures.output_tok_s))
    table.add_row("requests/s", fmt(sample.request_per_s, 3))
    table.add_row("acceptance length", fmt(figures.acceptance_length, 3))
    table.add_row("output tokens", str(sample.output_tokens))
    table.add_row("window s", fmt(sample.window_s, 2))
    table.add_row("engine ready s", fmt(trial.ready_s, 1))
    table.add_row("output length held by", trial.length_method)
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        q = getattr(sample, name)
        label = name.removesuffix("_ms").upper()
        table.add_row(f"{label} p50 / p90 / p99 ms", "-" if q is None else f"{q.p50:.2f} / {q.p90:.2f} / {q.p99:.2f}")
    console.print(table)
    if figures.source:
        console.print(f"engine figures from: {figures.source}")
    window = trial.window or {}
    if "error" in window:
        console.print(window["error"], markup=False, highlight=False)
    elif window:
        judged = judge_window(window, limits or DisturbanceConfig())
        console.print(("DISTURBED: " + "; ".join(judged.reasons)) if judged.disturbed else
                      f"window quiet: other processes took {judged.engine_cpus_foreign_share or 0:.0%} of the "
                      "engine's CPUs", markup=False, highlight=False)


async def run(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf measure``; returns the exit status (errors propagate as exceptions)."""
    check_output_path("json", args.json)
    config = load_config(args.config)
    choice = app.choose(config, args.engine, args.workload, args.host)
    engine_name, engine, workload_name, workload = choice.engine_name, choice.engine, choice.workload_name, choice.workload
    pin_client(config, console)
    home = data_dir()
    async with open_host(config, choice.host_name) as host, \
            host.lock(owner(f"measure {engine_name} {args.mode}"), wait=not args.no_wait,
                      on_wait=lambda message: console.print(message, markup=False, highlight=False)):
        # runs a killed specperf left: their engines are ours, stopped here, never blamed as foreign below
        for run_id, reason in await reconcile_runs(database(config), config):
            console.print(f"run {run_id}: {reason}", markup=False, highlight=False)
        try:
            snapshot = await probe_async(engine.python, cheap=True, env=engine.env, host=host, container=engine.container)
        except core.ProbeError as exc:
            console.print(f"environment probe failed ({exc}); GPU holders from device files only", markup=False)
            snapshot = None
        for line in await clean_gpus(host, snapshot, force_clean=args.force_clean, grace_s=engine.stop_grace_s,
                                     containers=[engine.container] if engine.container else []):
            console.print(line, markup=False, highlight=False)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            task = progress.add_task(f"starting {engine_name} ({args.mode}) on host {host.name}", total=workload.requests)
            trial = await measure(
                engine_name, engine, args.mode, workload_name, workload, f"{host.workdir}/logs", host=host,
                on_ready=lambda s: progress.update(task, description=f"ready in {s:.0f} s; measuring"),
                on_request_done=lambda r: progress.advance(task),
            )
    print_trial(console, trial, config.compare.disturbance)
    out = args.json or home / "results" / (
        f"measure-{engine_name}-{args.mode}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.json")
    write_json(out, trial.to_dict(), console, "results written to")
    return 0
