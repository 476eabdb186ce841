"""Statistics of one compare: from per-trial output tok/s of two arms to a three-way verdict.

Method (per mode):

* Launches alternate ABBA (A = base, B = commit), so consecutive launches form pairs
  (A,B), (B,A), (A,B), ...; each pair gives one log-ratio ``r = ln(tok/s_B / tok/s_A)``.
  Alternating the order inside pairs cancels a linear drift of the machine (warming, clock
  decay) on average, and pairing removes slow drift between pairs.
* Rounds of one-at-a-time launches alternate which arm opens them: ABBA, then BAAB, and so on
  (core._experiments.compare). A host can favour a place in the round (the launches in the middle
  of a round read faster than those at its edges, whichever arm they are: 2026-12-06 on this
  project's 2-vCPU VM, issue 44); with every round opened by the base, that favour went to the
  commit and an identical-code compare read IMPROVEMENT. Each pair of such a compare has the
  commit either in the middle of its round or at its edges (``ArmTrial.round_edge``); the change
  is then the mean of the two groups' mean log-ratios, ``(mean r_middle + mean r_edge) / 2``,
  which no favour of a place can move, and the favour itself, ``(mean r_middle - mean r_edge) / 2``,
  is estimated beside it and named when it is significant (:class:`Position`). Pairs that all
  have the commit in the same place (a remeasured round left one group empty) give no change
  verdict: the commit and the place cannot be told apart. Two engines measured in turns
  (concurrent pairing) have no such place: their pairs take the plain mean.
* Estimate: ``exp(mean r) - 1``. Interval: the 95% Student t interval of that mean, and p the
  two-sided t-test of it against 0, from one standard error and one count of degrees of freedom
  (``n - 1``, or ``n - 2`` with the two groups above), so the interval excludes 0 exactly when
  p < 0.05 (issue 42: the BCa bootstrap used before covered the true change 80% of the time at 4
  pairs and 87% at 8; the t interval covers 95% with normal pair changes, bench/COVERAGE_RESULTS.md).
  It uses the pairing: a machine whose speed moves both arms of a pair alike (the same round, or
  two engines measured in turns) leaves the log-ratios tight, which an unpaired test of the two
  arms' values would not see (a Mann-Whitney U over them, used before 2026-12-03, could not
  call a -15% change with launches spread +-10% around a drifting level). One wild pair
  cannot carry the verdict: it widens the sd as much as it moves the mean (with 4 pairs
  such a pair alone gives t of about 1). A change verdict needs at least
  ``CHANGE_MIN_PAIRS`` (4) pairs, whatever ``min_pairs`` is: the sd of two or three
  log-ratios is no estimate of the launch-to-launch spread (two pairs that agree by chance give
  t = 20 and p = 0.03).
* Verdict with margin ``m`` (2% by default): REGRESSION or IMPROVEMENT when the whole
  interval lies beyond ``-m`` or ``+m`` and p < alpha; NO CHANGE when the whole interval lies
  inside ``+-m``; otherwise INCONCLUSIVE, with the number of further launches per arm that
  would shrink the interval enough, assuming the spread seen so far (n' = n * (h / h')^2 for
  half-width h and the half-width h' that would settle it).
* Under speculative decoding, output tok/s per sequence = acceptance length / step time, so
  the same pairs give the change of acceptance length and of step time (ms per verify step
  = TPOT x acceptance length), and the verdict names the one that moved more.

Fewer than ``min_pairs`` pairs give INCONCLUSIVE.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from core._measure.client import tok_s_by_window


class VerdictKind(enum.StrEnum):
    """A mode's verdict; equal to (and stored, printed and serialised as) its text."""

    REGRESSION = "REGRESSION"
    IMPROVEMENT = "IMPROVEMENT"
    NO_CHANGE = "NO CHANGE"
    INCONCLUSIVE = "INCONCLUSIVE"


REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE = (VerdictKind.REGRESSION, VerdictKind.IMPROVEMENT,
                                                    VerdictKind.NO_CHANGE, VerdictKind.INCONCLUSIVE)
CHANGE_MIN_PAIRS = 4  # the fewest pairs that can give REGRESSION or IMPROVEMENT (module docstring)


@dataclass(frozen=True)
class ArmTrial:
    """The figures of one successful trial that the statistics use.

    ``output_tok_s``: client output tok/s. ``acceptance_length``: engine figure, ``None``
    without speculation. ``tpot_ms``: mean TPOT of the trial's requests.
    ``acceptance_missing``: why the engine could not give acceptance length under
    speculation (the counter it lacks), else ``None``. ``round_edge``: with one engine at a
    time, whether this launch opened or closed its round of four (``False``: one of the two in
    the middle); ``None`` for two engines measured in turns (module docstring). ``requests``:
    the measured requests in prompt order, each ``{"category", "text", "output_tokens",
    "e2e_ms", "spec_verify_ct", "spec_steps", "spec_accepted_per_position"}``
    as stored (core/_experiments/outputs.py reads them; ``text``
    is absent from runs stored before outputs were kept). ``acceptance_per_position``: the
    share of drafts whose k-th token was accepted, k = 1.. (``None``: the engine has no such
    counter, or no speculation).
    """

    output_tok_s: float
    acceptance_length: float | None = None
    tpot_ms: float | None = None
    acceptance_missing: str | None = None
    round_edge: bool | None = None
    requests: tuple[dict, ...] = ()
    acceptance_per_position: tuple[float, ...] | None = None

    @property
    def window_tok_s(self) -> list[float]:
        """Output tok/s of each measured window of the launch (``WorkloadConfig.windows``), from
        its requests' ``window``, ``sent_ms`` and ``e2e_ms`` (core._measure.client.tok_s_by_window);
        ``[]`` for requests stored without them (before windows were kept)."""
        docs = self.requests
        if not docs or any(d.get("sent_ms") is None or d.get("e2e_ms") is None for d in docs):
            return []
        return tok_s_by_window([(d.get("window") or 0, d["sent_ms"] / 1000.0, (d["sent_ms"] + d["e2e_ms"]) / 1000.0,
                                 d.get("output_tokens") or 0) for d in docs])

    @property
    def step_ms(self) -> float | None:
        """Milliseconds per decode (verify) step of one sequence: TPOT x acceptance length."""
        if self.tpot_ms is None:
            return None
        return self.tpot_ms * (self.acceptance_length or 1.0)


@dataclass(frozen=True)
class Verdict:
    """One mode's verdict and the evidence for it. Percentages are of the base arm.

    ``outputs``: the outputs check of the arms (core._experiments.outputs.compare_answers;
    ``None``: texts not kept). ``categories``: the verdict per category of the prompt set
    (core._experiments.categories.category_verdicts; ``None``: fewer than two categories).
    """

    verdict: str
    n_pairs: int
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    margin_pct: float
    alpha: float
    more_trials: int | None
    acceptance_change_pct: float | None
    step_ms_change_pct: float | None
    attribution: str | None
    reason: str
    position: Position | None = None
    outputs: dict | None = None
    categories: dict | None = None


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the values that are there (``None`` left out); ``None`` when none are."""
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


MOVED_POSITION = 0.05  # a draft position whose acceptance moved by less is not named


def median_per_position(arm: list[ArmTrial]) -> list[float] | None:
    """Per draft position, the median over ``arm``'s launches of its acceptance share
    (:attr:`ArmTrial.acceptance_per_position`); ``None`` when no launch has them."""
    rows = [t.acceptance_per_position for t in arm if t.acceptance_per_position]
    if not rows:
        return None
    return [float(np.median([row[k] for row in rows if len(row) > k])) for k in range(max(len(r) for r in rows))]


def moved_position(base: list[float], head: list[float]) -> tuple[int, float, float] | None:
    """The draft position (1-based) whose acceptance share moved most from ``base`` to ``head``
    (the first of equal moves) with its two shares; ``None`` when none moved by
    :data:`MOVED_POSITION` or more."""
    moves = [(abs(h - b), k, b, h) for k, (b, h) in enumerate(zip(base, head, strict=False), 1)]
    if not moves:
        return None
    size, k, b, h = max(moves, key=lambda m: (m[0], -m[1]))
    return (k, b, h) if size >= MOVED_POSITION else None


def pair_log_ratios(base: list[float], head: list[float]) -> np.ndarray:
    """``ln(head_i / base_i)`` for each pair; both lists in pair order, equal length.

    Raises:
        ValueError: lengths differ or a value is not positive.
    """
    if len(base) != len(head):
        raise ValueError(f"unpaired arms: {len(base)} base and {len(head)} commit values")
    a, b = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("throughput values must be positive")
    return np.log(b / a)


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


@dataclass(frozen=True)
class Position:
    """How much a place in the round favoured whichever arm held it, over one mode's pairs
    (module docstring): ``favour_pct``, the launches in the middle of a round against those at
    its edges (positive: the middle read faster), with its 95% interval and two-sided p, over
    ``n_middle`` pairs with the commit in the middle and ``n_edge`` with it at the edges."""

    favour_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    n_middle: int
    n_edge: int

    def significant(self, alpha: float) -> bool:
        """Whether the favour is told from none at level ``alpha``."""
        return self.p_value < alpha

    def line(self) -> str:
        """The favour in words, for the verdict's reason."""
        return (f"launches in the middle of a round read {self.favour_pct:+.1f}% ({self.ci_low_pct:+.1f} .. "
                f"{self.ci_high_pct:+.1f}) against those at its edges, whichever arm they were (p = {self.p_value:.3g}): "
                "the host favours a place in the round, and the change above is corrected for it")


@dataclass(frozen=True)
class _Estimate:
    """A mean (log scale) with its standard error, degrees of freedom and the 95% interval and
    two-sided p of the t distribution they give."""

    mean: float
    se: float
    df: float

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        half = float(stats.t.isf((1 - confidence) / 2, self.df)) * self.se if self.se > 0 else 0.0
        return self.mean - half, self.mean + half

    def p(self) -> float:
        """Identical values (se 0) give 0 for a non-zero mean and 1 for none."""
        if self.se == 0:
            return 0.0 if self.mean != 0 else 1.0
        return float(2 * stats.t.sf(abs(self.mean) / self.se, self.df))


def _mean_estimate(r: np.ndarray) -> _Estimate:
    """The plain mean of ``r`` (at least 2 values): se ``sd / sqrt(n)``, ``n - 1`` df."""
    return _Estimate(float(r.mean()), float(r.std(ddof=1) / math.sqrt(r.size)), r.size - 1)


def t_interval(r: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The Student t interval of ``mean(r)`` (at least 2 values); identical values give a point."""
    return _mean_estimate(np.asarray(r, dtype=float)).interval(confidence)


def _position_estimates(r: np.ndarray, middle: np.ndarray) -> tuple[_Estimate, _Estimate]:
    """(change, favour of the middle) from log-ratios ``r`` whose pairs had the commit in the
    middle of their round (``middle``) or at its edges: the model ``r = change + favour`` in the
    middle and ``change - favour`` at the edges, fitted by least squares (the two group means),
    with the residual variance pooled over both groups (``n - 2`` df)."""
    a, b = r[middle], r[~middle]
    residuals = np.concatenate([a - a.mean(), b - b.mean()])
    df = r.size - 2
    sd = math.sqrt(float((residuals ** 2).sum()) / df)
    se = sd / 2 * math.sqrt(1 / a.size + 1 / b.size)
    return (_Estimate(float(a.mean() + b.mean()) / 2, se, df),
            _Estimate(float(a.mean() - b.mean()) / 2, se, df))


def _mean_change(base: list[float | None], head: list[float | None]) -> float | None:
    pairs = [(a, b) for a, b in zip(base, head) if a and b]
    if not pairs:
        return None
    return _pct(float(np.mean(np.log([b / a for a, b in pairs]))))


def decide(
    base: list[ArmTrial], head: list[ArmTrial], *, margin_pct: float = 2.0, alpha: float = 0.05,
    min_pairs: int = 4,
) -> Verdict:
    """The verdict for one mode from paired trials (``base[i]`` paired with ``head[i]``).

    When every commit trial says where it stood in its round (``round_edge`` not ``None``: one
    engine at a time), the change is corrected for a favoured place in the round and the favour
    is estimated beside it (``Verdict.position``; module docstring); otherwise the plain mean.

    Args:
        base, head: successful trials of the two arms, in pair order, equal length.
        margin_pct: changes within +-margin count as no change (percent of base tok/s).
        alpha: the t-test's significance level; the interval is the matching ``1 - alpha`` one
            (95% at the default; a family of category verdicts asks for a smaller alpha each).
        min_pairs: fewer pairs give INCONCLUSIVE.

    Raises:
        ValueError: the arms have different lengths or a non-positive throughput.
    """
    n = len(base)
    margin = math.log1p(margin_pct / 100.0)
    if n == 0:
        return Verdict(INCONCLUSIVE, 0, None, None, None, None, margin_pct, alpha, min_pairs, None, None, None,
                       "no successful pairs of trials")
    r = pair_log_ratios([t.output_tok_s for t in base], [t.output_tok_s for t in head])
    acceptance_change = _mean_change([t.acceptance_length for t in base], [t.acceptance_length for t in head])
    step_change = _mean_change([t.step_ms for t in base], [t.step_ms for t in head])
    placed = all(t.round_edge is not None for t in head)
    middle = np.array([t.round_edge is False for t in head])
    position = None
    if placed and 0 < middle.sum() < n and n >= 3:
        estimate, favour = _position_estimates(r, middle)
        low_f, high_f = favour.interval()
        position = Position(_pct(favour.mean), _pct(low_f), _pct(high_f), favour.p(), int(middle.sum()),
                            int(n - middle.sum()))
    else:
        estimate = _mean_estimate(r) if n >= 2 else _Estimate(float(r.mean()), 0.0, 0)
    common = dict(n_pairs=n, change_pct=_pct(estimate.mean), margin_pct=margin_pct, alpha=alpha,
                  acceptance_change_pct=acceptance_change, step_ms_change_pct=step_change, position=position)
    if n < min_pairs or n < 2:
        return Verdict(INCONCLUSIVE, ci_low_pct=None, ci_high_pct=None, p_value=None,
                       more_trials=max(min_pairs, 2) - n, attribution=None,
                       reason=f"{n} pairs so far; at least {max(min_pairs, 2)} are needed", **common)
    low, high = estimate.interval(1 - alpha)
    p = estimate.p()
    interval = dict(ci_low_pct=_pct(low), ci_high_pct=_pct(high), p_value=p)
    level = f"{100 * (1 - alpha):.3g}%"
    verdict = _classify(low, high, p, margin, alpha)
    favoured = f"; {position.line()}" if position and position.significant(alpha) else ""
    if verdict in (REGRESSION, IMPROVEMENT) and n < CHANGE_MIN_PAIRS:
        return Verdict(INCONCLUSIVE, more_trials=CHANGE_MIN_PAIRS - n + (CHANGE_MIN_PAIRS - n) % 2, attribution=None,
                       reason=f"the interval lies beyond the margin, but {n} pairs cannot call a change: "
                              f"a {verdict} needs at least {CHANGE_MIN_PAIRS}{favoured}", **interval, **common)
    if verdict in (REGRESSION, IMPROVEMENT) and placed and position is None:
        where = "in the middle" if middle.all() else "at the edges"
        return Verdict(INCONCLUSIVE, more_trials=2, attribution=None,
                       reason=f"every kept pair had the commit {where} of its round, so a host that favours a "
                              "place in the round could read as this change: another round opened by the other arm "
                              "would tell them apart", **interval, **common)
    if verdict in (REGRESSION, IMPROVEMENT):
        attribution = _attribution(acceptance_change, step_change)
        because = f"; {attribution} moved" if attribution else ""
        return Verdict(verdict, more_trials=None, attribution=attribution,
                       reason=f"the whole {level} interval lies beyond the {margin_pct:g}% margin and p = {p:.3g} "
                              f"< {alpha:g}{because}{favoured}",
                       **interval, **common)
    if verdict == NO_CHANGE:
        return Verdict(NO_CHANGE, more_trials=None, attribution=None,
                       reason=f"the whole {level} interval lies within +-{margin_pct:g}%{favoured}", **interval,
                       **common)
    return Verdict(INCONCLUSIVE, more_trials=_more_trials(n, low, high, estimate.mean, margin, min_pairs),
                   attribution=None, reason=_inconclusive_reason(low, high, margin, p, alpha, "t-test") + favoured,
                   **interval, **common)


def _classify(low: float, high: float, p: float, margin: float, alpha: float) -> str:
    """The three-way rule on a log-ratio interval (low, high), a paired t-test p and a log margin."""
    if (high < -margin or low > margin) and p < alpha:
        return REGRESSION if high < -margin else IMPROVEMENT
    if -margin <= low and high <= margin:
        return NO_CHANGE
    return INCONCLUSIVE


@dataclass(frozen=True)
class Shift:
    """How output tok/s differs between two unpaired groups of trials (``after`` against
    ``before``), judged by the same rule as :func:`decide`. Percentages are of ``before``."""

    verdict: str
    n_before: int
    n_after: int
    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    margin_pct: float
    alpha: float
    reason: str


def _launch_terms(a: np.ndarray, b: np.ndarray, launch_var: tuple[float, int] | None) -> list[tuple[float, float]]:
    """The launch noise of ``mean(b) - mean(a)`` (logs) as Welch-Satterthwaite terms
    ``(variance, degrees of freedom)``: Welch's, one term a side with its own variance; or, with
    ``launch_var`` (:func:`unpaired_shift`), one pooled term, the two sides' squares and the
    pool's together (a pooled t-test's ``s^2 (1/n_a + 1/n_b)`` with all their degrees of
    freedom), whichever is the larger variance: a side noisier than the host's pool keeps its
    own, two sides that agree by chance get the pool's."""
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    welch = [(va / a.size, float(a.size - 1)), (vb / b.size, float(b.size - 1))]
    if launch_var is None or launch_var[1] <= 0:
        return welch
    df = a.size - 1 + b.size - 1 + launch_var[1]
    pooled = (va * (a.size - 1) + vb * (b.size - 1) + launch_var[0] * launch_var[1]) / df
    term = pooled * (1 / a.size + 1 / b.size)
    return [(term, float(df))] if term > welch[0][0] + welch[1][0] else welch


def unpaired_shift(before: list[float], after: list[float], *, margin_pct: float = 2.0, alpha: float = 0.05,
                   level_sd_pct: float = 0.0, launch_var: tuple[float, int] | None = None) -> Shift:
    """Compare two unpaired samples of output tok/s (trials of different runs, e.g. the
    commits on each side of a change point, or one commit last week and today).

    The change is ``exp(mean ln after - mean ln before) - 1`` with Welch's 95% t interval and p
    the two-sided Welch t-test on the logs (one standard error for both, so they cannot
    disagree). ``level_sd_pct``: how far the host's level moves between runs (sd, percent),
    added to each side's variance of its mean, so a host whose level drifts from run to run
    needs a larger change to read as one (core._history.check); 0 treats the two groups as
    launches of one level. ``launch_var``: ``(variance of ln tok/s between launches of one
    run, its degrees of freedom)`` pooled over other stored runs of the same set-up
    (core._history.check.launch_spread); the launch noise is then the larger of Welch's and a
    pooled t-test's over both sides and the pool (:func:`_launch_terms`): two launches that
    happen to agree to 0.1% do not make a run's level known to 0.1% on a host whose launches
    usually differ by 2%, and a side noisier than the pool keeps its own spread.
    REGRESSION/IMPROVEMENT, NO CHANGE and INCONCLUSIVE follow :func:`decide`'s rule.

    Args:
        before, after: per-trial output tok/s, at least 2 values each, all positive.

    Raises:
        ValueError: fewer than 2 values on a side, or a value that is not positive.
    """
    if len(before) < 2 or len(after) < 2:
        raise ValueError(f"need at least 2 trials on each side (got {len(before)} and {len(after)})")
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = np.log(np.asarray(before, dtype=float)), np.log(np.asarray(after, dtype=float))
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("throughput values must be positive")
    mean = float(b.mean() - a.mean())
    terms = _launch_terms(a, b, launch_var)
    level = math.log1p(level_sd_pct / 100.0) ** 2
    launch = sum(v for v, _ in terms)
    variance = launch + 2 * level
    if launch > 0:  # Welch-Satterthwaite; the level's share counted with the smaller side's df
        df = variance ** 2 / (sum(v ** 2 / d for v, d in terms) + (2 * level) ** 2 / (min(a.size, b.size) - 1))
    else:
        df = float(min(a.size, b.size) - 1)
    estimate = _Estimate(mean, math.sqrt(variance), df)
    low, high = estimate.interval()
    p = estimate.p()
    margin = math.log1p(margin_pct / 100.0)
    verdict = _classify(low, high, p, margin, alpha)
    if verdict in (REGRESSION, IMPROVEMENT):
        reason = f"the whole 95% interval lies beyond the {margin_pct:g}% margin and p = {p:.3g} < {alpha:g}"
    elif verdict == NO_CHANGE:
        reason = f"the whole 95% interval lies within +-{margin_pct:g}%"
    else:
        reason = _inconclusive_reason(low, high, margin, p, alpha, "Welch t-test")
    return Shift(verdict, len(a), len(b), _pct(mean), _pct(low), _pct(high), p, margin_pct, alpha, reason)


def _attribution(acceptance_change: float | None, step_change: float | None) -> str | None:
    if step_change is None:
        return None
    # tok/s ~ acceptance / step time: compare the two factors on the log scale. Without
    # speculation acceptance is 1 by definition, so only the step time can move.
    moved_acceptance = abs(math.log1p((acceptance_change or 0.0) / 100))
    moved_step = abs(math.log1p(step_change / 100))
    return "acceptance length" if moved_acceptance > moved_step else "step time"


def _more_trials(n: int, low: float, high: float, mean: float, margin: float, min_pairs: int) -> int | None:
    """Further launches per arm: enough to shrink the interval as needed, at least enough for
    the first verdict (``min_pairs``, at least 4), in whole rounds (2 per arm)."""
    half = (high - low) / 2
    needed_half = abs(abs(mean) - margin)
    if needed_half < 0.1 * half:
        return None  # the estimate sits on the margin: more trials will hardly settle it
    more = max(2, math.ceil(n * (half / needed_half) ** 2) - n, max(min_pairs, 4) - n)
    return more + more % 2


def _inconclusive_reason(low: float, high: float, margin: float, p: float, alpha: float, test: str) -> str:
    if (high < -margin or low > margin) and p >= alpha:
        return f"the interval lies beyond the margin but the {test} is not significant (p = {p:.3g})"
    return f"the 95% interval ({_pct(low):+.1f}%, {_pct(high):+.1f}%) straddles the margin"


@dataclass(frozen=True)
class Speedup:
    """A ratio of throughputs with its 95% t interval, over ``n`` paired values."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int


def speedup(denominator: list[float], numerator: list[float]) -> Speedup | None:
    """``numerator / denominator`` as ``exp(mean ln(num_i / den_i))`` with the 95% t interval
    of that mean; pairs by index (launches of the same round). ``None`` with fewer than 2 pairs.

    Used for EAGLE-3's speedup over baseline on one commit (num = eagle3 tok/s, den =
    baseline tok/s), and, given log-ratio differences, for the change of that speedup.
    """
    n = min(len(denominator), len(numerator))
    if n < 2:
        return None
    r = pair_log_ratios(denominator[:n], numerator[:n])
    low, high = t_interval(r)
    return Speedup(math.exp(float(r.mean())), math.exp(low), math.exp(high), n)


def speedup_change(base_side: tuple[list[float], list[float]], head_side: tuple[list[float], list[float]]
                   ) -> Speedup | None:
    """How the speculative speedup changed from base to commit: the ratio of the two speedups.

    Each side is (baseline tok/s, speculative tok/s) in round order; round ``i`` gives
    ``ln(spec_head_i / base_head_i) - ln(spec_base_i / base_base_i)``. ``None`` with fewer than
    2 complete rounds.
    """
    (b_den, b_num), (h_den, h_num) = base_side, head_side
    n = min(len(b_den), len(b_num), len(h_den), len(h_num))
    if n < 2:
        return None
    d = pair_log_ratios(h_den[:n], h_num[:n]) - pair_log_ratios(b_den[:n], b_num[:n])
    low, high = t_interval(d)
    return Speedup(math.exp(float(d.mean())), math.exp(low), math.exp(high), n)
