"""What the CLI and the Slack bot share about stored runs: closing runs a killed specperf left
running (stopping their recorded engine groups), a stored run's report, and its history page's
data (:func:`run_page`)."""

from __future__ import annotations

import asyncio
import datetime as dt

import core
import storage
from bot import _slurm_batch as slurm
from bot._common import open_host, owner_alive
from core._experiments.calibrate import Plan, noise_split, pair_spread_pct, plan, plan_windows
from core._experiments.compare import (
    INTERIM_ALPHA,
    CompareRequest,
    PlannedLooks,
    arm_differences,
    judge_compare,
    verdict_for,
    with_places,
)
from core._experiments.compare import kept as _kept
from core._experiments.report import launch_rows, summarize
from core._experiments.stats import ArmTrial
from core._history.check import (
    HistoryCheck,
    PastLaunches,
    check_history,
    environment_moved,
    match_differences,
    setup_of,
)
from core._history.static_site import RunPage
from core._measure.engines import NOT_DERIVED


async def reconcile_runs(db, config: core.Config) -> list[tuple[int, str]]:
    """Close runs left 'running' by a specperf (CLI or bot) that was killed: the engine process
    groups recorded for their running trials and their profile round's launches
    (``settings["profile_launches"]``) are stopped on their hosts (only if each is still the
    recorded engine), the runs marked interrupted. An unreachable host is said in the reason.

    Runs of Slurm jobs are settled by Slurm's state instead (:func:`bot._slurm_batch.settle`).

    Returns ``[(run id, reason), ...]`` for each run closed.
    """
    closed = await slurm.settle(db, config)
    # the database work runs in threads: a locked or unreachable database never blocks the loop
    for run, trials in await asyncio.to_thread(storage.abandoned_runs, db, owner_alive(db)):
        stopped, unreachable = [], None
        recorded = [(t.pgid, t.log_path) for t in trials if t.pgid and t.log_path]
        recorded += [(p["pgid"], p["log_path"]) for p in run.settings.get("profile_launches", [])]
        if recorded and run.host in config.hosts:
            try:
                async with open_host(config, run.host) as host:
                    stopped = [pgid for pgid, log in recorded if await host.stop_recorded_group(pgid, log)]
            except core.HostError as exc:
                unreachable = str(exc)
        owner = run.settings["owner"]["pid"]
        reason = f"specperf (pid {owner}) ended without finishing this run"
        if stopped:
            reason += f"; its engine process group {', '.join(map(str, stopped))} was still running and was stopped"
        if unreachable:
            reason += f"; its engines could not be checked: {unreachable}"
        await asyncio.to_thread(storage.mark_abandoned, db, run.id, reason)
        closed.append((run.id, reason))
    return closed


def stored_launches(stored: storage.StoredRun) -> tuple[dict, dict, dict]:
    """(``[mode][role]`` launch numbers of the ok trials in order, ``{seq: ArmTrial}``,
    ``{seq: window}`` from the run's window snapshots)."""
    seqs: dict[str, dict[str, list[int]]] = {m: {"base": [], "head": []} for m in stored.run.modes}
    figures: dict[int, ArmTrial] = {}
    for trial in stored.trials:
        if trial.status != "ok":
            continue
        arm = stored.arms[trial.arm_id]
        source = trial.engine_figures_source or ""
        missing = source.split(NOT_DERIVED, 1)[1] if NOT_DERIVED in source else None
        seqs[arm.mode][arm.role].append(trial.seq)
        figures[trial.seq] = ArmTrial(trial.output_tok_s, trial.acceptance_length, trial.tpot_ms_mean,
                                      missing, requests=tuple(trial.requests or ()),
                                      acceptance_per_position=tuple(trial.acceptance_per_position or ()) or None)
    seq_of = {t.id: t.seq for t in stored.trials}
    windows = {seq_of[s.trial_id]: s.data for s in stored.snapshots if s.trial_id is not None and s.phase == "window"}
    return seqs, figures, windows


def stored_environment(stored: storage.StoredRun) -> dict:
    """``{"arms_differ": [line]}``: the arms' set-up difference as the run stored it
    (``settings["arms"]["set_up"]``, core._experiments.arms), then its per-arm snapshots'."""
    snapshots = _arm_snapshots(stored)
    arms = (snapshots.get("base"), snapshots.get("head"))
    run = stored.run
    set_up = list((run.settings.get("arms") or {}).get("set_up") or [])
    return {"arms_differ": set_up + (arm_differences(*arms, run.base_sha, run.head_sha) if all(arms) else [])}


def _judged(launches: tuple, settings: core.CompareConfig):
    """(disturbed launches, pairs left out per mode, kept trials per mode and arm) of a stored
    run's ``launches`` (:func:`stored_launches`), judged again from its stored windows with
    ``settings``, as the live run judged them."""
    seqs, by_seq, windows = launches
    disturbed, left_out = judge_compare(seqs, windows, settings)
    trials = {mode: _kept(with_places({role: [by_seq[s] for s in arm] for role, arm in by_role.items()}, by_role,
                                      settings.pairing), left_out[mode])
              for mode, by_role in seqs.items()}
    return disturbed, left_out, trials


def stored_report(stored: storage.StoredRun, recompute: bool = False) -> tuple[dict, dict]:
    """(report as :func:`core._experiments.report.summarize` makes it, the trials' figures in the statistics) of a
    stored run, with its stored verdicts (``recompute``: verdicts recomputed from the trials).
    Disturbance is judged again from the stored windows with the run's settings, so the
    trials left out are those the live run left out."""
    settings = core.CompareConfig.model_validate(stored.run.settings["compare"])
    seqs, by_seq, windows = read = stored_launches(stored)
    disturbed, left_out, trials = _judged(read, settings)
    if recompute:
        inert = next((snap.data.get("inert") for snap in stored.snapshots if snap.phase == "commit-diff"), None)
        planned = stored.run.settings.get("planned_trials") or {}
        verdicts = {m: verdict_for(trials[m], settings, inert, PlannedLooks.from_stored(planned[m]) if m in planned else None)
                    for m in stored.run.modes}
    else:
        verdicts = {v.mode: v.to_verdict() for v in stored.verdicts}
    rows = launch_rows(seqs, {s: t.output_tok_s for s, t in by_seq.items()}, disturbed, left_out, windows)
    profiles = {snap.phase.removeprefix("profile-"): snap.data for snap in stored.snapshots
                if snap.phase.startswith("profile-")}
    return summarize(trials, verdicts, settings, stored_environment(stored), rows, disturbed,
                     profiles=profiles, cost=stored.run.settings.get("cost")), trials


def run_page(stored: storage.StoredRun) -> RunPage:
    """What the history pages show of a stored run (:class:`core._history.static_site.RunPage`): the run's row and,
    when it has ok trials, the report, kept trials and per-launch figures :func:`stored_report`
    and :func:`stored_launches` give ``specperf show`` (stored verdicts)."""
    run = stored.run
    report = trials = None
    figures: dict[int, ArmTrial] = {}
    if run.kind != "bisect" and any(t.status == "ok" for t in stored.trials):
        report, trials = stored_report(stored)
        figures = stored_launches(stored)[1]
    created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=dt.UTC)  # SQLite drops the zone
    return RunPage(run_id=run.id, kind=run.kind, status=run.status, engine=run.engine_name, host=run.host,
                        workload=run.workload_name, modes=list(run.modes), base_ref=run.base_ref, base_sha=run.base_sha,
                        head_ref=run.head_ref, head_sha=run.head_sha, created_at=created, reason=run.reason,
                        log_tail=run.log_tail, report=report, trials=trials, figures=figures,
                        bisect=run.settings.get("bisect") if run.kind == "bisect" else None)


def _arm_snapshots(stored: storage.StoredRun) -> dict[str, dict]:
    """``{role: the run's full env snapshot of that arm}`` (phases ``arm-base``, ``arm-head``)."""
    by_phase = {snap.phase: snap.data for snap in stored.snapshots if snap.trial_id is None}
    return {role: by_phase[f"arm-{role}"] for role in ("base", "head") if f"arm-{role}" in by_phase}


def history_checks(db, stored: storage.StoredRun, against: int | None = None) -> list[HistoryCheck]:
    """Per mode and arm of ``stored``, its kept launches against the newest earlier run of the
    same commit on the same host, engine and workload (:func:`core._history.check.check_history`; the launches
    kept as :func:`stored_report` keeps them, on both sides, :func:`_judged`): was the good
    number real; a commit that reads below or above carries what changed in the environment
    since that run (its arm snapshots against today's), the host's drift between runs learnt from
    every earlier run (:func:`core._history.check.level_spread`). ``against``: that run only (a
    recheck). A base arm on a set-up of its own (``settings["arms"]``: core._experiments.arms)
    is no figure of its commit on the engine's set-up: it is neither checked nor a past level."""
    run = stored.run
    settings = core.CompareConfig.model_validate(run.settings["compare"])
    today = _judged(stored_launches(stored), settings)[2]
    snapshots = _arm_snapshots(stored)
    shas = {"base": run.base_sha, "head": run.head_sha}
    past: dict[str, list[PastLaunches]] = {}  # every earlier run: the host's drift between runs is learnt from them
    earlier_runs = storage.earlier_runs(db, run)
    if against is not None and against != run.id and all(e.run.id != against for e in earlier_runs):
        earlier_runs += [e for e in [storage.load_run(db, against)] if e is not None]
    for earlier in earlier_runs:  # their launches only: no report
        kept = _judged(stored_launches(earlier), core.CompareConfig.model_validate(earlier.run.settings["compare"]))[2]
        then = _arm_snapshots(earlier)
        for mode, arms in kept.items():
            for role, arm in arms.items():
                if role == "base" and earlier.run.settings.get("arms"):
                    continue
                sha = earlier.run.base_sha if role == "base" else earlier.run.head_sha
                past.setdefault(mode, []).append(PastLaunches(
                    earlier.run.id, earlier.run.created_at, sha, [t.output_tok_s for t in arm],
                    setup_of(earlier.run.settings, mode), then.get(role)))
    checks = []
    for mode, arms in today.items():
        for role, arm in arms.items():
            if role == "base" and run.settings.get("arms"):
                continue  # another set-up than the engine's
            if role == "head" and run.head_sha == run.base_sha and not run.settings.get("arms"):
                continue  # an A/A: one commit, checked once
            levels = past.get(mode, [])
            check = check_history(mode, role, shas[role], [t.output_tok_s for t in arm],
                                  setup_of(run.settings, mode),
                                  levels if against is None else [p for p in levels if p.run_id == against],
                                  margin_pct=settings.margin_pct, alpha=settings.alpha,
                                  today_snapshot=snapshots.get(role), levels=levels)
            if check is not None:
                checks.append(check)
    return checks


def add_history(db, stored: storage.StoredRun, report: dict) -> list[HistoryCheck]:
    """Put :func:`history_checks` into ``report`` (``history``: each check's dict) and, first in
    its ``headline``, every mode whose two arms moved against their past while the verdict
    between them is no change (:func:`core._history.check.environment_moved`); for a
    recheck's run (its settings' ``recheck_of``), its answer against the rechecked run
    (``recheck``: :func:`recheck_report`). Returns the checks. Every front end shows a report
    through this."""
    checks = history_checks(db, stored)
    report["history"] = [c.to_dict() for c in checks]
    moved = environment_moved(checks, {v.mode: v.verdict for v in stored.verdicts})
    if moved:
        report["headline"] = "\n".join(moved + ([report["headline"]] if report.get("headline") else []))
    if (of_run := stored.run.settings.get("recheck_of")) is not None:
        report["recheck"] = recheck_report(db, stored, of_run)
    return checks


RECHECK_WORDS = {"consistent": "reproducible", "below": "differs", "above": "differs", "unsettled": "unsettled",
                 "not comparable": "not comparable"}


def recheck_plan(config: core.Config, stored: storage.StoredRun | None, run_id: int, base_only: bool = False) -> dict:
    """What a recheck of stored run ``run_id`` measures: ``{"head_sha", "base_sha", "modes",
    "launches", "margin_pct", "workload", "recheck_of"}`` (``head_sha`` is the base with
    ``base_only``; ``launches`` per arm and mode, fixed; ``workload`` as the run stored it).

    Checked before anything launches: the run's engine, host, workload and modes are still in
    ``config`` (the engine is launched as configured today), its stored workload still
    validates, and today's engine has the run's model and served name (otherwise nothing
    measured today could be set against it).

    Raises:
        core.ConfigError: no such run; not a finished compare with at least 2 launches per
            arm; a name the config no longer has; a stored workload that no longer validates;
            another model today (each message names the run and the cause).
    """
    if stored is None:
        raise core.ConfigError(f"no such run: {run_id} (`specperf history` lists the runs)")
    run = stored.run
    seqs = stored_launches(stored)[0]
    launches = max((len(arm) for arms in seqs.values() for arm in arms.values()), default=0)
    if run.kind != "compare" or run.status != "done" or launches < 2:
        raise core.ConfigError(f"run {run.id} is a {run.kind} run that is {run.status} with {launches} launches per "
                               "arm: recheck re-measures a finished compare with at least 2 (`specperf history` lists "
                               "them)")
    if arms := run.settings.get("arms"):
        raise core.ConfigError(f"run {run.id} compared two engine set-ups (base engine {arms['base_engine']!r}: "
                               f"{'; '.join(arms['set_up'])}); recheck re-measures compares of "
                               "commits on one set-up: run `specperf compare` with the same --base-engine, --base-env "
                               "or --base-args again")
    what = (f"run {run.id} ran engine {run.engine_name!r} on host {run.host!r} with workload {run.workload_name!r} "
            f"and modes {', '.join(run.modes)}")
    engine = config.engines.get(run.engine_name)
    missing = ([f"engine {run.engine_name!r}"] if engine is None else [])
    missing += [f"host {run.host!r}"] if run.host not in config.hosts else []
    missing += [f"workload {run.workload_name!r}"] if run.workload_name not in config.workloads else []
    missing += [f"mode {m!r}" for m in run.modes if engine is not None and m not in engine.modes]
    if missing:
        raise core.ConfigError(f"{what}; the config no longer has {', '.join(missing)}: put it back under that name "
                               "to recheck the run (its engine is launched as configured today)")
    try:
        core.WorkloadConfig.model_validate(run.settings["workload"])
    except ValueError as exc:
        raise core.ConfigError(f"{what}; its stored workload no longer validates ({str(exc).splitlines()[-1].strip()}): "
                               "recheck measures with the stored workload, so it cannot recheck this run") from None
    today = {"engine": config.engines[run.engine_name].model_dump(), "workload": run.settings["workload"]}
    if differs := match_differences(setup_of(run.settings, run.modes[0]), setup_of(today, run.modes[0])):
        raise core.ConfigError(f"{what}; today's engine is not comparable with it ({'; '.join(differs)}): nothing "
                               "was launched")
    return {"head_sha": run.base_sha if base_only else run.head_sha, "base_sha": run.base_sha,
            "modes": list(run.modes), "launches": launches, "margin_pct": run.settings["compare"]["margin_pct"],
            "workload": run.settings["workload"], "recheck_of": run.id}


def recheck_report(db, stored: storage.StoredRun, of_run: int) -> dict:
    """A recheck's answer: today's run ``stored`` against the stored run ``of_run`` alone, per
    mode and arm (:func:`history_checks`). ``{"of_run", "verdict", "lines", "checks"}``;
    ``verdict`` is ``differs`` when any arm reads below or above that run (the environment
    moved: what changed is on its line), ``reproducible`` when every arm is consistent with
    it, else ``not comparable`` or ``unsettled``; ``lines`` the first says it in words."""
    checks = history_checks(db, stored, against=of_run)
    words = [RECHECK_WORDS[c.outcome] for c in checks]
    verdict = ("differs" if "differs" in words else "reproducible" if words and set(words) == {"reproducible"}
               else "not comparable" if not words or "not comparable" in words else "unsettled")
    first = {
        "differs": f"recheck of run {of_run}: differs: the same commits measure otherwise today, beyond both runs' "
                   "launch-to-launch spread: the environment moved",
        "reproducible": f"recheck of run {of_run}: reproducible: its figures hold today",
        "unsettled": f"recheck of run {of_run}: unsettled: today's launches neither match nor clearly differ "
                     "(more launches would settle it)",
        "not comparable": f"recheck of run {of_run}: not comparable" + ("" if words else ": no launches of its commits"
                                                                      " were kept today"),
    }[verdict]
    return {"of_run": of_run, "verdict": verdict,
            "lines": [first] + [f"  {RECHECK_WORDS[c.outcome]}: {c.line()}" for c in checks],
            "checks": [c.to_dict() for c in checks]}


def calibration_plans(db, engine_name: str, host: str, workload_name: str,
                      settings: core.CompareConfig) -> tuple[int | None, dict[str, Plan]]:
    """(run id, per mode the plan) of the newest calibration of this engine, host and workload
    measured with ``settings.pairing`` (the spread of launches one at a time and of two engines
    in turns differ five-fold on a VM: 10.5% against 2.1%, bench/NOISE_RESULTS.md); ``(None,
    {})`` when there is none. A mode whose calibration measured several windows per launch gets
    launches and windows from its noise split and costs
    (:func:`core._experiments.calibrate.plan_windows`), else launches from its spread
    (:func:`core._experiments.calibrate.plan`)."""
    run = storage.latest_calibration(db, engine_name, host, workload_name, settings.pairing)
    if run is None:
        return None, {}
    return run.id, mode_plans(stored_report(storage.load_run(db, run.id))[1], run.settings["calibration"],
                              settings.alpha, run.settings.get("cost"), settings.max_trials)


def plan_request(request: CompareRequest, run_id: int | None, plans: dict[str, Plan]) -> list[str]:
    """Put the host's calibration (run ``run_id``'s ``plans``, :func:`calibration_plans`) into a
    compare's ``request`` and say it in lines: the plan (:class:`core._experiments.compare.PlannedLooks`,
    per mode whose plan wants more than ``min_trials`` launches or more than one window), before
    whose information a look decides only at the interim alpha
    (:func:`core._experiments.compare.verdict_for`), and the windows per launch of the launches
    after the first verdict (:meth:`core._experiments.compare.CompareRequest.workload_for`). The
    first verdict stays at ``min_trials`` launches of the workload's windows, as without a plan,
    and decides a change clear at 99.9% there (bench/WINDOWS_RESULTS.md). No plans: no lines, nothing changed; launches
    fixed (``max_trials`` no more than ``min_trials``, ``--rounds``): the plan's lines alone."""
    lines = [f"calibration (run {run_id}) {mode}: {p.line()}" for mode, p in plans.items()]
    min_trials = request.settings.min_trials
    if request.settings.max_trials <= min_trials:  # launches fixed (--rounds): nothing after the first verdict
        return lines
    request.later_windows = {mode: p.windows for mode, p in plans.items() if p.pairs and p.windows > 1}
    request.planned_trials = {
        mode: PlannedLooks(p.pairs, p.windows, *((p.split.between_pct, p.split.within_pct) if p.split else (1.0, 0.0)))
        for mode, p in plans.items() if p.pairs and (p.pairs > min_trials or p.windows > 1)}
    parts = [f"first verdict after {min_trials} launches per arm as without a plan"]
    if request.planned_trials:
        parts.append("before they carry the information of the plan's "
                     + ", ".join(f"{mode} {p.line()}" for mode, p in request.planned_trials.items())
                     + f" a look decides only at alpha {INTERIM_ALPHA:g}")
    if request.later_windows:
        parts.append("launches after the first verdict measure "
                     + ", ".join(f"{mode} {w} windows" for mode, w in request.later_windows.items()))
    return lines + (["; ".join(parts)] if len(parts) > 1 else [])


def mode_plans(trials: dict, goal: dict, alpha: float, cost: dict | None, max_pairs: int = 64) -> dict[str, Plan]:
    """Per mode of a calibration's trials (:func:`core._experiments.compare.figures`: mode ->
    {"base", "head"}) its plan for ``goal`` (``{"change_pct", "power"}``) at significance
    ``alpha``: from the noise split and ``cost`` (the run's) when its launches measured several
    windows, within ``max_pairs`` launches per arm (a compare's ``max_trials``), else from the
    pair spread; a mode with too few pairs has none."""
    plans = {}
    for mode, arms in trials.items():
        split = noise_split(arms["base"], arms["head"], cost)
        spread = pair_spread_pct(arms["base"], arms["head"])
        if split is not None:
            plans[mode] = plan_windows(split, goal["change_pct"], goal["power"], alpha, max_pairs=max_pairs)
        elif spread:
            plans[mode] = plan(spread, goal["change_pct"], goal["power"], alpha)
    return plans
