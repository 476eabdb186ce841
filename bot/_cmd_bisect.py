"""``specperf bisect GOOD BAD``: find the commit of a regression with compares (core._bisect),
recording the bisect run and each step's compare run, printing progress as it goes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.text import Text

import core
import storage
from bot._cmd_compare import _ConsoleStore, _settings, reconcile
from bot._cmd_triage import engine_and_rules
from bot._common import database, host_args, open_host, owner, pick, pin_client
from bot._report_view import print_bisect
from bot._settings import load_config


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bisect`` to ``sub``."""
    b = sub.add_parser("bisect", help="find the commit between GOOD and BAD that made a mode slower")
    b.add_argument("good", help="the last good commit (SHA, branch or tag)")
    b.add_argument("bad", help="the first known bad commit; GOOD must be an ancestor on its first-parent line")
    b.add_argument("--mode", help="the mode to bisect (default: baseline, else the engine's first mode)")
    b.add_argument("--engine", help="engine name from the config (default: the only one)")
    b.add_argument("--workload", help="workload name from the config (default: 'default', or the only one)")
    b.add_argument("--min-trials", type=int, help="launches per arm before a verdict, per compare")
    b.add_argument("--max-trials", type=int, help="launches per arm at most, per compare (INCONCLUSIVE retries double it)")
    b.add_argument("--margin-pct", type=float, help="changes within +-margin count as NO CHANGE")
    b.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    b.add_argument("--json", help="also write the bisect report as JSON here")
    host_args(b)
    b.set_defaults(run=run_bisect)


class _ConsoleBisectStore(storage.BisectStore):
    """Records the bisect and prints each step as it ends."""

    def __init__(self, db, request: core.BisectRequest, console: Console) -> None:
        super().__init__(db, request, compare_store=lambda engine: _ConsoleStore(engine, console))
        self.console = console

    def started(self, good_sha, bad_sha, commits) -> None:
        super().started(good_sha, bad_sha, commits)
        self.console.print(f"bisect run {self.run_id}: {len(commits)} commits after {good_sha[:12]} up to "
                           f"{bad_sha[:12]}, mode {self.request.mode}", markup=False, highlight=False)

    def progress(self, message: str) -> None:
        self.console.print(Text(message, style="bold"))

    def step_finished(self, step: core.BisectStep) -> None:
        super().step_finished(step)
        self.console.print(f"step {step.number} ({step.kind}) {step.head_sha[:12]}: {step.evidence()} -> {step.outcome}",
                           markup=False, highlight=False)


def _mode(args: argparse.Namespace, config: core.Config, engine: core.EngineConfig, name: str) -> str:
    if args.mode:
        if args.mode not in engine.modes:
            raise core.ConfigError(f"engine {name!r} has no mode {args.mode!r} (its modes: {', '.join(engine.modes)})")
        return args.mode
    return "baseline" if "baseline" in engine.modes else next(iter(engine.modes))


async def run_bisect(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf bisect``: 0 when it names a culprit or finds nothing to bisect, 3 when
    good or bad cannot be measured (bad refs raise git errors before anything runs)."""
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        raise core.ConfigError(f"--json {args.json}: not a file in an existing folder")
    config = load_config(args.config)
    name, engine, rules = engine_and_rules(config, args.engine)
    workload_name = pick(config.workloads, args.workload, "workload", default="default")
    db = database(config, args.db)
    async with open_host(config, args.host or engine.host) as host:
        request = core.BisectRequest(
            engine_name=name, engine=engine, workload_name=workload_name, workload=config.workload(workload_name),
            good_ref=args.good, bad_ref=args.bad, mode=_mode(args, config, engine, name),
            settings=_settings(args, config), host=host, triage_rules=rules, force_clean=args.force_clean,
        )
        async with host.lock(owner(f"bisect {args.good}..{args.bad}"), wait=not args.no_wait,
                             on_wait=lambda message: console.print(message, markup=False, highlight=False)):
            await reconcile(db, config, console)
            store = _ConsoleBisectStore(db, request, console)
            pin_client(config, console)
            result = await core.bisect(request, store)
    report = {"run_id": store.run_id, **result.to_dict()}
    for step in report["steps"]:
        step["compare_run_id"] = store.compare_runs.get(step["number"])
    print_bisect(console, report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        console.print(f"report: {args.json}", markup=False)
    return 3 if result.status == "failed" else 0
