"""Was the good number real, on the real CPU test engine (issue 26): the session compare's
stored run (``slow-spec`` against ``main``, tests/conftest.py) is the past; then an engine
environment variable that the test engine's plugin reads (``SPECPERF_TESTEXT_STEP_SLOWDOWN``:
every decode step busy-waits as long again, in every commit; scripts/make_engine_repo.py) is set in
the config, and ``specperf compare slow-spec --base main --modes baseline`` runs again.

In baseline mode ``slow-spec`` runs the same code as ``main`` (its change is on the speculative
path only), so this is the issue's ``compare noop --base base``: an A/A between the arms, with
both arms' commits measured before by the session compare. The report must say both arms are
about -60% below that stored run, the changed variable named first, and never that the drop
is between the commits.

Three paired launches in the embedded default's concurrent pairing (``--max-trials 3``: about
5 minutes; each pair starts two engines on CPU 1). The verdict between the arms is NO CHANGE
or INCONCLUSIVE: in this tier the benchmark client's CPU 0 is shared with the rest of the suite
by design, which moved pair changes by 4.5% (sd) in the run of 2026-12-05 (INCONCLUSIVE +2.4%
after 6 pairs at the 5% margin); the quiet machine's A/A is bench/DEMO_RESULTS.md's (NO CHANGE
5 of 5).
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from core._experiments.stats import INCONCLUSIVE, NO_CHANGE
from tests.conftest import record_verdict, slowed_default_config, specperf_in_process

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]

VARIABLE = "SPECPERF_TESTEXT_STEP_SLOWDOWN"
# Each decode step twice as long (-50% tok/s in decode, about -62% measured). At 0.3 the check
# read "unsettled" once in four suite runs (2026-12-05 05:56: base -17.8% (-30.2 .. -1.7)); at
# 0.6 (about -40%) once in CI (2026-12-06 20:15, head unsettled): the past is the session
# compare's four sequential launches beside the rest tier, whose level moved between 263 and 361
# tok/s (sd of log tok/s up to 0.13), and "below" must clear both runs' spread and the drift
# allowed between runs (core/_history/check.py), about +-0.5 in log at 4 against 3 launches.
# At 1.0 it read -61.9% (-67.3 .. -54.1), a log change of -0.97: about 2x that. Three pairs, not
# four, keep the test's time where 0.6 at four had it (the slower decode makes each window longer).
SLOWDOWN = "1.0"
PAIRS = 3


def test_both_arms_below_their_stored_run_name_the_engine_variable_that_moved(slow_spec_compare, testenv,
                                                                                 tmp_path, record_property):
    past = slow_spec_compare.stored.run
    assert past.head_ref == "slow-spec" and "baseline" in past.modes
    db = tmp_path / "db.sqlite"
    with sqlite3.connect(slow_spec_compare.db_path) as source, sqlite3.connect(db) as copy:
        source.backup(copy)  # the session's database, its WAL included; the session run stays as it was
    # the plugin's variable at SLOWDOWN, with the session compare's margin (5%) and disturbance rules
    config = slowed_default_config(tmp_path / "specperf.toml", SLOWDOWN, ("margin_pct = 3.0", "margin_pct = 5.0"))
    env = {**os.environ, "SPECPERF_TESTENV": str(testenv), "SPECPERF_HOME": str(tmp_path / "home")}

    done = specperf_in_process(["--config", str(config), "compare", "slow-spec", "--base", "main", "--modes",
                                "baseline", "--min-trials", str(PAIRS), "--max-trials", str(PAIRS), "--db", f"sqlite:///{db}",
                                "--json", str(tmp_path / "report.json")], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["settings"]["pairing"] == "concurrent"

    verdict = report["modes"]["baseline"]["verdict"]
    assert verdict["verdict"] in (NO_CHANGE, INCONCLUSIVE), verdict  # the same code on both sides
    checks = {c["role"]: c for c in report["history"]}
    assert set(checks) == {"base", "head"}, report["history"]
    for role, sha in (("base", past.base_sha), ("head", past.head_sha)):
        check = checks[role]
        record_verdict(record_property, role, check)
        assert check["run_id"] == past.id and check["sha"] == sha and check["outcome"] == "below", check
        # at 0.3 it measured -17.6 .. -39.7% in four suite runs on 2026-12-05, at 1.0 -61.9%: the past
        # is the session compare's 4 sequential launches, whose level moved between 263 and 361 tok/s
        # (the quiet machine: 355-365 in both pairings), and today's client shares CPU 0 with the rest
        # tier. "below" (beyond both runs' spread) is the finding; this bound only rules out nonsense.
        assert -85.0 < check["change_pct"] < -35.0, check
        assert check["changes"][0] == f"env {VARIABLE} (unset) -> {SLOWDOWN}", check["changes"]
    first = report["headline"].splitlines()[0]
    assert first.startswith("baseline: both arms are about -"), first
    assert f"below their earlier runs (run {past.id} of " in first
    assert f"while the verdict between them is {verdict['verdict']}" in first
    assert f"the drop is not between these commits; since then: env {VARIABLE} (unset) -> {SLOWDOWN}" in first
    # the terminal shows it (up to the variable: rich folds the long worktree paths that follow)
    shown = first[:first.index(f"env {VARIABLE}") + len(f"env {VARIABLE} (unset) -> {SLOWDOWN}")]
    assert " ".join(shown.split()) in " ".join(done.stdout.split()), done.stdout
