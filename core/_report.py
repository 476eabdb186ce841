"""A compare's report as data, and its chart.

Both work from the statistics' view of the trials, ``{mode: {"base"|"head": [ArmTrial]}}``,
which a live result and a run read back from the database both give, so a stored run's
report (and a recomputed verdict) is built exactly as the live one was.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import TypedDict

from core._config import CompareConfig
from core._stats import ArmTrial, Speedup, Verdict, speedup, speedup_change

BASELINE = "baseline"


class ArmFigures(TypedDict):
    """One arm of one mode in a :class:`CompareReport`: medians over its ok trials."""

    trials: int
    output_tok_s: float | None
    acceptance_length: float | None
    step_ms: float | None
    output_tok_s_all: list[float]


class ModeReport(TypedDict, total=False):
    """One mode: its two arms and (when decided) the verdict as a dict of :class:`Verdict`."""

    base: ArmFigures
    head: ArmFigures
    verdict: dict


class SpeedupReport(TypedDict):
    """A speculative mode's speedup over baseline on each side (dicts of :class:`Speedup`)."""

    base: dict | None
    head: dict | None
    change: dict | None


class Environment(TypedDict):
    """What differed between the arms' environments, and what drifted around each launch."""

    arms_differ: list[str]
    drift: dict[int, list[str]]


class CompareReport(TypedDict):
    """The report of a compare as it crosses to the front ends and into ``--json``: the
    settings, each mode's figures and verdict, the speedups and the environment. A typed
    dict, so the JSON shape is the type."""

    settings: dict
    modes: dict[str, ModeReport]
    speedups: dict[str, SpeedupReport]
    environment: Environment


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _speedup_dict(s: Speedup | None) -> dict | None:
    return dataclasses.asdict(s) if s else None


def summarize(trials: dict[str, dict[str, list[ArmTrial]]], verdicts: dict[str, Verdict],
              settings: CompareConfig, environment: Environment | None = None) -> CompareReport:
    """The report: per mode, medians of each arm, the verdict and its evidence; per
    speculative mode, its speedup over ``baseline`` on each side and the change of that speedup.

    Returns a JSON-ready dict::

        {"modes": {mode: {"base": {...medians}, "head": {...}, "verdict": {...}}},
         "speedups": {mode: {"base": Speedup, "head": Speedup, "change": Speedup}},
         "environment": {"arms_differ": [line, ...], "drift": {launch seq: [line, ...]}}}
    """
    modes: dict[str, ModeReport] = {}
    for mode, arms in trials.items():
        modes[mode] = {  # type: ignore[assignment]  # the roles are base and head
            role: {
                "trials": len(arm),
                "output_tok_s": _median([t.output_tok_s for t in arm]),
                "acceptance_length": _median([t.acceptance_length for t in arm]),
                "step_ms": _median([t.step_ms for t in arm]),
                "output_tok_s_all": [t.output_tok_s for t in arm],
            }
            for role, arm in arms.items()
        }
        if mode in verdicts:
            modes[mode]["verdict"] = dataclasses.asdict(verdicts[mode])
    speedups: dict[str, SpeedupReport] = {}
    if BASELINE in trials:
        plain = trials[BASELINE]
        for mode, arms in trials.items():
            if mode == BASELINE:
                continue
            tok = {role: ([t.output_tok_s for t in plain[role]], [t.output_tok_s for t in arms[role]])
                   for role in ("base", "head")}
            speedups[mode] = {
                "base": _speedup_dict(speedup(*tok["base"])),
                "head": _speedup_dict(speedup(*tok["head"])),
                "change": _speedup_dict(speedup_change(tok["base"], tok["head"])),
            }
    return {"settings": settings.model_dump(), "modes": modes, "speedups": speedups,
            "environment": environment or {"arms_differ": [], "drift": {}}}


def render_chart(trials: dict[str, dict[str, list[ArmTrial]]], path: Path, title: str) -> Path:
    """A PNG of per-trial output tok/s by arm, one panel per mode (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(trials), figsize=(4.5 * len(trials), 4), squeeze=False)
    for ax, (mode, arms) in zip(axes[0], trials.items()):
        for x, (role, label, color) in enumerate((("base", "base", "#4c72b0"), ("head", "commit", "#dd8452"))):
            values = [t.output_tok_s for t in arms[role]]
            ax.scatter([x + (i - len(values) / 2) * 0.03 for i in range(len(values))], values,
                       color=color, alpha=0.8, label=label)
            if values:
                ax.hlines(statistics.median(values), x - 0.25, x + 0.25, color=color)
        ax.set_xticks([0, 1], ["base", "commit"])
        ax.set_title(mode)
        ax.set_ylabel("output tok/s")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
