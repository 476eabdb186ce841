"""What the CLI and the Slack bot share about stored runs: closing runs a killed specperf left
running (stopping their recorded engine groups), and a stored run's report."""

from __future__ import annotations

import core
import storage
from bot._common import open_host, owner_alive


async def reconcile_runs(db, config: core.Config) -> list[tuple[int, str]]:
    """Close runs left 'running' by a specperf (CLI or bot) that was killed: the engine process
    groups recorded for their running trials are stopped on their hosts (only if each is still
    the recorded engine), the runs marked interrupted. An unreachable host is said in the reason.

    Returns ``[(run id, reason), ...]`` for each run closed.
    """
    closed = []
    for run, trials in storage.abandoned_runs(db, owner_alive):
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
        storage.mark_abandoned(db, run.id, reason)
        closed.append((run.id, reason))
    return closed


def stored_figures(stored: storage.StoredRun) -> dict[str, dict[str, list[core.ArmTrial]]]:
    """The statistics' view of a stored run: ``[mode][role]`` lists of ok trials, in launch order."""
    trials: dict[str, dict[str, list[core.ArmTrial]]] = {m: {"base": [], "head": []} for m in stored.run.modes}
    for trial in stored.trials:
        if trial.status != "ok":
            continue
        arm = stored.arms[trial.arm_id]
        trials[arm.mode][arm.role].append(core.ArmTrial(trial.output_tok_s, trial.acceptance_length, trial.tpot_ms_mean))
    return trials


def stored_environment(stored: storage.StoredRun) -> dict:
    """``{"arms_differ": [line], "drift": {launch seq: [line]}}`` from a run's env snapshots."""
    by_phase: dict[str, dict] = {}
    per_trial: dict[int, dict[str, dict]] = {}
    for snap in stored.snapshots:
        if snap.trial_id is None:
            by_phase[snap.phase] = snap.data
        else:
            per_trial.setdefault(snap.trial_id, {})[snap.phase] = snap.data
    arms = (by_phase.get("arm-base"), by_phase.get("arm-head"))
    seq = {t.id: t.seq for t in stored.trials}
    drift = {seq[tid]: lines for tid, snaps in per_trial.items()
             if (lines := core.drift_lines(snaps.get("before"), snaps.get("after")))}
    return {"arms_differ": [c.line for c in core.diff_snapshots(*arms)] if all(arms) else [], "drift": drift}


def stored_report(stored: storage.StoredRun, recompute: bool = False) -> tuple[dict, dict]:
    """(report as :func:`core.summarize` makes it, the trials' figures) of a stored run, with
    its stored verdicts (``recompute``: verdicts recomputed from the trials)."""
    settings = core.CompareConfig.model_validate(stored.run.settings["compare"])
    trials = stored_figures(stored)
    if recompute:
        verdicts = {m: core.verdict_for(trials[m], settings) for m in stored.run.modes}
    else:
        fields = [f.name for f in core.Verdict.__dataclass_fields__.values()]
        verdicts = {v.mode: core.Verdict(**{f: getattr(v, f) for f in fields}) for v in stored.verdicts}
    return core.summarize(trials, verdicts, settings, stored_environment(stored)), trials
