"""Windows per launch (issue 42): a launch's windows and their figures (core._measure.client
``tok_s_by_window``, ``ArmTrial.window_tok_s``), the noise split of a calibration into between-
and within-launch parts and the plan of launches x windows from it (core._experiments.calibrate),
and the launch as the statistics' unit: more windows never turn an A/A with a large launch effect
into a change. A real launch with several windows: tests/test_calibrate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core._experiments.calibrate import NoiseSplit, noise_split, plan, plan_windows
from core._experiments.stats import IMPROVEMENT, REGRESSION, ArmTrial, decide
from core._measure.client import tok_s_by_window


def test_a_windows_time_is_while_one_of_its_requests_is_in_flight():
    # window 0: two overlapping requests 0..2 s and 1..3 s (100 tokens each): 200 tokens in 3 s;
    # window 1: one arm's two turns 10..11 s and 13..14 s, the other arm's between them: 2 s
    requests = [(0, 0.0, 2.0, 100), (0, 1.0, 3.0, 100), (1, 10.0, 11.0, 50), (1, 13.0, 14.0, 50)]
    assert tok_s_by_window(requests) == pytest.approx([200 / 3, 50.0])
    assert tok_s_by_window([]) == []
    # as stored: each request's window, when it was sent (ms after the first) and its e2e
    trial = ArmTrial(0.0, requests=tuple({"window": w, "sent_ms": s * 1000, "e2e_ms": (e - s) * 1000,
                                          "output_tokens": t} for w, s, e, t in requests))
    assert trial.window_tok_s == pytest.approx([200 / 3, 50.0])
    assert ArmTrial(1.0, requests=({"e2e_ms": 5.0, "output_tokens": 3},)).window_tok_s == []  # stored before windows


def _launches(rng, pairs: int, windows: int, between: float, within: float, change: float = 0.0):
    """``pairs`` A/B launch pairs of ``windows`` windows each, as ArmTrials: each launch's own
    offset (log sd ``between``), each window's (log sd ``within``), the head ``change`` (log)
    slower; a launch's figure is over all its windows (their mean, the windows being of equal length)."""
    arms = []
    for shift in (0.0, change):
        trials = []
        for _ in range(pairs):
            level = 1000.0 * math.exp(shift + rng.normal(0.0, between))
            values = level * np.exp(rng.normal(0.0, within, windows))
            docs = tuple({"window": k, "sent_ms": 1000.0 * k, "e2e_ms": 1000.0, "output_tokens": float(v)}
                         for k, v in enumerate(values))
            trials.append(ArmTrial(float(values.mean()), requests=docs))
        arms.append(trials)
    return arms


def test_the_noise_split_finds_the_between_and_within_launch_parts():
    rng = np.random.default_rng(42)
    base, head = _launches(rng, pairs=60, windows=4, between=0.02, within=0.01)
    split = noise_split(base, head, {"engines_up_s": 600.0, "measured_s": 120.0, "launches": 120})
    assert split is not None and split.windows == 4
    # a pair change's launch part is two launches' (2 * 2%^2), its window part two windows' (2 * 1%^2)
    assert split.between_pct == pytest.approx(100 * math.sqrt(2) * 0.02, rel=0.25)
    assert split.within_pct == pytest.approx(100 * math.sqrt(2) * 0.01, rel=0.15)
    assert split.start_s == pytest.approx(4.0) and split.window_s == pytest.approx(0.25)
    assert "between-launch sd" in split.line() and "start 4 s, window 0.2 s" in split.line()
    one_window = _launches(rng, pairs=10, windows=1, between=0.02, within=0.01)
    assert noise_split(*one_window) is None  # nothing to split with one window per launch


def test_the_plan_buys_windows_only_where_they_pay():
    # the seed's scale: a 300 s start, a 60 s window
    launch_noise = NoiseSplit(between_pct=2.0, within_pct=0.3, windows=3, start_s=300.0, window_s=60.0)
    assert plan_windows(launch_noise).windows == 1  # windows cannot average a launch's own offset away
    window_noise = NoiseSplit(between_pct=0.3, within_pct=3.0, windows=3, start_s=300.0, window_s=60.0)
    planned = plan_windows(window_noise)
    one = plan(window_noise.pair_sd_pct(1))
    assert planned.windows > 1 and planned.pairs < one.pairs
    assert planned.pairs * (300 + 60 * planned.windows) < one.pairs * (300 + 60)
    assert planned.line().startswith(f"{planned.pairs} launches x {planned.windows} windows per arm (between-launch "
                                     "sd 0.30%, within 3.00%, start 300 s, window 60.0 s): a margin of")
    # within a compare's cap of launches per arm: more windows, or no plan at all
    cheap_start = NoiseSplit(between_pct=0.3, within_pct=3.0, windows=3, start_s=60.0, window_s=60.0)
    free = plan_windows(cheap_start)  # 10 launches x 2 windows
    capped = plan_windows(cheap_start, max_pairs=free.pairs - 1)
    assert capped.pairs is not None and capped.pairs < free.pairs and capped.windows > free.windows
    assert plan_windows(launch_noise, max_pairs=3).pairs is None  # a launch offset no windows can average away
    # windows that cost as much as a launch: the fewest launches would waste GPU time on windows
    dear = NoiseSplit(between_pct=0.3, within_pct=3.0, windows=3, start_s=1.0, window_s=300.0)
    assert plan_windows(dear).windows < planned.windows


@pytest.mark.parametrize("pairs", [4, 8])
def test_more_windows_never_turn_a_launch_effect_into_a_change_on_an_a_a(pairs):
    """Every launch carries its own offset (sd 4%), its windows are nearly the same (0.1%): with
    8 windows a launch and a tight 0.5% margin, 300 A/A compares (seeded) give no more false
    changes than the 5% the test allows (9 and 8 of 300 seen), while counting windows as if each
    were a launch calls 119 and 108 of them a change."""
    rng = np.random.default_rng(7)
    ours = naive = 0
    for _ in range(300):
        base, head = _launches(rng, pairs=pairs, windows=8, between=0.04, within=0.001)
        if decide(base, head, margin_pct=0.5).verdict in (REGRESSION, IMPROVEMENT):
            ours += 1
        # the mistake this guards against: every window a pair of its own
        as_pairs = [[ArmTrial(d["output_tokens"]) for t in arm for d in t.requests] for arm in (base, head)]
        if decide(*as_pairs, margin_pct=0.5).verdict in (REGRESSION, IMPROVEMENT):
            naive += 1
    assert ours <= 15, ours  # 5% of 300
    assert naive >= 80, naive


def test_a_look_before_the_plans_information_decides_only_at_the_interim_alpha():
    """verdict_for with a calibration's plan of 8 launches per arm: 4 pairs whose p (about
    0.009) is under the compare's 0.05 but not under the interim 0.001 stay INCONCLUSIVE and say
    why; the same pairs with no plan, or with the plan's launches reached, are a REGRESSION. A
    plan of 4 launches x 3 windows on a host whose noise is within launches: 4 launches of one
    window carry a third of its information (an interim look), 4 of 3 windows all of it."""
    from core._config import CompareConfig
    from core._experiments.compare import INTERIM_ALPHA, PlannedLooks, verdict_for
    from core._experiments.stats import INCONCLUSIVE

    settings = CompareConfig(min_trials=4, max_trials=16, margin_pct=2.0)

    def trials(ratios, windows=1):
        def trial(tok_s):  # ``windows`` windows of one request each, every one at ``tok_s``
            return ArmTrial(tok_s, requests=tuple({"window": k, "sent_ms": 1000.0 * k, "e2e_ms": 1000.0,
                                                   "output_tokens": round(tok_s)} for k in range(windows)))
        return {"base": [trial(1000.0) for _ in ratios], "head": [trial(1000.0 * math.exp(r)) for r in ratios]}

    four = [-0.14, -0.10, -0.06, -0.10]
    assert verdict_for(trials(four), settings).verdict == REGRESSION
    interim = verdict_for(trials(four), settings, planned=PlannedLooks(8))
    assert interim.verdict == INCONCLUSIVE and INTERIM_ALPHA < interim.p_value < settings.alpha
    assert interim.reason.startswith("an interim look, 4 launches per arm carrying 50% of the information of the 8 "
                                     "launches per arm the calibration planned: decided here only at alpha 0.001 "
                                     "(the 99.9% interval)"), interim.reason
    from core._experiments.report import ci_label

    assert ci_label(interim.alpha) == "99.9% CI"  # what the terminal and Slack name its interval
    assert verdict_for(trials(four * 2), settings, planned=PlannedLooks(8)).verdict == REGRESSION
    # a change clear at the first verdict stops the compare there, plan or not
    assert verdict_for(trials([-0.16, -0.15, -0.17, -0.16]), settings, planned=PlannedLooks(8)).verdict == REGRESSION
    # windows count by the information they carry, not by the launches
    windowed = PlannedLooks(4, windows=3, between_pct=0.0, within_pct=3.0)
    assert windowed.share([1] * 4) == pytest.approx(1 / 3) and windowed.share([3] * 4) == pytest.approx(1.0)
    one = verdict_for(trials(four), settings, planned=windowed)
    assert one.verdict == INCONCLUSIVE and "4 launches per arm carrying 33% of the information of the 4 launches x 3 " \
        "windows per arm" in one.reason, one.reason
    assert verdict_for(trials(four, windows=3), settings, planned=windowed).verdict == REGRESSION
    # the compare's last look (max_trials) is at its own alpha, whatever share of the plan it reached
    last = verdict_for(trials(four), CompareConfig(min_trials=4, max_trials=4, margin_pct=2.0), planned=PlannedLooks(8))
    assert last.verdict == REGRESSION and last.alpha == 0.05, last
    # stored runs: the plan as a dict, or the bare count runs kept before windows counted, with
    # that rule's interim alpha, so their verdicts recompute as they were given
    assert PlannedLooks.from_stored(windowed.to_dict()) == windowed
    assert PlannedLooks.from_stored(8) == PlannedLooks(8, interim_alpha=0.005)
    assert verdict_for(trials(four), settings, planned=PlannedLooks.from_stored(8)).alpha == 0.005
