"""Revert-and-measure: a commit against its base, interleaved launches, a verdict per mode.

For each round and each mode still undecided, four launches in ABBA order (base, commit,
commit, base), on the same host and port, with a cool-down between launches. After each
round the verdict of each mode is recomputed (core._stats); a mode stops getting rounds once
it has ``min_trials`` launches per arm and a verdict other than INCONCLUSIVE, or at
``max_trials`` launches per arm, or when the time budget is spent.

A launch that fails (no build, no start, never ready, died, truncated output) ends the run
as FAILED with the reason and the engine's log tail: no verdict is made from a partial run.

The environment is probed (core._probe) with each commit's engine interpreter and settings:
in full once per arm before the first launch (a difference between the arms is reported:
in build mode it names the package whose version differs), and cheaply before and after
every launch. A launch whose before and after snapshots differ in anything that moves
throughput (driver, NCCL, torch, engine libraries, clocks and links, GPU processes) is marked
as drifted; the rule is to keep it in the statistics and name it in the report, so a reader
can judge (excluding launches after the fact would bias the verdict toward whichever arm
happened to drift less). A probe that fails is reported, never fatal.

Everything runs on the request's host (core._hosts): worktrees, builds, the probe, the engine;
before the first launch the host's GPUs are cleared of leftover engines of ours, and a
foreign GPU process makes the run fail with its pid, user and command unless
``force_clean`` (core._hygiene).
Ctrl-C (cancellation) stops the engine's process group and ends the run as interrupted.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from core import _git
from core._config import CompareConfig, EngineConfig, WorkloadConfig
from core._errors import EngineError, SpecperfError
from core._fingerprint import Category, diff_snapshots
from core._hosts import EngineHandle, Host
from core._hygiene import clean_gpus
from core._measure import TrialResult, measure
from core._probe import ProbeError, probe_async
from core._stats import INCONCLUSIVE, ArmTrial, Verdict, decide
from core._worktree_engine import build_commit, check_import, engine_for_commit

ABBA = ("base", "head", "head", "base")


@dataclass(frozen=True)
class Arm:
    """One (commit SHA, mode) pair; ``role`` is ``base`` or ``head`` (the commit under test)."""

    role: str
    sha: str
    mode: str


@dataclass
class CompareRequest:
    """What to compare: ``head_ref`` against ``base_ref`` (``None``: its first parent), on
    ``host`` (worktrees, builds and logs under its work directory). ``force_clean``: stop
    foreign processes holding the host's GPUs instead of refusing (core._hygiene). The caller
    holds the host's lock (:meth:`core.Host.lock`) for the whole experiment."""

    engine_name: str
    engine: EngineConfig
    workload_name: str
    workload: WorkloadConfig
    head_ref: str
    base_ref: str | None
    modes: list[str]
    settings: CompareConfig
    host: Host
    force_clean: bool = False


class RunStatus(enum.StrEnum):
    """Where a compare stands: ``running``, then ``done``, ``failed`` or ``interrupted``; equal to
    (and stored as) its text."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass
class CompareResult:
    """The outcome. ``status``: done, failed or interrupted; ``trials[mode][role]`` in pair order."""

    status: RunStatus
    base_sha: str
    head_sha: str
    trials: dict[str, dict[str, list[TrialResult]]] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    imported: dict[str, dict | None] = field(default_factory=dict)
    arm_env_diff: list[str] = field(default_factory=list)
    drift: dict[int, list[str]] = field(default_factory=dict)
    reason: str | None = None
    log_tail: str | None = None


class CompareObserver:
    """Hooks a front end or store implements; every method is optional (no-op here)."""

    def started(self, base_sha: str, head_sha: str) -> None: ...
    def progress(self, message: str) -> None: ...
    def trial_launched(self, arm: Arm, seq: int, process: EngineHandle) -> None: ...
    def trial_finished(self, arm: Arm, seq: int, trial: TrialResult) -> None: ...
    def trial_failed(self, arm: Arm, seq: int, error: str) -> None: ...
    def verdicts_updated(self, verdicts: dict[str, Verdict]) -> None: ...
    def snapshot(self, phase: str, data: dict, seq: int | None) -> None: ...
    def finished(self, result: CompareResult) -> None: ...


def arm_trial(trial: TrialResult) -> ArmTrial:
    """The figures of a trial that the statistics use."""
    tpot = trial.sample.tpot_ms
    return ArmTrial(trial.sample.output_tok_s, trial.engine.acceptance_length, tpot.mean if tpot else None)


def verdict_for(trials: dict[str, list[ArmTrial]], settings: CompareConfig) -> Verdict:
    """The verdict of one mode from its trials so far, ``{"base": [...], "head": [...]}`` in
    launch order (pairs = the shorter arm's count)."""
    n = min(len(trials["base"]), len(trials["head"]))
    return decide(trials["base"][:n], trials["head"][:n],
                  margin_pct=settings.margin_pct, alpha=settings.alpha, min_pairs=settings.min_trials)


def figures(result: CompareResult) -> dict[str, dict[str, list[ArmTrial]]]:
    """The statistics' view of a result: ``[mode][role]`` lists of :class:`ArmTrial`."""
    return {mode: {role: [arm_trial(t) for t in trials] for role, trials in by_role.items()}
            for mode, by_role in result.trials.items()}


async def resolve_refs(request: CompareRequest) -> tuple[str, str]:
    """(base SHA, head SHA) in the engine's repo on the request's host; refs are validated
    and resolved before anything runs.

    Raises:
        GitError: no repo configured, a bad ref, or a root commit without ``base_ref``.
        HostError: the host cannot be reached.
    """
    repo = request.engine.repo
    if not repo:
        raise _git.GitError(f"engine {request.engine_name!r} has no repo; set engines.{request.engine_name}.repo")
    host = request.host
    head = await _git.resolve_commit(host, repo, request.head_ref)
    base = (await _git.resolve_commit(host, repo, request.base_ref) if request.base_ref
            else await _git.first_parent(host, repo, head))
    return base, head


async def compare(request: CompareRequest, observer: CompareObserver | None = None,
                  shas: tuple[str, str] | None = None) -> CompareResult:
    """Run the experiment described by ``request``; see the module docstring.

    ``shas`` (base, head) skips resolution when the caller already resolved the refs.
    Returns a result with status ``done`` or ``failed``; on cancellation (Ctrl-C) the
    observer's ``finished`` gets status ``interrupted`` and the cancellation propagates.

    Raises:
        GitError: a ref is bad (before anything is launched).
    """
    obs = observer or CompareObserver()
    base_sha, head_sha = shas or await resolve_refs(request)
    result = CompareResult(RunStatus.RUNNING, base_sha, head_sha,
                           trials={m: {"base": [], "head": []} for m in request.modes})
    obs.started(base_sha, head_sha)
    try:
        await _experiment(request, obs, result)
        result.status = RunStatus.DONE
    except SpecperfError as exc:
        result.status = RunStatus.FAILED
        result.verdicts = {}  # no verdict from a partial run
        result.reason = str(exc).split("\n--- engine log tail ---\n")[0]
        result.log_tail = exc.log_tail if isinstance(exc, EngineError) else None
    except (asyncio.CancelledError, KeyboardInterrupt):
        result.status = RunStatus.INTERRUPTED
        result.verdicts = {}
        result.reason = "interrupted by the user"
        obs.finished(result)
        raise
    obs.finished(result)
    return result


async def _experiment(request: CompareRequest, obs: CompareObserver, result: CompareResult) -> None:
    settings, engine, host = request.settings, request.engine, request.host
    # GPU hygiene first, before worktrees and builds, so a busy host is refused at once
    python = host.config.python if "{prefix}" in engine.python else engine.python
    try:
        preflight = await probe_async(python, cheap=True, env=engine.env, host=host)
    except ProbeError as exc:
        obs.progress(f"environment probe (preflight) failed: {exc}")
        preflight = None
    for line in await clean_gpus(host, preflight, force_clean=request.force_clean, grace_s=engine.stop_grace_s):
        obs.progress(line)
    engines: dict[str, tuple[EngineConfig, str]] = {}
    for role, sha in (("base", result.base_sha), ("head", result.head_sha)):
        obs.progress(f"preparing {role} {sha[:12]} on host {host.name}")
        tree = await _git.worktree(host, engine.repo, sha)
        prefix = f"{host.workdir}/builds/{sha}"
        await build_commit(host, engine, tree, prefix, sha)
        arm_engine = engine_for_commit(engine, tree, prefix)
        result.imported[role] = await check_import(host, arm_engine, tree)
        engines[role] = (arm_engine, tree)
    full = {role: await _snapshot(request, obs, f"arm-{role}", None, *engines[role], cheap=False)
            for role in engines}
    if all(full.values()):
        result.arm_env_diff = [c.line for c in diff_snapshots(full["base"], full["head"])]
    for line in await clean_gpus(host, full["head"] or full["base"], force_clean=request.force_clean,
                                 grace_s=engine.stop_grace_s):  # again: a newcomer during the builds
        obs.progress(line)

    deadline = time.monotonic() + settings.time_budget_s
    undecided = list(request.modes)
    seq = 0
    while undecided:
        for mode in undecided:
            for role in ABBA:
                seq += 1
                arm = Arm(role, result.base_sha if role == "base" else result.head_sha, mode)
                trial = await _one_trial(request, obs, arm, seq, *engines[role], result)
                result.trials[mode][role].append(trial)
                if settings.cooldown_s:
                    await asyncio.sleep(settings.cooldown_s)
        view = figures(result)
        result.verdicts = {m: verdict_for(view[m], settings) for m in request.modes}
        obs.verdicts_updated(result.verdicts)
        launches = len(result.trials[request.modes[0]]["base"]) if request.modes else 0
        undecided = [
            m for m in undecided
            if len(result.trials[m]["base"]) < settings.min_trials
            or (result.verdicts[m].verdict == INCONCLUSIVE and len(result.trials[m]["base"]) < settings.max_trials)
        ]
        if undecided and time.monotonic() > deadline:
            obs.progress(f"time budget of {settings.time_budget_s:.0f} s spent after {launches} launches per arm")
            break


_DRIFT = {Category.DRIVER, Category.NCCL, Category.TORCH, Category.ENGINE, Category.CLOCKS_LINKS}


async def _snapshot(request: CompareRequest, obs: CompareObserver, phase: str, seq: int | None,
                    engine: EngineConfig, tree: str, cheap: bool = True) -> dict | None:
    try:
        data = await probe_async(engine.python, cheap=cheap, env=engine.env, cwd=tree,
                                 repo=None if cheap else tree, host=request.host)
    except ProbeError as exc:
        obs.progress(f"environment probe ({phase}) failed: {exc}")
        return None
    obs.snapshot(phase, data, seq)
    return data


def drift_lines(before: dict | None, after: dict | None) -> list[str]:
    """What changed between a launch's before and after snapshots that can move throughput."""
    if not (before and after):
        return []
    return [c.line for c in diff_snapshots(before, after) if c.category in _DRIFT]


async def _one_trial(request: CompareRequest, obs: CompareObserver, arm: Arm, seq: int,
                     engine: EngineConfig, tree: str, result: CompareResult) -> TrialResult:
    obs.progress(f"trial {seq}: {arm.mode} {arm.role} {arm.sha[:12]}")
    before = await _snapshot(request, obs, "before", seq, engine, tree)
    try:
        trial = await measure(
            request.engine_name, engine, arm.mode, request.workload_name, request.workload,
            f"{request.host.workdir}/logs", host=request.host, cwd=tree,
            on_launch=lambda process: obs.trial_launched(arm, seq, process),
        )
    except SpecperfError as exc:
        obs.trial_failed(arm, seq, str(exc))
        raise
    obs.trial_finished(arm, seq, trial)
    drift = drift_lines(before, await _snapshot(request, obs, "after", seq, engine, tree))
    if drift:
        result.drift[seq] = drift
        obs.progress(f"trial {seq}: environment drifted: {'; '.join(drift)}")
    return trial
