"""``specperf triage GOOD BAD``: the first-parent commits of a range ranked by suspicion, with
no GPU time (core._triage.rank)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import core
import storage
from bot import _app as app
from bot._common import check_output_path, database, json_arg, open_host, pick, write_json
from bot._settings import load_config
from core._config.triage_rules import TriageRules
from core._triage.rank import triage


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``triage`` to ``sub``."""
    t = sub.add_parser("triage", help="rank the commits between GOOD and BAD by suspicion (no engine launched)")
    t.add_argument("good", help="the last good commit (SHA, branch or tag)")
    t.add_argument("bad", help="the first known bad commit; GOOD must be an ancestor on its first-parent line")
    t.add_argument("--engine", help="engine name from the config (default: the only one)")
    t.add_argument("--modes", help="comma-separated modes whose arguments decide the gates (default: all the engine's)")
    t.add_argument("--profile-run", type=int, metavar="RUN",
                   help="a stored compare with a profile round: commits in the areas of the ops it names rank up")
    t.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    json_arg(t, "the ranked list")
    t.add_argument("--host", help="host whose copy of the engine's repo to read (default: the engine's host)")
    t.set_defaults(run=run_triage)


def engine_and_rules(config: core.Config, name: str | None) -> tuple[str, core.EngineConfig, TriageRules]:
    """The chosen engine and its triage rules.

    Raises:
        core.ConfigError: no such engine, or it has no repo.
    """
    name = pick(config.engines, name, "engine")
    engine = config.engine(name)
    if not engine.repo:
        raise core.ConfigError(f"engine {name!r} has no repo; set engines.{name}.repo")
    return name, engine, config.triage.rules_for(name, engine.kind)


def print_triage(console: Console, report: core.TriageReport, title: str) -> None:
    """The ranked commits as a table."""
    table = Table(title=title)
    for column in ("rank", "#", "commit", "date", "subject", "areas", "files", "note"):
        table.add_column(column, overflow="fold")
    for e in report.entries:
        style = "dim" if e.inert or not e.score else ("bold" if e.rank == 1 else None)
        files = ", ".join(f.path for f in e.files[:3]) + (f" (+{len(e.files) - 3})" if len(e.files) > 3 else "")
        table.add_row(str(e.rank), str(e.position), e.sha[:12], e.date[:16].replace("T", " "), escape(e.subject),
                      escape(", ".join(e.areas) or "-"), escape(files), escape(e.note()), style=style)
    console.print(table)


def profile_categories(db, run_id: int) -> list[str]:
    """The op categories the profile rounds of stored run ``run_id`` named, most moved first.

    Raises:
        storage.NoSuchRunError: no such run.
        core.ConfigError: the run has no profile that names ops.
    """
    stored = storage.load_run(db, run_id)
    if stored is None:
        raise storage.NoSuchRunError(run_id, db)
    named = [c for snap in stored.snapshots if snap.phase.startswith("profile-") and snap.data.get("status") == "done"
             for c in snap.data.get("categories", [])]
    if not named:
        raise core.ConfigError(f"run {run_id} has no profile round that names ops (`specperf compare ... --profile "
                               "always` profiles both arms)")
    return list(dict.fromkeys(named))


async def run_triage(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf triage``: 0 with the ranked table (errors raise; bad refs are git errors)."""
    check_output_path("json", args.json)
    config = load_config(args.config)
    name, engine, rules = engine_and_rules(config, args.engine)
    modes = app.resolve_modes(config, name, args.modes.split(",")) if args.modes else None
    categories = profile_categories(database(config, args.db), args.profile_run) if args.profile_run else None
    async with open_host(config, args.host or engine.host) as host:
        report = await triage(host, engine.repo, args.good, args.bad, engine, rules, modes, categories)
    if categories:
        console.print(f"profile of run {args.profile_run}: {', '.join(categories)} ops named; commits in their areas "
                      "rank up", markup=False, highlight=False)
    print_triage(console, report, f"{name}: {len(report.commits)} commits after {report.good_sha[:12]} "
                                  f"up to {report.bad_sha[:12]}, most suspicious first")
    if args.json:
        write_json(args.json, {"good": report.good_sha, "bad": report.bad_sha,
                               "entries": [e.to_dict() for e in report.entries]}, console)
    return 0
