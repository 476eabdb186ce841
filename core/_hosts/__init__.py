"""Hosts: the machine an engine runs on, local, over SSH or a Slurm node, behind one interface.

A :class:`Host` runs commands with a timeout, starts long-running processes, reads and
writes files, stops process groups, forwards the engine's port, and holds the host lock.
Everything is an argv list: over SSH the words (exec prefix first) are joined with
:func:`shlex.join`, so no user text reaches the remote shell unquoted.

A small package: :mod:`~core._hosts.base` (the interface, command results, engine handles),
:mod:`~core._hosts.local` (this machine), :mod:`~core._hosts.slurm` (a Slurm partition: jobs
submitted from here, or through a login node over SSH, the engine local on the node; it
composes a local or SSH host, its ``control``) and :mod:`~core._hosts.ssh` (asyncssh: one reused
connection, checked host keys, commands tied to the channel by the helper
:mod:`core._hosts.agent`). Only ``core`` imports it; front ends use ``core._hosts.open_host``.
"""

from __future__ import annotations

from pathlib import Path

from core._config import HostConfig
from core._hosts.base import CommandResult, EngineHandle, Host, Spawned
from core._hosts.local import LocalHost
from core._hosts.slurm import SlurmHost, SlurmJob
from core._hosts.ssh import SshHost

__all__ = ["CommandResult", "EngineHandle", "Host", "LocalHost", "SlurmHost", "SlurmJob", "Spawned", "SshHost",
           "open_host"]


def open_host(name: str, config: HostConfig, local_workdir: Path, source: str = "the config file") -> Host:
    """The :class:`Host` for ``[hosts.<name>]``: by its ``kind``, Slurm (its Slurm commands
    local or, with ``ssh``, on a login node), SSH or local.

    ``local_workdir`` (the data directory) is the local host's default work directory; an
    SSH host's default is ``/var/tmp/specperf``. ``source``: the config file the host was
    read from (:attr:`Config.source`), named by errors that ask for a key to be changed.
    Nothing connects until first use.

    Raises:
        ConfigError: a Slurm host with ``ssh`` and no ``[slurm] python`` (a config built by
            hand; :func:`parse_config` refuses it first).
    """
    host: Host
    if config.kind == "slurm":
        host = SlurmHost(name, config, config.workdir or "")
    elif config.ssh:
        host = SshHost(name, config, config.workdir or "/var/tmp/specperf")
    else:
        host = LocalHost(name, config, config.workdir or str(local_workdir))
    host.source = source
    return host
