"""The outputs check's rules (core._experiments.outputs), the client's settings in the
fingerprint diff, and natural output length through the real client and an exact-rate server."""

from __future__ import annotations

import asyncio

import core
from core._env.fingerprint import diff_snapshots
from core._experiments.compare import verdict_for
from core._experiments.outputs import compare_answers, degenerate_lines, lossless_lines, repetition_loop
from core._experiments.report import summarize
from core._experiments.stats import ArmTrial
from core._measure.client import request_settings, run_workload
from core.testing import ExactRateServer

PROSE = ("The draft model proposes a few tokens and the target checks them in one step; when most are "
         "accepted, each step emits several tokens, so throughput rises without changing the answer.")


def launch(texts: list[str], tok_s: float = 100.0, acceptance: float | None = None, category: str = "chat") -> ArmTrial:
    return ArmTrial(tok_s, acceptance, requests=tuple({"text": t, "category": category, "output_tokens": 16,
                                                       "e2e_ms": 100.0} for t in texts))


def answers_of(n: int, tag: str = "a") -> list[str]:
    return [f"{tag} answer number {i}: {PROSE[:40]}" for i in range(n)]


def test_an_arm_that_disagrees_with_itself_once_is_not_changed():
    same = answers_of(16)
    noisy = list(same)
    noisy[5] = "a different answer on one launch"
    base = [launch(same), launch(noisy), launch(same), launch(same)]
    head = [launch(same)] * 4
    check = compare_answers(base, head)
    assert check["status"] == "same" and check["unstable"] == 1 and check["changed"] == 0 and check["same"] == 15
    assert "1 vary from launch to launch" in check["line"]
    # one request changed for good beside one that varies on its own: no more than the noise
    moved = list(same)
    moved[9] = "a new answer"
    assert compare_answers(base, [launch(moved)] * 4)["status"] == "same"
    # every answer changed: beyond what the arms show on their own
    changed = compare_answers(base, [launch(answers_of(16, "b"))] * 4)
    assert changed["status"] == "changed" and changed["changed"] == 15
    assert changed["first"]["request"] == 0 and changed["first"]["char"] == 0
    assert changed["first"]["category"] == "chat"
    assert compare_answers([ArmTrial(1.0)], head) is None  # runs stored before texts were kept


def test_the_first_difference_is_found_inside_the_answer():
    base = [launch(["The answer is 42 because six times seven is forty-two."])]
    head = [launch(["The answer is 41 because six times seven is forty-two."])]
    check = compare_answers(base, head)
    assert check["first"]["char"] == 15 and check["first"]["base"] == "...nswer is 42 because six times seven is f"
    assert "from character 15" in check["line"]


def test_repetition_loops_are_flagged_and_ordinary_text_is_not():
    ordinary = [PROSE, "def f(x):\n    return x + 1\n\nprint(f(1))\n", "1. eggs\n2. milk\n3. bread\n4. tea\n",
                "t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 t11 t12 t13 t14 t15", "Yes.", ""]
    assert not any(repetition_loop(t) for t in ordinary)
    loops = ["!" * 64, PROSE[:60] + " the the the the the the the the the the the the the the the the the the",
             "Sure. " + "I am sorry. " * 12, "abc" * 16]
    assert all(repetition_loop(t) for t in loops)


def test_degenerate_runs_are_named_per_arm():
    looping = [launch(["!" * 48] * 8, acceptance=1.0)] * 2
    healthy = [launch(answers_of(8), acceptance=3.2)] * 2
    lines = degenerate_lines({"base": healthy, "head": looping}, speculative=True)
    assert lines[0].startswith("commit: the draft is never accepted (acceptance length 1.00)")
    assert lines[1].startswith("commit: 8 of 8 answers end in a repetition loop (e.g. request 0:")
    empty = [launch([""] * 4)] * 2
    assert degenerate_lines({"base": empty, "head": empty}, speculative=False) == \
        ["both arms: 4 of 4 answers are empty (e.g. request 0)"]
    assert degenerate_lines({"base": healthy, "head": healthy}, speculative=True) == []


def test_the_lossless_check_compares_a_speculative_mode_with_baseline_on_each_side():
    plain = {"base": [launch(answers_of(4))] * 2, "head": [launch(answers_of(4))] * 2}
    eagle = {"base": [launch(answers_of(4))] * 2, "head": [launch(answers_of(4, "z"))] * 2}
    lines = lossless_lines("eagle3", eagle, plain)
    assert lines[0].startswith("eagle3 against baseline on the base: 4 of 4 requests the same in both")
    assert lines[1].startswith("eagle3 is not lossless on the commit: 4 of 4 requests differ from baseline")


def test_a_changed_mode_is_said_above_its_verdict_and_lengths_that_differ_are_named():
    settings = core.CompareConfig(margin_pct=3.0)
    base = [launch(answers_of(8), tok_s=100.0 + i) for i in range(4)]
    head = [ArmTrial(130.0 + i, requests=tuple({"text": f"other {j}", "output_tokens": 8, "e2e_ms": 50.0}
                                               for j in range(8))) for i in range(4)]
    verdict = verdict_for({"base": base, "head": head}, settings)
    assert verdict.verdict == "IMPROVEMENT" and verdict.outputs["status"] == "changed"
    report = summarize({"baseline": {"base": base, "head": head}}, {"baseline": verdict}, settings)
    above = report["modes"]["baseline"]["above"]
    assert above[0].startswith("OUTPUTS CHANGED in baseline: 8 of 8 requests differ from base")
    assert above[1] == ("answers differ in length in baseline: base 16.0 tokens on average, commit 8.0: tok/s "
                        "compares different work")
    assert report["modes"]["baseline"]["head"]["output_tokens_mean"] == 8.0


def test_the_clients_settings_are_named_in_the_fingerprint_diff():
    workload = core.WorkloadConfig()
    sections = {"kind": "full", "gpu": {}, "software": {}, "system": {}}
    before = {**sections, "client": request_settings(workload, "ignore_eos")}
    after = {**sections, "client": {**request_settings(workload.model_copy(update={"output": "natural"}),
                                                           "ignore_eos"), "temperature": 0.7}}
    changes = diff_snapshots(before, after)
    keys = [c.key for c in changes]
    assert keys == ["client.temperature", "client.output", "client.length"]
    assert all(c.category.label == "engine" for c in changes)


async def test_natural_length_lets_the_model_stop_and_the_text_is_kept():
    server = ExactRateServer(ttft_ms=1.0, itl_ms=0.5, eos_at=5)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    try:
        natural = core.WorkloadConfig(output="natural", output_len=12, requests=3, warmup_requests=1, api="chat")
        sample = await run_workload(url, "m", natural)
        assert sample.valid and [r.output_tokens for r in sample.requests] == [5, 5, 5]
        assert sample.requests[0].text == "t0 t1 t2 t3 t4 " and sample.requests[0].finish_reason == "stop"
        assert "ignore_eos" not in server.records[-1]["fields"]
        fixed = await run_workload(url, "m", natural.model_copy(update={"output": "fixed"}))
        assert fixed.valid and [r.output_tokens for r in fixed.requests] == [12, 12, 12]
    finally:
        listener.close()


def test_the_answer_text_is_read_back_from_the_stream_escapes_and_all():
    import json

    from core._measure.client import RequestRecord, _StreamParser
    texts = ['Hello "world"\n', "tab\there ", "ünï ", "\\ back", ""]
    for api in ("completions", "chat"):
        parser = _StreamParser(RequestRecord(0, 0.0), api)
        for i, text in enumerate(texts):
            choice = ({"index": 0, "text": text, "finish_reason": None} if api == "completions"
                      else {"index": 0, "delta": {"content": text}, "finish_reason": None})
            event = b"data: " + json.dumps({"choices": [choice]}, ensure_ascii=i % 2 == 0).encode() + b"\n\n"
            parser.feed(event[:7], 1.0)  # split across reads
            parser.feed(event[7:], 1.0)
        parser.feed(b'data: {"choices":[],"usage":{"completion_tokens":5}}\n\ndata: [DONE]\n\n', 1.0)
        assert parser.text() == "".join(texts)


async def test_the_chat_templates_digest_is_read_where_the_engine_reads_it(tmp_path):
    import hashlib
    import json

    from core._measure.engines import chat_template_digest
    from tests.conftest import local_host

    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    engine = core.EngineConfig(kind="vllm", model=str(model), modes={"eagle3": []})
    async with local_host(tmp_path / "work") as host:
        assert await chat_template_digest(host, engine, "eagle3") == digest("{{ messages }}")
        (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
        assert await chat_template_digest(host, engine, "eagle3") == digest(
            "{% for m in messages %}{{ m.content }}{% endfor %}")
        (tmp_path / "mine.jinja").write_text("mine")
        flagged = engine.model_copy(update={"modes": {"eagle3": ["--chat-template", str(tmp_path / "mine.jinja")]}})
        assert await chat_template_digest(host, flagged, "eagle3") == digest("mine")
        hub = engine.model_copy(update={"model": "meta-llama/Llama-3.1-8B-Instruct"})
        assert (await chat_template_digest(host, hub, "eagle3")).startswith(
            "unknown: no chat template read from meta-llama/Llama-3.1-8B-Instruct/chat_template.jinja")


def test_what_the_loop_check_leaves_alone_and_what_it_catches_since_the_breaker_tried_it():
    """Found by a helper trying the check on 2026-12-06: short answers ending in a run of one
    character, and trailing blank lines, read as loops; a sentence longer than 64 characters
    repeated did not."""
    assert not any(repetition_loop(t) for t in ["1/3 = 0.3333333333333333333333", "The answer is 100000000000000000000",
                                                "Loading......", "Answer: 42" + " " * 40, "def f():\n    pass" + "\n" * 30])
    sentence = "I am sorry, but I cannot help with that request as it goes against my guidelines. "
    assert len(sentence) > 64 and repetition_loop(sentence * 10)


def test_requests_without_a_kept_text_are_not_counted_as_changed():
    check = compare_answers([launch(["a answer", "b answer"])], [ArmTrial(1.0, requests=({"text": None}, {"text": "b answer"}))])
    assert check["status"] == "same" and check["unknown"] == 1 and check["same"] == 1
    assert "1 without a kept text are not counted" in check["line"]
    longer = compare_answers([launch(["a", "b"])], [launch(["a", "b", "x", "y"])])
    assert "the sides answered 2 and 4 requests, the first 2 compared" in longer["line"]
