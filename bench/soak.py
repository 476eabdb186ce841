"""Soak benchmark of the Slack bot's queue (issue 14): N commands, M disruptions (kill -9,
SIGTERM, or the database held by another process for longer than the lease), at random
moments; then every acknowledged command must have ended as exactly one finished job, one
failed with a reason, or one refused with a reason, and no engine process may be left.

``specperf bot`` runs as users run it (a real process, HTTP mode, SQLite, a 3 s owner lease)
against the Slack emulator (tests/slack_emulator.py, in this process) with the fast fake
engine (tests/fake_engine_repo.py). Each round posts a few signed ``/specperf compare``
commands (refs ``slow``, ``noop``, ``base``, ``broken``, which fails at start, and a ref that
does not exist), waits a random 1-6 s, then disrupts the bot; a killed or stopped bot is
started again for the next round. After the last round the bot runs until the queue is
empty, then the database and the process table are checked.

Run: ``.venv/bin/python -m bench.soak [--commands 18] [--rounds 6] [--seed 1] [--out bench/SOAK_RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sqlmodel import Session, select

import storage
from tests.bot_support import form, hold_sqlite, post_command, start_bot, wait_for, write_config
from tests.conftest import group_members
from tests.fake_engine_repo import make_repo
from tests.slack_emulator import SlackEmulator

LEASE_S = 3.0
REFS = ["slow", "noop", "base", "broken", "no-such-ref"]


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _rows(db, model):
    with Session(db) as session:
        return list(session.exec(select(model).order_by(model.id)))


async def _soak(args, tmp: Path, emulator: SlackEmulator) -> dict:
    rng = random.Random(args.seed)
    repo = tmp / "engine-repo"
    make_repo(repo)
    path = tmp / "bot.db"
    url = f"sqlite:///{path}"
    config = write_config(tmp, repo, 49000 + rng.randrange(900), emulator.api_url, lease_s=LEASE_S,
                          workload="output_len = 256\nrequests = 6\nwarmup_requests = 1\n",
                          slack_extra="requeue_interrupted = true\n")
    home, log = tmp / "home", open(tmp / "bot.log", "w")
    db = storage.open_database(url)
    acked, disruptions, outage_s = [], Counter(), 0.0
    per_round = [args.commands // args.rounds + (i < args.commands % args.rounds) for i in range(args.rounds)]
    proc = None
    started = time.monotonic()
    try:
        for round_, count in enumerate(per_round):
            if proc is None:
                proc, port = await start_bot(config, url, home, log)
            for i in range(count):
                text = f"compare {rng.choice(REFS)} --modes baseline"
                response, _ = await post_command(port, form(text, trigger=f"r{round_}-{i}",
                                                            response_url=emulator.response_url()))
                if response.status_code == 200 and "working on it" in response.json().get("text", ""):
                    acked.append(text)
            await asyncio.sleep(rng.uniform(1, 6))
            kind = rng.choice(["kill", "term", "outage"])
            disruptions[kind] += 1
            if kind == "outage":  # longer than the lease: the bot must stop its job, not run it twice
                seconds = rng.uniform(LEASE_S, 3 * LEASE_S)
                locker = await asyncio.to_thread(hold_sqlite, path, round(seconds, 1))
                await asyncio.to_thread(locker.wait, 60)
                outage_s += seconds
                continue
            os.kill(proc.pid, signal.SIGKILL if kind == "kill" else signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 120)
            proc = None
        if proc is None:
            proc, port = await start_bot(config, url, home, log)

        def settled():
            jobs = storage.list_jobs(db, ("queued", "running"), limit=10_000)
            commands = storage.list_commands(db, limit=10_000)
            return not jobs and all(c.result != "received" for c in commands)

        await wait_for(settled, args.settle_s, interval=1.0, what="every command answered and every job ended")
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 120)
        log.close()
    wall_s = time.monotonic() - started

    return {**_outcome(db, acked), "disruptions": disruptions, "outage_s": outage_s, "wall_s": wall_s,
            "log": (tmp / "bot.log").read_text()}


def _outcome(db, acked: list[str]) -> dict:
    """What the database holds once the soak has settled: how each acknowledged command was
    answered, the jobs, runs and launches, and the soak's checks (each ``True`` when it held)."""
    commands = storage.list_commands(db, limit=10_000)
    jobs = {j.id: j for j in _rows(db, storage.Job)}
    runs, trials = _rows(db, storage.Run), _rows(db, storage.Trial)
    answered = Counter()
    job_ids = [c.job_id for c in commands if c.result.startswith("queued job")]
    for c in commands:
        if c.result.startswith("queued job"):
            job = jobs[c.job_id]
            if job.status == "failed" and job.reason:
                why = ("its bot died twice while it ran (the one crash re-queue spent)" if "not re-queued" in job.reason
                       else job.reason.split(":")[0][:60])
                answered[f"failed: {why}"] += 1
            else:
                answered[job.status] += 1
        else:
            answered["refused: " + c.result.split(":", 1)[0]] += 1
    left = [t.pgid for t in trials if t.pgid and group_members(t.pgid)]
    checks = {
        "every acknowledged command is on disk": sorted(c.command for c in commands) == sorted(acked),
        "no command left unanswered": all(c.result != "received" for c in commands),
        "one job per queued command": len(job_ids) == len(set(job_ids)) == len(jobs),
        "every job done, or failed with a reason": all(j.status == "done" or (j.status == "failed" and j.reason)
                                                      for j in jobs.values()),
        "no run left running": all(r.status != "running" for r in runs),
        "no engine process left": not left,
        # a job carried out twice would leave two finished runs for one finished job
        "finished runs = finished jobs (none ran twice)": (sum(r.status == "done" for r in runs)
                                                           == sum(j.status == "done" for j in jobs.values())),
    }
    return {"acked": len(acked), "answered": answered, "jobs": len(jobs),
            "requeued_after_crash": sum(j.attempts for j in jobs.values()),
            "runs": Counter(r.status for r in runs), "launches": len([t for t in trials if t.pgid]), "checks": checks}


def _report(args, result: dict) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Slack bot: soak (kills, stops and database outages)", "",
        f"{now}, `python -m bench.soak --commands {args.commands} --rounds {args.rounds} --seed {args.seed}`.",
        f"Machine: {platform.node()}, {os.cpu_count()} vCPU ({_cpu_model()}), Python {platform.python_version()}; "
        "a shared VM (other work ran on the same cores).", "",
        f"`specperf bot` (HTTP, SQLite, owner lease {LEASE_S:g} s) with the fake engine; {args.rounds} rounds, each "
        "posting a few `/specperf compare` commands (refs slow, noop, base, broken, and one that does not exist), "
        "then after 1-6 s: kill -9, SIGTERM, or the database held by another process for 1-3 leases. "
        f"Then the bot ran until the queue was empty ({result['wall_s']:.0f} s in all).", "",
        "| what | count |", "| --- | --- |",
        f"| commands acknowledged | {result['acked']} |",
        *[f"| disruptions: {k} | {v} |" for k, v in sorted(result["disruptions"].items())],
        f"| database held (outages, s in all) | {result['outage_s']:.0f} |",
        *[f"| commands ended: {k} | {v} |" for k, v in sorted(result["answered"].items())],
        f"| jobs | {result['jobs']} |",
        f"| jobs re-queued after a crash (once each at most) | {result['requeued_after_crash']} |",
        *[f"| runs {k} | {v} |" for k, v in sorted(result["runs"].items())],
        f"| engine launches | {result['launches']} |", "",
        "| check | held |", "| --- | --- |",
        *[f"| {k} | {'yes' if v else '**NO**'} |" for k, v in result["checks"].items()], "",
    ]
    return "\n".join(lines)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle-s", type=float, default=900)
    parser.add_argument("--out", help="write the results (markdown) here")
    args = parser.parse_args()
    emulator = SlackEmulator()
    await emulator.start()
    try:
        with tempfile.TemporaryDirectory(prefix="specperf-soak-") as tmp:
            result = await _soak(args, Path(tmp), emulator)
    finally:
        await emulator.close()
    text = _report(args, result)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if "Traceback" in result["log"]:
        print("the bot's log has a traceback:\n" + result["log"][-3000:])
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
