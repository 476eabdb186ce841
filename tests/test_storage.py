"""Storage on SQLite and on a real PostgreSQL: migrations, a whole run recorded as it goes,
and read back to the same verdicts."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

import core
import storage
from core._experiments.compare import CompareRequest, compare, resolve_refs
from tests.conftest import ROOT, local_host
from tests.fake_engine_repo import fake_engine, make_repo


def test_migrations_create_the_schema_and_are_idempotent(db_url):
    db = storage.open_database(db_url)
    assert {"runs", "arms", "trials", "env_snapshots", "verdicts", "jobs", "command_audit",
            "schedule_log", "owners", "seen_requests"} <= set(inspect(db).get_table_names())
    storage.open_database(db_url)  # a second open is a no-op upgrade
    with db.connect() as conn:
        assert conn.execute(text("select version_num from alembic_version")).scalar() == "0006"


@pytest.mark.e2e
async def test_a_compare_is_recorded_and_read_back(db_url, tmp_path, unused_tcp_port):
    repo = tmp_path / "repo"
    make_repo(repo)
    request = CompareRequest(
        engine_name="fake", engine=fake_engine(repo, unused_tcp_port, ROOT), workload_name="w",
        workload=core.WorkloadConfig(output_len=64, concurrency=2, requests=4, warmup_requests=1),
        head_ref="slow", base_ref=None, modes=["baseline"],
        settings=core.CompareConfig(min_trials=4, max_trials=4, cooldown_s=0, on_disturbed="keep", profile="always"),
        host=local_host(tmp_path / "work"),
    )
    db = storage.open_database(db_url)
    store = storage.RunStore(db)
    shas = await resolve_refs(request)
    run_id = store.create(request, *shas)
    result = await compare(request, store, shas=shas)
    stored = storage.load_run(db, run_id)
    assert stored.run.status == "done" and stored.run.finished_at is not None
    assert [t.seq for t in stored.trials] == list(range(1, 9))
    assert [t.output_tok_s for t in stored.trials if stored.arms[t.arm_id].role == "head"] == pytest.approx(
        [t.sample.output_tok_s for t in result.trials["baseline"]["head"]])
    (verdict,) = stored.verdicts
    assert verdict.verdict == result.verdicts["baseline"].verdict
    assert verdict.ci_low_pct == pytest.approx(result.verdicts["baseline"].ci_low_pct)
    assert stored.run.settings["workload"]["output_len"] == 64
    phases = [snap.phase for snap in stored.snapshots]
    # the full snapshot per arm, the files the commits differ in, one window (what the monitor
    # saw in the measured window) per trial, then the profile round (profile = "always"): this engine has no profiler endpoint, said so
    assert phases == ["arm-base", "arm-head", "commit-diff"] + ["window"] * 8 + ["profile-baseline"]
    assert all("cpu" in snap.data for snap in stored.snapshots[3:11])
    assert all(snap.trial_id is not None for snap in stored.snapshots[3:11])
    assert stored.snapshots[2].data["inert"] is None  # the commits differ in code (what changed is kept)
    profile = stored.snapshots[11]
    assert profile.trial_id is None and profile.data["status"] == "none", profile.data
    runs = storage.list_runs(db, "fake")
    assert runs[0][0].id == run_id


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://user:s3cr3t@127.0.0.1:9/nope",
    "postgresql+psycopg://127.0.0.1:9/nope?password=s3cr3t",
    "postgresql+psycopg://user:p@s3cr3t@127.0.0.1:9/nope",
])
def test_unreachable_database_is_one_clear_error_without_the_password(url):
    with pytest.raises(storage.StorageError, match=r"cannot open database postgresql\+psycopg://.*: OperationalError") as caught:
        storage.open_database(url)
    assert "s3cr3t" not in str(caught.value)


def test_sqlite_in_a_folder_that_cannot_exist():
    with pytest.raises(storage.StorageError, match="cannot open database sqlite:////proc/nope/x.db"):
        storage.open_database("sqlite:////proc/nope/x.db")


@pytest.mark.alone  # a renewal every 0.33 s, held to 0.75 s
def test_owner_liveness_by_identity_and_lease(tmp_path):
    import datetime as dt
    import subprocess
    import sys
    import time

    from sqlmodel import Session

    db = storage.open_database(f"sqlite:///{tmp_path}/owners.db")
    me = storage.identity().as_owner()
    assert storage.owner_alive(db, me)  # this process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = {**me, "instance": "gone", "pid": child.pid}
    assert not storage.owner_alive(db, gone)  # this PID namespace: its pid is gone, no lease needed
    assert not storage.owner_alive(db, {**me, "instance": "reused", "start_ticks": me["start_ticks"] + 1})
    # another PID namespace (a container): only the lease counts
    elsewhere = {**me, "instance": "elsewhere", "pid_ns": "pid:[1]", "pid": 1}
    assert not storage.owner_alive(db, elsewhere)  # it never took a lease
    now = dt.datetime.now(dt.UTC)
    with Session(db) as session:
        session.add(storage.Owner(instance="elsewhere", pid=1, host="box", boot_id=me["boot_id"], pid_ns="pid:[1]",
                                  renewed_at=now, lease_s=2.0))
        session.commit()
    assert storage.owner_alive(db, elsewhere, now + dt.timedelta(seconds=1))
    assert not storage.owner_alive(db, elsewhere, now + dt.timedelta(seconds=3))  # its lease ran out
    heartbeat = storage.keep_alive(db, lease_s=1.0)  # this process's own lease, renewed by a thread
    time.sleep(1.25)  # renewed every 0.33 s: the last renewal is newer than the first by 0.9 s or more
    with Session(db) as session:
        renewed = session.get(storage.Owner, me["instance"]).renewed_at
    assert dt.datetime.now(dt.UTC) - renewed.replace(tzinfo=dt.UTC) < dt.timedelta(seconds=0.75)
    heartbeat.stop()
    with Session(db) as session:
        assert session.get(storage.Owner, me["instance"]) is None  # released on a clean stop


@pytest.mark.e2e
def test_a_run_stored_before_answers_were_kept_still_shows(tmp_path, unused_tcp_port):
    """A run stored at schema 0005 (no outputs, categories or acceptance per position; its trials'
    requests without text) reads back and shows after the upgrade, its outputs check absent."""
    import asyncio
    import json

    from alembic import command
    from sqlmodel import Session, select

    from storage._db import _alembic_config
    from storage._models import Trial
    from tests.conftest import specperf_in_process

    repo, url = tmp_path / "repo", f"sqlite:///{tmp_path}/db.sqlite"
    make_repo(repo)
    request = CompareRequest(
        engine_name="fake", engine=fake_engine(repo, unused_tcp_port, ROOT), workload_name="w",
        workload=core.WorkloadConfig(output_len=16, concurrency=1, requests=2, warmup_requests=0),
        head_ref="slow", base_ref=None, modes=["baseline"],
        settings=core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep"),
        host=local_host(tmp_path / "work"))
    db = storage.open_database(url)
    store = storage.RunStore(db)
    shas = asyncio.run(resolve_refs(request))
    run_id = store.create(request, *shas)
    asyncio.run(compare(request, store, shas=shas))
    with Session(db) as session:  # as a specperf before 0006 stored it
        for trial in session.exec(select(Trial)):
            trial.requests = [{k: v for k, v in r.items() if k in ("ttft_ms", "e2e_ms", "tpot_ms", "output_tokens")}
                              for r in trial.requests]
            session.add(trial)
        session.commit()
    with db.begin() as connection:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "0005")
    db.dispose()
    out = specperf_in_process(["show", str(run_id), "--db", url, "--json", str(tmp_path / "r.json")], cwd=ROOT,
                              env={**__import__("os").environ, "SPECPERF_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["modes"]["baseline"]["verdict"]["outputs"] is None and report["modes"]["baseline"]["above"] == []
    assert not any(n.startswith("outputs:") for n in report["modes"]["baseline"]["notes"])
