"""``specperf compare``, ``specperf show`` and ``specperf history``: the revert-and-measure job
and the runs it keeps."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot import _app as app
from bot._app import trial_line
from bot._common import (
    check_output_path,
    data_dir,
    database,
    host_args,
    json_arg,
    open_host,
    pin_client,
    write_json,
)
from bot._runs import add_history, calibration_plans, plan_request, recheck_plan, stored_report
from bot._settings import load_config
from bot.cli.exit_status import EXIT_ENGINE, EXIT_HOST, failure
from bot.cli.tables import print_bisect, print_report
from core._experiments.compare import figures, resolve_refs
from core._experiments.report import render_chart, summarize
from core._experiments.stats import INCONCLUSIVE
from core._hosts import SlurmHost


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compare``, ``calibrate``, ``recheck``, ``show`` and ``history`` to ``sub``."""
    c = sub.add_parser("compare", help="measure a commit against its base, interleaved, and give a verdict per mode")
    c.add_argument("commit", nargs="?",
                   help="the commit to test (SHA, branch or tag); none when neither --engine nor --base-engine has "
                        "a repo: the arms are then the two set-ups alone (two releases' venvs, two container images)")
    c.add_argument("--base", help="the base to compare against (default: the commit's first parent)")
    c.add_argument("--modes", help="comma-separated modes (default: [compare].modes that the engine has)")
    c.add_argument("--base-engine", metavar="NAME",
                   help="launch the base arm from this engine entry of the config (another release's venv, other "
                        "args or environment; same host and model), the commit's arm from --engine's; without "
                        "--base, both arms run the commit")
    c.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                   help="set KEY=VALUE in the base arm's engine environment (repeatable): the arms then differ in "
                        "that variable; without --base, both arms run the commit")
    c.add_argument("--base-args", metavar="ARGS",
                   help="append ARGS (one string, split as a shell would, never run by one) to the base arm's engine "
                        "arguments: the last of a repeated option wins; write --base-args=\"--flag ...\" when ARGS "
                        "begins with --; without --base, both arms run the commit")
    experiment_args(c, "per arm and mode", "")
    c.add_argument("--profile", choices=["on-change", "always", "never"],
                   help="profile both arms after the verdicts and name the ops whose time per step moved: for a "
                        "REGRESSION or IMPROVEMENT (on-change), every mode, or never (default: [compare].profile, "
                        "on-change)")
    _output_args(c)
    c.set_defaults(run=run_compare)

    k = sub.add_parser("calibrate", help="A/A launches of one commit: the host's launch-to-launch spread per mode and "
                                         "the margin and launches per arm that reach the power for a change")
    k.add_argument("--commit", default="HEAD", help="the commit launched on both sides (default: HEAD of the engine's repo)")
    k.add_argument("--engine", help="engine name from the config (default: the only one)")
    k.add_argument("--workload", help="workload name from the config (default: 'default', or the only one)")
    k.add_argument("--modes", help="comma-separated modes (default: [compare].modes that the engine has)")
    k.add_argument("--launches", type=int, default=6, help="launches per arm and mode (default 6)")
    k.add_argument("--change-pct", type=float, default=5.0, help="the change to detect, %% of tok/s (default 5)")
    k.add_argument("--power", type=float, default=0.9, help="the power to detect it with (default 0.9)")
    k.add_argument("--windows", type=int, default=3,
                   help="measured windows per launch (default 3): from two or more, the spread is split into its "
                        "between-launch and within-launch parts and compare plans windows per launch as well as "
                        "launches")
    host_args(k)
    _output_args(k)
    k.set_defaults(run=run_calibrate)

    r = sub.add_parser("recheck", help="re-measure a stored compare's commits on its host with its workload, modes and "
                                       "launches, and say whether its figures hold today")
    r.add_argument("run_id", type=_run_id, metavar="RUN")
    r.add_argument("--base-only", action="store_true",
                   help="launch only the run's base commit, on both sides (was its base figure real?)")
    r.add_argument("--no-wait", action="store_true", help="fail at once if the host is busy with another experiment")
    r.add_argument("--force-clean", action="store_true",
                   help="stop foreign processes holding the host's GPUs instead of refusing to run")
    _output_args(r)
    r.set_defaults(run=run_recheck)

    s = sub.add_parser("show", help="show a stored run")
    s.add_argument("run_id", type=_run_id, metavar="RUN")
    s.add_argument("--recompute", action="store_true", help="recompute the verdicts from the stored trials")
    _output_args(s)
    s.set_defaults(run=run_show)

    h = sub.add_parser("history", help="list stored runs, newest first")
    h.add_argument("--engine", help="only runs of this engine")
    h.add_argument("--limit", type=int, default=20)
    h.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    h.set_defaults(run=run_history)


def experiment_args(parser: argparse.ArgumentParser, per: str, more: str) -> None:
    """``--engine``, ``--workload``, the trial options (launches ``per`` ..., ``more`` after the
    maximum's help) and the host options: what every measuring command takes."""
    parser.add_argument("--engine", help="engine name from the config (default: the only one)")
    parser.add_argument("--workload", help="workload name from the config (default: 'default', or the only one)")
    parser.add_argument("--min-trials", type=int, help=f"launches {per} before a verdict")
    parser.add_argument("--max-trials", type=int, help=f"launches {per} at most{more}")
    parser.add_argument("--margin-pct", type=float, help="changes within +-margin count as NO CHANGE")
    host_args(parser)


def _run_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a run id (a positive number; `specperf history` lists them)")
    return int(text)


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work if a requested output file cannot be written."""
    for option in ("json", "chart"):
        check_output_path(option, getattr(args, option))


def _output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    json_arg(parser, "the report")
    parser.add_argument("--chart", help="where to write the PNG chart (default: the data directory)")


class ConsoleProgress(core.CompareObserver):
    """Prints a compare's progress on the terminal as it goes: each trial, and after each round
    the launches so far, the time, each mode's estimate and interval, and (with ``settings``)
    an upper bound of the time left: the undecided modes' launches up to ``max_trials`` at the
    mean launch time so far."""

    def __init__(self, console: Console, settings: core.CompareConfig | None = None) -> None:
        self.console, self.settings = console, settings
        self.launches = 0
        self.first_launch: float | None = None  # time.monotonic() of the first launch

    def progress(self, message: str) -> None:
        self.console.print(Text(message, style="dim"))

    def trial_launched(self, arm, seq, process) -> None:
        if self.first_launch is None:
            self.first_launch = time.monotonic()

    def trial_finished(self, arm, seq, trial) -> None:
        self.launches += 1
        self.console.print(f"  trial {seq}: {arm.mode} {arm.role}: {trial_line(trial)}", markup=False, highlight=False)

    def verdicts_updated(self, verdicts) -> None:
        spent = time.monotonic() - (self.first_launch or time.monotonic())
        parts = []
        for mode, v in verdicts.items():
            estimate = (f" {v.change_pct:+.1f}%" if v.change_pct is not None else "") + (
                f" ({v.ci_low_pct:+.1f} .. {v.ci_high_pct:+.1f})" if v.ci_low_pct is not None else "")
            parts.append(f"{mode} {v.verdict}{estimate}, {v.n_pairs} per arm")
        left = ""
        if self.settings and self.launches:
            undecided = [v for v in verdicts.values() if v.verdict == INCONCLUSIVE
                         or v.n_pairs < self.settings.min_trials]
            more = sum(2 * max(self.settings.max_trials - v.n_pairs, 0) for v in undecided)
            if more:
                left = f"; at most {more} more launches, about {more * spent / self.launches / 60:.0f} min"
        self.console.print(f"  so far ({self.launches} launches, {spent / 60:.1f} min): " + "; ".join(parts) + left,
                           markup=False, highlight=False)


def cli_session(args: argparse.Namespace, console: Console, doing: str) -> app.Session:
    """How a terminal command holds its host: ``--no-wait``, waiting lines and reconciled runs
    printed, the client pinned (``client_cpus``) before it measures."""
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    return app.Session(doing, wait=not args.no_wait, on_wait=say,
                       reconciled=lambda run_id, reason: say(f"run {run_id}: {reason}"),
                       before_run=lambda config: pin_client(config, console))


def cli_settings(args: argparse.Namespace, config: core.Config) -> core.CompareConfig:
    """``[compare]`` with ``--min-trials``, ``--max-trials``, ``--margin-pct`` and ``--profile``."""
    return app.compare_settings(config, min_trials=args.min_trials, max_trials=args.max_trials,
                                margin_pct=args.margin_pct, profile=getattr(args, "profile", None))


def _emit(console: Console, args: argparse.Namespace, run_id: int, report: dict,
          trials: dict, title: str) -> None:
    print_report(console, report, title)
    for line in (report.get("recheck") or {}).get("lines", []):
        console.print(line, markup=False, highlight=False)
    chart = Path(args.chart) if args.chart else data_dir() / "charts" / f"run-{run_id}.png"
    render_chart(trials, chart, title, report.get("launches"))
    console.print(f"chart: {chart}", markup=False)
    if args.json:
        write_json(args.json, {"run_id": run_id, **report}, console)


async def run_compare(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf compare``: 0 with a verdict per mode, 3 for a FAILED run, 5 for a run the
    host refused (foreign processes on its GPUs: a host error)."""
    _check_outputs(args)
    if args.commit is None and not any(getattr(args, name, None) for name in ("base_engine", "base_env", "base_args")):
        raise core.ConfigError("compare takes the commit to test (or, for set-ups without a repo, --base-engine, "
                               "--base-env or --base-args and no commit)")
    config = load_config(args.config)
    choice = app.choose(config, args.engine, args.workload, args.host)
    if (recheck_of := getattr(args, "recheck_of", None)) is not None:  # its workload, not today's of that name
        choice = dataclasses.replace(choice, workload=core.WorkloadConfig.model_validate(recheck_of["workload"]))
    if getattr(args, "windows", None) is not None:  # a calibration's windows per launch
        choice = dataclasses.replace(choice, workload=choice.workload.model_copy(update={"windows": args.windows}))
    modes = args.modes.split(",") if args.modes else None
    base = app.base_arm(config, choice, modes, getattr(args, "base_engine", None), getattr(args, "base_env", None),
                        getattr(args, "base_args", None))
    async with open_host(config, choice.host_name) as host:
        request = app.compare_request(config, choice, host, args.commit, args.base, modes, cli_settings(args, config),
                                      args.force_clean, base)
        base_sha, head_sha = await resolve_refs(request)  # bad refs stop here, before anything runs
        set_up = request.set_up_differences()
        if base is not None:
            other = "the commit's arm" if request.head_ref else "the other arm"
            console.print(f"the base arm runs engine {base[0]}, {other} engine {choice.engine_name}; their "
                          "set-ups differ in: " + ("; ".join(set_up) or "nothing (an A/A of one set-up)"),
                          markup=False, highlight=False)
        if base_sha == head_sha and not set_up:
            same = "commit" if request.head_ref else "set-up"
            console.print(f"A/A: both sides are the same {same}, so this measures the noise of the set-up", markup=False)
        db = database(config, args.db)
        goal = getattr(args, "calibration", None)  # specperf calibrate: an A/A run stored as a calibration
        # a calibration or a recheck fixes its launches: no plan from the host's calibration
        extra = {"calibration": goal} if goal else {"recheck_of": recheck_of["recheck_of"]} if recheck_of else None
        calibrated, plans = (None, {}) if extra else calibration_plans(db, choice.engine_name, choice.host_name,
                                                                        choice.workload_name, request.settings)
        for line in plan_request(request, calibrated, plans):
            console.print(line, markup=False, highlight=False)
        recorded: dict[str, int] = {}

        on_slurm = isinstance(host, SlurmHost)

        def started(run_id: int) -> None:
            recorded["run_id"] = run_id
            client = host.client_where
            on_base = f" on engine {base[0]}" if base is not None else ""
            base_ref, head_ref = request.refs()
            console.print(f"run {run_id}: {choice.engine_name}, {head_ref} ({head_sha[:12]}) against "
                          f"{base_ref} ({base_sha[:12]}){on_base}, modes {', '.join(request.modes)}, "
                          f"host {choice.host_name} ({host.where}; "
                          f"the benchmark client runs {client})", markup=False, highlight=False)

        if on_slurm:  # one Slurm job runs the whole compare on a node; its report is the stored run's
            run_id = await app.compare_on_slurm(config, db, request, (base_sha, head_sha),
                                                cli_session(args, console, f"compare {head_sha[:12]}"),
                                                ConsoleProgress(console, request.settings), on_run=started,
                                                extra=extra)
            stored = storage.load_run(db, run_id)
            assert stored is not None  # recorded by app.compare_on_slurm
            return _print_stored(console, args, stored, db)
        try:
            run_id, result = await app.compare(config, db, request, (base_sha, head_sha),
                                               cli_session(args, console, f"compare {head_sha[:12]}"),
                                               ConsoleProgress(console, request.settings), on_run=started,
                                               extra=extra)
        except SQLAlchemyError as exc:  # the engine is stopped by now (core's launch context)
            raise await storage_failed(db, recorded.get("run_id"), exc) from None
    title = f"run {run_id}: {choice.engine_name} {head_sha[:12]} vs {base_sha[:12]}"
    if result.status == "refused":
        console.print(Text("REFUSED", style="bold red") + Text(f": {result.reason}"))
        return EXIT_HOST
    if result.status == "failed":
        console.print(Text("FAILED", style="bold red") + Text(f": {result.reason}"))
        if result.log_tail:
            console.print(result.log_tail, markup=False, highlight=False)
        return failure(result.error, EXIT_ENGINE)[1]  # no error kept: the default, an engine failure
    trials = figures(result, request.settings.pairing)
    report = summarize(trials, result.verdicts, request.settings, {"arms_differ": result.arm_env_diff},
                       result.launches(), result.disturbed, plans, result.profiles, result.cost())
    report["client"] = "local" if host.is_local else host.client_where  # as the run's settings["client"]
    add_history(db, storage.load_run(db, run_id), report)
    _emit(console, args, run_id, report, trials, title)
    if goal:
        for line in app.calibration_lines(trials, goal, request.settings.alpha, result.cost(), config.compare.max_trials):
            console.print(line, markup=False, highlight=False)
        console.print(f"stored as the calibration of {choice.engine_name} on host {choice.host_name} with workload "
                      f"{choice.workload_name}: "
                      "compare plans the windows of its later launches and words INCONCLUSIVE with it",
                      markup=False, highlight=False)
    return 0


async def storage_failed(db, run_id: int | None, exc: SQLAlchemyError,
                         retry_s: float = 30.0) -> storage.StorageError:
    """The one-line error for a database failure during run ``run_id``, after marking the run
    failed (retried for up to ``retry_s`` seconds while the database stays unavailable; if it
    never answers, the run is left for the next specperf to close, which the message says)."""
    if run_id is None:  # nothing was recorded yet, nothing launched
        return storage.StorageError(f"the database failed before the run was recorded ({storage.short_error(exc)}); "
                                    "nothing was launched")
    reason = f"the database failed during the run ({storage.short_error(exc)})"
    deadline = time.monotonic() + retry_s
    while True:
        try:
            await asyncio.to_thread(storage.mark_abandoned, db, run_id, reason, "failed")
            return storage.StorageError(f"{reason}; its engines were stopped and run {run_id} is marked failed")
        except SQLAlchemyError:
            if time.monotonic() > deadline:
                return storage.StorageError(f"{reason}; its engines were stopped; run {run_id} could not be marked "
                                            "and will be closed by the next specperf that opens the database")
            await asyncio.sleep(1.0)


async def run_calibrate(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf calibrate``: an A/A compare of one commit with ``--launches`` per arm,
    stored as the host's calibration (core._experiments.calibrate); 0, or 3 for a FAILED run."""
    args.calibration = app.calibration_goal(args.launches, args.change_pct, args.power, args.windows)
    args.base, args.min_trials, args.max_trials, args.margin_pct = args.commit, args.launches, args.launches, None
    args.profile = "never"  # an A/A measures the noise: nothing to profile
    return await run_compare(args, console)


async def run_recheck(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf recheck RUN``: the stored compare's head against its base again (both
    sides its base with ``--base-only``), on its host, with its workload (as stored), modes,
    margin and launches per arm (fixed: no early stop), then today's launches against that run
    alone (:func:`bot._runs.recheck_report`). Exit statuses as ``compare``'s.

    Raises:
        storage.NoSuchRunError: no such run.
        core.ConfigError: the run is not a finished compare with launches to set against.
    """
    config = load_config(args.config)
    db = database(config, args.db, existing=True)
    stored = storage.load_run(db, args.run_id)
    if stored is None:
        raise storage.NoSuchRunError(args.run_id, db)
    plan = recheck_plan(config, stored, args.run_id, args.base_only)
    run = stored.run
    args.engine, args.workload, args.host, args.modes = run.engine_name, run.workload_name, run.host, ",".join(run.modes)
    args.commit, args.base = plan["head_sha"], plan["base_sha"]
    args.min_trials = args.max_trials = plan["launches"]
    args.margin_pct = plan["margin_pct"]
    args.recheck_of = plan
    return await run_compare(args, console)


async def run_show(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf show RUN``: the stored report (``--recompute``: verdicts recomputed)."""
    _check_outputs(args)
    config = load_config(args.config)
    db = database(config, args.db, existing=True)
    stored = storage.load_run(db, args.run_id)
    if stored is None:
        raise storage.NoSuchRunError(args.run_id, db)
    _print_stored(console, args, stored, db)
    return 0


def _print_stored(console: Console, args: argparse.Namespace, stored: storage.StoredRun, db) -> int:
    """Print a stored run's report (as ``specperf show``), with its history against earlier runs
    in ``db``; the exit status ``specperf compare`` gives such a run: 0 with verdicts (or still
    running), 3 failed or interrupted, 5 refused."""
    run = stored.run
    if run.kind == "bisect":
        console.print(f"run {run.id} ({run.status}): bisect of {run.engine_name} from {run.base_ref} "
                      f"({run.base_sha[:12]}) to {run.head_ref} ({run.head_sha[:12]})", markup=False, highlight=False)
        print_bisect(console, run.settings.get("bisect", {}))
        return 0
    console.print(f"run {run.id} ({run.status}): {run.engine_name} {run.head_ref} ({run.head_sha[:12]}) against "
                  f"{run.base_ref} ({run.base_sha[:12]}), {len(stored.trials)} trials", markup=False, highlight=False)
    status = {"failed": 3, "interrupted": 3, "refused": 5}.get(run.status, 0)  # as compare's exit statuses
    if slurm := run.settings.get("slurm"):
        console.print(slurm_line(slurm), markup=False, highlight=False)
    if run.reason:
        console.print(f"reason: {run.reason}", markup=False, highlight=False)
    if run.log_tail and run.status == "failed":
        console.print(run.log_tail, markup=False, highlight=False)
    if not any(t.status == "ok" for t in stored.trials):
        console.print(f"no trial was measured: nothing to report (the run {run.status})" if run.status != "running"
                      else "no trial measured yet", markup=False, highlight=False)
        return status
    report, trials = stored_report(stored, recompute=getattr(args, "recompute", False))
    if slurm:
        report["slurm"] = slurm
    if run.settings.get("client"):
        report["client"] = run.settings["client"]
    add_history(db, stored, report)
    _emit(console, args, run.id, report, trials,
          f"run {run.id}: {run.engine_name} {run.head_sha[:12]} vs {run.base_sha[:12]}")
    return status


def slurm_line(slurm: dict) -> str:
    """``Slurm job 12 on node1: COMPLETED`` from a run's ``settings["slurm"]``."""
    node = f" on {slurm['node']}" if slurm.get("node") else ""
    reason = f" ({slurm['reason']})" if slurm.get("reason") else ""
    return f"Slurm job {slurm.get('job_id') or '(not submitted)'}{node}: {slurm.get('state', 'unknown')}{reason}"


async def run_history(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf history``: the newest runs with their verdicts."""
    config = load_config(args.config)
    table = Table(title="runs")
    for column in ("run", "when (UTC)", "engine", "commit", "base", "status", "verdicts"):
        table.add_column(column)
    for run, verdicts in storage.list_runs(database(config, args.db, existing=True), args.engine, args.limit):
        table.add_row(str(run.id), f"{run.created_at:%Y-%m-%d %H:%M}", escape(run.engine_name),
                      escape(f"{run.head_ref} {run.head_sha[:10]}"), run.base_sha[:10], run.status,
                      _bisect_outcome(run) if run.kind == "bisect" else
                      ", ".join(f"{v.mode}: {v.verdict} {v.change_pct:+.1f}%" if v.change_pct is not None
                                else f"{v.mode}: {v.verdict}" for v in verdicts))
    console.print(table)
    return 0


def _bisect_outcome(run: storage.Run) -> str:
    record = run.settings.get("bisect", {})
    culprit = f" {record['culprit'][:10]}" if record.get("culprit") else ""
    return f"bisect {', '.join(run.modes)}: {record.get('outcome', 'unfinished')}{culprit}"
