"""The summary's numbers on a constructed history whose answers are known: the 7-day median
over the right points, acceptance length at a change point, what is new in the period, the
chart, the Slack blocks."""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import pytest

import core
from bot._summary_blocks import summary_blocks

NOW = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)


def _snapshot(nccl: str) -> dict:
    return {"gpu": {"available": True, "driver_version": "580.159.04"}, "system": {},
            "software": {"nccl": {"version": nccl}, "packages": {"sglang": {"version": "0.5.1"}}}}


def history(n: int = 24, at: int = 16, drop: float = 0.10, acceptance=(3.2, 2.0), env_at: int = 20) -> core.Series:
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
        points.append(core.SeriesPoint(
            sha=hashlib.sha1(f"c{i}".encode()).hexdigest(), refs=[f"c{i}"], output_tok_s=float(np.median(trials)),
            acceptance_length=float(np.median(accs)), trials_output_tok_s=trials, trials_acceptance_length=accs,
            run_ids=[i + 1],
            first_measured_at=when, last_measured_at=when, verdicts=[],
            env=env, env_changes=core.env_changes(previous, env)))
        previous = env
    return core.Series("sglang-k2", "h200-a", "eagle3", "decode-bs1", points, "first-parent")


def test_summary_numbers():
    s = history()
    summary = core.build_summary([s], since=NOW - dt.timedelta(days=7), now=NOW)
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
    summary = core.build_summary([s], since=NOW - dt.timedelta(days=7), now=NOW)
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
    assert core.build_summary([old], since=NOW - dt.timedelta(days=7), now=NOW).series == []
    summary = core.build_summary([history()], since=NOW - dt.timedelta(days=7), now=NOW)
    path = core.render_trend_chart(summary, tmp_path / "trend.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    blocks, text = summary_blocks(summary)
    assert blocks[0]["type"] == "header"
    assert any("NCCL 2.27.3 -&gt; 2.28.9" in e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])
    assert "REGRESSION sglang-k2 / eagle3" in text and "acceptance length REGRESSION sglang-k2 / eagle3" in text
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert len(buttons) == 1  # tok/s and acceptance length moved at the same commits: one bisect


def test_since_takes_periods_and_iso_dates():
    import argparse

    from bot._cmd_report import parse_since

    assert parse_since("7d", NOW) == NOW - dt.timedelta(days=7)
    assert parse_since("36h", NOW) == NOW - dt.timedelta(hours=36)
    assert parse_since("2w", NOW) == NOW - dt.timedelta(weeks=2)
    assert parse_since("2026-11-01", NOW) == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with pytest.raises(argparse.ArgumentTypeError, match="not a period"):
        parse_since("last week", NOW)
