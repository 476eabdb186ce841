"""Statistics of one compare: from per-trial output tok/s of two arms to a three-way verdict.

Method (per mode):

* Launches alternate ABBA (A = base, B = commit), so consecutive launches form pairs
  (A,B), (B,A), (A,B), ...; each pair gives one log-ratio ``r = ln(tok/s_B / tok/s_A)``.
  Alternating the order inside pairs cancels a linear drift of the machine (warming, clock
  decay) on average, and pairing removes slow drift between pairs.
* Estimate: ``exp(mean r) - 1``. Interval: 95% BCa bootstrap of ``mean r``
  (``scipy.stats.bootstrap``, seeded so a recompute gives the same numbers).
* p-value: two-sided Student t-test of the pair log-ratios against 0
  (``scipy.stats.ttest_1samp``), the paired test that matches the interval. It uses the
  pairing: a machine whose speed moves both arms of a pair alike (the same round, or two
  engines measured in turns) leaves the log-ratios tight, which an unpaired test of the two
  arms' values would not see (a Mann-Whitney U over them, used before 2026-12-03, could not
  call a -15% change with launches spread +-10% around a drifting level). One wild pair
  cannot carry the verdict: it widens the sd as much as it moves the mean (with 4 pairs
  such a pair alone gives t of about 1). A change verdict needs at least
  ``CHANGE_MIN_PAIRS`` (4) pairs, whatever ``min_pairs`` is: the sd of two or three
  log-ratios is no estimate of the launch-to-launch spread (two pairs that agree by chance give
  t = 20 and p = 0.03), and the rank test used before could not reach p < 0.05 below 4 either.
* Verdict with margin ``m`` (2% by default): REGRESSION or IMPROVEMENT when the whole
  interval lies beyond ``-m`` or ``+m`` and p < alpha; NO CHANGE when the whole interval lies
  inside ``+-m``; otherwise INCONCLUSIVE, with the number of further launches per arm that
  would shrink the interval enough, assuming the spread seen so far (n' = n * (h / h')^2 for
  half-width h and the half-width h' that would settle it).
* Under speculative decoding, output tok/s per sequence = acceptance length / step time, so
  the same pairs give the change of acceptance length and of step time (ms per verify step
  = TPOT x acceptance length), and the verdict names the one that moved more.

Fewer than ``min_pairs`` pairs give INCONCLUSIVE: a bootstrap over two or three values
cannot show its own uncertainty.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


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
    speculation (the counter it lacks), else ``None``.
    """

    output_tok_s: float
    acceptance_length: float | None = None
    tpot_ms: float | None = None
    acceptance_missing: str | None = None

    @property
    def step_ms(self) -> float | None:
        """Milliseconds per decode (verify) step of one sequence: TPOT x acceptance length."""
        if self.tpot_ms is None:
            return None
        return self.tpot_ms * (self.acceptance_length or 1.0)


@dataclass(frozen=True)
class Verdict:
    """One mode's verdict and the evidence for it. Percentages are of the base arm."""

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


def bootstrap_ci(r: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% BCa bootstrap interval of ``mean(r)`` (scipy, 9,999 resamples, seeded)."""
    if np.ptp(r) == 0:
        return float(r[0]), float(r[0])
    result = stats.bootstrap((r,), np.mean, confidence_level=0.95, n_resamples=9999,
                             method="BCa", random_state=np.random.default_rng(seed))
    low, high = result.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):  # BCa can degenerate on tiny samples
        low, high = np.percentile(r, [2.5, 97.5])
    return float(low), float(high)


def _mean_change(base: list[float | None], head: list[float | None]) -> float | None:
    pairs = [(a, b) for a, b in zip(base, head) if a and b]
    if not pairs:
        return None
    return _pct(float(np.mean(np.log([b / a for a, b in pairs]))))


def decide(
    base: list[ArmTrial], head: list[ArmTrial], *, margin_pct: float = 2.0, alpha: float = 0.05,
    min_pairs: int = 4, seed: int = 0,
) -> Verdict:
    """The verdict for one mode from paired trials (``base[i]`` paired with ``head[i]``).

    Args:
        base, head: successful trials of the two arms, in pair order, equal length.
        margin_pct: changes within +-margin count as no change (percent of base tok/s).
        alpha: the paired t-test's significance level.
        min_pairs: fewer pairs give INCONCLUSIVE.
        seed: bootstrap seed (recomputing with the same data and seed gives the same result).

    Raises:
        ValueError: the arms have different lengths or a non-positive throughput.
    """
    n = len(base)
    margin = math.log1p(margin_pct / 100.0)
    if n == 0:
        return Verdict(INCONCLUSIVE, 0, None, None, None, None, margin_pct, alpha, min_pairs, None, None, None,
                       "no successful pairs of trials")
    r = pair_log_ratios([t.output_tok_s for t in base], [t.output_tok_s for t in head])
    mean = float(r.mean())
    acceptance_change = _mean_change([t.acceptance_length for t in base], [t.acceptance_length for t in head])
    step_change = _mean_change([t.step_ms for t in base], [t.step_ms for t in head])
    common = dict(n_pairs=n, change_pct=_pct(mean), margin_pct=margin_pct, alpha=alpha,
                  acceptance_change_pct=acceptance_change, step_ms_change_pct=step_change)
    if n < min_pairs:
        return Verdict(INCONCLUSIVE, ci_low_pct=None, ci_high_pct=None, p_value=None,
                       more_trials=min_pairs - n, attribution=None,
                       reason=f"{n} pairs so far; at least {min_pairs} are needed", **common)
    low, high = bootstrap_ci(r, seed)
    p = paired_p(r)
    interval = dict(ci_low_pct=_pct(low), ci_high_pct=_pct(high), p_value=p)
    verdict = _classify(low, high, p, margin, alpha)
    if verdict in (REGRESSION, IMPROVEMENT) and n < CHANGE_MIN_PAIRS:
        return Verdict(INCONCLUSIVE, more_trials=CHANGE_MIN_PAIRS - n + (CHANGE_MIN_PAIRS - n) % 2, attribution=None,
                       reason=f"the interval lies beyond the margin, but {n} pairs cannot call a change: "
                              f"a {verdict} needs at least {CHANGE_MIN_PAIRS}", **interval, **common)
    if verdict in (REGRESSION, IMPROVEMENT):
        attribution = _attribution(acceptance_change, step_change)
        because = f"; {attribution} moved" if attribution else ""
        return Verdict(verdict, more_trials=None, attribution=attribution,
                       reason=f"the whole 95% interval lies beyond the {margin_pct:g}% margin and p = {p:.3g} < {alpha:g}{because}",
                       **interval, **common)
    if verdict == NO_CHANGE:
        return Verdict(NO_CHANGE, more_trials=None, attribution=None,
                       reason=f"the whole 95% interval lies within +-{margin_pct:g}%", **interval, **common)
    return Verdict(INCONCLUSIVE, more_trials=_more_trials(n, low, high, mean, margin, min_pairs), attribution=None,
                   reason=_inconclusive_reason(low, high, margin, p, alpha), **interval, **common)


def paired_p(r: np.ndarray) -> float:
    """Two-sided p of the one-sample t-test of log-ratios ``r`` against 0 (at least 2 values);
    identical values give 0 (all the same non-zero change) or 1 (no change at all)."""
    if np.ptp(r) == 0:
        return 0.0 if r[0] != 0 else 1.0
    return float(stats.ttest_1samp(r, 0.0).pvalue)


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


def unpaired_shift(before: list[float], after: list[float], *, margin_pct: float = 2.0, alpha: float = 0.05,
                   seed: int = 0) -> Shift:
    """Compare two unpaired samples of output tok/s (trials of different runs, e.g. the
    commits on each side of a change point).

    The change is ``exp(mean ln after - mean ln before) - 1`` with a 95% BCa bootstrap
    interval (scipy, two-sample, seeded); p is the two-sided Mann-Whitney U test on the logs.
    REGRESSION/IMPROVEMENT, NO CHANGE and INCONCLUSIVE follow :func:`decide`'s rule.

    Args:
        before, after: per-trial output tok/s, at least 2 values each, all positive.

    Raises:
        ValueError: fewer than 2 values on a side, or a value that is not positive.
    """
    if len(before) < 2 or len(after) < 2:
        raise ValueError(f"need at least 2 trials on each side (got {len(before)} and {len(after)})")
    a, b = np.log(np.asarray(before, dtype=float)), np.log(np.asarray(after, dtype=float))
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("throughput values must be positive")
    mean = float(b.mean() - a.mean())
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        low = high = mean
    else:
        result = stats.bootstrap((b, a), lambda x, y, axis=-1: x.mean(axis=axis) - y.mean(axis=axis),
                                 confidence_level=0.95, n_resamples=9999, method="BCa",
                                 random_state=np.random.default_rng(seed))
        low, high = (float(v) for v in result.confidence_interval)
        if not (np.isfinite(low) and np.isfinite(high)):
            low, high = _percentile_interval(a, b, seed)
    p = float(stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    margin = math.log1p(margin_pct / 100.0)
    verdict = _classify(low, high, p, margin, alpha)
    if verdict in (REGRESSION, IMPROVEMENT):
        reason = f"the whole 95% interval lies beyond the {margin_pct:g}% margin and p = {p:.3g} < {alpha:g}"
    elif verdict == NO_CHANGE:
        reason = f"the whole 95% interval lies within +-{margin_pct:g}%"
    else:
        reason = _inconclusive_reason(low, high, margin, p, alpha)
    return Shift(verdict, len(a), len(b), _pct(mean), _pct(low), _pct(high), p, margin_pct, alpha, reason)


def _percentile_interval(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    draws = [rng.choice(b, b.size).mean() - rng.choice(a, a.size).mean() for _ in range(2000)]
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


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


def _inconclusive_reason(low: float, high: float, margin: float, p: float, alpha: float) -> str:
    if (high < -margin or low > margin) and p >= alpha:
        return f"the interval lies beyond the margin but the paired t-test is not significant (p = {p:.3g})"
    return f"the 95% interval ({_pct(low):+.1f}%, {_pct(high):+.1f}%) straddles the margin"


@dataclass(frozen=True)
class Speedup:
    """A ratio of throughputs with its 95% bootstrap interval, over ``n`` paired values."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int


def speedup(denominator: list[float], numerator: list[float], seed: int = 0) -> Speedup | None:
    """``numerator / denominator`` as ``exp(mean ln(num_i / den_i))`` with a 95% bootstrap
    interval; pairs by index (launches of the same round). ``None`` with fewer than 2 pairs.

    Used for EAGLE-3's speedup over baseline on one commit (num = eagle3 tok/s, den =
    baseline tok/s), and, given log-ratio differences, for the change of that speedup.
    """
    n = min(len(denominator), len(numerator))
    if n < 2:
        return None
    r = pair_log_ratios(denominator[:n], numerator[:n])
    low, high = bootstrap_ci(r, seed)
    return Speedup(math.exp(float(r.mean())), math.exp(low), math.exp(high), n)


def speedup_change(base_side: tuple[list[float], list[float]], head_side: tuple[list[float], list[float]],
                   seed: int = 0) -> Speedup | None:
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
    low, high = bootstrap_ci(d, seed)
    return Speedup(math.exp(float(d.mean())), math.exp(low), math.exp(high), n)
