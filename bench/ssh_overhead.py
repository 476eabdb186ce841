"""What specperf adds to each trial on an SSH host, against the same steps on the local host.

Both hosts are this machine: the SSH one through a real OpenSSH server on loopback
(tests/ssh_server.py), so the difference is specperf's SSH path (channels, the remote helper's
interpreter start, the supervisor, the tunnel), not a network. Rounds alternate local and SSH
so machine noise falls on both alike. Per round and host, the phases of one trial:

- ``probe_before`` / ``probe_after``: the cheap probe with the engine's python (over SSH the
  script goes on standard input);
- ``launch``: from asking to the engine's pgid being known (local: Popen; SSH: the supervisor
  reports it);
- ``ready``: the engine's own start-up until it answers (the exact-rate server here, vLLM's CPU
  build with ``--vllm``): what the overhead is measured against;
- ``port_checks``: the listener checks before the launch and after ready;
- ``stop``: SIGTERM to the group until it is gone and the supervisor has said so.

Also: the first connection (once) and a bare command round trip (``true``).

    python -m bench.ssh_overhead --rounds 10 [--vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

import core
from core._env.probe import probe_async
from core._hosts import Host, open_host
from core._measure.engines import adapter_for
from tests.ssh_server import SshServer

ROOT = Path(__file__).resolve().parent.parent


def _exact_engine(port: int) -> core.EngineConfig:
    return core.EngineConfig(kind="command", port=port, python=sys.executable, stop_grace_s=5,
                             command=["{python}", "-m", "tests.exact_rate_server", "--port", "{port}"],
                             env={"PYTHONPATH": str(ROOT)})


async def _trial(host: Host, engine: core.EngineConfig, logs: str) -> dict:
    phases = {}
    t = time.perf_counter()
    await probe_async(engine.python, cheap=True, host=host)
    phases["probe_before"] = time.perf_counter() - t
    adapter = adapter_for(engine)
    t = time.perf_counter()
    await host.listeners(engine.port)
    checks = time.perf_counter() - t
    t = time.perf_counter()
    async with host.launch("bench", adapter.launch_argv("baseline"), engine.env, f"{logs}/bench-{time.time_ns()}.log",
                           str(ROOT), engine.stop_grace_s) as process, host.forward(engine.port) as url:
        phases["launch"] = time.perf_counter() - t
        t = time.perf_counter()
        async with httpx.AsyncClient(base_url=url) as client:
            await adapter.wait_ready(client, engine.ready_timeout_s, lambda: process.returncode, process.log_tail)
        phases["ready"] = time.perf_counter() - t
        t = time.perf_counter()
        await process.holds_port(engine.port)
        phases["port_checks"] = checks + time.perf_counter() - t
        t = time.perf_counter()
    phases["stop"] = time.perf_counter() - t
    t = time.perf_counter()
    await probe_async(engine.python, cheap=True, host=host)
    phases["probe_after"] = time.perf_counter() - t
    return phases


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--vllm", action="store_true", help="also time the CPU test engine's start-up (2 launches)")
    parser.add_argument("--json", help="write the raw phase times here")
    args = parser.parse_args()
    server = SshServer()
    work = Path(tempfile.mkdtemp(prefix="specperf-bench-"))
    try:
        local = open_host("local", core.HostConfig(), work / "local")
        ssh = open_host("loopback", server.host_config(workdir=str(work / "ssh")), work)
        t = time.perf_counter()
        await ssh.run(["true"])
        first_connection_s = time.perf_counter() - t
        round_trip = {name: [] for name in ("local", "ssh")}
        raw = {name: [] for name in ("local", "ssh")}
        engine = _exact_engine(free_port())
        for _ in range(args.rounds):
            for name, host in (("local", local), ("ssh", ssh)):
                t = time.perf_counter()
                await host.run(["true"])
                round_trip[name].append(time.perf_counter() - t)
                raw[name].append(await _trial(host, engine, f"{host.workdir}/logs"))
        vllm_ready = {}
        if args.vllm:
            from bot import load_config

            config = load_config()
            tiny = config.engine("tiny-vllm").model_copy(update={"port": free_port()})
            for name, host in (("local", local), ("ssh", ssh)):
                vllm_ready[name] = (await _trial(host, tiny, f"{host.workdir}/logs"))["ready"]
        await ssh.close()
    finally:
        server.close()
    report = {"first_connection_s": first_connection_s,
              "true_round_trip_s": {k: statistics.median(v) for k, v in round_trip.items()},
              "median_s": {name: {phase: statistics.median(r[phase] for r in rows) for phase in rows[0]}
                           for name, rows in raw.items()},
              "vllm_ready_s": vllm_ready}
    med = report["median_s"]
    print(f"first SSH connection: {first_connection_s * 1000:.0f} ms")
    print(f"`true` round trip: local {report['true_round_trip_s']['local'] * 1000:.1f} ms, "
          f"ssh {report['true_round_trip_s']['ssh'] * 1000:.1f} ms")
    print(f"{'phase':14} {'local ms':>10} {'ssh ms':>10} {'added ms':>10}   (median of {args.rounds} rounds)")
    added_total = 0.0
    for phase in med["local"]:
        added = med["ssh"][phase] - med["local"][phase]
        if phase != "ready":
            added_total += added
        print(f"{phase:14} {med['local'][phase] * 1000:10.1f} {med['ssh'][phase] * 1000:10.1f} {added * 1000:10.1f}")
    print(f"added per trial by SSH, engine start-up excluded: {added_total * 1000:.0f} ms")
    if vllm_ready:
        print(f"vLLM CPU test engine start-up: local {vllm_ready['local']:.1f} s, ssh {vllm_ready['ssh']:.1f} s; "
              f"the SSH overhead is {added_total / vllm_ready['local'] * 100:.1f}% of it")
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "raw": raw}, indent=2))


def free_port() -> int:
    """A TCP port free on this machine now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    asyncio.run(main())
