"""The regression summary of stored history, as data, and its trend chart.

:func:`build_summary` reads history series (:class:`core.Series`, one point per measured
commit) and gives, per series (engine, host, mode, workload) that was measured in the period:
the latest output tok/s and acceptance length, the change against the median of the last 7
days and against the last known-good commit, the confirmed change points of output tok/s
(and, where every point has one, of acceptance length: a collapse of speculation shows
there first) with their commit range and a ``specperf bisect`` command, the trailing drift
of output tok/s, and the environment changes
(driver, NCCL, torch, engine libraries) seen along the series. Front ends render it (the
terminal, Slack); :func:`render_trend_chart` draws it. A quiet period (no new change point,
no drift, no new environment change) is one short line: ``summary["headline"]``.
"""

from __future__ import annotations

import datetime as dt
import statistics
from pathlib import Path
from typing import TypedDict

from core._changepoints import SeriesAnalysis, analyze
from core._series import Series

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


def _series_entry(s: Series, analysis: SeriesAnalysis, acceptance: SeriesAnalysis | None, since: dt.datetime,
                  now: dt.datetime) -> dict:
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
        "engine": s.engine, "host": s.host, "mode": s.mode, "workload": s.workload, "ordered_by": s.ordered_by,
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
        "env_changes": env,
        "points": [{"sha": p.sha, "ref": p.refs[-1] if p.refs else None, "output_tok_s": p.output_tok_s,
                    "acceptance_length": p.acceptance_length, "trials_output_tok_s": p.trials_output_tok_s,
                    "run_ids": p.run_ids, "measured_at": p.last_measured_at.isoformat()} for p in points],
    }


class RegressionSummary(TypedDict):
    """The regression summary as it crosses to the front ends (``specperf report``, the
    scheduled Slack summary) and into ``--json``: the period (ISO 8601), whether it was quiet,
    its one-line headline, and one entry per series measured in it (see :func:`build_summary`)."""

    since: str
    now: str
    quiet: bool
    headline: str
    series: list[dict]


def build_summary(series: list[Series], *, since: dt.datetime, now: dt.datetime | None = None,
                  margin_pct: float = 2.0, alpha: float = 0.05) -> RegressionSummary:
    """The summary of ``series`` for the period from ``since`` to ``now``.

    Args:
        series: history series (e.g. ``storage.load_series``), each in commit order; the
            whole stored history is best (change points need points on both sides), the period
            decides what is new and what is shown.
        since: start of the period (timezone-aware UTC).
        now: end of the period (default: the current time); the 7-day median is taken over
            points last measured in the 7 days before it.
        margin_pct, alpha: the compare rule, used to confirm change points and drift.

    Returns:
        A JSON-ready dict::

            {"since", "now", "quiet": bool, "headline": one line,
             "series": [{engine, host, mode, workload, latest {sha, output_tok_s,
                         acceptance_length, ...}, median_7d_output_tok_s, change_vs_7d_median_pct,
                         last_good {sha, output_tok_s}, change_vs_last_good_pct,
                         change_points [{range, good_sha, bad_sha, verdict, new, test {change_pct,
                         ci_low_pct, ci_high_pct, p_value}, bisect, ...}],
                         acceptance_change_points [same shape], drift, env_changes
                         [{sha, lines, new}], points [...]}]}

        Only series with a point measured in the period are listed. ``quiet`` is true when
        no change point (of either series) or environment change is new and no drift is flagged.
    """
    now = now or dt.datetime.now(dt.UTC)
    entries = []
    commits = set()
    for s in series:
        if not s.points or max(p.last_measured_at for p in s.points) < since:
            continue
        commits |= {p.sha for p in s.points if p.last_measured_at >= since}
        values = [p.output_tok_s for p in s.points]
        trials = [p.trials_output_tok_s for p in s.points]
        acceptance = None
        if all(p.acceptance_length is not None and p.trials_acceptance_length for p in s.points):
            acceptance = analyze([p.acceptance_length for p in s.points],
                                 [p.trials_acceptance_length for p in s.points], margin_pct=margin_pct, alpha=alpha)
        entries.append(_series_entry(s, analyze(values, trials, margin_pct=margin_pct, alpha=alpha), acceptance,
                                     since, now))
    new_points = [(e, cp) for e in entries for cp in e["change_points"] if cp["new"]]
    new_acceptance = [(e, cp) for e in entries for cp in e["acceptance_change_points"] if cp["new"]]
    drifts = [e for e in entries if e["drift"] and e["drift"]["flagged"]]
    # one change of a host's software shows in every mode's series: count it once
    new_env = sorted({(e["engine"], e["host"], c["sha"]) for e in entries for c in e["env_changes"] if c["new"]})
    quiet = not (new_points or new_acceptance or drifts or new_env)
    commits = len(commits)
    hours = round((now - since).total_seconds() / 3600)
    days = round(hours / 24)
    period = (f"the last {days} day{'s' if days != 1 else ''}" if hours >= 24
              else f"the last {hours} hour{'s' if hours != 1 else ''}")
    if not entries:
        headline = f"Nothing was measured since {since:%Y-%m-%d %H:%M} UTC."
    elif quiet:
        headline = (f"Quiet: {commits} commit{'s' if commits != 1 else ''} measured in {period} across "
                    f"{len(entries)} series; no change point, no drift, no environment change.")
    else:
        parts = []
        regressions = sum(cp["verdict"] == "REGRESSION" for _, cp in new_points)
        if regressions:
            parts.append(f"{regressions} new regression{'s' if regressions != 1 else ''}")
        improvements = len(new_points) - regressions
        if improvements:
            parts.append(f"{improvements} new improvement{'s' if improvements != 1 else ''}")
        if new_acceptance:
            parts.append(f"{len(new_acceptance)} new acceptance-length change{'s' if len(new_acceptance) != 1 else ''}")
        if drifts:
            parts.append(f"{len(drifts)} trailing drift{'s' if len(drifts) != 1 else ''}")
        if new_env:
            parts.append(f"{len(new_env)} environment change{'s' if len(new_env) != 1 else ''}")
        headline = f"{', '.join(parts)} in {period} ({commits} commits measured, {len(entries)} series)."
    return {"since": since.isoformat(), "now": now.isoformat(), "quiet": quiet, "headline": headline,
            "series": entries}


def render_trend_chart(summary: dict, path: Path, title: str = "specperf trend") -> Path:
    """A PNG of each series' output tok/s per commit (median line, trials as dots), with
    confirmed change points (red dashed line between the two commits, labelled with the
    change), a flagged drift (red band over the newest commits), the last known-good commit
    (green ring), environment changes (orange dotted line, labelled), and where measured the
    acceptance length on a second axis (purple, its change points dash-dotted). One panel per series;
    matplotlib with the Agg backend. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = summary["series"] or []
    rows = max(1, len(entries))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.4 * rows), squeeze=False)
    if not entries:
        axes[0][0].text(0.5, 0.5, summary["headline"], ha="center", va="center")
        axes[0][0].set_axis_off()
    for ax, e in zip((a[0] for a in axes), entries):
        points = e["points"]
        xs = list(range(len(points)))
        for x, p in zip(xs, points):
            ax.scatter([x] * len(p["trials_output_tok_s"]), p["trials_output_tok_s"], s=10, color="#4c72b0", alpha=0.35)
        ax.plot(xs, [p["output_tok_s"] for p in points], color="#4c72b0", marker="o", lw=1.5, label="output tok/s")
        for cp in e["change_points"]:
            color = "#c44e52" if cp["verdict"] == "REGRESSION" else "#55a868"
            ax.axvline(cp["index"] - 0.5, color=color, ls="--", lw=1.5)
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
        if any(p["acceptance_length"] is not None for p in points):
            acc = ax.twinx()
            acc.plot(xs, [p["acceptance_length"] for p in points], color="#8172b3", marker="s", ms=3, lw=1,
                     label="acceptance length")
            acc.set_ylabel("acceptance length", color="#8172b3")
            for cp in e["acceptance_change_points"]:
                acc.axvline(cp["index"] - 0.5, color="#8172b3", ls="-.", lw=1.2)
            acc.legend(fontsize=7, loc="lower right")
        for env in e["env_changes"]:
            ax.axvline(env["index"] - 0.5, color="#dd8452", ls=":", lw=1.5)
            ax.annotate("; ".join(env["lines"][:2]), (env["index"] - 0.5, 0.02), xycoords=("data", "axes fraction"),
                        fontsize=7, color="#dd8452", rotation=90, ha="right", va="bottom")
        ax.set_xticks(xs, [p["ref"] if p["ref"] and len(p["ref"]) <= 10 else p["sha"][:7] for p in points],
                      rotation=45, fontsize=7, ha="right")
        ax.set_ylabel("output tok/s")
        ax.set_title(f"{e['engine']} / {e['mode']} ({e['workload']}, host {e['host']}, {e['ordered_by']} order)",
                     fontsize=9, pad=22)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
