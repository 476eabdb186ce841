"""Bisect: find the commit of a throughput regression along a first-parent range, or say
there is none, with as few compares (and so GPU minutes) as a binary search allows.

Steps, each one compare (core._experiments.compare) of one mode with its three-way verdict:

1. Confirm: bad against good. Anything but REGRESSION ends the bisect: there is nothing
   to bisect, and the compare is the evidence.
2. Search the commits ``c[0..N-1]`` after good (``c[N-1]`` is bad), keeping ``lo`` (every
   commit before it is not regressed against good) and ``hi`` (regressed against good).
   Probe the untested commit that best halves the untested commits of ``[lo, hi)`` against good:
   REGRESSION moves ``hi`` to it; NO CHANGE moves ``lo`` past it; IMPROVEMENT too (it is not
   regressed; the step says so). INCONCLUSIVE after the compare's own added rounds
   (``max_trials``) is compared once more with twice the trials; still INCONCLUSIVE, or a
   commit that fails to build or start (compare status failed), is skipped as
   ``git bisect skip`` does and another untested commit is tried instead.
   When only ``hi``'s parent is left (``lo == hi - 1``), ``hi`` is compared against that
   parent instead: REGRESSION there both locates and confirms ``hi``; NO CHANGE means the
   parent already carries the regression, so it is the culprit.
3. Confirm the culprit against its own parent (unless step 2 just did). When untestable
   commits sit between the last good commit and the first bad one, the culprit is one of
   them or the bad one: the result lists them and the confirmation uses the last good one.

Without skips or retries this is at most ``ceil(log2 N) + 2`` compares; one skipped commit
costs at most one more (checked for every position in ranges of up to 33 commits by
tests/test_bisect.py), each INCONCLUSIVE retry one more.

With ``parallel = k`` (a Slurm host: k nodes) step 2 is a k-ary search: each round probes up
to k untested commits against good side by side, each compare on a node of its own, cutting
the untested commits into k + 1 even runs, so about ``ceil(log_(k+1) N)`` rounds instead of
``ceil(log2 N)`` (more compares, fewer rounds: :meth:`BisectResult.spend` says how many
node-hours that cost against a sequential bisect). The verdict rules, retries, skips, the
pair compare and the final confirmation are the same; ``k = 1`` is the sequential bisect.
Triage (core._triage.rank)
runs first when rules are given, to put each step's commit in context; its ranks never
choose what is measured, so the answer does not depend on them.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from core import _git
from core._config import CompareConfig, EngineConfig, WorkloadConfig
from core._config.triage_rules import TriageRules
from core._errors import SpecperfError
from core._experiments.compare import CompareObserver, CompareRequest, CompareResult, compare
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, Verdict
from core._hosts import Host
from core._triage.rank import TriageReport, triage


@dataclass
class BisectRequest:
    """What to bisect: the first-parent range ``good_ref..bad_ref`` of ``engine.repo``, in one
    ``mode``, each step a compare with ``settings`` on ``host`` (the caller holds its lock).
    ``triage_rules``: rules for the triage lines in the report (``None``: no triage).
    ``force_clean``: as for a compare (core._env.hygiene). ``parallel``: compares run side by side
    in each round of the search (k of a k-ary search; 1: the sequential bisect), each on a
    host of its own, which the :data:`CompareRunner` given to :func:`bisect` provides."""

    engine_name: str
    engine: EngineConfig
    workload_name: str
    workload: WorkloadConfig
    good_ref: str
    bad_ref: str
    mode: str
    settings: CompareConfig
    host: Host
    triage_rules: TriageRules | None = None
    force_clean: bool = False
    parallel: int = 1


@dataclass
class BisectStep:
    """One compare of the bisect.

    ``number``: 1-based count of compares. ``kind``: ``confirm`` (bad vs good), ``probe``
    (a commit vs good), ``pair`` (a commit vs its parent, locating and confirming at once),
    ``final`` (the culprit vs its parent); ``retry`` is appended when it repeats an
    INCONCLUSIVE step with more trials. ``position``: the head's 1-based place in the range.
    ``status``: the compare's (done or failed). ``verdict`` and the percentages (of base
    tok/s): the mode's, ``None`` when failed. ``trials``: engine launches it spent.
    ``outcome``: what the bisect concluded from it. ``round``: the 1-based round it ran in
    (the compares of one round run side by side). ``elapsed_s``: seconds from its start to its
    end as the bisect saw them (on Slurm including the time its job waited). ``node_s``:
    seconds it held its node or host: the Slurm job's run time where the runner knows it,
    else ``elapsed_s`` (a compare holds its host's lock throughout). ``where``: where it ran
    (``Slurm job 12 on node2``), when the runner says.
    """

    number: int
    kind: str
    base_sha: str
    head_sha: str
    position: int
    status: str = "running"
    verdict: str | None = None
    change_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None
    trials: int = 0
    reason: str | None = None
    outcome: str = ""
    round: int = 0
    elapsed_s: float | None = None
    node_s: float | None = None
    where: str | None = None
    result: CompareResult | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """JSON-ready form (without the compare's trials), with ``evidence`` as text."""
        return {**{k: v for k, v in vars(self).items() if k != "result"}, "evidence": self.evidence()}

    def evidence(self) -> str:
        """``"REGRESSION -9.1% [-10.2, -8.0] p=0.029, 8 launches"`` or the failure."""
        if self.status != "done":
            return f"FAILED: {self.reason}"
        text = str(self.verdict)
        if self.change_pct is not None:
            text += f" {self.change_pct:+.1f}%"
        if self.ci_low_pct is not None and self.ci_high_pct is not None:
            text += f" [{self.ci_low_pct:+.1f}, {self.ci_high_pct:+.1f}]"
        if self.p_value is not None:
            text += f" p={self.p_value:.3f}"
        return f"{text}, {self.trials} launches"


class BisectStatus(enum.StrEnum):
    """How a bisect ended (see :class:`BisectResult`); equal to (and stored as) its text."""

    RUNNING = "running"
    FOUND = "found"
    AMBIGUOUS = "ambiguous"
    NO_REGRESSION = "no-regression"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass
class BisectResult:
    """The outcome.

    ``status``: ``found`` (``culprit`` set), ``ambiguous`` (the culprit is one of
    ``candidates``: untestable commits and the first bad one), ``no-regression`` (the
    confirm compare was not a REGRESSION), ``failed`` (good or bad could not be measured),
    ``interrupted``. ``confirmed``: the culprit's compare against its parent (or the last
    good commit) is a REGRESSION. ``commits``: the range, oldest first. ``parallel``: the
    compares run side by side per round (:attr:`BisectRequest.parallel`).
    """

    status: BisectStatus
    good_sha: str
    bad_sha: str
    mode: str
    commits: list[str]
    steps: list[BisectStep] = field(default_factory=list)
    culprit: str | None = None
    candidates: list[str] = field(default_factory=list)
    confirmed: bool = False
    culprit_verdict: Verdict | None = None
    triage: TriageReport | None = None
    message: str = ""
    parallel: int = 1
    round_elapsed_s: list[float] = field(default_factory=list)

    @property
    def compares(self) -> int:
        """Compares run (each step is one)."""
        return len(self.steps)

    @property
    def trials(self) -> int:
        """Engine launches spent over all compares."""
        return sum(s.trials for s in self.steps)

    @property
    def max_compares(self) -> int:
        """``ceil(log2 N) + 2``: the compares a bisect of N commits needs without skips or retries."""
        return math.ceil(math.log2(len(self.commits))) + 2 if self.commits else 0

    @property
    def rounds(self) -> int:
        """Rounds run (the confirm, each round of the search, the final compare)."""
        return max((s.round for s in self.steps), default=0)

    def spend(self) -> dict:
        """What the bisect used against a sequential bisect of the same range, as a dict:
        ``parallel``, ``compares``, ``rounds``, ``rounds_sequential`` (:attr:`max_compares`:
        a clean sequential bisect runs one compare a round), ``node_hours`` (the sum of the
        steps' ``node_s``), ``node_hours_per_compare`` (their mean), ``node_hours_sequential``
        (the estimate for a sequential bisect: ``rounds_sequential * node_hours_per_compare``;
        it assumes a clean bisect, no skips or retries, with compares as long as this one's),
        ``hours_elapsed`` (the rounds' wall-clock time, summed)
        and ``line``, all of it as one sentence. Node-hours are ``None`` before any compare ended.
        """
        node_s = [s.node_s for s in self.steps if s.node_s is not None]
        per_compare_h = sum(node_s) / len(node_s) / 3600 if node_s else None
        node_h = sum(node_s) / 3600 if node_s else None
        sequential_h = self.max_compares * per_compare_h if per_compare_h is not None else None
        hours = sum(self.round_elapsed_s) / 3600
        line = (f"{self.compares} compares in {self.rounds} rounds, up to {self.parallel} side by side; a "
                f"sequential bisect of {len(self.commits)} commits needs about {self.max_compares} rounds of one")
        if node_h is not None and sequential_h is not None:
            line += (f"; used {node_h:.3f} node-hours against about {sequential_h:.3f} for the sequential bisect "
                     f"({self.max_compares} compares x {per_compare_h:.3f} node-hours, this bisect's mean per "
                     f"compare), {hours:.3f} h in rounds")
        return {"parallel": self.parallel, "compares": self.compares, "rounds": self.rounds,
                "rounds_sequential": self.max_compares, "node_hours": node_h, "node_hours_per_compare": per_compare_h,
                "node_hours_sequential": sequential_h, "hours_elapsed": hours, "line": line}

    def triage_line(self, sha: str | None = None) -> str | None:
        """The triage line of ``sha`` (default: the culprit), if triage ran."""
        sha = sha or self.culprit
        if self.triage is None or sha is None:
            return None
        try:
            return self.triage.entry(sha).line()
        except KeyError:
            return None

    def to_dict(self) -> dict:
        """JSON-ready summary: outcome, culprit, the steps and the spend."""
        return {"status": self.status, "good": self.good_sha, "bad": self.bad_sha, "mode": self.mode,
                "commits": self.commits, "culprit": self.culprit, "candidates": self.candidates,
                "confirmed": self.confirmed, "message": self.message, "compares": self.compares,
                "max_compares": self.max_compares, "trials": self.trials, "triage_line": self.triage_line(),
                "spend": self.spend(),
                "steps": [s.to_dict() for s in self.steps]}


CompareRunner = Callable[[BisectStep, CompareRequest, CompareObserver | None], Awaitable[CompareResult]]
"""How a bisect runs one step's compare: ``(step, request, observer) -> result`` for the SHAs
``(step.base_sha, step.head_sha)``; it may fill ``step.node_s`` and ``step.where``."""


class BisectObserver:
    """Hooks a front end or store implements; every method is optional (no-op here).

    ``compare_observer`` is asked for an observer before each compare (a store creates that
    compare's own run there); ``step_finished`` gets each step with its verdict and outcome.
    """

    def started(self, good_sha: str, bad_sha: str, commits: list[str]) -> None: ...
    def progress(self, message: str) -> None: ...

    def compare_observer(self, step: BisectStep, request: CompareRequest) -> CompareObserver | None:
        return None

    def step_finished(self, step: BisectStep) -> None: ...
    def finished(self, result: BisectResult) -> None: ...


class Search:
    """The binary search over the ``n`` commits after good (indices 0..n-1; -1 is good itself),
    with no I/O: :meth:`next` says which compare to run, :meth:`record` takes its verdict.

    Invariant: every commit before ``lo`` is not regressed against good, ``hi`` is. The
    search ends when no untested commit is left in ``[lo, hi)``; then the culprit is ``hi``,
    or one of ``lo..hi`` when commits in between were skipped, and ``confirmed`` says whether
    a ``pair`` compare already confirmed it against its parent.
    """

    def __init__(self, n: int) -> None:
        self.lo, self.hi = 0, n - 1
        self.skipped: set[int] = set()
        self.pair_ok = True
        self.confirmed = False

    def round(self, k: int = 1) -> list[tuple[str, int, int]]:
        """The compares of the next round, run side by side: up to ``k`` of ``(kind, base index,
        head index)`` (``probe``: a commit against good, base -1; ``pair``: ``hi`` against its
        parent, alone in its round); ``[]`` when the search is over. ``k = 1`` is the
        sequential bisect.

        The ``k`` probes cut the untested commits of ``[lo, hi)`` into ``k + 1`` runs as even as
        can be (the largest run left after the round is as small as it can be: about
        ``u / (k + 1)`` of ``u`` untested commits, so ``ceil(log_(k+1) N)`` rounds find a
        culprit without skips); among equally even cuts, the one whose probes sit nearest the
        evenly spaced places ``lo + j * (hi - lo) // (k + 1)``, then the later one. For
        ``k = 1`` this is the commit that leaves the fewest untested commits on the worse side,
        then the one nearest the middle, then the later one (with a skipped commit this keeps a
        skip's extra cost to one compare: tests/test_bisect.py checks every position).

        Raises:
            ValueError: ``k`` < 1.
        """
        if k < 1:
            raise ValueError(f"a bisect round needs at least one compare, not {k}")
        untested = [i for i in range(self.lo, self.hi) if i not in self.skipped]
        if self.confirmed or not untested:
            return []
        if self.pair_ok and untested == [self.hi - 1] and self.lo == self.hi - 1:
            return [("pair", self.lo, self.hi)]
        k = min(k, len(untested))
        short, extra = divmod(len(untested) - k, k + 1)  # k + 1 runs of short or short + 1 commits
        ideal = [self.lo + j * (self.hi - self.lo) // (k + 1) for j in range(1, k + 1)]
        best: tuple[tuple[int, int], list[int]] | None = None
        for longer in itertools.combinations(range(k + 1), extra):
            probes, at = [], -1
            for run in range(k):
                at += short + (run in longer) + 1
                probes.append(untested[at])
            key = (sum(abs(p - i) for p, i in zip(probes, ideal)), -sum(probes))
            if best is None or key < best[0]:
                best = (key, probes)
        assert best is not None
        return [("probe", -1, head) for head in best[1]]

    def candidates(self) -> list[int]:
        """Where the culprit is once the search is over: ``[hi]``, or the skipped commits
        between the last good one and ``hi`` followed by ``hi``."""
        return [self.hi] if self.confirmed else list(range(self.lo, self.hi + 1))

    def record(self, kind: str, base: int, head: int, verdict: str | None, base_failed: bool = False) -> str:
        """Take a compare's verdict (``None``: the compare failed; ``base_failed``: its base arm
        did) and return what it means, as a sentence for the step. The compares of one round
        are recorded in the order of their commits: a probe after one that regressed in the
        same round no longer moves the search."""
        if kind == "pair":
            if verdict is None and base_failed:
                self.skipped.add(base)
                return f"#{base + 1} fails to build or start: skipped"
            if verdict == REGRESSION:
                self.confirmed = True
                return f"#{head + 1} regressed against its parent: culprit found and confirmed"
            if verdict in (NO_CHANGE, IMPROVEMENT):
                self.hi = base
                return f"#{head + 1} is no worse than its parent #{base + 1}, so #{base + 1} already regressed"
            self.pair_ok = False
            return f"no verdict against its parent: probing #{base + 1} against good instead"
        if head >= self.hi:  # a round's probes are recorded in order: an earlier one regressed
            return f"not used: #{self.hi + 1}, before it in this round, regressed"
        if verdict is None:
            self.skipped.add(head)
            return f"#{head + 1} fails to build or start: skipped"
        if verdict == REGRESSION:
            self.hi = head
            return f"regressed: the culprit is #{head + 1} or before it"
        if verdict in (NO_CHANGE, IMPROVEMENT):
            self.lo = head + 1
            extra = " (an IMPROVEMENT against good: treated as not regressed)" if verdict == IMPROVEMENT else ""
            return f"not regressed{extra}: the culprit is after #{head + 1}"
        self.skipped.add(head)
        return f"#{head + 1} stays INCONCLUSIVE with more trials: skipped"


def _launches(result: CompareResult) -> int:
    done = sum(len(seqs) for by_role in result.seqs.values() for seqs in by_role.values())
    return done + (1 if result.status == "failed" else 0)


async def _compare_here(step: BisectStep, request: CompareRequest, observer: CompareObserver | None) -> CompareResult:
    """The default :data:`CompareRunner`: the compare in this process, on ``request.host``."""
    return await compare(request, observer, shas=(step.base_sha, step.head_sha))


class _Bisect:
    def __init__(self, request: BisectRequest, obs: BisectObserver, result: BisectResult,
                 run_compare: CompareRunner) -> None:
        self.request, self.obs, self.result, self.run_compare = request, obs, result, run_compare
        self.commits = result.commits
        self.round = 0

    def position(self, sha: str) -> int:
        return self.commits.index(sha) + 1 if sha in self.commits else 0

    async def _one(self, kind: str, base: str, head: str, settings: CompareConfig) -> BisectStep:
        r = self.request
        step = BisectStep(len(self.result.steps) + 1, kind, base, head, self.position(head), round=self.round)
        compare_request = CompareRequest(  # a step finds the commit: no profile round (compare it to profile)
            engine_name=r.engine_name, engine=r.engine, workload_name=r.workload_name, workload=r.workload,
            head_ref=head, base_ref=base, modes=[r.mode], settings=settings.model_copy(update={"profile": "never"}),
            host=r.host, force_clean=r.force_clean)
        self.obs.progress(f"step {step.number} ({kind}): {head[:12]} (#{step.position} of {len(self.commits)}) "
                          f"against {base[:12]}")
        self.result.steps.append(step)
        started = time.monotonic()
        outcome = await self.run_compare(step, compare_request, self.obs.compare_observer(step, compare_request))
        step.elapsed_s = time.monotonic() - started
        if step.node_s is None:  # the compare held its host (under the host lock) for all of it
            step.node_s = step.elapsed_s
        step.result, step.status, step.trials = outcome, outcome.status, _launches(outcome)
        verdict = outcome.verdicts.get(r.mode)
        if outcome.status == "done" and verdict is not None:
            step.verdict, step.change_pct, step.p_value = verdict.verdict, verdict.change_pct, verdict.p_value
            step.ci_low_pct, step.ci_high_pct = verdict.ci_low_pct, verdict.ci_high_pct
        else:
            step.status, step.reason = "failed", outcome.reason or "no verdict"
        return step

    async def measure(self, kind: str, base: str, head: str) -> BisectStep:
        """One step; an INCONCLUSIVE verdict is measured once more with twice the trials."""
        settings = self.request.settings
        step = await self._one(kind, base, head, settings)
        if step.status == "done" and step.verdict == INCONCLUSIVE:
            self.finish(step, "inconclusive after its added rounds: measuring again with more trials")
            more = settings.model_copy(update={"min_trials": settings.max_trials, "max_trials": 2 * settings.max_trials})
            step = await self._one(f"{kind} retry", base, head, more)
        return step

    def finish(self, step: BisectStep, outcome: str) -> None:
        step.outcome = outcome
        self.obs.step_finished(step)

    async def measure_round(self, plans: list[tuple[str, str, str]]) -> list[BisectStep]:
        """The compares ``(kind, base, head)`` of one round, side by side; their steps in order."""
        self.round += 1
        started = time.monotonic()
        steps = await asyncio.gather(*(self.measure(*plan) for plan in plans))
        self.result.round_elapsed_s.append(time.monotonic() - started)
        return list(steps)

    async def run(self) -> None:
        res, good, commits = self.result, self.result.good_sha, self.commits
        n = len(commits)
        [step] = await self.measure_round([("confirm", good, res.bad_sha)])
        if step.status != "done":
            self.finish(step, "good against bad could not be measured")
            res.status = BisectStatus.FAILED
            res.message = f"cannot confirm the regression: the compare of bad against good failed: {step.reason}"
            return
        if step.verdict != REGRESSION:
            self.finish(step, "not a regression: nothing to bisect")
            res.status = BisectStatus.NO_REGRESSION
            shown = "no regression could be shown" if step.verdict == INCONCLUSIVE else "no regression"
            res.message = (f"nothing to bisect ({shown}): {res.bad_sha[:12]} against {good[:12]} in {res.mode} is "
                           f"{step.evidence()}")
            return
        self.finish(step, f"regression confirmed; bisecting {n} commits")
        search = Search(n)
        confirmed_by: BisectStep | None = None
        while plans := search.round(self.request.parallel):
            steps = await self.measure_round([(kind, good if base < 0 else commits[base], commits[head])
                                              for kind, base, head in plans])
            for (kind, base, head), step in sorted(zip(plans, steps), key=lambda done: done[0][2]):
                base_failed = (step.status != "done" and step.result is not None
                               and not step.result.seqs.get(res.mode, {}).get("base"))
                self.finish(step, search.record(kind, base, head, step.verdict if step.status == "done" else None,
                                                base_failed))
                if search.confirmed:
                    confirmed_by = step
        lo, hi = search.lo, search.hi
        res.candidates = [commits[i] for i in search.candidates()]
        res.culprit = commits[hi]
        if confirmed_by is None:
            ambiguous = len(res.candidates) > 1
            last_good = commits[lo - 1] if lo > 0 else good
            [step] = await self.measure_round([("final", last_good, commits[hi])])
            what = "the last good commit" if ambiguous else "its parent"
            if step.status == "done" and step.verdict == REGRESSION:
                self.finish(step, f"#{hi + 1} regressed against {what}: confirmed")
                confirmed_by = step
            else:
                self.finish(step, f"#{hi + 1} against {what} is not a clear REGRESSION: not confirmed")
        res.confirmed = confirmed_by is not None
        if res.confirmed:
            res.culprit_verdict = confirmed_by.result.verdicts.get(res.mode)
        else:
            last = res.steps[-1]
            res.culprit_verdict = last.result.verdicts.get(res.mode) if last.result else None
        final = res.steps[-1]
        if len(res.candidates) > 1:
            res.status = BisectStatus.AMBIGUOUS
            res.message = (f"the culprit is one of {', '.join(c[:12] for c in res.candidates)}: the first "
                           f"{len(res.candidates) - 1} could not be decided (no build, no start, or INCONCLUSIVE); "
                           f"the last against the last good commit: {final.evidence()}")
        else:
            res.status = BisectStatus.FOUND
            res.candidates = []
            res.message = (f"culprit {res.culprit[:12]} (#{hi + 1} of {n}): {final.evidence()} against its parent"
                           + ("" if res.confirmed else " (not confirmed: the change may be spread over commits)"))


async def bisect(request: BisectRequest, observer: BisectObserver | None = None,
                 run_compare: CompareRunner | None = None) -> BisectResult:
    """Find the commit that made ``request.bad_ref`` slower than ``request.good_ref``; see the
    module docstring for the steps. ``run_compare`` runs each step's compare (default: in this
    process on ``request.host``; a Slurm front end submits each as a job of its own, so the
    ``request.parallel`` compares of a round run on separate nodes).

    Returns:
        A :class:`BisectResult`; every compare is in ``steps`` with its verdict, launches and
        what it decided. On cancellation (Ctrl-C) the observer's ``finished`` gets status
        ``interrupted`` and the cancellation propagates.

    Raises:
        GitError: a bad ref, good not an ancestor of bad on its first-parent line, or an
            empty range (all before anything is launched).
    """
    obs = observer or BisectObserver()
    repo = request.engine.repo
    if not repo:
        raise _git.GitError(f"engine {request.engine_name!r} has no repo; set engines.{request.engine_name}.repo")
    host = request.host
    good = await _git.resolve_commit(host, repo, request.good_ref)
    bad = await _git.resolve_commit(host, repo, request.bad_ref)
    commits = await _git.first_parent_range(host, repo, good, bad)
    if request.parallel < 1:
        raise ValueError(f"BisectRequest.parallel must be at least 1, not {request.parallel}")
    result = BisectResult(BisectStatus.RUNNING, good, bad, request.mode, commits, parallel=request.parallel)
    if request.triage_rules is not None:
        try:
            result.triage = await triage(host, repo, good, bad, request.engine, request.triage_rules, [request.mode])
        except SpecperfError as exc:
            obs.progress(f"triage failed, continuing without it: {exc}")
    obs.started(good, bad, commits)
    try:
        await _Bisect(request, obs, result, run_compare or _compare_here).run()
    except (asyncio.CancelledError, KeyboardInterrupt):
        result.status, result.message = BisectStatus.INTERRUPTED, "interrupted by the user"
        obs.finished(result)
        raise
    obs.finished(result)
    return result
