"""One trial through every way it can go wrong, with real processes; after each, the process
table must hold nothing of the engine's process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import ConfigError, EngineConfig, EngineError, InvalidSampleError, WorkloadConfig
from core._errors import EngineExitedError, EngineNotReadyError
from core._measure.trial import measure
from tests.conftest import ROOT, SPECPERF, group_members

WORKLOAD = WorkloadConfig(output_len=64, concurrency=2, requests=8, warmup_requests=1)


def server_engine(port: int, *server_options: str, pidfile: Path | None = None, **fields) -> EngineConfig:
    """A command engine running the exact-rate server, with a stray ``sleep`` child in its group."""
    pid = f"echo $$ > {pidfile}; " if pidfile else ""
    script = f"{pid}sleep 600 & exec {sys.executable} -m tests.exact_rate_server --port {port} " + " ".join(server_options)
    fields.setdefault("ready_timeout_s", 20)
    return EngineConfig(kind="command", command=["bash", "-c", script], port=port, stop_grace_s=3, **fields)


def assert_group_gone(pgid: int) -> None:
    assert group_members(pgid) == [], f"processes of group {pgid} survived"


def read_pid(pidfile: Path, timeout_s: float = 60.0) -> int:
    """The pid the engine wrote, polled; the wait covers specperf's own start-up as a process,
    which took more than 5 s on a loaded 2-core machine."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        time.sleep(0.05)
    raise AssertionError(f"the engine never wrote its pid within {timeout_s:g} s")


@pytest.mark.e2e
async def test_successful_trial_stops_its_whole_group(tmp_path, unused_tcp_port):
    os.chdir(ROOT)
    trial = await measure("fake", server_engine(unused_tcp_port), "baseline", "w", WORKLOAD, tmp_path)
    assert trial.sample.valid and trial.sample.output_tokens == 8 * 64
    assert trial.engine.acceptance_length is None
    assert Path(trial.log_path).exists()
    assert_group_gone(trial.pgid)


@pytest.mark.e2e
async def test_engine_that_never_gets_ready(tmp_path, unused_tcp_port):
    pidfile = tmp_path / "pid"
    engine = EngineConfig(
        kind="command", port=unused_tcp_port, ready_timeout_s=2, stop_grace_s=2,
        command=["bash", "-c", f"echo $$ > {pidfile}; echo still loading weights; sleep 600 & sleep 600"],
    )
    with pytest.raises(EngineNotReadyError, match=r"not ready after 2 s (.|\n)*still loading weights"):
        await measure("slow", engine, "baseline", "w", WORKLOAD, tmp_path)
    assert_group_gone(read_pid(pidfile))


@pytest.mark.e2e
async def test_engine_that_exits_before_ready(tmp_path, unused_tcp_port):
    engine = EngineConfig(kind="command", port=unused_tcp_port, command=["bash", "-c", "echo CUDA out of memory; exit 3"])
    with pytest.raises(EngineExitedError, match=r"exited with status 3 before it was ready(.|\n)*CUDA out of memory"):
        await measure("oom", engine, "baseline", "w", WORKLOAD, tmp_path)


# A server as transformers serve behaved on an H100 out of GPU memory (issue 43): the model's
# worker logs torch.OutOfMemoryError and dies, the HTTP server lives on answering 503.
OOM_THEN_503 = """
import http.server, sys
print("Traceback (most recent call last):", flush=True)
print('  File "serve.py", line 9, in load', flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 21.60 GiB. GPU 0 has a total capacity "
      "of 79.19 GiB of which 9.12 GiB is free.", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503); self.end_headers()
        print(f'INFO:     127.0.0.1:{self.client_address[1]} - "GET /health HTTP/1.1" 503', flush=True)
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.e2e
async def test_an_engine_out_of_memory_that_answers_503_fails_at_once_with_the_oom_line_first(tmp_path, unused_tcp_port):
    """Readiness reads the log: an out-of-memory line ends the wait long before the 120 s
    readiness timeout, the message's first line is that line, and the tail collapses the
    repeated 503 lines (on 039b3a5: the whole timeout, then twenty lines of 503 first)."""
    script = tmp_path / "oom_server.py"
    script.write_text(OOM_THEN_503)
    engine = EngineConfig(kind="command", port=unused_tcp_port, ready_timeout_s=120, stop_grace_s=2,
                          command=[sys.executable, str(script), str(unused_tcp_port)])
    started = time.monotonic()
    with pytest.raises(EngineNotReadyError) as caught:
        await measure("oom", engine, "baseline", "w", WORKLOAD, tmp_path)
    assert time.monotonic() - started < 60  # its first log read is at 5 s; far under the 120 s timeout
    first = str(caught.value).splitlines()[0]
    assert first.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 21.60 GiB"), first
    tail = caught.value.log_tail.splitlines()
    assert sum("503" in line for line in tail) == 1 and "... (the line above" in tail[-1], tail


@pytest.mark.e2e
async def test_engine_that_dies_mid_run(tmp_path, unused_tcp_port):
    os.chdir(ROOT)
    pidfile = tmp_path / "pid"
    engine = server_engine(unused_tcp_port, "--itl-ms", "2", "--exit-at", "300", pidfile=pidfile)
    with pytest.raises(EngineExitedError, match="exited with status 17 during the measurement"):
        await measure("dies", engine, "baseline", "w", WORKLOAD, tmp_path)
    assert_group_gone(read_pid(pidfile))


@pytest.mark.e2e
async def test_truncated_response_is_one_clear_error(tmp_path, unused_tcp_port):
    os.chdir(ROOT)
    pidfile = tmp_path / "pid"
    engine = server_engine(unused_tcp_port, "--itl-ms", "1", "--truncate-at", "64", pidfile=pidfile)
    workload = WorkloadConfig(output_len=128, concurrency=1, requests=2, warmup_requests=0)
    with pytest.raises(InvalidSampleError, match="returned 64 of 128 tokens") as caught:
        await measure("short", engine, "baseline", "w", workload, tmp_path)
    assert len(caught.value.sample.requests) == 2
    assert_group_gone(read_pid(pidfile))


async def test_port_taken_by_someone_else_is_left_alone(tmp_path, exact_server):
    foreign = exact_server()
    engine = server_engine(foreign.port)
    with pytest.raises(EngineError, match=f"port {foreign.port} on host local is already in use by pid [0-9]+ "):
        await measure("x", engine, "baseline", "w", WORKLOAD, tmp_path)
    assert foreign.proc.poll() is None  # never kill what we did not start


async def test_unknown_mode_and_missing_program(tmp_path, unused_tcp_port):
    engine = EngineConfig(kind="command", port=unused_tcp_port, command=["/no/such/engine"])
    with pytest.raises(ConfigError, match="no mode 'eagle3' .*its modes: baseline"):
        await measure("x", engine, "eagle3", "w", WORKLOAD, tmp_path)
    with pytest.raises(EngineError, match="cannot start engine 'x': /no/such/engine"):
        await measure("x", engine, "baseline", "w", WORKLOAD, tmp_path)


def _write_config(path: Path, command: list[str], port: int, ready_timeout_s: int = 30) -> None:
    path.write_text(
        f"[engines.fake]\nkind = \"command\"\ncommand = {json.dumps(command)}\nport = {port}\n"
        f"ready_timeout_s = {ready_timeout_s}\nstop_grace_s = 3\n"
        "[workloads.default]\noutput_len = 32\nconcurrency = 4\nrequests = 8\nwarmup_requests = 1\n"
    )


def _cli(config: Path, tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    return subprocess.Popen([*SPECPERF, "--config", str(config), "measure", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.e2e
def test_cli_measure_prints_a_table_and_writes_json(tmp_path, unused_tcp_port):
    config = tmp_path / "specperf.toml"
    _write_config(config, [sys.executable, "-m", "tests.exact_rate_server", "--port", "{port}", "--itl-ms", "2"],
                  unused_tcp_port)
    out = tmp_path / "result.json"
    proc = _cli(config, tmp_path, "--json", str(out))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "output tok/s (client)" in stdout
    result = json.loads(out.read_text())
    assert result["client"]["output_tokens"] == 8 * 32
    assert result["client"]["valid"] is True
    assert len(result["requests"]) == 8
    assert_group_gone(result["pgid"])


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_cli_stops_the_engine(tmp_path, unused_tcp_port, sig):
    pidfile = tmp_path / "pid"
    config = tmp_path / "specperf.toml"
    _write_config(config, ["bash", "-c", f"echo $$ > {pidfile}; sleep 600 & sleep 600"], unused_tcp_port, 300)
    proc = _cli(config, tmp_path)
    pgid = read_pid(pidfile)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert_group_gone(pgid)


@pytest.mark.e2e
async def test_a_server_that_is_not_ours_is_never_measured(tmp_path, exact_server, unused_tcp_port):
    pidfile = tmp_path / "pid"
    # the engine never binds its port; a foreign server takes it right after the launch
    engine = EngineConfig(kind="command", port=unused_tcp_port, ready_timeout_s=20, stop_grace_s=2,
                          command=["bash", "-c", f"echo $$ > {pidfile}; exec sleep 600"])
    foreign = []
    with pytest.raises(EngineError, match=f"port {unused_tcp_port} on host local is answered by pid [0-9]+ .*not by the engine"):
        await measure("x", engine, "baseline", "w", WORKLOAD, tmp_path,
                      on_launch=lambda process: foreign.append(exact_server("--port", str(unused_tcp_port))))
    assert foreign[0].proc.poll() is None  # the foreign server is left alone
    assert_group_gone(read_pid(pidfile))


@pytest.mark.e2e
def test_a_second_interrupt_cannot_cut_the_stop_short(tmp_path, unused_tcp_port):
    pidfile = tmp_path / "pid"
    config = tmp_path / "specperf.toml"
    # an engine that ignores SIGTERM: only the SIGKILL after the grace period stops it
    _write_config(config, ["bash", "-c", f"trap '' TERM; echo $$ > {pidfile}; sleep 600 & wait"], unused_tcp_port, 300)
    config.write_text(config.read_text().replace("stop_grace_s = 3", "stop_grace_s = 4"))
    proc = _cli(config, tmp_path)
    pgid = read_pid(pidfile)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert_group_gone(pgid)


@pytest.mark.parametrize(("options", "method", "expected"), [
    ((), "probe", "ignore_eos"),  # vLLM and SGLang accept ignore_eos
    (("--reject-fields", "ignore_eos"), "probe", "min_tokens"),
    (("--reject-fields", "ignore_eos,min_tokens"), "probe", "max_tokens"),  # transformers serve
    (("--reject-fields", "ignore_eos"), "min_tokens", "min_tokens"),  # configured: no probing
])
async def test_readiness_finds_how_the_server_holds_the_length(tmp_path, unused_tcp_port, options, method, expected):
    """Issue 15 item 8: a server that answers 422 to ignore_eos is asked with min_tokens, then
    max_tokens alone; the trial's requests then carry only what the server accepts."""
    os.chdir(ROOT)
    engine = server_engine(unused_tcp_port, "--itl-ms", "1", *options, output_length=method)
    trial = await measure("other", engine, "baseline", "w", WORKLOAD, tmp_path)
    assert trial.length_method == expected
    assert trial.sample.valid and trial.sample.output_tokens == 8 * 64
    assert_group_gone(trial.pgid)


async def test_max_tokens_only_server_whose_model_stops_early_invalidates_the_launch(tmp_path, unused_tcp_port):
    os.chdir(ROOT)
    engine = server_engine(unused_tcp_port, "--itl-ms", "1", "--reject-fields", "ignore_eos,min_tokens",
                           "--eos-at", "40", "--no-done")
    with pytest.raises(InvalidSampleError, match="returned 40 of 64 tokens"):
        await measure("other", engine, "baseline", "w", WORKLOAD, tmp_path)
