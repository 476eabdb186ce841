"""``specperf bisect GOOD BAD``: find the commit of a regression with compares (core._experiments.bisection),
recording the bisect run and each step's compare run, printing progress as it goes."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.text import Text

import core
import storage
from bot import _app as app
from bot._common import check_output_path, database, json_arg, open_host, write_json
from bot._settings import load_config
from bot.cli.compare import ConsoleProgress, cli_session, cli_settings, experiment_args
from bot.cli.tables import print_bisect
from bot.cli.triage import engine_and_rules
from core._experiments.bisection import BisectObserver, BisectStep
from core._git import resolve_commit


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bisect`` to ``sub``."""
    b = sub.add_parser("bisect", help="find the commit between GOOD and BAD that made a mode slower")
    b.add_argument("good", help="the last good commit (SHA, branch or tag)")
    b.add_argument("bad", help="the first known bad commit; GOOD must be an ancestor on its first-parent line")
    b.add_argument("--mode", help="the mode to bisect (default: baseline, else the engine's first mode)")
    experiment_args(b, "per arm, per compare,", " (INCONCLUSIVE retries double it)")
    b.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    json_arg(b, "the bisect report")
    b.set_defaults(run=run_bisect)


class ConsoleBisectProgress(BisectObserver):
    """Prints a bisect's steps on the terminal as they end (and each step's compare as it goes)."""

    def __init__(self, store: storage.BisectStore, console: Console) -> None:
        self.store, self.console = store, console

    def started(self, good_sha, bad_sha, commits) -> None:
        self.console.print(f"bisect run {self.store.run_id}: {len(commits)} commits after {good_sha[:12]} up to "
                           f"{bad_sha[:12]}, mode {self.store.request.mode}", markup=False, highlight=False)

    def progress(self, message: str) -> None:
        self.console.print(Text(message, style="bold"))

    def compare_observer(self, step, request) -> core.CompareObserver:
        return ConsoleProgress(self.console)

    def step_finished(self, step: BisectStep) -> None:
        self.console.print(f"step {step.number} ({step.kind}) {step.head_sha[:12]}: {step.evidence()} -> {step.outcome}",
                           markup=False, highlight=False)


async def run_bisect(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf bisect``: 0 when it names a culprit or finds nothing to bisect, 3 when
    good or bad cannot be measured (bad refs raise git errors before anything runs: before the
    database is opened and the host lock taken)."""
    check_output_path("json", args.json)
    config = load_config(args.config)
    engine_and_rules(config, args.engine)  # the engine must have a repo
    choice = app.choose(config, args.engine, args.workload, args.host)
    async with open_host(config, choice.host_name) as host:
        request = app.bisect_request(config, choice, host, args.good, args.bad, args.mode, cli_settings(args, config),
                                     args.force_clean)
        # every piece of user input is checked before any side effect (the database, the host lock)
        for ref in (args.good, args.bad):
            await resolve_commit(host, request.engine.repo or "", ref)
        db = database(config, args.db)
        store, result = await app.bisect(config, db, request,
                                         cli_session(args, console, f"bisect {args.good}..{args.bad}"),
                                         lambda store: ConsoleBisectProgress(store, console))
    report = {"run_id": store.run_id, **result.to_dict()}
    for step in report["steps"]:
        step["compare_run_id"] = store.compare_runs.get(step["number"])
    print_bisect(console, report)
    if args.json:
        write_json(args.json, report, console)
    return 3 if result.status == "failed" else 0
