"""History series from stored runs, and what the runs of a period found (:func:`load_findings`).

History series: one point per measured commit, per (engine, host, mode,
workload), in commit order.

Every done run measured two commits (its base and head arms), so a commit's point pools the
ok trials of every arm with its SHA and mode in the series' done runs: a watch that compares
each new head against the previous one measures most commits twice. Per point: output tok/s
and acceptance length (medians of its trials), the trials, the run ids, when it was last
measured, the verdicts of runs that had it as head, and the newest full env snapshot taken
for it (``arm-base``/``arm-head``) with what changed in driver, NCCL, torch and engine
libraries since the previous point that has one.

With ``by_category`` (the history pages), each workload whose requests carry categories also
gives one series per category, named ``WORKLOAD:CATEGORY``: a trial's figures there are its
category's (core._experiments.categories.split_by_category: the category's output tokens over
its requests' summed time, its own acceptance where the requests carried it), a head's verdict
the category's verdict.

Commit order: the caller's list of SHAs, oldest first (the engine repo's first-parent order:
``core._git.first_parent_order``); commits not on it are left out and counted. Without one,
the order in which the commits were first measured (a base before its head).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from core._experiments.categories import split_by_category
from core._experiments.stats import IMPROVEMENT, REGRESSION, ArmTrial
from core._history.findings import BisectFinding, CompareFinding, FailedRun, PeriodRuns
from core._history.series import Series, SeriesPoint, env_changes
from core._prompts import RANDOM_WORDS
from storage._models import Arm, EnvSnapshot, Run, Trial, VerdictRow


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)  # SQLite drops the zone


def _series_rows(db: Engine, engine_name: str | None, host: str | None,
                 requests: bool = False) -> tuple[list, list, list, list, list]:
    """The rows a history needs, in one session: ``done`` runs (of ``engine_name`` and
    ``host`` where given) oldest first, their arms, their ``ok`` trials' figures (run, arm,
    output tok/s, acceptance length, and with ``requests`` the per-request records of runs on a
    prompt set, else ``None``), their arms' full env snapshots (oldest first) and their verdicts."""
    with Session(db) as session:
        query = select(Run).where(Run.status == "done").order_by(Run.created_at, Run.id)
        if engine_name:
            query = query.where(Run.engine_name == engine_name)
        if host:
            query = query.where(Run.host == host)
        # a compare of two engine set-ups (settings["arms"]) measured its base on another set-up than
        # the engine's: its commits' figures are not the engine's history
        runs = [r for r in session.exec(query) if not (r.settings or {}).get("arms")]
        run_ids = [r.id for r in runs]
        arms = list(session.exec(select(Arm).where(Arm.run_id.in_(run_ids)))) if run_ids else []
        # only the figures a series needs; the per-request records only when asked for, and only
        # of runs whose prompts could have categories (random words have none)
        figures = list(session.exec(select(Trial.id, Trial.arm_id, Trial.output_tok_s, Trial.acceptance_length)
                                    .where(Trial.run_id.in_(run_ids), Trial.status == "ok")
                                    .order_by(Trial.run_id, Trial.seq))) if run_ids else []
        prompt_sets = [r.id for r in runs if (r.settings.get("workload") or {}).get("prompts", RANDOM_WORDS) != RANDOM_WORDS]
        records = {trial_id: kept for trial_id, kept in session.exec(select(Trial.id, Trial.requests).where(
            Trial.run_id.in_(prompt_sets), Trial.status == "ok"))} if requests and prompt_sets else {}
        run_of_arm = {a.id: a.run_id for a in arms}
        trials = [(run_of_arm[arm_id], arm_id, tok_s, acceptance, records.get(trial_id))
                  for trial_id, arm_id, tok_s, acceptance in figures]
        snapshots = list(session.exec(select(EnvSnapshot).where(EnvSnapshot.run_id.in_(run_ids),
                                                                EnvSnapshot.phase.in_(["arm-base", "arm-head"]))
                                      .order_by(EnvSnapshot.id))) if run_ids else []
        verdicts = list(session.exec(select(VerdictRow).where(VerdictRow.run_id.in_(run_ids)))) if run_ids else []

    return runs, arms, trials, snapshots, verdicts


def _points(collected: dict[str, dict], shas: list[str], snapshot_of: dict[str, dict], by_run: dict[int, Run],
            run_snapshot: dict[tuple[int, str], dict]) -> list[SeriesPoint]:
    """One series' points at ``shas`` (in order) from its ``collected`` figures per SHA, each
    with the environment changes against the previous point's snapshot and its trials per run
    (``by_run``: the runs by id; ``run_snapshot``: (run id, sha) -> that run's snapshot)."""
    points, previous_env = [], None
    for sha in shas:
        entry = collected[sha]
        env = snapshot_of.get(sha)
        points.append(SeriesPoint(
            sha=sha, refs=entry["refs"], output_tok_s=statistics.median(entry["tok"]),
            acceptance_length=statistics.median(entry["acc"]) if entry["acc"] else None,
            trials_output_tok_s=entry["tok"], trials_acceptance_length=entry["acc"],
            run_ids=sorted(entry["runs"]), first_measured_at=min(entry["times"]),
            last_measured_at=max(entry["times"]), verdicts=entry["verdicts"], env=env,
            env_changes=env_changes(previous_env, env),
            runs=[(run_id, _aware(by_run[run_id].created_at), tok, run_snapshot.get((run_id, sha)))
                  for run_id, tok in sorted(entry.get("by_run", {}).items())],
        ))
        previous_env = env or previous_env
    return points


def _trial_figures(tok_s: float, acceptance: float | None, requests: list | None, by_category: bool
                   ) -> list[tuple[str | None, float, float | None]]:
    """A trial's ``(category, output tok/s, acceptance length)``: the workload's (category
    ``None``), then with ``by_category`` each category's (module docstring)."""
    figures: list[tuple[str | None, float, float | None]] = [(None, tok_s, acceptance)]
    if by_category and requests:
        for category, trial in split_by_category(ArmTrial(tok_s, requests=tuple(requests))).items():
            figures.append((category, trial.output_tok_s, trial.acceptance_length))
    return figures


def load_series(db: Engine, *, engine_name: str | None = None, host: str | None = None,
                commit_order: dict[str, Sequence[str]] | Sequence[str] | None = None,
                by_category: bool = False) -> list[Series]:
    """Every series in the database (optionally of one engine or host).

    Args:
        db: the database.
        engine_name, host: keep only these.
        commit_order: SHAs oldest first, for all engines, or ``{engine name: SHAs}``; an
            engine without one is ordered by run time.
        by_category: also a series per category (``WORKLOAD:CATEGORY``, module docstring);
            reads every trial's per-request records.

    Returns:
        Series sorted by (db, host, mode, workload); only ``done`` runs and ``ok`` trials
        count; a series has at least one point.
    """
    runs, arms, trials, snapshots, verdicts = _series_rows(db, engine_name, host, requests=by_category)
    by_run = {r.id: r for r in runs}
    arm_of = {a.id: a for a in arms}
    snapshot_of: dict[str, dict] = {}  # sha -> newest full snapshot (ids ascend with time)
    run_snapshot: dict[tuple[int, str], dict] = {}  # (run, sha) -> that run's snapshot of it
    for snap in snapshots:
        run = by_run[snap.run_id]
        sha = run.base_sha if snap.phase == "arm-base" else run.head_sha
        snapshot_of[sha] = run_snapshot[run.id, sha] = snap.data
    verdicts_of: dict[tuple[int, str], VerdictRow] = {(v.run_id, v.mode): v for v in verdicts}

    # (db, host, mode, workload) -> sha -> collected figures; order_seen: each key's SHAs as first measured
    collected: dict[tuple, dict[str, dict]] = {}
    order_seen: dict[tuple, list[str]] = {}
    category_of: dict[tuple, str] = {}  # the keys of category series

    def entry_of(key: tuple, run: Run, sha: str, category: str | None = None) -> dict:
        """The figures of ``sha`` in series ``key``, with ``run``'s part (ref, time, verdict) in them."""
        shas = collected.setdefault(key, {})
        if sha not in shas:
            shas[sha] = {"refs": [], "tok": [], "acc": [], "runs": [], "times": [], "verdicts": []}
            order_seen.setdefault(key, []).append(sha)
        entry = shas[sha]
        if run.id not in entry["runs"]:
            entry["runs"].append(run.id)
            entry["times"].append(_aware(run.created_at))
            for arm_sha, ref in ((run.base_sha, run.base_ref), (run.head_sha, run.head_ref)):
                if arm_sha == sha and ref not in entry["refs"]:
                    entry["refs"].append(ref)
            mode = key[2]
            if sha == run.head_sha and (v := verdicts_of.get((run.id, mode))) is not None:
                verdict: str | None = v.verdict
                change = v.change_pct
                if category is not None:  # a category's series: that category's verdict
                    found = ((v.categories or {}).get("categories") or {}).get(category)
                    verdict, change = ((found["verdict"]["verdict"], found["verdict"]["change_pct"]) if found
                                       else (None, None))
                if verdict is not None:
                    entry["verdicts"].append({"run_id": run.id, "base_sha": run.base_sha, "verdict": verdict,
                                              "change_pct": change})
        return entry

    for run in runs:  # the arms' commits in the order they were first measured (a base before its head)
        for mode in run.modes:
            for sha in (run.base_sha, run.head_sha):
                entry_of((run.engine_name, run.host, mode, run.workload_name), run, sha)
    for run_id, arm_id, output_tok_s, acceptance_length, requests in trials:
        arm = arm_of[arm_id]
        run = by_run[run_id]
        for category, tok_s, acceptance in _trial_figures(output_tok_s, acceptance_length, requests, by_category):
            key = (run.engine_name, run.host, arm.mode,
                   run.workload_name if category is None else f"{run.workload_name}:{category}")
            if category is not None:
                category_of[key] = category
            entry = entry_of(key, run, arm.sha, category)
            entry["tok"].append(tok_s)
            entry.setdefault("by_run", {}).setdefault(run_id, []).append(tok_s)
            if acceptance is not None:
                entry["acc"].append(acceptance)

    series = []
    for key in sorted(collected):
        order = commit_order.get(key[0]) if isinstance(commit_order, dict) else commit_order
        measured = [sha for sha in order_seen[key] if collected[key][sha]["tok"]]
        if order is not None:
            position = {sha: i for i, sha in enumerate(order)}
            on_branch = sorted((sha for sha in measured if sha in position), key=position.__getitem__)
            off_branch, ordered_by = len(measured) - len(on_branch), "first-parent"
        else:
            on_branch, off_branch, ordered_by = measured, 0, "run time"
        points = _points(collected[key], on_branch, snapshot_of, by_run, run_snapshot)
        if points:
            series.append(Series(*key, points=points, ordered_by=ordered_by, off_branch=off_branch,
                                 category=category_of.get(key)))
    return series


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def load_findings(db: Engine, *, since: dt.datetime, engine_name: str | None = None,
                  host: str | None = None) -> PeriodRuns:
    """What the runs started since ``since`` (optionally of one engine or host) found.

    Compare runs (``done``) with a REGRESSION or IMPROVEMENT verdict, or whose answers changed,
    give one
    :class:`core._history.findings.CompareFinding` per such mode, unless they were a step of a bisect started
    in the period (that bisect stands for them); finished bisects give a
    :class:`core._history.findings.BisectFinding` with the compare that decided it; ``failed`` runs are listed as
    they are (group them with ``PeriodRuns.failure_groups``). Interrupted runs are not findings.
    """
    with Session(db) as session:
        query = select(Run).where(Run.status.in_(["done", "failed"])).order_by(Run.created_at, Run.id)
        if engine_name:
            query = query.where(Run.engine_name == engine_name)
        if host:
            query = query.where(Run.host == host)
        # a compare of two engine set-ups (settings["arms"]) is no finding about its commits
        runs = [r for r in session.exec(query) if _aware(r.created_at) >= since and not (r.settings or {}).get("arms")]
        bisects = {r.id for r in runs if r.kind == "bisect"}
        steps = {int(rid) for r in runs if r.kind == "bisect"
                 for rid in (s.get("compare_run_id") for s in (r.settings.get("bisect") or {}).get("steps", [])) if rid}
        wanted = {r.id for r in runs} | steps
        verdicts = list(session.exec(select(VerdictRow).where(VerdictRow.run_id.in_(wanted)))) if wanted else []
        step_runs = {r.id: r for r in session.exec(select(Run).where(col(Run.id).in_(steps)))} if steps else {}
        arms = list(session.exec(select(Arm).where(Arm.run_id.in_(wanted)))) if wanted else []
        acceptance = list(session.exec(select(Trial.arm_id, Trial.acceptance_length).where(
            col(Trial.run_id).in_(wanted), Trial.status == "ok", col(Trial.acceptance_length).is_not(None)))) if wanted else []

    by_run = {r.id: r for r in runs} | step_runs
    arm_acceptance: dict[int, list[float]] = {}
    for arm_id, value in acceptance:
        arm_acceptance.setdefault(arm_id, []).append(value)
    arm_of = {(a.run_id, a.role, a.mode): a.id for a in arms}

    def finding(v: VerdictRow) -> CompareFinding:
        run = by_run[v.run_id]
        base = arm_acceptance.get(arm_of.get((run.id, "base", v.mode)), [])
        head = arm_acceptance.get(arm_of.get((run.id, "head", v.mode)), [])
        return CompareFinding(
            run_id=run.id, engine=run.engine_name, host=run.host, mode=v.mode, workload=run.workload_name,
            verdict=v.verdict, base_sha=run.base_sha, head_sha=run.head_sha, base_ref=run.base_ref,
            head_ref=run.head_ref, change_pct=v.change_pct, ci_low_pct=v.ci_low_pct, ci_high_pct=v.ci_high_pct,
            p_value=v.p_value, acceptance_length_base=_median_or_none(base),
            acceptance_length_head=_median_or_none(head), acceptance_change_pct=v.acceptance_change_pct,
            step_ms_change_pct=v.step_ms_change_pct, attribution=v.attribution,
            measured_at=_aware(run.created_at), bisect_run_id=(run.settings.get("bisect") or {}).get("run_id"),
            outputs=v.outputs["line"] if v.outputs and _outputs_changed(v) else None)

    verdict_of = {(v.run_id, v.mode): v for v in verdicts}
    found = PeriodRuns()
    for run in runs:
        if run.status == "failed":
            found.failed.append(FailedRun(run.id, run.kind, run.engine_name, run.host, list(run.modes), run.base_sha,
                                          run.head_sha, run.head_ref, run.reason or "", _aware(run.created_at)))
        elif run.kind == "bisect":
            bisect = run.settings.get("bisect") or {}
            culprit = bisect.get("culprit")
            done = [s for s in bisect.get("steps", []) if s.get("status") == "done" and s.get("compare_run_id")]
            deciding = next((s for s in reversed(done) if s["head_sha"] == culprit), None) if culprit else None
            deciding = deciding or (done[0] if done else None)
            evidence = verdict_of.get((deciding["compare_run_id"], run.modes[0])) if deciding else None
            found.bisects.append(BisectFinding(
                run_id=run.id, engine=run.engine_name, host=run.host, mode=run.modes[0], workload=run.workload_name,
                outcome=bisect.get("outcome", "unknown"), good_sha=run.base_sha, bad_sha=run.head_sha,
                culprit=culprit, candidates=list(bisect.get("candidates") or []),
                confirmed=bool(bisect.get("confirmed")), message=run.reason or bisect.get("message", ""),
                evidence=finding(evidence) if evidence else None,
                compare_run_ids=[s["compare_run_id"] for s in bisect.get("steps", []) if s.get("compare_run_id")],
                measured_at=_aware(run.created_at)))
        elif (run.settings.get("bisect") or {}).get("run_id") not in bisects:
            for mode in run.modes:
                v = verdict_of.get((run.id, mode))
                if v is not None and (v.verdict in (REGRESSION, IMPROVEMENT) or _outputs_changed(v)):
                    found.compares.append(finding(v))
    return found


def _outputs_changed(v: VerdictRow) -> bool:
    return bool(v.outputs and v.outputs.get("status") == "changed")
