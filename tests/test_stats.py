"""The verdict rule on constructed trials whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, ArmTrial, decide, speedup, speedup_change


def arms(effect: float, noise: float, n: int = 4, seed: int = 1, acceptance=(None, None), tpot_ms=2.0):
    rng = np.random.default_rng(seed)
    base = [ArmTrial(100 * (1 + rng.normal(0, noise)), acceptance[0], tpot_ms) for _ in range(n)]
    head_tpot = tpot_ms / (1 + effect) * ((acceptance[1] or 1) / (acceptance[0] or 1))
    head = [ArmTrial(100 * (1 + effect) * (1 + rng.normal(0, noise)), acceptance[1], head_tpot) for _ in range(n)]
    return base, head


def test_clear_slowdown_is_a_regression_attributed_to_step_time():
    verdict = decide(*arms(-0.10, 0.005))
    assert verdict.verdict == REGRESSION
    assert verdict.change_pct == pytest.approx(-10, abs=1)
    assert verdict.ci_high_pct < -2
    base, head = arms(-0.10, 0.005)
    ratios = np.log([h.output_tok_s / b.output_tok_s for b, h in zip(base, head)])
    assert verdict.p_value == pytest.approx(stats.ttest_1samp(ratios, 0.0).pvalue)  # paired, on the log-ratios
    assert verdict.p_value < 1e-3
    assert verdict.attribution == "step time"


def test_a_p_just_under_alpha_is_written_so_it_reads_under_alpha():
    """8 pairs whose log-ratios give a paired t-test p of 0.04988: REGRESSION at alpha 0.05
    (margin 0.5%). With three decimals the reason said "p = 0.050 < 0.05" (the demo,
    2026-12-02); three significant digits keep what the rule compared."""
    z = np.array([-1.2, -0.6, -0.3, 0.0, 0.2, 0.5, 0.7, 0.7])
    z = (z - z.mean()) / z.std(ddof=1)
    ratios = -stats.t.isf(0.04988 / 2, 7) * 0.02 / math.sqrt(8) + 0.02 * z  # sd 2%, t at p = 0.04988
    base = [ArmTrial(100.0)] * 8
    head = [ArmTrial(100.0 * math.exp(r)) for r in ratios]
    verdict = decide(base, head, margin_pct=0.0)
    assert verdict.verdict == REGRESSION and verdict.p_value == pytest.approx(0.04988, abs=1e-6)
    assert verdict.ci_high_pct < 0 < verdict.ci_high_pct + 0.01  # the interval and the test agree
    assert "p = 0.0499 < 0.05" in verdict.reason, verdict.reason


def test_a_drifting_machine_does_not_hide_a_change_the_pairs_show():
    """Launch levels spread +-10% by a machine whose speed drifts, each pair measured at one
    level (two engines in turns): the pairs say -15% +- 1%. An unpaired rank test of the two
    arms' values is not significant here (Mann-Whitney p = 0.11); the paired test is."""
    levels = [237.0, 253.0, 275.0, 238.0]
    changes = [-0.167, -0.150, -0.127, -0.176]
    base = [ArmTrial(v) for v in levels]
    head = [ArmTrial(v * (1 + c)) for v, c in zip(levels, changes)]
    unpaired = stats.mannwhitneyu([t.output_tok_s for t in head], levels).pvalue
    assert unpaired > 0.05
    verdict = decide(base, head, margin_pct=3.0)
    assert verdict.verdict == REGRESSION and verdict.p_value < 0.01, verdict


def test_two_pairs_that_agree_by_chance_do_not_call_a_change():
    """Two pairs at -3.2% and -3.4% with min_pairs 2 (a watch's 2 launches per arm): the paired
    t-test alone gives p = 0.03, from a spread estimated out of two values. The history test's
    A/A (fake engine, CI 2026-12-03) read exactly that as a REGRESSION. A change needs 4 pairs;
    NO CHANGE from 2 stays possible."""
    base = [ArmTrial(100.0), ArmTrial(100.0)]
    head = [ArmTrial(96.8), ArmTrial(96.6)]
    verdict = decide(base, head, margin_pct=2.0, min_pairs=2)
    assert verdict.p_value < 0.05 and verdict.ci_high_pct < -2.0
    assert verdict.verdict == INCONCLUSIVE and verdict.more_trials == 2, verdict
    assert "2 pairs cannot call a change: a REGRESSION needs at least 4" in verdict.reason
    same = decide(base, [ArmTrial(100.1), ArmTrial(99.95)], margin_pct=2.0, min_pairs=2)
    assert same.verdict == NO_CHANGE, same
    four = decide(base * 2, head * 2, margin_pct=2.0, min_pairs=2)
    assert four.verdict == REGRESSION, four


def test_acceptance_collapse_is_attributed_to_acceptance_length():
    # acceptance 4 -> 1 while the verify step got 5% cheaper (2.0 -> 1.9 ms): tok/s falls ~74%
    base = [ArmTrial(2000 * f, 4.0, 0.5) for f in (1.0, 1.004, 0.997, 1.002)]
    head = [ArmTrial(526 * f, 1.0, 1.9) for f in (1.001, 0.998, 1.003, 0.999)]
    verdict = decide(base, head)
    assert verdict.verdict == REGRESSION
    assert verdict.acceptance_change_pct == pytest.approx(-75)
    assert verdict.step_ms_change_pct == pytest.approx(-5)
    assert verdict.attribution == "acceptance length"


def test_improvement():
    assert decide(*arms(+0.08, 0.005)).verdict == IMPROVEMENT


def test_small_noise_and_no_effect_is_no_change():
    verdict = decide(*arms(0.0, 0.003, n=6))
    assert verdict.verdict == NO_CHANGE
    assert -2 <= verdict.ci_low_pct and verdict.ci_high_pct <= 2


def test_too_few_pairs_is_inconclusive_with_how_many_more():
    verdict = decide(*arms(-0.10, 0.005, n=2))
    assert verdict.verdict == INCONCLUSIVE
    assert verdict.more_trials == 2


def test_noisy_small_effect_is_inconclusive_and_asks_for_more_trials():
    verdict = decide(*arms(-0.025, 0.03, n=4, seed=3))
    assert verdict.verdict == INCONCLUSIVE
    assert verdict.more_trials is None or verdict.more_trials > 0
    assert "straddles" in verdict.reason or "not significant" in verdict.reason


def test_recompute_is_deterministic():
    base, head = arms(-0.03, 0.01, n=5)
    assert decide(base, head) == decide(base, head)


def test_unpaired_or_nonpositive_input_is_rejected():
    with pytest.raises(ValueError, match="unpaired"):
        decide([ArmTrial(1.0)] * 4, [ArmTrial(1.0)] * 3)
    with pytest.raises(ValueError, match="positive"):
        decide([ArmTrial(0.0)] * 4, [ArmTrial(1.0)] * 4)


def test_speedup_and_its_change():
    # seed story: 94 vs 89 tok/s (1.06x) became 60 vs 82 (0.73x)
    before = speedup([89, 89.5, 88.7], [94, 94.2, 93.9])
    after = speedup([82, 82.3, 81.8], [60, 60.4, 59.9])
    assert before.ratio == pytest.approx(94 / 89, rel=0.01)
    assert after.ratio == pytest.approx(60 / 82, rel=0.01)
    change = speedup_change(([89, 89.5, 88.7], [94, 94.2, 93.9]), ([82, 82.3, 81.8], [60, 60.4, 59.9]))
    assert change.ratio == pytest.approx((60 / 82) / (94 / 89), rel=0.01)
    assert change.ci_high < 1
    assert speedup([1.0], [2.0]) is None
    assert math.isclose(speedup([2, 2], [4, 4]).ci_low, 2.0)


def test_the_cost_line_gives_the_gpu_time_and_the_share_in_measured_windows():
    """A compare's cost (issue 42: CompareResult.cost) in one line, minutes from a minute up."""
    from core._experiments.report import cost_line

    assert cost_line({"engines_up_s": 276.0, "measured_s": 96.6, "launches": 16, "measured_share": 0.35}) == (
        "GPU time 4.6 min (engines up, 16 launches), 35% of it in measured windows; the rest is start-up, warm-up "
        "and stops")
    assert cost_line({"engines_up_s": 41.0, "measured_s": 0.0, "launches": 2, "measured_share": None}) == (
        "GPU time 41 s (engines up, 2 launches)")
    assert cost_line({"engines_up_s": 600.0, "measured_s": 300.0, "launches": 8, "windows": 20,
                      "measured_share": 0.5}).startswith("GPU time 10.0 min (engines up, 8 launches, 20 windows), 50%")
