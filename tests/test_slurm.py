"""Compares on a Slurm host against a real Slurm (tests/slurm_cluster.py: slurmctld and four
slurmd on loopback standing in for four nodes, two GPUs of GRES each), with the fast fake
engine (the exact-rate server from a real git repository, tests/fake_engine_repo.py): a
compare through the CLI and one through the bot each run as one Slurm job that runs both arms
on one node to a verdict, with job id and node stored and shown; a failed compare keeps its
own reason, a job whose worker never ran is failed with Slurm's; a job Slurm ends (scancel,
its time limit) leaves the run marked with Slurm's reason and no engine process; a job
specperf did not submit is never touched; a bisect runs the probes of each round as
concurrent Slurm jobs on separate nodes; a compare whose Slurm commands go over SSH to a
login node (the loopback sshd, tests/ssh_server.py) runs the same way; the fixture kills what
its jobs leave behind. Tests
run their jobs side by side (one per node) to keep the tier short. The ``slurm_cluster`` fixture marks a test ``slurm``
(tests/conftest.py); the config tests, an unreachable login node and the rules of settling a
run are in the fast tier."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import core
import storage
from bot import load_config as load_bot_config
from bot._slack.app import SlackBot
from core._experiments.compare import CompareRequest
from core._experiments.stats import NO_CHANGE, REGRESSION
from core._hosts import LocalHost, SlurmHost, SlurmJob, SshHost, open_host
from tests.bot_support import check_verdict_thread, form, post_command, wait_for, write_config
from tests.conftest import ROOT, SPECPERF, first_trial_pgid, group_members, record_verdict, stopped_at_end
from tests.fake_engine_repo import linear_history, make_repo


def slurm_host(tmp_path: Path, login: str = "") -> str:
    """The Slurm host ``cluster`` (the test cluster's partition) with ``<tmp_path>/shared`` as its
    shared folder, as TOML; ``login``: TOML lines of its SSH keys (Slurm's commands on a login
    node; ``[slurm] python`` is then this interpreter)."""
    python = f'python = "{sys.executable}"\n' if login else ""
    return (f'[hosts.cluster]\nkind = "slurm"\nworkdir = "{tmp_path}/shared"\n{login}'
            '[hosts.cluster.slurm]\npartition = "test"\ngres = "gpu:2"\ntime_limit = "00:10:00"\npoll_s = 0.5\n'
            + python)


def slurm_config(tmp_path: Path, repo_path: Path, port: int, workload: str, trials: int, login: str = "") -> Path:
    """A config whose only engine (the fake one) runs on the Slurm host ``cluster`` (``login``:
    as for :func:`slurm_host`)."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        slurm_host(tmp_path, login) +
        f'[engines.fake]\nkind = "command"\nhost = "cluster"\nrepo = "{repo_path}"\nsource_dir = "src"\n'
        f'source_package = "fake_engine"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\nstop_grace_s = 3\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n'
        '[engines.fake.modes]\nbaseline = []\nidle = ["--itl-scale", "50"]\n'
        f'[compare]\nmin_trials = {trials}\nmax_trials = {trials}\ncooldown_s = 0\non_disturbed = "keep"\n'
        f'modes = ["baseline"]\n[workloads.default]\n{workload}\n'
    )
    return config


def specperf(config: Path, tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([*SPECPERF, "--config", str(config), *args, "--db", f"sqlite:///{tmp_path}/db.sqlite"],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def check_slurm_run(stored: storage.StoredRun, cluster, shared: Path, launches: int) -> dict:
    """The run finished as one Slurm job on one node of ``cluster``: Slurm's state stored, every
    launch (both arms) recorded by the job's worker from that node's work directory."""
    slurm = stored.run.settings["slurm"]
    assert stored.run.status == "done", stored.run.reason
    assert slurm["state"] == "COMPLETED" and slurm["node"] in cluster.nodes and slurm["job_id"]
    assert stored.run.settings["client"] == "on the Slurm node, beside the engine"
    assert len([t for t in stored.trials if t.status == "ok"]) == launches
    assert {stored.arms[t.arm_id].role for t in stored.trials} == {"base", "head"}
    assert all(t.log_path.startswith(f"{shared}/nodes/{slurm['node']}/logs/") for t in stored.trials)
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)
    return slurm


async def test_a_compare_through_the_cli_and_one_through_the_bot_each_run_as_one_slurm_job(
        slurm_cluster, tmp_path, emulator, unused_tcp_port, monkeypatch, record_property):
    """The CLI's compare (4 ABBA pairs, to a REGRESSION) and the bot's (1 pair) run side by side,
    each a Slurm job on a node of its own; job id and node are in the terminal report, the
    JSON report and the Slack verdict. Beside them, two jobs that fail: a compare whose engine
    fails to start ends FAILED with the engine's words (the job itself completes); a job whose
    worker cannot start (no such interpreter on the node) leaves its run failed with Slurm's
    state and where the job's output is."""
    cli, via_bot = tmp_path / "cli", tmp_path / "bot"
    workload = "output_len = 64\nconcurrency = 2\nrequests = 4\nwarmup_requests = 1"
    for where in (cli, via_bot, tmp_path / "broken", tmp_path / "no-python"):
        make_repo(where / "repo")
    config = slurm_config(cli, cli / "repo", unused_tcp_port, workload, trials=4)
    proc = specperf(config, cli, "compare", "slow", "--json", str(cli / "report.json"))
    failing = {}
    for how, port in (("broken", unused_tcp_port + 2), ("no-python", unused_tcp_port + 3)):
        where = tmp_path / how
        failing[how] = slurm_config(where, where / "repo", port, workload, trials=2)
        if how == "no-python":
            failing[how].write_text(failing[how].read_text().replace("poll_s = 0.5\n",
                                                                     'poll_s = 0.5\npython = "/no/such/python"\n'))
        failing[how] = specperf(failing[how], where, "compare", "broken" if how == "broken" else "slow")

    monkeypatch.setenv("SPECPERF_HOME", str(via_bot / "home"))
    bot_config = write_config(via_bot, via_bot / "repo", unused_tcp_port + 1, emulator.api_url)
    bot_config.write_text(slurm_host(via_bot) + bot_config.read_text().replace(
        '[engines.fake]\nkind = "command"\n', '[engines.fake]\nkind = "command"\nhost = "cluster"\n'))
    bot = SlackBot(load_bot_config(bot_config), storage.open_database(f"sqlite:///{via_bot}/bot.db"))
    await bot.start()
    try:
        response, _ = await post_command(bot.port, form("compare slow --modes baseline"))
        assert response.status_code == 200
        job = await wait_for(lambda: next((j for j in storage.list_jobs(bot.db, ("done", "failed"))), None), 150,
                             what="the bot's job to finish")
        assert job.status == "done", job.reason
        await wait_for(lambda: emulator.recorded("files.completeUploadExternal"), 30, what="the chart upload")
        stored = check_verdict_thread(bot, emulator, job, "cluster", ("baseline",))
    finally:
        await bot.stop()
    slurm = check_slurm_run(stored, slurm_cluster, via_bot / "shared", launches=4)
    verdict = next(p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks"))
    assert f"Slurm job {slurm['job_id']} on node `{slurm['node']}`" in str(verdict.body["blocks"])

    out, err = await asyncio.to_thread(proc.communicate, timeout=150)
    assert proc.returncode == 0, out + err
    assert "the benchmark client runs on the Slurm node" in out
    assert "PENDING" in out or "RUNNING" in out  # Slurm's state was relayed while it ran
    stored = storage.load_run(storage.open_database(f"sqlite:///{cli}/db.sqlite"), 1)
    slurm = check_slurm_run(stored, slurm_cluster, cli / "shared", launches=8)
    record_verdict(record_property, "baseline", stored.verdicts[0])
    assert [v.verdict for v in stored.verdicts] == ["REGRESSION"]
    assert f"Slurm job {slurm['job_id']} on {slurm['node']}: COMPLETED" in out
    assert json.loads((cli / "report.json").read_text())["slurm"]["job_id"] == slurm["job_id"]

    for how, proc in failing.items():
        out, err = await asyncio.to_thread(proc.communicate, timeout=90)
        assert proc.returncode == 3, out + err
        run = storage.load_run(storage.open_database(f"sqlite:///{tmp_path / how}/db.sqlite"), 1).run
        assert run.status == "failed" and run.settings["slurm"]["ended"] is True
        if how == "broken":
            assert run.settings["slurm"]["state"] == "COMPLETED"
            assert "illegal memory access" in run.log_tail and not run.reason.startswith("Slurm job")
        else:
            log = run.settings["slurm"]["log"]
            assert run.reason == (f"Slurm job {run.settings['slurm']['job_id']} failed (FAILED, NonZeroExitCode) on "
                                  f"{run.settings['slurm']['node']}; the job's output: {log}")
            assert "/no/such/python" in Path(log).read_text()
            assert "/no/such/python" in run.log_tail  # the job's output, read back through the host


async def test_a_compare_whose_slurm_commands_go_over_ssh_to_a_login_node(slurm_cluster, sshd, tmp_path,
                                                                        unused_tcp_port):
    """The Slurm host reached through a login node (the loopback sshd; its exec prefix records
    each command and points Slurm's commands at the test cluster, which the submitting
    ``specperf compare`` itself cannot find: no ``SLURM_CONF`` in its environment): the compare
    reaches a verdict as one Slurm job; git, the job folder, the spec (mode 0600 on the shared
    folder) and every Slurm command went over SSH, and nothing over SSH ran on the node."""
    from tests.test_hosts import recorder

    make_repo(tmp_path / "repo")
    prefix, recorded = recorder(tmp_path)
    login = (f'ssh = "root@{sshd.address}"\nport = {sshd.port}\nknown_hosts = "{sshd.known_hosts}"\n'
             f'identity_file = "{sshd.dir / "client_key"}"\n'
             f'exec_prefix = {json.dumps([*prefix, "env", f"SLURM_CONF={slurm_cluster.conf}"])}\n')
    config = slurm_config(tmp_path, tmp_path / "repo", unused_tcp_port,
                          "output_len = 32\nconcurrency = 2\nrequests = 4\nwarmup_requests = 1", trials=2, login=login)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"} | {"SPECPERF_HOME": str(tmp_path / "home")}
    done = await asyncio.to_thread(
        subprocess.run, [*SPECPERF, "--config", str(config), "compare", "slow", "--db", f"sqlite:///{tmp_path}/db.sqlite"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    where = f"slurm test via ssh root@{sshd.address}:{sshd.port}"
    assert f"host cluster ({where}; the benchmark client runs on the Slurm node, beside the engine)" in done.stdout
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), 1)
    slurm = check_slurm_run(stored, slurm_cluster, tmp_path / "shared", launches=4)
    assert [v.mode for v in stored.verdicts] == ["baseline"] and stored.run.settings["host_where"] == where
    assert f"Slurm job {slurm['job_id']} on {slurm['node']}: COMPLETED" in done.stdout

    spec = tmp_path / "shared/jobs/run-1.json"
    assert spec.stat().st_mode & 0o777 == 0o600 and json.loads(spec.read_text())["run_id"] == 1
    commands = [json.loads(line) for line in recorded.read_text().splitlines()]
    words = [argv[argv.index("run") + 2] for argv in commands if "run" in argv]  # what the helper ran
    assert {"git", "mkdir", "sh", "sbatch", "scontrol"} <= set(words), words
    assert all(argv[:2] == ["env", f"SLURM_CONF={slurm_cluster.conf}"] for argv in commands)
    written = next(argv for argv in commands if argv[-1] == str(spec))
    assert "umask 077" in written[-3]  # the spec is created private, before its bytes are written
    assert not any("supervise" in argv for argv in commands)  # the engines ran on the node, not over SSH


async def test_a_job_slurm_ends_leaves_a_marked_run_and_no_engine(slurm_cluster, tmp_path, emulator,
                                                                  unused_tcp_port, monkeypatch):
    """Three compares as three concurrent jobs (one node each; someone else's job holds the
    fourth, and is left alone) and a fourth compare left pending for want of a node: one
    cancelled with Slurm's scancel, one ended by Slurm's time limit (shortened to zero while it
    runs, so Slurm's own time-limit check ends it within its 30-s period instead of after a
    whole minute), one running and the pending one cancelled through the bot, whose status and
    queue show Slurm's state, node and pending reason."""
    # mode idle: 10 tokens a second, so the three jobs stream without taking the machine's CPU
    workload = "output_len = 2000\nrequests = 50\nwarmup_requests = 0\n"
    foreign = slurm_cluster.run("sbatch", "--parsable", "--exclusive", "--job-name=someone-else",
                                f"--output={tmp_path}/foreign.out", "--wrap", "sleep 300", check=True).stdout.strip()
    runs = {}
    for how, port in (("scancel", unused_tcp_port), ("timeout", unused_tcp_port + 1)):
        where = tmp_path / how
        make_repo(where / "repo")
        config = slurm_config(where, where / "repo", port, workload, trials=2)
        runs[how] = (where, specperf(config, where, "compare", "slow", "--modes", "idle"))

    via_bot = tmp_path / "bot"
    make_repo(via_bot / "repo")
    monkeypatch.setenv("SPECPERF_HOME", str(via_bot / "home"))
    bot_config = write_config(via_bot, via_bot / "repo", unused_tcp_port + 2, emulator.api_url, workload=workload)
    bot_config.write_text(slurm_host(via_bot) + bot_config.read_text().replace(
        '[engines.fake]\nkind = "command"\n', '[engines.fake]\nkind = "command"\nhost = "cluster"\n').replace(
        '[engines.fake.modes]\n', '[engines.fake.modes]\nidle = ["--itl-scale", "50"]\n'))
    bot = SlackBot(load_bot_config(bot_config), storage.open_database(f"sqlite:///{via_bot}/bot.db"))
    await bot.start()
    try:
        await post_command(bot.port, form("compare slow --modes idle"))
        dbs = {how: f"sqlite:///{where}/db.sqlite" for how, (where, _) in runs.items()} | {
            "bot": f"sqlite:///{via_bot}/bot.db"}
        pgids = {how: await asyncio.to_thread(first_trial_pgid, url, 120) for how, url in dbs.items()}
        assert all(group_members(pgid) for pgid in pgids.values())
        jobs = {how: storage.load_run(storage.open_database(url), 1).run.settings["slurm"] for how, url in dbs.items()}
        await post_command(bot.port, form("compare noop --modes idle"))  # no node left: it waits in Slurm
        pending = await wait_for(lambda: next((r for r, _ in storage.list_runs(bot.db)
                                               if r.id == 2 and r.settings["slurm"]["job_id"]), None), 30,
                                 what="the second bot job's Slurm job")
        await wait_for(lambda: "Resources" in slurm_cluster.run("squeue", "-h", "-o", "%r").stdout, 30,
                       what="Slurm to say why it waits")
        for name in ("queue", "status 1"):
            await post_command(bot.port, form(name, response_url=emulator.response_url(name)))
        replies = {name: (await wait_for(lambda name=name: [c for c in emulator.recorded("response")
                                                             if c.body["name"] == name], 10))[0].body["text"]
                   for name in ("queue", "status 1")}
        running = f"Slurm job {jobs['bot']['job_id']} RUNNING on {jobs['bot']['node']}"
        assert running in replies["queue"] and running in replies["status 1"], replies
        assert f"Slurm job {pending.settings['slurm']['job_id']} PENDING (Resources)" in replies["queue"], replies

        slurm_cluster.run("scancel", jobs["scancel"]["job_id"], check=True)
        slurm_cluster.run("scontrol", "update", f"jobid={jobs['timeout']['job_id']}", "TimeLimit=0", check=True)
        for job in storage.list_jobs(bot.db, ("running",)):
            await post_command(bot.port, form(f"cancel {job.id}"))
        await wait_for(lambda: len(storage.list_jobs(bot.db, ("cancelled",))) == 2, 60, what="both bot jobs cancelled")
    finally:
        await bot.stop()
    assert "RUNNING" in slurm_cluster.run("scontrol", "-o", "show", "job", foreign).stdout  # someone else's: untouched
    slurm_cluster.run("scancel", foreign, check=True)
    expected = {"scancel": "was cancelled (scancel) (CANCELLED", "timeout": "reached its time limit (TIMEOUT, TimeLimit)",
                "bot": "was cancelled (scancel) (CANCELLED"}
    for how, url in dbs.items():
        if how in runs:
            out, err = await asyncio.to_thread(runs[how][1].communicate, timeout=90)
            assert runs[how][1].returncode == 3, out + err
        run = storage.load_run(storage.open_database(url), 1)
        assert run.run.status == "interrupted", (how, run.run.reason)
        assert run.run.reason.startswith(f"Slurm job {jobs[how]['job_id']} {expected[how]}"), run.run.reason
        assert run.run.settings["slurm"]["ended"] is True
        assert all(t.status != "running" for t in run.trials)
        assert group_members(pgids[how]) == []
        if how in runs:
            assert run.run.reason in out
    never_ran = storage.load_run(bot.db, 2).run
    assert never_ran.status == "interrupted" and "was cancelled (scancel)" in never_ran.reason


def job_times(cluster, job_id: str) -> tuple[dt.datetime, dt.datetime, str]:
    """(start, end, node) of a job as slurmctld remembers it (``MinJobAge``)."""
    fields = dict(word.partition("=")[::2] for word in
                  cluster.run("scontrol", "-o", "show", "job", job_id, check=True).stdout.split())
    return (dt.datetime.fromisoformat(fields["StartTime"]), dt.datetime.fromisoformat(fields["EndTime"]),
            fields["BatchHost"])


async def test_a_bisect_probes_each_round_as_concurrent_slurm_jobs_and_finds_the_culprit(slurm_cluster, tmp_path,
                                                                                          unused_tcp_port, record_property):
    """``specperf bisect`` on a planted 5-commit history (c4 slows decoding, c2 never starts)
    with three compares a round: round 2 probes c2, c3 and c4 side by side as three Slurm jobs
    on three nodes (their run times overlap, per Slurm), skips c2, and the final compare
    confirms c4 against its parent: three rounds instead of a sequential bisect's five. The
    node-hours used and the sequential estimate are in the terminal, the JSON report and the
    stored bisect run. ``exclusive = false`` with ``gres = "gpu:2"``: each job still holds a
    node's GPUs alone, and each engine takes a free port, which the four slurmd on one machine
    need (separate nodes would not)."""
    # c4 slows decoding by 30% and the margin is 10%: the four slurmd and their jobs share CPU 0 with
    # the rest of the suite, where a 10% plant at a 5% margin once left c3 INCONCLUSIVE twice (2026-12-05)
    shas = make_repo(tmp_path / "repo", linear_history(n=5, slow=4, broken=2, slow_itl=2.6))
    config = slurm_config(tmp_path, tmp_path / "repo", unused_tcp_port,
                          "output_len = 64\nconcurrency = 2\nrequests = 4\nwarmup_requests = 1", trials=4)
    config.write_text(config.read_text().replace(
        "poll_s = 0.5\n", "poll_s = 0.5\nexclusive = false\nbisect_parallel = 3\n").replace(
        "cooldown_s = 0\n", "cooldown_s = 0\nmargin_pct = 10.0\n"))
    proc = specperf(config, tmp_path, "bisect", "good", "c5", "--json", str(tmp_path / "bisect.json"))
    out, err = await asyncio.to_thread(proc.communicate, timeout=240)
    assert proc.returncode == 0, out + err

    report = json.loads((tmp_path / "bisect.json").read_text())
    assert report["status"] == "found" and report["culprit"] == shas["c4"] and report["confirmed"], report["message"]
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    stored = storage.load_run(db, report["run_id"]).run.settings["bisect"]
    steps = stored["steps"]
    assert [s["number"] for s in steps] == list(range(1, len(steps) + 1)) == [s["number"] for s in report["steps"]]
    by_round = {r: [s for s in steps if s["round"] == r] for r in range(1, 4)}
    for step in steps:  # the last compare of c3 (no change) and of c4 (the planted -23%)
        name = {shas["c3"]: "c3", shas["c4"]: "c4"}.get(step["head_sha"])
        if name and step.get("round") == 2:
            record_verdict(record_property, name, step)
    # (a round also holds the INCONCLUSIVE retries of its compares, each after its first try)
    assert [{s["head_sha"] for s in by_round[r]} for r in range(1, 4)] == [
        {shas["c5"]}, {shas["c2"], shas["c3"], shas["c4"]}, {shas["c4"]}]
    assert {s["head_sha"]: s["verdict"] for s in by_round[2]} == {  # the last compare of each commit decided
        shas["c2"]: None, shas["c3"]: NO_CHANGE, shas["c4"]: REGRESSION}
    assert "skipped" in next(s for s in by_round[2] if s["head_sha"] == shas["c2"])["outcome"]
    assert by_round[3][-1]["base_sha"] == shas["c3"] and by_round[3][-1]["verdict"] == REGRESSION

    # each probe ran as a Slurm job of its own; one round's jobs overlapped, each on its own node
    runs = {s["number"]: storage.load_run(db, s["compare_run_id"]) for s in steps}
    for step in steps:
        job = runs[step["number"]].run.settings["slurm"]
        assert job["ended"] and step["where"] == f"Slurm job {job['job_id']} on {job['node']}"
        assert step["node_s"] == job["run_s"] > 0
        assert all(group_members(t.pgid, t.log_path) == [] for t in runs[step["number"]].trials)
    times = [job_times(slurm_cluster, runs[s["number"]].run.settings["slurm"]["job_id"])
             for s in by_round[2] if s["kind"] == "probe"]  # the first tries, started together
    assert len({node for _, _, node in times}) == 3, times
    assert max(start for start, _, _ in times) < min(end for _, end, _ in times), times  # all three ran at once

    spend = report["spend"]
    assert stored["spend"] == spend
    assert (spend["parallel"], spend["compares"], spend["rounds"], spend["rounds_sequential"]) == (3, len(steps), 3, 5)
    mean_h = sum(s["node_s"] for s in steps) / 3600 / len(steps)
    assert spend["node_hours"] == pytest.approx(mean_h * len(steps))
    assert spend["node_hours_sequential"] == pytest.approx(mean_h * 5)
    assert spend["line"] in out and "round" in out  # the terminal table shows each step's round and job
    # the default k: the partition's node count (4 here), at most 4
    from bot import _slurm_batch as _slurm

    host = open_host("cluster", core.parse_config(slurm_host(tmp_path)).hosts["cluster"], tmp_path)
    assert await _slurm.bisect_parallel(host) == 4


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_fixture_finds_and_kills_what_its_jobs_left(slurm_cluster, tmp_path):
    """A job that leaves a detached process behind (as a crashed worker's engine would): the
    fixture's clean-up (run at teardown) finds it by its environment and kills it, and nothing
    outside the cluster's jobs."""
    pid_file = tmp_path / "orphan.pid"
    job = slurm_cluster.run("sbatch", "--parsable", "--job-name=leaves-an-orphan", f"--output={tmp_path}/job.out",
                            "--wrap", f"setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > {pid_file}",
                            check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while "COMPLETED" not in slurm_cluster.run("scontrol", "-o", "show", "job", job).stdout:
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.2)
    orphan = int(pid_file.read_text())
    bystander = subprocess.Popen(["sleep", "300"])  # this cluster's SLURM_CONF, but no job's
    try:
        assert orphan in [p.pid for p in slurm_cluster.job_processes()]
        assert orphan in slurm_cluster.kill_job_processes()
        deadline = time.monotonic() + 10
        while alive(orphan):
            assert time.monotonic() < deadline, "the orphan lives on"
            time.sleep(0.1)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_compare_followed_through_a_controller_outage_reaches_its_verdict(slurm_cluster, tmp_path, unused_tcp_port):
    """slurmctld stopped while the CLI follows its compare's job (the job runs on; scontrol
    fails with "Unable to contact slurm controller"), then started again: the CLI says once
    that Slurm cannot be asked, keeps asking, and ends with the job's verdict. Before, the
    failed scontrol read as a job Slurm had forgotten, and the run was marked failed while its
    job still ran."""
    make_repo(tmp_path / "repo")
    # mode idle: 10 tokens a second, so a launch streams for 16 s without taking the machine's CPU
    workload = "output_len = 80\nconcurrency = 1\nrequests = 2\nwarmup_requests = 0"
    config = slurm_config(tmp_path, tmp_path / "repo", unused_tcp_port, workload, trials=2)
    proc = specperf(config, tmp_path, "compare", "slow", "--modes", "idle", "--json", str(tmp_path / "report.json"))
    with stopped_at_end(proc):
        first_trial_pgid(f"sqlite:///{tmp_path}/db.sqlite", 120)
        slurm_cluster.stop_controller()
        try:  # scontrol gives up on a controller it cannot reach after 18 s here
            time.sleep(25)
        finally:
            slurm_cluster.start_controller()
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stdout + stderr
    assert stdout.count("Slurm cannot be asked now") == 1, stdout
    assert "Unable to contact slurm controller" in stdout and "unknown to Slurm" not in stdout, stdout
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), 1)
    check_slurm_run(stored, slurm_cluster, tmp_path / "shared", launches=4)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["modes"]["idle"]["verdict"]["n_pairs"] == 2 and report["slurm"]["state"] == "COMPLETED"


async def test_a_restarted_bot_follows_its_slurm_jobs_again(slurm_cluster, tmp_path, emulator, unused_tcp_port):
    """The real ``specperf bot``, stopped cleanly while two compares run as Slurm jobs, leaves
    both jobs to Slurm (nothing cancelled, nothing queued again). One ends while no bot runs;
    the restarted bot settles it from Slurm's record and posts its verdict. The other is still
    running: the restarted bot follows the same Slurm job again, relays its trials as the job
    streams them into the database, and posts its verdict in the job's thread."""
    from tests.bot_support import start_bot

    make_repo(tmp_path / "repo")
    url, home, log = f"sqlite:///{tmp_path}/bot.db", tmp_path / "home", open(tmp_path / "bot.log", "w")
    # idle: ITL x 150, so the idle compare's four launches take about 45 s of tokens on the node: trials
    # are still to come after the restart (at x 50, about 15 s, the rest tier's load once let the job
    # measure all but nothing after the restarted bot attached: no trial was left to relay, 2026-12-07)
    config = write_config(tmp_path, tmp_path / "repo", unused_tcp_port, emulator.api_url,
                          workload="output_len = 16\nrequests = 2\nwarmup_requests = 0\n", lease_s=10)
    config.write_text(slurm_host(tmp_path).replace("poll_s = 0.5\n", "poll_s = 0.5\nexclusive = false\n")
                      + config.read_text().replace('[engines.fake]\nkind = "command"\n',
                                                   '[engines.fake]\nkind = "command"\nhost = "cluster"\n').replace(
        '[engines.fake.modes]\n', '[engines.fake.modes]\nidle = ["--itl-scale", "150"]\n'))
    db = storage.open_database(url)
    proc, port = await start_bot(config, url, home, log)
    try:
        await post_command(port, form("compare slow --modes idle", trigger="long"))
        await post_command(port, form("compare noop --modes baseline", trigger="short"))
        runs = await wait_for(lambda: (r := {j.id: j.run_id for j in storage.list_jobs(db, ("running",))})
                              and len(r) == 2 and all(r.values()) and r, 30, what="both jobs' runs")
        long_run, short_run = runs[1], runs[2]
        await wait_for(lambda: all(storage.load_run(db, r).trials for r in runs.values()), 90,
                       what="both compares' first launches")
        jobs = {run_id: storage.load_run(db, run_id).run.settings["slurm"]["job_id"] for run_id in runs.values()}
        os.kill(proc.pid, signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    for run_id, job_id in jobs.items():  # left to Slurm: neither cancelled nor queued again
        assert "CANCELLED" not in slurm_cluster.run("scontrol", "-o", "show", "job", job_id).stdout
        assert storage.job_for_run(db, run_id).status == "running"
    await wait_for(lambda: "JobState=COMPLETED" in slurm_cluster.run("scontrol", "-o", "show", "job",
                                                                    jobs[short_run]).stdout, 90,
                   what="the short compare's job to end while no bot runs")
    assert "JobState=RUNNING" in slurm_cluster.run("scontrol", "-o", "show", "job", jobs[long_run]).stdout
    restarted_at = len(emulator.recorded("chat.update"))
    measured_before = len([t for t in storage.load_run(db, long_run).trials if t.status == "ok"])

    proc, port = await start_bot(config, url, home, log)
    try:
        done = await wait_for(lambda: (j := [storage.job_for_run(db, r) for r in runs.values()])
                              and all(x.status in ("done", "failed") for x in j) and j, 240, what="both jobs' ends")
        assert [j.status for j in done] == ["done", "done"], [j.reason for j in done]

        def verdicts_posted():
            return all(any(p.body.get("blocks") and p.body.get("thread_ts") == j.slack["thread_ts"]
                           for p in emulator.recorded("chat.postMessage")) for j in done)

        await wait_for(verdicts_posted, 30, what="both verdicts in their threads")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
        log.close()
    for job in done:
        run = storage.load_run(db, job.run_id)
        assert job.attempts == 0 and run.run.status == "done" and run.run.settings["slurm"]["state"] == "COMPLETED"
        assert run.run.settings["slurm"]["job_id"] == jobs[job.run_id]  # the same Slurm job, followed again
        assert [v.verdict for v in run.verdicts] and all(group_members(t.pgid, t.log_path) == [] for t in run.trials)
        thread = [p.body for p in emulator.recorded("chat.postMessage") if p.body.get("thread_ts") == job.slack["thread_ts"]]
        assert any(f"Slurm job {jobs[job.run_id]} runs on" in p["text"] for p in thread), thread
        assert any(f"follows Slurm job {jobs[job.run_id]} again" in p["text"] for p in thread), thread
        headers = [p["blocks"][0]["text"]["text"] for p in thread if p.get("blocks")]
        assert len(headers) == 1 and headers[0].startswith(run.verdicts[0].verdict), headers  # its verdict, posted
    relayed = [c.body["text"] for c in emulator.recorded("chat.update")[restarted_at:]
               if c.body["ts"] == done[0].slack["progress_ts"]]
    assert any("trial" in text for text in relayed), relayed  # the followed job's trials, relayed
    assert len([t for t in storage.load_run(db, long_run).trials if t.status == "ok"]) == 4 > measured_before
    assert len(slurm_cluster.run("squeue", "-h").stdout.split()) == 0


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
async def test_a_slurm_bisect_is_followed_across_a_bot_restart(slurm_cluster, tmp_path, emulator, unused_tcp_port,
                                                               stop):
    """``/specperf bisect`` on a Slurm host, its bot stopped while a later round's compares run
    as Slurm jobs, cleanly (SIGTERM: the bisect job is queued again at once, said in its thread)
    or killed (SIGKILL: the restarted bot queues it again, spending its one crash re-queue):
    nothing is cancelled, and the restarted bot's bisect takes every step its first attempt
    submitted (finished: its verdict; running: its job followed again) and submits only the
    steps never submitted: no compare is measured twice, and the culprit is found."""
    from tests.bot_support import start_bot

    shas = make_repo(tmp_path / "repo", linear_history(n=4, slow=3, slow_itl=2.6))  # 30% slower, 10% margin
    url, home, log = f"sqlite:///{tmp_path}/bot.db", tmp_path / "home", open(tmp_path / "bot.log", "w")
    # slow: ITL x 20, so each launch's window takes about 3 s and a compare's 8 launches 30 s or more
    config = write_config(tmp_path, tmp_path / "repo", unused_tcp_port, emulator.api_url, trials=4, lease_s=10,
                          workload="output_len = 32\nconcurrency = 2\nrequests = 4\nwarmup_requests = 1\n")
    config.write_text(slurm_host(tmp_path).replace("poll_s = 0.5\n", "poll_s = 0.5\nexclusive = false\n"
                                                                      "bisect_parallel = 2\n")
                      + config.read_text().replace('[engines.fake]\nkind = "command"\n',
                                                   '[engines.fake]\nkind = "command"\nhost = "cluster"\n').replace(
        '[engines.fake.modes]\n', '[engines.fake.modes]\nslow = ["--itl-scale", "20"]\n').replace(
        "cooldown_s = 0\n", "cooldown_s = 0\nmargin_pct = 10.0\n"))
    db = storage.open_database(url)

    def step_runs() -> list[storage.Run]:
        return [run for run, _ in storage.list_runs(db, limit=None) if run.kind == "compare"]

    proc, port = await start_bot(config, url, home, log)
    try:
        await post_command(port, form("bisect good c4 --mode slow"))
        # a later round under way: a compare after the first (confirm) running as a Slurm job, a launch started
        await wait_for(lambda: any(not r.settings["bisect"]["kind"].startswith("confirm") and r.status == "running"
                                   and r.settings["slurm"].get("job_id") and storage.load_run(db, r.id).trials
                                   for r in step_runs()), 180, what="a later round's compare under way")
        first_bisect = storage.list_jobs(db, ("running",))[0].run_id
        os.kill(proc.pid, getattr(signal, stop))
        assert await asyncio.to_thread(proc.wait, 60) == (0 if stop == "SIGTERM" else -signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
    if stop == "SIGTERM":
        (job,) = storage.list_jobs(db, ("queued",))
        assert "its Slurm jobs run on" in job.reason and job.attempts == 0, job.reason
        assert storage.load_run(db, first_bisect).run.status == "interrupted"
    else:  # left running by a dead bot: the next one reconciles it
        (job,) = storage.list_jobs(db, ("running",))
    left = {r.id: r.settings["slurm"]["job_id"] for r in step_runs()
            if r.status == "running" and r.settings["slurm"].get("job_id")}
    assert left
    for job_id in left.values():  # left to Slurm, not cancelled
        assert "CANCELLED" not in slurm_cluster.run("scontrol", "-o", "show", "job", job_id).stdout

    proc, port = await start_bot(config, url, home, log)
    try:
        done = await wait_for(lambda: (j := storage.get_job(db, job.id)).status in ("done", "failed") and j, 300,
                              what="the bisect's end after the restart")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
        log.close()
    assert done.status == "done", done.reason
    assert done.attempts == (0 if stop == "SIGTERM" else 1)  # a crash spends the one re-queue
    assert storage.load_run(db, first_bisect).run.status == "interrupted"
    bisect = storage.load_run(db, done.run_id).run
    assert bisect.id != first_bisect and bisect.settings["bisect"]["outcome"] == "found", bisect.settings["bisect"]
    assert bisect.settings["bisect"]["culprit"] == shas["c3"]
    steps = bisect.settings["bisect"]["steps"]
    runs = {r.id: r for r in step_runs()}
    taken = [s for s in steps if runs[s["compare_run_id"]].settings["bisect"].get("resumed_from") == first_bisect]
    assert {s["compare_run_id"] for s in taken} >= set(left), (steps, left)  # the running ones followed again
    for run_id, job_id in left.items():
        assert runs[run_id].settings["slurm"]["job_id"] == job_id and runs[run_id].status == "done"
    # no step was submitted twice: one Slurm job per (commits, kind) of the bisect's steps
    submitted = [(r.base_sha, r.head_sha, r.settings["bisect"]["kind"]) for r in runs.values()
                 if r.settings["slurm"].get("job_id")]
    assert sorted(submitted) == sorted((s["base_sha"], s["head_sha"], s["kind"]) for s in steps), (submitted, steps)
    thread = [p.body["text"] for p in emulator.recorded("chat.postMessage")
              if p.body.get("thread_ts") == done.slack["thread_ts"]]
    said = "its Slurm jobs run on" if stop == "SIGTERM" else "stopped while this job ran"
    assert any(said in text for text in thread), thread
    assert len(slurm_cluster.run("squeue", "-h").stdout.split()) == 0


def test_slurm_host_config_errors_name_the_fix():
    with pytest.raises(core.ConfigError, match="needs workdir"):
        core.parse_config('[hosts.c]\nkind = "slurm"\n')
    with pytest.raises(core.ConfigError, match="time_limit"):
        core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\n[hosts.c.slurm]\ntime_limit = "soon"\n')
    config = core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\n[hosts.c.slurm]\npartition = "gpu"\n'
                               'gres = "gpu:8"\naccount = "perf"\nsbatch_args = ["--reservation=r1"]\n')
    assert config.hosts["c"].slurm.sbatch_options() == [
        "--partition=gpu", "--gres=gpu:8", "--time=02:00:00", "--account=perf", "--exclusive", "--reservation=r1"]
    assert isinstance(open_host("c", config.hosts["c"], Path("/tmp")), SlurmHost)


def test_a_slurm_host_may_reach_a_login_node_over_ssh_given_the_nodes_python(tmp_path):
    """``ssh`` (and the other SSH keys) on a Slurm host: its Slurm commands go to the login
    node, so ``[slurm] python`` is required (one error naming the key, from the file and from a
    HostConfig built by hand); inside a job, on the node, it is the local machine."""
    login = ('[hosts.c]\nkind = "slurm"\nworkdir = "/shared"\nssh = "me@login"\nport = 2222\njump = "me@bastion"\n'
             'exec_prefix = ["env", "SLURM_CONF=/etc/slurm/other.conf"]\npython = "/usr/bin/python3"\n'
             '[hosts.c.slurm]\npartition = "gpu"\n')
    with pytest.raises(core.ConfigError) as refused:
        core.parse_config(login, "specperf.toml")
    assert str(refused.value).count("\n") == 0 and str(refused.value).startswith(
        "specperf.toml: hosts.c.slurm.python is required: hosts.c runs Slurm's commands over ssh on me@login")
    config = core.parse_config(login + 'python = "/shared/venv/bin/python"\n')
    cfg = config.hosts["c"]
    assert (cfg.kind, cfg.ssh, cfg.port, cfg.jump, cfg.slurm.python) == (
        "slurm", "me@login", 2222, "me@bastion", "/shared/venv/bin/python")
    host = open_host("c", cfg, tmp_path, "specperf.toml")
    assert isinstance(host, SlurmHost) and isinstance(host.control, SshHost)  # nothing connected yet
    assert not host.is_local and host.where == "slurm gpu via ssh me@login:2222"
    assert host.control.source == "specperf.toml" and host.control.workdir == "/shared"
    node = host.on_node("node3")
    assert isinstance(node.control, LocalHost) and node.is_local
    assert (node.where, node.workdir) == ("slurm gpu, node node3", "/shared/nodes/node3")
    local = open_host("cluster", core.parse_config(slurm_host(tmp_path)).hosts["cluster"], tmp_path)
    assert isinstance(local.control, LocalHost) and local.where == "slurm test"
    with pytest.raises(core.ConfigError, match=r"hosts.c.slurm.python is required"):
        open_host("c", cfg.model_copy(update={"slurm": cfg.slurm.model_copy(update={"python": None})}), tmp_path)
    guide = (ROOT / "docs/slurm.md").read_text()
    example = next(b for b in guide.split("```toml")[1:] if "ssh = " in b).split("```")[0]
    assert open_host("h200-pool", core.parse_config(example).hosts["h200-pool"], tmp_path).where == \
        "slurm h200 via ssh perf@login1.example:22"  # the guide's login-node example is a valid config


def test_an_unreachable_login_node_is_one_clear_error_and_leaves_no_run_running(tmp_path):
    """A login node at a closed port: ``specperf compare`` ends with exit status 5 and one error
    line naming the host and the address, having recorded and written nothing; a submit whose
    run is already recorded when the login node cannot be reached marks that run failed with
    the same words (no run is left "running")."""
    from bot import _slurm_batch as _slurm
    from tests.conftest import free_port, specperf_in_process

    port, known = free_port(), tmp_path / "known_hosts"
    known.write_text("")
    login = f'ssh = "root@127.0.0.1"\nport = {port}\nknown_hosts = "{known}"\nconnect_timeout_s = 5\n'
    config = slurm_config(tmp_path, tmp_path / "repo", free_port(), "requests = 2", trials=2, login=login)
    db_url = f"sqlite:///{tmp_path}/db.sqlite"
    done = specperf_in_process(["--config", config, "compare", "slow", "--db", db_url],
                               env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")})
    assert done.returncode == 5, done.stdout + done.stderr
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(
        f"host error: cannot reach host cluster (root@127.0.0.1:{port}): "), errors
    assert errors[0].endswith("check the address, port and network")
    assert not (tmp_path / "shared").exists() and not (tmp_path / "db.sqlite").exists()  # nothing written

    db = storage.open_database(db_url)

    host = open_host("cluster", core.load_config(config).hosts["cluster"], tmp_path)
    request = CompareRequest(engine_name="fake", engine=core.EngineConfig(kind="command", command=["x"]),
                                  workload_name="w", workload=core.WorkloadConfig(), head_ref="h", base_ref="b",
                                  modes=["baseline"], settings=core.CompareConfig(), host=host)
    with pytest.raises(core.HostError, match=r"cannot reach host cluster \(root@127.0.0.1:"):
        asyncio.run(_slurm.submit(db, request, ("a" * 40, "b" * 40)))
    run = storage.load_run(db, 1).run
    assert run.status == "failed" and run.reason.startswith(f"cannot reach host cluster (root@127.0.0.1:{port})")
    assert run.settings["slurm"]["job_id"] is None and not (tmp_path / "shared").exists()


async def test_a_job_specperf_did_not_submit_is_never_touched(slurm_cluster, tmp_path):
    """A held job of someone else's (it never runs, so it holds no node): specperf neither lists
    nor cancels it, even when asked for it by id."""
    foreign = slurm_cluster.run("sbatch", "--parsable", "--hold", "--job-name=someone-else", "--comment=theirs",
                                f"--output={tmp_path}/foreign.out", "--wrap", "sleep 60", check=True).stdout.strip()
    try:
        host = open_host("cluster", core.parse_config(slurm_host(tmp_path)).hosts["cluster"], tmp_path)
        assert isinstance(host, SlurmHost)
        job = await host.job(foreign)
        assert job is not None and job.state == "PENDING" and not job.ours
        assert foreign not in [j.job_id for j in await host.jobs()]
        with pytest.raises(core.HostError, match="was not submitted by specperf; not touching it"):
            await host.cancel(foreign)
        assert (await host.job(foreign)).state == "PENDING"
    finally:
        slurm_cluster.run("scancel", foreign)


class _SaidSlurm(SlurmHost):
    """A Slurm host whose ``scontrol`` answers are given (``jobs``: job id -> SlurmJob or None):
    the rules of settling a run without a cluster."""

    def __init__(self, jobs: dict, workdir: Path) -> None:
        config = core.parse_config(slurm_host(workdir)).hosts["cluster"]
        super().__init__("cluster", config, str(workdir))
        self.jobs_said, self.cancelled = jobs, []

    async def job(self, job_id):
        return self.jobs_said.get(job_id)

    async def cancel(self, job_id):
        self.cancelled.append(job_id)


async def test_settling_keeps_a_finished_run_and_marks_a_run_slurm_ended(tmp_path):
    from bot import _slurm_batch as _slurm

    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    host = _SaidSlurm({}, tmp_path)
    request = CompareRequest(engine_name="e", engine=core.EngineConfig(kind="command", command=["x"]),
                                  workload_name="w", workload=core.WorkloadConfig(), head_ref="h", base_ref="b",
                                  modes=["baseline"], settings=core.CompareConfig(), host=host)

    def run(job_id, status="running", reason=None, log="/shared/jobs/run.log"):
        run_id = storage.RunStore(db).create(request, "a" * 40, "b" * 40, {"slurm": {"job_id": job_id, "log": log}})
        if status != "running":
            storage.mark_abandoned(db, run_id, reason, status)
        return run_id

    def job(job_id, state, reason=None):
        return SlurmJob(job_id, f"specperf-run-{job_id}", f"specperf:run={job_id}", state, reason, "gpu-7")

    cases = {
        "running": (run("1"), job("1", "RUNNING")),  # still running: nothing to do
        "failed on its own": (run("2", "failed", "engine exited"), job("2", "COMPLETED")),
        "stopped by SIGTERM": (run("3", "interrupted", "Slurm signalled the job to end (job 3 on gpu-7)"),
                               job("3", "TIMEOUT", "TimeLimit")),
        "never ran": (run("4"), job("4", "FAILED", "NonZeroExitCode")),
        "forgotten": (run("5"), None),
        "not yet submitted": (run(None), None),  # its submitter (this process) is still at sbatch
    }
    host.jobs_said = {j.job_id: j for _, j in cases.values() if j}
    said = {run_id: await _slurm._settle_one(db, host, storage.load_run(db, run_id).run)
            for run_id, _ in cases.values()}
    runs = {name: storage.load_run(db, run_id).run for name, (run_id, _) in cases.items()}
    assert said[runs["running"].id] is None and runs["running"].status == "running"
    assert said[runs["failed on its own"].id] is None
    assert (runs["failed on its own"].status, runs["failed on its own"].reason) == ("failed", "engine exited")
    assert runs["failed on its own"].settings["slurm"]["ended"] is True
    assert runs["stopped by SIGTERM"].status == "interrupted"
    assert runs["stopped by SIGTERM"].reason == "Slurm job 3 reached its time limit (TIMEOUT, TimeLimit) on gpu-7"
    assert _slurm.killed_by_slurm(runs["stopped by SIGTERM"])  # the bot queues its job again once
    assert runs["never ran"].status == "failed"
    assert runs["never ran"].reason == ("Slurm job 4 failed (FAILED, NonZeroExitCode) on gpu-7; "
                                        "the job's output: /shared/jobs/run.log")
    assert runs["forgotten"].status == "failed" and "Slurm no longer knows job 5" in runs["forgotten"].reason
    assert said[runs["not yet submitted"].id] is None and runs["not yet submitted"].status == "running"
    # a run of a Slurm job is Slurm's to settle, never closed as a dead owner's
    assert storage.abandoned_runs(db, lambda owner: False) == []


def test_slurm_durations_and_which_jobs_a_restarted_bot_follows_again():
    from bot import _slurm_batch as _slurm
    from core._hosts.slurm import duration_s

    assert [duration_s(t) for t in ("1-02:03:04", "00:01:05", "02:05", "75", "", "None", "INVALID")] == [
        93784.0, 65.0, 125.0, 75.0, None, None, None]

    def run(kind="compare", job_id="12"):
        return storage.Run(id=7, kind=kind, engine_name="e", workload_name="w", host="cluster", base_ref="b",
                           base_sha="b", head_ref="h", head_sha="h", modes=["baseline"],
                           settings={"slurm": {"job_id": job_id}})

    ours = SlurmJob("12", "specperf-run-7", "specperf:run=7", "RUNNING", None, "node1")
    assert _slurm.adoptable(run(), ours) and _slurm.adoptable(run(), None)  # None: forgotten, settled as such
    assert not _slurm.adoptable(run(), SlurmJob("12", "specperf-run-8", "specperf:run=8", "RUNNING", None, None))
    assert not _slurm.adoptable(run(), SlurmJob("12", "theirs", "", "RUNNING", None, None))
    assert not _slurm.adoptable(run(kind="bisect"), ours) and not _slurm.adoptable(run(job_id=None), ours)
    assert not _slurm.adoptable(None, ours)


def test_a_slurm_bisect_takes_over_only_the_step_runs_an_interrupted_bisect_submitted(tmp_path):
    """The rules by which a bisect queued again after its bot stopped finds the compares its
    interrupted attempt submitted (storage.BisectStore with ``bot_job``): same commits, settings
    and engine, a Slurm job submitted, still running or done, and the bisect that recorded it
    interrupted, for the same bot job; once taken, a run belongs to the new bisect. A bisect job
    that has ended has the Slurm jobs of its steps that no attempt followed cancelled."""
    from bot import _slurm_batch as _slurm
    from core._experiments.bisection import BisectRequest, BisectStep

    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    host = _SaidSlurm({}, tmp_path)
    settings = core.CompareConfig(min_trials=4, max_trials=4, profile="never")
    bisect = BisectRequest(engine_name="e", engine=core.EngineConfig(kind="command", command=["x"]), workload_name="w",
                           workload=core.WorkloadConfig(), good_ref="good", bad_ref="bad", mode="baseline",
                           settings=settings, host=host)
    good, bad = "a" * 40, "b" * 40

    def step_request(compare=settings):
        return CompareRequest(engine_name="e", engine=bisect.engine, workload_name="w", workload=bisect.workload,
                              head_ref=bad, base_ref=good, modes=["baseline"], settings=compare, host=host)

    def attempt(bot_job=7):
        store = storage.BisectStore(db, bisect, compare_extra=_slurm.run_settings(), bot_job=bot_job)
        store.started(good, bad, [bad])
        return store

    step = BisectStep(1, "confirm", good, bad, 1)
    first = attempt()
    first.compare_observer(step, step_request())
    submitted = first.compare_runs[1]
    storage.update_settings(db, submitted, "slurm", {"job_id": "41"})

    while_running = attempt()  # the first bisect still runs: its step is its own
    while_running.compare_observer(step, step_request())
    assert while_running.compare_runs[1] != submitted and not while_running.resumed
    for store in (first, while_running):
        storage.mark_abandoned(db, store.run_id, "the bot that ran it stopped", "interrupted")

    elsewise = attempt()
    elsewise.compare_observer(step, step_request(settings.model_copy(update={"max_trials": 8})))
    assert elsewise.compare_runs[1] != submitted and not elsewise.resumed  # other trials: another compare
    for bot_job in (None, 8):  # the CLI's bisect; another job's bisect of the same range
        other = attempt(bot_job)
        other.compare_observer(step, step_request())
        assert other.compare_runs[1] != submitted and not other.resumed
    storage.mark_abandoned(db, elsewise.run_id, "stopped", "interrupted")

    second = attempt()
    second.compare_observer(step, step_request())
    assert second.compare_runs[1] == submitted and second.resumed == {1}  # the newest: the submitted one
    assert storage.load_run(db, submitted).run.settings["bisect"] == {
        "run_id": second.run_id, "step": 1, "kind": "confirm", "resumed_from": first.run_id}
    third = attempt()  # the second still runs: the run is its now
    third.compare_observer(step, step_request())
    assert third.compare_runs[1] != submitted and not third.resumed

    # a run never submitted (no job id), or one that ended without a verdict, is not taken
    storage.mark_abandoned(db, second.run_id, "stopped", "interrupted")
    storage.update_settings(db, submitted, "slurm", {"ended": True, "state": "CANCELLED"})  # as settle records it
    storage.mark_abandoned(db, submitted, "Slurm job 41 was cancelled (scancel)", "interrupted")
    fourth = attempt()
    fourth.compare_observer(step, step_request())
    assert fourth.compare_runs[1] != submitted and not fourth.resumed
    # record_step: a taken step measured anew gets a run of its own
    fourth.resumed.add(1)
    fourth.record_step(step, step_request())
    assert not fourth.resumed and storage.load_run(db, fourth.compare_runs[1]).run.settings["bisect"]["run_id"] == \
        fourth.run_id

    # bot job 7 has ended: the Slurm jobs of its steps still running are cancelled (of every attempt),
    # not job 8's
    storage.update_settings(db, fourth.compare_runs[1], "slurm", {"job_id": "44"})
    storage.update_settings(db, third.compare_runs[1], "slurm", {"job_id": "43"})
    storage.update_settings(db, other.compare_runs[1], "slurm", {"job_id": "48"})
    assert asyncio.run(_slurm.cancel_bisect_steps(db, host, 7)) == ["43", "44"] and host.cancelled == ["43", "44"]
