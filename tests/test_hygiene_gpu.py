"""GPU hygiene on a real NVIDIA GPU: a torch process holding GPU memory is found through its
open ``/dev/nvidia*`` files and through NVML, refuses the run by default, and is stopped with
``force_clean``; a leftover engine of ours (a torch process writing into the host's logs) is
stopped without being asked. Marked ``gpu``; skipped where NVML cannot start (no driver), the
one allowed skip. Output of the last run on an H200: tests/fixtures/nvml/h200_pytest_hygiene.txt.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import core
from core._env.hygiene import clean_gpus, gpu_holders
from core._env.probe import probe_cheap
from core._hosts import LocalHost
from tests.test_env_gpu import _REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

HOLD = ("import sys, time, torch\n"
        "x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device='cuda')\n"
        "torch.cuda.synchronize()\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")


def hold_gpu(mib: int, log: Path | None = None) -> subprocess.Popen:
    """A torch process in its own session holding ``mib`` MiB on GPU 0; returns once it does."""
    out = open(log, "w") if log else subprocess.PIPE
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(mib)], stdout=out, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    if log is None:
        assert proc.stdout.readline().strip() == "ready"
    else:
        out.close()
        for _ in range(600):
            if "ready" in log.read_text():
                break
            subprocess.run(["sleep", "0.1"])
    return proc


async def test_torch_holders_refuse_the_run_and_force_clean_stops_them(tmp_path):
    host = LocalHost("local", core.HostConfig(), str(tmp_path / "work"))
    logs = tmp_path / "work/logs"
    logs.mkdir(parents=True)
    foreign = hold_gpu(1024)
    ours = hold_gpu(512, logs / "tiny-vllm-baseline-left-behind.log")
    try:
        snapshot = probe_cheap()
        nvml = {p["pid"]: p for d in snapshot["gpu"]["devices"] for p in d["processes"] or []}
        holders = {h.pid: h for h in await gpu_holders(host, snapshot)}
        for holder in holders.values():
            print(f"holder: {holder.kind:8} {holder.source:6} {holder.line}  nvml: {nvml.get(holder.pid)}")
        assert holders[foreign.pid].kind == "foreign" and holders[foreign.pid].source == "device"
        assert holders[ours.pid].kind == "ours"
        assert foreign.pid in nvml and nvml[foreign.pid]["memory_mib"] >= 1024
        with pytest.raises(core.HostBusyError) as refused:
            await clean_gpus(host, snapshot)
        print(f"refused: {refused.value}")
        assert f"pid {foreign.pid} (" in str(refused.value) and f"pid {ours.pid} (" not in str(refused.value)
        assert foreign.poll() is None and ours.poll() is None
        done = await clean_gpus(host, snapshot, force_clean=True, grace_s=5)
        for line in done:
            print(f"done: {line}")
        assert foreign.wait(15) is not None and ours.wait(15) is not None
        after = probe_cheap()
        left = [p["pid"] for d in after["gpu"]["devices"] for p in d["processes"] or []]
        print(f"NVML compute processes after: {left}")
        assert foreign.pid not in left and ours.pid not in left
    finally:
        for proc in (foreign, ours):
            if proc.poll() is None:
                proc.kill()
