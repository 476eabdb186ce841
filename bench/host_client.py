"""The benchmark client through the SSH tunnel against the client on the engine's host
(``[hosts.<name>] client = "here"`` against ``"host"``), side by side, against server-side truth.

Set-up, all on this machine: a real OpenSSH server in a network namespace of its own, joined to
this one by a veth pair (tests/ssh_server.py, as tests/test_hosts.py's second host; on
loopback where namespaces are not allowed), and the exact-rate server
(tests/exact_rate_server.py) launched through it as the engine, listening on the namespace's
own loopback. The link between specperf and the host gets an added delay from a userspace
proxy in front of sshd (a process of its own, on 127.0.0.1): each chunk read in either
direction is passed on ``delay`` ms later, plus a uniform jitter of +-``jitter`` ms, in order
(netem would be the first choice: ``tc qdisc add dev X root netem delay 5ms 1ms``, but this
kernel has no ``sch_netem``: "Specified qdisc kind is unknown"). Both delays go through a proxy
(0 ms: the proxy's own hop only), so the only difference between them is the delay.

Per added delay and concurrency, the two clients alternate, ``--reps`` runs each, against one
engine launch: ``here`` is specperf's client in this process through the SSH tunnel
(``SshHost.forward``); ``host`` is specperf's client started on the host (core/_measure/host_client/__init__.py)
sending to the engine's port there. Each run clears the server's record at the window's start
(``on_measure_start``), so the truth covers the measured requests only.

Reported per cell, the requests of all runs pooled: TTFT mean and p99, ITL mean and p99 (ms),
output tok/s (mean of the runs) and the server's truth for the same runs (tokens / first
request arrived .. last token sent), the client's error against it, and the server-side TTFT
(first token sent - request arrived), which the client's TTFT should match plus the path.

    python -m bench.host_client [--reps 3] [--delay-ms 5] [--jitter-ms 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

import core
from core._hosts import SshHost, open_host
from core._measure.client import run_workload
from core._measure.engines import adapter_for
from core._measure.host_client import run_on_host
from tests.exact_rate_server import truth_output_tok_s
from tests.ssh_server import NetnsUnavailable, SshServer

ROOT = Path(__file__).resolve().parent.parent
TTFT_MS, ITL_MS, OUTPUT_LEN = 20.0, 10.0, 64


# --- the delay proxy (a process of its own) ---------------------------------------------------


async def _proxy(target_host: str, target_port: int, delay_s: float, jitter_s: float) -> None:
    rng = random.Random(0)

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.close()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        last = 0.0
        try:
            while True:
                data = await reader.read(65536)
                # in order, as TCP delivers: never before the chunk ahead of it
                last = max(last, time.monotonic() + delay_s + rng.uniform(-jitter_s, jitter_s))
                queue.put_nowait((last, data))
                if not data:
                    break
            await sender
        except (ConnectionError, OSError):
            sender.cancel()
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True)

    listener = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(f"listening on {listener.sockets[0].getsockname()[1]}", flush=True)
    # it lives as long as its parent holds its standard input open
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    os._exit(0)


class DelayProxy:
    """``python -m bench.host_client --proxy`` in front of ``target``: ``port`` on 127.0.0.1."""

    def __init__(self, host: str, port: int, delay_ms: float, jitter_ms: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.host_client", "--proxy", host, str(port),
                                      str(delay_ms), str(jitter_ms)], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.port = int(line.split()[-1])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --- the comparison ----------------------------------------------------------------------------


def _q(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(np.percentile(arr, 99))


async def _one_run(placement: str, host: SshHost, url: str, port: int, workload: core.WorkloadConfig) -> dict:
    async with httpx.AsyncClient(base_url=url) as control:
        async def clear() -> None:
            await control.delete("/truth")

        if placement == "here":
            sample = await run_workload(url, "m", workload, on_measure_start=clear)
        else:
            sample = await run_on_host(host, f"http://127.0.0.1:{port}", "m", workload, on_measure_start=clear)
        truth = (await control.get("/truth")).json()
    assert sample.valid, sample.invalid_reasons
    assert sum(t["tokens"] for t in truth) == sample.output_tokens
    return {"placement": placement, "requests": [(r.ttft_ms, r.itl_ms) for r in sample.requests],
            "output_tok_s": sample.output_tok_s, "truth_tok_s": truth_output_tok_s(truth),
            "server_ttft_ms": [(t["first_token_s"] - t["arrival_s"]) * 1000 for t in truth],
            "measured_by": sample.measured_by}


def _cell(runs: list[dict]) -> dict:
    ttft = [r[0] for run in runs for r in run["requests"]]
    itl = [gap for run in runs for r in run["requests"] for gap in r[1]]
    tok_s = [run["output_tok_s"] for run in runs]
    truth = [run["truth_tok_s"] for run in runs]
    errors = [m / t - 1 for m, t in zip(tok_s, truth)]
    return {"ttft_ms": _q(ttft), "itl_ms": _q(itl), "output_tok_s": float(np.mean(tok_s)),
            "truth_tok_s": float(np.mean(truth)), "error_pct": 100 * float(np.mean(errors)),
            "error_pct_max": 100 * max(errors, key=abs), "tok_s_cv_pct": 100 * float(np.std(tok_s) / np.mean(tok_s)),
            "server_ttft_ms": float(np.mean([v for run in runs for v in run["server_ttft_ms"]]))}


async def compare(args: argparse.Namespace) -> tuple[list[dict], str]:
    try:
        server, network = SshServer(netns=True), "sshd in a network namespace of its own (veth pair)"
    except NetnsUnavailable as exc:
        server, network = SshServer(), f"sshd on loopback (no network namespace: {exc})"
    host_pub = (server.dir / "host_key.pub").read_text().split()[:2]
    proxies: dict[float, DelayProxy] = {}
    hosts: dict[float, SshHost] = {}
    rows = []
    try:
        for delay in (0.0, args.delay_ms):
            proxy = proxies[delay] = DelayProxy(server.address, server.port, delay, args.jitter_ms if delay else 0.0)
            known = server.dir / f"known_hosts_{proxy.port}"
            known.write_text(f"[127.0.0.1]:{proxy.port} {' '.join(host_pub)}\n")
            config = server.host_config(workdir=f"{server.dir}/remote", client="host", client_python=sys.executable)
            config = config.model_copy(update={"ssh": "root@127.0.0.1", "port": proxy.port, "known_hosts": str(known)})
            hosts[delay] = open_host(f"delay-{delay:g}ms", config, server.dir)
        port = 18000 + os.getpid() % 1000
        engine = hosts[0.0]
        argv = [sys.executable, "-m", "tests.exact_rate_server", "--port", str(port), "--ttft-ms", f"{TTFT_MS:g}",
                "--itl-ms", f"{ITL_MS:g}"]
        async with engine.launch("exact", argv, {"PYTHONPATH": str(ROOT)}, f"{server.dir}/remote/logs/exact.log",
                                 None, 3) as process:
            async with engine.forward(port) as url, httpx.AsyncClient(base_url=url) as client:
                await adapter_for(core.EngineConfig(kind="command", command=argv)).wait_ready(
                    client, 30, lambda: process.returncode, process.log_tail)
            for delay in (0.0, args.delay_ms):
                host = hosts[delay]
                async with host.forward(port) as url:
                    for concurrency in (1, 16):
                        workload = core.WorkloadConfig(output_len=OUTPUT_LEN, concurrency=concurrency,
                                                       requests=args.requests_c1 if concurrency == 1 else 3 * concurrency,
                                                       warmup_requests=concurrency)
                        runs: dict[str, list[dict]] = {"here": [], "host": []}
                        for rep in range(args.reps):
                            for placement in (("here", "host") if rep % 2 == 0 else ("host", "here")):
                                runs[placement].append(await _one_run(placement, host, url, port, workload))
                        for placement, done in runs.items():
                            rows.append({"delay_ms": delay, "jitter_ms": args.jitter_ms if delay else 0.0,
                                         "concurrency": concurrency, "client": placement, "runs": len(done),
                                         "requests": workload.requests, **_cell(done),
                                         "measured_by": done[0]["measured_by"].get("where", "here")})
                        print(f"  done: {delay:g} ms, {concurrency} streams", file=sys.stderr, flush=True)
    finally:
        for host in hosts.values():
            await host.close()
        for proxy in proxies.values():
            proxy.close()
        server.close()
    return rows, network


def table(rows: list[dict]) -> str:
    head = (f"{'delay':>8} {'streams':>7} {'client':>6} {'TTFT mean':>9} {'TTFT p99':>8} {'ITL mean':>8} "
            f"{'ITL p99':>8} {'tok/s':>8} {'truth':>8} {'error':>7} {'run CV':>6} {'srv TTFT':>8}")
    lines = [head]
    for r in rows:
        delay = f"{r['delay_ms']:g}+-{r['jitter_ms']:g}ms" if r["delay_ms"] else "0 ms"
        lines.append(f"{delay:>8} {r['concurrency']:>7} {r['client']:>6} {r['ttft_ms'][0]:>9.2f} {r['ttft_ms'][1]:>8.2f} "
                     f"{r['itl_ms'][0]:>8.2f} {r['itl_ms'][1]:>8.2f} {r['output_tok_s']:>8.1f} {r['truth_tok_s']:>8.1f} "
                     f"{r['error_pct']:>+6.2f}% {r['tok_s_cv_pct']:>5.2f}% {r['server_ttft_ms']:>8.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="runs per client and cell, alternating (default 3)")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--jitter-ms", type=float, default=1.0)
    parser.add_argument("--requests-c1", type=int, default=8, help="measured requests at 1 stream (16 streams: 48)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--proxy", nargs=4, metavar=("HOST", "PORT", "DELAY_MS", "JITTER_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        import uvloop

        host, port, delay, jitter = args.proxy
        uvloop.run(_proxy(host, int(port), float(delay) / 1000, float(jitter) / 1000))
        return
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"machine: {os.cpu_count()} CPUs ({cpu}), {platform.platform()}, Python {platform.python_version()}")
    print(f"date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}, load average before: {os.getloadavg()[0]:.2f}")
    print(f"engine: exact-rate server, TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {OUTPUT_LEN} tokens per request")
    started = time.monotonic()
    import uvloop

    rows, network = uvloop.run(compare(args))
    print(f"network: {network}; the delay: a userspace proxy in front of sshd (no netem in this kernel)")
    print(table(rows))
    print(f"load average after: {os.getloadavg()[0]:.2f}; took {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
