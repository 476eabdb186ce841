"""History series, change points and ``specperf report`` on runs stored by real compares.

A linear history of nine commits of the fast fake engine (tests/fake_engine_repo.py,
``linear_history``: ``h5`` plants ITL x 1.1, about -9% tok/s, in the middle) is measured
as a watch would: each commit against the one before, 2 launches per arm and mode, into
SQLite. The series built from those runs, in the repo's first-parent order, must put the
change point on ``h5``, and the report must show the stored numbers.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pytest
from sqlmodel import Session, select

import core
import storage
from bot._slack.summary_blocks import BISECT_ACTION, summary_blocks
from core._experiments.compare import CompareRequest, compare, resolve_refs
from core._git import first_parent_order
from core._history.changepoints import analyze as analyze_series
from core._history.summary import build_summary
from tests.conftest import ROOT, SPECPERF, free_port, local_host
from tests.fake_engine_repo import fake_engine, linear_history, make_repo

MODES = ["baseline"]  # one mode is enough for the history; a second doubles its set-up
WORKLOAD = core.WorkloadConfig(output_len=64, concurrency=2, requests=4, warmup_requests=1)
SETTINGS = core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep")
UTC = dt.UTC
pytestmark = pytest.mark.e2e  # the history is eight compares on the fast fake engine



async def _measure_history(repo: Path, tags: list[str], url: str, workdir: Path) -> None:
    db = storage.open_database(url)
    port = free_port()
    for base, head in itertools.pairwise(tags):
        request = CompareRequest(
            engine_name="fake", engine=fake_engine(repo, port, ROOT), workload_name="w", workload=WORKLOAD,
            head_ref=head, base_ref=base, modes=MODES, settings=SETTINGS, host=local_host(workdir))
        store = storage.RunStore(db)
        shas = await resolve_refs(request)
        store.create(request, *shas)
        result = await compare(request, store, shas=shas)
        assert result.status == "done", result.reason


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(repo path, {tag: sha}, database file) after the eight compares h0..h8."""
    tmp = tmp_path_factory.mktemp("history")
    commits = linear_history(n=8, slow=5, tag="h", first="h0")
    shas = make_repo(tmp / "repo", commits)
    db_file = tmp / "history.sqlite"
    asyncio.run(_measure_history(tmp / "repo", [tag for tag, _, _ in commits], f"sqlite:///{db_file}", tmp / "work"))
    return tmp / "repo", shas, db_file


def _copy(db_file: Path, tmp_path: Path) -> Path:
    """A copy of the database to change (SQLite's backup: the WAL's pages come along)."""
    copy = tmp_path / "copy.sqlite"
    with sqlite3.connect(db_file) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    return copy


def _stored_trials(db_file: Path, sha: str, mode: str) -> list[float]:
    """Straight from the tables: every ok trial of any arm with this commit and mode."""
    with Session(storage.open_database(f"sqlite:///{db_file}")) as session:
        rows = session.exec(select(storage.Trial.output_tok_s).join(storage.Arm, storage.Arm.id == storage.Trial.arm_id)
                            .where(storage.Arm.sha == sha, storage.Arm.mode == mode, storage.Trial.status == "ok"))
        return list(rows)


def _config(tmp_path: Path, repo: Path) -> Path:
    config = tmp_path / "specperf.toml"
    config.write_text(f'[engines.fake]\nkind = "command"\nrepo = "{repo}"\ncommand = ["/bin/false"]\nport = 9\n'
                      '[engines.fake.modes]\nbaseline = []\neagle3 = ["--itl-scale", "0.5"]\n'
                      '[compare]\nmargin_pct = 2.0\n')
    return config


def _report(tmp_path: Path, repo: Path, db_file: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([*SPECPERF, "--config", str(_config(tmp_path, repo)), "report", "--db",
                           f"sqlite:///{db_file}", *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


async def test_the_change_point_lands_on_the_planted_commit(history):
    repo, shas, db_file = history
    order = await first_parent_order(local_host(repo.parent / "work"), str(repo))
    assert order == [shas[f"h{i}"] for i in range(9)]
    series = storage.load_series(storage.open_database(f"sqlite:///{db_file}"), commit_order={"fake": order})
    assert [s.mode for s in series] == MODES
    for s in series:
        assert s.ordered_by == "first-parent" and s.off_branch == 0
        assert [p.sha for p in s.points] == order
        # inner commits were measured twice (head of one run, base of the next): 4 trials
        assert [len(p.trials_output_tok_s) for p in s.points] == [2] + [4] * 7 + [2]
        assert [p.run_ids for p in s.points][1] == [1, 2]
        for p in s.points:
            assert sorted(p.trials_output_tok_s) == sorted(_stored_trials(db_file, p.sha, s.mode))
            assert p.output_tok_s == statistics.median(p.trials_output_tok_s)
        result = analyze_series([p.output_tok_s for p in s.points], [p.trials_output_tok_s for p in s.points])
        assert [(c.index, c.verdict) for c in result.change_points] == [(5, "REGRESSION")], result
        assert s.points[5].sha == shas["h5"]
        assert -13.0 < result.change_points[0].shift.change_pct < -5.0  # ITL x 1.1 is -9.1% tok/s
        assert result.last_good_index == 4
        assert result.drift is None
        # the run that compared h5 with h4 alone could not say (2 launches per arm: a change
        # verdict needs 4 pairs); the history around it can
        assert [v["verdict"] for v in s.points[5].verdicts] == ["INCONCLUSIVE"]


def test_series_fall_back_to_run_time_order_and_leave_out_failed_runs(history, tmp_path):
    _, shas, db_file = history
    copy = _copy(db_file, tmp_path)
    with sqlite3.connect(copy) as conn:
        conn.execute("update runs set status = 'failed' where head_ref = 'h8'")
    series = storage.load_series(storage.open_database(f"sqlite:///{copy}"), engine_name="fake")
    assert series[0].ordered_by == "run time"
    assert [p.sha for p in series[0].points] == [shas[f"h{i}"] for i in range(8)]  # h8's run failed
    assert storage.load_series(storage.open_database(f"sqlite:///{copy}"), engine_name="other") == []


def test_report_prints_the_stored_numbers_marks_environment_changes_and_writes_the_chart(history, tmp_path):
    repo, shas, db_file = history
    copy = _copy(db_file, tmp_path)
    # the probe saw vllm 0.32.0 until h6 and 0.32.1 from h7 on (as after an upgrade on the host)
    with sqlite3.connect(copy) as conn:
        rows = conn.execute("select s.id, s.data, s.phase, r.base_ref, r.head_ref from env_snapshots s "
                            "join runs r on r.id = s.run_id where s.phase like 'arm-%'").fetchall()
        for sid, data, phase, base_ref, head_ref in rows:
            snapshot = json.loads(data)
            tag = base_ref if phase == "arm-base" else head_ref
            snapshot["software"]["packages"]["vllm"]["version"] = "0.32.1" if int(tag[1:]) >= 7 else "0.32.0"
            conn.execute("update env_snapshots set data = ? where id = ?", (json.dumps(snapshot), sid))
    out = _report(tmp_path, repo, copy, "--json", str(tmp_path / "summary.json"), "--chart", str(tmp_path / "t.png"))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert not summary["quiet"]
    assert summary["headline"].startswith(f"{len(MODES)} new regression{'s' if len(MODES) > 1 else ''} in the history, "
                                          "1 environment change in the last 7 days")
    good, bad = shas["h4"][:12], shas["h5"][:12]
    for entry in summary["series"]:
        mode = entry["mode"]
        latest = statistics.median(_stored_trials(copy, shas["h8"], mode))
        last_good = statistics.median(_stored_trials(copy, shas["h4"], mode))
        all_points = [statistics.median(_stored_trials(copy, shas[f"h{i}"], mode)) for i in range(9)]
        assert entry["latest"]["output_tok_s"] == pytest.approx(latest)
        assert entry["last_good"]["sha"] == shas["h4"]
        assert entry["change_vs_last_good_pct"] == pytest.approx(100 * (latest / last_good - 1))
        assert entry["median_7d_output_tok_s"] == pytest.approx(statistics.median(all_points))
        (cp,) = entry["change_points"]
        assert (cp["good_sha"], cp["bad_sha"], cp["new"]) == (shas["h4"], shas["h5"], True)
        assert [e["sha"] for e in entry["env_changes"]] == [shas["h7"]]
        # the terminal shows the same numbers
        assert f"{latest:,.1f}" in out.stdout
        assert f"{entry['change_vs_last_good_pct']:+.1f}% ({shas['h4'][:10]})" in out.stdout
        assert f"NEW REGRESSION fake {mode} at {good}..{bad}: " in out.stdout
        assert f"bisect: specperf bisect {good} {bad} --engine fake --mode {mode}" in out.stdout
        assert f"NEW environment change fake {mode} at {shas['h7'][:12]}: vllm 0.32.0 -> 0.32.1" in out.stdout
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert "chart: " in out.stdout

    db = storage.open_database(f"sqlite:///{copy}")
    order = [shas[f"h{i}"] for i in range(9)]
    since = dt.datetime.fromisoformat(summary["since"])
    built = build_summary(storage.load_series(db, commit_order={"fake": order}), since=since,
                               now=dt.datetime.fromisoformat(summary["now"]), runs=storage.load_findings(db, since=since))
    assert built.to_dict() == summary  # what the terminal wrote is what Slack gets
    blocks, text = summary_blocks(built)
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert {b["value"] for b in buttons} == {f"{shas['h4']} {shas['h5']} fake {m}" for m in MODES}
    assert all(b["action_id"] == BISECT_ACTION for b in buttons)
    assert text.splitlines()[0] == summary["headline"]
    assert f"{summary['series'][0]['latest']['output_tok_s']:,.1f} tok/s" in text


def test_a_quiet_history_gives_one_short_line(history, tmp_path):
    repo, _, db_file = history
    copy = _copy(db_file, tmp_path)
    with sqlite3.connect(copy) as conn:  # keep the runs up to h4: no regression among them
        late = "(select id from runs where head_ref in ('h5', 'h6', 'h7', 'h8'))"
        for table in ("env_snapshots", "verdicts", "trials", "arms"):
            conn.execute(f"delete from {table} where run_id in {late}")
        conn.execute("delete from runs where head_ref in ('h5', 'h6', 'h7', 'h8')")
    out = _report(tmp_path, repo, copy, "--json", str(tmp_path / "quiet.json"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Quiet: 5 commits measured in the last 7 days across {len(MODES)} series; no stored regression, failure or "
        f"bisect, no change point, no drift, no environment change. {len(MODES)} series too short for a change-point "
        "test (under 8 points); the trial test of the newest commit against the first found no REGRESSION or "
        "IMPROVEMENT."
    ]
    assert not (tmp_path / "home/charts").exists()  # no chart unless asked for
    summary = json.loads((tmp_path / "quiet.json").read_text())
    (entry,) = summary["series"]
    assert entry["short_series"]["verdict"] in ("NO CHANGE", "INCONCLUSIVE") and not entry["short_series"]["moved"]
    assert entry["change_points"] == [] and entry["drift"] is None

    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    nothing = _report(tmp_path, repo, copy, "--since", later.isoformat())
    assert nothing.stdout.splitlines() == [f"Nothing was measured since {later:%Y-%m-%d %H:%M} UTC."]
