"""Storage on SQLite and on a real PostgreSQL: migrations, a whole run recorded as it goes,
and read back to the same verdicts."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

import core
import storage
from tests.conftest import ROOT, local_host
from tests.fake_engine_repo import fake_engine, make_repo


def test_migrations_create_the_schema_and_are_idempotent(db_url):
    db = storage.open_database(db_url)
    assert {"runs", "arms", "trials", "env_snapshots", "verdicts", "jobs", "command_audit",
            "schedule_log"} <= set(inspect(db).get_table_names())
    storage.open_database(db_url)  # a second open is a no-op upgrade
    with db.connect() as conn:
        assert conn.execute(text("select version_num from alembic_version")).scalar() == "0003"


@pytest.mark.e2e
async def test_a_compare_is_recorded_and_read_back(db_url, tmp_path, unused_tcp_port):
    repo = tmp_path / "repo"
    make_repo(repo)
    request = core.CompareRequest(
        engine_name="fake", engine=fake_engine(repo, unused_tcp_port, ROOT), workload_name="w",
        workload=core.WorkloadConfig(output_len=64, concurrency=2, requests=4, warmup_requests=1),
        head_ref="slow", base_ref=None, modes=["baseline"],
        settings=core.CompareConfig(min_trials=4, max_trials=4, cooldown_s=0), host=local_host(tmp_path / "work"),
    )
    db = storage.open_database(db_url)
    store = storage.RunStore(db)
    shas = await core.resolve_refs(request)
    run_id = store.create(request, *shas)
    result = await core.compare(request, store, shas=shas)
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
    assert phases[:2] == ["arm-base", "arm-head"] and phases.count("before") == phases.count("after") == 8
    assert all(snap.data["kind"] == "cheap" for snap in stored.snapshots[2:])
    assert all(snap.trial_id is not None for snap in stored.snapshots[2:])
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
