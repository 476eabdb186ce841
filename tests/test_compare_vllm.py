"""Compare on the real CPU test engine, launched from worktrees of the planted engine
repository (scripts/make_engine_repo.py): each branch plants one known change. The
broken-draft branch (acceptance collapses) runs through the Slack bot and an SSH host in
tests/test_bot_vllm_ssh.py.

Slow: every launch of vLLM takes about half a minute; a two-mode compare is 16 launches.
"""

from __future__ import annotations

import pytest

import core
import storage
from bot import load_config
from tests.conftest import group_members, local_host

# A two-mode compare is 16 to 32 launches of about 35 s each.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(2700)]


@pytest.fixture
def plan(testenv, monkeypatch, tmp_path, unused_tcp_port):
    monkeypatch.setenv("SPECPERF_TESTENV", str(testenv))
    monkeypatch.chdir(tmp_path)
    config = load_config()
    engine = config.engine("tiny-vllm").model_copy(update={"port": unused_tcp_port})

    def make(head: str, modes: list[str]) -> core.CompareRequest:
        return core.CompareRequest(
            engine_name="tiny-vllm", engine=engine, workload_name="default", workload=config.workload("default"),
            head_ref=head, base_ref=None, modes=modes,
            settings=config.compare.model_copy(update={"cooldown_s": 1}), host=local_host(tmp_path / "work"),
        )

    return make


async def run(request: core.CompareRequest, tmp_path) -> tuple[core.CompareResult, storage.StoredRun]:
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    store = storage.RunStore(db)
    shas = await core.resolve_refs(request)
    run_id = store.create(request, *shas)
    result = await core.compare(request, store, shas=shas)
    stored = storage.load_run(db, run_id)
    assert all(group_members(t.pgid) == [] for t in stored.trials if t.pgid)
    return result, stored


async def test_every_step_slowdown_is_a_regression_in_both_modes(plan, tmp_path):
    result, stored = await run(plan("slow-step", ["baseline", "eagle3"]), tmp_path)
    assert result.status == "done", result.reason
    assert result.imported["head"]["from_worktree"]
    for mode, verdict in result.verdicts.items():
        assert verdict.verdict == core.REGRESSION, (mode, verdict)
        assert verdict.attribution == "step time"


async def test_speculative_only_slowdown(plan, tmp_path):
    request = plan("slow-spec", ["baseline", "eagle3"])
    # The planted step is +1.5 ms on a ~8 ms verify step (about -15% tok/s); a 5% margin lets
    # the baseline's NO CHANGE settle in 4 launch pairs on this noisy 2-vCPU machine (with 3% it
    # often took all 8, about 15 minutes).
    request.settings = request.settings.model_copy(update={"margin_pct": 5.0})
    result, _ = await run(request, tmp_path)
    assert result.status == "done", result.reason
    baseline, eagle3 = result.verdicts["baseline"], result.verdicts["eagle3"]
    assert baseline.verdict == core.NO_CHANGE, baseline
    assert eagle3.verdict == core.REGRESSION, eagle3
    assert abs(eagle3.acceptance_change_pct) < 1.0  # acceptance unchanged...
    assert eagle3.step_ms_change_pct > 5.0  # ...the verify step got slower
    assert eagle3.attribution == "step time"


async def test_commit_that_fails_to_start_is_a_failed_run(plan, tmp_path):
    result, stored = await run(plan("fails-to-start", ["baseline"]), tmp_path)
    assert result.status == "failed"
    assert stored.run.status == "failed"
    # the plugin is checked by import before any launch, or the engine dies at start: either
    # way the reason and the log tail say why
    assert "breaks engine start-up" in (result.log_tail or "") + result.reason
    assert stored.verdicts == []
