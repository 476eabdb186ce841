"""A compare on a real NVIDIA GPU, window monitor on (issue 19): two commits of an
OpenAI-compatible engine, ``transformers serve`` on the GPU with a random-weight Llama made
here (``scripts/make_test_models.py``'s target), launched by ``kind = "command"`` from a
two-commit repo made here (the commit changes nothing served). A quiet compare marks no launch
disturbed and says nothing of drift; a second one with a foreign bf16 matmul loop (a torch
process in its own session, started as launch 3 starts and killed by pid when it ends) marks
launch 3 alone disturbed, naming the loop's pid as a foreign GPU compute process.

Two launches per arm (4 per compare), one mode, ``on_disturbed = "keep"`` so the launch count
stays 4. Marked ``gpu``; skipped where NVML cannot start (no driver), the one allowed skip, as
in tests/test_env_gpu.py. Needs ``transformers serve``'s extra (fastapi, uvicorn, openai) in
this Python: where it is missing the test fails and says so.

Last run, 2026-12-01 05:50-05:54 UTC, on one NVIDIA H200 (driver 580.159.04, 700 W limit,
16-CPU Firecracker VM, Python 3.12.3, torch 2.11, transformers 5.17), ``python3 -m pytest -m gpu
tests/ -v``: 8 passed in 207 s (this file: 10 s model and repo, 84 s quiet compare, 82 s with the
loop; 8 launches, measured windows 1.3-1.7 s quiet at SM 1980 MHz with no power-cap time, and
2.9 s for the looped launch at SM 1650 MHz, 2.8 s under the SW power cap, the loop's pid seen).
Output: tests/fixtures/nvml/h200_pytest_compare.txt. The run before it failed one assertion of
this test's own (the arms' environment diff names the engine commit, by design), fixed here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import core
from bench.probe_time import LOAD_CODE
from core._env.disturbance import culprit_lines
from core._experiments.compare import CompareRequest, compare
from tests.conftest import ROOT, free_port, local_host, server_repo
from tests.test_env_gpu import _REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or ""),
              pytest.mark.timeout(600)]

LOOPED = 3  # the launch the foreign matmul loop overlaps


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict:
    """The random-weight model and the two-commit engine repo, made once for both compares."""
    import transformers.utils.import_utils as tf_imports

    assert tf_imports.is_serve_available(), "transformers serve needs its extra: pip install 'transformers[serving]'"
    root = tmp_path_factory.mktemp("served")
    spec = importlib.util.spec_from_file_location("make_test_models", ROOT / "scripts/make_test_models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    models.make_target(root / "model")
    repo = server_repo(root / "server-repo", "on the GPU")
    return {"model": str(root / "model"), "repo": str(repo)}


class Recorder(core.CompareObserver):
    """Keeps every progress line; with ``loop_at``, runs a foreign matmul loop on GPU 0 from the
    launch of that trial until it ends (``pids[seq]``: the loop's pid)."""

    def __init__(self, loop_at: int | None = None) -> None:
        self.loop_at, self.loop, self.pids, self.lines = loop_at, None, {}, []

    def progress(self, message: str) -> None:
        self.lines.append(message)

    def trial_launched(self, arm, seq, process) -> None:
        if seq == self.loop_at:
            # its own session: never in the engine's process group; returns once its first product is done
            self.loop = subprocess.Popen([sys.executable, "-c", LOAD_CODE, "600"], stdout=subprocess.PIPE, text=True,
                                         start_new_session=True)
            assert self.loop.stdout.readline().strip() == "ready", "the matmul loop did not start"
            self.pids[seq] = self.loop.pid

    def trial_finished(self, arm, seq, trial) -> None:
        self.stop()

    def trial_failed(self, arm, seq, error) -> None:
        self.stop()

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.kill()
            self.loop.wait()
            self.loop = None


async def _compare(served: dict, workdir: Path, observer: Recorder) -> core.CompareResult:
    engine = core.EngineConfig(
        kind="command", repo=served["repo"], python=sys.executable, model=served["model"], port=free_port(),
        ready_timeout_s=300,
        command=["{python}", "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1", "--port", "{port}",
                 "--device", "cuda", "{model}"])
    request = CompareRequest(
        engine_name="hf-gpu", engine=engine, workload_name="short",
        workload=core.WorkloadConfig(output_len=32, concurrency=2, requests=8, warmup_requests=2),
        head_ref="HEAD", base_ref=None, modes=["baseline"],
        settings=core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, modes=["baseline"], on_disturbed="keep"),
        host=local_host(workdir))
    try:
        return await compare(request, observer)
    finally:
        observer.stop()


def _gpu_summary(result: core.CompareResult) -> list[str]:
    """Per launch: window length, SM clock min/median, SW power-cap seconds, foreign GPU pids."""
    lines = []
    for seq, window in sorted(result.windows.items()):
        devices = (window or {}).get("gpu", {}).get("devices", [])
        parts = [f"{window.get('window_s', 0):.1f} s" if window else "no window"]
        for dev in devices:
            parts.append(f"GPU{dev['index']} SM {dev['sm_clock_mhz_min']}/{dev['sm_clock_mhz_median']} MHz, "
                         f"power cap {dev['clock_event_s'].get('sw_power_cap')} s, "
                         f"foreign {[p['pid'] for p in dev['foreign_processes']]}")
        lines.append(f"launch {seq}: " + "; ".join(parts))
    return lines


async def test_quiet_compare_on_the_gpu_marks_nothing_disturbed_and_no_drift(served, tmp_path):
    observer = Recorder()
    result = await _compare(served, tmp_path / "work", observer)
    print("\n".join(observer.lines + _gpu_summary(result)))
    assert result.status == core.RunStatus.DONE, result.reason
    assert len(result.seqs["baseline"]["base"]) == len(result.seqs["baseline"]["head"]) == 2
    assert result.verdicts["baseline"].n_pairs == 2
    assert all(t.sample.output_tok_s > 0 for arm in result.trials["baseline"].values() for t in arm)
    # the monitor read the GPU in every window: the quiet verdict is not one of a blind monitor
    for seq, window in result.windows.items():
        assert window and "error" not in window, (seq, window)
        assert window["gpu"]["available"] is True, (seq, window["gpu"])
        assert window["gpu"]["devices"][0]["sm_clock_samples"] >= 2, seq
    assert result.disturbed == {}, {seq: d.reasons for seq, d in result.disturbed.items()}
    # the arms' environments differ in the engine commit alone (kept by design: it is the change measured)
    assert [line for line in result.arm_env_diff if not line.startswith("engine commit ")] == [], result.arm_env_diff
    assert [line for line in observer.lines if "drift" in line or "disturbed" in line] == []


async def test_foreign_matmul_loop_marks_the_launch_it_overlapped_with_its_pid(served, tmp_path):
    observer = Recorder(loop_at=LOOPED)
    result = await _compare(served, tmp_path / "work", observer)
    print("\n".join(observer.lines + _gpu_summary(result)))
    assert result.status == core.RunStatus.DONE, result.reason
    pid = observer.pids[LOOPED]
    assert sorted(result.disturbed) == [LOOPED], {seq: d.reasons for seq, d in result.disturbed.items()}
    named = [c for c in result.disturbed[LOOPED].culprits if c.pid == pid]
    assert any(c.what == "gpu process" for c in named), result.disturbed[LOOPED].culprits
    assert "import sys, time, torch" in named[0].command
    rows = {r["seq"]: r for r in result.launches()}
    assert any(f"foreign compute process pid {pid} " in reason for reason in rows[LOOPED]["disturbed"]), rows[LOOPED]
    assert all(rows[seq]["kept"] for seq in rows)  # on_disturbed = "keep"
    assert any(f"pid {pid} " in line and line.endswith(f"during launch {LOOPED}")
               for line in culprit_lines(result.disturbed)), culprit_lines(result.disturbed)
    assert any(line.startswith(f"trial {LOOPED} disturbed (keep): ") for line in observer.lines), observer.lines
