"""``specperf report``: the regression summary of the stored history in the terminal, with its
trend chart (the same summary the scheduled Slack message carries), and with ``--html DIR`` the
history pages (:func:`core._history.static_site.build_history_site`) of every stored run."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import core
import storage
from bot._common import check_output_path, data_dir, database, fmt, json_arg, write_json
from bot._history_pages import commit_orders, writable_dir, write_history_site
from bot._settings import load_config
from core._history.summary import build_summary, render_trend_chart

_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """``7d``, ``36h``, ``2w`` (before ``now``) or an ISO date/time (UTC when no zone given).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    now = now or dt.datetime.now(dt.UTC)
    if match := re.fullmatch(r"(\d+)([hdw])", text.strip()):
        return now - dt.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a period (7d, 36h, 2w) or an ISO date") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to ``sub``."""
    r = sub.add_parser("report", help="regression summary of the stored history: latest tok/s, change points, "
                                      "drift, environment changes, trend chart")
    r.add_argument("--since", type=parse_since, default="7d", help="the period: 7d (default), 36h, 2w or an ISO date")
    r.add_argument("--engine", help="only this engine")
    r.add_argument("--chart", help="where to write the PNG trend chart (default: the data directory)")
    json_arg(r, "the summary")
    r.add_argument("--html", metavar="DIR", help="also write the history pages into DIR (created if missing): a static "
                                                 "site, index.html, a trend page per series, a page per run")
    r.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    r.set_defaults(run=run_report)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def print_summary(console: Console, summary: core.RegressionSummary) -> None:
    """The summary as rich text: the headline; what the period's runs found (compare
    verdicts, bisects, failed runs grouped by reason, each with its run id); per series a row
    (latest tok/s, change against the 7-day median and the last good commit, acceptance
    length); then change points with their bisect command, drift, short series' tests and
    environment changes. A quiet summary is its headline only."""
    style = "green" if summary.quiet else "bold red"
    console.print(Text(summary.headline, style=style))
    if summary.quiet:
        return

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    runs = summary.runs
    for line in [*(c.line() for c in runs.compares), *(b.line() for b in runs.bisects),
                 *(g.line() for g in runs.failure_groups())]:
        say(line)
    if runs:
        say("  details: specperf show RUN")
    if not summary.series:
        return
    table = Table(title=f"since {summary.since:%Y-%m-%d %H:%M} UTC")
    for column in ("engine", "mode", "workload", "host", "latest", "tok/s", "vs 7-day median", "vs last good",
                   "acceptance length", "commits"):
        table.add_column(column, justify="right" if column in ("tok/s", "vs 7-day median", "vs last good",
                                                               "acceptance length", "commits") else "left")
    for e in summary.series:
        latest, good = e["latest"], e["last_good"]
        vs_good = _pct(e["change_vs_last_good_pct"]) + (f" ({good['sha'][:10]})" if good else "")
        table.add_row(escape(e["engine"]), escape(e["mode"]), escape(e["workload"]), escape(e["host"]),
                      escape(latest["ref"] or latest["sha"][:10]) + f" {latest['sha'][:10]}",
                      fmt(latest["output_tok_s"]), _pct(e["change_vs_7d_median_pct"]), vs_good,
                      fmt(latest["acceptance_length"], 2), str(e["n_points"]))
    console.print(table)
    for e in summary.series:
        where = f"{e['engine']} {e['mode']}"
        for cp in e["change_points"]:
            test = cp["test"]
            acc = ""
            if cp["acceptance_length_before"] is not None:
                acc = (f", acceptance length {fmt(cp['acceptance_length_before'], 2)} -> "
                       f"{fmt(cp['acceptance_length_after'], 2)}")
            say(f"{'NEW ' if cp['new'] else ''}{cp['verdict']} {where} at {cp['range']}: "
                f"{fmt(cp['output_tok_s_before'])} -> {fmt(cp['output_tok_s_after'])} tok/s, "
                f"{_pct(test['change_pct'])} (95% CI {_pct(test['ci_low_pct'])} .. {_pct(test['ci_high_pct'])}, "
                f"p = {test['p_value']:.2g}, {test['n_before']} vs {test['n_after']} trials){acc}")
            say(f"  bisect: {cp['bisect']}")
        for cp in e["acceptance_change_points"]:
            test = cp["test"]
            say(f"{'NEW ' if cp['new'] else ''}acceptance length {cp['verdict']} {where} at {cp['range']}: "
                f"{fmt(cp['acceptance_length_before'], 2)} -> {fmt(cp['acceptance_length_after'], 2)}, "
                f"{_pct(test['change_pct'])} (95% CI {_pct(test['ci_low_pct'])} .. {_pct(test['ci_high_pct'])}, "
                f"p = {test['p_value']:.2g})")
            say(f"  bisect: {cp['bisect']}")
        drift = e["drift"]
        if drift and drift["flagged"]:
            test = drift["test"]
            say(f"DRIFT {where}: the newest commit {drift['newest_shas'][-1][:12]} is {_pct(test['change_pct'])} "
                f"against the last good {drift['good_sha'][:12]} (95% CI {_pct(test['ci_low_pct'])} .. "
                f"{_pct(test['ci_high_pct'])}, p = {test['p_value']:.2g})")
            say(f"  bisect: {drift['bisect']}")
        short = e["short_series"]
        if short:
            test = short["test"]
            numbers = (f" {_pct(test['change_pct'])} (95% CI {_pct(test['ci_low_pct'])} .. {_pct(test['ci_high_pct'])}, "
                       f"p = {test['p_value']:.2g}, {test['n_before']} vs {test['n_after']} trials)" if test else "")
            say(f"{'SHORT SERIES ' + short['verdict'] if short['moved'] else 'short series'} {where}: {short['reason']}; "
                f"{short['latest_sha'][:12]} against {short['good_sha'][:12]}: {short['verdict']}{numbers}")
            if short["moved"]:
                say(f"  bisect: {short['bisect']}")
        for env in e["env_changes"]:
            say(f"{'NEW ' if env['new'] else ''}environment change {where} at {env['sha'][:12]}: "
                + "; ".join(env["lines"]))
        for move in e["same_commit_moves"]:
            say(f"{'NEW ' if move['new'] else ''}SAME COMMIT {where}: {move['line']}")


async def run_report(args: argparse.Namespace, console: Console) -> int:
    """Run ``specperf report``: 0 whatever it finds (2, a config error naming the folder, when
    ``--html DIR`` cannot be written)."""
    for option in ("json", "chart"):
        check_output_path(option, getattr(args, option))
    site = writable_dir("--html", args.html) if args.html is not None else None
    config = load_config(args.config)
    db = database(config, args.db, existing=True)
    notes: list[str] = []
    orders = await commit_orders(config, args.engine, notes.append)
    # the history pages also draw a series per category of a prompt set; the summary is the workloads'
    series = storage.load_series(db, engine_name=args.engine, commit_order=orders, by_category=site is not None)
    runs = storage.load_findings(db, since=args.since, engine_name=args.engine)
    summary = build_summary([s for s in series if s.category is None], since=args.since,
                            margin_pct=config.compare.margin_pct,
                                 alpha=config.compare.alpha, runs=runs)
    print_summary(console, summary)
    if not summary.quiet:
        for note in notes:
            console.print(Text(note, style="dim"))
    if args.chart or not summary.quiet:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        chart = Path(args.chart) if args.chart else data_dir() / "charts" / f"report-{stamp}.png"
        render_trend_chart(summary, chart, f"specperf: {summary.headline}")
        if not summary.quiet:
            console.print(f"chart: {chart}", markup=False)
    if args.json:
        write_json(args.json, summary.to_dict(), console, None if summary.quiet else "summary:")
    if site is not None:
        built = write_history_site(db, series, site, engine=args.engine, headline=summary.headline,
                                   margin_pct=config.compare.margin_pct, alpha=config.compare.alpha)
        console.print(f"history pages: {built.pages[0]} ({len(built.pages)} pages, {len(built.written)} written, "
                      f"{len(built.pages) - len(built.written)} unchanged)", markup=False)
    return 0
