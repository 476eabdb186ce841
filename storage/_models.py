"""The tables: runs, their arms and trials, env snapshots and verdicts (SQLModel).

Every figure a verdict is computed from is kept per trial (``output_tok_s``,
``acceptance_length``, ``tpot_ms_mean``, ...), so any verdict can be recomputed later
(``specperf show RUN --recompute``). Per-request records are kept as JSON on the trial.
Times are UTC.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import JSON, BigInteger, Column, Text
from sqlmodel import Field, SQLModel

from core import Verdict
from core._experiments.stats import Position


def utcnow() -> dt.datetime:
    """The current UTC time (timezone-aware)."""
    return dt.datetime.now(dt.UTC)


class Run(SQLModel, table=True):
    """One compare (later: bisect, watch). ``status``: running, done, failed, refused (the host
    was busy; nothing launched, ``reason`` says why), interrupted."""

    __tablename__ = "runs"
    id: int | None = Field(default=None, primary_key=True)
    kind: str = "compare"
    status: str = "running"
    engine_name: str
    host: str = "local"
    workload_name: str
    base_ref: str
    base_sha: str
    head_ref: str
    head_sha: str
    modes: list = Field(sa_column=Column(JSON, nullable=False))
    settings: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    reason: str | None = Field(default=None, sa_column=Column(Text))
    log_tail: str | None = Field(default=None, sa_column=Column(Text))
    created_at: dt.datetime = Field(default_factory=utcnow)
    finished_at: dt.datetime | None = None


class Arm(SQLModel, table=True):
    """One (commit SHA, mode) pair of a run; ``role`` is ``base`` or ``head``."""

    __tablename__ = "arms"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    role: str
    sha: str
    mode: str
    imported: dict | None = Field(default=None, sa_column=Column(JSON))


class Trial(SQLModel, table=True):
    """One engine launch. The row is written at launch (with the engine's pgid) and completed
    when the trial ends; ``status``: running, ok, failed, interrupted."""

    __tablename__ = "trials"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    arm_id: int = Field(foreign_key="arms.id", index=True)
    seq: int
    status: str = "running"
    pgid: int | None = None
    argv: list = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    log_path: str | None = None
    started_at: dt.datetime = Field(default_factory=utcnow)
    ready_s: float | None = None
    output_tok_s: float | None = None
    request_per_s: float | None = None
    output_tokens: int | None = None
    window_s: float | None = None
    tpot_ms_mean: float | None = None
    latency_ms: dict | None = Field(default=None, sa_column=Column(JSON))
    acceptance_length: float | None = None
    drafts: int | None = None
    accepted_tokens: int | None = None
    acceptance_per_position: list | None = Field(default=None, sa_column=Column(JSON))
    engine_output_tok_s: float | None = None
    engine_figures_source: str | None = None
    requests: list | None = Field(default=None, sa_column=Column(JSON))
    error: str | None = Field(default=None, sa_column=Column(Text))


class EnvSnapshot(SQLModel, table=True):
    """What was recorded on a host during a run, by ``phase``: ``arm-base`` and ``arm-head``
    (each arm's full environment probe), ``window`` (the window monitor's document of one
    launch, linked to its trial), ``profile-<mode>`` (that mode's profile round:
    core._experiments.profiling)."""

    __tablename__ = "env_snapshots"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    trial_id: int | None = Field(default=None, foreign_key="trials.id")
    phase: str
    taken_at: dt.datetime = Field(default_factory=utcnow)
    data: dict = Field(sa_column=Column(JSON, nullable=False))


class VerdictRow(SQLModel, table=True):
    """One mode's verdict of a run, with the numbers behind it (percent of the base arm)."""

    __tablename__ = "verdicts"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    mode: str
    verdict: str
    n_pairs: int
    change_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None
    margin_pct: float
    alpha: float
    more_trials: int | None = None
    acceptance_change_pct: float | None = None
    step_ms_change_pct: float | None = None
    attribution: str | None = None
    reason: str = Field(sa_column=Column(Text, nullable=False))
    position: dict | None = Field(default=None, sa_column=Column(JSON))  # core.Position as a dict
    outputs: dict | None = Field(default=None, sa_column=Column(JSON))  # the outputs check of the arms
    categories: dict | None = Field(default=None, sa_column=Column(JSON))  # the verdicts per category

    def to_verdict(self) -> Verdict:
        """The row as core's :class:`~core.Verdict` (rows stored before the ``position``,
        ``outputs`` or ``categories`` columns have none)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(Verdict) if f.name != "position"}
        return Verdict(**fields, position=Position(**self.position) if self.position else None)


class Job(SQLModel, table=True):
    """A queued piece of work for one host, from the Slack bot: ``kind`` compare or bisect.

    ``status``: queued, running, done, failed, cancelled, interrupted. ``args`` holds the
    request (``head_ref``, ``base_ref``, ``base_sha``, ``head_sha``, ``modes``, ``rounds``);
    ``dedupe_key`` (Slack team and trigger id) is unique, so a redelivered slash command
    cannot queue a second job. ``owner`` is the bot process running it (``pid``, ``host``);
    ``attempts`` counts re-queues after a crash. ``slack`` keeps where its messages are
    (``channel``, ``thread_ts``, ``progress_ts``, ``response_url``). ``priority``: lower runs
    first (people's commands 0, scheduled watches 10); within a priority, oldest first.
    ``watch``: the name of the watch that queued it, ``None`` for a person's command.
    """

    __tablename__ = "jobs"
    id: int | None = Field(default=None, primary_key=True)
    kind: str = "compare"
    status: str = Field(default="queued", index=True)
    host: str = Field(index=True)
    engine_name: str
    workload_name: str
    args: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    user_id: str
    channel_id: str
    team_id: str = ""
    dedupe_key: str | None = Field(default=None, unique=True, index=True)
    attempts: int = 0
    priority: int = 0
    watch: str | None = Field(default=None, index=True)
    run_id: int | None = Field(default=None, foreign_key="runs.id")
    owner: dict | None = Field(default=None, sa_column=Column(JSON))
    slack: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    reason: str | None = Field(default=None, sa_column=Column(Text))
    created_at: dt.datetime = Field(default_factory=utcnow)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None


class CommandRecord(SQLModel, table=True):
    """One command received by the bot: who (Slack user, channel, team), what (the text), when,
    and what came of it (``result``: queued job N, refused, usage error, ...).

    A command that needs work after its acknowledgement is written before the ack with
    ``result`` ``received``, ``payload`` (what is needed to carry it out and answer it: trigger
    id, response URL) and ``owner`` (the bot process carrying it out, see storage._owners);
    ``claims`` counts the processes that took it up (a compare-and-set guard). A received
    command whose owner died is taken up by the next bot.
    """

    __tablename__ = "command_audit"
    id: int | None = Field(default=None, primary_key=True)
    at: dt.datetime = Field(default_factory=utcnow)
    user_id: str
    channel_id: str
    team_id: str = ""
    command: str = Field(sa_column=Column(Text, nullable=False))
    result: str = Field(sa_column=Column(Text, nullable=False))
    job_id: int | None = None
    payload: dict | None = Field(default=None, sa_column=Column(JSON))
    owner: dict | None = Field(default=None, sa_column=Column(JSON))
    claims: int = 0


class ScheduleTick(SQLModel, table=True):
    """One run of a scheduled job of the bot (``schedule_id``: ``summary`` or ``watch:<name>``):
    when, and what came of it (``result``: ``queued job N``, ``nothing new``, ``posted``,
    ``error: ...``); ``job_id`` is the job it queued, if any."""

    __tablename__ = "schedule_log"
    id: int | None = Field(default=None, primary_key=True)
    schedule_id: str = Field(index=True)
    at: dt.datetime = Field(default_factory=utcnow)
    result: str = Field(sa_column=Column(Text, nullable=False))
    job_id: int | None = None


class Owner(SQLModel, table=True):
    """The lease of one specperf process that owns jobs, runs or received commands
    (storage._owners): its identity, when it last renewed, and for how long a renewal holds."""

    __tablename__ = "owners"
    instance: str = Field(primary_key=True)
    pid: int
    host: str
    boot_id: str = ""
    pid_ns: str = ""
    start_ticks: int | None = Field(default=None, sa_type=BigInteger)
    kind: str = "specperf"
    renewed_at: dt.datetime = Field(default_factory=utcnow, index=True)
    lease_s: float = 60.0


class SeenRequest(SQLModel, table=True):
    """A signed Slack request already served (its signature), kept for the replay window, so
    a replay after a bot restart is refused too."""

    __tablename__ = "seen_requests"
    signature: str = Field(primary_key=True, max_length=128)
    at: dt.datetime = Field(default_factory=utcnow, index=True)
