"""The Slurm host: a partition of a Slurm cluster, reached through Slurm's own commands
(``sbatch``, ``scontrol``, ``squeue``, ``scancel``, ``sacct``, ``sinfo``), run on this machine
or, with ``ssh`` set, on a login node over SSH.

Where jobs are submitted, a :class:`SlurmHost` sends everything it runs (Slurm's commands,
git in the engine's repository, the helper) and every file it touches (``<workdir>/jobs``:
job specs, job output) to its :attr:`~SlurmHost.control` host: this machine
(:class:`~core._hosts.local.LocalHost`), or the login node (:class:`~core._hosts.ssh.SshHost`,
with the host's SSH keys, exec prefix and helper ``python``; an unreachable login node is
that host's :class:`HostError`).

A compare on a Slurm host is one batch job that holds one node (exclusively, by default)
for all its launches; specperf's worker runs inside the job on the node, where this class is
also the engine's host (:meth:`SlurmHost.on_node`): commands and engines run locally there,
never over SSH, under the work directory ``<workdir>/nodes/<node>`` (an exclusive node runs
one of our jobs at a time, so worktrees and logs on the shared file system never collide).

Our jobs are named ``specperf-run-<run id>`` and carry the comment ``specperf:run=<run
id>``; :meth:`SlurmHost.cancel` refuses any job without both, and :meth:`SlurmHost.jobs`
lists only those, so specperf never touches a job it did not submit (on a login node too:
the same commands, under the login node's user).
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core._config import HostConfig, slurm_python_missing
from core._errors import ConfigError, HostError
from core._hosts.base import CommandResult, Host, Spawned
from core._hosts.local import LocalHost
from core._hosts.ssh import SshHost

CLIENT_ON_NODE = "on the Slurm node, beside the engine"  # where a Slurm job's benchmark client runs
JOB_PREFIX = "specperf-run-"
COMMENT_PREFIX = "specperf:run="
# Job states in which a job may still run (squeue's); any other state is final.
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING",
                           "SIGNALING", "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm says of one job: ``state`` (``PENDING``, ``RUNNING``, ``COMPLETED``,
    ``CANCELLED``, ``TIMEOUT``, ``NODE_FAIL``, ``PREEMPTED``, ...), ``reason`` (the pending
    reason, or why it ended; ``None`` when Slurm gives none), ``node`` (once allocated),
    ``run_s`` (seconds it has held its node so far, or held it in all once ended: Slurm's
    ``RunTime`` / ``ElapsedRaw``; ``None`` when Slurm does not say)."""

    job_id: str
    name: str
    comment: str
    state: str
    reason: str | None
    node: str | None
    run_s: float | None = None

    @property
    def active(self) -> bool:
        """Whether the job may still run (pending, running, completing, ...)."""
        return self.state in ACTIVE_STATES

    @property
    def ours(self) -> bool:
        """Whether specperf submitted it (its name and comment say so)."""
        return self.name.startswith(JOB_PREFIX) and self.comment.startswith(COMMENT_PREFIX)

    def line(self) -> str:
        """``Slurm job 12 RUNNING on node1`` / ``Slurm job 12 PENDING (Resources)``."""
        where = f" on {self.node}" if self.node else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"Slurm job {self.job_id} {self.state}{why}{where}"


def _field(value: str | None) -> str | None:
    return None if value in (None, "", "None", "(null)", "N/A") else value


def duration_s(text: str | None) -> float | None:
    """Seconds in Slurm's ``[D-]HH:MM:SS`` (``RunTime``, ``Elapsed``; also ``MM:SS``) or a bare
    number of seconds (``ElapsedRaw``); ``None`` for an empty or unreadable field."""
    text = _field(text)
    if text is None:
        return None
    days, _, clock = text.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        seconds = sum(value * 60 ** i for i, value in enumerate(reversed(parts)))
        return float(seconds + 86400 * (int(days) if days else 0))
    except ValueError:
        return None


class SlurmHost(Host):
    """A Slurm partition (``kind = "slurm"``); see the module docstring. ``node``: the node
    this instance runs on inside a job (``None`` where jobs are submitted from).

    Every :class:`Host` operation goes to :attr:`control`; on top of them this class has
    Slurm's side: :meth:`submit`, :meth:`job`, :meth:`jobs`, :meth:`cancel`,
    :meth:`partition_nodes` and :meth:`on_node`.

    Raises:
        ConfigError: ``ssh`` is set and ``[slurm] python`` is not (only for a
            :class:`HostConfig` built by hand: a config file is refused when read).
    """

    JOB_PREFIX = JOB_PREFIX
    CLIENT_ON_NODE = CLIENT_ON_NODE

    def __init__(self, name: str, config: HostConfig, workdir: str, node: str | None = None) -> None:
        super().__init__(name, config, workdir)
        self.node = node
        if config.ssh and node is None and not (config.slurm and config.slurm.python):
            raise ConfigError(slurm_python_missing(name, config.ssh))
        self._control: Host | None = None

    @property
    def control(self) -> Host:
        """The host that runs this host's commands and holds its files: an :class:`SshHost` for
        the login node where jobs are submitted with ``ssh`` set, else this machine (always on
        the node, inside a job). Made on first use (nothing connects before a command)."""
        if self._control is None:
            remote = bool(self.config.ssh) and self.node is None
            self._control = (SshHost if remote else LocalHost)(self.name, self.config, self.workdir)
            self._control.source = self.source
        return self._control

    @property
    def is_local(self) -> bool:
        return self.control.is_local

    @property
    def client_where(self) -> str:
        """The benchmark client runs in the job, on the node, beside the engine."""
        return CLIENT_ON_NODE

    @property
    def where(self) -> str:
        """``slurm gpu``, ``slurm gpu via ssh me@login:22`` (jobs submitted through a login
        node), ``slurm gpu, node node1`` (inside a job)."""
        partition = (self.config.slurm and self.config.slurm.partition) or "the default partition"
        login = f" via ssh {self.config.ssh}:{self.config.port}" if self.config.ssh and self.node is None else ""
        return f"slurm {partition}{login}" + (f", node {self.node}" if self.node else "")

    def on_node(self, node: str) -> SlurmHost:
        """This host as seen inside a job on ``node``: work directory ``<workdir>/nodes/<node>``,
        everything local."""
        return SlurmHost(self.name, self.config, f"{self.config.workdir}/nodes/{node}", node)

    async def close(self) -> None:
        if self._control is not None:
            await self._control.close()

    # The Host interface, on the control host.
    async def run(self, argv, *, timeout_s=300.0, cwd=None, env=None, input=None) -> CommandResult:
        return await self.control.run(argv, timeout_s=timeout_s, cwd=cwd, env=env, input=input)

    async def spawn(self, argv, *, cwd=None, env=None, stderr=False) -> Spawned:
        return await self.control.spawn(argv, cwd=cwd, env=env, stderr=stderr)

    def forward(self, port: int):
        return self.control.forward(port)

    def launch(self, name, argv, env, log_path, cwd, grace_s):
        return self.control.launch(name, argv, env, log_path, cwd, grace_s)

    async def listeners(self, port: int) -> list[dict]:
        return await self.control.listeners(port)

    async def holders(self) -> list[dict]:
        return await self.control.holders()

    async def describe(self, pids: list[int]) -> list[dict]:
        return await self.control.describe(pids)

    async def tree_groups(self, pid: int) -> list[int]:
        return await self.control.tree_groups(pid)

    async def stop_recorded_group(self, pgid: int, log_path: str, grace_s: float = 15.0) -> bool:
        return await self.control.stop_recorded_group(pgid, log_path, grace_s)

    async def stop_pid(self, pid: int, start: int | None, grace_s: float = 15.0) -> bool:
        return await self.control.stop_pid(pid, start, grace_s)

    @asynccontextmanager
    async def lock(self, owner: dict, *, wait: bool = True, on_wait: Callable[[str], None] | None = None,
                   poll_s: float = 2.0) -> AsyncIterator[None]:
        async with self.control.lock(owner, wait=wait, on_wait=on_wait, poll_s=poll_s):
            yield

    async def _slurm(self, *argv: str, input: bytes | None = None) -> str:
        result = await self.control.run(list(argv), input=input, timeout_s=60)
        if result.returncode != 0:
            raise HostError(f"{shlex.join(argv)[:200]} failed for host {self.name} with status {result.returncode}: "
                            f"{result.stderr.strip()[-400:] or result.stdout.strip()[-400:]}")
        return result.stdout

    async def submit(self, run_id: int, argv: list[str], log_path: str) -> str:
        """Submit ``argv`` as the batch job of run ``run_id`` (one node, one task, with the
        host's ``[slurm]`` options, output to ``log_path``); returns the job id.

        Raises:
            HostError: sbatch refused it (with Slurm's message: a bad partition, GRES, ...), or
                the login node cannot be reached.
        """
        script = f"#!/bin/sh\nexec {shlex.join(argv)}\n".encode()
        slurm = self.config.slurm
        assert slurm is not None
        out = await self._slurm(
            "sbatch", "--parsable", f"--job-name={JOB_PREFIX}{run_id}", f"--comment={COMMENT_PREFIX}{run_id}",
            f"--output={log_path}", "--nodes=1", "--ntasks=1", f"--chdir={self.config.workdir}",
            *slurm.sbatch_options(), input=script)
        return out.strip().split(";")[0]

    async def job(self, job_id: str) -> SlurmJob | None:
        """The job's state from ``scontrol`` (while slurmctld remembers it, ``MinJobAge``), else
        from ``sacct`` (accounting); ``None`` when neither knows it.

        Raises:
            HostError: the control host cannot be reached, has no ``scontrol``, or ``scontrol``
                fails for any reason but "Invalid job id" (slurmctld down or unreachable): a job
                is taken as forgotten only when slurmctld itself says it does not know it.
        """
        result = await self.control.run(["scontrol", "-o", "show", "job", job_id], timeout_s=60)
        if result.returncode == 127:
            raise HostError(f"scontrol is not found on host {self.name} ({self.where}): {result.stderr.strip()[-200:]}; "
                            "Slurm's client commands must be on the PATH where they run")
        if result.returncode != 0 and "invalid job id" not in result.stderr.lower():
            raise HostError(f"Slurm cannot be asked about job {job_id} on host {self.name} ({self.where}): scontrol "
                            f"failed with status {result.returncode}: {result.stderr.strip()[-300:]} (is slurmctld "
                            "down or unreachable from there?)")
        if result.returncode == 0 and result.stdout.strip():
            fields = dict(word.partition("=")[::2] for word in result.stdout.split())
            return SlurmJob(job_id, fields.get("JobName", ""), fields.get("Comment", ""),
                            fields.get("JobState", "UNKNOWN"), _field(fields.get("Reason")),
                            _field(fields.get("BatchHost")) or _field(fields.get("NodeList")),
                            duration_s(fields.get("RunTime")))
        result = await self.control.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o",
                                         "JobName,Comment,State,Reason,NodeList,ElapsedRaw"], timeout_s=60)
        line = result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""
        if line.count("|") != 5:
            return None
        name, comment, state, reason, node, elapsed = line.split("|")
        return SlurmJob(job_id, name, comment, state.split()[0], _field(reason), _field(node), duration_s(elapsed))

    async def jobs(self) -> list[SlurmJob]:
        """The jobs of the user who runs Slurm's commands (``squeue --me``: this machine's, or
        the login node's SSH user) that specperf submitted and Slurm still holds."""
        out = await self._slurm("squeue", "--noheader", "--me", "--format=%i|%j|%k|%T|%r|%N")
        found = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 6:
                job = SlurmJob(parts[0], parts[1], parts[2], parts[3], _field(parts[4]), _field(parts[5]))
                if job.ours:
                    found.append(job)
        return found

    async def partition_nodes(self) -> int:
        """How many nodes the host's partition has (``sinfo``; the default partition when none
        is set), whatever their state.

        Raises:
            HostError: sinfo failed (with Slurm's words).
        """
        slurm = self.config.slurm
        partition = ["--partition", slurm.partition] if slurm and slurm.partition else []
        out = await self._slurm("sinfo", "--noheader", *partition, "--format=%D")
        return sum(int(word) for word in out.split() if word.isdigit())

    async def cancel(self, job_id: str) -> SlurmJob:
        """``scancel`` job ``job_id`` if it is one of ours and still active; returns it.

        Raises:
            HostError: Slurm does not know it, or it is not a job specperf submitted.
        """
        job = await self.job(job_id)
        if job is None:
            raise HostError(f"Slurm does not know job {job_id}")
        if not job.ours:
            raise HostError(f"Slurm job {job_id} ({job.name}) was not submitted by specperf; not touching it")
        if job.active:
            await self._slurm("scancel", job_id)
        return job
