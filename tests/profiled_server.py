"""An OpenAI-compatible engine of the tests' own with vLLM's profiler endpoints, for the GPU
profile test (tests/test_compare_gpu.py) and the GPU trace fixtures (tests/fixtures/profiles).

``python profiled_server.py --port N --model DIR``, run in a checkout whose ``attention.txt``
names the attention implementation transformers uses (``eager`` or ``sdpa``): two commits of
such a repository differ by one kernel path. It serves a random-weight causal LM from ``DIR``
with greedy decoding, one request at a time, all model and profiler work on one engine thread
(torch's profiler must start, record and stop on one thread; the HTTP threads queue work to it):

- ``GET /health``; ``POST /v1/completions`` streamed as server-sent events (``max_tokens``
  tokens always: ``ignore_eos`` and ``min_tokens`` are accepted and hold anyway), with a usage
  chunk and ``data: [DONE]``;
- ``POST /start_profile`` (JSON ``{"max_iterations": N}``) and ``POST /stop_profile``: torch's
  profiler (CPU, and CUDA where there is a GPU) over the decode steps, each step inside a
  ``ProfilerStep#<n>`` annotation; the Chrome trace is written, gzip-compressed, into
  ``$PROFILED_SERVER_TRACE_DIR`` when it stops (at ``max_iterations`` steps, or at the stop).

Standard library HTTP only: the GPU machine has torch and transformers, nothing else.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

TRACE_DIR_ENV = "PROFILED_SERVER_TRACE_DIR"


class Engine:
    """The model, its one engine thread (:meth:`call`), and the profiler state."""

    def __init__(self, model_dir: str, attention: str) -> None:
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, attn_implementation=attention, dtype=torch.bfloat16 if self.device == "cuda" else torch.float32
        ).to(self.device).eval()
        self.profiler: torch.profiler.profile | None = None
        self.max_steps = 0
        self.steps = 0
        self.jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            job, out = self.jobs.get()
            try:
                job(out)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting HTTP thread
                out.put(exc)

    def call(self, job) -> queue.Queue:
        """Run ``job(out)`` on the engine thread; what it puts in ``out`` comes back in order."""
        out: queue.Queue = queue.Queue()
        self.jobs.put((job, out))
        return out

    def start_profile(self, max_steps: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()
        self.max_steps, self.steps = max_steps, 0

    def stop_profile(self) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is None:
            return
        profiler.stop()
        folder = Path(os.environ[TRACE_DIR_ENV])
        folder.mkdir(parents=True, exist_ok=True)
        plain = folder / f"profiled_server.{os.getpid()}.{time.time_ns()}.pt.trace.json"
        profiler.export_chrome_trace(str(plain))
        (folder / (plain.name + ".gz")).write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()

    @torch.inference_mode()
    def generate(self, prompt: str, max_tokens: int):
        """Yield ``max_tokens`` token ids, greedy, with the KV cache."""
        ids = torch.tensor([[1] + [(ord(c) % 200) + 3 for c in prompt][:64]], device=self.device)
        out = self.model(input_ids=ids, use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(max_tokens):
            yield int(token)
            name = f"ProfilerStep#{self.steps}"
            with torch.profiler.record_function(name) if self.profiler else _nothing():
                out = self.model(input_ids=token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                if self.device == "cuda":
                    torch.cuda.synchronize()
            if self.profiler is not None:
                self.steps += 1
                if self.max_steps and self.steps >= self.max_steps:
                    self.stop_profile()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def handler(engine: Engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _json(self, status: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> dict:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return json.loads(raw) if raw.strip() else {}

        def do_GET(self):
            self._json(200, {"ok": True}) if self.path == "/health" else self._json(404, {"error": self.path})

        def do_POST(self):
            body = self._body()
            if self.path in ("/start_profile", "/stop_profile"):
                steps = int(body.get("max_iterations") or 0)
                action = (lambda: engine.start_profile(steps)) if self.path == "/start_profile" else engine.stop_profile
                error = engine.call(lambda out: out.put(action())).get()
                return self._json(500 if error else 200, {"error": repr(error)} if error else {})
            if self.path != "/v1/completions":
                return self._json(404, {"error": self.path})
            max_tokens = int(body.get("max_tokens", 16))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            def job(out: queue.Queue) -> None:
                for token in engine.generate(str(body.get("prompt", "")), max_tokens):
                    out.put(token)
                out.put(None)

            tokens = engine.call(job)
            for k in range(max_tokens):
                token = tokens.get()
                if not isinstance(token, int):
                    break  # an error on the engine thread: the stream ends short
                finish = "length" if k == max_tokens - 1 else None
                self._chunk({"choices": [{"index": 0, "text": f"t{token} ", "finish_reason": finish}]})
            self._chunk({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": max_tokens,
                                                  "total_tokens": 8 + max_tokens}})
            self._raw(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, obj: dict) -> None:
            self._raw(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def _raw(self, payload: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    attention = Path("attention.txt").read_text().strip()
    engine = Engine(args.model, attention)
    print(f"profiled_server: {attention} attention on {engine.device}, port {args.port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), handler(engine)).serve_forever()


if __name__ == "__main__":
    main()
