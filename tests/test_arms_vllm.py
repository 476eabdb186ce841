"""Arms beyond commits on the real CPU test engine (issue 39): ``specperf compare main --base-env
SPECPERF_TESTEXT_STEP_SLOWDOWN=0`` with the embedded default config's engine given the test
plugin's step slowdown (``SPECPERF_TESTEXT_STEP_SLOWDOWN = "1.0"``: every decode step busy-waits
as long again, in every commit; scripts/make_engine_repo.py). The two arms run one commit on two
set-ups that differ only in that variable: REGRESSION in both modes, the variable named first in
what differs between the arms, in the terminal and the JSON report.

Four pairs per mode, fixed (``--max-trials 4``), in the embedded default's concurrent pairing:
16 engine starts, two at a time on CPU 1 (639 s on 2026-12-07, the engine tier's longest test).
Two pairs were not enough: in the suite of 2026-12-07 baseline read INCONCLUSIVE -55.4%
(-75.5 .. above -3%) after two pairs, a pair sd near 0.067 in log, with the t interval's
half-width 9 sd at two pairs. The plant is about -60% of tok/s (a log change near -0.9;
tests/test_history_vllm.py measured -61.9% for the same variable), at the default 3% margin; at
four pairs the half-width is 1.6 sd, so the plant decides while that sd stays under 0.5: a ratio
of 7 against the 0.067 seen.
"""

from __future__ import annotations

import json
import os
import pytest

from core._experiments.stats import REGRESSION
from tests.conftest import record_verdict, slowed_default_config, specperf_in_process

pytestmark = [pytest.mark.engine, pytest.mark.launch, pytest.mark.timeout(1200)]

VARIABLE = "SPECPERF_TESTEXT_STEP_SLOWDOWN"


def test_one_variable_between_two_set_ups_is_a_regression_with_the_variable_named_first(testenv, tmp_path,
                                                                                          record_property):
    # the plugin's variable at 1.0 in the engine's environment (the commit's set-up), no profile round
    config = slowed_default_config(tmp_path / "specperf.toml", "1.0")
    env = {**os.environ, "SPECPERF_TESTENV": str(testenv), "SPECPERF_HOME": str(tmp_path / "home")}
    done = specperf_in_process(["--config", str(config), "compare", "main", "--base-env", f"{VARIABLE}=0",
                                "--max-trials", "4", "--db", f"sqlite:///{tmp_path}/db.sqlite",
                                "--json", str(tmp_path / "report.json")], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    first = f"engine env {VARIABLE}: 0 -> 1.0"
    assert f"their set-ups differ in: {first}" in done.stdout, done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["environment"]["arms_differ"][0] == first, report["environment"]
    for mode in ("baseline", "eagle3"):
        verdict = report["modes"][mode]["verdict"]
        record_verdict(record_property, mode, verdict)
        assert verdict["verdict"] == REGRESSION, (mode, verdict)
        assert -85.0 < verdict["change_pct"] < -30.0, (mode, verdict)  # only rules out nonsense
    # the terminal says what differs where the verdict is shown
    assert f"environment differs between the arms: {first}" in " ".join(done.stdout.split()), done.stdout
