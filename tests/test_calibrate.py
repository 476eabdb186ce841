"""``specperf calibrate``: the plan from a spread (core._experiments.calibrate), and an A/A calibration run
on the fast fake engine that compare then uses to plan its first round."""

from __future__ import annotations

import os
import sys

import pytest

import core
import storage
from bot._runs import calibration_plans, plan_request
from core._experiments.calibrate import NoiseSplit, plan, plan_windows
from core._experiments.compare import CompareRequest, PlannedLooks
from core.testing import fake_engine_config
from tests.conftest import ROOT, specperf_in_process


def test_plan_needs_more_launches_and_a_wider_margin_as_the_spread_grows():
    plans = [plan(s) for s in (0.5, 1.0, 2.0, 3.0)]
    pairs = [p.pairs for p in plans]
    assert pairs == sorted(pairs) and pairs[0] < pairs[-1]
    assert all(p.margin_pct < 5.0 for p in plans)  # a margin inside the change to detect
    # the H200 A/A of the issue: CV 1.7-2.3% per arm, so pair spread about 2.4-3.3%: a 2% margin
    # with 6 launches per arm was too little
    h200 = plan(2.4 * 2 ** 0.5 / 1.4)
    assert h200.pairs > 6 and h200.margin_pct > 2.0
    assert plan(50.0).pairs is None and "no margin reaches" in plan(50.0).line()
    with pytest.raises(ValueError):
        plan(0.0)


def test_plan_meets_both_conditions_at_its_size():
    from scipy import stats

    p = plan(2.0)
    k = 0.02 / p.pairs ** 0.5
    t = stats.t.ppf(0.975, p.pairs - 1)
    d = -__import__("math").log1p(-0.05)
    assert p.margin_pct / 100 >= (t + stats.norm.ppf(0.95)) * k - 1e-9
    assert d - p.margin_pct / 100 >= (t + stats.norm.ppf(0.9)) * k - 1e-3
    smaller = p.pairs - 1
    k1 = 0.02 / smaller ** 0.5
    t1 = stats.t.ppf(0.975, smaller - 1)
    assert d < (2 * t1 + stats.norm.ppf(0.9) + stats.norm.ppf(0.95)) * k1  # one pair fewer is not enough


def test_calibrate_stores_the_spread_that_compare_plans_with(repo, tmp_path, unused_tcp_port):
    path, _ = repo
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{path}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {unused_tcp_port}\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n[engines.fake.modes]\nbaseline = []\n'
        # trials judged disturbed (any on a shared machine) are kept: 4 launches, not up to 12
        '[compare]\ncooldown_s = 0\non_disturbed = "keep"\nmodes = ["baseline"]\n'
        '[workloads.default]\noutput_len = 64\nconcurrency = 2\nrequests = 6\nwarmup_requests = 1\n')
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    done = specperf_in_process(["--config", config, "calibrate", "--commit", "base", "--launches", "2",
                                "--db", f"sqlite:///{tmp_path}/db.sqlite"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A/A" in done.stdout and "calibration baseline: " in done.stdout
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    run_id, plans = calibration_plans(db, "fake", "local", "default", core.CompareConfig())
    assert run_id is not None and set(plans) == {"baseline"}
    planned = plans["baseline"]
    assert planned.spread_pct > 0
    # three windows a launch (the default): each request kept with its window, the noise split in
    # two and priced from the run's own cost
    stored = storage.load_run(db, run_id)
    assert stored is not None and stored.run.settings["workload"]["windows"] == 3
    for trial in stored.trials:
        assert sorted({r["window"] for r in trial.requests}) == [0, 1, 2] and len(trial.requests) == 18
    split = planned.split
    assert split is not None and split.windows == 3 and split.start_s > 0 and split.window_s > 0
    assert planned.pairs is None or 1 <= planned.windows <= 8
    assert f"calibration baseline: {planned.line()}" in done.stdout, done.stdout
    assert "between-launch sd" in done.stdout
    # a calibration of launches one at a time says nothing of two engines in turns
    assert calibration_plans(db, "fake", "local", "default", core.CompareConfig(pairing="concurrent")) == (None, {})


def test_compare_keeps_its_first_verdict_and_plans_the_windows_of_the_launches_after_it():
    """The calibration's plan in a compare (bench/WINDOWS_RESULTS.md has why this way), as the
    terminal and the queue put it in (bot._runs.plan_request)."""
    def request(settings: core.CompareConfig) -> CompareRequest:
        return CompareRequest(engine_name="fake", engine=fake_engine_config(ROOT), workload_name="w",
                              workload=core.WorkloadConfig(), head_ref="HEAD", base_ref=None,
                              modes=["baseline", "eagle3"], settings=settings, host=None)

    # no calibration: nothing said, nothing changed
    bare = request(core.CompareConfig())
    assert plan_request(bare, None, {}) == [] and bare.later_windows == {} and bare.planned_trials == {}
    # a plan from a spread alone: one window a launch; looks before its launches are interim looks
    alone = plan(2.0)
    spread = request(core.CompareConfig(min_trials=4, max_trials=8))
    lines = plan_request(spread, 7, {"baseline": alone})
    assert spread.later_windows == {} and spread.planned_trials == {"baseline": PlannedLooks(alone.pairs)}
    assert alone.pairs > 4
    assert lines[0].startswith("calibration (run 7) baseline: launch-to-launch spread 2.0%")
    assert lines[1] == (f"first verdict after 4 launches per arm as without a plan; before they carry the information "
                        f"of the plan's baseline {alone.pairs} launches a look decides only at alpha 0.001")
    # from a noise split: that mode's windows after the first verdict, which stays at min_trials
    split = NoiseSplit(between_pct=0.3, within_pct=3.0, windows=3, start_s=300.0, window_s=60.0)
    planned = plan_windows(split)
    both = request(core.CompareConfig(min_trials=4, max_trials=16))
    lines = plan_request(both, 8, {"baseline": alone, "eagle3": planned})
    assert both.later_windows == {"eagle3": planned.windows} and planned.windows > 1
    assert both.planned_trials == {"baseline": PlannedLooks(alone.pairs),
                                   "eagle3": PlannedLooks(planned.pairs, planned.windows, 0.3, 3.0)}
    assert lines[-1].endswith(f"launches after the first verdict measure eagle3 {planned.windows} windows")
    assert [both.workload_for("eagle3", n).windows for n in range(6)] == [1] * 4 + [planned.windows] * 2
    assert [both.workload_for("baseline", n).windows for n in range(6)] == [1] * 6
