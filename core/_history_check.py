"""Was the good number real: today's launches of a commit set against the stored launches of
the same commit (issue 26).

A compare measures a commit against its base on the same host today; it cannot say whether the
base's 89 tok/s of last week still holds. This module answers that, per mode and arm: the
newest earlier run that measured the same commit (same SHA) in the same mode on the same host,
engine and workload, with the same set-up (what changes the figure: the engine's model, launch
arguments of all modes and of this mode, environment variables, and the workload), is tested
against today's launches with :func:`core.unpaired_shift` (two unpaired groups of launches,
Mann-Whitney p and a BCa bootstrap interval of the change of mean log tok/s, the compare's
margin): NO CHANGE is "consistent", REGRESSION "below", IMPROVEMENT "above", INCONCLUSIVE
"unsettled". An earlier run of the same commit with a different set-up is "not comparable",
with the first difference named. The spread each side brings is its own launch-to-launch
spread, so a noisy host gives "unsettled", never a false "below".
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from core._stats import IMPROVEMENT, NO_CHANGE, REGRESSION, unpaired_shift

OUTCOMES: dict[str, str] = {NO_CHANGE: "consistent", REGRESSION: "below", IMPROVEMENT: "above"}
SETUP_KEYS = ("model", "served_model_name", "args", "mode args", "env", "workload")


def setup_of(settings: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """What in a run's stored ``settings`` (``settings["engine"]``, the redacted engine config,
    and ``settings["workload"]``) changes mode ``mode``'s figure: ``{model, served_model_name,
    args, mode args, env, workload}``."""
    engine = settings.get("engine") or {}
    return {"model": engine.get("model"), "served_model_name": engine.get("served_model_name"),
            "args": engine.get("args"), "mode args": (engine.get("modes") or {}).get(mode),
            "env": engine.get("env"), "workload": settings.get("workload")}


@dataclass(frozen=True)
class PastLaunches:
    """One earlier run's kept launches of one commit in one mode: ``output_tok_s`` per launch,
    and its ``setup`` (:func:`setup_of`)."""

    run_id: int
    created_at: dt.datetime
    sha: str
    output_tok_s: list[float]
    setup: dict[str, Any]


@dataclass(frozen=True)
class HistoryCheck:
    """Today's launches of ``sha`` (arm ``role`` of mode ``mode``) against run ``run_id``'s.

    ``outcome``: ``consistent``, ``below``, ``above``, ``unsettled`` or ``not comparable``.
    Percentages are today's mean tok/s against that run's (``change_pct``, its 95% interval);
    ``then_tok_s`` and ``now_tok_s`` are the two medians; ``reason`` says why it is not
    comparable, or how the test came out."""

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
        return head + f"{self.outcome} {when} by {interval}, beyond both runs' launch-to-launch spread: {figures}"

    def to_dict(self) -> dict:
        """JSON-ready, with ``line``."""
        out = asdict(self)
        out["run_at"] = self.run_at.isoformat()
        out["line"] = self.line()
        return out


def _first_difference(then: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    for key in SETUP_KEYS:
        a, b = then.get(key), now.get(key)
        if a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            parts = [f"{n} {a.get(n) or '(unset)'} -> {b.get(n) or '(unset)'}" for n in names[:3]]
            return f"{key} differs: " + "; ".join(parts)
        return f"{key} differs: {a} -> {b}"
    return "the set-up differs"


def check_history(mode: str, role: str, sha: str, today: list[float], today_setup: Mapping[str, Any],
                  past: list[PastLaunches], *, margin_pct: float, alpha: float = 0.05) -> HistoryCheck | None:
    """Today's launches of ``sha`` against the newest of ``past`` (newest first) that measured it.

    Args:
        today: today's kept launches' output tok/s of this arm.
        today_setup: :func:`setup_of` of today's run.
        past: earlier runs' launches of this mode on the same host, engine and workload.
        margin_pct, alpha: the compare's, for :func:`core.unpaired_shift`.

    Returns:
        ``None`` when no earlier run measured ``sha`` with at least 2 launches, or today has
        fewer than 2.
    """
    same = [p for p in past if p.sha == sha and len(p.output_tok_s) >= 2]
    if not same or len(today) < 2:
        return None
    comparable = [p for p in same if p.setup == dict(today_setup)]
    if not comparable:
        newest = same[0]
        return HistoryCheck(mode, role, sha, "not comparable", newest.run_id, newest.created_at,
                            _first_difference(newest.setup, today_setup))
    then = comparable[0]
    shift = unpaired_shift(then.output_tok_s, today, margin_pct=margin_pct, alpha=alpha)
    outcome = OUTCOMES.get(shift.verdict, "unsettled")
    return HistoryCheck(mode, role, sha, outcome, then.run_id, then.created_at,
                        shift.reason if outcome == "unsettled" else f"{shift.verdict}: {shift.reason}",
                        then_tok_s=statistics.median(then.output_tok_s), now_tok_s=statistics.median(today),
                        change_pct=shift.change_pct, ci_low_pct=shift.ci_low_pct, ci_high_pct=shift.ci_high_pct)
