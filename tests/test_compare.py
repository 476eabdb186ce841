"""Compare end to end on a fast fake engine from a real git repository: safety of refs,
worktrees, ABBA launches, verdicts, storage, failures and interrupts."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from sqlmodel import Session, select

import core
import storage
from core._experiments.compare import CompareRequest, arm_differences, compare, resolve_refs
from core._experiments.stats import INCONCLUSIVE, NO_CHANGE, REGRESSION
from bot._runs import stored_report
from core.testing import FakeHost, fake_engine_config
from tests.conftest import (ROOT, SPECPERF, first_trial_pgid, group_members, local_host, record_verdict, specperf_in_process,
                            stopped_at_end)
from tests.fake_engine_repo import fake_engine, linear_history, make_repo

WORKLOAD = core.WorkloadConfig(output_len=128, concurrency=2, requests=8, warmup_requests=1)
# The fake engine sleeps its tokens out, so other work on a shared machine does not move it:
# trials judged disturbed are kept and named here, not re-measured (tests/test_disturbance*.py
# cover re-measuring), which keeps the launch counts these tests assert.
SETTINGS = core.CompareConfig(min_trials=4, max_trials=8, cooldown_s=0, on_disturbed="keep")


# For tests about worktrees, builds and failures, not verdicts: a launch serves two short requests.
QUICK_WORKLOAD = core.WorkloadConfig(output_len=8, concurrency=1, requests=2, warmup_requests=0)


def request_for(repo_path: Path, port: int, head: str, base: str | None, workdir: Path,
                modes=("baseline", "eagle3"), workload: core.WorkloadConfig = WORKLOAD) -> CompareRequest:
    return CompareRequest(
        engine_name="fake", engine=fake_engine(repo_path, port, ROOT), workload_name="w", workload=workload,
        head_ref=head, base_ref=base, modes=list(modes), settings=SETTINGS, host=local_host(workdir),
    )


def long_running_config(tmp_path: Path, repo_path: Path, port: int) -> Path:
    """A config whose fake engine streams long enough (50 x 2000 tokens) to be caught mid-run."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo_path}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n'
        '[engines.fake.modes]\nbaseline = []\n'
        '[compare]\nmin_trials = 2\nmax_trials = 2\ncooldown_s = 0\non_disturbed = "keep"\nmodes = ["baseline"]\n'
        '[workloads.default]\noutput_len = 2000\nrequests = 50\nwarmup_requests = 0\n'
    )
    return config


async def run(request: CompareRequest, db_url: str) -> tuple[core.CompareResult, int]:
    store = storage.RunStore(storage.open_database(db_url))
    shas = await resolve_refs(request)
    run_id = store.create(request, *shas)
    return await compare(request, store, shas=shas), run_id


@pytest.mark.e2e
@pytest.mark.alone
async def test_aa_never_reads_as_a_change(repo, tmp_path, unused_tcp_port, record_property):
    """A commit against itself, three times, both modes, within a 5% margin: never REGRESSION or
    IMPROVEMENT (what the statistics promise of an A/A: no false change), and NO CHANGE reached
    at least once (the margin is reachable here; issue 41: an A/A asserts no particular verdict
    each time). Not 2%: on a loaded 2-core machine an A/A mode read -1.3% (95% interval -2.0% to
    -0.3%) after 8 pairs (2026-12-01, load 8), which is INCONCLUSIVE at 2% and honestly so. Alone
    (its launches measure about a second each): with three test workers on one CPU, an A/A mode
    read -2.0% (-6.7% to +0.1%), INCONCLUSIVE at 5% (2026-12-02)."""
    path, shas = repo
    seen = []
    for attempt in range(3):
        request = request_for(path, unused_tcp_port, "base", "base", tmp_path / "work")
        request.settings = SETTINGS.model_copy(update={"margin_pct": 5.0})
        result, _ = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
        assert result.status == "done"
        for mode, verdict in result.verdicts.items():
            record_verdict(record_property, f"{mode}{attempt + 1}", verdict, result, mode)
            assert verdict.verdict in (NO_CHANGE, INCONCLUSIVE), (attempt, mode, verdict)
            seen.append(verdict.verdict)
    assert NO_CHANGE in seen, seen


@pytest.fixture(scope="module")
def slow_compare(tmp_path_factory):
    """One compare of ``slow`` against its parent in both modes on the fast fake engine, shared
    by the tests that read it: (repo path, {tag: SHA}, result, run id, database URL, port)."""
    from tests.conftest import free_port
    from tests.fake_engine_repo import make_repo

    root = tmp_path_factory.mktemp("slow-compare")
    shas = make_repo(root / "engine-repo")
    port, url = free_port(), f"sqlite:///{root}/db.sqlite"
    result, run_id = asyncio.run(run(request_for(root / "engine-repo", port, "slow", None, root / "work"), url))
    return root / "engine-repo", shas, result, run_id, url, port


@pytest.mark.e2e
def test_slower_commit_is_a_regression_in_both_modes(slow_compare):
    path, shas, result, run_id, url, port = slow_compare
    assert (result.base_sha, result.head_sha) == (shas["noop"], shas["slow"])  # base: first parent
    for verdict in result.verdicts.values():
        assert verdict.verdict == REGRESSION
        assert -28.0 < verdict.change_pct < -18.0  # ITL x1.3 is -23.1% tok/s
    # ABBA within each mode, the same port for every launch
    stored = storage.load_run(storage.open_database(url), run_id)
    roles = [stored.arms[t.arm_id].role for t in stored.trials if stored.arms[t.arm_id].mode == "baseline"]
    assert roles[:4] == ["base", "head", "head", "base"]
    assert all(f"--port {port}" in " ".join(t.argv) for t in stored.trials)
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)


@pytest.mark.e2e
def test_stored_run_recomputes_to_the_same_verdicts(slow_compare, tmp_path):
    path, shas, result, run_id, url, port = slow_compare
    stored = storage.load_run(storage.open_database(url), run_id)
    assert stored.run.status == "done"
    assert {v.mode: v.verdict for v in stored.verdicts} == {m: v.verdict for m, v in result.verdicts.items()}
    assert all(t.status == "ok" and t.output_tok_s > 0 and len(t.requests) == 8 for t in stored.trials)
    assert {a.role: a.imported["from_worktree"] for a in stored.arms.values()} == {"base": True, "head": True}
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    out = subprocess.run([*SPECPERF, "show", str(run_id), "--recompute", "--db", url,
                          "--json", str(tmp_path / "r.json"), "--chart", str(tmp_path / "c.png")],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    for mode, verdict in result.verdicts.items():
        recomputed = report["modes"][mode]["verdict"]
        assert recomputed["verdict"] == verdict.verdict
        assert recomputed["ci_low_pct"] == pytest.approx(verdict.ci_low_pct)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert "speedup over baseline" in out.stdout


@pytest.mark.e2e
async def test_concurrent_pairing_runs_both_arms_at_once_and_measures_them_in_turns(repo, tmp_path, unused_tcp_port,
                                                                                   record_property):
    path, shas = repo
    request = request_for(path, unused_tcp_port, "slow", None, tmp_path / "work", modes=("baseline",))
    request.settings = SETTINGS.model_copy(update={"pairing": "concurrent", "max_trials": 4})
    result, run_id = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert result.status == "done", result.reason
    verdict = result.verdicts["baseline"]
    record_verdict(record_property, "baseline", verdict, result, "baseline")
    assert verdict.verdict == REGRESSION and -28.0 < verdict.change_pct < -18.0, verdict  # ITL x1.3: -23.1%
    assert verdict.n_pairs == 4
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), run_id)
    by_seq = {t.seq: t for t in stored.trials}
    assert sorted(by_seq) == list(range(1, 9))
    for seq in (1, 3, 5, 7):  # each pair: the base on the port, the commit on the next, both alive at once
        base, head = by_seq[seq], by_seq[seq + 1]
        assert (stored.arms[base.arm_id].role, stored.arms[head.arm_id].role) == ("base", "head")
        assert f"--port {unused_tcp_port}" in " ".join(base.argv)
        assert f"--port {unused_tcp_port + 1}" in " ".join(head.argv)
        assert base.pgid != head.pgid
        assert len(base.requests) == len(head.requests) == WORKLOAD.requests
    # one window for both arms of a pair, in which neither engine is foreign to the other
    for first, second in ((1, 2), (3, 4)):
        window = result.windows[first]
        assert window is result.windows[second] and "error" not in window, window
        foreign = {p["pid"] for p in window["foreign_processes"]}  # other tests' processes may be there
        assert not foreign & {by_seq[first].pgid, by_seq[second].pgid}
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)


@pytest.mark.e2e
async def test_commit_that_fails_to_start_is_a_failed_run(repo, tmp_path, unused_tcp_port):
    path, _ = repo
    url = f"sqlite:///{tmp_path}/db.sqlite"
    result, run_id = await run(request_for(path, unused_tcp_port, "broken", None, tmp_path / "work"), url)
    assert result.status == "failed"
    assert "exited with status 1 before it was ready" in result.reason
    assert "illegal memory access" in result.log_tail
    assert result.verdicts == {}
    stored = storage.load_run(storage.open_database(url), run_id)
    assert stored.run.status == "failed" and "illegal memory access" in stored.run.log_tail
    assert stored.verdicts == []


@pytest.mark.e2e
async def test_worktrees_are_reused_and_the_checkout_untouched(repo, tmp_path, unused_tcp_port):
    path, shas = repo
    (path / "src/fake_engine.py").write_text("# the user's uncommitted edit\n")
    request = request_for(path, unused_tcp_port, "slow", None, tmp_path / "work", modes=["baseline"],
                          workload=QUICK_WORKLOAD)
    request.settings = core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep")
    await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    tree = tmp_path / "work/worktrees" / shas["slow"]
    marker = tree / "marker"
    marker.write_text("still here")
    await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert marker.exists()  # the same worktree was reused, not recreated
    assert (path / "src/fake_engine.py").read_text() == "# the user's uncommitted edit\n"
    branch = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert branch.stdout.strip() == shas["broken"]


BAD_REFS = ["HEAD; touch {canary}", "--upload-pack=touch {canary}", "$(touch {canary})", "-x", "no-such-ref",
            "HEAD`touch {canary}`"]


def _refuse_bad_ref(path: Path, tmp_path: Path, port: int, bad: str, where: str, run_cli) -> None:
    """``specperf compare`` given ``bad`` as the commit or as --base, run by ``run_cli(argv, env)``
    -> (exit status, stderr): exit 2, a git error, nothing run or stored."""
    canary = tmp_path / "canary"
    config = tmp_path / "specperf.toml"
    config.write_text(f'[engines.fake]\nkind = "command"\nrepo = "{path}"\ncommand = ["/bin/false"]\nport = {port}\n')
    ref = bad.format(canary=canary)
    args = ["--", ref] if where == "commit" else ["base", f"--base={ref}"]
    home = tmp_path / "home"
    status, stderr = run_cli(["--config", str(config), "compare", *args], {"SPECPERF_HOME": str(home)})
    assert status == 2, stderr
    assert "git error" in stderr and ("is not a git ref" in stderr or "names no commit" in stderr)
    assert not canary.exists()
    assert not (home / "work").exists() and not (home / "specperf.db").exists()  # nothing ran, nothing stored


@pytest.mark.parametrize("bad", BAD_REFS)
@pytest.mark.parametrize("where", ["commit", "--base"])
def test_bad_refs_are_rejected_before_anything_runs(repo, tmp_path, unused_tcp_port, bad, where, monkeypatch, capsys):
    """Every bad ref, through the CLI's ``main`` in this process (the console script as a
    process, its exit status and stderr, is test_a_bad_ref_stops_the_specperf_process_with_status_2)."""
    from bot.cli import main

    def run_cli(argv, env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(signal, "signal", lambda *args: None)  # main's SIGTERM handler is the process's
        status = main(argv)
        return status, capsys.readouterr().err

    _refuse_bad_ref(repo[0], tmp_path, unused_tcp_port, bad, where, run_cli)


@pytest.mark.e2e
def test_a_bad_ref_stops_the_specperf_process_with_status_2(repo, tmp_path, unused_tcp_port):
    def run_cli(argv, env):
        out = subprocess.run([*SPECPERF, *argv], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
        return out.returncode, out.stderr

    _refuse_bad_ref(repo[0], tmp_path, unused_tcp_port, BAD_REFS[0], "--base", run_cli)


@pytest.mark.e2e
def test_interrupt_stops_the_engine_and_marks_the_run(repo, tmp_path, unused_tcp_port):
    path, _ = repo
    config = long_running_config(tmp_path, path, unused_tcp_port)
    url = f"sqlite:///{tmp_path}/db.sqlite"
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "compare", "slow",
                             "--modes", "baseline", "--db", url],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with stopped_at_end(proc):
        db = storage.open_database(url)
        pgid = first_trial_pgid(url)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert group_members(pgid) == []
    with Session(db) as session:
        run = session.exec(select(storage.Run)).one()
        trial = session.exec(select(storage.Trial)).first()
    assert run.status == "interrupted"
    assert trial.status == "interrupted"


@pytest.mark.e2e
def test_a_closed_output_pipe_stops_the_engine_and_marks_the_run_interrupted(repo, tmp_path, unused_tcp_port):
    """``specperf compare ... | head -1``: the reader goes away after the first line. On 039b3a5
    specperf exited 1 without a word and left the run ``running``; now the closed pipe is an
    interruption: engines stopped, run and trial ``interrupted``, exit status 141."""
    path, _ = repo
    config = long_running_config(tmp_path, path, unused_tcp_port)
    url = f"sqlite:///{tmp_path}/db.sqlite"
    command = " ".join(shlex.quote(a) for a in [*SPECPERF, "--config", str(config), "compare", "slow", "--modes",
                                                "baseline", "--db", url])
    proc = subprocess.Popen(["bash", "-c", f"{command} | head -1 >/dev/null; exit ${{PIPESTATUS[0]}}"], cwd=ROOT,
                            env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with stopped_at_end(proc):
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141, stderr
    assert "standard output was closed" in stderr and "Traceback" not in stderr, stderr
    with Session(storage.open_database(url)) as session:
        assert session.exec(select(storage.Run)).one().status == "interrupted"
        trials = session.exec(select(storage.Trial)).all()
    assert all(t.status != "running" for t in trials)
    assert all(group_members(t.pgid) == [] for t in trials if t.pgid)


@pytest.mark.e2e
def test_a_compare_whose_engine_truncates_its_outputs_exits_with_status_4(repo, tmp_path, unused_tcp_port):
    """An invalid measurement ends the run FAILED with the exit status docs/exit-statuses.md
    gives it, 4 (039b3a5 gave every failed compare 3)."""
    path, _ = repo
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.short]\nkind = "command"\nrepo = "{path}"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "tests.exact_rate_server", "--port", "{{port}}", "--truncate-at", "4"]\n'
        f'port = {unused_tcp_port}\nenv = {{ PYTHONPATH = "{ROOT}" }}\nready_timeout_s = 20\nstop_grace_s = 3\n'
        '[engines.short.modes]\nbaseline = []\n'
        '[compare]\nmin_trials = 2\nmax_trials = 2\ncooldown_s = 0\nmodes = ["baseline"]\n'
        '[workloads.default]\noutput_len = 16\nrequests = 2\nwarmup_requests = 0\n')
    result = specperf_in_process(["--config", str(config), "compare", "slow", "--db", f"sqlite:///{tmp_path}/db.sqlite"],
                                 env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}, cwd=ROOT)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "FAILED" in result.stdout and "truncated" in result.stdout, result.stdout


@pytest.mark.e2e
def test_a_second_sigterm_cannot_leave_the_run_running(repo, tmp_path, unused_tcp_port, record_property):
    """Two SIGTERMs 20 ms apart (a supervisor's stop, then its retry): the second used to cut
    the clean-up short, leaving the run and trial ``running`` and a traceback."""
    path, _ = repo
    config = long_running_config(tmp_path, path, unused_tcp_port)
    url = f"sqlite:///{tmp_path}/db.sqlite"
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "compare", "slow", "--modes", "baseline", "--db", url],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with stopped_at_end(proc):
        pgid = first_trial_pgid(url)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        record_property("exit_s", round(time.monotonic() - signalled, 2))
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert group_members(pgid) == []
    with Session(storage.open_database(url)) as session:
        assert session.exec(select(storage.Run)).one().status == "interrupted"
        assert session.exec(select(storage.Trial)).first().status == "interrupted"


@pytest.mark.e2e
async def test_build_mode_builds_once_per_commit_and_reports_a_failed_build(repo, tmp_path, unused_tcp_port):
    path, shas = repo
    engine = fake_engine(path, unused_tcp_port, ROOT).model_copy(update={
        "source_dir": None,
        # "build" the engine by installing its source into the per-commit prefix
        "build": ["bash", "-c", "mkdir -p {prefix}/lib && cp -r {worktree}/src/. {prefix}/lib/ && echo built >> {prefix}/../count"],
        "env": {"PYTHONPATH": f"{{prefix}}/lib:{ROOT}"},
    })
    request = request_for(path, unused_tcp_port, "slow", None, tmp_path / "work", modes=["baseline"],
                          workload=QUICK_WORKLOAD)
    request.engine = engine
    request.settings = core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep")
    result, _ = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert result.status == "done", result.reason
    assert result.imported["head"]["path"] == str(tmp_path / "work/builds" / shas["slow"] / "lib/fake_engine.py")
    await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert (tmp_path / "work/builds/count").read_text().count("built") == 2  # two commits, built once each

    broken = engine.model_copy(update={"build": ["bash", "-c", "echo 'error: missing header cuda.h'; exit 7"]})
    request.engine = broken
    request.host = local_host(tmp_path / "work2")
    result, run_id = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert result.status == "failed"
    assert "the build of" in result.reason and "failed with status 7" in result.reason
    assert "missing header cuda.h" in result.log_tail


@pytest.mark.e2e
@pytest.mark.parametrize("next_command", ["compare", "measure"])
def test_a_killed_specperf_is_reconciled_at_the_next_compare(repo, tmp_path, unused_tcp_port, next_command):
    """kill -9 of a compare orphans its engine; the next command stops it (it is ours, recorded)
    before anything else. ``measure`` too: on 039b3a5 it refused, the port held by a process
    it named as someone else's."""
    path, _ = repo
    config = long_running_config(tmp_path, path, unused_tcp_port)
    url = storage.default_url(tmp_path / "home")  # measure has no --db: both use the data folder's
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    cli = [*SPECPERF, "--config", str(config), "compare", "slow"]
    proc = subprocess.Popen(cli, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = storage.open_database(url)
    pgid = first_trial_pgid(url)
    time.sleep(1.0)
    proc.kill()  # no cleanup can run: the engine is orphaned and the run says "running"
    proc.wait()
    assert group_members(pgid) != []
    # the next compare (it will find the port busy only if the orphan survives)
    config.write_text(config.read_text().replace("output_len = 2000\nrequests = 50", "output_len = 8\nrequests = 2"))
    if next_command == "measure":  # the engine from the repository's checkout (its HEAD never starts): no worktree
        subprocess.run(["git", "-C", str(path), "checkout", "-q", "base"], check=True)
        config.write_text(config.read_text().replace(f'PYTHONPATH = "{ROOT}"', f'PYTHONPATH = "{path}/src:{ROOT}"'))
        cli = [*SPECPERF, "--config", str(config), "measure", "--mode", "baseline", "--json", str(tmp_path / "m.json")]
    out = subprocess.run(cli, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "was still running and was stopped" in out.stdout
    assert group_members(pgid) == []
    with Session(db) as session:
        first = session.get(storage.Run, 1)
    assert first.status == "interrupted" and "ended without finishing" in first.reason


# The compare's logic in about a second a compare: core.testing.FakeHost runs each engine
# launch as an in-process exact-rate server whose inter-token latency the test decides, with
# real git worktrees, the real benchmark client and the real statistics. Effects are planted
# large (3x slower tokens) with a 25% margin, so the verdicts hold on a loaded machine.

FAST_WORKLOAD = core.WorkloadConfig(output_len=4, concurrency=4, requests=4, warmup_requests=0)
FAST_SETTINGS = core.CompareConfig(min_trials=4, max_trials=8, cooldown_s=0, margin_pct=25.0)


def fake_request(repo, host: FakeHost, head: str, modes=("baseline", "eagle3")) -> CompareRequest:
    path, _ = repo
    return CompareRequest(
        engine_name="fake", engine=fake_engine_config(path, {"baseline": [], "eagle3": ["--spec"]}),
        workload_name="w", workload=FAST_WORKLOAD, head_ref=head, base_ref=None, modes=list(modes),
        settings=FAST_SETTINGS, host=host,
    )


def launched(host: FakeHost, shas: dict[str, str]) -> list[tuple[str, str]]:
    """(tag, mode) of each launch on the fake host, in order."""
    tags = {sha: tag for tag, sha in shas.items()}
    return [(tags[launch.sha], "eagle3" if "--spec" in launch.argv else "baseline") for launch in host.launches]


async def test_launches_go_abba_by_mode_and_round_and_stop_once_decided(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 60.0 if launch.sha == shas["slow"] else 20.0)
    result = await compare(fake_request(repo, host, "slow"))
    assert result.status == "done", result.reason
    assert {m: v.verdict for m, v in result.verdicts.items()} == {"baseline": REGRESSION, "eagle3": REGRESSION}
    assert all(v.n_pairs == 4 for v in result.verdicts.values())  # decided at min_trials: no extra round
    abba = [("noop", "{m}"), ("slow", "{m}"), ("slow", "{m}"), ("noop", "{m}")]
    baab = [("slow", "{m}"), ("noop", "{m}"), ("noop", "{m}"), ("slow", "{m}")]  # each arm opens every other round
    rounds = [[(t, m.format(m=mode)) for mode in ("baseline", "eagle3") for t, m in order] for order in (abba, baab)]
    assert launched(host, shas) == rounds[0] + rounds[1]


async def test_an_inconclusive_mode_gets_rounds_up_to_max_trials_and_a_decided_one_stops(repo, tmp_path):
    path, shas = repo
    heads: dict[str, int] = {}

    def itl_ms(launch) -> float:
        mode = "eagle3" if "--spec" in launch.argv else "baseline"
        if launch.sha != shas["slow"]:
            return 20.0
        if mode == "eagle3":
            return 60.0
        # baseline: the commit is alternately much faster and much slower than its base, so
        # the pairs disagree and no number of them settles the verdict
        heads[mode] = heads.get(mode, 0) + 1
        return 10.0 if heads[mode] % 2 else 40.0

    host = FakeHost(tmp_path / "work", itl_ms)
    request = fake_request(repo, host, "slow")
    request.later_windows = {"baseline": 3, "eagle3": 3}  # a calibration's plan: 3 windows after the first verdict
    result = await compare(request)
    assert result.status == "done", result.reason
    baseline, eagle3 = result.verdicts["baseline"], result.verdicts["eagle3"]
    assert eagle3.verdict == REGRESSION and eagle3.n_pairs == 4
    assert baseline.verdict == INCONCLUSIVE and baseline.n_pairs == 8 == FAST_SETTINGS.max_trials
    modes = [mode for _, mode in launched(host, shas)]
    # rounds 1-2: both modes; rounds 3-4: the undecided baseline alone
    assert modes == ["baseline"] * 4 + ["eagle3"] * 4 + ["baseline"] * 4 + ["eagle3"] * 4 + ["baseline"] * 8
    # the first verdict's launches measured the workload's one window, the baseline's later ones three
    windows = {mode: [len(t.sample.window_tok_s) for t in arms["base"]] for mode, arms in result.trials.items()}
    assert windows == {"baseline": [1] * 4 + [3] * 4, "eagle3": [1] * 4}, windows
    assert result.cost()["windows"] == 2 * (4 + 12 + 4) and result.cost()["launches"] == 24


async def test_a_commit_whose_engine_never_starts_ends_the_run_as_failed(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: None if launch.sha == shas["slow"] else 20.0)
    result = await compare(fake_request(repo, host, "slow"))
    assert result.status == "failed" and result.verdicts == {}
    assert "exited with status 1 before it was ready" in result.reason
    assert "illegal memory access" in result.log_tail
    assert launched(host, shas) == [("noop", "baseline"), ("slow", "baseline")]  # nothing after the failure


def test_a_busy_host_refuses_the_run_with_a_host_error_stored_as_refused(repo, tmp_path, unused_tcp_port):
    """Issue 15 item 7: a foreign process holding the GPU is a host error (exit 5), stored as a
    refused run with its reason, and `specperf show` says so (no empty table, no chart). The
    "GPU" is a plain file named by device_paths, held open by a real process we did not launch
    through specperf."""
    path, _ = repo
    device = tmp_path / "nvidia0"
    device.write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(120)",
                               str(device)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        config = long_running_config(tmp_path, path, unused_tcp_port)
        config.write_text(config.read_text().replace('[engines.fake]\n', '[engines.fake]\nhost = "box"\n')
                          + f'[hosts.box]\ndevice_paths = ["{device}"]\nworkdir = "{tmp_path / "work"}"\n')
        url = f"sqlite:///{tmp_path}/db.sqlite"
        env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
        deadline = time.monotonic() + 10
        while (not any(f.path == str(device) for f in psutil.Process(holder.pid).open_files())
               and time.monotonic() < deadline):
            time.sleep(0.05)  # until the holder has the "device" open
        out = specperf_in_process(["--config", config, "compare", "slow", "--modes", "baseline", "--db", url],
                                  cwd=ROOT, env=env)
        assert out.returncode == 5, out.stdout + out.stderr
        assert "REFUSED" in out.stdout and f"pid {holder.pid}" in out.stdout
        stored = storage.list_runs(storage.open_database(url), None, 5)
        (run, verdicts), = stored
        assert run.status == "refused" and f"pid {holder.pid}" in run.reason and verdicts == []
        show = specperf_in_process(["--config", config, "show", run.id, "--db", url], cwd=ROOT, env=env)
        assert show.returncode == 0, show.stderr
        assert f"run {run.id} (refused)" in show.stdout and f"reason: {run.reason.splitlines()[0]}" in show.stdout
        assert "no trial was measured" in show.stdout and "chart:" not in show.stdout
    finally:
        holder.kill()
        holder.wait()


def test_arm_differences_leave_out_what_differs_by_construction():
    """Issue 15 item 7: each arm has its own worktree and build folder; only real differences remain."""
    a_sha, b_sha = "a" * 40, "b" * 40
    base = json.loads((ROOT / "tests/fixtures/nvml/h200_idle.json").read_text())
    head = json.loads(json.dumps(base))
    for snap, sha in ((base, a_sha), (head, b_sha)):
        snap["system"]["git"] = {"repo": f"/var/tmp/specperf/worktrees/{sha}", "sha": sha, "dirty": False}
        snap["software"]["env"]["PYTHONPATH"] = f"/var/tmp/specperf/worktrees/{sha}/python:/opt/extra"
        snap["software"]["python"]["executable"] = f"/var/tmp/specperf/builds/{sha}/bin/python"
    head["software"]["env"]["SGL_ENABLE_JIT_DEEPGEMM"] = "1"
    head["software"]["env"]["LD_LIBRARY_PATH"] = f"/var/tmp/specperf/builds/{b_sha}/lib:/usr/local/cuda/lib64"
    base["software"]["env"]["LD_LIBRARY_PATH"] = f"/var/tmp/specperf/builds/{a_sha}/lib"
    assert arm_differences(base, head, a_sha, b_sha) == [
        f"engine commit {a_sha} -> {b_sha}",
        f"env LD_LIBRARY_PATH /var/tmp/specperf/builds/{a_sha}/lib -> "
        f"/var/tmp/specperf/builds/{b_sha}/lib:/usr/local/cuda/lib64",
        "env SGL_ENABLE_JIT_DEEPGEMM unset -> 1",
    ]


def test_slack_shows_a_refused_run_as_refused():
    from bot._slack.blocks import failure_blocks

    blocks, text = failure_blocks("job 3, run 7", "GPU0 is held by pid 4242 (alice): python train.py", None, "REFUSED")
    assert text == "job 3, run 7 REFUSED: GPU0 is held by pid 4242 (alice): python train.py"
    assert blocks[0]["text"]["text"] == "REFUSED: job 3, run 7"


def middle_of_round_is_faster(faster: float = 0.08):
    """The fake host's ITL per launch: the second and third launch of every four (the middle of a
    sequential round of one mode) run ``faster`` quicker, whatever commit they launch: a host that
    favours a place in the round, not a change of any commit (issue 44)."""
    return lambda launch: 10.0 / (1 + faster) if launch.number % 4 in (2, 3) else 10.0


@pytest.mark.parametrize("faster", [0.08, -0.08])
async def test_a_host_that_favours_a_place_in_the_round_is_not_read_as_the_commit(tmp_path, faster):
    """Issue 44: an identical-code compare in sequential pairing read eagle3 IMPROVEMENT +9.3%.
    Planted here: the launches in the middle of each round of four are 8% faster (or slower)
    whoever they launch. With every round opened by the base (ABBA, ABBA, ...) the commit always
    held the middle and read IMPROVEMENT +8%; with the rounds alternating (ABBA, BAAB) and the
    change corrected for the place, the commit reads no change and the favour is named."""
    shas = make_repo(tmp_path / "repo", linear_history(n=1, slow=0))
    host = FakeHost(tmp_path / "work", middle_of_round_is_faster(faster))
    request = CompareRequest(
        engine_name="fake", engine=fake_engine_config(tmp_path / "repo"), workload_name="w",
        workload=core.WorkloadConfig(output_len=16, concurrency=1, requests=4, warmup_requests=0),
        head_ref="c1", base_ref="good", modes=["baseline"], host=host,
        settings=SETTINGS.model_copy(update={"margin_pct": 3.0}))
    result, run_id = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    assert result.status == "done", result.reason
    verdict = result.verdicts["baseline"]
    assert verdict.verdict in (NO_CHANGE, INCONCLUSIVE), verdict  # an A/A: no change claimed (issue 41)
    assert abs(verdict.change_pct) < 1.5, verdict
    assert verdict.position is not None and verdict.position.significant(0.05), verdict
    assert verdict.position.favour_pct == pytest.approx(100 * faster, abs=1.5), verdict.position
    assert "launches in the middle of a round read" in verdict.reason, verdict.reason
    openers = [host.launches[i].sha for i in range(0, len(host.launches), 4)]
    assert openers[:2] == [shas["good"], shas["c1"]]  # ABBA, then BAAB
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), run_id)
    report, _ = stored_report(stored, recompute=True)
    assert report["modes"]["baseline"]["verdict"]["verdict"] == verdict.verdict
    assert stored.verdicts[0].to_verdict().position == verdict.position  # stored and read back


def test_two_engines_on_one_gpu_host_each_need_a_memory_share_that_fits():
    """Concurrent pairing on a GPU host (issue 43): a vLLM mode at the default 0.9 of GPU memory
    (or any share over 0.45) is refused before anything launches, naming the option; a command
    engine, whose share specperf cannot read, is warned about."""
    from core._experiments.compare import memory_shares

    vllm = core.EngineConfig(kind="vllm", model="m", modes={"baseline": [], "eagle3": ["--speculative-config", "{}"]})
    with pytest.raises(core.ConfigError, match=r"mode 'baseline' gives each --gpu-memory-utilization 0.9 \(the default\)"):
        memory_shares(vllm, ["baseline", "eagle3"])
    fitted = vllm.model_copy(update={"args": ["--gpu-memory-utilization=0.4"]})
    assert memory_shares(fitted, ["baseline", "eagle3"]) == []
    greedy = fitted.model_copy(update={"modes": {"eagle3": ["--gpu-memory-utilization", "0.6"]}})
    with pytest.raises(core.ConfigError, match="mode 'eagle3' gives each --gpu-memory-utilization 0.6"):
        memory_shares(greedy, ["eagle3"])
    command = core.EngineConfig(kind="command", command=["serve"], modes={"baseline": []})
    (line,) = memory_shares(command, ["baseline"])
    assert "cannot read how much GPU memory a command engine takes" in line


async def test_a_change_measured_between_arms_of_the_same_code_is_the_hosts_not_the_commits(tmp_path):
    """Issue 44's compare was of a commit that changed only a README. Planted here: every launch
    of the README commit runs 30% faster (the host treating the arms differently: no commit can
    make it so). The numbers say IMPROVEMENT; the verdict says INCONCLUSIVE and why, and a
    stored run recomputes to the same."""
    shas = make_repo(tmp_path / "repo", linear_history(n=1, slow=0))
    repo = tmp_path / "repo"
    (repo / "README.md").write_text("how to read the knobs\n")
    subprocess.run(["git", "-C", str(repo), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm",
                    "docs: readme"], check=True)
    readme = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    host = FakeHost(tmp_path / "work", lambda launch: 10.0 / 1.3 if launch.sha == readme else 10.0)
    request = CompareRequest(
        engine_name="fake", engine=fake_engine_config(repo), workload_name="w",
        workload=core.WorkloadConfig(output_len=16, concurrency=1, requests=4, warmup_requests=0),
        head_ref=readme, base_ref=shas["c1"], modes=["baseline"], host=host,
        settings=SETTINGS.model_copy(update={"margin_pct": 3.0, "max_trials": 4}))
    result, run_id = await run(request, f"sqlite:///{tmp_path}/db.sqlite")
    verdict = result.verdicts["baseline"]
    assert verdict.verdict == INCONCLUSIVE, verdict
    assert re.match(r"IMPROVEMENT by the numbers \(\+\d+\.\d%\), but the commits differ only in documentation "
                    r"\(README\.md\): nothing in them can change the engine", verdict.reason), verdict.reason
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), run_id)
    report, _ = stored_report(stored, recompute=True)
    assert report["modes"]["baseline"]["verdict"]["verdict"] == INCONCLUSIVE
