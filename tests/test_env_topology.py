"""The probe's topology of several GPUs and the checks on it (fast tier; NVML stood in by a stub
of the nvidia-ml-py calls the probe makes, with the installed nvidia-ml-py's own constants,
``NVML_P2P_CAPS_INDEX_READ = (0,)`` included, a tuple that ctypes refuses). The single-GPU readings of a real H200 are in
tests/test_env_gpu.py: an 8-GPU host is not lent to us (issue 30)."""

from __future__ import annotations

import types

import pynvml
import pytest

from core import CheckStatus
from core._env.checks import run_checks
from core._env.fingerprint import diff_snapshots
from core._env.probe_script import _gpu_readings

GPUS = 8
LINKS = 18


def stub_nvml(down_links: dict[int, int] | None = None, no_p2p: set[tuple[int, int]] = frozenset(),
              numa: dict[int, int] | None = None):
    """An NVML of 8 H200s on NVLink (two NUMA nodes: GPUs 0-3 on CPUs 0-55, 4-7 on 56-111);
    ``down_links[g]`` links of GPU g down, pairs in ``no_p2p`` without P2P (PCIe SYS)."""
    down_links, numa = down_links or {}, numa or {}

    class NVMLError(Exception):
        def __init__(self, value=999):
            self.value = value

    def handle(i):
        if not 0 <= i < GPUS:
            raise NVMLError(2)
        return i

    def pair(a, b):
        return (min(a, b), max(a, b))

    def p2p(a, b, caps):
        if not isinstance(caps, int):
            raise TypeError("an integer is required")  # as ctypes says to (0,)
        if pair(a, b) in no_p2p:
            return 5  # NOT_SUPPORTED
        return 0

    def nvlink_state(h, link):
        if link >= LINKS:
            raise NVMLError(2)  # INVALID_ARGUMENT past the last link
        return 0 if link < down_links.get(h, 0) else 1

    def affinity(h, words):
        node = numa.get(h, 0 if h < 4 else 1)
        mask = (1 << 56) - 1
        return [mask, 0] if node == 0 else [mask << 56 & (2**64 - 1), mask >> 8]

    def pci(h):
        return types.SimpleNamespace(busId=f"00000000:{0x18 + 0x10 * h:02X}:00.0")

    def missing(*args):
        raise NVMLError(3)  # NOT_SUPPORTED: fields this test does not need

    constants = {name: value for name, value in vars(pynvml).items() if name.startswith("NVML_")}
    nv = dict(
        NVMLError=NVMLError, NVML_NVLINK_MAX_LINKS=LINKS,
        nvmlSystemGetDriverVersion=lambda: "580.95.05", nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlSystemGetNVMLVersion=lambda: "13.580.95.05", nvmlDeviceGetCount=lambda: GPUS,
        nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetPciInfo=pci, nvmlDeviceGetNvLinkState=nvlink_state, nvmlDeviceGetP2PStatus=p2p,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 50 if pair(a, b) in no_p2p else 10,
        nvmlDeviceGetCpuAffinity=affinity)
    return types.SimpleNamespace(**{**constants, **{n: missing for n in NVML_FIELDS}, **nv})


NVML_FIELDS = [
    "nvmlDeviceGetBrand", "nvmlDeviceGetUUID", "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetApplicationsClock",
    "nvmlDeviceGetDefaultApplicationsClock", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses",
]


def snapshot(nv, visible: str | None = None) -> dict:
    return {"gpu": _gpu_readings(nv, "specperf", cheap=False), "system": {},
            "software": {"env": {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}}}


def checks(snap: dict, name: str, **kwargs):
    return [c for c in run_checks(snap, under_load=False, **kwargs) if c.name == name]


def test_eight_healthy_gpus_give_every_pair_its_link_and_p2p():
    snap = snapshot(stub_nvml())
    topology = snap["gpu"]["topology"]
    assert len(topology) == 28  # 8 choose 2
    assert topology["0-7"] == {"p2p_read": "OK", "p2p_write": "OK", "nvlink_p2p": "OK", "link": "NVLink"}
    device = snap["gpu"]["devices"][5]
    assert (device["nvlink_links"], device["nvlink_links_active"], device["cpu_affinity"]) == (18, 18, "56-111")
    (row,) = checks(snap, "gpu links")
    assert row.status == CheckStatus.PASS and row.line.startswith("GPU0-7: every NVLink link up, P2P between every pair")


def test_a_link_down_and_a_pair_without_p2p_are_named():
    snap = snapshot(stub_nvml(down_links={3: 1}, no_p2p={(2, 5)}))
    rows = checks(snap, "gpu links")
    assert [(r.status, r.gpu, r.line) for r in rows] == [
        (CheckStatus.FAIL, 3, "GPU3: 17 of 18 NVLink links up"),
        (CheckStatus.WARN, 2, "GPU2-GPU5: no P2P (not supported) while other pairs have it; link SYS"),
    ]
    # the same host before and after: the fingerprint diff says what moved
    changes = {c.key: (c.before, c.after) for c in diff_snapshots(snapshot(stub_nvml()), snap)}
    assert changes["gpu.devices.3.nvlink_links_active"] == (18, 17)
    assert changes["gpu.topology.2-5.p2p_read"] == ("OK", "not supported")
    assert changes["gpu.topology.2-5.link"] == ("NVLink", "SYS")


def test_only_the_engines_gpus_are_judged():
    snap = snapshot(stub_nvml(down_links={6: 2}, no_p2p={(6, 7)}), visible="0,1,2,3")
    (row,) = checks(snap, "gpu links")
    assert row.status == CheckStatus.PASS and row.line.startswith("GPU0-3:")


@pytest.mark.parametrize(("cpus", "status"), [([1, 2], CheckStatus.PASS), ([60, 61], CheckStatus.WARN)])
def test_an_engine_pinned_off_its_gpus_numa_node_is_said(cpus, status):
    snap = snapshot(stub_nvml(), visible="0,1")
    rows = checks(snap, "numa affinity", engine_cpus=cpus)
    assert {r.status for r in rows} == {status}
    if status == CheckStatus.WARN:
        assert rows[0].line == "GPU0 is close to CPUs 0-55 (its NUMA node); the engine is pinned to CPUs 60,61"
    assert checks(snap, "numa affinity") == []  # an engine that is not pinned is not judged


# -- the real H200 (tests/fixtures/nvml/h200_topology_*.json, 2026-12-03) ----------------------

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "nvml"


def _recorded(name: str) -> dict:
    import json

    return json.loads((FIXTURES / name).read_text())


def test_the_h200s_topology_fields_agree_with_nvidia_smi_and_torch():
    """One H200 in a 16-CPU VM, probed by core/_env/probe_script.py with the machine's own Python;
    nvidia-smi topo -m and torch read beside it (h200_topo_m.txt): the CPU affinity is NVML's
    0-15 as nvidia-smi prints it, sysfs gives the GPU no NUMA node (-1: read as none), NVLink
    is not supported on this board, one GPU has no pairs, and NCCL is torch's 2.28.9."""
    snap = _recorded("h200_topology_full.json")
    smi = (FIXTURES / "h200_topo_m.txt").read_text()
    (device,) = snap["gpu"]["devices"]
    assert device["cpu_affinity"] == "0-15" and "GPU0\t X \t0-15\t" in smi
    assert device["numa_node"] is None and "numa_node=-1" in smi
    assert device["nvlink_links"] is None and device["unavailable"]["nvlink"] == "NotSupported"
    assert "topology" not in snap["gpu"]
    assert snap["software"]["nccl"] == {"version": "2.28.9", "code": 22809, "source": "torch"}
    assert "nccl (2, 28, 9)" in smi
    (links,) = [c for c in run_checks(snap, under_load=False) if c.name == "gpu links"]
    assert links.status == CheckStatus.PASS and links.line == "GPU0: one GPU, no links between GPUs"
    (numa,) = [c for c in run_checks(snap, under_load=False, engine_cpus=[3]) if c.name == "numa affinity"]
    assert numa.status == CheckStatus.PASS


def test_nccl_settings_rank_with_nccls_version_in_the_fingerprint_diff():
    """The same H200 probed again with NCCL_P2P_DISABLE=1 and NCCL_DEBUG=INFO in the engine's
    environment: those two are all that differs, and they rank in the NCCL category, after the
    driver and before torch, the engine and other variables."""
    changes = diff_snapshots(_recorded("h200_topology_full.json"), _recorded("h200_topology_nccl_env.json"))
    assert [(c.key, c.before, c.after) for c in changes] == [
        ("software.env.NCCL_DEBUG", None, "INFO"), ("software.env.NCCL_P2P_DISABLE", None, "1")]
    assert {c.category.name for c in changes} == {"NCCL"}
