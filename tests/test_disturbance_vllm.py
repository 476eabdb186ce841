"""Disturbed trials on the real CPU test engine (pinned to CPU 1 by the default config): a CPU
hog on the engine's CPU during the commit's launches of the first round is seen by the window
monitor, named by pid and command, its pairs are left out and measured again, and the verdict
is the one of an undisturbed run (REGRESSION for the planted ``slow-step``, none on A/A).

The slow-step compare is also the suite's proof that a whole-step slowdown is a REGRESSION of
step time (tests/test_compare_vllm.py leaves it to this file). Two compares of the baseline
mode: slow-step 12 launches when the verdict settles at 4 undisturbed pairs (the first round's
two pairs re-measured), A/A 8 (2 undisturbed pairs after the hogged round): about 12 minutes on
the 2-vCPU machine.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import core
import storage
from bot._app import CompareObservers
from bot._runs import stored_report
from tests.conftest import default_config, group_members, local_host

pytestmark = [pytest.mark.engine, pytest.mark.timeout(2700)]

HOGGED = {2, 3}  # ABBA: launches 2 and 3 of the first round are the commit's
HOG = "import time  # specperf-test-hog\nwhile True: time.time()"


class Hog(core.CompareObserver):
    """Runs a CPU hog on the engine's CPU during the launches in ``HOGGED`` (pid per launch)."""

    def __init__(self, cpu: int) -> None:
        self.cpu, self.hog, self.pids = cpu, None, {}

    def trial_launched(self, arm, seq, process) -> None:
        if seq in HOGGED:
            self.hog = subprocess.Popen(["taskset", "--cpu-list", str(self.cpu), sys.executable, "-c", HOG],
                                        start_new_session=True)
            self.pids[seq] = self.hog.pid

    def trial_finished(self, arm, seq, trial) -> None:
        self._stop()

    def trial_failed(self, arm, seq, error) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.hog is not None:
            self.hog.kill()
            self.hog.wait()
            self.hog = None


async def _compare(testenv, monkeypatch, tmp_path, port, head: str, base: str | None, **settings):
    config = default_config(testenv)
    engine = config.engine("tiny-vllm").model_copy(update={"port": port})
    request = core.CompareRequest(
        engine_name="tiny-vllm", engine=engine, workload_name="default", workload=config.workload("default"),
        head_ref=head, base_ref=base, modes=["baseline"],
        settings=config.compare.model_copy(update={"cooldown_s": 1, **settings}), host=local_host(tmp_path / "work"),
    )
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    store, hog = storage.RunStore(db), Hog(engine.cpus[0])
    shas = await core.resolve_refs(request)
    run_id = store.create(request, *shas)
    result = await core.compare(request, CompareObservers(store, hog), shas=shas)
    return result, hog, storage.load_run(db, run_id)


def _assert_hog_named(result: core.CompareResult, store: Hog, base_launches: int) -> None:
    for seq in HOGGED:
        culprits = result.disturbed[seq].culprits
        hog = [c for c in culprits if c.pid == store.pids[seq]]
        assert hog, (seq, result.disturbed[seq].reasons)
        assert "specperf-test-hog" in hog[0].command and hog[0].cpu_s_per_s > 0.1
    # the commit's launches of round 1 are re-measured: both pairs of that round are left out
    assert result.left_out["baseline"] == [0, 1]
    assert len(result.seqs["baseline"]["base"]) >= base_launches
    quiet = {seq: d.reasons for seq, d in result.disturbed.items() if seq not in HOGGED}
    assert quiet == {}, f"launches without the hog judged disturbed (other load on the engine's CPU?): {quiet}"


async def test_hog_on_the_engine_cpu_is_remeasured_and_the_regression_stands(testenv, monkeypatch, tmp_path,
                                                                            unused_tcp_port):
    result, store, stored = await _compare(testenv, monkeypatch, tmp_path, unused_tcp_port, "slow-step", None)
    assert result.status == "done", result.reason
    _assert_hog_named(result, store, 6)
    # every decode step 15% slower: a regression of step time, both arms imported from their worktrees
    assert result.imported["head"]["from_worktree"] and result.imported["base"]["from_worktree"]
    verdict = result.verdicts["baseline"]
    assert verdict.verdict == core.REGRESSION, result.verdicts
    assert verdict.attribution == "step time"
    assert {v.mode: v.verdict for v in stored.verdicts} == {"baseline": core.REGRESSION}
    assert all(group_members(t.pgid) == [] for t in stored.trials if t.pgid)  # no engine left
    # `specperf show` judges the stored windows again: the same launches, the same culprit
    report, _ = stored_report(stored)
    assert report["headline"].startswith("host busy: 2 of ") and "(2 pairs re-measured)" in report["headline"]
    assert f"pid {store.pids[2]}" in report["headline"] and "launch" in report["headline"]
    rows = {r["seq"]: r for r in report["launches"]}
    assert [s for s, r in rows.items() if r["disturbed"]] == sorted(HOGGED)
    assert [s for s, r in rows.items() if not r["kept"]] == [1, 2, 3, 4]
    assert report["modes"]["baseline"]["base"]["trials"] == len(result.seqs["baseline"]["base"]) - 2


async def test_hog_on_aa_is_remeasured_and_no_regression(testenv, monkeypatch, tmp_path, unused_tcp_port):
    # the hogged round is left out and measured again; 2 undisturbed pairs then end the compare (8
    # launches): too few for NO CHANGE, enough to show that the hog does not make a REGRESSION
    result, store, _ = await _compare(testenv, monkeypatch, tmp_path, unused_tcp_port, "main", "main",
                                      min_trials=2, max_trials=2)
    assert result.status == "done", result.reason
    _assert_hog_named(result, store, 4)
    assert result.verdicts["baseline"].verdict != core.REGRESSION, result.verdicts
