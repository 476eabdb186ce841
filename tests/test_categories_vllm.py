"""Acceptance lives in the prompts: the built-in prompt set's categories on the real CPU test
engine (issue 37). The test engine's draft is prompt-dependent in every commit
(scripts/make_engine_repo.py): on ``main`` it misses from draft position 2 on translation
prompts (acceptance length 2 with three speculative tokens) and never on the others (4);
``code-draft`` also misses from position 1 on code prompts (1). vLLM is started with
``--per-request-spec-decode-metrics summary`` (bot/default.toml), so each response carries its
own acceptance and each category gets its figures (core/_experiments/categories.py).

One compare, ``code-draft`` against ``main`` in eagle3 mode, 2 requests per category of 64
tokens, 4 concurrent pairs, no profile round, in the engine tier (``launch``): in the rest tier its
two engines took the client's CPU from the engine tier's compares for 14 minutes and slowed that
tier from about 1,800 to 2,426 s (2026-12-07), as the wrong-draft compare's had. The plant: code requests go from 4
tokens per verify step to 1, about -65% of their tok/s (a log-ratio of about -1), against pair
spreads of 21-25% seen in this suite (CONTRIBUTING.md): over 4x.
"""

from __future__ import annotations

import pytest

from core._experiments.categories import category_moves
from tests.conftest import record_verdict, vllm_compare

pytestmark = [pytest.mark.engine, pytest.mark.launch, pytest.mark.timeout(1200)]

CATEGORIES = {"chat", "code", "math", "qa", "summarisation", "translation"}


@pytest.fixture(scope="module")
def code_draft(testenv, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("code-draft")
    result, stored = vllm_compare(testenv, workdir, "code-draft", ["eagle3"], workload="categories",
                                  workload_update={"requests": 12, "output_len": 64, "warmup_requests": 2},
                                  pairing="concurrent", margin_pct=5.0, min_trials=4, max_trials=4, profile="never")
    return result, stored


def test_two_categories_read_different_acceptance_in_one_compare(code_draft):
    result, _ = code_draft
    categories = result.verdicts["eagle3"].categories
    found = categories["categories"]
    assert set(found) == CATEGORIES
    # the base (main): translation misses from position 2, the others never
    assert found["translation"]["base_acceptance"] == pytest.approx(2.0, abs=0.1)
    assert found["translation"]["base_per_position"] == pytest.approx([1.0, 0.0, 0.0], abs=0.05)
    for name in CATEGORIES - {"translation"}:
        assert found[name]["base_acceptance"] == pytest.approx(4.0, abs=0.1), name
    assert "acceptance length per category (base -> commit): chat 4.00 -> 4.00, code 4.00 -> 1.00" \
        in categories["line"]


def test_a_draft_that_misses_on_code_regresses_code_only(code_draft, record_property):
    result, stored = code_draft
    verdict = result.verdicts["eagle3"]
    record_verdict(record_property, "code-draft", verdict, result, "eagle3")
    categories = verdict.categories
    verdicts = {name: c["verdict"]["verdict"] for name, c in categories["categories"].items()}
    assert verdicts["code"] == "REGRESSION", categories["line"]
    for name in CATEGORIES - {"code"}:
        assert verdicts[name] in ("NO CHANGE", "INCONCLUSIVE"), categories["line"]  # never a false change
    code = categories["categories"]["code"]
    record_verdict(record_property, "code-draft-code", code["verdict"])
    assert code["head_acceptance"] == pytest.approx(1.0, abs=0.05)
    assert "REGRESSION on code (" in categories["line"] and "position 1: 1.00 -> 0.00) only" in categories["line"]
    assert category_moves(categories) == "REGRESSION on code only"  # the terminal's and Slack's headline words
    # the stored verdict carries the same, and every request its own acceptance
    assert stored.verdicts[0].categories["categories"]["code"]["verdict"]["verdict"] == "REGRESSION"
    requests = [r for t in stored.trials if t.status == "ok" for r in t.requests]
    assert requests and all(r["spec_steps"] and len(r["spec_accepted_per_position"]) == 3 for r in requests)
