"""Revert-and-measure: a commit against its base, interleaved launches, a verdict per mode.

For each round and each mode still undecided, four launches in ABBA order (base, commit,
commit, base), then BAAB in the mode's next round, and so on, on the same host and port, with a
cool-down between launches (each arm opens every other round, so a host that favours a place
in the round cannot favour one arm: core._experiments.stats); or, with
``[compare] pairing = "concurrent"``, two paired launches of both arms at once, measured in
turns (core._measure.trial.measure_pair), base first in one and the commit first in the other. After each
round the verdict of each mode is recomputed (core._experiments.stats); a mode stops getting rounds once
it has ``min_trials`` launches per arm and a verdict other than INCONCLUSIVE, or at
``max_trials`` launches per arm, or when the time budget is spent.

A launch that fails (no build, no start, never ready, died, truncated output) ends the run
as FAILED with the reason and the engine's log tail: no verdict is made from a partial run.

The environment is probed (core._env.probe) with each commit's engine interpreter and settings,
in full once per arm before the first launch (a difference between the arms is reported: in
build mode it names the package whose version differs). During each launch's measured
requests the window monitor (core._env.window) records what else ran on the host and its GPUs;
each trial is judged disturbed or not (core._env.disturbance, ``[compare.disturbance]``) and
``on_disturbed`` decides: ``remeasure`` (default) leaves the disturbed trial's pair out of the
statistics and measures another ABBA round, up to ``max_remeasured_pairs`` pairs per mode;
``keep`` keeps it and names it; ``fail`` ends the run as FAILED. Disturbed trials are always
stored and shown. A monitor that fails is reported, never fatal.

Everything runs on the request's host (core._hosts): worktrees, builds, the probe, the engine;
before the first launch the host's GPUs are cleared of leftover engines of ours, and a
foreign GPU process makes the run fail with its pid, user and command unless
``force_clean`` (core._env.hygiene).
Ctrl-C (cancellation) stops the engine's process group and ends the run as interrupted.

After the verdicts, a profile round (core._experiments.profiling, ``[compare] profile``)
launches each arm of a changed mode once more with the engine's torch profiler on and names
the ops whose time per step moved; it never changes a verdict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core import _git
from core._config import CompareConfig, EngineConfig, WorkloadConfig
from core._env.disturbance import Disturbance, judge_trials, judge_window
from core._env.fingerprint import diff_snapshots
from core._env.hygiene import clean_gpus
from core._env.probe import ProbeError, probe_async
from core._errors import ConfigError, EngineError, HostBusyError, SpecperfError, without_log_tail
from core._experiments.arms import set_up_differences, set_up_id, set_up_ref
from core._experiments.categories import category_verdicts
from core._experiments.outputs import compare_answers
from core._experiments.profiling import INTERRUPTED, profile_mode, wanted
from core._experiments.report import launch_rows
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, REGRESSION, ArmTrial, Verdict, decide
from core._hosts import EngineHandle, Host
from core._hosts.container import check_image
from core._measure.client import RequestRecord, request_settings
from core._measure.engines import chat_template_digest
from core._measure.trial import TrialResult, measure, measure_pair
from core._measure.worktree_engine import build_commit, check_import, engine_for_commit

ABBA = ("base", "head", "head", "base")
BAAB = ("head", "base", "base", "head")


def round_order(round_index: int) -> tuple[str, ...]:
    """The roles of a mode's sequential round ``round_index`` (from 0) in launch order: ABBA in
    even rounds, BAAB in odd ones, so each arm opens (and closes) every other round."""
    return ABBA if round_index % 2 == 0 else BAAB


def with_places(trials: dict[str, list[ArmTrial]], seqs: dict[str, list[int]], pairing: str) -> dict[str, list[ArmTrial]]:
    """``trials[role]`` (one mode's, in pair order, launched as ``seqs[role]``) with each trial's
    ``round_edge`` set under sequential pairing: whether it opened or closed its round (pairs
    ``2k`` and ``2k + 1`` are round ``k``; its first and last launch are the edges). Unchanged
    under concurrent pairing, where two engines are measured in turns and no place is favoured."""
    if pairing != "sequential":
        return trials
    edge: dict[int, bool] = {}
    n = min(len(seqs["base"]), len(seqs["head"]))
    for k in range(0, n, 2):
        in_round = seqs["base"][k:k + 2] + seqs["head"][k:k + 2]
        edge.update({seq: seq in (min(in_round), max(in_round)) for seq in in_round})
    return {role: [dataclasses.replace(t, round_edge=edge.get(seq)) for t, seq in zip(arm, seqs[role])]
            for role, arm in trials.items()}


@dataclass(frozen=True)
class Arm:
    """One (commit SHA, mode) pair; ``role`` is ``base`` or ``head`` (the commit under test)."""

    role: str
    sha: str
    mode: str


@dataclass
class CompareRequest:
    """What to compare: ``head_ref`` against ``base_ref`` (``None``: its first parent; both
    ``None`` for two set-ups without a repo, core._experiments.arms), on
    ``host`` (worktrees, builds and logs under its work directory). ``force_clean``: stop
    foreign processes holding the host's GPUs instead of refusing (core._env.hygiene). The caller
    holds the host's lock (:meth:`core._hosts.Host.lock`) for the whole experiment."""

    engine_name: str
    engine: EngineConfig
    workload_name: str
    workload: WorkloadConfig
    head_ref: str | None
    base_ref: str | None
    modes: list[str]
    settings: CompareConfig
    host: Host
    force_clean: bool = False
    profile_dir: str | None = None
    base_engine_name: str | None = None  # the base arm's own set-up (core._experiments.arms), if any
    base_engine: EngineConfig | None = None
    later_windows: dict[str, int] = field(default_factory=dict)  # {mode: windows} after the first verdict
    planned_trials: dict[str, PlannedLooks] = field(default_factory=dict)  # {mode: the calibration's plan} (verdict_for)

    def workload_for(self, mode: str, launches: int) -> WorkloadConfig:
        """The workload of mode ``mode``'s next launch, after ``launches`` kept launches of its
        arm (a disturbed pair left out is measured again as before): the request's until
        ``settings.min_trials`` are kept, the first verdict's, then with the windows per launch
        of ``later_windows`` (the host's calibration's plan, bot._runs.plan_request):
        a change clear at the first verdict costs no more than without a plan, and the launches
        an undecided verdict adds measure the windows that buy the most for their GPU time
        (bench/WINDOWS_RESULTS.md)."""
        windows = self.later_windows.get(mode)
        if windows is None or launches < self.settings.min_trials or windows == self.workload.windows:
            return self.workload
        return self.workload.model_copy(update={"windows": windows})

    def arm_engine(self, role: str) -> EngineConfig:
        """The engine set-up of arm ``role`` (``base`` or ``head``): the base's own when it has
        one, else the request's engine."""
        return self.base_engine if role == "base" and self.base_engine is not None else self.engine

    def refs(self) -> tuple[str, str]:
        """(base, head) as named where a run is stored and shown: ``base_ref`` (default: the head's
        ``<ref>^``, or with a set-up of its own the head's ref), ``head_ref``; for two set-ups
        without a repo, each one's :func:`core._experiments.arms.set_up_ref`."""
        if self.head_ref is None:
            return (set_up_ref(self.base_engine_name or self.engine_name, self.arm_engine("base")),
                    set_up_ref(self.engine_name, self.engine))
        default_base = self.head_ref if self.base_engine is not None else f"{self.head_ref}^"
        return self.base_ref or default_base, self.head_ref

    def set_up_differences(self) -> list[str]:
        """What differs between the arms' engine set-ups, base -> head (``[]`` for a compare of
        commits on one set-up): :func:`core._experiments.arms.set_up_differences`."""
        return set_up_differences(self.base_engine, self.engine) if self.base_engine is not None else []


class RunStatus(enum.StrEnum):
    """Where a compare stands: ``running``, then ``done``, ``failed``, ``refused`` (the host was
    busy: foreign processes on its GPUs; a host error, nothing launched) or ``interrupted``;
    equal to (and stored as) its text."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"
    INTERRUPTED = "interrupted"


@dataclass
class CompareResult:
    """The outcome. ``status``: done, failed, refused (the host was busy: foreign processes on
    its GPUs; nothing was launched) or interrupted; ``trials[mode][role]`` in pair order,
    ``seqs[mode][role]`` their launch numbers, ``windows[seq]`` what the window monitor
    saw, ``disturbed[seq]`` the judgement of each disturbed trial, ``left_out[mode]`` the pair
    indexes left out of the statistics (``on_disturbed = "remeasure"``), ``profiles[mode]``
    the profile round's document of each profiled mode (core._experiments.profiling);
    ``error`` the error that ended a failed run (its class says what kind of failure it was)."""

    status: RunStatus
    base_sha: str
    head_sha: str
    trials: dict[str, dict[str, list[TrialResult]]] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    imported: dict[str, dict | None] = field(default_factory=dict)
    arm_env_diff: list[str] = field(default_factory=list)
    seqs: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    windows: dict[int, dict | None] = field(default_factory=dict)
    disturbed: dict[int, Disturbance] = field(default_factory=dict)
    left_out: dict[str, list[int]] = field(default_factory=dict)
    profiles: dict[str, dict] = field(default_factory=dict)
    reason: str | None = None
    log_tail: str | None = None
    error: SpecperfError | None = field(default=None, repr=False, compare=False)  # what ended a failed run
    inert: str | None = None  # what makes the arms' code the same (:func:`inert_difference`), if anything
    engines_up_s: float = 0.0  # wall time with an engine of the arms up, launch to stop (:meth:`cost`)

    def cost(self) -> dict:
        """What the verdicts cost on the host (issue 42): ``engines_up_s``, the wall time during
        which an engine of the arms was up (each launch, or each concurrent pair, from its start
        to its engine's stop: start-up, readiness, warm-up, the measured window, the stop; not the
        builds, probes, cool-downs or the profile round), ``measured_s``, the sum of the trials'
        measured windows (``Sample.window_s``: under concurrent pairing each arm's own turns),
        their share ``measured_share`` (0..1, ``None`` when nothing was up), ``launches`` and
        ``windows`` (the measured windows of all launches: more than ``launches`` where launches
        measured several, :meth:`CompareRequest.workload_for`). On a GPU host ``engines_up_s`` is
        the GPU time the arms held."""
        trials = [t for by_role in self.trials.values() for arm in by_role.values() for t in arm]
        measured = sum(t.sample.window_s for t in trials)
        up = round(self.engines_up_s, 1)
        return {"engines_up_s": up, "measured_s": round(measured, 1), "launches": len(trials),
                "windows": sum(max(len(t.sample.window_tok_s), 1) for t in trials),
                "measured_share": round(measured / self.engines_up_s, 3) if self.engines_up_s > 0 else None}

    def kept_launches(self, mode: str, role: str) -> int:
        """How many of arm ``role``'s launches in ``mode`` are kept (not in a pair left out as
        disturbed), for :meth:`CompareRequest.workload_for`."""
        return len(kept({role: self.trials[mode][role]}, self.left_out.get(mode, []))[role])

    def launches(self) -> list[dict]:
        """Every launch in order with its disturbance (:func:`core._experiments.report.launch_rows`)."""
        tok_s = {seq: trial.sample.output_tok_s for mode, by_role in self.trials.items()
                 for role, arm in by_role.items() for seq, trial in zip(self.seqs[mode][role], arm)}
        return launch_rows(self.seqs, tok_s, self.disturbed, self.left_out, self.windows)


class CompareObserver:
    """Hooks a front end or store implements; every method is optional (no-op here)."""

    def started(self, base_sha: str, head_sha: str) -> None: ...
    def progress(self, message: str) -> None: ...
    def trial_launched(self, arm: Arm, seq: int, process: EngineHandle) -> None: ...
    def trial_finished(self, arm: Arm, seq: int, trial: TrialResult) -> None: ...
    def trial_failed(self, arm: Arm, seq: int, error: str) -> None: ...
    def profile_launched(self, mode: str, role: str, process: EngineHandle) -> None: ...
    def verdicts_updated(self, verdicts: dict[str, Verdict]) -> None: ...
    def snapshot(self, phase: str, data: dict, seq: int | None) -> None: ...
    def finished(self, result: CompareResult) -> None: ...


def arm_trial(trial: TrialResult) -> ArmTrial:
    """The figures of a trial that the statistics use."""
    tpot = trial.sample.tpot_ms
    return ArmTrial(trial.sample.output_tok_s, trial.engine.acceptance_length, tpot.mean if tpot else None,
                    trial.engine.acceptance_missing,
                    requests=tuple(request_doc(r, trial.sample.window_start_s) for r in trial.sample.requests),
                    acceptance_per_position=trial.engine.acceptance_per_position)


def request_doc(record: RequestRecord, start_s: float) -> dict:
    """What is kept of one measured request, live and in storage (``Trial.requests``):
    ``window`` (its measured window, 0..) and ``sent_ms`` (when it was sent, ms after
    ``start_s``, the launch's first measured request) with ``e2e_ms`` give each window's
    figure back (core._measure.client.tok_s_by_window)."""
    return {"window": record.window, "sent_ms": round((record.start_s - start_s) * 1000.0, 3),
            "ttft_ms": record.ttft_ms, "e2e_ms": record.e2e_ms, "tpot_ms": record.tpot_ms,
            "output_tokens": record.output_tokens, "category": record.category, "text": record.text,
            "finish_reason": record.finish_reason, "spec_verify_ct": record.spec_verify_ct,
            "spec_steps": record.spec_steps, "spec_accepted_per_position": record.spec_accepted_per_position}


# Paths no engine reads: a commit that changes only these cannot change what is measured
_INERT_SUFFIXES = (".md", ".rst", ".txt", ".adoc")
_INERT_NAMES = ("LICENSE", "NOTICE", "AUTHORS", "CODEOWNERS", "CHANGELOG", ".gitignore", ".mailmap")
_INERT_FOLDERS = ("docs/", ".github/")


def _build_digest(engine: EngineConfig) -> str:
    """12 hex digits of what a build runs (its argv and the engine's ``python``)."""
    return hashlib.sha256(json.dumps([engine.build, engine.python]).encode()).hexdigest()[:12]


def inert_difference(files: list[str], base_sha: str, head_sha: str) -> str | None:
    """Why nothing between the arms can change the engine, or ``None``: the arms are one commit,
    or the commits differ only in documentation (Markdown, reStructuredText and text files,
    ``docs/``, ``.github/``, licence and ownership files). A compare of such arms that reads a
    change has measured the host, not the commit (issue 44: a README-only commit read
    IMPROVEMENT +9.3%)."""
    if base_sha == head_sha or not files:
        return "the two arms are the same code"
    if all(f.endswith(_INERT_SUFFIXES) or f.rsplit("/", 1)[-1].split(".")[0] in _INERT_NAMES
           or f.startswith(_INERT_FOLDERS) for f in files):
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        return f"the commits differ only in documentation ({shown})"
    return None


INTERIM_ALPHA = 0.001  # a look before the plan's information: Haybittle and Peto's boundary (verdict_for)


@dataclass(frozen=True)
class PlannedLooks:
    """A mode's plan from the host's calibration, as the looks before it are judged
    (:func:`verdict_for`): ``pairs`` launches per arm of ``windows`` windows each, on a host whose
    launch pair change has a between-launch sd ``between_pct`` and a within-launch sd of one
    window ``within_pct`` (%, :class:`core._experiments.calibrate.NoiseSplit`; a plan from a
    launch spread alone is 1.0 and 0.0: launches count as they are). ``interim_alpha``: the
    alpha of a look before it (:data:`INTERIM_ALPHA`; a run stored with the rule of before
    2026-12-07 evening keeps its 0.005, so its verdicts recompute as they were given)."""

    pairs: int
    windows: int = 1
    between_pct: float = 1.0
    within_pct: float = 0.0
    interim_alpha: float = INTERIM_ALPHA

    def _variance(self, windows: int) -> float:
        return max(self.between_pct ** 2 + self.within_pct ** 2 / max(windows, 1), 1e-12)

    def share(self, windows: Sequence[int]) -> float:
        """The share of the plan's information that launch pairs of ``windows`` windows each
        carry: the sum over the pairs of 1 / the variance of a pair change at its windows, over
        the plan's ``pairs`` at its ``windows`` (a group-sequential design's information
        fraction, Jennison and Turnbull ch. 7); 1.0 or more once they carry the plan's."""
        return sum(1 / self._variance(w) for w in windows) / (self.pairs / self._variance(self.windows))

    def line(self) -> str:
        """``7 launches x 3 windows`` (``7 launches`` with one window)."""
        return f"{self.pairs} launches" + (f" x {self.windows} windows" if self.windows > 1 else "")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_stored(cls, value: int | Mapping[str, Any]) -> PlannedLooks:
        """From a run's ``settings["planned_trials"]`` entry (:meth:`to_dict`), or a bare count of
        launches, as runs stored it before the plan's windows counted (2026-12-07): launches of one
        window, counted as they are, with that rule's interim alpha 0.005."""
        return cls(pairs=value, interim_alpha=0.005) if isinstance(value, int) else cls(**value)


def verdict_for(trials: dict[str, list[ArmTrial]], settings: CompareConfig, inert: str | None = None,
                planned: PlannedLooks | None = None) -> Verdict:
    """The verdict of one mode from its trials so far, ``{"base": [...], "head": [...]}`` in
    launch order (pairs = the shorter arm's count), with the outputs check of its arms and its
    verdict per category (core._experiments.outputs, core._experiments.categories). When the
    engine could not give acceptance length, the reason names the missing counter. ``inert`` (:func:`inert_difference`): the
    arms run the same code, so a REGRESSION or IMPROVEMENT by the numbers is reported as
    INCONCLUSIVE with what it is: the host's difference between the arms, never the commit's.

    ``planned``: the host's calibration's plan for this mode, if any. A look before the launch
    pairs carry the plan's information (:meth:`PlannedLooks.share`: launches of one window
    before a plan of several windows carry less than their count) is an interim look of a
    group-sequential design (Haybittle and Peto's rule: interim looks at alpha 0.001, the
    planned one and later at the compare's): it decides only at :data:`INTERIM_ALPHA`, so a
    change that is clear early stops the compare there, and the looks the plan did not price
    add no false change to an A/A over the compare that waits for the plan (simulated in
    bench/window_planner.py: 0.00% wherever that one's is, against 1 or 2 A/As in 4,000 more at
    0.005). The look at ``settings.max_trials`` pairs is the compare's last, at its own alpha
    whatever the share (Haybittle and Peto's final analysis): the first ``min_trials`` launches
    measure the workload's windows, so a plan of several windows can be out of reach within
    the cap."""
    n = min(len(trials["base"]), len(trials["head"]))
    base, head = trials["base"][:n], trials["head"][:n]
    alpha, share = settings.alpha, 1.0
    if planned is not None and n < settings.max_trials:
        share = planned.share([min(len(b.window_tok_s) or 1, len(h.window_tok_s) or 1) for b, h in zip(base, head)])
        if share < 1 - 1e-9:
            alpha = min(planned.interim_alpha, settings.alpha)

    def judge(base: list[ArmTrial], head: list[ArmTrial], alpha: float) -> Verdict:
        verdict = decide(base, head, margin_pct=settings.margin_pct, alpha=alpha, min_pairs=settings.min_trials)
        if inert and verdict.verdict in (REGRESSION, IMPROVEMENT):
            verdict = dataclasses.replace(
                verdict, verdict=INCONCLUSIVE, attribution=None, more_trials=None,
                reason=f"{verdict.verdict} by the numbers ({verdict.change_pct:+.1f}%), but {inert}: nothing in them "
                       "can change the engine, so this is the host's difference between the arms (launch order, "
                       f"drift), not the commit's; `specperf calibrate` measures this host ({verdict.reason})")
        return verdict

    verdict = dataclasses.replace(judge(base, head, alpha), outputs=compare_answers(base, head),
                                  categories=category_verdicts(base, head, alpha, judge))
    if planned is not None and alpha != settings.alpha and n >= settings.min_trials:
        verdict = dataclasses.replace(verdict, reason=(
            f"an interim look, {n} launches per arm carrying {math.floor(100 * share)}% of the information of the "
            f"{planned.line()} per arm the calibration planned: decided here only at "
            f"alpha {alpha:g} (the {100 * (1 - alpha):g}% interval); {verdict.reason}"))
    missing = sorted({t.acceptance_missing for arm in ("base", "head") for t in trials[arm][:n]
                      if t.acceptance_missing})
    if missing:  # what limited the verdict: no acceptance, so no acceptance/step-time split
        verdict = dataclasses.replace(
            verdict, reason=f"{verdict.reason}; acceptance length not derived: {'; '.join(missing)}")
    return verdict


def figures(result: CompareResult, pairing: str) -> dict[str, dict[str, list[ArmTrial]]]:
    """The statistics' view of a result: ``[mode][role]`` lists of :class:`ArmTrial` (placed in
    their rounds under ``pairing``: :func:`with_places`), without the pairs left out as disturbed."""
    return {mode: kept(with_places({role: [arm_trial(t) for t in trials] for role, trials in by_role.items()},
                                   result.seqs[mode], pairing),
                       result.left_out.get(mode, []))
            for mode, by_role in result.trials.items()}


def kept(trials: dict[str, list], left_out: list[int]) -> dict[str, list]:
    """``trials[role]`` without the pairs whose index is in ``left_out``."""
    drop = set(left_out)
    return {role: [t for i, t in enumerate(arm) if i not in drop] for role, arm in trials.items()}


def judge_compare(seqs: dict[str, dict[str, list[int]]], windows: dict[int, dict | None],
                  settings: CompareConfig) -> tuple[dict[int, Disturbance], dict[str, list[int]]]:
    """The disturbed trials of a compare and, per mode, the pair indexes left out of the
    statistics: under ``on_disturbed = "remeasure"`` the first ``max_remeasured_pairs``
    pairs (of a mode) with a disturbed trial; none otherwise.

    Args:
        seqs: ``[mode][role]`` launch numbers in pair order.
        windows: ``{launch number: window document}``.
    """
    disturbed: dict[int, Disturbance] = {}
    left_out: dict[str, list[int]] = {}
    for mode, by_role in seqs.items():
        mode_seqs = [seq for arm in by_role.values() for seq in arm]
        disturbed.update(judge_trials({seq: windows.get(seq) for seq in mode_seqs}, settings.disturbance))
        left_out[mode] = []
        if settings.on_disturbed != "remeasure":
            continue
        for i, pair in enumerate(zip(by_role.get("base", []), by_role.get("head", []))):
            if any(seq in disturbed for seq in pair) and len(left_out[mode]) < settings.max_remeasured_pairs:
                left_out[mode].append(i)
    return disturbed, left_out


# The option that gives each engine its share of GPU memory, and the largest share two engines
# side by side can each have (what the engine itself reserves beside it: CUDA context, graphs)
MEMORY_SHARE = {"vllm": ("--gpu-memory-utilization", 0.45, 0.9), "sglang": ("--mem-fraction-static", 0.4, 0.88)}


def _option(argv: list[str], name: str) -> str | None:
    """The value of the last ``name VALUE`` or ``name=VALUE`` in ``argv`` (the one argparse keeps)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def memory_shares(engine: EngineConfig, modes: list[str]) -> list[str]:
    """Before both arms' engines share a GPU host (concurrent pairing): each must be given a
    share of GPU memory that fits beside the other (issue 43: on an H100 two transformers serve
    engines each ran out of memory beside the other and answered 503 until the readiness
    timeout). For vLLM and SGLang the share is read from the launch arguments of every mode
    (default when absent: vLLM 0.9, SGLang 0.88); for a command engine specperf cannot read
    it, and the returned line says so and what to set.

    Raises:
        ConfigError: a vLLM or SGLang mode whose share is missing or larger than half of the
            GPU, naming the option and a value that fits.
    """
    if engine.kind not in MEMORY_SHARE:
        return ["both arms' engines will share this host's GPUs (pairing = \"concurrent\"), and specperf cannot read "
                "how much GPU memory a command engine takes: if they run out of memory, cap each engine's share in its "
                "args or use pairing = \"sequential\""]
    option, fits, default = MEMORY_SHARE[engine.kind]
    for mode in modes:
        given = _option(list(engine.args) + list(engine.modes.get(mode, [])), option)
        share = float(given) if given is not None else default
        if share > fits:
            raise ConfigError(
                f"pairing = \"concurrent\" puts both arms' engines on this host's GPUs, and mode {mode!r} gives each "
                f"{option} {share:g}{' (the default)' if given is None else ''}: two cannot fit; add {option} {fits:g} "
                "(or less) to the engine's args, or use pairing = \"sequential\"")
    return []


async def resolve_refs(request: CompareRequest) -> tuple[str, str]:
    """(base SHA, head SHA): the head's in the engine's repo, the base's in the base arm's
    engine's repo (the same unless the base has a set-up of its own), on the request's host;
    refs are validated and resolved before anything runs. Without ``base_ref`` the base is the
    head's first parent, or, when the arms differ in set-up, the head's own commit resolved in
    the base's repo (the same code on two set-ups). Two set-ups without a repo name no commit:
    each arm's identity is then its :func:`core._experiments.arms.set_up_id` (a container's image
    looked up on the host first, so a missing one is refused here).

    Raises:
        GitError: no repo configured (or, for set-ups without one, a commit named all the same),
            a bad ref, a root commit without ``base_ref``, or no commit named for an engine
            with a repo.
        ConfigError: a container image missing on the host.
        HostError: the host cannot be reached.
    """
    repo, base_repo = request.engine.repo, request.arm_engine("base").repo
    if not repo and not base_repo and request.base_engine is not None:
        named = [ref for ref in (request.head_ref, request.base_ref) if ref]
        if named:
            raise _git.GitError(f"engines {request.base_engine_name!r} and {request.engine_name!r} have no repo, so the "
                                f"arms are their set-ups alone: name no commit ({', '.join(named)}) and no --base")
        return await _set_up_id(request, "base"), await _set_up_id(request, "head")
    if not repo or not base_repo:
        name = request.engine_name if not repo else request.base_engine_name
        raise _git.GitError(f"engine {name!r} has no repo; set engines.{name}.repo")
    if not request.head_ref:
        raise _git.GitError(f"engine {request.engine_name!r} has a repo ({repo}): name the commit to compare")
    host = request.host
    head = await _git.resolve_commit(host, repo, request.head_ref)
    if request.base_ref:
        base = await _git.resolve_commit(host, base_repo, request.base_ref)
    elif request.base_engine is not None:
        base = await _git.resolve_commit(host, base_repo, request.head_ref)
    else:
        base = await _git.first_parent(host, repo, head)
    return base, head


async def _set_up_id(request: CompareRequest, role: str) -> str:
    spec = request.arm_engine(role)
    name = request.base_engine_name if role == "base" else request.engine_name
    image = await check_image(request.host, spec.container, name or "") if spec.container else None
    return set_up_id(spec, image)


async def compare(request: CompareRequest, observer: CompareObserver | None = None,
                  shas: tuple[str, str] | None = None) -> CompareResult:
    """Run the experiment described by ``request``; see the module docstring.

    ``shas`` (base, head) skips resolution when the caller already resolved the refs.
    Returns a result with status ``done``, ``failed`` or ``refused``; on cancellation (Ctrl-C) the
    observer's ``finished`` gets status ``interrupted`` and the cancellation propagates, except in
    the profile round after the verdicts: then ``finished`` gets the run ``done`` with its
    verdicts (the interrupted mode's profile says so) before the cancellation propagates.

    Raises:
        GitError: a ref is bad (before anything is launched).
    """
    obs = observer or CompareObserver()
    base_sha, head_sha = shas or await resolve_refs(request)
    result = CompareResult(RunStatus.RUNNING, base_sha, head_sha,
                           trials={m: {"base": [], "head": []} for m in request.modes},
                           seqs={m: {"base": [], "head": []} for m in request.modes})
    obs.started(base_sha, head_sha)
    try:
        engines, full = await _experiment(request, obs, result)
        result.status = RunStatus.DONE
    except HostBusyError as exc:
        result.status = RunStatus.REFUSED
        result.reason = str(exc)
    except SpecperfError as exc:
        result.status = RunStatus.FAILED
        result.verdicts = {}  # no verdict from a partial run
        result.reason = without_log_tail(exc)
        result.log_tail = exc.log_tail if isinstance(exc, EngineError) else None
        result.error = exc
    except (asyncio.CancelledError, KeyboardInterrupt):
        result.status = RunStatus.INTERRUPTED
        result.verdicts = {}
        result.reason = "interrupted by the user"
        obs.finished(result)
        raise
    if result.status == RunStatus.DONE:
        try:  # after the verdicts: interrupted, the run is still done with them
            await _profile_round(request, obs, result, engines, full)
        except (asyncio.CancelledError, KeyboardInterrupt):
            obs.finished(result)
            raise
    obs.finished(result)
    return result


async def _experiment(request: CompareRequest, obs: CompareObserver,
                      result: CompareResult) -> tuple[dict[str, tuple[EngineConfig, str | None]], dict[str, dict | None]]:
    """The launches and verdicts of :func:`compare` into ``result``; returns each arm's
    (engine, worktree) and full snapshot, for the profile round."""
    settings, engine, host = request.settings, request.engine, request.host
    # GPU hygiene first, before worktrees and builds, so a busy host is refused at once
    python = host.config.python if "{prefix}" in engine.python else engine.python
    try:
        preflight = await probe_async(python, cheap=True, env=engine.env, host=host, container=engine.container)
    except ProbeError as exc:
        obs.progress(f"environment probe (preflight) failed: {exc}")
        preflight = None
    boxes = [spec.container for spec in (request.arm_engine("base"), engine) if spec.container]
    for line in await clean_gpus(host, preflight, force_clean=request.force_clean, grace_s=engine.stop_grace_s,
                                 containers=boxes):
        obs.progress(line)
    if settings.pairing == "concurrent" and ((preflight or {}).get("gpu") or {}).get("devices"):
        for spec in {id(s): s for s in (request.arm_engine("base"), engine)}.values():
            for line in memory_shares(spec, request.modes):  # raises for a share that cannot fit twice
                obs.progress(line)
    engines: dict[str, tuple[EngineConfig, str | None]] = {}
    set_up = request.set_up_differences()
    for role, sha in (("base", result.base_sha), ("head", result.head_sha)):
        spec = request.arm_engine(role)
        obs.progress(f"preparing {role} {sha[:12]} on host {host.name}"
                     + (f" (engine {request.base_engine_name})" if role == "base" and set_up else ""))
        if not spec.repo:  # a set-up without a repo (core._experiments.arms): launched as configured
            engines[role] = (spec, None)
            continue
        tree = await _git.worktree(host, spec.repo, sha)
        # one build per commit and build (command and python): another set-up's build of one commit gets a folder
        # of its own, named by a digest of what it runs
        digest = _build_digest(spec)
        prefix = f"{host.workdir}/builds/{sha}" + (f"-{digest}" if digest != _build_digest(engine) else "")
        await build_commit(host, spec, tree, prefix, sha)
        arm_engine = engine_for_commit(spec, tree, prefix)
        result.imported[role] = await check_import(host, arm_engine, tree)
        engines[role] = (arm_engine, tree)
    full = {role: await _snapshot(request, obs, f"arm-{role}", None, *engines[role], cheap=False)
            for role in engines}
    files = [] if result.base_sha == result.head_sha or not engine.repo or request.arm_engine("base").repo != engine.repo \
        else await _git.changed_files(host, engine.repo, result.base_sha, result.head_sha)
    # arms that differ in set-up are never inert, whatever their commits
    result.inert = None if set_up else inert_difference(files, result.base_sha, result.head_sha)
    obs.snapshot("commit-diff", {"files": files[:200], "inert": result.inert}, None)
    result.arm_env_diff = list(set_up)  # the set-ups' difference first, then the snapshots'
    if all(full.values()):
        result.arm_env_diff += arm_differences(full["base"], full["head"], result.base_sha, result.head_sha)
    for line in await clean_gpus(host, full["head"] or full["base"], force_clean=request.force_clean,
                                 grace_s=engine.stop_grace_s):  # again: a newcomer during the builds
        obs.progress(line)

    deadline = time.monotonic() + settings.time_budget_s
    undecided = list(request.modes)
    seq = 0
    if settings.pairing == "concurrent":  # the commit's engine beside the base's, on the next port
        head_engine, head_tree = engines["head"]
        engines["head"] = (head_engine.model_copy(update={"port": engines["base"][0].port + 1}), head_tree)
    while undecided:
        for mode in undecided:
            if settings.pairing == "concurrent":
                for first in (0, 1):  # base takes the first turn, then the commit
                    arms = tuple(Arm(role, result.base_sha if role == "base" else result.head_sha, mode)
                                 for role in ("base", "head"))
                    up_since = time.monotonic()
                    workload = request.workload_for(mode, result.kept_launches(mode, "base"))
                    trials = await _pair_trials(request, obs, arms, (seq + 1, seq + 2), engines, first, workload)
                    result.engines_up_s += time.monotonic() - up_since
                    for offset, (arm, trial) in enumerate(zip(arms, trials), start=1):
                        result.trials[mode][arm.role].append(trial)
                        result.seqs[mode][arm.role].append(seq + offset)
                        result.windows[seq + offset] = trial.window
                    seq += 2
                    if settings.cooldown_s:
                        await asyncio.sleep(settings.cooldown_s)
                continue
            for role in round_order(len(result.trials[mode]["base"]) // 2):
                seq += 1
                arm = Arm(role, result.base_sha if role == "base" else result.head_sha, mode)
                up_since = time.monotonic()
                workload = request.workload_for(mode, result.kept_launches(mode, role))
                trial = await _one_trial(request, obs, arm, seq, *engines[role], workload)
                result.engines_up_s += time.monotonic() - up_since
                result.trials[mode][role].append(trial)
                result.seqs[mode][role].append(seq)
                result.windows[seq] = trial.window
                if settings.cooldown_s:
                    await asyncio.sleep(settings.cooldown_s)
        result.disturbed, result.left_out = judge_compare(result.seqs, result.windows, settings)
        view = figures(result, settings.pairing)
        result.verdicts = {m: verdict_for(view[m], settings, result.inert, request.planned_trials.get(m))
                           for m in request.modes}
        obs.verdicts_updated(result.verdicts)
        launches = len(result.trials[request.modes[0]]["base"]) if request.modes else 0
        undecided = [
            m for m in undecided
            if len(view[m]["base"]) < settings.min_trials
            or (result.verdicts[m].verdict == INCONCLUSIVE and len(view[m]["base"]) < settings.max_trials)
        ]
        if undecided and time.monotonic() > deadline:
            obs.progress(f"time budget of {settings.time_budget_s:.0f} s spent after {launches} launches per arm")
            break
    return engines, full


async def _profile_round(request: CompareRequest, obs: CompareObserver, result: CompareResult,
                         engines: dict[str, tuple[EngineConfig, str | None]], snapshots: dict[str, dict | None]) -> None:
    """Profile the modes of ``result`` that ``request.settings.profile`` asks for
    (core._experiments.profiling): each gets ``result.profiles[mode]``, also passed to the
    observer as snapshot phase ``profile-<mode>``; interrupted, the mode's document says so and
    the cancellation goes on."""
    for mode in request.modes:
        verdict = result.verdicts.get(mode)
        if not wanted(request.settings.profile, verdict.verdict if verdict else None):
            continue
        obs.progress(f"profile round: {mode}, one profiled launch per arm")
        try:
            document = await profile_mode(
                request.engine_name, request.host, request.workload, request.settings, mode, engines, snapshots,
                head_sha=result.head_sha, profile_dir=request.profile_dir, progress=obs.progress,
                on_launch=functools.partial(obs.profile_launched, mode))
        except (asyncio.CancelledError, KeyboardInterrupt):
            result.profiles[mode] = INTERRUPTED
            obs.snapshot(f"profile-{mode}", INTERRUPTED, None)
            raise
        result.profiles[mode] = document
        obs.snapshot(f"profile-{mode}", document, None)
        obs.progress(f"profile {mode}: {document['line']}")


class DisturbedError(SpecperfError):
    """A trial was disturbed and ``on_disturbed = "fail"``."""


async def _snapshot(request: CompareRequest, obs: CompareObserver, phase: str, seq: int | None,
                    engine: EngineConfig, tree: str | None, cheap: bool = True) -> dict | None:
    try:
        data = await probe_async(engine.python, cheap=cheap, env=engine.env, cwd=tree,
                                 repo=None if cheap else tree, host=request.host, container=engine.container)
    except ProbeError as exc:
        obs.progress(f"environment probe ({phase}) failed: {exc}")
        return None
    if not cheap:  # an arm's snapshot: what the client asks is part of the set-up
        method = "ignore_eos" if engine.output_length == "probe" else engine.output_length
        data["client"] = request_settings(request.workload, method)
        if request.workload.api == "chat":
            data["client"]["chat_template"] = await chat_template_digest(request.host, engine, request.modes[0])
    obs.snapshot(phase, data, seq)
    return data


def arm_differences(base: dict, head: dict, base_sha: str, head_sha: str) -> list[str]:
    """What differs between the two arms' full snapshots, less what differs by construction:
    each arm has its own worktree (``.../worktrees/<sha>``) and build folder
    (``.../builds/<sha>``), so a value that differs only in its arm's SHA (the checkout's
    path, ``PYTHONPATH``, a build's interpreter and package paths) is left out; the commit
    itself is kept."""
    def by_construction(change) -> bool:
        before, after = change.before, change.after
        return (isinstance(before, str) and isinstance(after, str) and before != base_sha
                and base_sha in before and head_sha in after
                and before.replace(base_sha, "<sha>") == after.replace(head_sha, "<sha>"))
    return [c.line for c in diff_snapshots(base, head) if not by_construction(c)]


async def _one_trial(request: CompareRequest, obs: CompareObserver, arm: Arm, seq: int,
                     engine: EngineConfig, tree: str | None, workload: WorkloadConfig) -> TrialResult:
    obs.progress(f"trial {seq}: {arm.mode} {arm.role} {arm.sha[:12]}")
    try:
        name = request.base_engine_name if arm.role == "base" and request.base_engine_name else request.engine_name
        trial = await measure(
            name, engine, arm.mode, request.workload_name, workload,
            f"{request.host.workdir}/logs", host=request.host, cwd=tree,
            on_launch=lambda process: obs.trial_launched(arm, seq, process),
        )
    except SpecperfError as exc:
        obs.trial_failed(arm, seq, str(exc))
        raise
    return _trial_done(request, obs, arm, seq, trial)


async def _pair_trials(request: CompareRequest, obs: CompareObserver, arms: tuple[Arm, Arm], seqs: tuple[int, int],
                       engines: dict[str, tuple[EngineConfig, str | None]], first: int,
                       workload: WorkloadConfig) -> tuple[TrialResult, TrialResult]:
    """Both arms launched at once and measured in turns (``[compare] pairing = "concurrent"``)."""
    mode = arms[0].mode
    obs.progress(f"trials {seqs[0]} and {seqs[1]}: {mode} base {arms[0].sha[:12]} beside commit {arms[1].sha[:12]}, "
                 f"{'base' if first == 0 else 'commit'} first")
    try:
        trials = await measure_pair(
            request.engine_name, (engines["base"][0], engines["head"][0]), mode, request.workload_name,
            workload, f"{request.host.workdir}/logs", host=request.host,
            cwds=(engines["base"][1], engines["head"][1]), first=first,
            on_launch=lambda i, process: obs.trial_launched(arms[i], seqs[i], process),
        )
    except SpecperfError as exc:
        for arm, seq in zip(arms, seqs):
            obs.trial_failed(arm, seq, str(exc))
        raise
    return (_trial_done(request, obs, arms[0], seqs[0], trials[0]),
            _trial_done(request, obs, arms[1], seqs[1], trials[1]))


def _trial_done(request: CompareRequest, obs: CompareObserver, arm: Arm, seq: int, trial: TrialResult) -> TrialResult:
    """Record a measured trial and judge its window (``on_disturbed = "fail"`` raises)."""
    obs.trial_finished(arm, seq, trial)
    if trial.window is not None:
        obs.snapshot("window", trial.window, seq)
    if trial.window and "error" in trial.window:
        obs.progress(f"trial {seq}: {trial.window['error']}")
    judged = judge_window(trial.window, request.settings.disturbance)
    if judged.disturbed:
        policy = request.settings.on_disturbed
        obs.progress(f"trial {seq} disturbed ({policy}): {'; '.join(judged.reasons)}")
        if policy == "fail":
            raise DisturbedError(f"trial {seq} ({arm.mode} {arm.role}) was disturbed: {'; '.join(judged.reasons)} "
                                 "(on_disturbed = \"fail\"; set [compare] on_disturbed = \"remeasure\" to measure "
                                 "its pair again instead)")
    return trial
