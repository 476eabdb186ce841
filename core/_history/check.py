"""Was the good number real: today's launches of a commit set against the stored launches of
the same commit (issue 26).

A compare measures a commit against its base on the same host today; it cannot say whether the
base's 89 tok/s of last week still holds. This module answers that, per mode and arm: the
newest earlier run that measured the same commit (same SHA) in the same mode on the same host,
engine and workload is tested against today's launches with
:func:`core._experiments.stats.unpaired_shift` (two unpaired groups of launches, Welch's t
interval and test of the change of mean log tok/s, the compare's margin): NO CHANGE is
"consistent", REGRESSION "below", IMPROVEMENT "above", INCONCLUSIVE "unsettled". Each side
brings its own launch-to-launch spread, or, where that is smaller, the spread pooled over the
stored runs of this set-up with both sides' (:func:`launch_spread`,
:func:`core._experiments.stats.unpaired_shift`; CI, 2026-12-07: two runs of one commit whose two
launches each agreed to 0.1% read -2.9% (-3.6 .. -2.2) apart where launches of that engine
usually differ by 1-4%), and the two runs' levels bring the host's drift between
runs (:func:`level_spread`: how far the same commit's level moved between stored runs of it
here; issue 44: on a 2-vCPU VM an unchanged run rechecked 16 minutes later read +12.5%, all of
it the host's level). The drift only makes a difference harder to claim: "below" or "above"
needs the change beyond it as well (else "unsettled", saying so), "consistent" does not. Until
the drift is learnt from at least two repeats of stored runs, it is taken as no smaller than the
two runs' own launch-to-launch spread (:func:`assumed_level_spread`; with two launches a side,
the pooled one), except where the engine's
configuration changed since that run (a named cause); the line says which it used. A noisy
or drifting host gives "unsettled", never a false "below".

Runs are matched on what defines the benchmark (:data:`MATCH_KEYS`: the engine's model and
served name, and the workload): an earlier run of the same commit with another model or
workload is "not comparable", with the first difference named. The engine's launch arguments
(common and the mode's) and environment variables are not matched on: they are what a user
changes on a host and the engine feels, so they are compared and, when the figure moved,
named first among what changed since then, before the fingerprint diff
(:func:`core._env.fingerprint.diff_snapshots`, most likely throughput mover first: driver,
NCCL, torch, engine libraries, engine variables, GPU clocks and links, then the rest) between
that run's snapshot of the arm and today's; when nothing recorded differs, that is said: the
cause is outside what we record.

:func:`environment_moved` turns the checks of one compare into the report's first lines when a
mode's two arms both moved against their past while the verdict between them is no change:
the drop is not between these commits.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from core._config import WorkloadConfig
from core._env.fingerprint import SnapshotError, diff_snapshots
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, unpaired_shift

OUTCOMES: dict[str, str] = {NO_CHANGE: "consistent", REGRESSION: "below", IMPROVEMENT: "above"}
MATCH_KEYS = ("model", "served_model_name", "workload")
CONFIG_KEYS = ("args", "mode args", "env")  # compared and named, not matched on
MAX_CHANGES_SHOWN = 5  # in :meth:`HistoryCheck.line`; ``changes`` keeps every one


def setup_of(settings: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """What in a run's stored ``settings`` (``settings["engine"]``, the redacted engine config,
    ``settings["workload"]`` and the compare's ``pairing``) changes mode ``mode``'s figure or
    its spread: ``{model, served_model_name, args, mode args, env, workload, pairing}``. The
    pairing is neither matched on nor named; it keeps the spreads of launches one at a time and
    of two engines in turns (five-fold apart on a VM, bench/NOISE_RESULTS.md) out of each
    other's pools (:func:`level_spread`, :func:`launch_spread`)."""
    engine = settings.get("engine") or {}
    return {"model": engine.get("model"), "served_model_name": engine.get("served_model_name"),
            "args": engine.get("args"), "mode args": (engine.get("modes") or {}).get(mode),
            "env": engine.get("env"), "workload": _filled(settings.get("workload")),
            "pairing": (settings.get("compare") or {}).get("pairing")}


def _filled(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stored workload with the keys added since it was stored at their defaults (a run
    stored before ``prompts`` existed measured random words), so it matches today's; less
    ``windows``, which says how many times a launch measured the workload, not what it measures
    (a calibration of 3 windows a launch and a compare of 1 measure the same figure)."""
    if workload is None:
        return None
    filled = {**WorkloadConfig().model_dump(), **workload}
    filled.pop("windows", None)
    return filled


@dataclass(frozen=True)
class PastLaunches:
    """One earlier run's kept launches of one commit in one mode: ``output_tok_s`` per launch,
    its ``setup`` (:func:`setup_of`) and its full env snapshot of that arm (``None``: none
    stored)."""

    run_id: int
    created_at: dt.datetime
    sha: str
    output_tok_s: list[float]
    setup: dict[str, Any]
    snapshot: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class HistoryCheck:
    """Today's launches of ``sha`` (arm ``role`` of mode ``mode``) against run ``run_id``'s.

    ``outcome``: ``consistent``, ``below``, ``above``, ``unsettled`` or ``not comparable``.
    Percentages are today's mean tok/s against that run's (``change_pct``, its 95% interval);
    ``then_tok_s`` and ``now_tok_s`` are the two medians; ``reason`` says why it is not
    comparable, or how the test came out. ``changes``: for ``below`` and ``above``, the
    environment differences between that run's snapshot of the arm and today's, most likely
    throughput mover first (``()``: none of the facts we record differ; ``None``: a snapshot
    is missing, or the outcome is another)."""

    mode: str
    role: str
    sha: str
    outcome: str
    run_id: int
    run_at: dt.datetime
    reason: str
    then_tok_s: float | None = None
    now_tok_s: float | None = None
    change_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    changes: tuple[str, ...] | None = None
    level_sd_pct: float | None = None  # the host's drift between runs allowed for (:func:`level_spread`)

    def since_then(self) -> str:
        """What changed since that run, for a ``below`` or ``above``: ``"since then: driver
        550.54 -> 560.35; ..."`` (at most :data:`MAX_CHANGES_SHOWN`, then how many more), or
        that the recorded environment is the same; ``""`` for other outcomes."""
        if self.outcome not in ("below", "above"):
            return ""
        if self.changes is None:
            return "no stored environment snapshot of both runs to say what changed"
        if not self.changes:
            return "the environment facts we record are the same: the cause is outside them"
        more = len(self.changes) - MAX_CHANGES_SHOWN
        return "since then: " + "; ".join(self.changes[:MAX_CHANGES_SHOWN]) + (f"; and {more} more" if more > 0 else "")

    def line(self) -> str:
        """``baseline base 5edcab7ff1: below run 3 of 2026-12-03 14:05 by -8.1% (-9.9 .. -6.2): 89.0 -> 81.8 tok/s``."""
        head = f"{self.mode} {self.role} {self.sha[:10]}: "
        when = f"run {self.run_id} of {self.run_at:%Y-%m-%d %H:%M}"
        if self.outcome == "not comparable":
            return head + f"not comparable with {when}: {self.reason}"
        figures = f"{self.then_tok_s:,.1f} -> {self.now_tok_s:,.1f} tok/s"
        interval = f"{self.change_pct:+.1f}% ({self.ci_low_pct:+.1f} .. {self.ci_high_pct:+.1f})"
        if self.outcome == "consistent":
            return head + f"consistent with {when}: {interval}, {figures}"
        if self.outcome == "unsettled":
            return head + f"against {when}: {interval}, {figures}; {self.reason}"
        drift = " and this host's drift between runs" if self.level_sd_pct else ""
        return (head + f"{self.outcome} {when} by {interval}, beyond both runs' launch-to-launch spread{drift}: "
                f"{figures}; " + self.since_then())

    def to_dict(self) -> dict:
        """JSON-ready, with ``line``."""
        out = asdict(self)
        out["run_at"] = self.run_at.isoformat()
        out["changes"] = None if self.changes is None else list(self.changes)
        out["line"] = self.line()
        return out


def _differences(then: Mapping[str, Any], now: Mapping[str, Any], keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(key, what moved)`` for the keys of ``keys`` whose values differ: ``("env",
    "NCCL_P2P_DISABLE 1 -> (unset)")`` per variable of a mapping, ``("args", "--max-num-seqs 8
    -> --max-num-seqs 2")`` for a list, ``("model", "m -> m2")`` otherwise."""
    out = []
    for key in keys:
        a, b = then.get(key), now.get(key)
        if a == b:
            continue
        if isinstance(a, Mapping) or isinstance(b, Mapping):
            a, b = a or {}, b or {}
            names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            out += [(key, f"{n} {a.get(n) or '(unset)'} -> {b.get(n) or '(unset)'}") for n in names]
        elif isinstance(a, list) or isinstance(b, list):
            out.append((key, f"{' '.join(map(str, a or [])) or '(none)'} -> {' '.join(map(str, b or [])) or '(none)'}"))
        else:
            out.append((key, f"{a or '(unset)'} -> {b or '(unset)'}"))
    return out


def match_differences(then: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What makes two set-ups (:func:`setup_of`) not comparable: the :data:`MATCH_KEYS` that
    differ, a line each (``model m -> m2``); empty when they are comparable."""
    return [f"{key} {moved}" for key, moved in _differences(then, now, MATCH_KEYS)]


def _changes(then: PastLaunches, now_setup: Mapping[str, Any], now: Mapping[str, Any] | None
             ) -> tuple[str, ...] | None:
    """The engine configuration's differences (:data:`CONFIG_KEYS`), then the fingerprint
    diff of the two snapshots; ``None`` when a snapshot is missing and the configuration is
    the same (nothing can be said)."""
    configured = [f"{key} {moved}" for key, moved in _differences(then.setup, now_setup, CONFIG_KEYS)]
    if then.snapshot is None or now is None:
        return tuple(configured) or None
    try:
        fingerprint = diff_snapshots(then.snapshot, now)
    except SnapshotError:  # a snapshot stored in another shape: the configuration alone
        return tuple(configured) or None
    # an engine variable shows in both (the probe runs with the engine's environment): once
    env_then, env_now = then.setup.get("env") or {}, now_setup.get("env") or {}
    named = {f"env {k}" for k in set(env_then) | set(env_now) if env_then.get(k) != env_now.get(k)}
    return tuple(configured + [change.line for change in fingerprint if change.what not in named])


@dataclass(frozen=True)
class LevelSpread:
    """How far this host's level moves between runs of one commit: ``sd_pct``, the sd of a
    run's mean log tok/s around the commit's level beyond its own launch-to-launch share
    (percent), from ``pairs`` degrees of freedom (runs beyond the first, summed over commits);
    ``pairs`` 0: not measured yet, assumed as large as the launch-to-launch spread of the two
    runs compared (:func:`assumed_level_spread`)."""

    sd_pct: float
    pairs: int

    def line(self) -> str:
        if self.pairs == 0:
            return (f"this host's drift between runs is not measured yet (no commit of this set-up in two stored runs "
                    f"here), so it is taken as the launch-to-launch spread, {self.sd_pct:.1f}%")
        return (f"this host's level moves {self.sd_pct:.1f}% (sd) between runs of one commit, from {self.pairs} "
                f"repeat{'s' if self.pairs != 1 else ''} of stored runs")


def assumed_level_spread(then: list[float], today: list[float]) -> LevelSpread:
    """The drift between runs taken, until stored runs measure it, as the larger launch-to-launch
    spread (sd of log tok/s, percent) of the two runs compared: a host whose launches move that
    much within a run is taken to move as much between runs (issue 44: launches of one arm ranged
    325-533 tok/s within 20 minutes on a 2-vCPU VM, and its level 16 minutes later read +12.5%)."""
    sd = max(statistics.stdev(math.log(v) for v in side) for side in (then, today))
    return LevelSpread(100.0 * math.expm1(sd), 0)


def level_spread(past: list[PastLaunches], setup: Mapping[str, Any]) -> LevelSpread | None:
    """The host's drift between runs (:class:`LevelSpread`) from ``past`` (one mode's earlier
    runs on this host, engine and workload), counting only runs with ``setup`` (the same
    :func:`setup_of`): per commit measured in two or more such runs, the variance of its run
    means of log tok/s less the mean variance of a run mean (launch spread / launches), floored
    at 0, pooled over commits by their degrees of freedom (a one-way random-effects estimate).
    Both arms of one run that measured the same commit count as one run. ``None`` when no
    commit was measured in two such runs."""
    logs: dict[str, dict[int, list[float]]] = {}
    for launches in past:
        if launches.setup == setup:
            logs.setdefault(launches.sha, {}).setdefault(launches.run_id, []).extend(
                math.log(v) for v in launches.output_tok_s if v > 0)
    total, df = 0.0, 0
    for by_run in logs.values():
        runs = [(statistics.fmean(v), statistics.variance(v) / len(v)) for v in by_run.values() if len(v) >= 2]
        if len(runs) < 2:
            continue
        between = statistics.variance(m for m, _ in runs) - statistics.fmean(v for _, v in runs)
        total += max(between, 0.0) * (len(runs) - 1)
        df += len(runs) - 1
    if df == 0:
        return None
    return LevelSpread(100.0 * math.expm1(math.sqrt(total / df)), df)


def launch_spread(past: list[PastLaunches], setup: Mapping[str, Any]) -> tuple[float, int] | None:
    """The launch-to-launch variance of ln tok/s within one run of this set-up, pooled over
    ``past`` (the runs with ``setup``, :func:`setup_of`; a run's launches of one commit are one
    group, both arms of a run that measured the same commit together): ``(variance, degrees of
    freedom)``, the df summed over groups (launches - 1 each), for
    :func:`core._experiments.stats.unpaired_shift`'s ``launch_var``. ``None`` when no group
    has two launches."""
    groups: dict[tuple[str, int], list[float]] = {}
    for launches in past:
        if launches.setup == setup:
            groups.setdefault((launches.sha, launches.run_id), []).extend(
                math.log(v) for v in launches.output_tok_s if v > 0)
    squares, df = 0.0, 0
    for logs in groups.values():
        if len(logs) >= 2:
            squares += statistics.variance(logs) * (len(logs) - 1)
            df += len(logs) - 1
    return (squares / df, df) if df else None


def check_history(mode: str, role: str, sha: str, today: list[float], today_setup: Mapping[str, Any],
                  past: list[PastLaunches], *, margin_pct: float, alpha: float = 0.05,
                  today_snapshot: Mapping[str, Any] | None = None,
                  levels: list[PastLaunches] | None = None) -> HistoryCheck | None:
    """Today's launches of ``sha`` against the newest of ``past`` (newest first) that measured it,
    allowing for the host's drift between runs (module docstring).

    Args:
        today: today's kept launches' output tok/s of this arm.
        today_setup: :func:`setup_of` of today's run.
        past: earlier runs' launches of this mode on the same host, engine and workload.
        margin_pct, alpha: the compare's, for :func:`core._experiments.stats.unpaired_shift`.
        today_snapshot: today's full env snapshot of this arm, for what changed since a past
            run it reads below or above.
        levels: the runs to learn the host's drift from (:func:`level_spread`) and the pooled
            launch-to-launch spread of this set-up (:func:`launch_spread`, which a side's own
            spread of few launches is taken as no smaller than); default ``past``.

    Returns:
        ``None`` when no earlier run measured ``sha`` with at least 2 launches, or today has
        fewer than 2.
    """
    same = [p for p in past if p.sha == sha and len(p.output_tok_s) >= 2]
    if not same or len(today) < 2:
        return None
    comparable = [p for p in same if not _differences(p.setup, today_setup, MATCH_KEYS)]
    if not comparable:
        newest = same[0]
        key, moved = _differences(newest.setup, today_setup, MATCH_KEYS)[0]
        return HistoryCheck(mode, role, sha, "not comparable", newest.run_id, newest.created_at,
                            f"{key} differs: {moved}")
    then = comparable[0]
    levels = past if levels is None else levels
    # the pool is the other runs': ``then``'s own squares are counted as its side's (unpaired_shift)
    pooled = launch_spread([p for p in levels if (p.run_id, p.sha) != (then.run_id, then.sha)], today_setup)
    shift = unpaired_shift(then.output_tok_s, today, margin_pct=margin_pct, alpha=alpha, launch_var=pooled)
    outcome = OUTCOMES.get(shift.verdict, "unsettled")
    reason = shift.reason if outcome == "unsettled" else f"{shift.verdict}: {shift.reason}"
    drift: LevelSpread | None = None
    if outcome in ("below", "above"):  # a difference is claimed only beyond the host's drift between runs too
        drift = _drift(then, today, today_setup, levels, pooled)
        if drift is not None:
            drifted = unpaired_shift(then.output_tok_s, today, margin_pct=margin_pct, alpha=alpha,
                                     level_sd_pct=drift.sd_pct, launch_var=pooled)
            if OUTCOMES.get(drifted.verdict) == outcome:
                shift, reason = drifted, f"{drifted.verdict}: {drifted.reason}; {drift.line()}"
            else:
                outcome = "unsettled"
                reason = (f"{shift.change_pct:+.1f}% ({shift.ci_low_pct:+.1f} .. {shift.ci_high_pct:+.1f}) beyond both "
                          f"runs' launch-to-launch spread, but not beyond the host's drift between runs: {drift.line()}; "
                          "with it allowed for, " + drifted.reason)
                shift = drifted
    changes = _changes(then, today_setup, today_snapshot) if outcome in ("below", "above") else None
    return HistoryCheck(mode, role, sha, outcome, then.run_id, then.created_at, reason,
                        then_tok_s=statistics.median(then.output_tok_s), now_tok_s=statistics.median(today),
                        change_pct=shift.change_pct, ci_low_pct=shift.ci_low_pct, ci_high_pct=shift.ci_high_pct,
                        changes=changes, level_sd_pct=drift.sd_pct if drift else None)


def _drift(then: PastLaunches, today: list[float], today_setup: Mapping[str, Any],
           levels: list[PastLaunches], pooled: tuple[float, int] | None = None) -> LevelSpread | None:
    """The drift between runs a below or above must clear (module docstring): measured from at
    least two repeats of stored runs; else the larger of what was measured and the launch
    spread (:func:`assumed_level_spread`: the runs' own, or with two launches a side, whose
    spread is one difference and no estimate, the spread ``pooled`` over the set-up's other
    runs, :func:`launch_spread`), unless the engine's configuration changed since that run (a
    named cause); with two launches a side and no pool, the measured drift, if any (Welch's df
    of about 1 holds the interval open)."""
    measured = level_spread(levels, today_setup)
    if measured is not None and measured.pairs >= 2:
        return measured
    if _differences(then.setup, today_setup, CONFIG_KEYS):
        return measured  # a named cause
    if min(len(then.output_tok_s), len(today)) < 3:
        if pooled is None:
            return measured
        assumed = LevelSpread(100.0 * math.expm1(math.sqrt(pooled[0])), 0)
    else:
        assumed = assumed_level_spread(then.output_tok_s, today)
    return assumed if measured is None or measured.sd_pct < assumed.sd_pct else measured


def environment_moved(checks: list[HistoryCheck], verdicts: Mapping[str, str]) -> list[str]:
    """The report's first lines from one compare's ``checks``: for each mode whose verdict
    (``verdicts``: mode -> verdict) is NO CHANGE or INCONCLUSIVE while both arms read below
    (or both above) their earlier runs, ``"baseline: both arms are about -8.0% below their
    earlier runs (run 3 of 2026-11-26 09:00): the drop is not between these commits; since
    then: ..."``. An A/A (one arm checked) counts when that arm moved."""
    lines = []
    for mode in dict.fromkeys(c.mode for c in checks):
        mine = [c for c in checks if c.mode == mode]
        if verdicts.get(mode) not in (NO_CHANGE, INCONCLUSIVE):
            continue
        for outcome, word in (("below", "drop"), ("above", "rise")):
            if mine and all(c.outcome == outcome for c in mine):
                change = statistics.mean(c.change_pct for c in mine if c.change_pct is not None)
                runs = ", ".join(dict.fromkeys(f"run {c.run_id} of {c.run_at:%Y-%m-%d %H:%M}" for c in mine))
                arms = "both arms are" if len(mine) > 1 else "the commit is"
                lines.append(f"{mode}: {arms} about {change:+.1f}% {outcome} their earlier runs ({runs}) while the "
                             f"verdict between them is {verdicts[mode]}: the {word} is not between these commits; "
                             + mine[0].since_then())
    return lines
