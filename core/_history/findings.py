"""What the stored runs of a period found, as data: compare verdicts beyond the margin,
bisect outcomes and failed runs.

``storage.load_findings`` builds these from the run tables; :func:`core._history.summary.build_summary` lists
them before the history's change points, so a summary never calls a period quiet when a
compare said REGRESSION, a bisect named a culprit or a run failed. Pure data: no database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CompareFinding:
    """One mode's verdict of one stored compare run.

    Attributes:
        run_id: the compare run (``specperf show RUN``).
        engine, host, mode, workload: where and what it measured.
        verdict: REGRESSION or IMPROVEMENT for a finding of its own; any verdict when it is
            the evidence of a bisect (:attr:`BisectFinding.evidence`).
        base_sha, head_sha, base_ref, head_ref: the commits (head against base).
        change_pct, ci_low_pct, ci_high_pct, p_value: head against base, percent of base
            output tok/s, with the 95% interval and the rank-test p (``None`` when not computed).
        acceptance_length_base, acceptance_length_head: medians of the arms' trials
            (``None`` without speculation).
        acceptance_change_pct, step_ms_change_pct: how acceptance length and ms per verify
            step moved; ``attribution``: which of the two explains the change
            (``"acceptance length"``, ``"step time"`` or ``None``).
        measured_at: UTC start of the run.
        bisect_run_id: the bisect this compare was a step of, else ``None``.
        outputs: when the arms' answers changed, the outputs check's line
            (core._experiments.outputs): such a compare is a finding whatever its speed verdict.
    """

    run_id: int
    engine: str
    host: str
    mode: str
    workload: str
    verdict: str
    base_sha: str
    head_sha: str
    base_ref: str
    head_ref: str
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    acceptance_length_base: float | None
    acceptance_length_head: float | None
    acceptance_change_pct: float | None
    step_ms_change_pct: float | None
    attribution: str | None
    measured_at: dt.datetime
    bisect_run_id: int | None = None
    outputs: str | None = None

    def evidence(self) -> str:
        """``"-72.8% (95% CI -75.0% .. -70.1%, p = 0.029), acceptance length 4.00 -> 1.02;
        acceptance length explains it (acceptance length -74.5%, ms per step +1.3%)"``."""
        text = _pct(self.change_pct)
        if self.ci_low_pct is not None and self.ci_high_pct is not None:
            text += f" (95% CI {_pct(self.ci_low_pct)} .. {_pct(self.ci_high_pct)}"
            text += f", p = {self.p_value:.2g})" if self.p_value is not None else ")"
        if self.acceptance_length_base is not None and self.acceptance_length_head is not None:
            text += f", acceptance length {self.acceptance_length_base:.2f} -> {self.acceptance_length_head:.2f}"
        if self.attribution:
            moved = [f"{name} {_pct(v)}" for name, v in (("acceptance length", self.acceptance_change_pct),
                                                          ("ms per step", self.step_ms_change_pct)) if v is not None]
            text += f"; {self.attribution} explains it" + (f" ({', '.join(moved)})" if moved else "")
        return text

    def line(self) -> str:
        """One line: verdict, engine / mode, host, head against base, :meth:`evidence`, run id."""
        changed = f"OUTPUTS CHANGED ({self.outputs}), " if self.outputs else ""
        return (f"{changed}{self.verdict} {self.engine} / {self.mode} on {self.host}: {self.head_ref} "
                f"({self.head_sha[:10]}) against {self.base_ref} ({self.base_sha[:10]}): {self.evidence()}; "
                f"run {self.run_id}")


@dataclass(frozen=True)
class BisectFinding:
    """A finished bisect run.

    Attributes:
        run_id: the bisect run (``specperf show RUN`` prints its steps).
        engine, host, mode, workload: as for a compare.
        outcome: ``found`` (``culprit``), ``ambiguous`` (the culprit is one of
            ``candidates``) or ``no-regression`` (nothing to bisect: the bad commit was not a
            REGRESSION against the good one).
        good_sha, bad_sha: the range bisected.
        culprit, candidates, confirmed: as in :class:`core._experiments.bisection.BisectResult`.
        message: the bisect's own conclusion.
        evidence: the compare that decided: the culprit against its parent (or the last good
            commit), else the first compare of bad against good; ``None`` when its run is gone.
        compare_run_ids: every step's compare run, in step order.
        measured_at: UTC start of the bisect.
    """

    run_id: int
    engine: str
    host: str
    mode: str
    workload: str
    outcome: str
    good_sha: str
    bad_sha: str
    culprit: str | None
    candidates: list[str]
    confirmed: bool
    message: str
    evidence: CompareFinding | None
    compare_run_ids: list[int]
    measured_at: dt.datetime

    @property
    def nothing_to_bisect(self) -> bool:
        """True when the bisect stopped at its first compare (no regression between the ends)."""
        return self.outcome == "no-regression"

    def line(self) -> str:
        """One line: the range, the culprit (or candidates, or "nothing to bisect") with the
        deciding compare's evidence, the bisect's run id and compares."""
        where = f"bisect {self.engine} / {self.mode} on {self.host}, {self.good_sha[:10]}..{self.bad_sha[:10]}"
        if self.nothing_to_bisect:
            what = "nothing to bisect"
        elif self.culprit:
            what = f"culprit {self.culprit[:10]}" + (" (confirmed against its parent)" if self.confirmed else "")
        elif self.candidates:
            what = "culprit one of " + ", ".join(c[:10] for c in self.candidates)
        else:
            what = self.outcome
        if self.evidence is not None:
            e = self.evidence
            what += (f": {e.verdict} {e.head_sha[:10]} against {e.base_sha[:10]} {e.evidence()} "
                     f"(compare run {e.run_id})")
        return (f"{where}: {what}; run {self.run_id}, {len(self.compare_run_ids)} "
                f"compare{'s' if len(self.compare_run_ids) != 1 else ''}")


@dataclass(frozen=True)
class FailedRun:
    """A run that could not measure (status ``failed``): compare or bisect."""

    run_id: int
    kind: str
    engine: str
    host: str
    modes: list[str]
    base_sha: str
    head_sha: str
    head_ref: str
    reason: str
    measured_at: dt.datetime


@dataclass(frozen=True)
class FailureGroup:
    """Failed runs with the same reason (:func:`failure_key` of their reasons), newest first."""

    reason: str
    runs: list[FailedRun]

    def line(self, most: int = 5) -> str:
        """``"FAILED (3 runs): <reason>: run 7 (compare fake baseline 1a2b3c4d5e), ..."``, at
        most ``most`` runs named. The reason is the newest run's own first line, numbers and
        all (repeats of one cause in it said once, :func:`_once`), not the grouping key; when
        the group's runs differ in their numbers, SHAs or paths, it says whose it is."""
        named = ", ".join(f"run {r.run_id} ({r.kind} {r.engine} {','.join(r.modes)} {r.head_sha[:10]})"
                          for r in self.runs[:most])
        more = f" and {len(self.runs) - most} more" if len(self.runs) > most else ""
        reasons = {_once(_first_line(r.reason)) for r in self.runs}
        reason = _once(_first_line(self.runs[0].reason)) if self.runs else self.reason
        whose = "" if len(reasons) == 1 else f" (run {self.runs[0].run_id}; the others differ only in numbers, SHAs or paths)"
        return f"FAILED ({len(self.runs)} run{'s' if len(self.runs) != 1 else ''}): {reason or self.reason}{whose}: {named}{more}"


@dataclass(frozen=True)
class PeriodRuns:
    """What the stored runs of a period found (``storage.load_findings``).

    ``compares``: REGRESSION and IMPROVEMENT verdicts of compare runs that were not a step
    of a listed bisect; ``bisects``: finished bisects; ``failed``: failed runs. Each list is
    oldest first.
    """

    compares: list[CompareFinding] = field(default_factory=list)
    bisects: list[BisectFinding] = field(default_factory=list)
    failed: list[FailedRun] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.compares or self.bisects or self.failed)

    def failure_groups(self) -> list[FailureGroup]:
        """The failed runs grouped by :func:`failure_key`, the largest group first."""
        return group_failures(self.failed)

    def to_dict(self) -> dict:
        """JSON-ready: ``{"compares", "bisects", "failures": [{"reason", "runs"}]}``, times as ISO text."""
        return {"compares": [_plain(c) for c in self.compares], "bisects": [_plain(b) for b in self.bisects],
                "failures": [{"reason": g.reason, "runs": [_plain(r) for r in g.runs]} for g in self.failure_groups()]}


_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_PATH = re.compile(r"(/[\w.+-]+){2,}/?")


def _mask(text: str) -> str:
    return _NUMBER.sub("N", _PATH.sub("<path>", _HEX.sub("<sha>", text)))


def _first_line(reason: str | None) -> str:
    return (reason or "").strip().splitlines()[0] if (reason or "").strip() else ""


def _alike_once(line: str, masked: bool = False) -> tuple[str, int]:
    """(``line`` with its ``; ``-separated parts that are alike but for numbers, SHAs or paths
    said once, the first kept as it is (or masked, with ``masked``); how many more of the most
    repeated part there were). A leading ``label: `` (``sample invalid: ``) is kept aside when
    that finds more repeats."""
    def collapse(text: str) -> tuple[str, int]:
        kept: dict[str, list] = {}
        for part in text.split("; "):
            kept.setdefault(_mask(part), [_mask(part) if masked else part, 0])[1] += 1
        return "; ".join(part for part, _ in kept.values()), max(n for _, n in kept.values()) - 1

    options = [collapse(line)]
    label, sep, rest = line.partition(": ")
    if sep:
        text, more = collapse(rest)
        options.append(((_mask(label) if masked else label) + sep + text, more))
    return min(options, key=lambda option: (-option[1], len(option[0])))


def _once(line: str) -> str:
    """``line`` with repeats of one cause said once and counted (:func:`_alike_once`):
    ``sample invalid: request 0 returned 12 of 64 tokens (...); request 1 returned 12 of 64
    tokens (...)`` -> ``sample invalid: request 0 returned 12 of 64 tokens (...) (and 1 more like it)``."""
    text, more = _alike_once(line)
    return text + (f" (and {more} more like it)" if more else "")


def failure_key(reason: str) -> str:
    """The reason's first line with commit SHAs, paths and numbers (pids, ports, seconds)
    written as ``<sha>``, ``<path>`` and ``N``, its parts alike after that said once (a
    sample's truncated requests, one per request in older reasons), so failures of one cause
    group together. ``"(no reason recorded)"`` for an empty reason."""
    line = _first_line(reason)
    if not line:
        return "(no reason recorded)"
    return _alike_once(line, masked=True)[0]


def group_failures(runs: Iterable[FailedRun]) -> list[FailureGroup]:
    """``runs`` grouped by :func:`failure_key` of their reason; groups largest first (then by
    their newest run), runs newest first."""
    groups: dict[str, list[FailedRun]] = {}
    for run in runs:
        groups.setdefault(failure_key(run.reason), []).append(run)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), -max(r.measured_at for r in kv[1]).timestamp()))
    return [FailureGroup(key, sorted(group, key=lambda r: r.measured_at, reverse=True)) for key, group in ordered]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _plain(item) -> dict:
    out = {}
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if isinstance(value, dt.datetime):
            value = value.isoformat()
        elif dataclasses.is_dataclass(value):
            value = _plain(value)
        out[f.name] = value
    if isinstance(item, BisectFinding):
        out["nothing_to_bisect"] = item.nothing_to_bisect
    return out
