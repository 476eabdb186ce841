"""The application layer under every front end (the CLI, the Slack commands, the job queue,
the scheduler): one place that turns (config, engine, workload, modes, refs, options) into a
validated :class:`core._experiments.compare.CompareRequest` or
:class:`core._experiments.bisection.BisectRequest`, resolves modes once (the only "engine has
no such mode" check of the front ends), and runs an experiment the same way for all of them:
take the host lock, reconcile what a killed specperf left, record the run, then compare or
bisect.

Progress reaches a front end by composition: it passes an observer (a
:class:`core.CompareObserver` or :class:`core._experiments.bisection.BisectObserver`: the terminal's printer, a job's
notifier), which hears every hook beside storage's recorder; storage only persists.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import ValidationError

import core
import storage
from bot import _slurm_batch as slurm
from bot._common import data_dir, pick
from bot._runs import mode_plans, reconcile_runs
from core._api import lock_owner
from core._config import ContainerConfig
from core._env.disturbance import Disturbance, judge_window
from core._env.window import WindowMonitor
from core._experiments.arms import base_set_up
from core._experiments.bisection import BisectObserver, BisectRequest, BisectResult, CompareRunner
from core._experiments.bisection import bisect as run_bisect
from core._experiments.compare import CompareRequest
from core._experiments.compare import compare as _compare
from core._hosts import Host, SlurmHost
from core._measure.trial import TrialResult


@dataclass(frozen=True)
class Choice:
    """The engine and workload an experiment uses, by name and settings, and its host name
    (default: the engine's host; the engine's ``host`` is set to it)."""

    engine_name: str
    engine: core.EngineConfig
    workload_name: str
    workload: core.WorkloadConfig
    host_name: str


def choose(config: core.Config, engine: str | None = None, workload: str | None = None,
           host: str | None = None) -> Choice:
    """The engine ``engine`` (default: the only one), workload ``workload`` (default:
    ``default``, or the only one) and host ``host`` (default: the engine's).

    Raises:
        core.ConfigError: several engines and none chosen, or no such engine or workload.
    """
    engine_name = pick(config.engines, engine, "engine")
    workload_name = pick(config.workloads, workload, "workload", default="default")
    spec = config.engine(engine_name)
    host_name = host or spec.host
    if spec.host != host_name:
        spec = spec.model_copy(update={"host": host_name})
    return Choice(engine_name, spec, workload_name, config.workload(workload_name), host_name)


def resolve_modes(config: core.Config, engine_name: str, modes: list[str] | None) -> list[str]:
    """The modes to measure: ``modes``, else ``[compare].modes`` that the engine has (the rule
    of :func:`core.engine_modes`, the only one).

    Raises:
        core.ConfigError: the engine lacks one of them, or none is left.
    """
    return core.engine_modes(config, engine_name, modes)


def bisect_mode(config: core.Config, engine_name: str, mode: str | None) -> str:
    """The mode a bisect measures: ``mode``, else ``baseline``, else the engine's first.

    Raises:
        core.ConfigError: the engine has no such mode.
    """
    engine = config.engine(engine_name)
    default = "baseline" if "baseline" in engine.modes else next(iter(engine.modes))
    return resolve_modes(config, engine_name, [mode or default])[0]


def compare_settings(config: core.Config, *, min_trials: int | None = None, max_trials: int | None = None,
                     margin_pct: float | None = None, rounds: int | None = None,
                     profile: str | None = None) -> core.CompareConfig:
    """``[compare]`` with these overrides; ``rounds`` N fixes the launches per arm and mode at 2N
    (N ABBA rounds; disturbed trials are then kept and named, not re-measured); ``profile``:
    when a profile round follows (``on-change``, ``always``, ``never``).

    Raises:
        core.ConfigError: the overrides do not validate (e.g. max below min).
    """
    if rounds:
        min_trials = max_trials = 2 * rounds
    overrides = {k: v for k, v in (("min_trials", min_trials), ("max_trials", max_trials),
                                   ("margin_pct", margin_pct), ("max_remeasured_pairs", 0 if rounds else None),
                                   ("profile", profile))
                 if v is not None}
    try:
        return core.CompareConfig.model_validate({**config.compare.model_dump(), **overrides})
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error.get("loc", ()))
        option = f"--{field.replace('_', '-')}" if field in overrides else f"[compare].{field}" if field else "[compare]"
        raise core.ConfigError(f"bad compare option {option}: {error['msg'].removeprefix('Value error, ')}") from None


def base_arm(config: core.Config, choice: Choice, modes: list[str] | None, engine: str | None = None,
             env: list[str] | None = None, args: str | None = None) -> tuple[str, core.EngineConfig] | None:
    """The base arm's own engine set-up (issue 39, core._experiments.arms), checked against the
    chosen engine's for ``modes`` (``None``: the compare's default modes): config entry
    ``engine`` (default: the chosen engine's), on the compare's port (and on ``--host`` when that
    moved the chosen engine), with ``env`` (``KEY=VALUE``
    items) set and ``args`` appended; ``None`` when none of them is given (the arms differ only
    in their commits).

    Raises:
        core.ConfigError: no such engine, a malformed ``KEY=VALUE`` or argument string, or
            set-ups that cannot be one compare's arms (core._experiments.arms.check_set_ups).
    """
    if engine is None and not env and not args:
        return None
    name = engine or choice.engine_name
    spec = config.engine(name)
    # on --host when it moved the commit's engine; otherwise an entry of another host is refused
    if config.engine(choice.engine_name).host != choice.host_name:
        spec = spec.model_copy(update={"host": choice.host_name})
    return name, base_set_up(name, spec, choice.engine_name, choice.engine,
                             resolve_modes(config, choice.engine_name, modes), env, args)


def compare_request(config: core.Config, choice: Choice, host: Host, head_ref: str | None, base_ref: str | None,
                    modes: list[str] | None, settings: core.CompareConfig | None = None,
                    force_clean: bool = False, base: tuple[str, core.EngineConfig] | None = None) -> CompareRequest:
    """A validated compare of ``head_ref`` against ``base_ref`` (``None``: its first parent, or
    with ``base`` its own commit), the base arm on ``base`` (name, set-up: :func:`base_arm`,
    which checked it) when given; ``head_ref`` ``None``: two set-ups without a repo
    (core._experiments.arms).

    Raises:
        core.ConfigError: a mode the engine lacks.
    """
    return CompareRequest(
        engine_name=choice.engine_name, engine=choice.engine, workload_name=choice.workload_name,
        workload=choice.workload, head_ref=head_ref, base_ref=base_ref,
        modes=resolve_modes(config, choice.engine_name, modes), settings=settings or config.compare, host=host,
        force_clean=force_clean, base_engine_name=base[0] if base else None, base_engine=base[1] if base else None)


def bisect_request(config: core.Config, choice: Choice, host: Host, good_ref: str, bad_ref: str,
                   mode: str | None, settings: core.CompareConfig | None = None,
                   force_clean: bool = False) -> BisectRequest:
    """A validated bisect of ``good_ref``..``bad_ref`` in ``mode`` (default: :func:`bisect_mode`),
    with the engine's triage rules.

    Raises:
        core.ConfigError: a mode the engine lacks.
    """
    return BisectRequest(
        engine_name=choice.engine_name, engine=choice.engine, workload_name=choice.workload_name,
        workload=choice.workload, good_ref=good_ref, bad_ref=bad_ref,
        mode=bisect_mode(config, choice.engine_name, mode), settings=settings or config.compare, host=host,
        triage_rules=config.triage.rules_for(choice.engine_name, choice.engine.kind), force_clean=force_clean)


class CompareObservers(core.CompareObserver):
    """Every hook of a compare passed to each observer in turn (storage's recorder first)."""

    def __init__(self, *observers: core.CompareObserver | None) -> None:
        self.observers = [o for o in observers if o is not None]

    def started(self, base_sha, head_sha) -> None:
        for o in self.observers:
            o.started(base_sha, head_sha)

    def progress(self, message) -> None:
        for o in self.observers:
            o.progress(message)

    def trial_launched(self, arm, seq, process) -> None:
        for o in self.observers:
            o.trial_launched(arm, seq, process)

    def trial_finished(self, arm, seq, trial) -> None:
        for o in self.observers:
            o.trial_finished(arm, seq, trial)

    def trial_failed(self, arm, seq, error) -> None:
        for o in self.observers:
            o.trial_failed(arm, seq, error)

    def profile_launched(self, mode, role, process) -> None:
        for o in self.observers:
            o.profile_launched(mode, role, process)

    def verdicts_updated(self, verdicts) -> None:
        for o in self.observers:
            o.verdicts_updated(verdicts)

    def snapshot(self, phase, data, seq) -> None:
        for o in self.observers:
            o.snapshot(phase, data, seq)

    def finished(self, result) -> None:
        for o in self.observers:
            o.finished(result)


class BisectObservers(BisectObserver):
    """Every hook of a bisect passed to each observer in turn (storage's recorder first); each
    step's compare is observed by all of their compare observers."""

    def __init__(self, *observers: BisectObserver | None) -> None:
        self.observers = [o for o in observers if o is not None]

    def started(self, good_sha, bad_sha, commits) -> None:
        for o in self.observers:
            o.started(good_sha, bad_sha, commits)

    def progress(self, message) -> None:
        for o in self.observers:
            o.progress(message)

    def compare_observer(self, step, request) -> core.CompareObserver:
        return CompareObservers(*(o.compare_observer(step, request) for o in self.observers))

    def step_finished(self, step) -> None:
        for o in self.observers:
            o.step_finished(step)

    def finished(self, result) -> None:
        for o in self.observers:
            o.finished(result)


def trial_line(trial: TrialResult) -> str:
    """``1,234.5 tok/s, acceptance length 2.50`` (the acceptance part only when measured)."""
    acceptance = trial.engine.acceptance_length
    extra = f", acceptance length {acceptance:.2f}" if acceptance is not None else ""
    return f"{trial.sample.output_tok_s:,.1f} tok/s{extra}"


@dataclass
class Session:
    """How an experiment holds its host: the lock's ``doing`` text, whether to wait for a busy
    host (``on_wait`` hears each waiting line), and ``reconciled`` hearing each run that a
    killed specperf left and that was closed under the lock (``None``: do not reconcile)."""

    doing: str
    wait: bool = True
    on_wait: Callable[[str], None] | None = None
    reconciled: Callable[[int, str], None] | None = None
    before_run: Callable[[core.Config], None] | None = None


async def _reconcile(db, config: core.Config, session: Session) -> None:
    if session.reconciled is not None:
        for run_id, reason in await reconcile_runs(db, config):
            session.reconciled(run_id, reason)


async def compare(config: core.Config, db, request: CompareRequest, shas: tuple[str, str], session: Session,
                  observer: core.CompareObserver | None = None,
                  on_run: Callable[[int], Awaitable[None] | None] | None = None,
                  extra: dict | None = None) -> tuple[int, core.CompareResult]:
    """Run ``request`` (refs already resolved to ``shas`` = (base, head)) under the host lock:
    reconcile, record the run (``on_run(run_id)`` is called, and awaited if it returns an
    awaitable; ``extra`` is merged into its stored settings), then compare with ``observer``
    beside the recorder, whose writes run on a thread of their own (:class:`storage.WriteBehind`)
    and are all done when this returns or raises. Returns (run id, result).

    Raises:
        core.HostBusyError: the host is busy and ``session.wait`` is false.
        sqlalchemy.exc.SQLAlchemyError: a write of the run failed (the compare stopped at the
            next hook, its engine stopped).
    """
    async with request.host.lock(lock_owner(session.doing), wait=session.wait, on_wait=session.on_wait):
        await _reconcile(db, config, session)
        store = storage.RunStore(db)
        run_id = await asyncio.to_thread(store.create, request, *shas, extra)
        request.profile_dir = request.profile_dir or str(data_dir() / "profiles" / f"run-{run_id}")
        if on_run is not None and (pending := on_run(run_id)) is not None:
            await pending
        if session.before_run is not None:
            session.before_run(config)
        recorder = storage.WriteBehind(store)  # the run's writes off the event loop, in order
        try:
            result = await _compare(request, CompareObservers(recorder, observer), shas=shas)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(recorder.drain, raise_error=False))
            raise
        await asyncio.to_thread(recorder.drain)
        return run_id, result


async def compare_on_slurm(config: core.Config, db, request: CompareRequest, shas: tuple[str, str],
                           session: Session, observer: core.CompareObserver | None = None,
                           on_run: Callable[[int], Awaitable[None] | None] | None = None,
                           extra: dict | None = None, detach: Callable[[], bool] | None = None) -> int:
    """Run ``request`` on a Slurm host (:mod:`bot._slurm_batch`): reconcile, submit it as one Slurm job
    (Slurm queues it; no host lock), ``on_run(run_id)`` as in :func:`compare`, and follow the
    job to its end with ``observer`` hearing its progress. Cancelled (Ctrl-C), it cancels the
    job, unless ``detach()`` is true then (a bot stopping cleanly leaves it running for the
    next bot to follow). Returns the run id; the run as stored says how it ended.

    Raises:
        core.HostError: sbatch refused the job.
    """
    await _reconcile(db, config, session)
    return await slurm.run(db, request, shas, observer, on_run, extra, detach=detach)


class _Started(BisectObserver):
    """Sets ``event`` once the bisect's range is resolved (its run recorded)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def started(self, good_sha, bad_sha, commits) -> None:
        self.event.set()


async def bisect(config: core.Config, db, request: BisectRequest, session: Session,
                 observer: Callable[[storage.BisectStore], BisectObserver] | None = None,
                 on_run: Callable[[int], Awaitable[None] | None] | None = None,
                 detach: Callable[[], bool] | None = None,
                 bot_job: int | None = None) -> tuple[storage.BisectStore, BisectResult]:
    """Run ``request`` under the host lock: reconcile, then bisect, recorded by a
    :class:`storage.BisectStore` (its ``run_id`` once the range is resolved, ``compare_runs``
    per step) with ``observer(store)`` beside it; ``on_run(run_id)`` as soon as the bisect run
    is recorded (while the bisect goes on). Returns (the store, the result).

    On a Slurm host there is no host lock: each step's compare is a Slurm job of its own, and
    each round runs ``[slurm].bisect_parallel`` of them side by side (:func:`bot._slurm_batch.bisect_parallel`:
    a k-ary search, core._experiments.bisection); the result's ``spend`` compares the node-hours used
    with a sequential bisect's. There, for the bot's job ``bot_job``, a step whose compare an
    interrupted earlier attempt of that job submitted follows that Slurm job again
    (:class:`storage.BisectStore`, :func:`bot._slurm_batch.bisect_runner`), and ``detach()`` says, when the
    bisect is cancelled, whether its running jobs are left to Slurm (a bot stopping cleanly)
    rather than cancelled.

    Raises:
        core.HostBusyError: the host is busy and ``session.wait`` is false.
    """
    host = request.host
    if isinstance(host, SlurmHost):
        request = dataclasses.replace(request, parallel=await slurm.bisect_parallel(host))
        store = storage.BisectStore(db, request, compare_extra=slurm.run_settings(), bot_job=bot_job)
        await _reconcile(db, config, session)
        return await _bisect(config, request, store, session, observer, on_run, slurm.bisect_runner(db, store, detach))
    async with host.lock(lock_owner(session.doing), wait=session.wait, on_wait=session.on_wait):
        await _reconcile(db, config, session)
        return await _bisect(config, request, storage.BisectStore(db, request), session, observer, on_run, None)


async def _bisect(config: core.Config, request: BisectRequest, store: storage.BisectStore, session: Session,
                  observer: Callable[[storage.BisectStore], BisectObserver] | None,
                  on_run: Callable[[int], Awaitable[None] | None] | None,
                  run_compare: CompareRunner | None) -> tuple[storage.BisectStore, BisectResult]:
    """The bisect of :func:`bisect`, once its host is held (or, on Slurm, needs no holding)."""
    started = _Started()
    if session.before_run is not None:
        session.before_run(config)
    observers = BisectObservers(store, started, observer(store) if observer else None)
    task = asyncio.create_task(run_bisect(request, observers, run_compare))
    waiter = asyncio.create_task(started.event.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if store.run_id is not None and on_run is not None and (pending := on_run(store.run_id)) is not None:
            await pending
        return store, await task
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        waiter.cancel()


def calibration_goal(launches: int, change_pct: float, power: float, windows: int = 1) -> dict:
    """What a calibration is for, as its run's ``settings["calibration"]``: ``{"change_pct",
    "power"}`` (the change to detect, % of tok/s, and the power to detect it with), checked
    with the launches per arm and mode it runs and the windows per launch it measures.

    Raises:
        core.ConfigError: fewer than 2 launches, a change outside (0, 100) % or a power
            outside (0, 1), or windows outside 1..64.
    """
    if launches < 2 or not 0 < change_pct < 100 or not 0 < power < 1 or not 1 <= windows <= 64:
        raise core.ConfigError("calibrate needs --launches of at least 2, --change-pct between 0 and 100, "
                               "--power between 0 and 1 and --windows between 1 and 64")
    return {"change_pct": change_pct, "power": power}


def calibration_lines(trials: dict, goal: dict, alpha: float, cost: dict | None = None,
                      max_pairs: int = 64) -> list[str]:
    """Per mode of a calibration's trials (:func:`core._experiments.compare.figures`: mode -> {"base", "head"}) one
    line: its plan for ``goal`` (:func:`calibration_goal`) at significance ``alpha``
    (:func:`bot._runs.mode_plans`: from the noise split and ``cost`` when its launches measured
    several windows, within ``max_pairs`` launches per arm, the compares' ``max_trials``, else
    from the launch-to-launch spread): the plan a later compare takes."""
    plans = mode_plans(trials, goal, alpha, cost, max_pairs)
    return [f"calibration {mode}: " + (plans[mode].line() if mode in plans else "too few undisturbed pairs for a spread")
            for mode in trials]


@dataclass(frozen=True)
class ProbeTarget:
    """What a probe or the window monitor runs with on a host: ``label`` (``engine NAME`` or
    which Python), the ``python`` path, the engine's ``env`` and ``repo``, the ``host`` name and
    the engine's ``cpus`` (``None``: the CPUs its group may run on), its ``container`` (the
    probe then runs in its image; the window monitor with the host's python)."""

    label: str
    python: str
    env: dict
    repo: str | None
    host: str
    cpus: list[int] | None
    container: ContainerConfig | None = None


def probe_target(config: core.Config, engine: str | None = None, host: str | None = None) -> ProbeTarget:
    """The engine ``engine`` (default: the only one) on ``host`` (default: the engine's); with
    no engine configured, the host's Python (specperf's own on the local host).

    Raises:
        core.ConfigError: no such engine or host, or several engines and none chosen.
    """
    if not config.engines and not engine:
        host_name = host or "local"
        config_host = config.hosts.get(host_name)
        if config_host is None:
            raise core.ConfigError(f"no host named {host_name!r} in the config (known hosts: "
                                   f"{', '.join(sorted(config.hosts))})")
        if config_host.ssh:
            return ProbeTarget("the host's python (no engine configured)", config_host.python, {}, None, host_name, None)
        return ProbeTarget("specperf's own Python (no engine configured)", sys.executable, {}, None, host_name, None)
    name = pick(config.engines, engine, "engine")
    spec = config.engine(name)
    host_name = host or spec.host
    if host_name not in config.hosts:
        raise core.ConfigError(f"no host named {host_name!r} in the config (known hosts: "
                               f"{', '.join(sorted(config.hosts))})")
    return ProbeTarget(f"engine {name}", spec.python, dict(spec.env), spec.repo, host_name, spec.cpus, spec.container)


@dataclass
class WatchResult:
    """A watch (the per-trial window monitor alone, :func:`watch`): the ``target`` it ran with,
    the monitor's ``window`` document, its ``judged`` disturbance (:func:`core._env.disturbance.judge_window`
    with ``[compare.disturbance]``) and where the window was saved (``path``). ``status`` and
    ``reason`` as a job's result reads them (always ``done``, no reason)."""

    target: ProbeTarget
    window: dict
    judged: Disturbance
    path: str | None = None
    status: str = "done"
    reason: str | None = None


async def watch(config: core.Config, host: Host, target: ProbeTarget, seconds: float,
                session: Session | None = None, tick: Callable[[float], None] | None = None) -> WatchResult:
    """Run the window monitor alone on ``host`` for ``seconds`` s with ``target``'s Python and
    CPUs, judged as a trial's window would be; under the host lock when ``session`` is given
    (a job: it waits for the host's experiments, and they for it). ``tick(elapsed_s)`` is
    called about every 5 s.

    Raises:
        core.HostError: the monitor could not run there (its error).
        core.HostBusyError: the host is busy and ``session.wait`` is false.
    """
    async def monitored() -> dict:
        monitor = WindowMonitor(host, host.config.python if target.container else target.python, -1, target.cpus)
        await monitor.open()
        await monitor.start()
        started = time.monotonic()
        while (left := seconds - (time.monotonic() - started)) > 0:
            await asyncio.sleep(min(left, 5.0))
            if tick is not None and time.monotonic() - started < seconds:
                tick(time.monotonic() - started)
        return await monitor.stop()

    if session is None:
        window = await monitored()
    else:
        async with host.lock(lock_owner(session.doing), wait=session.wait, on_wait=session.on_wait):
            window = await monitored()
    if "error" in window:
        raise core.HostError(window["error"])
    return WatchResult(target, window, judge_window(window, config.compare.disturbance))
