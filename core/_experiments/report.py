"""A compare's report as data, and its chart.

Both work from the statistics' view of the trials, ``{mode: {"base"|"head": [ArmTrial]}}``,
which a live result and a run read back from the database both give, so a stored run's
report (and a recomputed verdict) is built exactly as the live one was.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from core._config import CompareConfig
from core._env.disturbance import Disturbance, culprit_lines
from core._experiments.calibrate import Plan, pair_spread_pct
from core._experiments.outputs import degenerate_lines, lossless_lines
from core._experiments.stats import (
    INCONCLUSIVE,
    ArmTrial,
    Speedup,
    Verdict,
    median_or_none,
    median_per_position,
    moved_position,
    speedup,
    speedup_change,
)

BASELINE = "baseline"


class ArmFigures(TypedDict):
    """One arm of one mode in a :class:`CompareReport`: medians over its ok trials, and the
    mean output length of its requests (tokens; ``None`` when not stored). ``acceptance_per_position``:
    per draft position k = 1.., the median share of drafts whose k-th token was accepted
    (``None`` where the engine does not count it)."""

    trials: int
    output_tok_s: float | None
    acceptance_length: float | None
    step_ms: float | None
    output_tok_s_all: list[float]
    output_tokens_mean: float | None
    acceptance_per_position: list[float] | None


class ModeReport(TypedDict, total=False):
    """One mode: its two arms, (when decided) the verdict as a dict of :class:`Verdict` and what
    limited it, and (when profiled) the profile round's document (core._experiments.profiling).
    ``above``: what every view says before the speed verdict (the outputs changed:
    core._experiments.outputs); ``notes``: what follows it (runs whose speed means little, the
    lossless check against baseline, the verdicts per category)."""

    base: ArmFigures
    head: ArmFigures
    verdict: dict
    limits: list[str]
    above: list[str]
    notes: list[str]
    profile: dict


class SpeedupReport(TypedDict):
    """A speculative mode's speedup over baseline on each side (dicts of :class:`Speedup`)."""

    base: dict | None
    head: dict | None
    change: dict | None


class Environment(TypedDict):
    """What differed between the arms' environments."""

    arms_differ: list[str]


class DisturbanceReport(TypedDict):
    """The disturbed trials of a compare: the policy, how many of all, and the culprits."""

    policy: str
    disturbed_trials: int
    trials: int
    culprits: list[str]


class CostReport(TypedDict):
    """What a compare's verdicts cost on the host (core._experiments.compare.CompareResult.cost),
    with its ``line`` (:func:`cost_line`)."""

    engines_up_s: float
    measured_s: float
    launches: int
    windows: int
    measured_share: float | None
    line: str


def ci_label(alpha: float | None) -> str:
    """The name of a verdict's interval at its ``alpha``: ``95% CI`` (0.05, and verdicts stored
    without one), ``99.9% CI`` for an interim look (core._experiments.compare.INTERIM_ALPHA) or
    whatever a config's ``alpha`` makes it."""
    return f"{100 * (1 - (0.05 if alpha is None else alpha)):.4g}% CI"


def cost_line(cost: dict) -> str:
    """One line of what a compare cost: ``GPU time 4.6 min (engines up, 16 launches), 38% of it
    in measured windows; the rest is start-up, warm-up and stops``, with the windows counted
    where launches measured several (``16 launches, 40 windows``; a stored run of before
    ``windows`` was kept: one a launch). The share says how much of the GPU time more windows
    per launch could still use (issue 42)."""
    up = cost["engines_up_s"]
    share = cost.get("measured_share")
    spent = f"{up / 60:.1f} min" if up >= 60 else f"{up:.0f} s"
    tail = (f", {share:.0%} of it in measured windows; the rest is start-up, warm-up and stops"
            if share is not None else "")
    windows = cost.get("windows", cost["launches"])
    counted = f"{cost['launches']} launches" + (f", {windows} windows" if windows != cost["launches"] else "")
    return f"GPU time {spent} (engines up, {counted}){tail}"


class CompareReport(TypedDict):
    """The report of a compare as it crosses to the front ends and into ``--json``: a busy
    host's headline, the settings, each mode's figures, verdict and what limited it, the
    speedups, every launch with its disturbance (rows of :func:`launch_rows`) and the
    environment; ``client``, added by the front ends: where the benchmark client ran (the
    run's ``settings["client"]``: ``local``, ``here, through an SSH tunnel``, ``on the host,
    beside the engine``, ...); ``history``, added by the front ends: each arm against the
    earlier runs of its commit (:meth:`core._history.check.HistoryCheck.to_dict`); ``cost``,
    when known: what the verdicts cost on the host (:class:`CostReport`). A typed dict, so the
    JSON shape is the type."""

    headline: str | None
    settings: dict
    modes: dict[str, ModeReport]
    speedups: dict[str, SpeedupReport]
    launches: list[dict]
    disturbance: DisturbanceReport
    environment: Environment
    client: NotRequired[str]
    history: NotRequired[list[dict]]
    cost: NotRequired[CostReport]


def _speedup_dict(s: Speedup | None) -> dict | None:
    return dataclasses.asdict(s) if s else None


def launch_rows(seqs: dict[str, dict[str, list[int]]], tok_s: dict[int, float],
                disturbed: dict[int, Disturbance], left_out: dict[str, list[int]],
                windows: dict[int, dict | None] | None = None) -> list[dict]:
    """Every launch in order: ``{"seq", "mode", "role", "output_tok_s", "disturbed": [reason],
    "kept": bool (in the statistics), "monitor_error": str | None}``."""
    rows = []
    for mode, by_role in seqs.items():
        for role, arm in by_role.items():
            for i, seq in enumerate(arm):
                window = (windows or {}).get(seq) or {}
                rows.append({"seq": seq, "mode": mode, "role": role, "output_tok_s": tok_s.get(seq),
                             "disturbed": disturbed[seq].reasons if seq in disturbed else [],
                             "kept": i not in left_out.get(mode, []), "monitor_error": window.get("error")})
    return sorted(rows, key=lambda r: r["seq"])


def _limits(mode: str, verdict: Verdict, arms: dict[str, list[ArmTrial]], rows: list[dict],
            disturbed: dict[int, Disturbance], settings: CompareConfig, calibrated: Plan | None) -> list[str]:
    """What limited the verdict of ``mode`` and what would settle it (for INCONCLUSIVE)."""
    mine = [r for r in rows if r["mode"] == mode]
    hit = {r["seq"]: disturbed[r["seq"]] for r in mine if r["seq"] in disturbed}
    lines = []
    if hit:
        left = sum(1 for r in mine if not r["kept"]) // 2
        kept_hit = sum(1 for r in mine if r["kept"] and r["disturbed"])
        what = "; ".join(culprit_lines(hit))
        fate = []
        if left:
            fate.append(f"{left} pair{'s' if left != 1 else ''} re-measured")
        if kept_hit:
            fate.append(f"{kept_hit} disturbed trial{'s' if kept_hit != 1 else ''} kept in the statistics"
                        + (" (re-measure limit reached)" if settings.on_disturbed == "remeasure" else
                           f" (on_disturbed = {settings.on_disturbed})"))
        lines.append(f"{len(hit)} of {len(mine)} trials disturbed: {what}" + (f"; {', '.join(fate)}" if fate else ""))
    if verdict.verdict != INCONCLUSIVE:
        return lines
    spread = pair_spread_pct(arms["base"], arms["head"])
    if spread is not None:
        lines.append(f"launch-to-launch spread: the pair changes vary by {spread:.1f}% (sd) against a margin of "
                     f"+-{verdict.margin_pct:g}%")
    if calibrated is not None:
        lines.append(f"this host's calibration: {calibrated.line()}")
    pairs = len(arms["base"])
    capped = pairs >= settings.max_trials
    if capped:
        lines.append(f"stopped at the cap of {settings.max_trials} launches per arm ([compare].max_trials)")
    settle = []
    if any(r["kept"] and r["disturbed"] for r in mine):
        settle.append("measure again on a quiet host (`specperf env --watch 60` shows what runs there)")
    if verdict.more_trials:
        lift = "" if not capped else (
            f" (`--max-trials {pairs + verdict.more_trials}` lifts the cap)" if settings.min_trials < settings.max_trials
            else f" (this run's launches were fixed, as a recheck's are: `specperf compare` of the same commits with "
                 f"`--max-trials {pairs + verdict.more_trials}` measures more)")
        settle.append(f"about {verdict.more_trials} more launches per arm{lift}")
    if spread is not None and spread >= verdict.margin_pct:
        # never a wider margin: it would hide the very change the user is looking for
        settle.append("a host with less launch-to-launch spread (`specperf calibrate` measures it and says which "
                      "margin this host supports)")
    if spread is not None and spread >= 2 * verdict.margin_pct and settings.pairing == "sequential":
        settle.append("both arms' engines at once, measured in turns (`[compare] pairing = \"concurrent\"`), where "
                      "two fit on the host (a CPU engine, a GPU with memory for both): on a 2-vCPU VM it cut the spread "
                      "of pair changes from 10.5% to 2.1% (bench/NOISE_RESULTS.md)")
    if settle:
        lines.append("would settle it: " + "; or ".join(settle))
    return lines


def _mean_output_tokens(arm: list[ArmTrial]) -> float | None:
    counts = [r.get("output_tokens") or 0 for t in arm for r in t.requests]
    return sum(counts) / len(counts) if counts else None


def position_line(arms: dict[str, list[ArmTrial]]) -> str | None:
    """Acceptance per draft position of both arms, naming the position that moved most (by at
    least :data:`core._experiments.stats.MOVED_POSITION`); what is missing when the engine does not count it; ``None``
    without speculation."""
    if not any(t.acceptance_length is not None for arm in arms.values() for t in arm):
        return None
    shares = {role: median_per_position(arm) for role, arm in arms.items()}
    base, head = shares.get("base"), shares.get("head")
    if not base or not head:
        return ("acceptance per draft position not known: this engine exports no per-position counter "
                "(vLLM's vllm:spec_decode_num_accepted_tokens_per_pos; SGLang has none)")
    line = (f"acceptance per draft position (share of drafts whose k-th token was accepted, k = 1..{len(base)}): "
            f"base {' '.join(f'{s:.2f}' for s in base)}, commit {' '.join(f'{s:.2f}' for s in head)}")
    moved = moved_position(base, head)
    return line + (f"; position {moved[0]} moved most: {moved[1]:.2f} -> {moved[2]:.2f}" if moved else "")


def _answers(mode: str, verdict: Verdict | None, trials: dict[str, dict[str, list[ArmTrial]]]
             ) -> tuple[list[str], list[str]]:
    """(above, notes) of ``mode`` (:class:`ModeReport`) from its verdict's outputs check and
    categories, and its trials' answers and output lengths."""
    arms = trials[mode]
    above, notes = [], []
    outputs = verdict.outputs if verdict else None
    if outputs and outputs["status"] == "changed":
        above.append(f"OUTPUTS CHANGED in {mode}: {outputs['line']}; the speed verdict below compares different "
                     "answers")
    elif outputs:
        notes.append(f"outputs: {outputs['line']}")
    lengths = {role: _mean_output_tokens(arms[role]) for role in ("base", "head")}
    if all(lengths.values()) and abs(lengths["head"] / lengths["base"] - 1) > 0.05:  # type: ignore[operator]
        above.append(f"answers differ in length in {mode}: base {lengths['base']:.1f} tokens on average, commit "
                     f"{lengths['head']:.1f}: tok/s compares different work")
    notes += degenerate_lines(arms, speculative=mode != BASELINE)
    if positions := position_line(arms):
        notes.append(positions)
    if mode != BASELINE and BASELINE in trials:
        notes += lossless_lines(mode, arms, trials[BASELINE])
    if verdict and verdict.categories:
        notes.append(verdict.categories["line"])
    return above, notes


def _headline(rows: list[dict], disturbed: dict[int, Disturbance], settings: CompareConfig) -> str | None:
    """One line for the top of a report when the host was busy."""
    if not disturbed:
        failed = [r["seq"] for r in rows if r["monitor_error"]]
        return f"the window monitor failed in {len(failed)} launches: {rows[0]['monitor_error']}" if failed else None
    left = sum(1 for r in rows if not r["kept"]) // 2
    fate = {"remeasure": f"{left} pair{'s' if left != 1 else ''} re-measured",
            "keep": "kept in the statistics", "fail": "the run stopped"}[settings.on_disturbed]
    return (f"host busy: {len(disturbed)} of {len(rows)} trials disturbed ({fate}): "
            + "; ".join(culprit_lines(disturbed, limit=2)))


def summarize(trials: dict[str, dict[str, list[ArmTrial]]], verdicts: dict[str, Verdict],
              settings: CompareConfig, environment: Environment | None = None, launches: list[dict] | None = None,
              disturbed: dict[int, Disturbance] | None = None,
              calibration: dict[str, Plan] | None = None, profiles: dict[str, dict] | None = None,
              cost: dict | None = None) -> CompareReport:
    """The report: per mode, medians of each arm (trials in the statistics), the verdict, its
    evidence and what limited it; per speculative mode, its speedup over ``baseline`` on each
    side and the change of that speedup; every launch with its disturbance (``launches``, from
    :func:`launch_rows`) and a headline when the host was busy. ``calibration``: per mode the
    host's plan from ``specperf calibrate`` (core._experiments.calibrate), cited when a verdict is
    INCONCLUSIVE. ``profiles``: per profiled mode its profile round's document, as the mode's
    ``profile``. ``cost``: what the verdicts cost on the host
    (core._experiments.compare.CompareResult.cost), as the report's ``cost`` with its line.

    Returns a JSON-ready dict::

        {"headline": str | None,
         "modes": {mode: {"base": {...medians}, "head": {...}, "verdict": {...}, "limits": [line],
                          "profile": {"status", "line", "ops", "base": {"traces"}, ...}}},
         "speedups": {mode: {"base": Speedup, "head": Speedup, "change": Speedup}},
         "launches": [{"seq", "mode", "role", "output_tok_s", "disturbed": [reason], "kept"}],
         "disturbance": {"policy", "disturbed_trials", "trials", "culprits": [line]},
         "environment": {"arms_differ": [line, ...]},
         "cost": {"engines_up_s", "measured_s", "launches", "measured_share", "line"}}  (when known)
    """
    rows, disturbed = launches or [], disturbed or {}
    modes: dict[str, ModeReport] = {}
    for mode, arms in trials.items():
        modes[mode] = cast(ModeReport, {
            role: {
                "trials": len(arm),
                "output_tok_s": median_or_none([t.output_tok_s for t in arm]),
                "acceptance_length": median_or_none([t.acceptance_length for t in arm]),
                "step_ms": median_or_none([t.step_ms for t in arm]),
                "output_tok_s_all": [t.output_tok_s for t in arm],
                "output_tokens_mean": _mean_output_tokens(arm),
                "acceptance_per_position": median_per_position(arm),
            }
            for role, arm in arms.items()
        })
        modes[mode]["above"], modes[mode]["notes"] = _answers(mode, verdicts.get(mode), trials)
        if mode in verdicts:
            modes[mode]["verdict"] = dataclasses.asdict(verdicts[mode])
            modes[mode]["limits"] = _limits(mode, verdicts[mode], arms, rows, disturbed, settings,
                                            (calibration or {}).get(mode))
        if mode in (profiles or {}):
            modes[mode]["profile"] = (profiles or {})[mode]
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
    report: CompareReport = {
        "headline": _headline(rows, disturbed, settings) if rows else None,
        "settings": settings.model_dump(), "modes": modes, "speedups": speedups, "launches": rows,
        "disturbance": {"policy": settings.on_disturbed, "disturbed_trials": len(disturbed), "trials": len(rows),
                        "culprits": culprit_lines(disturbed)},
        "environment": environment or {"arms_differ": []}}
    if cost:
        report["cost"] = cast(CostReport, {**cost, "line": cost_line(cost)})
    return report


def render_chart(trials: dict[str, dict[str, list[ArmTrial]]], path: Path, title: str,
                 launches: list[dict] | None = None, image_format: str | None = None) -> Path:
    """A PNG of output tok/s per trial, one panel per mode (matplotlib, Agg backend; another
    ``image_format`` such as ``"svg"``, else the one ``path``'s suffix names). With
    ``launches`` (:func:`launch_rows`) the x axis is the launch order and disturbed trials are
    drawn as red-edged crosses (hollow when left out of the statistics); without, the trials of
    each arm side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(trials), figsize=(4.5 * len(trials) + (2 if launches else 0), 4), squeeze=False)
    for ax, (mode, arms) in zip(axes[0], trials.items()):
        for x, (role, label, color) in enumerate((("base", "base", "#4c72b0"), ("head", "commit", "#dd8452"))):
            rows = [r for r in launches or [] if r["mode"] == mode and r["role"] == role]
            if rows:
                quiet = [r for r in rows if not r["disturbed"]]
                ax.scatter([r["seq"] for r in quiet], [r["output_tok_s"] for r in quiet], color=color, alpha=0.8,
                           label=label)
                for r in rows:
                    if r["disturbed"]:
                        ax.scatter([r["seq"]], [r["output_tok_s"]], marker="X", s=70, color=color if r["kept"] else "none",
                                   edgecolors="#c44e52", linewidths=1.5)
                continue
            values = [t.output_tok_s for t in arms[role]]
            ax.scatter([x + (i - len(values) / 2) * 0.03 for i in range(len(values))], values,
                       color=color, alpha=0.8, label=label)
            if values:
                ax.hlines(statistics.median(values), x - 0.25, x + 0.25, color=color)
        if launches:
            ax.set_xlabel("launch (x: disturbed; hollow: left out and re-measured)")
            ax.legend(fontsize=8)
        else:
            ax.set_xticks([0, 1], ["base", "commit"])
        ax.set_title(mode)
        ax.set_ylabel("output tok/s")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format=image_format)
    plt.close(fig)
    return path
