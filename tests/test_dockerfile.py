"""The project's Dockerfile built and run for real (issue 39), with podman, from the local Debian
base image of scripts/setup-containers (no container registry answers on these machines; the
Dockerfile's BASE argument takes it): `specperf --help`, the fast tier and the Slack bot in the
image, the bot answering a signed request from the Slack emulator over the host's network."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from tests.bot_support import form, post_command, wait_for, write_config
from tests.conftest import ROOT, free_port
from tests.test_container import BASE_IMAGE, PODMAN

pytestmark = [pytest.mark.e2e, pytest.mark.container, pytest.mark.timeout(1500)]
IMAGE = "localhost/specperf-test:latest"
FAST_TIER = "not engine and not postgres and not ssh and not gpu and not slurm and not e2e and not slow and not alone"
# This machine's TLS goes through a proxy with its own certificate authority: pip in the image
# needs it (and the pip.conf that names it) where the host has them.
TRUST = [arg for path in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf") if Path(path).exists()
         for arg in ("-v", f"{path}:{path}:ro")]


def _pinned() -> list[str]:
    """``--cpuset-cpus`` of this process's CPUs: a container's cgroup is not the test's, and the
    engine tier's CPU must stay quiet."""
    return ["--cpuset-cpus", ",".join(map(str, sorted(os.sched_getaffinity(0))))]


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    """The image built from the checkout's files (committed or not, less the ignored ones)."""
    missing = subprocess.run([*PODMAN, "image", "exists", BASE_IMAGE]).returncode
    assert missing == 0, f"{BASE_IMAGE} is missing (scripts/setup-containers makes it)"
    context = tmp_path_factory.mktemp("context")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            (context / name).write_bytes((ROOT / name).read_bytes())
    built = subprocess.run([*PODMAN, "build", "-q", "--network", "host", "--ulimit", "nofile=20000:20000", "--ulimit",
                            "nproc=4096:4096", *_pinned(), *TRUST, "--build-arg", f"BASE={BASE_IMAGE}", "-t", IMAGE,
                            str(context)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return str(context)


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, "run", "--rm", "--network", "host", "--init", "--ulimit", "nofile=20000:20000",
                           "--ulimit", "nproc=4096:4096", *_pinned(), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_image_answers_help_and_passes_the_fast_tier(image):
    helped = _run(IMAGE, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: specperf"), helped.stdout + helped.stderr
    # the tests and their own dependencies come from the checkout (pyproject.toml's test extra); specperf's
    # dependencies and Python are the image's
    script = ('set -e; pip install -q $(python -c "import tomllib; print(\' \'.join(tomllib.load(open(\'pyproject.toml\', '
              '\'rb\'))[\'project\'][\'optional-dependencies\'][\'test\']))"); '
              # the image's own settings (SPECPERF_CONFIG=/etc/specperf/specperf.toml, a file the bot's
              # user mounts) are not the tests'
              f'env -u SPECPERF_CONFIG -u SPECPERF_HOME python -m pytest -q -p no:cacheprovider -m "{FAST_TIER}" '
              '-n 2 --dist loadfile')
    tier = _run(*TRUST, "-v", f"{image}:/src", "-w", "/src", "--entrypoint", "sh", IMAGE, "-c", script)
    assert tier.returncode == 0, tier.stdout[-4000:] + tier.stderr[-2000:]
    summary = tier.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    python = _run("--entrypoint", "python3", IMAGE, "-c", "import sys; print(sys.version.split()[0])")
    print(f"fast tier in the image (Python {python.stdout.strip()}): {summary}")


async def test_the_bot_in_the_image_answers_a_signed_request_through_the_emulator(image, emulator, tmp_path, repo):
    config = write_config(tmp_path, repo[0], free_port(), emulator.api_url)
    name = f"specperf-bot-test-{os.getpid()}"
    argv = [*PODMAN, "run", "--rm", "-i", "--name", name, "--network", "host", "--init", "--ulimit",
            "nofile=20000:20000", "--ulimit", "nproc=4096:4096", *_pinned(), "-v", f"{config}:{config}:ro", IMAGE,
            "--config", str(config), "bot", "--db", "sqlite:////data/bot.db"]
    with open(tmp_path / "bot.log", "w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            async with asyncio.timeout(120):
                line = await asyncio.to_thread(proc.stdout.readline)
            assert line.startswith("listening on "), (line, (tmp_path / "bot.log").read_text()[-2000:])
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            reply, _ = await post_command(port, form("help"))
            assert reply.status_code == 200 and "/specperf compare" in reply.json()["text"], reply.text
            await wait_for(lambda: emulator.recorded("auth.test"), 30, what="the bot's auth.test to the emulator")
        finally:
            subprocess.run([*PODMAN, "stop", "-t", "5", name], capture_output=True, timeout=60)
            proc.wait(60)
    assert subprocess.run([*PODMAN, "container", "exists", name]).returncode != 0  # --rm: gone

