"""The real CPU test engine (vLLM's CPU build serving the generated tiny models).

Slow: each launch of vLLM takes about 30 s to ready. The figures of a trial are checked on the
trials of the session's slow-spec compare (tests/conftest.py), so this file launches vLLM once
itself (the engine killed mid-run). Acceptance is set by construction
(``scripts/make_test_models.py``): the agreeing draft is always accepted (acceptance length
1 + 3 speculative tokens = 4), the unrelated one never (1).
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from core import EngineError, InvalidSampleError, WorkloadConfig
from core._measure.trial import measure
from tests.conftest import default_config, free_port, group_members

pytestmark = pytest.mark.engine


@pytest.fixture
def engine(testenv):
    """The test engine as vLLM runs by default on a CPU: the API server, its engine core
    process and a model worker process under it (the embedded config runs the model in the
    engine core's process, one process start fewer); not pinned, as nothing here is measured
    (scripts/test runs it beside the engine tier, off the engine's CPU)."""
    default = default_config(testenv).engine("tiny-vllm")
    return default.model_copy(update={"port": free_port(), "cpus": None,
                                      "env": {**default.env, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}})


@pytest.mark.parametrize(("mode", "expected_acceptance"), [("eagle3", 4.0), ("baseline", None)])
def test_every_trial_reports_throughput_and_window_acceptance(testenv, slow_spec_compare, mode, expected_acceptance):
    """On the session's slow-spec compare (tests/conftest.py): both arms of each mode. The
    never-accepted draft (acceptance 1) is asserted on in tests/test_bot_vllm_ssh.py."""
    result = slow_spec_compare.result
    workload = default_config(testenv).workload("default")
    trials = result.trials[mode]["base"] + result.trials[mode]["head"]
    assert len(trials) >= 8
    for trial in trials:
        assert trial.sample.valid
        assert trial.sample.output_tokens == workload.requests * workload.output_len
        assert trial.sample.output_tok_s > 0
        # The engine's own count over the window matches the client's: the window is exact.
        assert trial.engine.output_tokens == trial.sample.output_tokens
        if expected_acceptance is None:
            assert trial.engine.acceptance_length is None and trial.engine.acceptance_per_position is None
        else:
            assert trial.engine.drafts > 0
            # slow-spec only delays the proposer: the agreeing draft is still always accepted, at
            # every position (vLLM's per-position counter over the window)
            assert trial.engine.acceptance_length == pytest.approx(expected_acceptance)
            assert trial.engine.acceptance_per_position == pytest.approx((1.0,) * int(expected_acceptance - 1))
        assert group_members(trial.pgid, trial.log_path) == []


async def test_engine_killed_mid_run_is_one_clear_error(engine, tmp_path):
    killed: list[int] = []
    pgids: list[int] = []

    def kill_engine_core(record) -> None:
        if killed:
            return
        leader = next(p for p in psutil.process_iter() if _in_group(p, engine.port))
        pgids.append(os.getpgid(leader.pid))
        for child in leader.children(recursive=True):
            child.send_signal(signal.SIGKILL)
            killed.append(child.pid)

    workload = WorkloadConfig(output_len=64, concurrency=1, requests=40, warmup_requests=1)
    with pytest.raises((EngineError, InvalidSampleError)) as caught:
        await measure("tiny-vllm", engine, "baseline", "w", workload, tmp_path, on_request_done=kill_engine_core)
    assert killed
    message = str(caught.value)
    assert "exited with status" in message or "the engine may have died" in message or "HTTP 5" in message
    assert group_members(pgids[0]) == []


def _in_group(proc: psutil.Process, port: int) -> bool:
    try:
        return f"--port {port}" in " ".join(proc.cmdline()) and "api_server" in " ".join(proc.cmdline())
    except psutil.Error:
        return False
