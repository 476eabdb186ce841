"""The regression summary of a period, as data, and its trend chart.

:func:`build_summary` first takes what the stored runs of the period found
(:class:`core._history.findings.PeriodRuns`: compare runs with a REGRESSION or IMPROVEMENT verdict, bisects with
their culprit or "nothing to bisect", failed runs grouped by reason), then reads the history
series (:class:`core._history.series.Series`, one point per measured commit) and gives, per series (engine,
host, mode, workload) that was measured in the period: the latest output tok/s and
acceptance length, the change against the median of the last 7 days and against the last
known-good commit, the confirmed change points of output tok/s (and, where every point has
one, of acceptance length: a collapse of speculation shows there first) with their commit
range and a ``specperf bisect`` command, the trailing drift of output tok/s, and the
environment changes (driver, NCCL, torch, engine libraries) seen along the series. A series
too short for a change-point test (under ``SHORT_SERIES_POINTS``) says so and gets the
trial-level test of its newest commit against its first instead, by the compare rule.
Front ends render it (the terminal, Slack); :func:`render_trend_chart` draws it. The period
is quiet only when none of this fired; then ``RegressionSummary.headline`` is one short line.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from core._experiments.stats import IMPROVEMENT, REGRESSION
from core._history.changepoints import DRIFT_POINTS, WINDOW, SeriesAnalysis, analyze, trailing_drift
from core._history.check import PastLaunches, check_history
from core._history.findings import PeriodRuns
from core._history.series import Series

MEDIAN_DAYS = 7


def _pct(new: float | None, old: float | None) -> float | None:
    if new is None or not old:
        return None
    return 100.0 * (new / old - 1.0)


def _shift(shift) -> dict | None:
    if shift is None:
        return None
    return {"change_pct": shift.change_pct, "ci_low_pct": shift.ci_low_pct, "ci_high_pct": shift.ci_high_pct,
            "p_value": shift.p_value, "n_before": shift.n_before, "n_after": shift.n_after}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _change_point(s: Series, cp, since: dt.datetime) -> dict:
    points = s.points
    before, after = points[cp.index - 1], points[cp.index]
    left, right = points[cp.before.start:cp.before.stop], points[cp.after.start:cp.after.stop]
    return {
        "index": cp.index, "verdict": cp.verdict, "good_sha": before.sha, "bad_sha": after.sha,
        "good_ref": before.refs[0] if before.refs else None, "bad_ref": after.refs[0] if after.refs else None,
        "range": f"{before.sha[:12]}..{after.sha[:12]}",
        "new": max(points[i].first_measured_at for i in cp.after) >= since,
        "output_tok_s_before": _median([p.output_tok_s for p in left]),
        "output_tok_s_after": _median([p.output_tok_s for p in right]),
        "acceptance_length_before": _median([p.acceptance_length for p in left if p.acceptance_length is not None]),
        "acceptance_length_after": _median([p.acceptance_length for p in right if p.acceptance_length is not None]),
        "z": cp.z if cp.z != float("inf") else None, "test": _shift(cp.shift),
        "runs": sorted({r for p in (before, after) for r in p.run_ids}),
        "verdicts": [v for v in after.verdicts if v["base_sha"] == before.sha],
        "bisect": f"specperf bisect {before.sha[:12]} {after.sha[:12]} --engine {s.engine} --mode {s.mode}",
    }


def same_commit_moves(s: Series, since: dt.datetime, margin_pct: float, alpha: float) -> list[dict]:
    """Commits of series ``s`` whose figure moved with no code change: per point measured by
    two or more runs (with 2 launches or more each), its newest run's trials against the run
    before it by :func:`core._history.check.check_history` (unpaired, the compare's margin),
    kept when below or above, with what changed in the environment between the two runs'
    snapshots. The host's drift between runs that a move must clear is learnt from the series'
    other repeats (:func:`core._history.check.level_spread` over every commit measured in two
    runs, the two runs compared left out, so the move under test does not widen its own
    yardstick): a watch that measures each commit as one compare's head and the next one's base
    repeats every inner commit, and on a 2-vCPU VM beside other load consecutive runs of one
    commit moved 2.9% with launches 0.1% apart within each (CI, 2026-12-07). Each ``{sha,
    earlier_run, later_run, outcome, change_pct, ci_low_pct, ci_high_pct, changes, new, line}``;
    ``new`` when the later run started after ``since``."""
    out = []
    for p in s.points:
        runs = [r for r in p.runs if len(r[2]) >= 2]
        if len(runs) < 2:
            continue
        (then_id, then_at, then_tok, then_env), (now_id, now_at, now_tok, now_env) = runs[-2], runs[-1]
        others = [PastLaunches(run_id, at, q.sha, tok, {}) for q in s.points for run_id, at, tok, _ in q.runs
                  if run_id not in (then_id, now_id)]
        check = check_history(s.mode, "commit", p.sha, now_tok, {},
                              [PastLaunches(then_id, then_at, p.sha, then_tok, {}, then_env)],
                              margin_pct=margin_pct, alpha=alpha, today_snapshot=now_env, levels=others)
        if check is None or check.outcome not in ("below", "above"):
            continue
        line = (f"{p.sha[:12]} measured {check.change_pct:+.1f}% ({check.ci_low_pct:+.1f} .. {check.ci_high_pct:+.1f}) "
                f"{'lower' if check.outcome == 'below' else 'higher'} in run {now_id} ({now_at:%Y-%m-%d %H:%M}) than in "
                f"run {then_id} ({then_at:%Y-%m-%d %H:%M}): the same commit, so not a code change; {check.since_then()}")
        out.append({"sha": p.sha, "earlier_run": then_id, "later_run": now_id, "outcome": check.outcome,
                    "change_pct": check.change_pct, "ci_low_pct": check.ci_low_pct, "ci_high_pct": check.ci_high_pct,
                    "changes": None if check.changes is None else list(check.changes), "new": now_at >= since,
                    "line": line})
    return out


def _series_entry(s: Series, analysis: SeriesAnalysis, acceptance: SeriesAnalysis | None, since: dt.datetime,
                  now: dt.datetime, short_series: dict | None, moves: list[dict]) -> dict:
    points = s.points
    latest = points[-1]
    week = [p.output_tok_s for p in points if p.last_measured_at >= now - dt.timedelta(days=MEDIAN_DAYS)]
    median_7d = _median(week)
    good = points[analysis.last_good_index] if analysis.last_good_index is not None else None
    change_points = [_change_point(s, cp, since) for cp in analysis.change_points]
    acceptance_points = [_change_point(s, cp, since) for cp in acceptance.change_points] if acceptance else []
    drift = None
    if analysis.drift is not None:
        d = analysis.drift
        drift = {"flagged": d.flagged, "good_sha": points[d.good_index].sha,
                 "newest_shas": [points[i].sha for i in d.points], "z": d.z if d.z != float("inf") else None,
                 "test": _shift(d.shift),
                 "bisect": f"specperf bisect {points[d.good_index].sha[:12]} {latest.sha[:12]} "
                           f"--engine {s.engine} --mode {s.mode}"}
    env = [{"index": i, "sha": p.sha, "lines": [c.line for c in p.env_changes],
            "categories": sorted({c.category.label for c in p.env_changes}), "new": p.first_measured_at >= since}
           for i, p in enumerate(points) if p.env_changes]
    return {
        "engine": s.engine, "host": s.host, "mode": s.mode, "workload": s.workload, "category": s.category,
        "ordered_by": s.ordered_by,
        "off_branch": s.off_branch, "n_points": len(points),
        "measured_in_period": sum(p.last_measured_at >= since for p in points),
        "latest": {"sha": latest.sha, "ref": latest.refs[-1] if latest.refs else None,
                   "output_tok_s": latest.output_tok_s, "acceptance_length": latest.acceptance_length,
                   "measured_at": latest.last_measured_at.isoformat(), "trials": len(latest.trials_output_tok_s)},
        "median_7d_output_tok_s": median_7d,
        "change_vs_7d_median_pct": _pct(latest.output_tok_s, median_7d),
        "last_good": None if good is None else {"sha": good.sha, "output_tok_s": good.output_tok_s,
                                                "acceptance_length": good.acceptance_length},
        "change_vs_last_good_pct": _pct(latest.output_tok_s, good.output_tok_s if good else None),
        "change_points": change_points,
        "acceptance_change_points": acceptance_points,
        "unconfirmed_candidates": [points[c.index].sha for c in analysis.candidates if not c.confirmed],
        "drift": drift,
        "short_series": short_series,
        "env_changes": env,
        "same_commit_moves": moves,
        "points": [{"sha": p.sha, "ref": p.refs[-1] if p.refs else None, "output_tok_s": p.output_tok_s,
                    "acceptance_length": p.acceptance_length, "trials_output_tok_s": p.trials_output_tok_s,
                    "run_ids": p.run_ids, "measured_at": p.last_measured_at.isoformat()} for p in points],
    }


SHORT_SERIES_POINTS = 8  # fewer points: no change-point test (bench/SUMMARY_RESULTS.md says why 8)


def _short_series_test(s: Series, margin_pct: float, alpha: float) -> dict:
    """A series too short for a change-point test: the trials of its newest commit against
    those of its first, judged by the compare rule (the whole 95% interval beyond the margin
    and p < alpha). A side with fewer than 4 trials (the fewest with which the rank test can
    reach p < 0.05) is pooled with its neighbours: the first commit with the ones after it,
    the newest with up to two before it, never overlapping."""
    points, n = s.points, len(s.points)
    trials = [p.trials_output_tok_s for p in points]
    end = 1
    while end < n - 1 and sum(len(t) for t in trials[:end]) < 4:
        end += 1
    test = trailing_drift(trials, 0, reference=range(0, end), points=DRIFT_POINTS, window=WINDOW,
                          margin_pct=margin_pct, alpha=alpha) if n > 1 else None
    verdict = test.shift.verdict if test else None
    return {
        "n_points": n, "min_points": SHORT_SERIES_POINTS,
        "reason": (f"{n} point{'s' if n != 1 else ''}: too few for a change-point test (it needs "
                   f"{SHORT_SERIES_POINTS}); the newest commit's trials are tested against the first commit's "
                   f"with the compare margin ({margin_pct:g}%) instead"),
        "good_sha": points[0].sha, "latest_sha": points[-1].sha,
        "good_shas": [points[i].sha for i in test.good] if test else [points[0].sha],
        "latest_shas": [points[i].sha for i in test.points] if test else [points[-1].sha],
        "verdict": verdict or "NOT TESTED",
        "moved": verdict in (REGRESSION, IMPROVEMENT),
        "test": _shift(test.shift) if test else None,
        "explanation": test.shift.reason if test else "fewer than 2 trials on a side",
        "bisect": f"specperf bisect {points[0].sha[:12]} {points[-1].sha[:12]} --engine {s.engine} --mode {s.mode}",
    }


@dataclass(frozen=True)
class RegressionSummary:
    """The regression summary of one period (:func:`build_summary`).

    Attributes:
        since, now: the period (UTC).
        quiet: true only when nothing fired: no stored REGRESSION/IMPROVEMENT verdict, no
            bisect, no failed run, no new change point, no flagged drift, no short series
            that moved, no new environment change.
        headline: one line saying what fired (or that the period was quiet).
        runs: what the stored runs of the period found (:class:`core._history.findings.PeriodRuns`).
        series: per series measured in the period, a JSON-ready dict (see :func:`build_summary`).
    """

    since: dt.datetime
    now: dt.datetime
    quiet: bool
    headline: str
    runs: PeriodRuns
    series: list[dict]

    def to_dict(self) -> dict:
        """JSON-ready: ``since``, ``now`` (ISO), ``quiet``, ``headline``, ``runs``
        (:meth:`core._history.findings.PeriodRuns.to_dict`) and ``series``."""
        return {"since": self.since.isoformat(), "now": self.now.isoformat(), "quiet": self.quiet,
                "headline": self.headline, "runs": self.runs.to_dict(), "series": self.series}


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _headline_parts(runs: PeriodRuns, entries: list[dict]) -> list[str]:
    parts = []
    if n := sum(bool(c.outputs) for c in runs.compares):
        parts.append(_count(n, "compare") + " whose outputs changed")
    for verdict in (REGRESSION, IMPROVEMENT):
        if n := sum(c.verdict == verdict for c in runs.compares):
            parts.append(_count(n, f"{verdict} verdict"))
    if n := sum(not b.nothing_to_bisect for b in runs.bisects):
        parts.append(f"{_count(n, 'bisect')} naming a culprit")
    if n := sum(b.nothing_to_bisect for b in runs.bisects):
        parts.append(f"{_count(n, 'bisect')} with nothing to bisect")
    if runs.failed:
        groups = len(runs.failure_groups())
        parts.append(f"{_count(len(runs.failed), 'failed run')} ({_count(groups, 'reason')})")
    new_points = [cp for e in entries for cp in e["change_points"] if cp["new"]]
    if n := sum(cp["verdict"] == REGRESSION for cp in new_points):
        parts.append(_count(n, "new regression") + " in the history")
    if n := sum(cp["verdict"] != REGRESSION for cp in new_points):
        parts.append(_count(n, "new improvement") + " in the history")
    if n := sum(cp["new"] for e in entries for cp in e["acceptance_change_points"]):
        parts.append(_count(n, "new acceptance-length change"))
    if n := sum(bool(e["drift"] and e["drift"]["flagged"]) for e in entries):
        parts.append(_count(n, "trailing drift"))
    if n := sum(bool(e["short_series"] and e["short_series"]["moved"]) for e in entries):
        parts.append(f"{_count(n, 'short series', 'short series')} moved")
    if n := sum(m["new"] for e in entries for m in e["same_commit_moves"]):
        parts.append(_count(n, "commit") + " measured otherwise with no code change")
    # one change of a host's software shows in every mode's series: count it once
    if n := len({(e["engine"], e["host"], c["sha"]) for e in entries for c in e["env_changes"] if c["new"]}):
        parts.append(_count(n, "environment change"))
    return parts


def build_summary(series: list[Series], *, since: dt.datetime, now: dt.datetime | None = None,
                  margin_pct: float = 2.0, alpha: float = 0.05, runs: PeriodRuns | None = None) -> RegressionSummary:
    """The summary of ``series`` and of the stored ``runs`` for the period from ``since`` to ``now``.

    Args:
        series: history series (e.g. ``storage.load_series``), each in commit order; the
            whole stored history is best (change points need points on both sides), the period
            decides what is new and what is shown.
        since: start of the period (timezone-aware UTC).
        now: end of the period (default: the current time); the 7-day median is taken over
            points last measured in the 7 days before it.
        margin_pct, alpha: the compare rule, used to confirm change points and drift, and to
            test short series.
        runs: what the period's stored runs found (``storage.load_findings``); listed first.

    Returns:
        A :class:`RegressionSummary`. Each of its ``series`` is a dict::

            {engine, host, mode, workload, ordered_by, off_branch, n_points, latest {sha,
             output_tok_s, acceptance_length, ...}, median_7d_output_tok_s, change_vs_7d_median_pct,
             last_good {sha, output_tok_s}, change_vs_last_good_pct,
             change_points [{range, good_sha, bad_sha, verdict, new, test {change_pct,
             ci_low_pct, ci_high_pct, p_value}, bisect, ...}], acceptance_change_points [same
             shape], drift, short_series, env_changes [{sha, lines, new}], points [...]}

        A series of fewer than ``SHORT_SERIES_POINTS`` points gets no change-point test and no
        z-score (its noise estimate would be dominated by a step): ``short_series`` says so
        and holds the trial-level test of its newest commit against its first, by the
        compare rule (``verdict``, ``moved``, ``test``); longer series have ``short_series``
        ``None``. Only series with a point measured in the period are listed.
    """
    now = now or dt.datetime.now(dt.UTC)
    runs = runs or PeriodRuns()
    entries = []
    commits = set()
    for s in series:
        if not s.points or max(p.last_measured_at for p in s.points) < since:
            continue
        commits |= {p.sha for p in s.points if p.last_measured_at >= since}
        if len(s.points) < SHORT_SERIES_POINTS:
            entries.append(_series_entry(s, SeriesAnalysis([], 0, None), None, since, now,
                                         _short_series_test(s, margin_pct, alpha),
                                         same_commit_moves(s, since, margin_pct, alpha)))
            continue
        values = [p.output_tok_s for p in s.points]
        trials = [p.trials_output_tok_s for p in s.points]
        acceptance = None
        if all(p.acceptance_length is not None and p.trials_acceptance_length for p in s.points):
            acceptance = analyze([p.acceptance_length for p in s.points],
                                 [p.trials_acceptance_length for p in s.points], margin_pct=margin_pct, alpha=alpha)
        entries.append(_series_entry(s, analyze(values, trials, margin_pct=margin_pct, alpha=alpha), acceptance,
                                     since, now, None, same_commit_moves(s, since, margin_pct, alpha)))
    commits |= {sha for c in runs.compares for sha in (c.base_sha, c.head_sha)}
    parts = _headline_parts(runs, entries)
    quiet = not parts
    measured = len(commits)
    hours = round((now - since).total_seconds() / 3600)
    days = round(hours / 24)
    period = (f"the last {days} day{'s' if days != 1 else ''}" if hours >= 24
              else f"the last {hours} hour{'s' if hours != 1 else ''}")
    if not entries and not runs:
        headline = f"Nothing was measured since {since:%Y-%m-%d %H:%M} UTC."
    elif quiet:
        short = sum(e["short_series"] is not None for e in entries)
        headline = (f"Quiet: {_count(measured, 'commit')} measured in {period} across "
                    f"{_count(len(entries), 'series', 'series')}; no stored regression, failure or bisect, "
                    f"no change point, no drift, no environment change.")
        if short:
            headline += (f" {_count(short, 'series', 'series')} too short for a change-point test "
                         f"(under {SHORT_SERIES_POINTS} points); the trial test of the newest commit against the first found "
                         "no REGRESSION or IMPROVEMENT.")
    else:
        headline = (f"{', '.join(parts)} in {period} ({_count(measured, 'commit')} measured, "
                    f"{_count(len(entries), 'series', 'series')}).")
    return RegressionSummary(since, now, quiet, headline, runs, entries)


def _stored_marks(summary: RegressionSummary, e: dict) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The stored verdicts of series ``e``'s engine, host, mode and workload: ``(sha, label,
    colour)`` for each whose commit is a point of the series, and the labels of those whose
    commit is not (a side branch)."""
    key = (e["engine"], e["host"], e["mode"], e["workload"])
    on, off = [], []
    shas = {p["sha"] for p in e["points"]}
    found = [(c.head_sha, f"run {c.run_id} {c.verdict} {c.change_pct:+.1f}%" if c.change_pct is not None
              else f"run {c.run_id} {c.verdict}", "#c44e52" if c.verdict == REGRESSION else "#55a868")
             for c in summary.runs.compares if (c.engine, c.host, c.mode, c.workload) == key]
    found += [(b.culprit, f"bisect {b.run_id}: culprit", "#c44e52")
              for b in summary.runs.bisects if (b.engine, b.host, b.mode, b.workload) == key and b.culprit]
    for sha, label, color in found:
        if sha in shas:
            on.append((sha, label, color))
        else:
            off.append(f"{label} at {sha[:10]} (not on the branch)")
    return on, off


MAX_TICK_LABELS = 80  # a longer series labels every k-th commit: more would overlap and cost seconds to lay out


def trial_dots(points: list[dict]) -> tuple[list[int], list[float]]:
    """Every trial of series points ``points`` (a :func:`build_summary` series' ``points``) as
    one scatter's ``(x, y)``: x the point's index, y the trial's output tok/s (one collection:
    a scatter per commit cost seconds per thousand commits)."""
    xs = [x for x, p in enumerate(points) for _ in p["trials_output_tok_s"]]
    return xs, [v for p in points for v in p["trials_output_tok_s"]]


def draw_series_layers(ax, e: dict) -> None:
    """Draw on ``ax`` (x: the point index of series entry ``e``, a :func:`build_summary`
    series dict) what the summary found along the series: confirmed change points (dashed
    line between the two commits, red for REGRESSION, green otherwise, labelled with the
    change and range), the last known-good commit (green ring), a flagged trailing drift (red
    band over the newest commits), a short series' test when it moved (a band from its newest
    commits), environment changes (orange dotted line, labelled at the foot of the axis), the
    acceptance length on a second axis where measured (purple, its change points dash-dotted),
    the commits as x tick labels (ref when short, else the SHA's first 7; every k-th of a series
    longer than :data:`MAX_TICK_LABELS`), the y label and grid.
    A change point's line has the gid ``change-point-<index>``, an environment change's
    ``environment-change-<index>`` (an SVG names its group so). The caller draws the points
    themselves, the title and the legend."""
    points = e["points"]
    xs = list(range(len(points)))
    for cp in e["change_points"]:
        color = "#c44e52" if cp["verdict"] == "REGRESSION" else "#55a868"
        ax.axvline(cp["index"] - 0.5, color=color, ls="--", lw=1.5, gid=f"change-point-{cp['index']}")
        change = cp["test"]["change_pct"] if cp["test"] else None
        ax.annotate(f"{cp['verdict'].lower()} {change:+.1f}%\n{cp['range']}" if change is not None else cp["range"],
                    (cp["index"] - 0.5, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color=color,
                    ha="center", va="bottom")
    if e["last_good"]:
        good = next(i for i, p in enumerate(points) if p["sha"] == e["last_good"]["sha"])
        ax.scatter([good], [points[good]["output_tok_s"]], s=140, facecolors="none", edgecolors="#55a868",
                   lw=2, label="last good", zorder=3)
    drift = e["drift"]
    if drift and drift["flagged"]:
        first = next(i for i, p in enumerate(points) if p["sha"] == drift["newest_shas"][0])
        ax.axvspan(first - 0.5, len(points) - 0.5, color="#c44e52", alpha=0.12, label="trailing drift")
    short = e["short_series"]
    if short and short["moved"]:
        first = next(i for i, p in enumerate(points) if p["sha"] == short["latest_shas"][0])
        ax.axvspan(first - 0.5, len(points) - 0.5, color="#c44e52" if short["verdict"] == REGRESSION else "#55a868",
                   alpha=0.12, label=f"short series: {short['verdict'].lower()} {short['test']['change_pct']:+.1f}%")
    if any(p["acceptance_length"] is not None for p in points):
        acc = ax.twinx()
        acc.plot(xs, [p["acceptance_length"] for p in points], color="#8172b3", marker="s", ms=3, lw=1,
                 label="acceptance length")
        acc.set_ylabel("acceptance length", color="#8172b3")
        for cp in e["acceptance_change_points"]:
            acc.axvline(cp["index"] - 0.5, color="#8172b3", ls="-.", lw=1.2)
        acc.legend(fontsize=7, loc="lower right")
    for env in e["env_changes"]:
        ax.axvline(env["index"] - 0.5, color="#dd8452", ls=":", lw=1.5, gid=f"environment-change-{env['index']}")
        ax.annotate("; ".join(env["lines"][:2]), (env["index"] - 0.5, 0.02), xycoords=("data", "axes fraction"),
                    fontsize=7, color="#dd8452", rotation=90, ha="right", va="bottom")
    labelled = xs[::math.ceil(len(xs) / MAX_TICK_LABELS)] if xs else xs
    ax.set_xticks(labelled, [points[x]["ref"] if points[x]["ref"] and len(points[x]["ref"]) <= 10 else points[x]["sha"][:7]
                             for x in labelled], rotation=45, fontsize=7, ha="right")
    ax.set_ylabel("output tok/s")
    ax.grid(axis="y", alpha=0.3)


def render_trend_chart(summary: RegressionSummary, path: Path, title: str = "specperf trend") -> Path:
    """A PNG of each series' output tok/s per commit (median line, trials as dots), with what
    :func:`draw_series_layers` draws (confirmed change points, a flagged drift, a short
    series' test when it moved, the last known-good commit, environment changes, acceptance
    length on a second axis), and the stored verdicts of the period (a triangle on the head
    commit of each REGRESSION or IMPROVEMENT compare, labelled with its run; a bisect's
    culprit the same; those on a side branch listed in the panel's corner). One panel per
    series; matplotlib with the Agg backend. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = summary.series
    rows = max(1, len(entries))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.4 * rows), squeeze=False)
    if not entries:
        axes[0][0].text(0.5, 0.5, summary.headline, ha="center", va="center", wrap=True)
        axes[0][0].set_axis_off()
    for ax, e in zip((a[0] for a in axes), entries):
        points = e["points"]
        xs = list(range(len(points)))
        ax.scatter(*trial_dots(points), s=10, color="#4c72b0", alpha=0.35)
        ax.plot(xs, [p["output_tok_s"] for p in points], color="#4c72b0", marker="o", lw=1.5, label="output tok/s")
        on, off = _stored_marks(summary, e)
        index = {p["sha"]: i for i, p in enumerate(points)}
        for n, (sha, label, color) in enumerate(on):
            x = index[sha]
            ax.scatter([x], [points[x]["output_tok_s"]], marker="v", s=90, color=color, zorder=4,
                       label="stored verdict" if n == 0 else None)
            ax.annotate(label, (x, points[x]["output_tok_s"]), textcoords="offset points", xytext=(4, 8 + 9 * (n % 3)),
                        fontsize=7, color=color)
        if off:
            ax.text(0.99, 0.97, "\n".join(off[:4]), transform=ax.transAxes, ha="right", va="top", fontsize=7,
                    color="#c44e52")
        draw_series_layers(ax, e)
        ax.set_title(f"{e['engine']} / {e['mode']} ({e['workload']}, host {e['host']}, {e['ordered_by']} order)",
                     fontsize=9, pad=22)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
