"""Engines in containers (core/_hosts/container.py, issue 39): the fast fake engine
(tests/fake_engine_repo.py) run by real podman in the local Debian base image
(scripts/setup-containers), measured, compared image against image (no repo: the arms are the
two images), stopped and removed by name; a missing image; a specperf killed with SIGKILL
mid-launch; an SSH host. The argv and config rules are fast unit tests."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlmodel import Session, select

import storage
from core import ConfigError, EngineConfig, parse_config
from core._config import ContainerConfig
from core._experiments.arms import set_up_differences
from core._hosts.container import LABEL, container_name, run_argv
from tests.conftest import ROOT, SPECPERF, free_port, record_verdict, specperf_in_process, stopped_at_end

BASE_IMAGE = "localhost/specperf-base:bookworm"
PODMAN = ["podman", "--runtime", "runc"]  # ../shared/FIELD_NOTES.md section 10: crun fails on these machines
RUN_ARGS = ["--init", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096", "-v", f"{ROOT}:{ROOT}:ro"]
REGRESSION = "REGRESSION"


def test_the_run_argv_names_labels_pins_and_passes_the_environment_by_name():
    box = ContainerConfig(cli=["podman", "--runtime", "runc"], image="img:1", run_args=["--init"])
    argv = run_argv(box, ["python3", "-m", "srv", "--port", "9"], name="specperf-x", workdir="/w",
                    env_names=["HF_TOKEN", "VLLM_X"], cwd="/trees/abc", cpus=[2, 3])
    assert argv == ["podman", "--runtime", "runc", "run", "--rm", "--pull", "never", "--network", "host",
                    "--label", f"{LABEL}=/w", "--name", "specperf-x", "-e", "HF_TOKEN", "-e", "VLLM_X",
                    "-v", "/trees/abc:/trees/abc", "-w", "/trees/abc", "--cpuset-cpus", "2,3", "--init",
                    "img:1", "python3", "-m", "srv", "--port", "9"]
    assert container_name("vllm new/x", "eagle3", dt.datetime(2026, 12, 7, 8, 30, 1, 5, tzinfo=dt.UTC)) == \
        "specperf-vllm-new-x-eagle3-20261207T083001000005Z"


def test_a_container_engine_is_pinned_by_the_runtime_and_refuses_host_side_builds():
    engine = EngineConfig(kind="command", command=["x"], cpus=[1], container=ContainerConfig(image="i"))
    from core._measure.engines import adapter_for

    assert adapter_for(engine).launch_argv("baseline")[0] == "x"  # no taskset: --cpuset-cpus instead
    with pytest.raises(ConfigError, match="a container engine cannot have build or source_package"):
        parse_config('[engines.e]\nkind = "command"\ncommand = ["x"]\nsource_package = "p"\n'
                     '[engines.e.container]\nimage = "i"\n')
    with pytest.raises(ConfigError, match="image"):
        parse_config('[engines.e]\nkind = "command"\ncommand = ["x"]\n[engines.e.container]\ncli = ["podman"]\n')


def test_two_images_differ_first_in_their_image():
    old = EngineConfig(kind="command", command=["x"], container=ContainerConfig(image="vllm:0.18", run_args=["-a"]))
    new = old.model_copy(update={"container": ContainerConfig(image="vllm:0.19", run_args=["-b"])})
    assert set_up_differences(old, new) == ["engine container image: vllm:0.18 -> vllm:0.19",
                                            "engine container run_args: -a -> -b"]
    assert set_up_differences(old.model_copy(update={"container": None}), old)[0] == \
        "engine container image: (unset) -> vllm:0.18"


def _podman_ready() -> str | None:
    if not shutil.which("podman"):
        return "podman is not installed (scripts/test installs Debian's podman, runc and catatonit)"
    if subprocess.run([*PODMAN, "image", "exists", BASE_IMAGE]).returncode != 0:
        return f"{BASE_IMAGE} is missing (scripts/setup-containers makes it)"
    return None


@pytest.fixture
def podman():
    """Fails (never skips) where podman or the base image is missing: scripts/test provides both."""
    missing = _podman_ready()
    assert missing is None, missing


def _config(tmp_path: Path, repo: Path, port: int, image: str = BASE_IMAGE, workload: str = "") -> Path:
    """The fake engine's repository served in a container of ``image`` (the image's python3,
    the checkout mounted read-only for tests.exact_rate_server). ``measure``, which launches
    outside any worktree, finds the engine in the repository's own checkout (mounted too)."""
    config = tmp_path / "specperf.toml"
    run_args = [*RUN_ARGS, "-v", f"{repo}:{repo}:ro"]
    cpus = sorted(os.sched_getaffinity(0))  # the rest tier's CPUs: the container's cgroup is not this process's
    config.write_text(
        f'[hosts.local]\nworkdir = "{tmp_path}/work"\n'
        f'[engines.boxed]\nkind = "command"\nrepo = "{repo}"\nsource_dir = "src"\npython = "python3"\n'
        'command = ["{python}", "-m", "fake_engine", "--port", "{port}"]\n'
        f'port = {port}\nready_timeout_s = 30\nstop_grace_s = 3\ncpus = {cpus}\n'
        f'env = {{ PYTHONPATH = "{ROOT}:{repo}/src" }}\n'
        f'[engines.boxed.container]\ncli = {json.dumps(PODMAN)}\nimage = "{image}"\nrun_args = {json.dumps(run_args)}\n'
        '[engines.boxed.modes]\nbaseline = []\neagle3 = ["--itl-scale", "0.5"]\n'
        '[compare]\nmin_trials = 4\nmax_trials = 8\ncooldown_s = 0\non_disturbed = "keep"\nprofile = "never"\n'
        'modes = ["baseline", "eagle3"]\n'
        '[workloads.default]\n' + (workload or 'output_len = 128\nconcurrency = 2\nrequests = 8\nwarmup_requests = 1\n'))
    return config


def _ours(tmp_path: Path) -> list[str]:
    """Names of the containers (running or not) that carry this test's host label."""
    listed = subprocess.run([*PODMAN, "ps", "-a", "--filter", f"label={LABEL}={tmp_path}/work", "--format",
                             "{{.Names}}"], capture_output=True, text=True, check=True)
    return listed.stdout.split()


@pytest.fixture
def slow_image(podman, tmp_path):
    """A second image: the base with ``FAKE_ENGINE_ITL_SCALE=1.5`` in its environment (every token
    of the fake engine 50% slower), as a new release's image that got slower; removed after."""
    tag = f"localhost/specperf-slow:{os.getpid()}-{tmp_path.name}".lower()[:120]
    context = tmp_path / "image"
    context.mkdir()
    (context / "Containerfile").write_text(f"FROM {BASE_IMAGE}\nENV FAKE_ENGINE_ITL_SCALE=1.5\n")
    subprocess.run([*PODMAN, "build", "-q", "-t", tag, str(context)], check=True, capture_output=True)
    yield tag
    subprocess.run([*PODMAN, "rmi", "-f", tag], capture_output=True)


def _images_config(tmp_path: Path, repo: Path, port: int, new_image: str) -> Path:
    """Two engine entries without a repo that differ only in their image: ``old`` in the base
    image, ``new`` in ``new_image``; the fake engine's code mounted read-only from ``repo``'s
    checkout (a folder like any other here: neither entry names a repo)."""
    config = tmp_path / "specperf.toml"
    run_args = [*RUN_ARGS, "-v", f"{repo}:{repo}:ro"]
    cpus = sorted(os.sched_getaffinity(0))  # the rest tier's CPUs: the container's cgroup is not this process's
    entries = ""
    for name, image in (("old", BASE_IMAGE), ("new", new_image)):
        entries += (f'[engines.{name}]\nkind = "command"\npython = "python3"\n'
                    'command = ["{python}", "-m", "fake_engine", "--port", "{port}"]\n'
                    f'port = {port}\nready_timeout_s = 30\nstop_grace_s = 3\ncpus = {cpus}\n'
                    f'env = {{ PYTHONPATH = "{ROOT}:{repo}/src" }}\n'
                    f'[engines.{name}.container]\ncli = {json.dumps(PODMAN)}\nimage = "{image}"\n'
                    f'run_args = {json.dumps(run_args)}\n'
                    f'[engines.{name}.modes]\nbaseline = []\neagle3 = ["--itl-scale", "0.5"]\n')
    config.write_text(
        f'[hosts.local]\nworkdir = "{tmp_path}/work"\n' + entries +
        '[compare]\nmin_trials = 4\nmax_trials = 8\ncooldown_s = 0\non_disturbed = "keep"\nprofile = "never"\n'
        'modes = ["baseline", "eagle3"]\n'
        '[workloads.default]\noutput_len = 128\nconcurrency = 2\nrequests = 8\nwarmup_requests = 1\n')
    return config


@pytest.mark.e2e
@pytest.mark.container
def test_two_images_without_a_repo_are_compared_and_each_container_is_gone_after_its_trial(slow_image, repo, tmp_path,
                                                                                           record_property):
    subprocess.run(["git", "-C", str(repo[0]), "checkout", "-q", "base"], check=True)  # the engine's code
    config = _images_config(tmp_path, repo[0], free_port(2), slow_image)
    db = f"sqlite:///{tmp_path}/db.sqlite"
    common = ["--config", str(config), "compare", "--base-engine", "old", "--engine", "new", "--db", db]
    named = specperf_in_process([*common[:3], "base", *common[3:]], cwd=tmp_path)  # no repo: no commit to name
    assert named.returncode == 2 and "have no repo, so the arms are their set-ups alone: name no commit (base)" \
        in named.stderr, named.stdout + named.stderr
    done = specperf_in_process([*common, "--json", str(tmp_path / "report.json")], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    for mode in ("baseline", "eagle3"):
        verdict = report["modes"][mode]["verdict"]
        record_verdict(record_property, mode, verdict)
        # ITL x 1.5 is -33% tok/s (as tests/test_arms.py, the same engine as a process)
        assert verdict["verdict"] == REGRESSION and -45 < verdict["change_pct"] < -20, (mode, verdict)
    assert report["environment"]["arms_differ"][0] == f"engine container image: {BASE_IMAGE} -> {slow_image}"
    with Session(storage.open_database(db)) as session:
        run = session.get(storage.Run, report["run_id"])
        assert run is not None
        # each arm stored by its image and the digest of its set-up (the image's ID in it) where a commit goes
        assert (run.base_ref, run.head_ref) == (BASE_IMAGE, slow_image), (run.base_ref, run.head_ref)
        assert run.base_sha.startswith("setup-") and run.head_sha.startswith("setup-") and run.base_sha != run.head_sha
        assert f"{slow_image} ({run.head_sha[:12]}) against {BASE_IMAGE} ({run.base_sha[:12]})" in done.stdout
        trials = list(session.exec(select(storage.Trial)))
    assert len(trials) == len(report["launches"]) >= 16
    for argv in (trial.argv for trial in trials):  # each a named container of its image, no worktree mounted
        assert argv[:4] == [*PODMAN, "run"] and (BASE_IMAGE in argv) != (slow_image in argv), argv
        assert argv[argv.index("--name") + 1].startswith(("specperf-old-", "specperf-new-")) and "-w" not in argv, argv
    assert _ours(tmp_path) == []  # every one stopped and removed by its name
    shown = specperf_in_process(["--config", str(config), "show", str(report["run_id"]), "--db", db], cwd=tmp_path)
    assert shown.returncode == 0 and f"{slow_image} ({run.head_sha[:12]}) against {BASE_IMAGE}" in shown.stdout, \
        shown.stdout + shown.stderr


@pytest.mark.e2e
@pytest.mark.container
def test_a_missing_image_is_one_error_and_nothing_runs(podman, repo, tmp_path):
    config = _config(tmp_path, repo[0], free_port(), image="localhost/specperf-no-such-image:1")
    done = specperf_in_process(["--config", str(config), "measure", "--engine", "boxed", "--mode", "baseline"],
                               cwd=tmp_path, env={**os.environ, "SPECPERF_HOME": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "image localhost/specperf-no-such-image:1 is not on host local" in lines[0] \
        and "podman --runtime runc pull localhost/specperf-no-such-image:1" in lines[0], done.stderr
    assert _ours(tmp_path) == []


@pytest.mark.e2e
@pytest.mark.container
def test_a_specperf_killed_mid_launch_leaves_no_container_after_the_next_command(podman, repo, tmp_path):
    long = "output_len = 4000\nconcurrency = 1\nrequests = 50\nwarmup_requests = 0\n"
    subprocess.run(["git", "-C", str(repo[0]), "checkout", "-q", "base"], check=True)  # the engine that starts
    config = _config(tmp_path, repo[0], free_port(), workload=long)
    argv = [*SPECPERF, "--config", str(config), "measure", "--engine", "boxed", "--mode", "baseline"]
    with stopped_at_end(subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env={**os.environ, "SPECPERF_HOME": str(tmp_path)})) as proc:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            names = [n for n in _ours(tmp_path) if n.startswith("specperf-boxed-")]  # not the probe's container
            if names:
                break
            time.sleep(0.2)
        assert names, "no engine container was started"
        time.sleep(1.0)  # mid-launch: the engine is starting or answering its readiness check
        os.kill(proc.pid, signal.SIGKILL)  # no clean-up runs in specperf: its engine's `podman run` is orphaned
        proc.wait()
    assert _ours(tmp_path) == names  # the container outlived specperf
    short = config.read_text().replace(long, "output_len = 8\nconcurrency = 1\nrequests = 2\nwarmup_requests = 0\n")
    config.write_text(short)
    done = specperf_in_process(argv[1:], cwd=tmp_path, env={**os.environ, "SPECPERF_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed a leftover engine container of specperf: {names[0]}" in done.stdout, done.stdout
    assert _ours(tmp_path) == []


@pytest.mark.e2e
@pytest.mark.container
async def test_a_container_engine_runs_on_an_ssh_host_and_is_gone_after_its_trial(podman, sshd, repo, tmp_path):
    from core import WorkloadConfig
    from core._hosts import open_host
    from core._measure.trial import measure

    subprocess.run(["git", "-C", str(repo[0]), "checkout", "-q", "base"], check=True)
    workdir = tmp_path / "work"  # the label's value, as _ours reads it
    box = ContainerConfig(cli=PODMAN, image=BASE_IMAGE, run_args=[*RUN_ARGS, "-v", f"{repo[0]}:{repo[0]}:ro"])
    engine = EngineConfig(kind="command", python="python3", command=["{python}", "-m", "fake_engine", "--port", "{port}"],
                          port=free_port(), ready_timeout_s=30, stop_grace_s=3, container=box,
                          env={"PYTHONPATH": f"{ROOT}:{repo[0]}/src"})
    workload = WorkloadConfig(output_len=32, requests=4, warmup_requests=1)
    async with open_host("loopback", sshd.host_config(workdir=str(workdir)), tmp_path) as host:
        trial = await measure("boxed", engine, "baseline", "default", workload, f"{workdir}/logs", host=host)
        assert trial.argv[:4] == [*PODMAN, "run"] and trial.sample.output_tok_s > 0
        assert trial.window.get("error") is None, trial.window
        # the container's processes (the server under catatonit) are the engine's, never foreign load
        # (other tests' fake engines run beside this one in the suite: ours is the one on its port)
        foreign = [p["command"] for p in trial.window["foreign_processes"]]
        assert not [c for c in foreign if f"fake_engine --port {engine.port}" in c], foreign
        assert trial.window["cpu"]["engine_cpu_s"] > 0, trial.window["cpu"]
        assert _ours(tmp_path) == []  # stopped and removed by its name, over SSH
        missing = engine.model_copy(update={"container": box.model_copy(update={"image": "localhost/nope:1"})})
        with pytest.raises(ConfigError, match="image localhost/nope:1 is not on host loopback"):
            await measure("boxed", missing, "baseline", "default", workload, f"{workdir}/logs", host=host)
