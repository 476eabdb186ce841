"""Fingerprint diffs: on the real H200 readings, on edited copies of them, and between two real
virtual environments (sharing the CPU test engine's packages) that differ in one package version."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core._env.fingerprint import Category, SnapshotError, diff_snapshots, flatten_snapshot, load_snapshot
from core._env.probe import probe

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"


def reading(name: str) -> dict:
    return json.loads((FIXTURES / f"h200_{name}.json").read_text())


def test_a_snapshot_equals_itself():
    assert diff_snapshots(reading("idle"), copy.deepcopy(reading("idle"))) == []


def test_idle_to_load_on_one_h200_is_clocks_and_a_process_only():
    changes = diff_snapshots(reading("idle"), reading("load"))
    assert {c.category for c in changes} == {Category.CLOCKS_LINKS}
    lines = [c.line for c in changes]
    assert "GPU0 sm_clock_mhz 345 -> 1455" in lines
    assert "GPU0 clock_event_reason_names [gpu_idle] -> [sw_power_cap]" in lines
    assert "GPU0 compute_processes 0 -> 1" in lines
    # temperature, power draw, memory in use, load average and timings move every second: not compared
    keys = {c.key for c in changes}
    assert not keys & {"gpu.devices.0.temperature_c", "gpu.devices.0.power_w", "system.loadavg_1m", "probe_s"}


def test_changes_come_in_throughput_order():
    a = reading("idle")
    b = copy.deepcopy(a)
    b["system"]["kernel"] = "6.8.0-49-generic"  # the rest: last
    b["gpu"]["devices"][0]["pcie_gen_max"] = 4
    b["software"]["env"]["NCCL_P2P_DISABLE"] = "1"
    for s in (a, b):
        s["software"]["packages"]["vllm"] = {"version": "0.11.0", "path": "/venv/vllm", "distribution": "vllm",
                                             "version_source": "metadata"}
    b["software"]["packages"]["vllm"]["version"] = "0.11.1"
    b["software"]["torch"]["version"] = "2.10.0+cu130"
    b["software"]["nccl"]["version"] = "2.27.3"
    b["gpu"]["driver_version"] = "575.57.08"
    changes = diff_snapshots(a, b)
    assert [c.line for c in changes] == [
        "driver 580.159.04 -> 575.57.08",
        "NCCL 2.28.9 -> 2.27.3",
        "env NCCL_P2P_DISABLE unset -> 1",  # NCCL's settings beside its version (issue 30)
        "torch 2.11.0+cu130 -> 2.10.0+cu130",
        "vllm 0.11.0 -> 0.11.1",
        "GPU0 pcie_gen_max 5 -> 4",
        "kernel 6.18.44-fc-v657-gpu -> 6.8.0-49-generic",
    ]
    assert [c.category for c in changes] == sorted(c.category for c in changes)
    assert changes[4].to_dict() == {"category": "engine", "key": "software.packages.vllm.version", "what": "vllm",
                                     "before": "0.11.0", "after": "0.11.1", "line": "vllm 0.11.0 -> 0.11.1"}


def test_any_engine_variable_differs_and_known_performance_variables_rank_first():
    """Issue 15 item 5: two engines differing only in SGL_ENABLE_JIT_DEEPGEMM diffed as no difference."""
    a = reading("idle")
    b = copy.deepcopy(a)
    b["software"]["env"]["SGL_ENABLE_JIT_DEEPGEMM"] = "1"
    assert [c.line for c in diff_snapshots(a, b)] == ["env SGL_ENABLE_JIT_DEEPGEMM unset -> 1"]
    a["software"]["env"].update(OMP_NUM_THREADS="8", EDITOR="vi", DG_JIT_USE_NVRTC="0")
    b["software"]["env"].update(OMP_NUM_THREADS="16", EDITOR="nano", LD_PRELOAD="/usr/lib/libjemalloc.so",
                                TRITON_CACHE_DIR="/t", DG_JIT_USE_NVRTC="1")
    b["system"]["kernel"] = "6.8.0-49-generic"
    changes = diff_snapshots(a, b)
    assert [c.line for c in changes] == [
        "env OMP_NUM_THREADS 8 -> 16", "env DG_JIT_USE_NVRTC 0 -> 1", "env SGL_ENABLE_JIT_DEEPGEMM unset -> 1",
        "env LD_PRELOAD unset -> /usr/lib/libjemalloc.so", "env TRITON_CACHE_DIR unset -> /t",
        "env EDITOR vi -> nano", "kernel 6.18.44-fc-v657-gpu -> 6.8.0-49-generic",
    ]
    assert [c.category.label for c in changes] == ["env"] * 5 + ["other"] * 2


def test_engine_libraries_in_their_listed_order():
    a = reading("idle")
    b = copy.deepcopy(a)
    b["software"]["packages"]["triton"]["version"] = "3.7.0"
    b["software"]["packages"]["flashinfer"].update(version="0.5.3", path="/venv/flashinfer")
    b["system"]["git"] = {"repo": "/src/sglang", "sha": "abc123", "dirty": False}
    assert [c.what for c in diff_snapshots(a, b)][:4] == ["flashinfer", "triton", "engine commit", "git dirty"]


def test_an_idle_gpus_clock_read_at_two_moments_is_no_difference():
    a = reading("idle")  # SM 345 MHz, reason gpu_idle
    b = copy.deepcopy(a)
    b["gpu"]["devices"][0]["sm_clock_mhz"] = 465  # idle too, read a moment later (seen on the H200)
    assert diff_snapshots(a, b) == []
    b["gpu"]["devices"][0]["clock_event_reason_names"] = ["sw_power_cap"]  # the second read under load
    assert "GPU0 sm_clock_mhz 345 -> 465" in [c.line for c in diff_snapshots(a, b)]


def test_current_clocks_within_ten_percent_are_noise():
    a = reading("load")
    b = copy.deepcopy(a)
    b["gpu"]["devices"][0]["sm_clock_mhz"] = 1400  # 3.8 % lower
    assert diff_snapshots(a, b) == []
    b["gpu"]["devices"][0]["sm_clock_mhz"] = 1200  # 17.5 % lower
    assert [c.line for c in diff_snapshots(a, b)] == ["GPU0 sm_clock_mhz 1455 -> 1200"]


def test_another_host_with_more_gpus_shows_the_count_first():
    a = reading("idle")
    b = copy.deepcopy(a)
    second = dict(copy.deepcopy(b["gpu"]["devices"][0]), index=1)
    b["gpu"]["devices"].append(second)
    b["gpu"]["device_count"] = 2
    changes = diff_snapshots(a, b)
    assert changes[0].line == "gpu device_count 1 -> 2"
    assert "GPU1 name absent -> NVIDIA H200" in [c.line for c in changes]


def test_full_against_cheap_compares_only_shared_keys():
    changes = diff_snapshots(reading("idle"), reading("load_cheap"))
    assert changes and not [c for c in changes if c.key.startswith(("software.packages", "software.torch"))]
    assert {c.category for c in changes} == {Category.CLOCKS_LINKS}


def test_a_gpu_that_appears_is_one_block_not_every_field():
    a = copy.deepcopy(reading("idle"))
    a["gpu"] = {"available": False, "reason": "NVML library not found (NVMLError_LibraryNotFound: "
                                              "NVML Shared Library Not Found)"}
    changes = diff_snapshots(a, reading("idle"))
    assert [c.what for c in changes] == ["gpu available", "gpu reason", "gpu device_count", "driver", "CUDA driver",
                                         "NVML", "gpu pynvml_version"]
    assert changes[0].line == "gpu available False -> True"


def test_flatten_turns_processes_into_a_count():
    flat = flatten_snapshot(reading("load"))
    assert flat["gpu.devices.0.compute_processes"] == 1
    assert not [k for k in flat if ".processes" in k or k.startswith("system.top_processes")]


def test_snapshot_files_and_errors(tmp_path):
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"snapshot": reading("idle"), "checks": [], "under_load": False}))
    assert load_snapshot(wrapped) == reading("idle")
    assert load_snapshot(FIXTURES / "h200_load.json")["kind"] == "full"
    with pytest.raises(SnapshotError, match=r"cannot read snapshot .*missing\.json"):
        load_snapshot(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SnapshotError, match=r"bad\.json is not JSON"):
        load_snapshot(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"gpu": {}}')
    with pytest.raises(SnapshotError, match=r"other\.json is not an env snapshot"):
        load_snapshot(tmp_path / "other.json")
    with pytest.raises(SnapshotError, match="the second snapshot is not an env snapshot"):
        diff_snapshots(reading("idle"), [1, 2])


def make_venv(root: Path, site_packages_of_engine: Path, flashinfer_version: str) -> Path:
    """A real venv that sees the engine venv's packages (a .pth file) plus its own flashinfer,
    laid out as pip installs a wheel: the package folder and its .dist-info."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "engine.pth").write_text(f"{site_packages_of_engine}\n")
    package = site / "flashinfer"
    package.mkdir()
    (package / "__init__.py").write_text(f'__version__ = "{flashinfer_version}"\n')
    info = site / f"flashinfer_python-{flashinfer_version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {flashinfer_version}\n")
    (info / "top_level.txt").write_text("flashinfer\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(
        f"flashinfer/__init__.py,,\nflashinfer_python-{flashinfer_version}.dist-info/METADATA,,\n")
    return root / "bin" / "python"


def test_two_venvs_differing_in_one_package_name_it_first(testenv, tmp_path):
    engine_site = next((testenv / "engine-venv" / "lib").glob("python3*/site-packages"))
    python_a = make_venv(tmp_path / "venv-a", engine_site, "0.5.2")
    python_b = make_venv(tmp_path / "venv-b", engine_site, "0.5.3")
    a, b = probe(str(python_a)), probe(str(python_b))
    assert a["software"]["packages"]["vllm"]["version"] == b["software"]["packages"]["vllm"]["version"] == "0.32.0"
    changes = diff_snapshots(a, b)
    first = changes[0]
    assert (first.key, first.before, first.after) == ("software.packages.flashinfer.version", "0.5.2", "0.5.3")
    assert first.line == "flashinfer 0.5.2 -> 0.5.3"
    # everything else that differs is where the venvs live, ranked last
    assert all(c.category is Category.OTHER for c in changes[1:]), [c.line for c in changes[1:]]
    assert "flashinfer path" in [c.what for c in changes[1:]]
