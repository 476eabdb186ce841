"""Text specperf did not write never pings or disguises a link in Slack (issue 43): hostile text
in every place a message builder takes foreign text from (a ref, a commit subject, an engine's
log, another user's command line, an environment value, a verdict's reason) comes out escaped,
in the blocks and in the text fallback."""

from __future__ import annotations

import datetime as dt
import json

from bot._app import ProbeTarget, WatchResult
from bot._slack.blocks import bisect_blocks, failure_blocks, summary_line, verdict_blocks, watch_blocks
from core._config import DisturbanceConfig
from core._env.disturbance import judge_window
from storage import Run, StoredRun

HOSTILE = "<!channel> <@U1> <http://x|y>"
RAW = ("<!channel>", "<@U1>", "<http://x|y>")


def assert_escaped(blocks: list[dict], text: str) -> None:
    body = json.dumps({"blocks": blocks, "text": text})
    assert not [raw for raw in RAW if raw in body], body
    assert "&lt;!channel&gt;" in body, body  # the hostile text is there, shown as typed


def test_every_block_builder_escapes_foreign_text():
    run = Run(id=7, kind="compare", status="done", engine_name=f"vllm {HOSTILE}", host="gpu-a", workload_name="w",
              head_ref=f"topic/{HOSTILE}", head_sha="a" * 40, base_ref="main", base_sha="b" * 40, modes=["eagle3"],
              settings={}, created_at=dt.datetime.now(dt.UTC))
    stored = StoredRun(run, {}, [], [], [])
    side = {"output_tok_s": 90.0, "acceptance_length": 3.0, "step_ms": 10.0, "trials": 4}
    report = {
        "headline": f"busy host: {HOSTILE}",
        "recheck": {"verdict": "differs", "lines": [f"recheck of run 3: {HOSTILE}", f"  env FOO 1 -> {HOSTILE}"]},
        "modes": {"eagle3": {"base": side, "head": side, "limits": [f"profile: `{HOSTILE}` +1 ms"],
                             "verdict": {"verdict": "REGRESSION", "change_pct": -9.0, "ci_low_pct": -10.0,
                                         "ci_high_pct": -8.0, "p_value": 0.001, "n_pairs": 4,
                                         "reason": f"moved {HOSTILE}"}}},
        "speedups": {},
        "environment": {"arms_differ": [f"env X {HOSTILE}"]},
        "launches": [{"seq": 1, "mode": "eagle3", "role": "head", "kept": False,
                      "disturbed": [f"pid 9 (mallory) `{HOSTILE}`: 0.5 CPU-s/s"]}],
    }
    assert_escaped(verdict_blocks(stored, report), summary_line(stored, report))
    assert_escaped(*failure_blocks("job 1, run 7", f"engine died: {HOSTILE}", f"Traceback\nValueError: {HOSTILE}"))
    bisect = {"status": "found", "message": f"culprit {HOSTILE}", "triage_line": f"c8 fix: {HOSTILE}",
              "steps": [{"number": 1, "kind": "compare", "status": "done", "head_sha": "c" * 40, "base_sha": "d" * 40,
                         "position": 3,
                         "evidence": f"-9% {HOSTILE}", "outcome": "bad"}],
              "mode": "eagle3", "commits": ["c" * 40], "compares": 1, "max_compares": 4, "trials": 8, "spend": {}}
    assert_escaped(*bisect_blocks("job 2", bisect))
    window = {"window_s": 10.0, "engine_cpus": [1], "client_cpus": [0], "host_cpus": 2,
              "cpu": {"engine_cpus_unattributed_s": 0.0, "host_foreign_share": 0.5, "client_cpus_foreign_share": 0.0,
                      "engine_cpus_steal_share": 0.0},
              "memory": {"available_min_mib": 1000},
              "foreign_processes": [{"pid": 9, "user": "mallory", "command": f"sleep {HOSTILE}", "cpu_s": 5.0,
                                     "engine_cpus_cpu_s": 5.0}],
              "gpu": {"available": False, "reason": f"no NVML {HOSTILE}"}}
    judged = judge_window(window, DisturbanceConfig())  # the command line is shown among the busiest processes
    target = ProbeTarget(f"engine {HOSTILE}", "python3", {}, None, "gpu-a", [1])
    assert_escaped(*watch_blocks("job 3", "gpu-a", WatchResult(target, window, judged)))
