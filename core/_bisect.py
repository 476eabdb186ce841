"""Bisect: find the commit of a throughput regression along a first-parent range, or say
there is none, with as few compares (and so GPU minutes) as a binary search allows.

Steps, each one compare (core._compare) of one mode with its three-way verdict:

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
tests/test_bisect.py), each INCONCLUSIVE retry one more. Triage (core._triage)
runs first when rules are given, to put each step's commit in context; its ranks never
choose what is measured, so the answer does not depend on them.
"""

from __future__ import annotations

import asyncio
import enum
import math
from dataclasses import dataclass, field

from core import _git
from core._compare import CompareObserver, CompareRequest, CompareResult, compare
from core._config import CompareConfig, EngineConfig, WorkloadConfig
from core._errors import SpecperfError
from core._hosts import Host
from core._stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, Verdict
from core._triage import TriageReport, triage
from core._triage_rules import TriageRules


@dataclass
class BisectRequest:
    """What to bisect: the first-parent range ``good_ref..bad_ref`` of ``engine.repo``, in one
    ``mode``, each step a compare with ``settings`` on ``host`` (the caller holds its lock).
    ``triage_rules``: rules for the triage lines in the report (``None``: no triage).
    ``force_clean``: as for a compare (core._hygiene)."""

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


@dataclass
class BisectStep:
    """One compare of the bisect.

    ``number``: 1-based count of compares. ``kind``: ``confirm`` (bad vs good), ``probe``
    (a commit vs good), ``pair`` (a commit vs its parent, locating and confirming at once),
    ``final`` (the culprit vs its parent); ``retry`` is appended when it repeats an
    INCONCLUSIVE step with more trials. ``position``: the head's 1-based place in the range.
    ``status``: the compare's (done or failed). ``verdict`` and the percentages (of base
    tok/s): the mode's, ``None`` when failed. ``trials``: engine launches it spent.
    ``outcome``: what the bisect concluded from it.
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
    good commit) is a REGRESSION. ``commits``: the range, oldest first.
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
                "steps": [s.to_dict() for s in self.steps]}


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

    def next(self) -> tuple[str, int, int] | None:
        """``(kind, base index, head index)`` of the next compare (``probe``: a commit against
        good, base -1; ``pair``: ``hi`` against its parent), or ``None`` when the search is over."""
        untested = [i for i in range(self.lo, self.hi) if i not in self.skipped]
        if self.confirmed or not untested:
            return None
        if self.pair_ok and untested == [self.hi - 1] and self.lo == self.hi - 1:
            return "pair", self.lo, self.hi
        # the commit that leaves the fewest untested commits on the worse side; then the one
        # nearest the middle; then the later one (with a skipped commit this keeps a skip's
        # extra cost to one compare: tests/test_bisect.py checks every position)
        middle = (self.lo + self.hi) // 2

        def worst_side(m: int) -> int:
            return max(sum(1 for i in untested if i < m), sum(1 for i in untested if i > m))

        return "probe", -1, min(untested, key=lambda m: (worst_side(m), abs(m - middle), -m))

    def candidates(self) -> list[int]:
        """Where the culprit is once the search is over: ``[hi]``, or the skipped commits
        between the last good one and ``hi`` followed by ``hi``."""
        return [self.hi] if self.confirmed else list(range(self.lo, self.hi + 1))

    def record(self, kind: str, base: int, head: int, verdict: str | None, base_failed: bool = False) -> str:
        """Take a compare's verdict (``None``: the compare failed; ``base_failed``: its base arm
        did) and return what it means, as a sentence for the step."""
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
    done = sum(len(trials) for by_role in result.trials.values() for trials in by_role.values())
    return done + (1 if result.status == "failed" else 0)


class _Bisect:
    def __init__(self, request: BisectRequest, obs: BisectObserver, result: BisectResult) -> None:
        self.request, self.obs, self.result = request, obs, result
        self.commits = result.commits

    def position(self, sha: str) -> int:
        return self.commits.index(sha) + 1 if sha in self.commits else 0

    async def _one(self, kind: str, base: str, head: str, settings: CompareConfig) -> BisectStep:
        r = self.request
        step = BisectStep(len(self.result.steps) + 1, kind, base, head, self.position(head))
        compare_request = CompareRequest(
            engine_name=r.engine_name, engine=r.engine, workload_name=r.workload_name, workload=r.workload,
            head_ref=head, base_ref=base, modes=[r.mode], settings=settings, host=r.host,
            force_clean=r.force_clean)
        self.obs.progress(f"step {step.number} ({kind}): {head[:12]} (#{step.position} of {len(self.commits)}) "
                          f"against {base[:12]}")
        self.result.steps.append(step)
        outcome = await compare(compare_request, self.obs.compare_observer(step, compare_request), shas=(base, head))
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

    async def run(self) -> None:
        res, good, commits = self.result, self.result.good_sha, self.commits
        n = len(commits)
        step = await self.measure("confirm", good, res.bad_sha)
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
        while (plan := search.next()) is not None:
            kind, base, head = plan
            step = await self.measure(kind, good if base < 0 else commits[base], commits[head])
            base_failed = step.status != "done" and step.result is not None and not step.result.trials[res.mode]["base"]
            self.finish(step, search.record(kind, base, head, step.verdict if step.status == "done" else None,
                                            base_failed))
            if search.confirmed:
                confirmed_by = step
        lo, hi = search.lo, search.hi
        res.candidates = [commits[i] for i in search.candidates()]
        res.culprit = commits[hi]
        if confirmed_by is None:
            ambiguous = len(res.candidates) > 1
            base = commits[lo - 1] if lo > 0 else good
            step = await self.measure("final", base, commits[hi])
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


async def bisect(request: BisectRequest, observer: BisectObserver | None = None) -> BisectResult:
    """Find the commit that made ``request.bad_ref`` slower than ``request.good_ref``; see the
    module docstring for the steps.

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
    result = BisectResult(BisectStatus.RUNNING, good, bad, request.mode, commits)
    if request.triage_rules is not None:
        try:
            result.triage = await triage(host, repo, good, bad, request.engine, request.triage_rules, [request.mode])
        except SpecperfError as exc:
            obs.progress(f"triage failed, continuing without it: {exc}")
    obs.started(good, bad, commits)
    try:
        await _Bisect(request, obs, result).run()
    except (asyncio.CancelledError, KeyboardInterrupt):
        result.status, result.message = BisectStatus.INTERRUPTED, "interrupted by the user"
        obs.finished(result)
        raise
    obs.finished(result)
    return result
