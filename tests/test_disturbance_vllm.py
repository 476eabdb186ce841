"""Disturbed trials on the real CPU test engine (pinned to CPU 1 by the default config), on the
session's slow-spec compare (tests/conftest.py): a CPU hog on the engine's CPU during the base's
eagle3 launches of round 1 (``HOGGED``) is seen by the window monitor and named by pid and
command; both pairs of the hogged round are left out and measured again, and the verdicts are
those of an undisturbed run of the same commits: eagle3's REGRESSION stands (the hog on the
base would hide it), and baseline, never hogged, is an A/A compare whose launches are all quiet
and kept. No launch of its own: the hogged round costs the session compare four.
"""

from __future__ import annotations

import pytest

from bot._runs import stored_report
from core._experiments.stats import REGRESSION
from tests.conftest import HOGGED

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def test_hog_on_the_engine_cpu_is_named_and_its_pairs_measured_again(slow_spec_compare):
    result, stored, hog = slow_spec_compare.result, slow_spec_compare.stored, slow_spec_compare.hog
    assert result.status == "done", result.reason
    assert sorted(hog.pids) == sorted(HOGGED)
    for seq in HOGGED:
        hogs = [c for c in result.disturbed[seq].culprits if c.pid == hog.pids[seq]]
        assert hogs, (seq, result.disturbed[seq].reasons)
        assert "specperf-test-hog" in hogs[0].command and hogs[0].cpu_s_per_s > 0.1
    quiet = {seq: d.reasons for seq, d in result.disturbed.items() if seq not in HOGGED}
    assert quiet == {}, f"launches without the hog judged disturbed (other load on the engine's CPU?): {quiet}"
    # every launch has a window from the monitor
    assert len(result.windows) == len(stored.trials) and all("cpu" in w for w in result.windows.values())

    # the hog bit: each hogged launch is slower than every undisturbed launch of its arm
    tok_s = {seq: t.sample.output_tok_s for seq, t in zip(result.seqs["eagle3"]["base"], result.trials["eagle3"]["base"])}
    undisturbed = [v for seq, v in tok_s.items() if seq not in HOGGED]
    assert all(tok_s[seq] < 0.9 * min(undisturbed) for seq in HOGGED), tok_s
    # ...so both pairs of eagle3's round 1 are left out and measured again; baseline keeps all
    assert result.left_out == {"baseline": [], "eagle3": [0, 1]}
    assert [len(result.seqs[mode]["base"]) for mode in ("baseline", "eagle3")] == [4, 6]
    assert result.verdicts["eagle3"].verdict == REGRESSION, result.verdicts

    # `specperf show` judges the stored windows again: the same launches, the same culprit
    report, _ = stored_report(stored)
    assert report["headline"].startswith("host busy: 2 of 20 trials disturbed (2 pairs re-measured)"), report["headline"]
    assert any(f"pid {pid}" in report["headline"] for pid in hog.pids.values()) and "launch" in report["headline"]
    rows = {r["seq"]: r for r in report["launches"]}
    assert [s for s, r in rows.items() if r["disturbed"]] == sorted(HOGGED)
    assert [s for s, r in rows.items() if not r["kept"]] == [5, 6, 7, 8]
    assert report["modes"]["baseline"]["base"]["trials"] == 4
    assert report["modes"]["eagle3"]["base"]["trials"] == 4
