"""Engines run as containers (``[engines.<name>.container]``, :class:`core._config.ContainerConfig`),
on any host, through the container program the config names (Docker or Podman: the commands
used here, ``run``, ``image inspect``, ``pull``, ``inspect``, ``ps``, ``stop`` and ``rm``, take
the same options in both).

A container engine is still launched by :meth:`Host.launch`: the launched process is the
foreground ``run`` (``--rm``), whose output is the container's and goes to the engine log, and
whose process group is stopped as any engine's. Each trial's container gets a name of its own
(:func:`container_name`) and the label ``specperf.workdir=<host workdir>``; it is stopped and
removed by that name when the trial ends (:func:`remove`), and a container left with the label
by a specperf that was killed is found by that label and removed by its name before the next
experiment on the host (:func:`remove_leftovers`, under the host lock). Nothing is ever stopped
by image or by a pattern.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex

from core._config import ContainerConfig
from core._errors import ConfigError, HostError
from core._hosts.base import Host

LABEL = "specperf.workdir"  # ``LABEL=<host workdir>`` on every container specperf starts
_COMMAND_S = 60.0  # inspect, ps: answers at once on a healthy host


def container_name(engine_name: str, mode: str, started_at: dt.datetime) -> str:
    """``specperf-<engine>-<mode>-<UTC time to the microsecond>``, with every character a
    container name may not hold (outside ``[A-Za-z0-9_.-]``) replaced by ``-``."""
    name = f"specperf-{engine_name}-{mode}-{started_at:%Y%m%dT%H%M%S%fZ}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def run_argv(container: ContainerConfig, argv: list[str], *, name: str | None, workdir: str,
             env_names: list[str], cwd: str | None, cpus: list[int] | None, interactive: bool = False) -> list[str]:
    """The ``run`` argv that starts ``argv`` in ``container``'s image (see the module docstring).

    Args:
        name: the container's name (``None``: the runtime picks one; for the probe).
        workdir: the host's workdir, the value of the :data:`LABEL` label.
        env_names: variables passed into the container from the ``run`` process's environment
            (``-e KEY``; their values never appear in the argv).
        cwd: a host folder mounted at the same path and used as the working folder.
        cpus: host CPUs the container may use (``--cpuset-cpus``).
        interactive: keep standard input open (``-i``; for a script fed on it).
    """
    words = [*container.cli, "run", "--rm", "--pull", "never", "--network", "host", "--label", f"{LABEL}={workdir}"]
    if name:
        words += ["--name", name]
    if interactive:
        words.append("-i")
    for key in env_names:
        words += ["-e", key]
    if cwd:
        words += ["-v", f"{cwd}:{cwd}", "-w", cwd]
    if cpus:
        words += ["--cpuset-cpus", ",".join(map(str, cpus))]
    return [*words, *container.run_args, container.image, *argv]


async def check_image(host: Host, container: ContainerConfig, engine_name: str) -> str:
    """Make sure ``container.image`` is on ``host``: pulled there when ``container.pull``; its
    image ID there (``sha256:...``, as ``image inspect`` prints it).

    Raises:
        ConfigError: the container program is not on the host, or the image is missing and
            ``pull`` is off, or the pull failed (each with the command to run).
        HostError: the host cannot be reached.
    """
    cli = shlex.join(container.cli)
    result = await host.run([*container.cli, "image", "inspect", "--format", "{{.Id}}", container.image],
                            timeout_s=_COMMAND_S)
    if result.returncode == 127:
        raise ConfigError(f"engine {engine_name!r}: the container program {container.cli[0]!r} is not on host "
                          f"{host.name}; install it there or set [engines.{engine_name}.container] cli")
    if result.returncode == 0:
        return result.stdout.strip()
    if not container.pull:
        raise ConfigError(
            f"engine {engine_name!r}: image {container.image} is not on host {host.name} ({cli} image inspect: "
            f"{_last_line(result.stderr)}); pull or build it there first ({cli} pull {container.image}), or set "
            f"pull = true in [engines.{engine_name}.container]")
    pulled = await host.run([*container.cli, "pull", container.image], timeout_s=container.pull_timeout_s)
    if pulled.returncode != 0:
        raise ConfigError(f"engine {engine_name!r}: {cli} pull {container.image} failed on host {host.name}: "
                          f"{_last_line(pulled.stderr)}")
    return await check_image(host, container.model_copy(update={"pull": False}), engine_name)


async def remove(host: Host, container: ContainerConfig, name: str, grace_s: float) -> bool:
    """Stop the container ``name`` (SIGTERM to its first process, ``grace_s``, SIGKILL) and
    remove it; whether there was one to remove. Raises :class:`HostError` (host unreachable,
    or the runtime failed for another reason than a missing container)."""
    stopped = await host.run([*container.cli, "stop", "-t", str(max(1, round(grace_s))), name],
                             timeout_s=grace_s + _COMMAND_S)
    removed = await host.run([*container.cli, "rm", "-f", name], timeout_s=_COMMAND_S)
    if removed.returncode != 0 and not _no_such(removed.stderr):
        raise HostError(f"cannot remove container {name} on host {host.name}: {_last_line(removed.stderr)}")
    return stopped.returncode == 0 or removed.returncode == 0


async def remove_leftovers(host: Host, containers: list[ContainerConfig], grace_s: float) -> list[str]:
    """Remove the containers that carry this host's :data:`LABEL` (left by a specperf that was
    killed: run under the host lock, so none belongs to a running experiment), each by its
    name, through each distinct container program of ``containers``; one line per removal.

    Raises:
        HostError: the host cannot be reached, or the runtime cannot list or remove them.
    """
    done = []
    for cli in {tuple(c.cli): c for c in containers}.values():
        listed = await host.run([*cli.cli, "ps", "-a", "--filter", f"label={LABEL}={host.workdir}",
                                 "--format", "{{.Names}}"], timeout_s=_COMMAND_S)
        if listed.returncode == 127:
            continue  # the program is missing: check_image says so at the launch
        if listed.returncode != 0:
            raise HostError(f"cannot list specperf's containers on host {host.name} ({shlex.join(cli.cli)} ps): "
                            f"{_last_line(listed.stderr)}")
        for name in listed.stdout.split():
            if await remove(host, cli, name, grace_s):
                done.append(f"removed a leftover engine container of specperf: {name}")
    return done


async def container_pgids(host: Host, container: ContainerConfig, name: str) -> list[int]:
    """The host process groups of the container's processes (its first process and every
    descendant; ``[]`` when they cannot be read): the engine's own in the window monitor and
    in the port check."""
    result = await host.run([*container.cli, "inspect", "--format", "{{json .State.Pid}}", name], timeout_s=_COMMAND_S)
    try:
        pid = int(json.loads(result.stdout.strip() or "0"))
    except (ValueError, TypeError):
        return []
    return await host.tree_groups(pid) if result.returncode == 0 and pid > 0 else []


def _no_such(stderr: str) -> bool:
    """The runtime's answer for a container that is not there (or is being removed by ``--rm``)."""
    text = stderr.lower()
    return any(words in text for words in ("no such container", "no container with name", "already in progress"))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
