"""Checks on real NVML readings from an H200 (tests/fixtures/nvml), and on deep copies of those
readings with one fault put in (a link trained down, throttle bits, ECC, ...): the fixture
README lists every edit."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from core import Check, CheckStatus
from core._env.checks import run_checks, worst

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
LOAD_PID = 537  # the matmul loop's pid in h200_load*.json


def reading(name: str) -> dict:
    return json.loads((FIXTURES / f"h200_{name}.json").read_text())


def edited(name: str, /, **device_changes) -> dict:
    """A deep copy of a real reading with GPU0's fields changed."""
    snapshot = copy.deepcopy(reading(name))
    snapshot["gpu"]["devices"][0].update(device_changes)
    return snapshot


def by_name(checks: list[Check], name: str) -> list[Check]:
    found = [c for c in checks if c.name == name]
    assert found, f"no {name!r} check in {[c.name for c in checks]}"
    return found


def only(checks: list[Check], name: str) -> Check:
    found = by_name(checks, name)
    assert len(found) == 1, found
    return found[0]


def test_recorded_readings_are_what_the_tests_assume():
    idle, load = reading("idle")["gpu"]["devices"][0], reading("load")["gpu"]["devices"][0]
    assert idle["clock_event_reasons"] == 0x1 and idle["processes"] == []
    assert load["clock_event_reasons"] == 0x4 and [p["pid"] for p in load["processes"]] == [LOAD_PID]
    assert (load["pcie_gen"], load["pcie_width"], load["pcie_gen_max"], load["pcie_width_max"]) == (5, 16, 5, 16)


def test_idle_h200_passes_everything():
    checks = run_checks(reading("idle"), under_load=False)
    assert [c.name for c in checks] == [
        "gpu", "p-state", "power limit", "clock events", "pcie link", "gpu links", "foreign processes", "ecc", "persistence mode", "mig",
        "gpu uniformity", "temperature", "cpu governor", "busy processes", "memory"]
    assert {c.status for c in checks} == {CheckStatus.PASS}, [c for c in checks if c.status is not CheckStatus.PASS]
    assert only(checks, "gpu").line == "1 x NVIDIA H200; driver 580.159.04, CUDA 13.0"
    assert only(checks, "pcie link").line == (
        "GPU0: judged under load only, links train down when idle (now Gen5 x16)")


def test_h200_under_load_warns_power_cap_and_fails_the_foreign_process():
    checks = run_checks(reading("load"), under_load=True)
    assert only(checks, "clock events").status is CheckStatus.WARN
    assert only(checks, "clock events").line == (
        "GPU0 clocks held by SW power cap (0x4): SM 1,455 of 1,980 MHz, 694 W of 700 W")
    foreign = only(checks, "foreign processes")
    assert foreign.status is CheckStatus.FAIL and foreign.gpu == 0
    assert foreign.line.startswith(f"GPU0 runs 1 foreign compute process: pid {LOAD_PID} (root, 1,222 MiB) "
                                   "/opt/torch/.venv/bin/python3 -c import sys, time, torch")
    assert only(checks, "p-state").line == "GPU0: P0 under load"
    assert only(checks, "pcie link").line == "GPU0: links at their max under load"
    assert worst(checks) is CheckStatus.FAIL


def test_the_engines_own_process_is_not_foreign():
    checks = run_checks(reading("load_cheap"), under_load=True, own_pids={LOAD_PID})
    assert only(checks, "foreign processes").status is CheckStatus.PASS
    assert only(checks, "busy processes").status is CheckStatus.PASS  # the loop used 97 % of a CPU
    assert worst(checks) is CheckStatus.WARN  # the power cap remains
    others = run_checks(reading("load_cheap"), under_load=True)
    assert only(others, "busy processes").status is CheckStatus.WARN
    assert f"pid {LOAD_PID} (root) 98%" in only(others, "busy processes").line


def test_cheap_reading_gives_the_same_gpu_verdicts_as_the_full_one():
    full = {c.name: c.status for c in run_checks(reading("load"), under_load=True)}
    cheap = {c.name: c.status for c in run_checks(reading("load_cheap"), under_load=True)}
    for name in ("p-state", "clock events", "pcie link", "foreign processes", "ecc", "temperature"):
        assert cheap[name] is full[name], name
    assert "cpu governor" not in cheap  # the cheap probe does not read it


@pytest.mark.parametrize("gen, width, line", [
    (4, 16, "GPU0 PCIe Gen4 x16 under load; max Gen5 x16"),
    (5, 8, "GPU0 PCIe Gen5 x8 under load; max Gen5 x16"),
    (1, 16, "GPU0 PCIe Gen1 x16 under load; max Gen5 x16"),
])
def test_link_trained_down_fails_under_load_only(gen, width, line):
    snapshot = edited("load", pcie_gen=gen, pcie_width=width)
    loaded = only(run_checks(snapshot, under_load=True), "pcie link")
    assert (loaded.status, loaded.line, loaded.gpu) == (CheckStatus.FAIL, line, 0)
    idle = only(run_checks(snapshot, under_load=False), "pcie link")
    assert idle.status is CheckStatus.PASS and f"now Gen{gen} x{width}" in idle.line


@pytest.mark.parametrize("mask, status, words", [
    (0x8, CheckStatus.FAIL, "HW slowdown (0x8)"),
    (0x20, CheckStatus.FAIL, "SW thermal slowdown (0x20)"),
    (0x40, CheckStatus.FAIL, "HW thermal slowdown (0x40)"),
    (0x80, CheckStatus.FAIL, "HW power brake (0x80)"),
    (0x84, CheckStatus.FAIL, "HW power brake (0x80), SW power cap (0x4)"),
    (0x5, CheckStatus.WARN, "SW power cap (0x4)"),
    (0x1, CheckStatus.PASS, "no clock-event reason that costs speed"),
    (0x10, CheckStatus.PASS, "no clock-event reason that costs speed"),
    (0x0, CheckStatus.PASS, "no clock-event reason that costs speed"),
])
def test_clock_event_bits(mask, status, words):
    for under_load in (True, False):  # throttling counts whether or not the GPU is busy
        check = only(run_checks(edited("load", clock_event_reasons=mask), under_load=under_load), "clock events")
        assert check.status is status and words in check.line


def test_thermal_throttle_line_gives_the_temperature():
    check = only(run_checks(edited("load", clock_event_reasons=0x40, temperature_c=91), True), "clock events")
    assert check.line == "GPU0 clocks held by HW thermal slowdown (0x40): SM 1,455 of 1,980 MHz, 91 C"


@pytest.mark.parametrize("pstate, status", [(0, CheckStatus.PASS), (2, CheckStatus.WARN), (8, CheckStatus.FAIL)])
def test_pstate_judged_under_load(pstate, status):
    check = only(run_checks(edited("load", pstate=pstate), under_load=True), "p-state")
    assert check.status is status
    if status is not CheckStatus.PASS:
        assert check.line == f"GPU0 in P{pstate} under load; P0 expected (SM 1,455 MHz)"
    idle = only(run_checks(edited("idle", pstate=8), under_load=False), "p-state")
    assert idle.status is CheckStatus.PASS and "now P8" in idle.line


@pytest.mark.parametrize("changes, status, words", [
    ({"ecc_uncorrected_volatile": 2}, CheckStatus.FAIL, "2 uncorrected ECC errors"),
    ({"remap_failure": True}, CheckStatus.FAIL, "row remapping failed"),
    ({"remap_pending": True}, CheckStatus.WARN, "row remap pending: reset the GPU"),
    ({"retired_pages_pending": True}, CheckStatus.WARN, "page retirement pending"),
])
def test_ecc_and_remap(changes, status, words):
    check = only(run_checks(edited("idle", **changes), under_load=False), "ecc")
    assert check.status is status and words in check.line


def test_persistence_off_and_mig_on_warn():
    checks = run_checks(edited("idle", persistence_mode=False, mig_mode=True), under_load=False)
    assert only(checks, "persistence mode").status is CheckStatus.WARN
    assert "nvidia-smi -pm 1" in only(checks, "persistence mode").line
    assert only(checks, "mig").status is CheckStatus.WARN


@pytest.mark.parametrize("temp, status", [(53, CheckStatus.PASS), (83, CheckStatus.PASS), (84, CheckStatus.WARN),
                                          (88, CheckStatus.WARN), (89, CheckStatus.FAIL), (93, CheckStatus.FAIL)])
def test_temperature_near_the_recorded_slowdown_threshold(temp, status):
    check = only(run_checks(edited("load", temperature_c=temp), under_load=True), "temperature")
    assert check.status is status
    if status is CheckStatus.FAIL:
        assert check.line == f"GPU0 at {temp} C, at or above its slowdown threshold 89 C"


def two_gpus(name: str, **gpu1_changes) -> dict:
    snapshot = copy.deepcopy(reading(name))
    second = copy.deepcopy(snapshot["gpu"]["devices"][0])
    second.update(index=1, uuid="GPU-11111111-2222-3333-4444-555555555555", processes=[], **gpu1_changes)
    snapshot["gpu"]["devices"].append(second)
    snapshot["gpu"]["device_count"] = 2
    return snapshot


def test_identical_gpus_are_uniform():
    check = only(run_checks(two_gpus("load"), under_load=True), "gpu uniformity")
    assert check.status is CheckStatus.PASS and check.line.startswith("GPU0-1:")


def test_gpus_that_differ_warn():
    checks = by_name(run_checks(two_gpus("load", power_limit_w=600.0, sm_clock_mhz=1100), under_load=True),
                     "gpu uniformity")
    lines = [c.line for c in checks]
    assert "GPUs differ in power limit W: GPU0 700, GPU1 600" in lines
    assert "SM clocks under load differ by more than 10%: GPU1 1,100 MHz, GPU0 1,455 MHz" in lines
    assert all(c.status is CheckStatus.WARN for c in checks)
    idle = by_name(run_checks(two_gpus("idle", sm_clock_mhz=210), under_load=False), "gpu uniformity")
    assert [c.status for c in idle] == [CheckStatus.PASS]  # current clocks differ freely when idle


def test_only_the_engines_gpus_are_judged():
    snapshot = two_gpus("load", clock_event_reasons=0x8)
    assert [c.gpu for c in by_name(run_checks(snapshot, True), "clock events") if c.status is CheckStatus.FAIL] == [1]
    for visible in ("0", snapshot["gpu"]["devices"][0]["uuid"][:12]):
        snapshot["software"]["env"]["CUDA_VISIBLE_DEVICES"] = visible
        assert only(run_checks(snapshot, True), "clock events").status is CheckStatus.WARN  # GPU0's power cap only
    snapshot["software"]["env"]["CUDA_VISIBLE_DEVICES"] = "1"
    assert only(run_checks(snapshot, True), "clock events").status is CheckStatus.FAIL
    assert only(run_checks(snapshot, True), "foreign processes").status is CheckStatus.PASS  # the loop is on GPU0


def test_a_gpu_that_cannot_be_read_fails():
    snapshot = copy.deepcopy(reading("idle"))
    snapshot["gpu"]["devices"] = [{"index": 0, "error": "NVMLError_GpuIsLost"}]
    checks = run_checks(snapshot, under_load=False)
    assert [(c.status, c.line) for c in checks if c.name == "gpu"] == [
        (CheckStatus.FAIL, "GPU0 cannot be read: NVMLError_GpuIsLost"),
        (CheckStatus.WARN, "no GPU to judge (none found, or CUDA_VISIBLE_DEVICES names none)")]


def test_no_gpu_is_one_warning_with_the_reason():
    snapshot = copy.deepcopy(reading("idle"))
    snapshot["gpu"] = {"available": False, "reason": "NVML library not found (NVMLError_LibraryNotFound: "
                                                     "NVML Shared Library Not Found)"}
    checks = run_checks(snapshot, under_load=True)
    gpu = only(checks, "gpu")
    assert gpu.status is CheckStatus.WARN and "NVML library not found" in gpu.line and "GPU checks not run" in gpu.line
    assert not [c for c in checks if c.name in ("p-state", "clock events", "pcie link")]


def test_unreadable_process_list_warns():
    snapshot = edited("load", processes=None, unavailable={"processes": "NoPermission"})
    check = only(run_checks(snapshot, True), "foreign processes")
    assert check.status is CheckStatus.WARN and "NoPermission" in check.line


def test_system_checks():
    snapshot = copy.deepcopy(reading("idle"))
    snapshot["system"].update(cpu_governor="powersave", mem_available_mib=1000)
    checks = run_checks(snapshot, under_load=False)
    assert only(checks, "cpu governor").status is CheckStatus.WARN and "powersave" in only(checks, "cpu governor").line
    assert only(checks, "memory").line == "only 1,000 of 128,887 MiB memory available"
    snapshot["system"]["cpu_governor"] = "performance"
    assert only(run_checks(snapshot, False), "cpu governor").status is CheckStatus.PASS


def test_check_to_dict_and_bad_input():
    check = only(run_checks(reading("load"), True), "clock events")
    assert json.loads(json.dumps(check.to_dict())) == {
        "name": "clock events", "status": "WARN", "gpu": 0, "line": check.line}
    with pytest.raises(ValueError, match="needs a snapshot from core._env.probe.probe"):
        run_checks({"gpu": {}}, under_load=False)
    assert worst([]) is CheckStatus.PASS


def test_power_limit_below_default_warns_with_both_numbers():
    """Issue 15 item 6: a persistent nvidia-smi -pl 500 on a 700 W H200 passed every check."""
    checks = run_checks(edited("idle", power_limit_w=500.0), under_load=False)
    cap = only(checks, "power limit")
    assert cap.status is CheckStatus.WARN and cap.gpu == 0
    assert cap.line.startswith("GPU0 power limit 500 W, below its default 700 W")
    assert "nvidia-smi -i 0 -pl 700" in cap.line
    # the same cap under load, and on a second GPU of two, with the default at a non-round value
    load = edited("load", power_limit_w=350.0, power_default_limit_w=450.0)
    assert only(run_checks(load, under_load=True), "power limit").line.startswith(
        "GPU0 power limit 350 W, below its default 450 W")
    two = copy.deepcopy(reading("idle"))
    second = {**copy.deepcopy(two["gpu"]["devices"][0]), "index": 1, "power_limit_w": 600.0}
    two["gpu"]["devices"].append(second)
    rows = by_name(run_checks(two, under_load=False), "power limit")
    assert [(r.gpu, r.status) for r in rows] == [(1, CheckStatus.WARN)]
    # a limit raised above default, or reported in milliwatt rounding, is not a cap
    assert only(run_checks(edited("idle", power_limit_w=699.5), under_load=False), "power limit").status \
        is CheckStatus.PASS


@pytest.mark.parametrize(("model", "brand", "pstate", "status"), [
    ("NVIDIA GeForce RTX 4090", "GEFORCE_RTX", 2, CheckStatus.PASS),  # CUDA compute runs in P2 there
    ("NVIDIA GeForce RTX 3090", None, 2, CheckStatus.PASS),  # no brand read: judged by the name
    ("NVIDIA TITAN RTX", "TITAN_RTX", 2, CheckStatus.PASS),
    ("NVIDIA GeForce RTX 5090", "GEFORCE", 3, CheckStatus.FAIL),
    ("NVIDIA H200", "NVIDIA", 2, CheckStatus.WARN),  # a data-centre card in P2 under load is held back
    ("NVIDIA RTX 6000 Ada Generation", "NVIDIA_RTX", 2, CheckStatus.WARN),
])
def test_pstate_is_judged_against_the_product_line(model, brand, pstate, status):
    checks = run_checks(edited("load", name=model, brand=brand, pstate=pstate, processes=[]), under_load=True)
    row = only(checks, "p-state")
    assert row.status is status, row.line
    if status is CheckStatus.FAIL:
        assert row.line.endswith("P0-P2 expected on a GeForce/TITAN card (SM 1,455 MHz)")
