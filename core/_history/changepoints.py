"""Change points in a per-commit series, confirmed on the trials, and a trailing drift.

A series is one value per measured commit in commit order (output tok/s, the median of that
commit's trials) with the trials themselves. Three steps:

1. Candidates: binary segmentation with the rank cost (``ruptures``' ``Binseg``, ``model="rank"``)
   over ``ln(tok/s)``, a new segment costing ``PENALTY_C * ln(n)`` (BIC-like, with a constant
   that keeps flat series quiet). The rank cost compares the mean *rank* of each segment (a
   Kruskal-Wallis-type statistic, Lung-Yut-Fong, Lévy-Leduc and Cappé 2015), so it needs no
   noise estimate and one wild launch moves it no more than any other high point.
   ``bench/CHANGEPOINT_RESULTS.md`` compares it with E-divisive (MongoDB's
   ``signal-processing-algorithms``, the detector used before, which installs on Python 3.11
   with numpy 1 only) and with least-squares PELT and binary segmentation: detection the
   same within sampling error, fewer false alarms on flat series with and without outliers;
   deterministic, no permutations. Ranks need a few points per side: a clean step in fewer
   than 8 commits cannot pay the penalty (the trailing drift below covers the newest ones).
2. Confirmation: each candidate at index ``k`` (the first commit at the new level) is tested
   on the trials of up to ``window`` commits on each side (never across a neighbouring
   candidate) with :func:`core._experiments.stats.unpaired_shift`: confirmed when the two-sided
   Welch t-test's p is below ``alpha`` (its 95% interval then excludes zero), and the
   estimate is at least the compare margin. (Compare's own rule wants the whole interval beyond
   the margin: right for a verdict on one commit from paired launches, too strict here, where
   a 3% step under a 2% margin would stay unconfirmed however many commits show it;
   ``shift.verdict`` still gives that stricter reading.) Trials of one run vary less than
   commits measured on different days, so the step must also stand out from the series' own
   commit-to-commit noise: ``z = |mean ln(value) after - before| / (sigma * sqrt(1/n_a +
   1/n_b))`` over the points of each side must be at least ``Z_MIN`` (3), with sigma the
   robust spread of consecutive points (MAD of first differences / sqrt 2), the z-score idea
   Conbench applies to its history. Only a confirmed change is reported as a change point;
   the rest are kept as unconfirmed candidates.
3. Trailing drift: a slide in the newest commits that the detector cannot yet place (one or
   two points after it) or that is spread thinly is caught by testing the newest commit's
   trials against those of the last known-good commit and the points that hold its level (up
   to ``window``), by the same confirmation rule.

The last known-good commit: when the newest confirmed change point is a regression at ``k``,
the commit before it (``k - 1``); otherwise the first commit of the current level (after the
newest confirmed change point, else the first of the series).

Pure functions: no database, no I/O. Indices count points of the series from 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures

from core._experiments.stats import IMPROVEMENT, REGRESSION, Shift, unpaired_shift

PENALTY_C = 2.5
MIN_SEGMENT = 2
WINDOW = 5
DRIFT_POINTS = 3
MIN_POINTS = 4
Z_MIN = 3.0


def detect(values: Sequence[float], *, penalty_c: float = PENALTY_C) -> list[int]:
    """Candidate change points of a series: ruptures' binary segmentation with the rank cost
    over ``ln(values)``, penalty ``penalty_c * ln(n)`` per change point, segments of at least
    ``MIN_SEGMENT`` (2) points.

    Args:
        values: one positive value per commit in commit order (e.g. output tok/s).
        penalty_c: the penalty's constant (see ``bench/CHANGEPOINT_RESULTS.md`` for the
            detection and false-alarm rates of the default).

    Returns:
        Ascending indices of the first point at each new level; empty for fewer than
        ``MIN_POINTS`` (4) points. Deterministic: the same series gives the same answer.

    Raises:
        ValueError: a value is not positive and finite.
    """
    x = np.asarray(values, dtype=float)
    if x.size and not (np.isfinite(x).all() and (x > 0).all()):
        raise ValueError("series values must be positive and finite")
    if x.size < MIN_POINTS:
        return []
    algo = ruptures.Binseg(model="rank", min_size=MIN_SEGMENT, jump=1).fit(np.log(x).reshape(-1, 1))
    return [int(i) for i in algo.predict(pen=penalty_c * np.log(x.size)) if 0 < i < x.size]


def noise_sd(values: Sequence[float]) -> float:
    """The commit-to-commit noise of a series: robust sd of ``ln(values)`` from its first
    differences (1.4826 x MAD / sqrt 2), unmoved by the steps themselves. 0 for fewer than 3
    points."""
    if len(values) < 3:
        return 0.0
    d = np.diff(np.log(np.asarray(values, dtype=float)))
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2))


def step_z(values: Sequence[float], before: range, after: range, sigma: float) -> float:
    """How many standard errors the mean of ``ln(values)`` moved between the two groups of
    points, with per-point noise ``sigma`` (``inf`` when ``sigma`` is 0)."""
    x = np.log(np.asarray(values, dtype=float))
    step = abs(float(x[list(after)].mean() - x[list(before)].mean()))
    se = sigma * np.sqrt(1 / len(before) + 1 / len(after))
    return float("inf") if se == 0 else step / se


def significant(shift: Shift | None, z: float = float("inf")) -> str | None:
    """REGRESSION or IMPROVEMENT when ``shift`` is confirmed (p < alpha, interval excluding
    zero, estimate at least the margin) and the step's ``z`` against the series' noise is at
    least ``Z_MIN``; see the module docstring. Else ``None``."""
    if shift is None or z < Z_MIN or shift.p_value >= shift.alpha or shift.ci_low_pct <= 0 <= shift.ci_high_pct:
        return None
    if abs(shift.change_pct) < shift.margin_pct:
        return None
    return REGRESSION if shift.change_pct < 0 else IMPROVEMENT


@dataclass(frozen=True)
class ChangePoint:
    """A candidate change point and its test on the trials.

    Attributes:
        index: the first point (commit) at the new level; the change lies between
            ``index - 1`` and ``index``.
        before, after: the points whose trials were tested, as ``range`` of indices.
        shift: the trial-level test (``None`` when a side had fewer than 2 trials).
        z: the step between the points' values in units of the series' noise (:func:`step_z`).
    """

    index: int
    before: range
    after: range
    shift: Shift | None
    z: float = float("inf")

    @property
    def confirmed(self) -> bool:
        """True when the trials and the series' noise confirm a change (:func:`significant`)."""
        return significant(self.shift, self.z) is not None

    @property
    def verdict(self) -> str:
        """REGRESSION or IMPROVEMENT when confirmed, else ``UNCONFIRMED``."""
        return significant(self.shift, self.z) or "UNCONFIRMED"


@dataclass(frozen=True)
class Drift:
    """The newest commits' trials against the last known-good commit's.

    Attributes:
        good_index: the last known-good point.
        points: the newest points tested against it.
        good: the points on the good side (the good one, pooled when it has few trials).
        shift: the trial-level test of ``points`` against ``good``.
        z: the step in units of the series' noise (:func:`step_z`).
    """

    good_index: int
    points: range
    good: range
    shift: Shift
    z: float = float("inf")

    @property
    def flagged(self) -> bool:
        """True when the newest commits are confirmed slower than the good one."""
        return significant(self.shift, self.z) == REGRESSION


@dataclass(frozen=True)
class SeriesAnalysis:
    """Everything found in one series: candidates (confirmed or not), the last known-good
    point, and the trailing drift against it (``None`` when there is nothing after it or too
    few trials)."""

    candidates: list[ChangePoint]
    last_good_index: int | None
    drift: Drift | None

    @property
    def change_points(self) -> list[ChangePoint]:
        """The confirmed change points, oldest first."""
        return [c for c in self.candidates if c.confirmed]


def _pooled(trials: Sequence[Sequence[float]], points: range) -> list[float]:
    return [float(v) for i in points for v in trials[i]]


def _test(trials: Sequence[Sequence[float]], before: range, after: range, margin_pct: float,
          alpha: float) -> Shift | None:
    a, b = _pooled(trials, before), _pooled(trials, after)
    if len(a) < 2 or len(b) < 2:
        return None
    return unpaired_shift(a, b, margin_pct=margin_pct, alpha=alpha)


def confirm(trials: Sequence[Sequence[float]], index: int, *, lower: int = 0, upper: int | None = None,
            window: int = WINDOW, margin_pct: float = 2.0, alpha: float = 0.05,
            values: Sequence[float] | None = None, sigma: float | None = None) -> ChangePoint:
    """Test a candidate at ``index`` on the trials of up to ``window`` points on each side.

    Args:
        trials: per point, its trials' output tok/s (positive).
        index: the first point at the new level (``0 < index < len(trials)``).
        lower, upper: the points tested stay within ``[lower, upper)`` (the neighbouring
            candidates), so a test never mixes three levels.
        window: points per side at most.
        margin_pct, alpha: the compare rule (:func:`core._experiments.stats.unpaired_shift`).
        values, sigma: the points' values and the series' noise (:func:`noise_sd`) for the
            step's z; without them z is not checked.

    Raises:
        ValueError: ``index`` outside the series, or a trial value that is not positive.
    """
    upper = len(trials) if upper is None else upper
    if not 0 < index < len(trials):
        raise ValueError(f"change point index {index} outside 1..{len(trials) - 1}")
    before = range(max(lower, index - window), index)
    after = range(index, min(upper, index + window))
    z = step_z(values, before, after, sigma) if values is not None and sigma is not None else float("inf")
    return ChangePoint(index, before, after, _test(trials, before, after, margin_pct, alpha), z)


def last_good_index(n_points: int, change_points: Sequence[ChangePoint]) -> int | None:
    """The last known-good point (see the module docstring); ``None`` for an empty series.

    ``change_points``: the confirmed ones, any order.
    """
    if n_points == 0:
        return None
    confirmed = sorted((c for c in change_points if c.confirmed), key=lambda c: c.index)
    if not confirmed:
        return 0
    newest = confirmed[-1]
    return newest.index - 1 if newest.verdict == REGRESSION else newest.index


def _grow(trials: Sequence[Sequence[float]], last: int, first_allowed: int, most: int) -> range:
    """Points ending at ``last`` going back (not before ``first_allowed``, at most ``most``
    points) until they hold at least 4 trials, the fewest with which the rank test can reach
    p < 0.05 against a like group."""
    start = last
    while start > first_allowed and last - start + 1 < most and len(_pooled(trials, range(start, last + 1))) < 4:
        start -= 1
    return range(start, last + 1)


def trailing_drift(trials: Sequence[Sequence[float]], good_index: int, *, reference: range | None = None,
                   points: int = DRIFT_POINTS, window: int = WINDOW, margin_pct: float = 2.0, alpha: float = 0.05,
                   values: Sequence[float] | None = None, sigma: float | None = None) -> Drift | None:
    """The newest point against the good point ``good_index``, on their trials.

    Args:
        reference: the points that stand for the good level (default: the good point, pooled
            with up to ``window - 1`` points before it while it has fewer than 4 trials).
        points: the newest point is pooled with up to ``points - 1`` points before it (never
            into ``reference``) while it has fewer than 4 trials.
        values, sigma: as for :func:`confirm`.

    Returns:
        ``None`` when no point follows the reference or a side has fewer than 2 trials.
    """
    n = len(trials)
    if good_index is None or good_index >= n - 1:
        return None
    reference = reference or _grow(trials, good_index, 0, window)
    if reference.stop >= n:
        return None
    newest = _grow(trials, n - 1, reference.stop, points)
    shift = _test(trials, reference, newest, margin_pct, alpha)
    if shift is None:
        return None
    z = step_z(values, reference, newest, sigma) if values is not None and sigma is not None else float("inf")
    return Drift(good_index, newest, reference, shift, z)


def analyze(values: Sequence[float], trials: Sequence[Sequence[float]], *, margin_pct: float = 2.0,
            alpha: float = 0.05, window: int = WINDOW, drift_points: int = DRIFT_POINTS,
            penalty_c: float = PENALTY_C) -> SeriesAnalysis:
    """Candidates, their confirmation, the last known-good point and the trailing drift.

    Args:
        values: per point (commit, in commit order), its output tok/s (median of its trials).
        trials: per point, the output tok/s of its trials (same length as ``values``).
        margin_pct, alpha: the compare rule used for confirmation and drift.
        window: points per side in a confirmation.
        drift_points: the newest points tested for a trailing drift.
        penalty_c: the detector's (see :func:`detect`).

    Raises:
        ValueError: ``values`` and ``trials`` differ in length, or a value is not positive.
    """
    if len(values) != len(trials):
        raise ValueError(f"{len(values)} values but {len(trials)} lists of trials")
    found = detect(values, penalty_c=penalty_c)
    sigma = noise_sd(values)
    bounds = [0, *found, len(values)]
    candidates = [confirm(trials, k, lower=bounds[i], upper=bounds[i + 2], window=window,
                          margin_pct=margin_pct, alpha=alpha, values=values, sigma=sigma)
                  for i, k in enumerate(found)]
    good = last_good_index(len(values), candidates)
    drift = None
    newest_confirmed = max((c.index for c in candidates if c.confirmed), default=None)
    if good is not None and (newest_confirmed is None or good >= newest_confirmed):
        # after a confirmed regression the slide is that change point; no separate drift
        # the good level: the good point and the points after it, up to the newest few
        n = len(values)
        reference = range(good, max(good + 1, min(good + window, n - drift_points)))
        drift = trailing_drift(trials, good, reference=reference, points=drift_points, window=window,
                               margin_pct=margin_pct, alpha=alpha, values=values, sigma=sigma)
    return SeriesAnalysis(candidates, good, drift)
