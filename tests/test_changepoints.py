"""Change points on synthetic series whose answer is known: shifts of 3, 5 and 10% with
realistic noise, flat noise, a slow trailing drift (core._history.changepoints)."""

from __future__ import annotations

import numpy as np
import pytest

from core._experiments.stats import IMPROVEMENT, REGRESSION
from core._history.changepoints import analyze, confirm, detect, last_good_index

SEEDS = range(20)


def synthetic(seed: int, n: int, at: int | None, shift: float, commit_sd: float = 0.015,
              trial_sd: float = 0.01, trials: int = 4, drift: list[float] | None = None):
    """Per commit: a level (1 - shift from ``at`` on), a commit-to-commit offset (sd
    ``commit_sd``, what a median of a few launches still carries) and ``trials`` launches
    around it (sd ``trial_sd``). Returns (medians, trials) in tok/s around 100."""
    rng = np.random.default_rng(seed)
    levels = np.ones(n)
    if at is not None:
        levels[at:] *= 1 - shift
    if drift:
        levels[n - len(drift):] *= np.cumprod([1 - d for d in drift])
    per_commit = levels * np.exp(rng.normal(0, commit_sd, n))
    all_trials = [list(100 * c * np.exp(rng.normal(0, trial_sd, trials))) for c in per_commit]
    return [float(np.median(t)) for t in all_trials], all_trials


def hits(n: int, shift: float, **noise) -> tuple[int, int]:
    """(series whose confirmed change points include one within +-1 of the truth as a
    REGRESSION, series with a confirmed change point elsewhere)."""
    found = wrong = 0
    for seed in SEEDS:
        at = n // 2
        values, trials = synthetic(seed, n, at, shift, **noise)
        points = analyze(values, trials).change_points
        found += any(abs(c.index - at) <= 1 and c.verdict == REGRESSION for c in points)
        wrong += any(abs(c.index - at) > 1 for c in points)
    return found, wrong


# Point noise: commit offset sd 1.5% plus the median of 4 launches at sd 1% (about 1.6% per
# point). Seen: 10% 20/20 at n = 20 and 40; 5% 17/20 at n = 20, 19/20 at n = 40. Seeded, so
# the counts are reproducible; the thresholds are the rates claimed.
@pytest.mark.parametrize("shift, n, at_least", [(0.10, 20, 19), (0.10, 40, 19), (0.05, 20, 16), (0.05, 40, 17)])
def test_5_and_10_percent_shifts_are_found_within_one_commit(shift, n, at_least):
    found, wrong = hits(n, shift)
    assert found >= at_least, f"{found}/20 found"
    assert wrong <= 2, f"{wrong}/20 with a confirmed change point elsewhere"


def test_3_percent_is_found_when_the_series_is_long_enough():
    # 60 commits, point noise about 1.1% (seen: 15/20; at 20 commits and 2% noise it is a coin
    # toss). Seen 3/20 with the step placed 2-3 commits off (no extra change point).
    found, wrong = hits(60, 0.03, commit_sd=0.01)
    assert found >= 15, f"{found}/20 found"
    assert wrong <= 3


def test_flat_noise_gives_no_confirmed_change_point_in_most_series():
    with_any = candidates = 0
    for seed in SEEDS:
        values, trials = synthetic(seed, 40, None, 0.0, commit_sd=0.02)
        result = analyze(values, trials)
        candidates += len(result.candidates)
        with_any += bool(result.change_points)
    assert with_any <= 1, f"{with_any}/20 flat series had a confirmed change point"


def test_flat_noise_rarely_flags_a_drift():
    flagged = sum(bool((d := analyze(*synthetic(seed, 30, None, 0.0)).drift) and d.flagged) for seed in SEEDS)
    assert flagged <= 2, f"{flagged}/20"


def test_an_improvement_is_confirmed_as_one():
    values, trials = synthetic(1, 30, 15, -0.08)
    (point,) = analyze(values, trials).change_points
    assert point.index == 15 and point.verdict == IMPROVEMENT
    assert point.shift.change_pct == pytest.approx(8.0, abs=2.0)


def test_a_regression_sets_the_last_good_commit_before_it():
    values, trials = synthetic(2, 24, 12, 0.10)
    result = analyze(values, trials)
    assert [c.index for c in result.change_points] == [12]
    assert result.last_good_index == 11
    assert result.drift is None  # the slide is the change point itself
    shift = result.change_points[0].shift
    assert shift.change_pct == pytest.approx(-10.0, abs=2.0)
    assert shift.ci_high_pct < -2.0 and shift.p_value < 0.05


def test_a_drop_at_the_newest_commit_is_flagged_as_a_trailing_drift():
    # one point after a 6% step: too few for the detector to place, plain on the trials and
    # against the series' noise (seen here: 17 of 20 flagged)
    flagged = 0
    for seed in SEEDS:
        values, trials = synthetic(seed, 20, None, 0.0, commit_sd=0.01, drift=[0.06])
        result = analyze(values, trials)
        assert all(c.index == 19 for c in result.change_points)
        if result.drift and result.drift.flagged:
            flagged += 1
            assert result.drift.points == range(19, 20) and result.drift.good == range(5)
            assert result.drift.shift.change_pct == pytest.approx(-6.0, abs=3.0)
    assert flagged >= 15, f"{flagged}/20"


def test_a_slide_over_the_newest_commits_is_reported_as_a_change_point_or_a_drift():
    # three commits, each 1% slower (seen here: 14 of 20 reported, mostly as a change point; 17
    # with E-divisive: three points at the end of 20 are too few for the rank cost to pay its
    # penalty, and the drift test needs z >= 3 from the newest point alone)
    reported = 0
    for seed in SEEDS:
        values, trials = synthetic(seed, 20, None, 0.0, commit_sd=0.005, drift=[0.01] * 3)
        result = analyze(values, trials)
        reported += bool(any(c.index >= 16 for c in result.change_points) or (result.drift and result.drift.flagged))
    assert reported >= 13, f"{reported}/20"


def test_detection_is_deterministic_and_places_a_clear_step():
    values, _ = synthetic(3, 30, 15, 0.05)
    first = detect(values)
    assert first == detect(list(values)) and 15 in first


def test_one_wild_launch_does_not_open_a_segment():
    # flat series at 1% noise with a 20% outlier at one commit: the rank cost sees it as one
    # high rank, not a level
    for seed in SEEDS:
        values, _ = synthetic(seed, 40, None, 0.0, commit_sd=0.01)
        values[20] *= 0.8
        assert detect(values) == [], f"seed {seed}"


def test_short_or_bad_series():
    assert detect([100.0, 90.0, 80.0]) == []
    with pytest.raises(ValueError, match="positive"):
        detect([100.0, 0.0, 100.0, 100.0])
    with pytest.raises(ValueError, match="lists of trials"):
        analyze([1.0, 2.0], [[1.0]])
    with pytest.raises(ValueError, match="outside"):
        confirm([[1.0, 1.0]] * 4, 0)
    assert last_good_index(0, []) is None
    assert analyze([], []).last_good_index is None


def test_a_candidate_with_too_few_trials_stays_unconfirmed():
    point = confirm([[100.0], [100.0], [90.0], [90.0]], 2, window=1)
    assert point.shift is None and not point.confirmed and point.verdict == "UNCONFIRMED"
