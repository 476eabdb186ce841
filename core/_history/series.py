"""A history series as data: one point per measured commit of one (engine, host, mode,
workload), in commit order. ``storage.load_series`` builds them from stored runs; the
change-point analysis and the summary (core._history.summary) read them. No database here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from core._env.fingerprint import Category, Change, diff_snapshots

ENV_CATEGORIES = (Category.DRIVER, Category.NCCL, Category.TORCH, Category.ENGINE)
_NOT_ENVIRONMENT = ("system.git.sha", "system.git.dirty")  # the engine commit itself moves at every point


@dataclasses.dataclass
class SeriesPoint:
    """One measured commit of a series.

    Attributes:
        sha: the commit (40 hex).
        refs: the refs it was asked for by (``main``, a tag, ``abc123^``), oldest first.
        output_tok_s: median output tok/s of its trials.
        acceptance_length: median acceptance length of its trials (``None`` without speculation).
        trials_output_tok_s: every ok trial's output tok/s, by run and launch order.
        trials_acceptance_length: the trials' acceptance lengths (those that have one).
        run_ids: the done runs that measured it, ascending.
        first_measured_at, last_measured_at: UTC start times of its first and newest run.
        verdicts: ``{"run_id", "base_sha", "verdict", "change_pct"}`` of runs with it as head.
        env: the newest full env snapshot taken for it, or ``None``.
        env_changes: driver, NCCL, torch and engine-library changes since the previous point
            with a snapshot (empty for the first).
        runs: per run that measured it, ``(run id, UTC start, its trials' output tok/s, its
            full env snapshot of this commit or ``None``)``, oldest first: the same commit
            measured again, for :func:`core._history.summary.same_commit_moves`.
    """

    sha: str
    refs: list[str]
    output_tok_s: float
    acceptance_length: float | None
    trials_output_tok_s: list[float]
    trials_acceptance_length: list[float]
    run_ids: list[int]
    first_measured_at: dt.datetime
    last_measured_at: dt.datetime
    verdicts: list[dict]
    env: dict | None = None
    env_changes: list[Change] = dataclasses.field(default_factory=list)
    runs: list[tuple[int, dt.datetime, list[float], dict | None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Series:
    """The points of one (engine, host, mode, workload) in commit order.

    ``ordered_by``: ``first-parent`` (the caller's git order) or ``run time``; ``off_branch``:
    measured commits left out because they are not in the git order. ``category``: set for a
    series of one category of a prompt set, whose ``workload`` is then ``WORKLOAD:CATEGORY``
    (``storage.load_series(by_category=True)``).
    """

    engine: str
    host: str
    mode: str
    workload: str
    points: list[SeriesPoint]
    ordered_by: str
    off_branch: int = 0
    category: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(engine, host, mode, workload)."""
        return self.engine, self.host, self.mode, self.workload


def env_changes(before: dict | None, after: dict | None) -> list[Change]:
    """Driver, NCCL, torch and engine-library changes from snapshot ``before`` to ``after``
    (the engine's own commit left out); empty when either is missing."""
    if not (before and after):
        return []
    return [c for c in diff_snapshots(before, after)
            if c.category in ENV_CATEGORIES and c.key not in _NOT_ENVIRONMENT]
