"""Was the good number real (issue 26): each arm of a compare set against the newest earlier run
that measured the same commit on the same host, engine and workload, through the application
layer on core.testing.FakeHost (in-process exact-rate engines, real git worktrees, real SQLite,
real statistics). The "environment" the code does not contain is the fake host's inter-token
latency, changed between runs; a changed workload makes the runs not comparable."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import numpy as np
import pytest

import core
import storage
from bot import _app
from bot import load_config as load_bot_config
from bot._runs import add_history, history_checks, stored_report
from bot._settings import parse_config
from bot._slack.client import web_client
from bot._slack.mrkdwn import escape
from bot._slack.notifier import SlackNotifier
from bot._slack.summary_blocks import summary_blocks
from core._experiments.compare import CompareRequest
from core._history.check import HistoryCheck, PastLaunches, check_history, environment_moved
from core._history.summary import build_summary, same_commit_moves
from core.testing import FakeHost, fake_engine_config
from tests.bot_support import write_config
from tests.fake_engine_repo import linear_history, make_repo
from tests.slack_emulator import SlackEmulator

WORKLOAD = core.WorkloadConfig(output_len=8, concurrency=4, requests=4, warmup_requests=0)
SETTINGS = core.CompareConfig(min_trials=4, max_trials=4, cooldown_s=0, margin_pct=10.0, on_disturbed="keep")


@pytest.fixture
def history(tmp_path):
    shas = make_repo(tmp_path / "repo", linear_history(n=2, slow=0, tag="c", first="c0"))
    db = storage.open_database(f"sqlite:///{tmp_path}/runs.db")

    async def compare(itl_ms: float, workload: core.WorkloadConfig = WORKLOAD, runs: list | None = None,
                      args: list[str] | None = None) -> list[HistoryCheck]:
        engine = fake_engine_config(tmp_path / "repo").model_copy(update={"args": args or []})
        request = CompareRequest(
            engine_name="fake", engine=engine, workload_name="w", workload=workload,
            head_ref="c2", base_ref="c1", modes=["baseline"], host=FakeHost(tmp_path / "work", lambda launch: itl_ms * launch.option("--slow-by", 1.0)),
            settings=SETTINGS)
        run_id, result = await _app.compare(parse_config(""), db, request, (shas["c1"], shas["c2"]),
                                            _app.Session("test"))
        assert result.status == "done", result.reason
        if runs is not None:
            runs.append((run_id, result))
        return history_checks(db, storage.load_run(db, run_id))

    compare.db = db
    return compare, shas


# an A/A held to the 10% margin in four 0.3 s launches: the machine to itself (the rest tier's
# load on a shared CPU made it unsettled in the whole suite, 2026-12-04)
@pytest.mark.alone
async def test_the_same_commits_on_the_same_set_up_are_consistent_with_their_last_run(history):
    compare, shas = history
    # 25 ms a token: a launch of 0.2 s, long enough that scheduling jitter stays well inside
    # the 10% margin (at 10 ms it read "unsettled" with other tests beside it)
    assert await compare(25.0) == []  # nothing earlier
    checks = await compare(25.0)
    assert [(c.mode, c.role, c.sha, c.outcome, c.run_id) for c in checks] == [
        ("baseline", "base", shas["c1"], "consistent", 1), ("baseline", "head", shas["c2"], "consistent", 1)]
    assert abs(checks[0].change_pct) < 10.0 and checks[0].ci_low_pct >= -10.0 and checks[0].ci_high_pct <= 10.0
    line = checks[0].line()
    assert line.startswith(f"baseline base {shas['c1'][:10]}: consistent with run 1 of {dt.date.today():%Y-%m-%d}")


async def test_a_slower_host_reads_below_the_stored_run_on_both_arms(history):
    compare, shas = history
    await compare(25.0)
    checks = await compare(50.0)  # every token takes twice as long: about -50% tok/s, the code unchanged
    assert [(c.role, c.outcome) for c in checks] == [("base", "below"), ("head", "below")]
    for check in checks:
        assert -60.0 < check.change_pct < -35.0 and check.ci_high_pct < -10.0, check
        assert check.now_tok_s < 0.7 * check.then_tok_s
        assert "below run 1 of" in check.line() and "beyond both runs' launch-to-launch spread" in check.line()
        # the fake host answers every probe with the same snapshot: the slowdown is outside what we record
        assert check.changes == ()
        assert check.line().endswith("; the environment facts we record are the same: the cause is outside them")
    assert checks[0].to_dict()["line"] == checks[0].line()


async def test_a_changed_workload_is_not_comparable_and_says_what_differs(history):
    compare, _ = history
    await compare(10.0)
    checks = await compare(10.0, WORKLOAD.model_copy(update={"output_len": 12}))
    assert {c.outcome for c in checks} == {"not comparable"}
    assert checks[0].reason == "workload differs: output_len 8 -> 12"
    assert checks[0].change_pct is None


def test_a_changed_model_is_not_comparable_and_a_changed_engine_variable_is_named_first():
    then = {"model": "m", "args": ["--tp", "8"], "mode args": [], "env": {"NCCL_P2P_DISABLE": "1"}, "workload": {}}
    past = [PastLaunches(7, dt.datetime(2026, 11, 26, 9, 0), "a" * 40, [89.0, 90.0, 88.5, 89.4], then)]
    other_model = check_history("eagle3", "base", "a" * 40, [82.0, 81.5, 82.4], {**then, "model": "m2"}, past,
                                margin_pct=2.0)
    assert other_model.outcome == "not comparable"
    assert other_model.line() == ("eagle3 base aaaaaaaaaa: not comparable with run 7 of 2026-11-26 09:00: "
                                  "model differs: m -> m2")
    # the engine's variables and arguments are what a user changes on a host: compared, and named
    check = check_history("eagle3", "base", "a" * 40, [82.0, 81.5, 82.4, 81.8], {**then, "env": {}}, past,
                          margin_pct=2.0)
    assert check.outcome == "below" and check.changes == ("env NCCL_P2P_DISABLE 1 -> (unset)",)
    assert check.line().endswith("; since then: env NCCL_P2P_DISABLE 1 -> (unset)")
    assert check_history("eagle3", "base", "b" * 40, [82.0, 81.5], then, past, margin_pct=2.0) is None


def test_a_calibration_of_several_windows_a_launch_is_comparable_with_a_compare_of_one():
    """Seen in the demo run beside a calibration (2026-12-07): "not comparable with run 1:
    workload differs: windows 3 -> 1". Windows say how often a launch measured the workload, not
    what it measures; another output length still makes the runs not comparable."""
    from core._history.check import setup_of

    def settings(**workload) -> dict:
        return {"engine": {"model": "m"}, "workload": {"output_len": 64, **workload}}

    assert setup_of(settings(windows=3), "baseline") == setup_of(settings(windows=1), "baseline")
    past = [PastLaunches(1, dt.datetime(2026, 12, 7, 14, 36), "a" * 40, [330.0, 334.0, 329.0],
                         setup_of(settings(windows=3), "baseline"))]
    check = check_history("baseline", "base", "a" * 40, [327.0, 331.0, 328.0], setup_of(settings(), "baseline"),
                          past, margin_pct=3.0)
    assert check.outcome != "not comparable", check.reason
    other = check_history("baseline", "base", "a" * 40, [327.0, 331.0], setup_of(settings(output_len=8), "baseline"),
                          past, margin_pct=3.0)
    assert other.outcome == "not comparable" and other.reason == "workload differs: output_len 64 -> 8"


def test_two_launches_that_agree_by_chance_do_not_make_a_level_known_on_a_host_whose_launches_differ():
    """CI's history of 2026-12-07: one commit in two runs, each run's two launches 0.1% apart,
    the runs' levels 2.9% apart, where that engine's launches within a run usually differ by
    1-4%. Welch's test on the two runs alone reads it as a change; with the launch spread
    pooled over the set-up's other runs it is unsettled, and a drop several times that spread
    still reads as one."""
    setup = {"model": "m", "args": [], "mode args": [], "env": {}, "workload": {}}
    at = dt.datetime(2026, 12, 7, 13, 55)
    then = PastLaunches(3, at, "a" * 40, [970.7, 969.6], setup)
    today = [941.9, 942.0]
    alone = check_history("baseline", "commit", "a" * 40, today, setup, [then], margin_pct=2.0)
    assert alone.outcome == "below"  # what the report said
    others = [PastLaunches(run_id, at, sha * 40, tok, setup) for run_id, sha, tok in (
        (1, "b", [955.1, 915.0]), (2, "b", [940.6, 973.7]), (2, "c", [949.7, 954.2]), (3, "c", [953.4, 964.7]),
        (4, "d", [968.7, 961.8]), (1, "e", [968.9, 968.4]))]
    pooled = check_history("baseline", "commit", "a" * 40, today, setup, [then], margin_pct=2.0,
                           levels=[then, *others])
    assert pooled.outcome == "unsettled", pooled.reason
    assert pooled.ci_low_pct < -4.0 and pooled.ci_high_pct > -2.0
    dropped = check_history("baseline", "commit", "a" * 40, [850.2, 849.8], setup, [then], margin_pct=2.0,
                            levels=[then, *others])
    assert dropped.outcome == "below", dropped.reason
    # a pool of one other run (2 df): its spread, not a doubled df, and taken as the drift too
    small = [PastLaunches(1, at, "b" * 40, [100.0, 101.4, 99.4], setup)]
    tight = PastLaunches(3, at, "a" * 40, [100.0, 100.1], setup)
    check = check_history("baseline", "commit", "a" * 40, [95.0, 95.1], setup, [tight], margin_pct=2.0,
                          levels=[tight, *small])
    assert check.outcome == "unsettled", check.reason
    # two well-measured sides keep their own spread against a pool of one launch pair 2.8% apart
    rng = np.random.default_rng(1)
    measured = PastLaunches(3, at, "a" * 40, list(100.0 * np.exp(rng.normal(0.0, 0.005, 10))), setup)
    check = check_history("baseline", "commit", "a" * 40, list(95.1 * np.exp(rng.normal(0.0, 0.005, 10))), setup,
                          [measured], margin_pct=2.0, levels=[measured, PastLaunches(1, at, "b" * 40, [100.0, 102.8], setup)])
    assert check.outcome == "below" and -6.5 < check.ci_low_pct < check.ci_high_pct < -3.5, check.reason


async def test_both_arms_below_their_past_with_no_change_between_them_is_said_first(history):
    """The seed's story on the fake host: the same two commits, measured again with an engine
    argument that slows every token 2 times (the code unchanged): NO CHANGE between the arms,
    both below their stored run, and the report's first line says the drop is not between these
    commits, naming the argument."""
    compare, shas = history
    await compare(25.0)
    runs: list = []
    checks = await compare(25.0, runs=runs, args=["--slow-by", "2"])
    assert [(c.role, c.outcome) for c in checks] == [("base", "below"), ("head", "below")], checks
    assert checks[0].changes[0] == "args (none) -> --slow-by 2"
    run_id, result = runs[0]
    verdict = result.verdicts["baseline"].verdict  # the two commits are alike: no change between the arms,
    assert verdict in ("NO CHANGE", "INCONCLUSIVE")  # or unsettled on a loaded machine, never a change
    stored = storage.load_run(compare.db, run_id)
    report, _ = stored_report(stored)
    add_history(compare.db, stored, report)
    first = report["headline"].splitlines()[0]
    assert re.match(r"baseline: both arms are about -(4[0-9]|5[0-9])\.\d% below their earlier runs \(run 1 of", first), first
    assert (f"while the verdict between them is {verdict}: the drop is not between these commits; "
            "since then: args (none) -> --slow-by 2") in first
    assert [c["line"] for c in report["history"]] == [c.line() for c in checks]


async def test_the_slack_thread_shows_each_arm_against_its_earlier_run(history, tmp_path):
    """The verdict message the bot posts in a compare's thread (the real notifier, into the
    Slack emulator) carries the same history lines as the terminal and JSON."""
    compare, shas = history
    await compare(10.0)
    runs: list = []
    checks = await compare(10.0, runs=runs)
    run_id, result = runs[0]
    emulator = SlackEmulator()
    await emulator.start()
    try:
        config = load_bot_config(write_config(tmp_path, tmp_path / "repo", 9, emulator.api_url))
        job = storage.enqueue(compare.db, storage.Job(host="local", engine_name="fake", workload_name="w",
                                                      user_id="U1", channel_id="C_RUNS", args={}))
        job = storage.update_job(compare.db, job.id, run_id=run_id, status="done",
                                 slack={"channel": "C_RUNS", "thread_ts": "1699999999.000042"})
        await SlackNotifier(web_client(config.slack), config.slack, compare.db).job_finished(job, run_id, result, None)
    finally:
        await emulator.close()
    verdict = next(p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks"))
    assert verdict.body["thread_ts"] == "1699999999.000042"
    texts = [b["text"]["text"] for b in verdict.body["blocks"] if b["type"] == "section" and "text" in b]
    section = next(t for t in texts if t.startswith("*against earlier runs*"))
    assert section.splitlines()[1:] == [escape(c.line()) for c in checks]  # as Slack shows it: -> is -&gt;
    assert len(checks) == 2 and f"baseline base {shas['c1'][:10]}: " in section and "run 1 of" in section


def _snapshot(driver: str, vllm: str, governor: str) -> dict:
    return {"schema": 1, "kind": "full", "gpu": {"available": True, "driver_version": driver, "devices": []},
            "software": {"packages": {"vllm": {"version": vllm}}}, "system": {"cpu_governor": governor}}


def test_a_drop_beyond_the_spread_names_what_changed_since_then_driver_first():
    then = {"model": "m", "args": [], "mode args": [], "env": {}, "workload": {}}
    past = [PastLaunches(3, dt.datetime(2026, 11, 26, 9, 0), "a" * 40, [89.0, 89.5, 88.8, 89.2], then,
                         _snapshot("550.54.15", "0.32.0", "performance"))]
    today = [82.0, 81.7, 82.3, 81.9]
    check = check_history("baseline", "base", "a" * 40, today, then, past, margin_pct=2.0,
                          today_snapshot=_snapshot("560.35.03", "0.32.1", "powersave"))
    assert check.outcome == "below"
    assert check.changes[:2] == ("driver 550.54.15 -> 560.35.03", "vllm 0.32.0 -> 0.32.1"), check.changes
    assert any("powersave" in c for c in check.changes[2:])
    assert check.line().split("; since then: ")[1].startswith("driver 550.54.15 -> 560.35.03; vllm")
    assert check.to_dict()["changes"] == list(check.changes)
    same = check_history("baseline", "base", "a" * 40, today, then, past, margin_pct=2.0,
                         today_snapshot=_snapshot("550.54.15", "0.32.0", "performance"))
    assert same.changes == () and "the cause is outside them" in same.line()
    unknown = check_history("baseline", "base", "a" * 40, today, then, past, margin_pct=2.0)
    assert unknown.changes is None and unknown.line().endswith("no stored environment snapshot of both runs to say "
                                                               "what changed")


async def test_the_summary_and_report_say_a_commit_measured_lower_with_no_code_change(history):
    """The same two commits stored twice, the second time on a host whose every token takes
    twice as long: the history series (storage.load_series) holds each commit's runs apart,
    and the summary names both commits as measured lower with no code change, in its headline
    and its series, with the recorded environment said to be the same."""
    compare, shas = history
    await compare(25.0)
    before = dt.datetime.now(dt.UTC)
    await compare(50.0)
    series = storage.load_series(compare.db)
    summary = build_summary(series, since=before, margin_pct=10.0)
    (entry,) = summary.series
    moves = entry["same_commit_moves"]
    assert [(m["sha"], m["earlier_run"], m["later_run"], m["outcome"], m["new"]) for m in moves] == [
        (shas["c1"], 1, 2, "below", True), (shas["c2"], 1, 2, "below", True)], moves
    assert all(-60.0 < m["change_pct"] < -35.0 and m["changes"] == [] for m in moves)
    assert moves[0]["line"].startswith(f"{shas['c1'][:12]} measured -")
    assert "lower in run 2" in moves[0]["line"] and "the same commit, so not a code change" in moves[0]["line"]
    assert "2 commits measured otherwise with no code change" in summary.headline and not summary.quiet
    blocks, text = summary_blocks(summary)
    assert f"same commit fake / baseline: {moves[0]['line']}" in text
    assert sum("same commit, other figure" in b.get("text", {}).get("text", "") for b in blocks) == 2
    # one run of each commit: nothing to set against
    assert same_commit_moves(series[0].__class__(**{**vars(series[0]), "points": [
        dataclasses.replace(p, runs=p.runs[:1]) for p in series[0].points]}), before, 10.0, 0.05) == []


def test_the_seeds_story_89_and_94_then_82_and_60_is_not_between_these_commits():
    """The story specperf exists for, as stored history: last week base 89 tok/s (baseline)
    and 94 (EAGLE-3), today 82 and 60 on both sides of a compare that finds no change between
    the arms, with the driver and an NCCL variable changed on the host. The report's first
    lines say the drop is not between these commits, and name the driver first."""
    setup = {"model": "m", "args": [], "mode args": [], "env": {}, "workload": {}}
    week_ago = dt.datetime(2026, 11, 26, 9, 0)
    then_env = _snapshot("550.54.15", "0.32.0", "performance")
    now_env = {**_snapshot("560.35.03", "0.32.0", "performance"), "software": {
        "packages": {"vllm": {"version": "0.32.0"}}, "env": {"NCCL_P2P_DISABLE": "1"}}}
    stored = {"baseline": [89.2, 88.7, 89.4, 88.9], "eagle3": [94.3, 93.8, 94.6, 94.0]}
    today = {"baseline": [82.1, 81.8, 82.4, 81.9], "eagle3": [60.2, 59.7, 60.5, 60.1]}
    # both arms' commits measured by run 12 (a compare of the same two commits a week ago)
    checks = [check_history(mode, role, sha, today[mode], setup,
                            [PastLaunches(12, week_ago, sha, stored[mode], setup, then_env)],
                            margin_pct=2.0, today_snapshot=now_env)
              for mode in ("baseline", "eagle3") for role, sha in (("base", "a" * 40), ("head", "b" * 40))]
    assert [c.outcome for c in checks] == ["below"] * 4
    lines = environment_moved(checks, {"baseline": "NO CHANGE", "eagle3": "NO CHANGE"})
    assert len(lines) == 2
    assert lines[0].startswith("baseline: both arms are about -7.9% below their earlier runs (run 12 of 2026-11-26")
    assert lines[1].startswith("eagle3: both arms are about -36.")
    for line in lines:
        assert "the drop is not between these commits; since then: driver 550.54.15 -> 560.35.03" in line
        assert "NCCL_P2P_DISABLE" in line
    # a compare that did find a change between the arms leads with its verdict, not with this
    assert environment_moved(checks, {"baseline": "REGRESSION", "eagle3": "NO CHANGE"})[0].startswith("eagle3:")
