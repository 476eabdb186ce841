"""vLLM acceptance length from whichever spec-decode counter set the version exports (issue 15
item 4), and the verdict naming the missing counter when none fits. Fast tier: no engine."""

from __future__ import annotations

import dataclasses

import pytest

from core import CompareConfig
from core._experiments.compare import verdict_for
from core._experiments.report import position_line
from core._experiments.stats import ArmTrial
from core._measure.engines import NOT_DERIVED, acceptance_per_position, num_speculative_tokens, vllm_acceptance
from core._measure.prometheus import sample_sums

EAGLE3 = ["--speculative-config", '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}']


def test_draft_tokens_without_drafts_counter_uses_k_from_the_mode():
    """The issue's input: V1 before num_drafts existed; 1 + 1800 / (3000 / 3) = 2.8."""
    start = {"vllm:spec_decode_num_draft_tokens_total": 0.0, "vllm:spec_decode_num_accepted_tokens_total": 0.0}
    end = {"vllm:spec_decode_num_draft_tokens_total": 3000.0, "vllm:spec_decode_num_accepted_tokens_total": 1800.0}
    got = vllm_acceptance(start, end, num_speculative_tokens(EAGLE3))
    assert got.acceptance_length == pytest.approx(2.8)
    assert (got.drafts, got.accepted_tokens, got.missing) == (1000, 1800, None)


def test_v0_emitted_tokens_unprefixed_names():
    """V0: emitted (bonus included) / (draft tokens / k); older names lack the vllm: prefix."""
    start = {"spec_decode_num_draft_tokens_total": 400.0, "spec_decode_num_emitted_tokens_total": 100.0,
             "spec_decode_num_accepted_tokens_total": 50.0}
    end = {"spec_decode_num_draft_tokens_total": 2400.0, "spec_decode_num_emitted_tokens_total": 1600.0,
           "spec_decode_num_accepted_tokens_total": 1050.0}
    got = vllm_acceptance(start, end, num_speculative_tokens(["--num-speculative-tokens", "4"]))
    assert got.acceptance_length == pytest.approx(1500 / 500)
    assert got.formula == "emitted / (draft tokens / 4)"


def test_current_counter_set_is_preferred():
    end = {"vllm:spec_decode_num_drafts_total": 500.0, "vllm:spec_decode_num_draft_tokens_total": 1500.0,
           "vllm:spec_decode_num_accepted_tokens_total": 700.0}
    got = vllm_acceptance({}, end, 3)
    assert got.acceptance_length == pytest.approx(2.4) and got.drafts == 500


def test_missing_k_and_missing_counters_are_named():
    end = {"vllm:spec_decode_num_draft_tokens_total": 3000.0, "vllm:spec_decode_num_accepted_tokens_total": 1800.0}
    got = vllm_acceptance({}, end, num_speculative_tokens(["--speculative-config", '{"method": "ngram"}']))
    assert got.acceptance_length is None
    assert "vllm:spec_decode_num_drafts_total is missing" in got.missing
    assert "num_speculative_tokens" in got.missing
    only_accepted = vllm_acceptance({}, {"vllm:spec_decode_num_accepted_tokens_total": 10.0}, 3)
    assert "vllm:spec_decode_num_draft_tokens_total" in only_accepted.missing
    assert vllm_acceptance({}, {"vllm:generation_tokens_total": 9.0}, None).missing is None  # no speculation


def test_num_speculative_tokens_shapes():
    assert num_speculative_tokens(EAGLE3) == 3
    assert num_speculative_tokens(['--speculative_config={"num_speculative_tokens": 5}']) == 5
    assert num_speculative_tokens(["--num-speculative-tokens=2"]) == 2
    assert num_speculative_tokens(["--max-model-len", "512"]) is None


def test_verdict_reason_names_the_missing_counter():
    note = "vllm:spec_decode_num_drafts_total is missing and num_speculative_tokens is not in the mode's arguments"
    trials = {role: [ArmTrial(100.0 + i, None, 10.0, note) for i in range(4)] for role in ("base", "head")}
    verdict = verdict_for(trials, CompareConfig(min_trials=4))
    assert verdict.reason.endswith(f"acceptance length not derived: {note}")
    assert NOT_DERIVED.strip("; ").startswith("acceptance length not derived")


# As vLLM 0.32 writes them (vllm/v1/spec_decode/metrics.py): one counter per position, labelled.
METRICS = '''# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
'''


def test_acceptance_per_position_is_the_window_delta_over_drafts():
    start = sample_sums(METRICS.format(drafts=100, accepted=150, p0=80, p1=50, p2=20), split="position")
    end = sample_sums(METRICS.format(drafts=300, accepted=450, p0=270, p1=130, p2=50), split="position")
    spec = vllm_acceptance(start, end, 3)
    assert spec.acceptance_length == pytest.approx(1 + 300 / 200)
    assert acceptance_per_position(start, end, spec.drafts) == pytest.approx((0.95, 0.40, 0.15))
    assert end["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 450  # the sum over positions stays
    assert acceptance_per_position(start, end, 0) is None
    assert acceptance_per_position({}, {"vllm:spec_decode_num_drafts_total": 5.0}, 5) is None  # no such counter


def test_the_position_that_moved_most_is_named():
    base = [ArmTrial(100.0, 3.6, acceptance_per_position=(0.95, 0.90, 0.75))] * 3
    head = [ArmTrial(80.0, 2.9, acceptance_per_position=(0.95, 0.72, 0.22))] * 3
    line = position_line({"base": base, "head": head})
    assert line == ("acceptance per draft position (share of drafts whose k-th token was accepted, k = 1..3): "
                    "base 0.95 0.90 0.75, commit 0.95 0.72 0.22; position 3 moved most: 0.75 -> 0.22")
    assert position_line({"base": base, "head": base}).endswith("commit 0.95 0.90 0.75")
    unknown = [ArmTrial(100.0, 3.6)] * 2
    assert position_line({"base": unknown, "head": unknown}).startswith("acceptance per draft position not known")
    assert position_line({"base": [ArmTrial(100.0)], "head": [ArmTrial(90.0)]}) is None  # no speculation


def test_requests_without_a_category_are_judged_as_uncategorised():
    from core._experiments.categories import split_by_category
    trial = ArmTrial(100.0, requests=({"category": "code", "output_tokens": 10, "e2e_ms": 100.0},
                                      {"category": None, "output_tokens": 10, "e2e_ms": 200.0}))
    assert {name: t.output_tok_s for name, t in split_by_category(trial).items()} == \
        {"code": 100.0, "uncategorised": 50.0}
    assert split_by_category(ArmTrial(1.0, requests=({"category": None, "output_tokens": 1, "e2e_ms": 1.0},))) == {}


def test_a_categorys_acceptance_comes_from_its_requests_own_figures():
    """vLLM's per-request figures (client: spec_steps, spec_accepted_per_position) give each
    category its acceptance length and per-position shares; SGLang's spec_verify_ct its length."""
    from core._experiments.categories import category_verdicts, split_by_category
    from core._experiments.stats import decide

    def request(category, steps, per_position, tokens=40):
        return {"category": category, "output_tokens": tokens, "e2e_ms": 100.0, "spec_steps": steps,
                "spec_accepted_per_position": per_position}

    base = ArmTrial(100.0, 3.0, requests=(request("code", 10, [10, 10, 10]), request("code", 10, [10, 10, 10]),
                                          request("translation", 20, [20, 0, 0])))
    split = split_by_category(base)
    assert split["code"].acceptance_length == pytest.approx(4.0)
    assert split["code"].acceptance_per_position == pytest.approx((1.0, 1.0, 1.0))
    assert split["translation"].acceptance_length == pytest.approx(2.0)
    assert split["translation"].acceptance_per_position == pytest.approx((1.0, 0.0, 0.0))
    sglang = ArmTrial(100.0, 3.0, requests=({"category": "a", "output_tokens": 30, "e2e_ms": 9.0, "spec_verify_ct": 10},
                                            {"category": "b", "output_tokens": 10, "e2e_ms": 9.0}))
    assert split_by_category(sglang)["a"].acceptance_length == pytest.approx(3.0)
    assert split_by_category(sglang)["b"].acceptance_length is None  # no figure of its own

    head = ArmTrial(100.0, 2.0, requests=(request("code", 40, [0, 0, 0]), request("code", 40, [0, 0, 0]),
                                          request("translation", 20, [20, 0, 0])))
    found = category_verdicts([base] * 4, [head] * 4, 0.05, lambda b, h, a: decide(b, h, margin_pct=3.0, alpha=a))
    assert found["categories"]["code"]["head_per_position"] == [0.0, 0.0, 0.0]
    assert found["line"].endswith("acceptance length per category (base -> commit): code 4.00 -> 1.00, "
                                  "translation 2.00 -> 2.00")
    unknown = ArmTrial(100.0, 3.0, requests=({"category": "a", "output_tokens": 10, "e2e_ms": 9.0},
                                             {"category": "b", "output_tokens": 10, "e2e_ms": 9.0}))
    line = category_verdicts([unknown] * 3, [unknown] * 3, 0.05, lambda b, h, a: decide(b, h, margin_pct=3.0, alpha=a))["line"]
    assert "acceptance per category not known" in line and "--per-request-spec-decode-metrics summary" in line
    plain = dataclasses.replace(unknown, acceptance_length=None)  # baseline: no speculation, nothing to say
    assert "acceptance" not in category_verdicts([plain] * 3, [plain] * 3, 0.05,
                                                 lambda b, h, a: decide(b, h, margin_pct=3.0, alpha=a))["line"]
