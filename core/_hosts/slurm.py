"""The Slurm host: a partition of a Slurm cluster, reached through Slurm's own commands
(``sbatch``, ``scontrol``, ``squeue``, ``scancel``, ``sacct``) run on this machine.

A compare on a Slurm host is one batch job that holds one node (exclusively, by default)
for all its launches; specperf's worker runs inside the job on the node, where this class is
also the engine's host: commands and engines run locally there, under the work directory
``<workdir>/nodes/<node>`` (an exclusive node runs one of our jobs at a time, so worktrees
and logs on the shared file system never collide).

Our jobs are named ``specperf-run-<run id>`` and carry the comment ``specperf:run=<run
id>``; :meth:`SlurmHost.cancel` refuses any job without both, so specperf never touches a job
it did not submit.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from core._config import HostConfig
from core._errors import HostError
from core._hosts.local import LocalHost

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


class SlurmHost(LocalHost):
    """A Slurm partition (``kind = "slurm"``); see the module docstring. ``node``: the node
    this instance runs on inside a job (``None`` where jobs are submitted from)."""

    JOB_PREFIX = JOB_PREFIX

    def __init__(self, name: str, config: HostConfig, workdir: str, node: str | None = None) -> None:
        super().__init__(name, config, workdir)
        self.node = node

    @property
    def client_where(self) -> str:
        return "on the Slurm node, beside the engine"

    @property
    def where(self) -> str:
        partition = (self.config.slurm and self.config.slurm.partition) or "the default partition"
        return f"slurm {partition}" + (f", node {self.node}" if self.node else "")

    def on_node(self, node: str) -> SlurmHost:
        """This host as seen inside a job on ``node``: work directory ``<workdir>/nodes/<node>``."""
        return SlurmHost(self.name, self.config, f"{self.config.workdir}/nodes/{node}", node)

    async def _slurm(self, *argv: str, input: bytes | None = None) -> str:
        result = await self.run(list(argv), input=input, timeout_s=60)
        if result.returncode != 0:
            raise HostError(f"{shlex.join(argv)[:200]} failed for host {self.name} with status {result.returncode}: "
                            f"{result.stderr.strip()[-400:] or result.stdout.strip()[-400:]}")
        return result.stdout

    async def submit(self, run_id: int, argv: list[str], log_path: str) -> str:
        """Submit ``argv`` as the batch job of run ``run_id`` (one node, one task, with the
        host's ``[slurm]`` options, output to ``log_path``); returns the job id.

        Raises:
            HostError: sbatch refused it (with Slurm's message: a bad partition, GRES, ...).
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
        from ``sacct`` (accounting); ``None`` when neither knows it."""
        result = await self.run(["scontrol", "-o", "show", "job", job_id], timeout_s=60)
        if result.returncode == 0 and result.stdout.strip():
            fields = dict(word.partition("=")[::2] for word in result.stdout.split())
            return SlurmJob(job_id, fields.get("JobName", ""), fields.get("Comment", ""),
                            fields.get("JobState", "UNKNOWN"), _field(fields.get("Reason")),
                            _field(fields.get("BatchHost")) or _field(fields.get("NodeList")),
                            duration_s(fields.get("RunTime")))
        result = await self.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o",
                                 "JobName,Comment,State,Reason,NodeList,ElapsedRaw"], timeout_s=60)
        line = result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""
        if line.count("|") != 5:
            return None
        name, comment, state, reason, node, elapsed = line.split("|")
        return SlurmJob(job_id, name, comment, state.split()[0], _field(reason), _field(node), duration_s(elapsed))

    async def jobs(self) -> list[SlurmJob]:
        """This user's jobs that specperf submitted and Slurm still holds (``squeue``)."""
        out = await self._slurm("squeue", "--noheader", f"--user={os.getuid()}", "--format=%i|%j|%k|%T|%r|%N")
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
