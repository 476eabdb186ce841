"""The summary's numbers on a constructed history whose answers are known: the 7-day median
over the right points, acceptance length at a change point, what is new in the period, the
chart, the Slack blocks."""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import pytest

from bot._slack.summary_blocks import summary_blocks
from core._history.findings import FailedRun, PeriodRuns, failure_key
from core._history.series import Series, SeriesPoint
from core._history.series import env_changes as _env_changes
from core._history.summary import build_summary, render_trend_chart

NOW = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)


def _snapshot(nccl: str) -> dict:
    return {"gpu": {"available": True, "driver_version": "580.159.04"}, "system": {},
            "software": {"nccl": {"version": nccl}, "packages": {"sglang": {"version": "0.5.1"}}}}


def history(n: int = 24, at: int = 16, drop: float = 0.10, acceptance=(3.2, 2.0), env_at: int = 20) -> Series:
    """One point a day, ending at NOW; from ``at`` on tok/s x (1 - drop) and a lower
    acceptance length; NCCL changes at ``env_at``."""
    rng = np.random.default_rng(5)
    points, previous = [], None
    for i in range(n):
        level = 100.0 * (1 - drop if i >= at else 1.0)
        trials = list(level * np.exp(rng.normal(0, 0.005, 4)))
        when = NOW - dt.timedelta(days=n - 1 - i)
        env = _snapshot("2.28.9" if i >= env_at else "2.27.3")
        accs = list((acceptance[1] if i >= at else acceptance[0]) * np.exp(rng.normal(0, 0.01, 4)))
        points.append(SeriesPoint(
            sha=hashlib.sha1(f"c{i}".encode()).hexdigest(), refs=[f"c{i}"], output_tok_s=float(np.median(trials)),
            acceptance_length=float(np.median(accs)), trials_output_tok_s=trials, trials_acceptance_length=accs,
            run_ids=[i + 1],
            first_measured_at=when, last_measured_at=when, verdicts=[],
            env=env, env_changes=_env_changes(previous, env)))
        previous = env
    return Series("sglang-k2", "h200-a", "eagle3", "decode-bs1", points, "first-parent")


def test_summary_numbers():
    s = history()
    summary = build_summary([s], since=NOW - dt.timedelta(days=7), now=NOW)
    (entry,) = summary.series
    values = [p.output_tok_s for p in s.points]
    assert entry["latest"]["output_tok_s"] == values[-1]
    assert entry["latest"]["acceptance_length"] == s.points[-1].acceptance_length == pytest.approx(2.0, rel=0.03)
    # the last 7 days hold points 16..23 (one a day, the one at exactly NOW - 7 days included)
    assert entry["median_7d_output_tok_s"] == pytest.approx(float(np.median(values[16:])))
    assert entry["last_good"]["sha"] == s.points[15].sha
    assert entry["change_vs_last_good_pct"] == pytest.approx(100 * (values[-1] / values[15] - 1))
    (cp,) = entry["change_points"]
    assert (cp["index"], cp["verdict"], cp["new"]) == (16, "REGRESSION", True)
    assert cp["acceptance_length_before"] == pytest.approx(3.2, rel=0.02)
    assert cp["acceptance_length_after"] == pytest.approx(2.0, rel=0.02)
    # acceptance length collapsed at the same commit: its own change point, same range
    (acc,) = entry["acceptance_change_points"]
    assert (acc["index"], acc["verdict"], acc["range"]) == (16, "REGRESSION", cp["range"])
    assert acc["test"]["change_pct"] == pytest.approx(100 * (2.0 / 3.2 - 1), abs=2.0)
    assert cp["bisect"] == f"specperf bisect {s.points[15].sha[:12]} {s.points[16].sha[:12]} " \
                           "--engine sglang-k2 --mode eagle3"
    assert [(c["index"], c["lines"], c["new"]) for c in entry["env_changes"]] == [(20, ["NCCL 2.27.3 -> 2.28.9"], True)]
    assert summary.headline == ("1 new regression in the history, 1 new acceptance-length change, "
                                "1 environment change in the last 7 days (8 commits measured, 1 series).")
    assert entry["short_series"] is None  # 24 points: the change-point test applies


def test_an_old_change_point_is_not_new_and_a_week_without_one_is_quiet():
    s = history(at=5, env_at=6)  # the step and the NCCL change both long before the period
    summary = build_summary([s], since=NOW - dt.timedelta(days=7), now=NOW)
    (entry,) = summary.series
    assert [cp["new"] for cp in entry["change_points"]] == [False]
    assert summary.quiet
    assert summary.headline == ("Quiet: 8 commits measured in the last 7 days across 1 series; no stored "
                                "regression, failure or bisect, no change point, no drift, no environment change.")
    blocks, text = summary_blocks(summary)
    assert blocks == [{"type": "section", "text": {"type": "mrkdwn", "text": summary.headline}}]
    assert text == summary.headline


def test_series_not_measured_in_the_period_are_left_out_and_the_chart_is_drawn(tmp_path):
    old = history()
    for p in old.points:
        p.last_measured_at -= dt.timedelta(days=60)
    assert build_summary([old], since=NOW - dt.timedelta(days=7), now=NOW).series == []
    summary = build_summary([history()], since=NOW - dt.timedelta(days=7), now=NOW)
    path = render_trend_chart(summary, tmp_path / "trend.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    blocks, text = summary_blocks(summary)
    assert blocks[0]["type"] == "header"
    assert any("NCCL 2.27.3 -&gt; 2.28.9" in e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])
    assert "REGRESSION sglang-k2 / eagle3" in text and "acceptance length REGRESSION sglang-k2 / eagle3" in text
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert len(buttons) == 1  # tok/s and acceptance length moved at the same commits: one bisect


def test_since_takes_periods_and_iso_dates():
    import argparse

    from bot.cli.report import parse_since

    assert parse_since("7d", NOW) == NOW - dt.timedelta(days=7)
    assert parse_since("36h", NOW) == NOW - dt.timedelta(hours=36)
    assert parse_since("2w", NOW) == NOW - dt.timedelta(weeks=2)
    assert parse_since("2026-11-01", NOW) == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with pytest.raises(argparse.ArgumentTypeError, match="not a period"):
        parse_since("last week", NOW)


def _short(n: int, at: int | None, drop: float = 0.10) -> Series:
    """``n`` commits of 4 trials each (launch noise 1%), a step of ``drop`` from ``at``."""
    rng = np.random.default_rng(11)
    points = []
    for i in range(n):
        trials = list(100.0 * (1 - drop if at is not None and i >= at else 1.0) * np.exp(rng.normal(0, 0.01, 4)))
        when = NOW - dt.timedelta(hours=n - i)
        points.append(SeriesPoint(
            sha=hashlib.sha1(f"s{i}".encode()).hexdigest(), refs=[], output_tok_s=float(np.median(trials)),
            acceptance_length=None, trials_output_tok_s=trials, trials_acceptance_length=[], run_ids=[i + 1],
            first_measured_at=when, last_measured_at=when, verdicts=[]))
    return Series("vllm", "local", "baseline", "default", points, "first-parent")


def test_a_short_series_says_so_and_is_tested_on_its_trials():
    s = _short(6, at=3)
    summary = build_summary([s], since=NOW - dt.timedelta(days=1), now=NOW)
    (entry,) = summary.series
    short = entry["short_series"]
    assert short["reason"].startswith("6 points: too few for a change-point test (it needs 8)")
    assert (short["good_sha"], short["latest_sha"]) == (s.points[0].sha, s.points[-1].sha)
    # the first and the newest commit have 4 trials each: nothing pooled
    assert short["good_shas"] == [s.points[0].sha] and short["latest_shas"] == [s.points[-1].sha]
    assert (short["verdict"], short["moved"]) == ("REGRESSION", True)
    assert short["test"]["ci_high_pct"] < -2.0 and -13 < short["test"]["change_pct"] < -7
    assert entry["change_points"] == [] and entry["drift"] is None  # no z-score on six points
    assert not summary.quiet and summary.headline.startswith("1 short series moved in the last 1 day")
    blocks, text = summary_blocks(summary)
    assert "short series vllm / baseline: REGRESSION" in text
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert [b["value"] for b in buttons] == [f"{s.points[0].sha} {s.points[-1].sha} vllm baseline"]

    flat = build_summary([_short(6, at=None)], since=NOW - dt.timedelta(days=1), now=NOW)
    assert flat.quiet and not flat.series[0]["short_series"]["moved"]
    assert flat.headline.endswith("1 series too short for a change-point test (under 8 points); the trial test of "
                                  "the newest commit against the first found no REGRESSION or IMPROVEMENT.")


def _failed(run_id: int, reason: str, hours: int) -> FailedRun:
    return FailedRun(run_id, "compare", "vllm", "local", ["eagle3"], "a" * 40, "b" * 40, "main", reason,
                          NOW - dt.timedelta(hours=hours))


def test_a_failed_line_gives_one_cause_once_with_its_real_numbers():
    truncated = ("request {i} returned 12 of 128 tokens (finish_reason=length): the output was truncated, so its "
                 "tok/s would be wrong; check that the engine holds the length fixed")
    # as older specperf stored it: one sentence per truncated request
    old = "sample invalid: " + "; ".join(truncated.format(i=i) for i in (3, 7))
    runs = PeriodRuns(failed=[_failed(9, old, 2), _failed(8, old.replace("12 of", "11 of"), 3)])
    (group,) = runs.failure_groups()
    assert group.reason.count("returned") == 1 and "request N returned N of N tokens" in group.reason
    line = group.line()
    assert line.startswith("FAILED (2 runs): sample invalid: request 3 returned 12 of 128 tokens (finish_reason=length)")
    assert line.count("returned") == 1 and "(and 1 more like it)" in line
    assert "(run 9; the others differ only in numbers, SHAs or paths)" in line


def test_failed_runs_are_grouped_by_reason_and_a_failure_is_not_quiet():
    runs = PeriodRuns(failed=[
        _failed(3, "engine exited with status 1 before it was ready (pid 4242)\nlog tail ...", 5),
        _failed(4, "worktree for 0123456789abcdef0123456789abcdef01234567 at /data/w/x failed", 4),
        _failed(7, "engine exited with status 1 before it was ready (pid 5151)", 1),
    ])
    assert failure_key(runs.failed[1].reason) == "worktree for <sha> at <path> failed"
    groups = runs.failure_groups()
    assert [(g.reason, [r.run_id for r in g.runs]) for g in groups] == [
        ("engine exited with status N before it was ready (pid N)", [7, 3]),
        ("worktree for <sha> at <path> failed", [4]),
    ]
    assert groups[0].line().startswith("FAILED (2 runs): engine exited with status 1 before it was ready (pid 5151) "
                                       "(run 7; the others differ only in numbers, SHAs or paths): "
                                       f"run 7 (compare vllm eagle3 {'b' * 10})")
    summary = build_summary([], since=NOW - dt.timedelta(days=1), now=NOW, runs=runs)
    assert not summary.quiet
    assert summary.headline == "3 failed runs (2 reasons) in the last 1 day (0 commits measured, 0 series)."
    assert [f["reason"] for f in summary.to_dict()["runs"]["failures"]] == [g.reason for g in groups]
    blocks, _ = summary_blocks(summary)
    assert sum(b["type"] == "section" and b["text"]["text"].startswith(":x: FAILED") for b in blocks) == 2
