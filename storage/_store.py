"""Runs in the database: a compare observer and a bisect observer that write as the run goes,
and the queries behind ``specperf show`` and ``specperf history``.

A bisect is a run of kind ``bisect`` whose ``settings["bisect"]`` holds its steps (commit,
verdict, the compare run's id, launches); each step's compare is an ordinary compare run
whose ``settings["bisect"]`` names the bisect run and the step. A bisect on a Slurm host may
take over the step runs of an interrupted bisect of the same range (:meth:`BisectStore.compare_observer`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from core import CompareObserver, CompareResult, Verdict
from core._experiments.bisection import BisectObserver, BisectRequest, BisectResult, BisectStep
from core._experiments.compare import Arm as CoreArm
from core._experiments.compare import CompareRequest, request_doc
from core._measure.trial import TrialResult
from core._redact import redact
from storage._models import Arm, EnvSnapshot, Run, Trial, VerdictRow, utcnow
from storage._owners import identity, keep_alive


class RunStore(CompareObserver):
    """Records one compare run. Create it, call :meth:`create`, then pass it as the observer.

    Every hook commits at once, so the database tells the truth about a run in flight (the
    engine's pgid is stored as soon as it is launched) and after a crash.
    """

    def __init__(self, db: Engine) -> None:
        self.db = db
        self.run_id: int | None = None
        self._arms: dict[CoreArm, int] = {}
        self._trials: dict[int, int] = {}  # launch seq -> trial id
        self._unlinked: dict[int, list[int]] = {}  # launch seq -> snapshots taken before its row existed

    def create(self, request: CompareRequest, base_sha: str, head_sha: str, extra: dict | None = None) -> int:
        """Insert the run (status running, owned by this process, whose lease is kept alive from
        now on) and return its id; ``extra`` is merged into its settings. A base arm on a set-up
        of its own (core._experiments.arms) is kept as ``settings["arms"]``: ``base_engine`` (its
        name), ``set_up`` (what differs, base -> head) and ``base_engine_config`` (secrets hidden),
        unless the two set-ups are the same; the windows per launch planned for the launches after
        the first verdict as ``settings["later_windows"]`` (``{mode: windows}``) and the launches
        per arm the calibration planned as ``settings["planned_trials"]`` (``{mode:
        PlannedLooks.to_dict()}``), when any."""
        keep_alive(self.db)
        set_up = request.set_up_differences()  # none: one set-up on both sides, an A/A of it like any other
        arms = {} if not set_up or request.base_engine is None else {"arms": {
            "base_engine": request.base_engine_name, "set_up": redact(set_up),
            "base_engine_config": redact(request.base_engine.model_dump())}}
        base_ref, head_ref = request.refs()
        with Session(self.db) as session:
            run = Run(
                engine_name=request.engine_name, workload_name=request.workload_name,
                base_ref=base_ref, base_sha=base_sha, head_ref=head_ref, head_sha=head_sha, modes=list(request.modes),
                host=request.host.name,
                settings={"compare": request.settings.model_dump(), "workload": request.workload.model_dump(),
                          "engine": redact(request.engine.model_dump()), "host_where": request.host.where,
                          "client": "local" if request.host.is_local else request.host.client_where,
                          "owner": identity().as_owner(), **arms, **(extra or {}),
                          **({"later_windows": request.later_windows} if request.later_windows else {}),
                          **({"planned_trials": {m: p.to_dict() for m, p in request.planned_trials.items()}}
                             if request.planned_trials else {})},
            )
            session.add(run)
            session.commit()
            self.run_id = run.id
        return self.run_id

    def resume(self, run_id: int) -> None:
        """Record into run ``run_id``, created elsewhere (a Slurm job's run, made when it was
        submitted), owned from now on by this process (whose lease is kept alive)."""
        keep_alive(self.db)
        self.run_id = run_id
        with Session(self.db) as session:
            run = session.get(Run, run_id)
            run.settings = {**run.settings, "owner": identity().as_owner()}
            session.add(run)
            session.commit()

    def _arm_id(self, session: Session, arm: CoreArm) -> int:
        if arm not in self._arms:
            row = Arm(run_id=self.run_id, role=arm.role, sha=arm.sha, mode=arm.mode)
            session.add(row)
            session.flush()
            self._arms[arm] = row.id
        return self._arms[arm]

    def profile_launched(self, mode, role, process) -> None:
        """A profile round's engine launched: its process group and log recorded in the run's
        ``settings["profile_launches"]`` (no trial row: it measures nothing), so a specperf killed
        during the round leaves an engine that :func:`bot._runs.reconcile_runs` can stop."""
        launch = {"mode": mode, "role": role, "pgid": process.pgid, "log_path": str(process.log_path)}
        with Session(self.db) as session:
            run = session.get(Run, self.run_id)
            run.settings = {**run.settings, "profile_launches": [*run.settings.get("profile_launches", []), launch]}
            session.add(run)
            session.commit()

    def trial_launched(self, arm, seq, process) -> None:
        with Session(self.db) as session:
            row = Trial(run_id=self.run_id, arm_id=self._arm_id(session, arm), seq=seq, pgid=process.pgid,
                        argv=redact(list(process.argv)), log_path=str(process.log_path))
            session.add(row)
            session.flush()
            for snapshot_id in self._unlinked.pop(seq, []):
                session.get(EnvSnapshot, snapshot_id).trial_id = row.id
            session.commit()
            self._trials[seq] = row.id

    def trial_finished(self, arm, seq, trial: TrialResult) -> None:
        sample, figures = trial.sample, trial.engine
        with Session(self.db) as session:
            row = session.get(Trial, self._trials[seq])
            row.status = "ok"
            row.ready_s = trial.ready_s
            row.output_tok_s = sample.output_tok_s
            row.request_per_s = sample.request_per_s
            row.output_tokens = sample.output_tokens
            row.window_s = sample.window_s
            row.tpot_ms_mean = sample.tpot_ms.mean if sample.tpot_ms else None
            row.latency_ms = {k: v for k, v in sample.summary().items() if k.endswith("_ms")}
            row.acceptance_length = figures.acceptance_length
            row.drafts = figures.drafts
            row.accepted_tokens = figures.accepted_tokens
            row.acceptance_per_position = list(figures.acceptance_per_position or ()) or None
            row.engine_output_tok_s = figures.output_tok_s
            row.engine_figures_source = figures.source
            row.requests = [request_doc(r, sample.window_start_s) for r in sample.requests]
            session.add(row)
            session.commit()

    def trial_failed(self, arm, seq, error: str) -> None:
        with Session(self.db) as session:
            if seq in self._trials:
                row = session.get(Trial, self._trials[seq])
            else:  # failed before launch (no build, no import)
                row = Trial(run_id=self.run_id, arm_id=self._arm_id(session, arm), seq=seq)
            row.status = "failed"
            row.error = redact(error)
            session.add(row)
            session.commit()

    def verdicts_updated(self, verdicts: dict[str, Verdict]) -> None:
        with Session(self.db) as session:
            for old in session.exec(select(VerdictRow).where(VerdictRow.run_id == self.run_id)):
                session.delete(old)
            for mode, verdict in verdicts.items():
                session.add(VerdictRow(run_id=self.run_id, mode=mode, **dataclasses.asdict(verdict)))
            session.commit()

    def finished(self, result: CompareResult) -> None:
        with Session(self.db) as session:
            run = session.get(Run, self.run_id)
            run.status = result.status
            run.reason = redact(result.reason)
            run.log_tail = redact(result.log_tail)
            run.finished_at = utcnow()
            if result.engines_up_s:  # what the verdicts cost on the host (CompareResult.cost)
                run.settings = {**run.settings, "cost": result.cost()}
            for role, imported in result.imported.items():
                for arm in session.exec(select(Arm).where(Arm.run_id == self.run_id, Arm.role == role)):
                    arm.imported = imported
                    session.add(arm)
            if result.status != "done":  # a run that could not finish has no verdict
                for verdict in session.exec(select(VerdictRow).where(VerdictRow.run_id == self.run_id)):
                    session.delete(verdict)
            for trial in session.exec(select(Trial).where(Trial.run_id == self.run_id, Trial.status == "running")):
                trial.status = "interrupted" if result.status == "interrupted" else "failed"
                session.add(trial)
            session.add(run)
            session.commit()

    def snapshot(self, phase: str, data: dict, seq: int | None) -> None:
        """Store an environment snapshot: ``arm-base``/``arm-head`` (full, per arm) or the
        ``window`` monitor's document of a launch (linked to that trial)."""
        with Session(self.db) as session:
            row = EnvSnapshot(run_id=self.run_id, trial_id=self._trials.get(seq), phase=phase, data=data)
            session.add(row)
            session.commit()
            if seq is not None and row.trial_id is None:
                self._unlinked.setdefault(seq, []).append(row.id)


class BisectStore(BisectObserver):
    """Records one bisect: its run (kind ``bisect``) once the range is resolved, and each
    step's compare as its own compare run (a :class:`RunStore`), linked both ways;
    ``compare_runs`` maps each step number to its compare run's id. Every hook commits at once.
    ``compare_extra`` is merged into each compare run's settings (a Slurm bisect's
    ``{"slurm": ...}``, so each is settled by its job's state).

    ``bot_job`` (a Slurm bisect run by the bot: its job's id) is written into each step's run
    (``settings["bot_job"]``), and a step whose compare an interrupted earlier attempt of the
    same job already submitted (:func:`_take_step_run`) takes that run over instead of recording
    a new one; ``resumed`` holds those step numbers, whose Slurm job the runner follows again
    rather than submitting one (bot._slurm_batch.bisect_runner)."""

    def __init__(self, db: Engine, request: BisectRequest, compare_extra: dict | None = None,
                 bot_job: int | None = None) -> None:
        self.db, self.request, self.bot_job = db, request, bot_job
        self.compare_extra = {**(compare_extra or {}), **({"bot_job": bot_job} if bot_job is not None else {})}
        self.run_id: int | None = None
        self.compare_runs: dict[int, int] = {}  # step number -> the id of that step's compare run
        self.resumed: set[int] = set()  # steps whose compare run an interrupted bisect recorded

    def started(self, good_sha: str, bad_sha: str, commits: list[str]) -> None:
        r = self.request
        keep_alive(self.db)
        with Session(self.db) as session:
            run = Run(
                kind="bisect", engine_name=r.engine_name, workload_name=r.workload_name, host=r.host.name,
                base_ref=r.good_ref, base_sha=good_sha, head_ref=r.bad_ref, head_sha=bad_sha, modes=[r.mode],
                settings={"compare": r.settings.model_dump(), "workload": r.workload.model_dump(),
                          "engine": redact(r.engine.model_dump()),
                          "owner": identity().as_owner(),
                          "bisect": {"mode": r.mode, "commits": commits, "steps": []}},
            )
            session.add(run)
            session.commit()
            self.run_id = run.id

    def compare_observer(self, step: BisectStep, request: CompareRequest) -> CompareObserver:
        link = {"run_id": self.run_id, "step": step.number, "kind": step.kind}
        if self.bot_job is not None and \
                (taken := _take_step_run(self.db, request, step.base_sha, step.head_sha, self.bot_job, link)) is not None:
            self.compare_runs[step.number] = taken
            self.resumed.add(step.number)
            return CompareObserver()  # its Slurm job records it
        return self.record_step(step, request)

    def record_step(self, step: BisectStep, request: CompareRequest) -> RunStore:
        """A new compare run for ``step`` (also for a resumed step whose taken run ended without
        a verdict: it is measured again); its recorder."""
        store = RunStore(self.db)
        self.compare_runs[step.number] = store.create(
            request, step.base_sha, step.head_sha,
            extra={**self.compare_extra, "bisect": {"run_id": self.run_id, "step": step.number, "kind": step.kind}})
        self.resumed.discard(step.number)
        return store

    def _update(self, changes: dict, **fields) -> None:
        with Session(self.db) as session:
            run = session.get(Run, self.run_id)
            bisect = dict(run.settings["bisect"])
            for key, value in changes.items():
                bisect[key] = value(bisect) if callable(value) else value
            run.settings = {**run.settings, "bisect": bisect}  # a new dict, so the JSON column is written
            for key, value in fields.items():
                setattr(run, key, value)
            session.add(run)
            session.commit()

    def step_finished(self, step: BisectStep) -> None:
        row = {**step.to_dict(), "compare_run_id": self.compare_runs.get(step.number)}
        # in step order: the compares of one round (core._experiments.bisection) may end in any order
        self._update({"steps": lambda b: sorted([*b["steps"], row], key=lambda step: step["number"])})

    def finished(self, result: BisectResult) -> None:
        if self.run_id is None:
            return
        summary = {k: v for k, v in result.to_dict().items() if k not in ("steps", "commits", "mode")}
        status = {"failed": "failed", "interrupted": "interrupted"}.get(result.status, "done")
        self._update({"outcome": result.status, **summary}, status=status, reason=result.message,
                     finished_at=utcnow())


def _as_stored(value: object) -> object:
    """``value`` as a JSON column gives it back (tuples as lists, and so on)."""
    return json.loads(json.dumps(value))


def _take_step_run(db: Engine, request: CompareRequest, base_sha: str, head_sha: str, bot_job: int,
                   link: dict) -> int | None:
    """The compare run that an interrupted earlier attempt of bot job ``bot_job`` recorded for
    the same step, taken over by the bisect of ``link`` (``{"run_id", "step", "kind"}``, written
    as the run's ``settings["bisect"]`` with ``resumed_from``: the bisect it came from); its id,
    or ``None`` when there is none.

    A run qualifies when it is a Slurm job's (its job id recorded) for the same bot job, still
    running or done, of the same engine, host, workload, modes, commits, compare settings and
    engine configuration, and the bisect that recorded it ended ``interrupted`` (its bot stopped
    or was killed mid-bisect). Another job's bisect, even of the same range, never gives its
    steps: a new bisect measures anew. The newest such run is taken; once taken, it belongs to
    the new bisect."""
    wanted = {"compare": _as_stored(request.settings.model_dump()), "workload": _as_stored(request.workload.model_dump()),
              "engine": _as_stored(redact(request.engine.model_dump()))}
    with Session(db) as session:
        candidates = session.exec(select(Run).where(
            Run.kind == "compare", Run.engine_name == request.engine_name, Run.host == request.host.name,
            Run.workload_name == request.workload_name, Run.base_sha == base_sha, Run.head_sha == head_sha,
            col(Run.status).in_(("running", "done"))).order_by(col(Run.id).desc()))
        for run in candidates:
            settings = run.settings or {}
            earlier = (settings.get("bisect") or {}).get("run_id")
            if settings.get("bot_job") != bot_job or not (settings.get("slurm") or {}).get("job_id") \
                    or earlier is None or run.modes != list(request.modes) \
                    or any(settings.get(key) != value for key, value in wanted.items()):
                continue
            parent = session.get(Run, earlier)
            if parent is None or parent.kind != "bisect" or parent.status != "interrupted":
                continue
            run.settings = {**settings, "bisect": {**link, "resumed_from": earlier}}
            session.add(run)
            session.commit()
            return run.id
    return None


@dataclasses.dataclass
class StoredRun:
    """A run as read back: the row, its arms by id, its trials in launch order, its verdicts."""

    run: Run
    arms: dict[int, Arm]
    trials: list[Trial]
    verdicts: list[VerdictRow]
    snapshots: list[EnvSnapshot]


def load_run(db: Engine, run_id: int) -> StoredRun | None:
    """The run ``run_id`` with everything recorded about it, or ``None``."""
    with Session(db) as session:
        run = session.get(Run, run_id)
        if run is None:
            return None
        arms = {a.id: a for a in session.exec(select(Arm).where(Arm.run_id == run_id))}
        trials = list(session.exec(select(Trial).where(Trial.run_id == run_id).order_by(Trial.seq)))
        verdicts = list(session.exec(select(VerdictRow).where(VerdictRow.run_id == run_id)))
        snapshots = list(session.exec(select(EnvSnapshot).where(EnvSnapshot.run_id == run_id).order_by(EnvSnapshot.id)))
        return StoredRun(run, arms, trials, verdicts, snapshots)


def list_runs(db: Engine, engine_name: str | None = None, limit: int | None = 20) -> list[tuple[Run, list[VerdictRow]]]:
    """The newest ``limit`` runs (``None``: all; optionally of one engine) with their verdicts, newest first."""
    with Session(db) as session:
        query = select(Run).order_by(Run.id.desc()).limit(limit)
        if engine_name:
            query = query.where(Run.engine_name == engine_name)
        runs = list(session.exec(query))
        return [(run, list(session.exec(select(VerdictRow).where(VerdictRow.run_id == run.id)))) for run in runs]




def earlier_runs(db: Engine, run: Run, limit: int = 20) -> list[StoredRun]:
    """The newest ``limit`` finished compare runs before ``run`` (smaller id) of its engine, host
    and workload, newest first, each loaded whole: what :func:`core._history.check.check_history` sets today's
    launches against."""
    with Session(db) as session:
        ids = list(session.exec(select(Run.id).where(
            Run.engine_name == run.engine_name, Run.host == run.host, Run.workload_name == run.workload_name,
            Run.kind == "compare", Run.status == "done", col(Run.id) < (run.id or 0))
            .order_by(col(Run.id).desc()).limit(limit)))
    return [stored for run_id in ids if (stored := load_run(db, run_id)) is not None]


def latest_calibration(db: Engine, engine_name: str, host: str, workload_name: str,
                       pairing: str | None = None) -> Run | None:
    """The newest finished calibration run (``specperf calibrate``: an A/A compare whose
    ``settings["calibration"]`` is set) of this engine, host and workload, and with ``pairing``
    its ``[compare] pairing`` (runs stored before pairing existed were sequential), or ``None``."""
    with Session(db) as session:
        query = (select(Run).where(Run.engine_name == engine_name, Run.host == host, Run.workload_name == workload_name,
                                   Run.status == "done", Run.base_sha == Run.head_sha).order_by(Run.id.desc()))
        return next((run for run in session.exec(query) if run.settings.get("calibration") and (
            pairing is None or run.settings.get("compare", {}).get("pairing", "sequential") == pairing)), None)


def abandoned_runs(db: Engine, owner_alive: Callable[[dict], bool]) -> list[tuple[Run, list[Trial]]]:
    """Runs still marked running whose specperf process is gone (``owner_alive`` of the run's
    recorded owner is false; the bot passes :func:`storage.owner_alive`), each with its trials
    still marked running:
    what a killed or crashed specperf left behind. A run without a recorded owner is left alone,
    and so is a Slurm job's run (``settings["slurm"]``): Slurm's state of the job settles it."""
    with Session(db) as session:
        found = []
        for run in session.exec(select(Run).where(Run.status == "running")):
            owner = (run.settings or {}).get("owner") or {}
            if (run.settings or {}).get("slurm"):
                continue
            if owner and not owner_alive(owner):
                trials = list(session.exec(select(Trial).where(Trial.run_id == run.id, Trial.status == "running")))
                found.append((run, trials))
        return found


def update_settings(db: Engine, run_id: int, key: str, values: dict) -> dict:
    """Merge ``values`` into run ``run_id``'s ``settings[key]`` (a dict); returns the merged dict."""
    with Session(db) as session:
        run = session.get(Run, run_id)
        merged = {**(run.settings.get(key) or {}), **values}
        run.settings = {**run.settings, key: merged}
        session.add(run)
        session.commit()
        return merged


def unsettled_slurm_runs(db: Engine) -> list[Run]:
    """Runs of Slurm jobs whose job's end is not yet recorded (``settings["slurm"]["ended"]``)
    and that did not finish with a verdict: those whose job Slurm may have ended."""
    with Session(db) as session:
        return [run for run in session.exec(select(Run).where(Run.status != "done", Run.kind == "compare"))
                if (run.settings or {}).get("slurm") and not run.settings["slurm"].get("ended")]


def mark_abandoned(db: Engine, run_id: int, reason: str, status: str = "interrupted",
                   log_tail: str | None = None) -> None:
    """Close an abandoned run as ``status`` (interrupted, or failed) and its running trials as
    interrupted, with ``reason``; ``log_tail``: the last lines of what it printed (a Slurm
    job's output), kept as the run's log tail (redacted)."""
    with Session(db) as session:
        run = session.get(Run, run_id)
        run.status, run.reason, run.finished_at = status, reason, utcnow()
        if log_tail:
            run.log_tail = redact(log_tail)
        for trial in session.exec(select(Trial).where(Trial.run_id == run_id, Trial.status == "running")):
            trial.status = "interrupted"
            session.add(trial)
        session.add(run)
        session.commit()
