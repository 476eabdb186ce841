"""What the CLI and the Slack bot share about stored runs: closing runs a killed specperf left
running (stopping their recorded engine groups), a stored run's report, and its history page's
data (:func:`run_page`)."""

from __future__ import annotations

import asyncio
import datetime as dt

import core
import storage
from bot import _slurm as slurm
from bot._common import open_host, owner_alive


async def reconcile_runs(db, config: core.Config) -> list[tuple[int, str]]:
    """Close runs left 'running' by a specperf (CLI or bot) that was killed: the engine process
    groups recorded for their running trials are stopped on their hosts (only if each is still
    the recorded engine), the runs marked interrupted. An unreachable host is said in the reason.

    Runs of Slurm jobs are settled by Slurm's state instead (:func:`bot._slurm.settle`).

    Returns ``[(run id, reason), ...]`` for each run closed.
    """
    closed = await slurm.settle(db, config)
    # the database work runs in threads: a locked or unreachable database never blocks the loop
    for run, trials in await asyncio.to_thread(storage.abandoned_runs, db, owner_alive(db)):
        stopped, unreachable = [], None
        recorded = [t for t in trials if t.pgid and t.log_path]
        if recorded and run.host in config.hosts:
            try:
                async with open_host(config, run.host) as host:
                    stopped = [t.pgid for t in recorded if await host.stop_recorded_group(t.pgid, t.log_path)]
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
    figures: dict[int, core.ArmTrial] = {}
    for trial in stored.trials:
        if trial.status != "ok":
            continue
        arm = stored.arms[trial.arm_id]
        source = trial.engine_figures_source or ""
        missing = source.split(core.NOT_DERIVED, 1)[1] if core.NOT_DERIVED in source else None
        seqs[arm.mode][arm.role].append(trial.seq)
        figures[trial.seq] = core.ArmTrial(trial.output_tok_s, trial.acceptance_length, trial.tpot_ms_mean,
                                           missing)
    seq_of = {t.id: t.seq for t in stored.trials}
    windows = {seq_of[s.trial_id]: s.data for s in stored.snapshots if s.trial_id is not None and s.phase == "window"}
    return seqs, figures, windows


def stored_environment(stored: storage.StoredRun) -> dict:
    """``{"arms_differ": [line]}`` from a run's per-arm snapshots."""
    by_phase = {snap.phase: snap.data for snap in stored.snapshots if snap.trial_id is None}
    arms = (by_phase.get("arm-base"), by_phase.get("arm-head"))
    run = stored.run
    return {"arms_differ": core.arm_differences(*arms, run.base_sha, run.head_sha) if all(arms) else []}


def _judged(launches: tuple, settings: core.CompareConfig):
    """(disturbed launches, pairs left out per mode, kept trials per mode and arm) of a stored
    run's ``launches`` (:func:`stored_launches`), judged again from its stored windows with
    ``settings``, as the live run judged them."""
    seqs, by_seq, windows = launches
    disturbed, left_out = core.judge_compare(seqs, windows, settings)
    trials = {mode: core.kept({role: [by_seq[s] for s in arm] for role, arm in by_role.items()}, left_out[mode])
              for mode, by_role in seqs.items()}
    return disturbed, left_out, trials


def stored_report(stored: storage.StoredRun, recompute: bool = False) -> tuple[dict, dict]:
    """(report as :func:`core.summarize` makes it, the trials' figures in the statistics) of a
    stored run, with its stored verdicts (``recompute``: verdicts recomputed from the trials).
    Disturbance is judged again from the stored windows with the run's settings, so the
    trials left out are those the live run left out."""
    settings = core.CompareConfig.model_validate(stored.run.settings["compare"])
    seqs, by_seq, windows = read = stored_launches(stored)
    disturbed, left_out, trials = _judged(read, settings)
    if recompute:
        verdicts = {m: core.verdict_for(trials[m], settings) for m in stored.run.modes}
    else:
        fields = [f.name for f in core.Verdict.__dataclass_fields__.values()]
        verdicts = {v.mode: core.Verdict(**{f: getattr(v, f) for f in fields}) for v in stored.verdicts}
    rows = core.launch_rows(seqs, {s: t.output_tok_s for s, t in by_seq.items()}, disturbed, left_out, windows)
    return core.summarize(trials, verdicts, settings, stored_environment(stored), rows, disturbed), trials


def run_page(stored: storage.StoredRun) -> core.RunPage:
    """What the history pages show of a stored run (:class:`core.RunPage`): the run's row and,
    when it has ok trials, the report, kept trials and per-launch figures :func:`stored_report`
    and :func:`stored_launches` give ``specperf show`` (stored verdicts)."""
    run = stored.run
    report = trials = None
    figures: dict[int, core.ArmTrial] = {}
    if run.kind != "bisect" and any(t.status == "ok" for t in stored.trials):
        report, trials = stored_report(stored)
        figures = stored_launches(stored)[1]
    created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=dt.UTC)  # SQLite drops the zone
    return core.RunPage(run_id=run.id, kind=run.kind, status=run.status, engine=run.engine_name, host=run.host,
                        workload=run.workload_name, modes=list(run.modes), base_ref=run.base_ref, base_sha=run.base_sha,
                        head_ref=run.head_ref, head_sha=run.head_sha, created_at=created, reason=run.reason,
                        log_tail=run.log_tail, report=report, trials=trials, figures=figures,
                        bisect=run.settings.get("bisect") if run.kind == "bisect" else None)


def history_checks(db, stored: storage.StoredRun) -> list[core.HistoryCheck]:
    """Per mode and arm of ``stored``, its kept launches against the newest earlier run of the
    same commit on the same host, engine and workload (:func:`core.check_history`; the launches
    kept as :func:`stored_report` keeps them, on both sides, :func:`_judged`): was the good
    number real."""
    run = stored.run
    settings = core.CompareConfig.model_validate(run.settings["compare"])
    today = _judged(stored_launches(stored), settings)[2]
    shas = {"base": run.base_sha, "head": run.head_sha}
    past: dict[str, list[core.PastLaunches]] = {}
    for earlier in storage.earlier_runs(db, run):  # their launches only: no report, no bootstrap
        kept = _judged(stored_launches(earlier), core.CompareConfig.model_validate(earlier.run.settings["compare"]))[2]
        for mode, arms in kept.items():
            for role, arm in arms.items():
                sha = earlier.run.base_sha if role == "base" else earlier.run.head_sha
                past.setdefault(mode, []).append(core.PastLaunches(
                    earlier.run.id, earlier.run.created_at, sha, [t.output_tok_s for t in arm],
                    core.setup_of(earlier.run.settings, mode)))
    checks = []
    for mode, arms in today.items():
        for role, arm in arms.items():
            if role == "head" and run.head_sha == run.base_sha:
                continue  # an A/A: one commit, checked once
            check = core.check_history(mode, role, shas[role], [t.output_tok_s for t in arm],
                                       core.setup_of(run.settings, mode), past.get(mode, []),
                                       margin_pct=settings.margin_pct, alpha=settings.alpha)
            if check is not None:
                checks.append(check)
    return checks


def calibration_plans(db, engine_name: str, host: str, workload_name: str,
                      settings: core.CompareConfig) -> tuple[int | None, dict[str, core.Plan]]:
    """(run id, per mode the :func:`core.plan` from its spread) of the newest calibration of
    this engine, host and workload measured with ``settings.pairing`` (the spread of launches
    one at a time and of two engines in turns differ five-fold on a VM: 10.5% against 2.1%,
    bench/NOISE_RESULTS.md); ``(None, {})`` when there is none."""
    run = storage.latest_calibration(db, engine_name, host, workload_name, settings.pairing)
    if run is None:
        return None, {}
    goal = run.settings["calibration"]
    _, trials = stored_report(storage.load_run(db, run.id))
    plans = {}
    for mode, arms in trials.items():
        spread = core.pair_spread_pct(arms["base"], arms["head"])
        if spread:
            plans[mode] = core.plan(spread, goal["change_pct"], goal["power"], settings.alpha)
    return run.id, plans
