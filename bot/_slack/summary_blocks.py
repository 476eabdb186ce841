"""The regression summary (``core._history.summary.build_summary``) as a Slack message: Block Kit blocks and the
plain-text fallback that notifications show. Pure: no Slack client here; the bot posts the
blocks to the configured channel and uploads the trend chart (``core._history.summary.render_trend_chart``).

What the period's runs found comes first, one section per finding (a compare's REGRESSION or
IMPROVEMENT, a bisect's culprit or "nothing to bisect", a group of failed runs), each with a
link to the thread where the bot posted that run (``links``: run id -> permalink, which the
scheduler looks up from the run's job). Each new change point, a flagged drift and a short
series that moved carry a button (``action_id`` ``specperf_bisect``,
``value`` ``"<good sha> <bad sha> <engine> <mode>"``) for the bot to start a bisect with, and
the same command as text to copy. With ``pages_url`` (``[report] html_base_url``, where
``specperf report --html DIR`` is served) the headline links to the history pages' index and
each series to its trend page (:func:`core._history.static_site.series_page`).
"""

from __future__ import annotations

from bot._slack.mrkdwn import escape
from core._history.static_site import INDEX_PAGE, series_page

BISECT_ACTION = "specperf_bisect"
_MAX_BLOCKS = 50  # Slack's limit per message


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bisect_button(label: str, good: str, bad: str, engine: str, mode: str) -> dict:
    return {"type": "button", "text": {"type": "plain_text", "text": label[:75]}, "action_id": BISECT_ACTION,
            "value": f"{good} {bad} {engine} {mode}"}


def _finding_section(emoji: str, line: str, run_id: int, links: dict[int, str]) -> dict:
    link = f" <{links[run_id]}|thread>" if run_id in links else ""
    return {"type": "section", "text": {"type": "mrkdwn", "text": f"{emoji} {escape(line)[:2900]}{link}"}}


def finding_blocks(runs, links: dict[int, str] | None = None) -> tuple[list[dict], list[str]]:
    """One section per finding of ``runs`` (:class:`core._history.findings.PeriodRuns`) and their text lines: each
    compare verdict, each bisect, each group of failed runs (linked to its newest run's
    thread), with its :meth:`line` and a link to the run's thread where ``links`` has one."""
    links = links or {}
    blocks, lines = [], []
    for c in runs.compares:
        emoji = ":rotating_light:" if c.verdict == "REGRESSION" or c.outputs else ":tada:"
        blocks.append(_finding_section(emoji, c.line(), c.run_id, links))
        lines.append(c.line())
    for b in runs.bisects:
        blocks.append(_finding_section(":mag:", b.line(), b.run_id, links))
        lines.append(b.line())
    for g in runs.failure_groups():
        blocks.append(_finding_section(":x:", g.line(), g.runs[0].run_id, links))
        lines.append(g.line())
    return blocks, lines


def _page_url(pages_url: str, name: str) -> str:
    return f"{pages_url.rstrip('/')}/{name}"


def _series_blocks(e: dict, pages_url: str | None) -> tuple[list[dict], list[str]]:
    """One series of the summary (``e``: an entry of ``RegressionSummary.series``): its figures
    line, what moved (:func:`_moves`) with a bisect button per commit range, and its new
    environment changes; ``(blocks, text lines)``."""
    blocks: list[dict] = []
    lines: list[str] = []
    name = escape(f"{e['engine']} / {e['mode']}")
    latest, good = e["latest"], e["last_good"]
    acceptance = f", acceptance length {_num(latest['acceptance_length'], 2)}" \
        if latest["acceptance_length"] is not None else ""
    good_text = f" ({good['sha'][:10]})" if good else ""
    text = (f"*{name}* ({escape(e['workload'])}, host {escape(e['host'])}): latest `{latest['sha'][:10]}` "
            f"*{_num(latest['output_tok_s'])} tok/s*{acceptance}; "
            f"{_pct(e['change_vs_7d_median_pct'])} vs 7-day median, "
            f"{_pct(e['change_vs_last_good_pct'])} vs last good{good_text}")
    trend = _page_url(pages_url, series_page(e["engine"], e["host"], e["mode"], e["workload"])) \
        if pages_url else None
    if trend:
        text += f" <{trend}|trend>"
    blocks += [{"type": "divider"}, {"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    lines.append(f"{e['engine']} / {e['mode']}: {_num(latest['output_tok_s'])} tok/s, "
                 f"{_pct(e['change_vs_7d_median_pct'])} vs 7-day median, "
                 f"{_pct(e['change_vs_last_good_pct'])} vs last good" + (f" ({trend})" if trend else ""))
    moved, moved_lines, buttons = _moves(e)
    blocks += moved
    lines += moved_lines
    if buttons:
        blocks.append({"type": "actions", "elements": buttons[:25]})
    for move in (m for m in e["same_commit_moves"] if m["new"]):
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            f":thermometer: *same commit, other figure* ({escape(e['engine'])} / {escape(e['mode'])}): "
            f"{escape(move['line'])}")[:3000]}})
        lines.append(f"same commit {e['engine']} / {e['mode']}: {move['line']}")
    envs = [c for c in e["env_changes"] if c["new"]]
    if envs:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape(
            "environment: " + " | ".join(f"{c['sha'][:10]}: {'; '.join(c['lines'])}" for c in envs))[:3000]}]})
        lines += [f"environment {e['engine']} at {c['sha'][:10]}: {'; '.join(c['lines'])}" for c in envs]
    return blocks, lines


def _moves(e: dict) -> tuple[list[dict], list[str], list[dict]]:
    """What moved in series ``e``: its new change points of tok/s and of acceptance length, a
    flagged drift, a short series' test; ``(blocks, text lines, bisect buttons)``, one button
    per commit range."""
    blocks: list[dict] = []
    lines: list[str] = []
    buttons = []
    for cp in (c for c in e["change_points"] if c["new"]):
        test = cp["test"]
        acc = ""
        if cp["acceptance_length_before"] is not None:
            acc = (f", acceptance length {_num(cp['acceptance_length_before'], 2)} → "
                   f"{_num(cp['acceptance_length_after'], 2)}")
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            f":rotating_light: *{cp['verdict']}* at `{cp['range']}`: {_num(cp['output_tok_s_before'])} → "
            f"{_num(cp['output_tok_s_after'])} tok/s, {_pct(test['change_pct'])} "
            f"(95% CI {_pct(test['ci_low_pct'])} .. {_pct(test['ci_high_pct'])}, p = {test['p_value']:.2g})"
            f"{acc}\n`{escape(cp['bisect'])}`")}})
        lines.append(f"{cp['verdict']} {e['engine']} / {e['mode']} at {cp['range']} {_pct(test['change_pct'])}")
        buttons.append(_bisect_button(f"Bisect {cp['range']}", cp["good_sha"], cp["bad_sha"], e["engine"],
                                      e["mode"]))
    for cp in (c for c in e["acceptance_change_points"] if c["new"]):
        test = cp["test"]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            f":dart: *acceptance length {cp['verdict']}* at `{cp['range']}`: "
            f"{_num(cp['acceptance_length_before'], 2)} → {_num(cp['acceptance_length_after'], 2)}, "
            f"{_pct(test['change_pct'])} (p = {test['p_value']:.2g})\n`{escape(cp['bisect'])}`")}})
        lines.append(f"acceptance length {cp['verdict']} {e['engine']} / {e['mode']} at {cp['range']} "
                     f"{_pct(test['change_pct'])}")
        if all(b["value"] != f"{cp['good_sha']} {cp['bad_sha']} {e['engine']} {e['mode']}" for b in buttons):
            buttons.append(_bisect_button(f"Bisect {cp['range']}", cp["good_sha"], cp["bad_sha"], e["engine"],
                                          e["mode"]))
    drift = e["drift"]
    if drift and drift["flagged"]:
        test = drift["test"]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            f":chart_with_downwards_trend: *drift*: the newest commit `{drift['newest_shas'][-1][:10]}` is "
            f"{_pct(test['change_pct'])} against the last good `{drift['good_sha'][:10]}` "
            f"(p = {test['p_value']:.2g})\n`{escape(drift['bisect'])}`")}})
        lines.append(f"drift {e['engine']} / {e['mode']} {_pct(test['change_pct'])} against the last good")
        buttons.append(_bisect_button(f"Bisect the drift {drift['good_sha'][:7]}..{drift['newest_shas'][-1][:7]}",
                                      drift["good_sha"], drift["newest_shas"][-1], e["engine"], e["mode"]))
    short = e["short_series"]
    if short:
        test = short["test"]
        numbers = f" {_pct(test['change_pct'])} (p = {test['p_value']:.2g})" if test else ""
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape(
            f"short series: {short['reason']}; `{short['latest_sha'][:10]}` against `{short['good_sha'][:10]}`: "
            f"{short['verdict']}{numbers}")[:3000]}]})
        if short["moved"]:
            lines.append(f"short series {e['engine']} / {e['mode']}: {short['verdict']}{numbers}")
            buttons.append(_bisect_button(f"Bisect {short['good_sha'][:7]}..{short['latest_sha'][:7]}",
                                          short["good_sha"], short["latest_sha"], e["engine"], e["mode"]))
    return blocks, lines, buttons


def summary_blocks(summary, title: str = "specperf regression summary",
                   links: dict[int, str] | None = None, pages_url: str | None = None) -> tuple[list[dict], str]:
    """``(blocks, text)`` for ``chat.postMessage`` from a :class:`core.RegressionSummary`: the headline;
    what the period's runs found (:func:`finding_blocks`, linked to their threads by
    ``links``: run id -> URL); per series (engine, mode) the latest tok/s, change against the
    7-day median and the last good commit, acceptance length; new change points (of tok/s and
    of acceptance length) with their commit range and a bisect button (one per commit
    range); a flagged drift; a short series' test; environment changes. With ``pages_url``
    (the address of the history pages' folder) the headline links to its index and each series
    to its trend page, in the blocks and in ``text``. A quiet summary is one section with its
    one line, and ``text`` is that line."""
    headline = escape(summary.headline)
    if summary.quiet:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": headline}}], summary.headline
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*" + (
            f" <{_page_url(pages_url, INDEX_PAGE)}|history pages>" if pages_url else "")}},
    ]
    lines = [summary.headline + (f" ({_page_url(pages_url, INDEX_PAGE)})" if pages_url else "")]
    found, found_lines = finding_blocks(summary.runs, links)
    if found:
        blocks += [{"type": "divider"}, *found]
        lines += found_lines
    for e in summary.series:
        series_blocks, series_lines = _series_blocks(e, pages_url)
        blocks += series_blocks
        lines += series_lines
    if len(blocks) > _MAX_BLOCKS:
        blocks = blocks[:_MAX_BLOCKS - 1] + [{"type": "context", "elements": [
            {"type": "mrkdwn", "text": "more in `specperf report`"}]}]
    return blocks, "\n".join(lines)
