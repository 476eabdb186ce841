"""Benchmark: how fast the Slack bot acknowledges slash commands under a burst, while a
compare is running (the goal: p99 under 300 ms; Slack gives up at 3 s).

``specperf bot`` runs as users run it (a real process, HTTP mode) against the Slack emulator
(tests/slack_emulator.py, in this process) with the fast fake engine (tests/fake_engine_repo.py)
and a long workload, so a run is streaming tokens through the bot's own event loop the whole
time. Then, per burst, 50 signed ``/specperf compare`` POSTs are sent at once (one HTTP
connection each) and each one's time from send to the bot's HTTP 200 (the ack) is recorded.
One burst is sent with the bot idle first, for reference; then ``--bursts`` while the run is
in progress. Every command is a real compare that is queued (git resolves its ref after the
ack; the job row, audit row and parent message follow).

Run: ``.venv/bin/python -m bench.ack_latency [--bursts 3] [--out bench/ACK_RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlmodel import Session, select

import storage
from tests.bot_support import form, write_config
from tests.fake_engine_repo import make_repo
from tests.slack_emulator import SlackEmulator, signed_headers

ROOT = Path(__file__).resolve().parent.parent
SPECPERF = str(Path(sys.executable).parent / "specperf")
LONG = "output_len = 2000\nrequests = 200\nwarmup_requests = 0\nconcurrency = 2\n"


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _burst(port: int, n: int, tag: str) -> list[float]:
    url = f"http://127.0.0.1:{port}/slack/events"
    bodies = [form("compare noop --modes baseline", trigger=f"{tag}-{i}") for i in range(n)]
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        async def one(body: bytes) -> float:
            headers = signed_headers(body)
            start = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            elapsed = time.perf_counter() - start
            assert response.status_code == 200, response.text
            return elapsed * 1000

        return await asyncio.gather(*(one(b) for b in bodies))


def _row(label: str, ms: list[float]) -> str:
    return (f"| {label} | {len(ms)} | {statistics.median(ms):.0f} | {_quantile(ms, 0.95):.0f} | "
            f"{_quantile(ms, 0.99):.0f} | {max(ms):.0f} |")


def _report(args: argparse.Namespace, idle: list[float], busy: list[list[float]], queued: int) -> list[str]:
    """ACK_RESULTS.md's lines: the machine and date, the set-up, and the ack latencies (ms) of
    the idle burst and of each burst while the run was in progress."""
    flat = [ms for burst in busy for ms in burst]
    lines = [
        "# Slack bot: ack latency under a burst",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `python -m bench.ack_latency` "
        f"(--bursts {args.bursts} --commands {args.commands}).",
        f"Machine: {platform.node()}, {os.cpu_count()} vCPU ({_cpu_model()}), Python {platform.python_version()}; "
        "a shared VM: other engineers' work ran on the same two cores, so these are upper bounds.",
        "",
        "`specperf bot` (HTTP mode, SQLite) as a real process; the Slack emulator and this client in a",
        "second process; the fake engine in a third, streaming 2,000-token answers at concurrency 2",
        "to the bot's own benchmark client during the busy bursts. Each command is a real",
        "`/specperf compare` that is acked, then resolved with git, queued, audited and announced.",
        "Latency: from the signed POST to the bot's HTTP 200 (the ack), in ms.",
        "",
        "| burst | commands | p50 | p95 | p99 | max |",
        "| --- | --- | --- | --- | --- | --- |",
        _row("idle bot", idle),
        *(_row(f"busy {i + 1} (run in progress)", b) for i, b in enumerate(busy)),
        _row("all busy bursts", flat),
        "",
        f"Goal p99 < 300 ms: {'met' if _quantile(flat, 0.99) < 300 else 'NOT met'} "
        f"(busy p99 {_quantile(flat, 0.99):.0f} ms). After the bursts the run was still in progress and "
        f"{queued} jobs were queued behind it (every command queued once).",
        "",
        "Bursts are 3 s apart, so a burst can also compete with the previous bursts' after-ack work (git ref resolution, job and audit rows, the parent messages waiting their 1-per-second turn in the channel); that work runs at most 2 commands at a time in threads so that acks keep the event loop. p50 close to p99 is the event loop's round-robin: the 50 acks of a burst finish together, after the burst's total pre-ack CPU work (about 2 ms per command here).",
    ]
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--commands", type=int, default=50)
    parser.add_argument("--out", default=str(ROOT / "bench/ACK_RESULTS.md"))
    args = parser.parse_args()
    emulator = SlackEmulator()
    await emulator.start()
    tmp = Path(tempfile.mkdtemp(prefix="specperf-ack-"))
    repo = tmp / "engine-repo"
    make_repo(repo)
    with socket_port() as port:
        engine_port = port
    config = write_config(tmp, repo, engine_port, emulator.api_url, workload=LONG,
                          slack_extra="requeue_interrupted = false\n")
    config.write_text(config.read_text().replace("channel_interval_s = 0.2", "channel_interval_s = 1.0")
                      .replace("progress_interval_s = 0.5", "progress_interval_s = 2.0"))
    url = f"sqlite:///{tmp}/bot.db"
    log = open(tmp / "bot.log", "w")
    bot = subprocess.Popen([SPECPERF, "--config", str(config), "bot", "--db", url], cwd=ROOT,
                           env={**os.environ, "SPECPERF_HOME": str(tmp / "home")},
                           stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        line = await asyncio.to_thread(bot.stdout.readline)
        assert line.startswith("listening on "), line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        idle = await _burst(port, args.commands, "idle")
        await asyncio.sleep(2)
        # the run in progress: one compare streaming 2,000-token answers at concurrency 2
        async with httpx.AsyncClient() as client:
            body = form("compare slow --modes baseline", trigger="the-run")
            await client.post(f"http://127.0.0.1:{port}/slack/events", content=body, headers=signed_headers(body))
        db = storage.open_database(url)
        for _ in range(300):
            with Session(db) as session:
                trial = session.exec(select(storage.Trial).where(storage.Trial.pgid.is_not(None))).first()
            if trial is not None:
                break
            await asyncio.sleep(0.2)
        else:
            raise SystemExit("the run never launched its engine; see " + str(tmp / "bot.log"))
        await asyncio.sleep(3)  # well into the measured requests
        busy: list[list[float]] = []
        for i in range(args.bursts):
            busy.append(await _burst(port, args.commands, f"busy{i}"))
            await asyncio.sleep(3)
        with Session(db) as session:
            running = session.exec(select(storage.Run).where(storage.Run.status == "running")).all()
            queued = len(storage.list_jobs(db, ("queued",), limit=10_000))
        assert running, "the run had finished before the bursts ended: make the workload longer"
    finally:
        bot.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(bot.wait, 60)
        except subprocess.TimeoutExpired:  # never leave a bot behind
            os.killpg(bot.pid, signal.SIGKILL)
            bot.wait()
        log.close()
        await emulator.close()
    lines = _report(args, idle, busy, queued)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


class socket_port:
    """A free TCP port (bound and released)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


if __name__ == "__main__":
    asyncio.run(main())
