"""Slack messages of a run: the Block Kit verdict built from a stored run's report
(:func:`core._experiments.report.summarize` via :func:`bot._runs.stored_report`), the failure reply, and the
one-line text fallbacks that notifications and clients without blocks show.

Limits kept: a header's text at most 150 characters, a section's text at most 3000, at most
10 fields per section, at most 50 blocks per message.

Nothing here writes a link or a mention on purpose, and much of what these messages carry was
not written by specperf (a commit's subject, an engine's log, another user's command line, an
environment value, a ref a user typed): every mrkdwn text and every text fallback goes through
:func:`bot._slack.mrkdwn.escape` on its way out (:func:`_text`, :func:`_field`, :func:`_context`,
:func:`_fallback`), so ``<!channel>``, ``<@U...>`` or ``<http://x|y>`` in any of them shows as
typed and neither pings nor disguises a link.
"""

from __future__ import annotations

import storage
from bot._app import WatchResult
from bot._common import disturbed_lines, fmt, profile_lines, speedup_text, watch_verdict, window_rows
from bot._slack.mrkdwn import escape
from core._experiments.categories import category_moves
from core._experiments.report import ci_label
from core._history.check import HistoryCheck

_EMOJI = {"REGRESSION": ":red_circle:", "IMPROVEMENT": ":large_green_circle:", "NO CHANGE": ":white_circle:",
          "INCONCLUSIVE": ":large_yellow_circle:"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _change(v: dict | None) -> str:
    if not v:
        return "-"
    if v["ci_low_pct"] is None:
        return _pct(v["change_pct"])
    return f"{_pct(v['change_pct'])} ({ci_label(v.get('alpha'))} {_pct(v['ci_low_pct'])} .. {_pct(v['ci_high_pct'])})"


def _field(label: str, value: str) -> dict:
    return {"type": "mrkdwn", "text": escape(f"*{label}*\n{value}")[:2000]}


def _text(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": escape(text)[:3000]}}


def _context(*texts: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": escape(text)[:3000]} for text in texts]}


def _header(text: str) -> dict:
    """A header block: plain text, which Slack shows as typed, with ``<`` and ``>`` as ``‹`` and
    ``›`` so no control sequence stands in a posted body at all."""
    return {"type": "header", "text": {"type": "plain_text", "text": text.replace("<", "‹").replace(">", "›")[:150]}}


def _fallback(text: str) -> str:
    """A message's text fallback (notifications, clients without blocks), escaped as its blocks are."""
    return escape(text)


def summary_line(stored: storage.StoredRun, report: dict) -> str:
    """One line: ``run 3 (fake slow 1a2b3c vs 4d5e6f): baseline REGRESSION -9.1%, eagle3 ...``."""
    run = stored.run
    parts = []
    for mode, entry in report["modes"].items():
        v = entry.get("verdict")
        parts.append(f"{mode} {v['verdict']} {_pct(v['change_pct'])}" if v else f"{mode} -")
    return _fallback(f"run {run.id} ({run.engine_name} {run.head_ref} {run.head_sha[:10]} vs {run.base_sha[:10]}): "
                     + ", ".join(parts))


def verdict_blocks(stored: storage.StoredRun, report: dict, calibration: list[str] | None = None,
                   history: list[HistoryCheck] | None = None) -> list[dict]:
    """The verdict message: a header; per mode a table (base and commit tok/s, change with its
    95% interval, verdict, acceptance length, ms per step) and the verdict's reason; per
    speculative mode its speedup over baseline on each side and the change of that speedup;
    a calibration's lines (``calibration``: :func:`bot._app.calibration_lines`, one per mode);
    each arm against the newest earlier run of its commit (``history``:
    :func:`bot._runs.history_checks`, "was the good number real");
    a busy host at the top, a recheck's answer (``report["recheck"]``) above it; the disturbed
    launches; a context line with host, SHAs, launches per arm, where the benchmark client ran
    (unless local) and any environment difference between the arms.
    """
    run = stored.run
    verdicts = [e["verdict"]["verdict"] for e in report["modes"].values() if e.get("verdict")]
    verdicts += ["OUTPUTS CHANGED" for e in report["modes"].values() if e.get("above")]
    verdicts += [c["verdict"]["verdict"] for e in report["modes"].values() if e.get("verdict")
                 for c in ((e["verdict"].get("categories") or {}).get("categories") or {}).values()]
    worst = next((w for w in ("OUTPUTS CHANGED", "REGRESSION", "IMPROVEMENT", "INCONCLUSIVE", "NO CHANGE")
                  if w in verdicts), "-")
    header = f"{worst}: {run.engine_name} {run.head_ref} ({run.head_sha[:10]}) vs {run.base_sha[:10]}"
    blocks: list[dict] = [_header(header)]
    if recheck := report.get("recheck"):
        emoji = {"reproducible": ":white_check_mark:", "differs": ":rotating_light:"}.get(recheck["verdict"], ":grey_question:")
        blocks.append(_text(f"{emoji} *{recheck['lines'][0]}*\n" + "\n".join(recheck["lines"][1:])[:2800]))
    if report.get("headline"):
        blocks.append(_text("\n".join(f":warning: *{line}*" for line in report["headline"].splitlines())[:2900]))
    for mode, entry in report["modes"].items():
        base, head, v = entry["base"], entry["head"], entry.get("verdict")
        verdict = v["verdict"] if v else "-"
        if entry.get("above"):
            blocks.append(_text("\n".join(f":rotating_light: *{line}*" for line in entry["above"])[:2900]))
        moved = category_moves(v.get("categories")) if v else None
        blocks.append(_text(f"{_EMOJI.get(verdict, '')} *{mode}*: *{verdict}*"
                            + (" (speed of different answers)" if entry.get("above") else "")
                            + (f"; {moved}" if moved else "")))
        blocks.append({"type": "section", "fields": [
            _field("base tok/s", fmt(base["output_tok_s"])),
            _field("commit tok/s", fmt(head["output_tok_s"])),
            _field("change", _change(v)),
            _field("verdict", verdict + ("" if not v or v["p_value"] is None else f" (p {v['p_value']:.3g})")),
            _field("acceptance length", f"{fmt(base['acceptance_length'], 2)} -> {fmt(head['acceptance_length'], 2)}"),
            _field("ms / step", f"{fmt(base['step_ms'], 2)} -> {fmt(head['step_ms'], 2)}"),
        ]})
        if v:
            limits = "".join(f"\n{line}" for line in entry.get("limits", []) + profile_lines(entry)
                             + entry.get("notes", []))
            blocks.append(_context(f"{v['n_pairs']} pairs: {v['reason']}{limits}"))
    for mode, sides in report["speedups"].items():
        if parts := speedup_text(sides):
            blocks.append(_text(f"*{mode} speedup over baseline*: {parts}"))
    if calibration:
        blocks.append(_text("*calibration* (A/A: both arms are the same commit)\n" + "\n".join(calibration)
                            + f"\nstored as the calibration of `{run.engine_name}` on host `{run.host}` with workload "
                              f"`{run.workload_name}`: compare plans the windows of its later launches and words "
                              "INCONCLUSIVE with it"))
    if history:
        blocks.append(_text("*against earlier runs*\n" + "\n".join(c.line() for c in history)[:2900]))
    launches = max((e["base"]["trials"] for e in report["modes"].values()), default=0)
    context = (f"host `{run.host}` | engine `{run.engine_name}` | commit `{run.head_sha[:12]}` ({run.head_ref}) | "
               f"base `{run.base_sha[:12]}` ({run.base_ref}) | {launches} launches per arm and mode | run {run.id}")
    if slurm := run.settings.get("slurm"):
        context += f" | Slurm job {slurm.get('job_id')} on node `{slurm.get('node')}`"
    if run.settings.get("client") not in (None, "local"):
        context += f" | benchmark client {run.settings['client']}"
    if cost := report.get("cost"):
        context += f" | {cost['line']}"
    environment = report.get("environment") or {}
    notes = []
    if environment.get("arms_differ"):
        notes.append("environment differs between the arms: " + "; ".join(environment["arms_differ"][:6]))
    disturbed = disturbed_lines(report)
    if disturbed:
        blocks.append(_text("*disturbed launches*\n" + "\n".join(disturbed)[:2900]))
    elif report.get("launches"):
        notes.append("no trial disturbed")
    blocks.append(_context(context, " | ".join(notes)))
    return blocks[:50]


def failure_blocks(run_label: str, reason: str, log_tail: str | None,
                   status: str = "FAILED") -> tuple[list[dict], str]:
    """(blocks, text fallback) for a run that could not measure (``status`` FAILED, or REFUSED
    when the host was busy): the reason and the engine's log tail (its last 2,500 characters)."""
    text = _fallback(f"{run_label} {status}: {reason}")
    blocks = [_header(f"{status}: {run_label}"),
              _text(f"*reason*: {reason}")]
    if log_tail:
        tail = log_tail[-2500:].replace("```", "'''")
        blocks.append(_text(f"*engine log tail*\n```{tail}```"))
    return blocks, text


def bisect_blocks(run_label: str, result: dict) -> tuple[list[dict], str]:
    """(blocks, text fallback) for a finished bisect: its outcome and message, the culprit's
    triage line, one line per step (commit, evidence, what it decided) and the spend (with
    node-hours against a sequential bisect: ``BisectResult.spend``).

    ``result`` is ``core._experiments.bisection.BisectResult.to_dict()``."""
    status = result["status"]
    text = _fallback(f"{run_label} bisect {status.upper()}: {result.get('message', '')}")
    lines = [f"{s['number']}. {s['kind']} `{s['head_sha'][:12]}` (#{s['position']}) vs `{s['base_sha'][:12]}`: "
             f"{s.get('evidence', s['status'])} -> {s.get('outcome', '')}"
             + (f" ({s['where']}, round {s['round']})" if s.get("where") else "") for s in result.get("steps", [])]
    blocks = [_header(f"bisect {status.upper()}: {run_label}"),
              _text(result.get("message") or status)]
    if result.get("triage_line"):
        blocks.append(_text(f"*triage*: {result['triage_line']}"))
    if lines:
        blocks.append(_text("*steps*\n" + "\n".join(lines)[:2900]))
    spend = result.get("spend") or {}
    bound = f" (at most {result['max_compares']} for a clean bisect)" if spend.get("parallel", 1) == 1 else ""
    blocks.append(_context(f"mode {result['mode']}, {len(result['commits'])} commits, {result['compares']} compares"
                           f"{bound}, {result['trials']} engine launches" + (f"\n{spend['line']}" if spend else "")))
    return blocks, text


def watch_blocks(run_label: str, host: str, result: WatchResult) -> tuple[list[dict], str]:
    """(blocks, text fallback) for a finished watch: a header (DISTURBED or QUIET), the window's
    figures (:func:`bot._common.window_rows`, the terminal's table), the verdict line with
    every reason, the busiest other processes (at most 5), a line per GPU, and where the window
    was saved."""
    window, judged = result.window, result.judged
    state = "DISTURBED" if judged.disturbed else "QUIET"
    span = f"{window['window_s']:.1f} s"
    text = _fallback(f"{run_label} watch of host {host} ({span}): {watch_verdict(judged)}")
    rows = "\n".join(f"{name.strip()}: *{value}*" for name, value in window_rows(window, judged))
    blocks: list[dict] = [
        _header(f"{state}: host {host}, {span} watched"),
        _text(f"{':large_yellow_circle:' if judged.disturbed else ':white_circle:'} {watch_verdict(judged)}"),
        _text(f"*window* (with {result.target.label})\n{rows}")]
    procs = [f"pid {p['pid']} ({p.get('user') or '-'}): {p['engine_cpus_cpu_s']:.2f} CPU-s on the engine's CPUs, "
             f"{p['cpu_s']:.2f} CPU-s in all: `{(p.get('command') or '-')[:100]}`" for p in window["foreign_processes"][:5]]
    if procs:
        blocks.append(_text("*busiest other processes*\n" + "\n".join(procs)))
    gpu = window["gpu"]
    gpus = [f"GPU{d['index']}: SM clock min {d['sm_clock_mhz_min']} / median {d['sm_clock_mhz_median']} MHz"
            for d in gpu.get("devices", [])] if gpu.get("available") else [f"GPUs: none read ({gpu.get('reason')})"]
    context = "\n".join(gpus) + (f"\nwindow saved to {result.path}" if result.path else "")
    blocks.append(_context(context))
    return blocks, text
