"""A compare report (core._experiments.report.summarize) and a bisect report
(core._experiments.bisection.BisectResult.to_dict) as rich tables for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bot._common import disturbed_lines, fmt, profile_lines, speedup_text
from core._experiments.categories import category_moves
from core._experiments.report import ci_label

_STYLE = {"REGRESSION": "bold red", "IMPROVEMENT": "bold green", "NO CHANGE": "green", "INCONCLUSIVE": "yellow"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def print_report(console: Console, report: dict, title: str) -> None:
    """A busy host first, then both modes side by side, what limited each verdict, the
    disturbed launches, then EAGLE-3's speedup over baseline on each side, where the
    benchmark client ran (``report["client"]``, unless local), what the verdicts cost on the
    host (``report["cost"]``), and each arm against the
    earlier runs of its commit (``report["history"]``, :func:`bot._runs.history_checks`)."""
    if report.get("headline"):
        console.print(Text(report["headline"], style="bold yellow"))
    for mode, entry in report["modes"].items():
        for line in entry.get("above", []):
            console.print(Text(line, style="bold red"))
        if moved := category_moves((entry.get("verdict") or {}).get("categories")):
            console.print(Text(f"{mode}: {moved}", style="bold"))
    table = Table(title=title)
    for column in ("mode", "base tok/s", "commit tok/s", "change (95% CI)", "p", "verdict",
                   "acceptance length", "ms / step"):
        table.add_column(column, justify="left" if column in ("mode", "verdict") else "right")
    for mode, entry in report["modes"].items():
        base, head, v = entry["base"], entry["head"], entry.get("verdict")
        if v and v["ci_low_pct"] is not None:
            level = "" if ci_label(v.get("alpha")) == "95% CI" else f", {ci_label(v.get('alpha'))}"
            change = f"{_pct(v['change_pct'])} ({_pct(v['ci_low_pct'])} .. {_pct(v['ci_high_pct'])}{level})"
        else:
            change = _pct(v["change_pct"]) if v else "-"
        verdict = (v["verdict"] if v else "-") + (" (outputs changed)" if entry.get("above") else "")
        table.add_row(
            escape(mode), fmt(base["output_tok_s"]), fmt(head["output_tok_s"]), change,
            "-" if not v or v["p_value"] is None else f"{v['p_value']:.3g}",
            Text(verdict, style=_STYLE.get(verdict, "")),
            f"{fmt(base['acceptance_length'], 2)} -> {fmt(head['acceptance_length'], 2)}",
            f"{fmt(base['step_ms'], 2)} -> {fmt(head['step_ms'], 2)}",
        )
    console.print(table)
    for mode, entry in report["modes"].items():
        v = entry.get("verdict")
        if v:
            console.print(f"  {mode}: {v['verdict']} ({v['n_pairs']} pairs): {v['reason']}", markup=False, highlight=False)
            for line in entry.get("limits", []) + profile_lines(entry):
                console.print(f"    {line}", markup=False, highlight=False)
        for line in entry.get("notes", []):
            console.print(f"    {line}", markup=False, highlight=False)
    environment = report.get("environment") or {}
    if environment.get("arms_differ"):
        console.print("  environment differs between the arms: " + "; ".join(environment["arms_differ"][:6]),
                      markup=False, highlight=False)
    for line in disturbed_lines(report):
        console.print(f"  {line}", markup=False, highlight=False)
    for mode, sides in report["speedups"].items():
        if parts := speedup_text(sides):
            console.print(f"  {mode} speedup over baseline: {parts}", markup=False, highlight=False)
    if report.get("client") not in (None, "local"):
        console.print(f"  benchmark client: {report['client']}", markup=False, highlight=False)
    if cost := report.get("cost"):
        console.print(f"  {cost['line']}", markup=False, highlight=False)
    for check in report.get("history") or []:
        console.print(f"  history: {check['line']}", markup=False, highlight=False)


def print_bisect(console: Console, report: dict) -> None:
    """A bisect's steps as a table, then its outcome, the culprit's triage line and the spend.

    ``report`` is ``BisectResult.to_dict()`` (each step may carry ``compare_run_id``), or the
    ``settings["bisect"]`` of a stored bisect run, which holds the same keys.
    """
    commits = report.get("commits") or []
    table = Table(title=f"bisect of {len(commits)} commits, mode {report.get('mode', '-')}")
    where = any(step.get("where") for step in report.get("steps", []))  # a Slurm bisect: round and job
    for column in ("step", "kind", "commit", "#", "against", "evidence", "compare run", "outcome",
                   *(("round", "where") if where else ())):
        table.add_column(column, overflow="fold")
    for step in report.get("steps", []):
        style = _STYLE.get(step.get("verdict") or "", "red" if step.get("status") == "failed" else "")
        evidence = step.get("evidence") or step.get("verdict") or step["status"]
        table.add_row(str(step["number"]), step["kind"], step["head_sha"][:12], str(step["position"]),
                      step["base_sha"][:12], Text(evidence, style=style),
                      str(step.get("compare_run_id") or "-"), escape(step.get("outcome", "")),
                      *((str(step.get("round", "")), step.get("where") or "-") if where else ()))
    console.print(table)
    status = report.get("status")
    if status is None:
        console.print("unfinished: the bisect stopped before its end", markup=False)
        return
    style = {"found": "bold red", "ambiguous": "bold yellow", "failed": "bold red"}.get(status, "bold")
    console.print(Text(status.upper(), style=style) + Text(f": {report.get('message', '')}"))
    if report.get("triage_line"):
        console.print(f"triage: {report['triage_line']}", markup=False, highlight=False)
    compares = report.get("compares", 0)
    if report.get("spend", {}).get("parallel", 1) > 1:  # more compares than a sequential bisect, fewer rounds
        console.print(f"spent {compares} compares and {report.get('trials')} engine launches", markup=False,
                      highlight=False)
    else:
        console.print(f"spent {compares} compare{'s' if compares != 1 else ''} (a clean bisect of {len(commits)} "
                      f"commits needs at most {report.get('max_compares')}) and {report.get('trials')} engine "
                      "launches", markup=False, highlight=False)
    if report.get("spend"):
        console.print(report["spend"]["line"], markup=False, highlight=False)
