"""The engine log read for its fatal line and collapsed for messages (core/_hosts/engine_log.py)."""

from __future__ import annotations

from core._hosts.engine_log import collapsed, fatal_line

VLLM_DEATH = """INFO 12-06 10:00:01 [api_server.py:1] vLLM API server version 0.32.0
(EngineCore pid=12) ERROR 12-06 10:00:09 [core.py:700] EngineCore failed to start.
(EngineCore pid=12) ERROR 12-06 10:00:09 [core.py:700] Traceback (most recent call last):
(EngineCore pid=12) ERROR 12-06 10:00:09 [core.py:700]   File "core.py", line 690, in run_engine_core
(EngineCore pid=12) ERROR 12-06 10:00:09 [core.py:700] ValueError: The decoder prompt is longer than the maximum model length
INFO 12-06 10:00:10 [launcher.py:3] Shutting down FastAPI HTTP server."""


def test_the_exception_line_of_the_last_traceback_behind_a_log_prefix():
    line, oom = fatal_line(VLLM_DEATH)
    assert line.endswith("ValueError: The decoder prompt is longer than the maximum model length") and not oom


def test_out_of_memory_wins_and_ordinary_logs_have_no_fatal_line():
    text = VLLM_DEATH + "\nRuntimeError: CUDA error: out of memory\nINFO: 127.0.0.1:1 GET /health 503"
    assert fatal_line(text) == ("RuntimeError: CUDA error: out of memory", True)
    assert fatal_line("INFO loading weights\nINFO Avg prompt throughput: 0 tokens/s\nWARNING slow tokenizer") is None
    assert fatal_line("a line mentioning ValueError: without a traceback") is None


def test_runs_of_lines_that_differ_in_digits_only_collapse():
    lines = [f'INFO:     127.0.0.1:{40000 + i} - "GET /health HTTP/1.1" 503' for i in range(20)]
    text = collapsed("\n".join(["torch.OutOfMemoryError: CUDA out of memory", *lines, "bye"]))
    assert text.splitlines() == ["torch.OutOfMemoryError: CUDA out of memory", lines[0],
                                 "... (the line above 19 more times)", "bye"]
