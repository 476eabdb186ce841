"""Compares on a Slurm host against a real Slurm (tests/slurm_cluster.py: slurmctld and two
slurmd on loopback, two GPUs of GRES each), with the fast fake engine (the exact-rate server
from a real git repository, tests/fake_engine_repo.py): a compare through the CLI is one
Slurm job that runs both arms on one node to a verdict, with job id and node stored and
shown; a job Slurm ends (scancel, its time limit) leaves the run marked with Slurm's reason
and no engine process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import core
import storage
from tests.conftest import ROOT, SPECPERF, first_trial_pgid, group_members
from tests.fake_engine_repo import make_repo

pytestmark = pytest.mark.slurm


def slurm_config(tmp_path: Path, repo_path: Path, port: int, workload: str, trials: int) -> Path:
    """A config whose only engine (the fake one) runs on the Slurm host ``cluster``."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[hosts.cluster]\nkind = "slurm"\nworkdir = "{tmp_path}/shared"\n'
        '[hosts.cluster.slurm]\npartition = "test"\ngres = "gpu:2"\ntime_limit = "00:10:00"\npoll_s = 0.5\n'
        f'[engines.fake]\nkind = "command"\nhost = "cluster"\nrepo = "{repo_path}"\nsource_dir = "src"\n'
        f'source_package = "fake_engine"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\nstop_grace_s = 3\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n'
        '[engines.fake.modes]\nbaseline = []\n'
        f'[compare]\nmin_trials = {trials}\nmax_trials = {trials}\ncooldown_s = 0\non_disturbed = "keep"\n'
        f'modes = ["baseline"]\n[workloads.default]\n{workload}\n'
    )
    return config


def specperf(config: Path, tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([*SPECPERF, "--config", str(config), *args, "--db", f"sqlite:///{tmp_path}/db.sqlite"],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_a_compare_is_one_slurm_job_on_one_node_to_a_verdict(slurm_cluster, tmp_path, unused_tcp_port):
    repo_path = tmp_path / "repo"
    make_repo(repo_path)
    config = slurm_config(tmp_path, repo_path, unused_tcp_port,
                          "output_len = 128\nconcurrency = 2\nrequests = 8\nwarmup_requests = 1", trials=4)
    proc = specperf(config, tmp_path, "compare", "slow", "--json", str(tmp_path / "report.json"))
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, out + err
    assert "the benchmark client runs on the Slurm node" in out
    assert "PENDING" in out or "RUNNING" in out  # Slurm's state was relayed while it ran
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/db.sqlite"), 1)
    slurm = stored.run.settings["slurm"]
    assert stored.run.status == "done"
    assert slurm["state"] == "COMPLETED" and slurm["node"] in slurm_cluster.nodes and slurm["job_id"]
    assert f"Slurm job {slurm['job_id']} on {slurm['node']}: COMPLETED" in out
    assert [v.verdict for v in stored.verdicts] == ["REGRESSION"]
    assert len([t for t in stored.trials if t.status == "ok"]) == 8  # both arms, ABBA, in the one job
    # the job's worker wrote its trials from the node's work directory on the shared folder
    assert all(t.log_path.startswith(f"{tmp_path}/shared/nodes/{slurm['node']}/logs/") for t in stored.trials)
    assert '"slurm"' in (tmp_path / "report.json").read_text()


def test_a_job_slurm_ends_leaves_a_marked_run_and_no_engine(slurm_cluster, tmp_path, unused_tcp_port):
    """Two compares as two concurrent jobs (one node each): one cancelled with scancel, one
    ended by Slurm's time limit (shortened to zero while it runs, so Slurm's own time-limit
    check ends it within its 30-s period instead of after a whole minute)."""
    repo_path = tmp_path / "repo"
    make_repo(repo_path)
    workload = "output_len = 2000\nrequests = 50\nwarmup_requests = 0"
    runs = {}
    for how, port in (("scancel", unused_tcp_port), ("timeout", unused_tcp_port + 1)):
        where = tmp_path / how
        where.mkdir()
        config = slurm_config(where, repo_path, port, workload, trials=2)
        runs[how] = (where, specperf(config, where, "compare", "slow"))
    pgids = {how: first_trial_pgid(f"sqlite:///{where}/db.sqlite", timeout_s=60) for how, (where, _) in runs.items()}
    jobs = {how: storage.load_run(storage.open_database(f"sqlite:///{where}/db.sqlite"), 1).run.settings["slurm"]
            for how, (where, _) in runs.items()}
    assert group_members(pgids["scancel"]) and group_members(pgids["timeout"])
    slurm_cluster.run("scancel", jobs["scancel"]["job_id"], check=True)
    slurm_cluster.run("scontrol", "update", f"jobid={jobs['timeout']['job_id']}", "TimeLimit=0", check=True)
    expected = {"scancel": "was cancelled (scancel) (CANCELLED", "timeout": "reached its time limit (TIMEOUT, TimeLimit)"}
    for how, (where, proc) in runs.items():
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 3, out + err
        run = storage.load_run(storage.open_database(f"sqlite:///{where}/db.sqlite"), 1)
        assert run.run.status == "interrupted"
        assert run.run.reason.startswith(f"Slurm job {jobs[how]['job_id']} {expected[how]}"), run.run.reason
        assert run.run.settings["slurm"]["ended"] is True
        assert all(t.status != "running" for t in run.trials)
        assert group_members(pgids[how]) == []
        assert run.run.reason in out


def test_slurm_host_config_errors_name_the_fix():
    with pytest.raises(core.ConfigError, match="needs workdir"):
        core.parse_config('[hosts.c]\nkind = "slurm"\n')
    with pytest.raises(core.ConfigError, match="ssh is not supported"):
        core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\nssh = "a@b"\n')
    with pytest.raises(core.ConfigError, match="time_limit"):
        core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\n[hosts.c.slurm]\ntime_limit = "soon"\n')
    config = core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\n[hosts.c.slurm]\npartition = "gpu"\n'
                               'gres = "gpu:8"\naccount = "perf"\nsbatch_args = ["--reservation=r1"]\n')
    assert config.hosts["c"].slurm.sbatch_options() == [
        "--partition=gpu", "--gres=gpu:8", "--time=02:00:00", "--account=perf", "--exclusive", "--reservation=r1"]
    assert isinstance(core.open_host("c", config.hosts["c"], Path("/tmp")), core.SlurmHost)
