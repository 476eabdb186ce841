"""Was the good number real (issue 26): each arm of a compare set against the newest earlier run
that measured the same commit on the same host, engine and workload, through the application
layer on core.testing.FakeHost (in-process exact-rate engines, real git worktrees, real SQLite,
real statistics). The "environment" the code does not contain is the fake host's inter-token
latency, changed between runs; a changed workload makes the runs not comparable."""

from __future__ import annotations

import datetime as dt

import pytest

import core
import storage
from bot import _app
from bot._runs import history_checks
from bot._settings import parse_config
from core.testing import FakeHost, fake_engine_config
from tests.fake_engine_repo import linear_history, make_repo

WORKLOAD = core.WorkloadConfig(output_len=8, concurrency=4, requests=4, warmup_requests=0)
SETTINGS = core.CompareConfig(min_trials=4, max_trials=4, cooldown_s=0, margin_pct=10.0, on_disturbed="keep")


@pytest.fixture
def history(tmp_path):
    shas = make_repo(tmp_path / "repo", linear_history(n=2, slow=0, tag="c", first="c0"))
    db = storage.open_database(f"sqlite:///{tmp_path}/runs.db")

    async def compare(itl_ms: float, workload: core.WorkloadConfig = WORKLOAD) -> list[core.HistoryCheck]:
        request = core.CompareRequest(
            engine_name="fake", engine=fake_engine_config(tmp_path / "repo"), workload_name="w", workload=workload,
            head_ref="c2", base_ref="c1", modes=["baseline"], host=FakeHost(tmp_path / "work", lambda launch: itl_ms),
            settings=SETTINGS)
        run_id, result = await _app.compare(parse_config(""), db, request, (shas["c1"], shas["c2"]),
                                            _app.Session("test"))
        assert result.status == "done", result.reason
        return history_checks(db, storage.load_run(db, run_id))

    return compare, shas


async def test_the_same_commits_on_the_same_set_up_are_consistent_with_their_last_run(history):
    compare, shas = history
    assert await compare(10.0) == []  # nothing earlier
    checks = await compare(10.0)
    assert [(c.mode, c.role, c.sha, c.outcome, c.run_id) for c in checks] == [
        ("baseline", "base", shas["c1"], "consistent", 1), ("baseline", "head", shas["c2"], "consistent", 1)]
    assert abs(checks[0].change_pct) < 10.0 and checks[0].ci_low_pct >= -10.0 and checks[0].ci_high_pct <= 10.0
    line = checks[0].line()
    assert line.startswith(f"baseline base {shas['c1'][:10]}: consistent with run 1 of {dt.date.today():%Y-%m-%d}")


async def test_a_slower_host_reads_below_the_stored_run_on_both_arms(history):
    compare, shas = history
    await compare(10.0)
    checks = await compare(20.0)  # every token takes twice as long: about -50% tok/s, the code unchanged
    assert [(c.role, c.outcome) for c in checks] == [("base", "below"), ("head", "below")]
    for check in checks:
        assert -60.0 < check.change_pct < -35.0 and check.ci_high_pct < -10.0, check
        assert check.now_tok_s < 0.7 * check.then_tok_s
        assert "below run 1 of" in check.line() and "beyond both runs' launch-to-launch spread" in check.line()
    assert checks[0].to_dict()["line"] == checks[0].line()


async def test_a_changed_workload_is_not_comparable_and_says_what_differs(history):
    compare, _ = history
    await compare(10.0)
    checks = await compare(10.0, WORKLOAD.model_copy(update={"output_len": 12}))
    assert {c.outcome for c in checks} == {"not comparable"}
    assert checks[0].reason == "workload differs: output_len 8 -> 12"
    assert checks[0].change_pct is None


def test_engine_set_up_differences_are_named_key_by_key():
    then = {"model": "m", "args": ["--tp", "8"], "mode args": [], "env": {"NCCL_P2P_DISABLE": "1"}, "workload": {}}
    now = {**then, "env": {}}
    past = [core.PastLaunches(7, dt.datetime(2026, 11, 26, 9, 0), "a" * 40, [89.0, 90.0, 88.5], then)]
    check = core.check_history("eagle3", "base", "a" * 40, [82.0, 81.5, 82.4], now, past, margin_pct=2.0)
    assert check.outcome == "not comparable"
    assert check.line() == ("eagle3 base aaaaaaaaaa: not comparable with run 7 of 2026-11-26 09:00: "
                            "env differs: NCCL_P2P_DISABLE 1 -> (unset)")
    assert core.check_history("eagle3", "base", "b" * 40, [82.0, 81.5], now, past, margin_pct=2.0) is None
