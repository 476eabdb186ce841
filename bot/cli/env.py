"""``specperf env``: probe a host with an engine's Python, print checks, GPUs, software and system;
``specperf env --diff A.json B.json``: the fingerprint diff of two saved snapshots.

Every probe is saved as JSON (``{"snapshot": ..., "checks": [...], "under_load": ...}``) under
the data directory's ``env/`` (or ``--json PATH``); ``--diff`` reads those files or stored runs by id, or bare
snapshots. Exit status 0 whatever the checks say (they are findings, not errors); probe and
file errors exit 2 like other errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

import core
import storage
from bot import _app as app
from bot._common import (
    check_output_path,
    data_dir,
    database,
    json_arg,
    open_host,
    seconds_arg,
    watch_verdict,
    window_rows,
    write_json,
)
from bot._settings import load_config
from core._env.checks import run_checks
from core._env.disturbance import Disturbance
from core._env.fingerprint import Change, SnapshotError, diff_snapshots, load_snapshot, performance_env
from core._env.hygiene import gpu_holders
from core._env.probe import probe_async

_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``env`` subcommand to ``sub``."""
    e = sub.add_parser("env", help="probe a host (GPUs, drivers, software, system) and check it; or diff two snapshots")
    e.add_argument("--engine", help="engine whose Python and environment to probe with (default: the only one)")
    e.add_argument("--host", help="host to probe (default: the engine's host); over SSH the probe is fed to the host's python")
    e.add_argument("--under-load", action="store_true",
                   help="the GPUs are busy now: judge P-states and PCIe links (they drop when idle)")
    e.add_argument("--cheap", action="store_true", help="the per-trial probe: live readings only, no software scan")
    json_arg(e, "the snapshot and checks (--watch: the window and its judgement)",
             " (default: a file in the data directory's env/)")
    e.add_argument("--watch", type=seconds_arg, metavar="SECONDS",
                   help="run the per-trial window monitor alone for SECONDS: what on the host (CPU time of other "
                        "processes on the engine's CPUs, GPU throttling and processes, swap) would disturb a measurement")
    e.add_argument("--diff", nargs=2, metavar=("A", "B"),
                   help="compare two saved snapshots (JSON files) instead of probing")
    e.set_defaults(run=run)


def _checks_table(checks: list[core.Check], under_load: bool) -> Table:
    table = Table(title=f"checks ({'under load' if under_load else 'idle'})", title_justify="left")
    table.add_column("status")
    table.add_column("check")
    table.add_column("finding", overflow="fold")
    for check in sorted(checks, key=lambda c: -c.status.rank):
        table.add_row(Text(str(check.status), style=_STYLE[str(check.status)]), check.name, check.line)
    return table


def _v(value, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:,.{digits}f}"
    return f"{value}{unit}"


def _gpu_table(gpu: dict) -> Table:
    table = Table(title=f"gpu: driver {gpu.get('driver_version')}, CUDA {gpu.get('cuda_driver_version')}, "
                        f"NVML {gpu.get('nvml_version')}", title_justify="left")
    for column in ("GPU", "name", "P", "SM MHz", "mem MHz", "clock events", "PCIe", "temp", "power W",
                   "memory MiB", "procs", "persist", "ECC"):
        table.add_column(column)
    for d in gpu.get("devices") or []:
        if "error" in d:
            table.add_row(str(d["index"]), Text(d["error"], style="red"))
            continue
        procs = d.get("processes")
        table.add_row(
            str(d["index"]), _v(d.get("name")), _v(d.get("pstate")),
            f"{_v(d.get('sm_clock_mhz'))} / {_v(d.get('sm_clock_max_mhz'))}",
            f"{_v(d.get('mem_clock_mhz'))} / {_v(d.get('mem_clock_max_mhz'))}",
            ", ".join(d.get("clock_event_reason_names") or []) or "none",
            f"Gen{_v(d.get('pcie_gen'))} x{_v(d.get('pcie_width'))} "
            f"(max Gen{_v(d.get('pcie_gen_max'))} x{_v(d.get('pcie_width_max'))})",
            f"{_v(d.get('temperature_c'))} C",
            f"{_v(d.get('power_w'))} / {_v(d.get('power_limit_w'))}",
            f"{_v(d.get('memory_used_mib'))} / {_v(d.get('memory_total_mib'))}",
            "-" if procs is None else str(len(procs)),
            _v(d.get("persistence_mode")), _v(d.get("ecc_mode")),
        )
    return table


def _software_table(software: dict) -> Table:
    table = Table(title="software", title_justify="left")
    table.add_column("name")
    table.add_column("version")
    table.add_column("import path / detail", overflow="fold")
    python = software.get("python") or {}
    table.add_row("python", _v(python.get("version")), _v(python.get("executable")))
    torch = software.get("torch") or {}
    if torch:
        detail = f"CUDA {_v(torch.get('cuda'))}, cuDNN {_v(torch.get('cudnn'))}"
        table.add_row("torch", _v(torch.get("version")), f"{_v(torch.get('path'))} ({detail})")
    nccl = software.get("nccl") or {}
    if nccl:
        table.add_row("NCCL", _v(nccl.get("version")), nccl.get("source") or nccl.get("reason") or "-")
    for name, info in (software.get("packages") or {}).items():
        if name == "torch":
            continue
        shown = name.replace("_", "-")
        if info.get("path") is None:
            table.add_row(shown, "-", "not installed")
            continue
        note = f" ({info['version_source']})" if info.get("version_source") not in (None, "metadata") else ""
        table.add_row(shown, _v(info.get("version")) + note, info["path"])
    return table


def _env_table(env: dict) -> Table | Text | None:
    """The variables that move an engine's performance (:func:`core._env.fingerprint.performance_env`) as a
    table, with the count of the others under it (all of them are in the saved JSON); one line
    when none of those is set; ``None`` for no variables at all."""
    if not env:
        return None
    shown = performance_env(env)
    others = len(env) - len(shown)
    rest = f"{others} other variable{'s' if others != 1 else ''} (paths, shell, ...) in the saved JSON" if others else ""
    title = "environment variables that move performance (CUDA_*, NCCL_*, TORCH_*, VLLM_*, SGLANG_*, OMP_*, ...)"
    if not shown:
        return Text(f"{title}: none set" + (f"; {rest}" if rest else ""))
    table = Table(title=title, title_justify="left", caption=rest or None, caption_justify="left")
    table.add_column("name")
    table.add_column("value", overflow="fold")
    for name, value in shown.items():
        table.add_row(name, value)
    return table


def _system_table(system: dict) -> Table:
    table = Table(title="system", title_justify="left")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    rows = [("host", "hostname"), ("kernel", "kernel"), ("os", "os"), ("cpu", "cpu_model"),
            ("cpus (usable)", None), ("cpu governor", "cpu_governor"),
            ("transparent hugepages", "transparent_hugepage"),
            ("load 1/5/15 min", None), ("memory available MiB", None)]
    for label, key in rows:
        if key is not None:
            if key in system:
                table.add_row(label, _v(system.get(key)))
        elif label.startswith("cpus") and "cpu_count" in system:
            table.add_row(label, f"{_v(system.get('cpu_count'))} ({_v(system.get('cpu_affinity_count'))})")
        elif label.startswith("load"):
            table.add_row(label, " / ".join(_v(system.get(f"loadavg_{m}m"), digits=2) for m in (1, 5, 15)))
        elif label.startswith("memory") and "mem_available_mib" in system:
            total = system.get("mem_total_mib")  # absent from snapshots of older probes' cheap kind
            table.add_row(label, _v(system.get("mem_available_mib")) + (f" of {_v(total)}" if total else ""))
    git = system.get("git")
    if git:
        table.add_row("engine checkout", f"{git['repo']} @ {git.get('sha') or git.get('reason')}"
                      + (" (dirty)" if git.get("dirty") else ""))
    for p in system.get("top_processes") or []:
        table.add_row("busy process", f"pid {p['pid']} ({p.get('user')}) {p['cpu_pct']}% CPU, "
                                      f"{p['rss_mib']} MiB: {p.get('command')}")
    return table


def print_snapshot(console: Console, snapshot: dict, checks: list[core.Check], under_load: bool) -> None:
    """Checks, GPUs (or why there are none), software, environment variables and system."""
    console.print(_checks_table(checks, under_load))
    gpu = snapshot.get("gpu") or {}
    if gpu.get("available"):
        console.print(_gpu_table(gpu))
    else:
        reason = gpu.get("reason") or gpu.get("error") or "no reason given"
        console.print(Text("gpu: unavailable", style="bold") + Text(f" ({reason})"))
    software = snapshot.get("software") or {}
    if "error" in software:
        console.print(Text(f"software: probe section failed: {software['error']}", style="red"))
    elif "packages" in software:
        console.print(_software_table(software))
    env_table = _env_table(software.get("env") or {})
    if env_table is not None:
        console.print(env_table)
    system = snapshot.get("system") or {}
    if "error" in system:
        console.print(Text(f"system: probe section failed: {system['error']}", style="red"))
    else:
        console.print(_system_table(system))


def print_diff(console: Console, changes: list[Change], a: str, b: str) -> None:
    """The fingerprint diff as a table, most likely throughput mover first."""
    if not changes:
        console.print(f"no differences between {a} and {b} in the compared fields")
        return
    table = Table(title=f"what changed from {a} to {b} (most likely throughput mover first)", title_justify="left")
    for column in ("#", "category", "what", "before", "after"):
        table.add_column(column, overflow="fold")
    for i, change in enumerate(changes, 1):
        table.add_row(str(i), change.category.label, change.what, Text(change.before_text), Text(change.after_text))
    console.print(table)


def _snapshot_of(given: str, args: argparse.Namespace) -> dict:
    """A snapshot from a JSON file, or from a stored run (its id): the commit arm's full probe."""
    if Path(given).is_file():
        return load_snapshot(given)
    if not given.isdigit():
        raise SnapshotError(f"{given} is neither a snapshot file nor a run id (`specperf history` lists runs)")
    config = load_config(args.config)
    db = database(config)
    stored = storage.load_run(db, int(given))
    if stored is None:
        raise storage.NoSuchRunError(given, db)
    for phase in ("arm-head", "arm-base"):
        for snap in stored.snapshots:
            if snap.phase == phase:
                return snap.data
    raise SnapshotError(f"run {given} has no environment snapshot (its probe failed or it never started)")


async def run(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf env``; returns the exit status (errors propagate as exceptions)."""
    if args.diff:
        a, b = (_snapshot_of(given, args) for given in args.diff)
        print_diff(console, diff_snapshots(a, b), args.diff[0], args.diff[1])
        return 0
    check_output_path("json", args.json)
    config = load_config(args.config)
    chosen = app.probe_target(config, args.engine, args.host)
    label, python, env, repo, host = chosen.label, chosen.python, chosen.env, chosen.repo, chosen.host
    if args.watch:
        return await _watch(args, config, console, chosen)
    async with open_host(config, host) as target:
        with console.status(f"probing {host} ({target.where}) with {python}"):
            snapshot = await probe_async(python, cheap=args.cheap, env=env, repo=repo, host=target,
                                         container=chosen.container)
            holders = await gpu_holders(target, snapshot)
    checks = run_checks(snapshot, under_load=args.under_load, engine_cpus=chosen.cpus)
    console.print(f"env snapshot of host {host} with {label} ({python}): "
                  f"{snapshot['kind']} probe, {snapshot['wall_s']:.2f} s")
    print_snapshot(console, snapshot, checks, args.under_load)
    for holder in holders:
        console.print(f"GPU holder ({holder.kind}, seen through {holder.source}): {holder.line}", markup=False,
                      highlight=False)
    out = args.json or data_dir() / "env" / f"env-{host}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}.json"
    write_json(out, {"snapshot": snapshot, "checks": [c.to_dict() for c in checks],
                     "gpu_holders": [dataclasses.asdict(h) for h in holders], "under_load": args.under_load},
               console, "snapshot written to")
    return 0


async def _watch(args: argparse.Namespace, config: core.Config, console: Console, target: app.ProbeTarget) -> int:
    """``specperf env --watch SECONDS``: the window monitor alone, judged as a trial would be."""
    async with open_host(config, target.host) as host:
        with console.status(f"watching host {target.host} ({host.where}) for {args.watch:g} s"):
            result = await app.watch(config, host, target, args.watch)
    window, judged = result.window, result.judged
    print_window(console, window, f"host {target.host} for {window['window_s']:.1f} s (with {target.label})", judged)
    console.print(Text(watch_verdict(judged), style="bold yellow" if judged.disturbed else "green"))
    out = args.json or data_dir() / "env" / f"watch-{target.host}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}.json"
    write_json(out, {"window": window, "disturbed": judged.to_dict()}, console, "window written to")
    return 0


def print_window(console: Console, window: dict, title: str, judged: Disturbance) -> None:
    """A window monitor's document as tables: CPU shares (as ``judged`` computed them), the
    busiest other processes, memory, GPUs."""
    table = Table(title=f"window: {title}", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in window_rows(window, judged):
        table.add_row(name, value)
    console.print(table)
    procs = Table(title="busiest other processes", title_justify="left")
    for column in ("pid", "user", "CPU-s on engine CPUs", "CPU-s", "command"):
        procs.add_column(column, overflow="fold")
    for p in window["foreign_processes"]:
        procs.add_row(str(p["pid"]), p.get("user") or "-", f"{p['engine_cpus_cpu_s']:.2f}", f"{p['cpu_s']:.2f}",
                      Text(p.get("command") or "-"))
    console.print(procs)
    gpu = window["gpu"]
    if not gpu.get("available"):
        console.print(f"GPUs: none read ({gpu.get('reason')})", markup=False, highlight=False)
    for dev in gpu.get("devices", []):
        held = ", ".join(f"{k} {v:.1f} s" for k, v in {**dev["violation_s"], **dev["clock_event_s"]}.items() if v)
        console.print(f"GPU{dev['index']}: SM clock min {_v(dev['sm_clock_mhz_min'])} / median "
                      f"{_v(dev['sm_clock_mhz_median'])} MHz; held by {held or 'nothing'}"
                      + (f"; unsupported: {', '.join(dev['unsupported'])}" if dev["unsupported"] else "")
                      + "".join(f"; other compute process pid {p['pid']} ({p.get('command')})"
                                for p in dev["foreign_processes"]), markup=False, highlight=False)
