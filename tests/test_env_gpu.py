"""The probe on a real NVIDIA GPU: its readings against nvidia-smi's, a real foreign compute
process found and judged, NCCL read two ways. Marked ``gpu``; skipped where NVML cannot start
(no driver), the one allowed skip. Output of the last run on an H200: tests/fixtures/nvml/."""

from __future__ import annotations

import subprocess
import sys

import pytest

import core
from bench.probe_time import start_load
from core._env.checks import run_checks
from core._env.probe import probe, probe_cheap
from core._env.probe_script import reason_names


def _nvml_reason() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable GPU here
        return f"no NVIDIA GPU usable here ({type(exc).__name__}: {exc})"


_REASON = _nvml_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

SMI_FIELDS = ("index", "name", "uuid", "driver_version", "pcie.link.gen.max", "pcie.link.width.max",
              "enforced.power.limit", "persistence_mode", "memory.total")


def _nvidia_smi() -> list[dict]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [dict(zip(SMI_FIELDS, (v.strip() for v in line.split(",")))) for line in out.strip().splitlines()]


@pytest.fixture(scope="module")
def full() -> dict:
    return probe(sys.executable)


def test_probe_agrees_with_nvidia_smi(full):
    gpu = full["gpu"]
    assert gpu["available"] is True
    smi = _nvidia_smi()
    assert gpu["device_count"] == len(smi) == len(gpu["devices"])
    for device, row in zip(gpu["devices"], smi):
        assert device["index"] == int(row["index"])
        assert device["name"] == row["name"]
        assert device["uuid"] == row["uuid"]
        assert gpu["driver_version"] == row["driver_version"]
        assert device["pcie_gen_max"] == int(row["pcie.link.gen.max"])
        assert device["pcie_width_max"] == int(row["pcie.link.width.max"])
        assert abs(device["power_limit_w"] - float(row["enforced.power.limit"])) < 1.0
        assert device["persistence_mode"] == (row["persistence_mode"] == "Enabled")
        assert device["memory_total_mib"] == pytest.approx(int(row["memory.total"]), abs=1)
        assert device["sm_clock_max_mhz"] > 0 and device["pstate"] is not None
        assert device["clock_event_reason_names"] == reason_names(device["clock_event_reasons"])


def test_no_import_form_reads_the_same_gpus(full):
    piped = probe(sys.executable, import_torch=False)
    assert [d["uuid"] for d in piped["gpu"]["devices"]] == [d["uuid"] for d in full["gpu"]["devices"]]
    assert piped["gpu"]["driver_version"] == full["gpu"]["driver_version"]


def test_nccl_from_torch_and_from_libnccl_agree(full):
    import torch

    expected = ".".join(str(p) for p in torch.cuda.nccl.version()[:3])
    assert full["software"]["nccl"]["version"] == expected
    assert full["software"]["nccl"]["source"] == "torch"
    without_import = probe(sys.executable, import_torch=False, cheap=False)
    nccl = without_import["software"]["nccl"]
    assert nccl["source"].startswith("libnccl:")
    assert nccl["version"] == expected
    assert full["software"]["torch"]["cuda"] == torch.version.cuda


def test_foreign_compute_process_is_found_and_judged():
    load = start_load(sys.executable, 30)
    try:
        snapshot = probe_cheap(sys.executable)
    finally:
        load.kill()
        load.wait()
    device = snapshot["gpu"]["devices"][0]
    pids = {p["pid"]: p for p in device["processes"]}
    assert load.pid in pids, f"load pid {load.pid} not among GPU0 compute processes {sorted(pids)}"
    assert pids[load.pid]["memory_mib"] > 300  # three bf16 8192x8192 matrices and a CUDA context
    assert "import sys, time, torch" in pids[load.pid]["command"]
    assert device["pstate"] == 0
    assert device["sm_clock_mhz"] > 1000

    checks = run_checks(snapshot, under_load=True)
    foreign = [c for c in checks if c.name == "foreign processes"]
    assert foreign[0].status is core.CheckStatus.FAIL and f"pid {load.pid}" in foreign[0].line
    mine = [c for c in run_checks(snapshot, under_load=True, own_pids={load.pid})
            if c.name == "foreign processes"]
    assert all(f"pid {load.pid}" not in c.line for c in mine)
    if all(p["pid"] == load.pid for p in device["processes"]):
        assert [c.status for c in mine] == [core.CheckStatus.PASS]


def test_cheap_probe_is_cheaper_than_full(full):
    cheap = probe_cheap(sys.executable)
    assert cheap["kind"] == "cheap" and "packages" not in cheap["software"]
    assert cheap["wall_s"] < full["wall_s"]
    assert {d["uuid"] for d in cheap["gpu"]["devices"]} == {d["uuid"] for d in full["gpu"]["devices"]}
