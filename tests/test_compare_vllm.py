"""Compare on the real CPU test engine, launched from worktrees of the planted engine
repository (scripts/make_engine_repo.py): each branch plants one known change. The
broken-draft branch (acceptance collapses) runs through the Slack bot and an SSH host in
tests/test_bot_vllm_ssh.py.

Slow: every launch of vLLM takes about half a minute. The launches are shared: the
``slow-spec`` compare (20 launches and a profile round of 2, tests/conftest.py) is measured once
per session and asserted on here, in tests/test_disturbance_vllm.py (the CPU hog during two of
its launches) and in tests/test_vllm_engine.py. Its eagle3 mode is the suite's real-engine proof
of a step-time REGRESSION and of the profile round (the planted op named); its baseline mode,
where slow-spec changes nothing, is an A/A compare, which gets no profile round.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot._runs import stored_report
from core._experiments.stats import INCONCLUSIVE, NO_CHANGE, REGRESSION
from tests.conftest import default_config, group_members, record_verdict, vllm_compare

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def no_engine_left(stored) -> bool:
    return all(group_members(t.pgid, t.log_path) == [] for t in stored.trials if t.pgid)


def test_speculative_only_slowdown_moves_eagle3_and_leaves_baseline(slow_spec_compare, record_property):
    result, stored = slow_spec_compare.result, slow_spec_compare.stored
    assert result.status == "done", result.reason
    assert result.imported["head"]["from_worktree"]
    baseline, eagle3 = result.verdicts["baseline"], result.verdicts["eagle3"]
    record_verdict(record_property, "baseline", baseline, result, "baseline")
    record_verdict(record_property, "eagle3", eagle3, result, "eagle3")
    # baseline is left as it was: no verdict of a change. NO CHANGE needs the whole interval
    # inside the 5% margin, which launch-to-launch spread on a shared 2-vCPU VM (undisturbed
    # launches of one arm 221-389 tok/s on 2026-12-02) denies within 4 pairs: INCONCLUSIVE is then
    # the honest verdict. The estimate itself is not bounded here: with that spread the mean of 4
    # pair ratios has a standard error near 10%, so any bound tight enough to mean something
    # fails runs where nothing is wrong (|change| < 5% failed at +12.4% and +8.4% on 2026-12-02).
    assert baseline.verdict in (NO_CHANGE, INCONCLUSIVE), baseline
    assert eagle3.verdict == REGRESSION, eagle3
    assert abs(eagle3.acceptance_change_pct) < 1.0  # acceptance unchanged...
    assert eagle3.step_ms_change_pct > 5.0  # ...the verify step got slower
    assert eagle3.attribution == "step time"
    assert {v.mode: v.verdict for v in stored.verdicts} == {m: v.verdict for m, v in result.verdicts.items()}
    assert no_engine_left(stored)
    # a slower proposer changes no answer: the same in both arms of both modes, and eagle3 gives
    # baseline's answers on both commits (lossless under greedy sampling)
    assert baseline.outputs["status"] == eagle3.outputs["status"] == "same"
    assert eagle3.outputs["same"] == baseline.outputs["same"] == 16  # the default workload's requests
    report, _ = stored_report(stored)
    assert [n for n in report["modes"]["eagle3"]["notes"] if n.startswith("eagle3 against baseline on the")] == [
        "eagle3 against baseline on the base: 16 of 16 requests the same in both (lossless under greedy sampling)",
        "eagle3 against baseline on the commit: 16 of 16 requests the same in both (lossless under greedy sampling)"]


@pytest.mark.launch  # two vLLM engines at once for minutes: on the rest tier's CPU they disturbed its other tests
def test_a_draft_accepted_where_the_target_disagrees_changes_the_answers_and_is_said_first(testenv, tmp_path):
    """wrong-draft (scripts/make_engine_repo.py): proposals shifted by one token and every one
    accepted, so eagle3 keeps its full acceptance and emits the draft's tokens. Two concurrent
    pairs per mode (the answers are the subject, not the speed). (The unrelated draft's "never
    accepted" note is asserted through Slack in tests/test_bot_vllm_ssh.py; its mode here cost
    four launches, about 130 s of the engine tier, issue 41.)"""
    result, stored = vllm_compare(testenv, tmp_path, "wrong-draft", ["baseline", "eagle3"],
                                  pairing="concurrent", min_trials=2, max_trials=2, profile="never", on_disturbed="keep")
    assert result.status == "done", result.reason
    eagle3, baseline = result.verdicts["eagle3"].outputs, result.verdicts["baseline"].outputs
    assert eagle3["status"] == "changed" and eagle3["changed"] == 16 and eagle3["first"]["request"] == 0
    assert eagle3["first"]["base"].startswith("!!!!") and eagle3["first"]["head"] != eagle3["first"]["base"]
    assert baseline["status"] == "same" and baseline["same"] == 16  # baseline never runs the draft
    report, _ = stored_report(stored)
    assert report["modes"]["eagle3"]["above"][0].startswith("OUTPUTS CHANGED in eagle3: 16 of 16 requests differ")
    assert report["modes"]["baseline"]["above"] == []
    notes = report["modes"]["eagle3"]["notes"]
    assert "eagle3 against baseline on the base: 16 of 16 requests the same in both (lossless under greedy sampling)" \
        in notes
    assert any(n.startswith("eagle3 is not lossless on the commit: 16 of 16 requests differ from baseline") for n in notes)
    assert all(t.acceptance_length == 4.0 for t in stored.trials if stored.arms[t.arm_id].mode == "eagle3")
    assert no_engine_left(stored)


def _planted_matmul_ms(testenv) -> float:
    """What slow-spec plants, timed here: the median of 30 products of a 1152x1152 float32
    matrix with itself (scripts/make_engine_repo.py), one thread, on the engine's CPU."""
    cpu = default_config(testenv).engine("tiny-vllm").cpus[0]
    code = ("import statistics, time, torch\n"
            "torch.set_num_threads(1)\n"
            "a = torch.randn(1152, 1152)\n"
            "[torch.mm(a, a) for _ in range(3)]\n"
            "times = []\n"
            "for _ in range(30):\n"
            "    start = time.perf_counter(); torch.mm(a, a); times.append(time.perf_counter() - start)\n"
            "print(statistics.median(times) * 1000)\n")
    out = subprocess.run(["taskset", "--cpu-list", str(cpu), str(testenv / "engine-venv/bin/python"), "-c", code],
                         check=True, capture_output=True, text=True, timeout=120)
    return float(out.stdout.split()[-1])


def test_the_profile_round_names_the_planted_matmul_first_at_its_cost(slow_spec_compare, testenv):
    """Issue 27: eagle3's REGRESSION gets one profiled launch per arm (profile = "on-change", the
    default); the diff names slow-spec's extra matmul first, one more ``aten::mm`` call per draft
    proposal, adding within 30% of what that product costs on the engine's CPU; baseline, an A/A
    with no verdict of a change, gets no profile round. (Whether the base runs ``aten::mm`` at
    all is the CPU's business: on the VM the fixtures came from, vLLM's linear layers ran as
    ``_C::onednn_mm`` and the base had none, 2026-12-03; on an AMD EPYC VM without AVX-512 they
    ran as ``aten::mm`` too, 32.5 calls a step on the base, 2026-12-04.)"""
    result = slow_spec_compare.result
    assert result.verdicts["eagle3"].verdict == REGRESSION
    assert "baseline" not in result.profiles, result.profiles.get("baseline")
    profile = result.profiles["eagle3"]
    assert profile["status"] == "done", profile
    first = profile["ops"][0]
    assert (first["name"], first["category"]) == ("aten::mm", "GEMM"), profile["line"]
    added_calls = first["head_calls"] - first["base_calls"]
    assert added_calls == pytest.approx(1.0, abs=0.15), first
    planted_ms = _planted_matmul_ms(testenv) * added_calls
    assert first["change_ms"] == pytest.approx(planted_ms, rel=0.3), (first, planted_ms)
    assert profile["line"].startswith("op time per step +") and "`aten::mm` (GEMM)" in profile["line"]
    for role in ("base", "head"):
        assert profile[role]["device"] == "cpu" and profile[role]["steps"]
        assert profile[role]["traces"] and all(Path(path).is_file() for path in profile[role]["traces"])
    stored = slow_spec_compare.stored
    assert {s.phase for s in stored.snapshots if s.phase.startswith("profile-")} == {"profile-eagle3"}


def test_launches_go_abba_per_mode_on_one_port(slow_spec_compare):
    stored = slow_spec_compare.stored
    for mode in ("baseline", "eagle3"):
        roles = [stored.arms[t.arm_id].role for t in stored.trials if stored.arms[t.arm_id].mode == mode]
        assert len(roles) % 4 == 0 and roles[:4] == ["base", "head", "head", "base"], (mode, roles)
    ports = {t.argv[t.argv.index("--port") + 1] for t in stored.trials}
    assert len(ports) == 1


def test_commit_that_fails_to_start_is_a_failed_run(testenv, tmp_path):
    result, stored = vllm_compare(testenv, tmp_path, "fails-to-start", ["baseline"], pinned=False)
    assert result.status == "failed"
    assert stored.run.status == "failed"
    # the plugin is checked by import before any launch, or the engine dies at start: either
    # way the reason and the log tail say why
    assert "breaks engine start-up" in (result.log_tail or "") + result.reason
    assert stored.verdicts == []
