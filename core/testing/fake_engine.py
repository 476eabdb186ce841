"""The fake engine: an OpenAI-compatible streaming server on an exact token schedule
(:class:`ExactRateServer`), served in-process by :class:`core.testing.fake_host.FakeHost` and as a
process of its own by ``tests/exact_rate_server.py``. Public as :mod:`core.testing`."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import time


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class ExactRateServer:
    """A synthetic OpenAI-compatible streaming server that emits tokens on an exact schedule.

    Each stream sends its first token ``ttft_ms`` after the request arrives, then one token
    every ``itl_ms``, each against an absolute deadline so sleeps never accumulate drift. It
    records when every request arrived and when each token left (``time.monotonic()``) in
    ``records`` (served at ``GET /truth``; ``DELETE /truth`` clears it). It speaks just enough
    HTTP/1.1 (keep-alive, chunked responses) over asyncio streams to keep its schedule at tens
    of thousands of tokens per second: serve it with ``asyncio.start_server(server.handle, ...)``.

    Faults: ``truncate_at`` ends each stream after N tokens with ``finish_reason=stop``;
    ``drop_at`` closes the connection after N tokens without ``[DONE]``; ``exit_at`` kills the
    whole process after N tokens in total (only for a server in its own process).

    Other servers' manners: ``reject_fields`` (``("ignore_eos", "min_tokens")``) answers HTTP
    422 "Unexpected fields in the request" to a request carrying any of them, as
    ``transformers serve`` does; ``eos_at`` ends a stream at N tokens with
    ``finish_reason=stop`` (the model emitted its end-of-sequence token) unless the request
    holds the length with ``ignore_eos`` or ``min_tokens``; ``no_done`` ends every stream
    cleanly (usage chunk, end of the chunked body) without ``data: [DONE]``. Each record
    lists the request's fields (``fields``).

    Answers: token ``k`` of every answer is ``"{answer_prefix}t{k} "``, whatever the prompt,
    so a commit whose prefix differs changes its answers; ``slow_prompts`` ``(pattern,
    factor)`` multiplies the token interval of a request whose prompt (or chat message
    contents) matches the regular expression ``pattern``, slowing one kind of prompt only.

    Profiler: with ``profile_dir``, ``POST /start_profile`` and ``POST /stop_profile`` answer as
    vLLM's do, and the stop writes a torch-profiler-shaped trace (``fake.<pid>.pt.trace.json.gz``
    in that folder): one ``ProfilerStep#<n>`` annotation per token sent meanwhile, ``itl_ms``
    long, holding one ``fake::decode_step`` op of 90% of it.
    """

    def __init__(self, ttft_ms: float = 20.0, itl_ms: float = 10.0, truncate_at: int | None = None,
                 drop_at: int | None = None, exit_at: int | None = None, reject_fields: tuple[str, ...] = (),
                 eos_at: int | None = None, no_done: bool = False, profile_dir: str | None = None,
                 answer_prefix: str = "", slow_prompts: tuple[str, float] | None = None) -> None:
        self.answer_prefix = answer_prefix
        self.slow_prompts = (re.compile(slow_prompts[0]), slow_prompts[1]) if slow_prompts else None
        self.ttft_s = ttft_ms / 1000.0
        self.itl_s = itl_ms / 1000.0
        self.truncate_at = truncate_at
        self.drop_at = drop_at
        self.exit_at = exit_at
        self.reject_fields = reject_fields
        self.eos_at = eos_at
        self.no_done = no_done
        self.records: list[dict] = []
        self.tokens_sent = 0
        self.extra_usage: dict = {}  # more usage fields per request (engine stubs add their own)
        self.profile_dir = profile_dir
        self.profiling_from: int | None = None  # tokens_sent when /start_profile came

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrival = time.monotonic()
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self.route(method, path, body, arrival, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _json(self, writer: asyncio.StreamWriter, status: str, obj: object) -> None:
        body = json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (status.encode(), len(body), body))

    async def route(self, method: str, path: str, body: bytes, arrival: float, writer) -> bool:
        """Answer one request; ``False`` when the connection must close."""
        if path == "/health":
            self._json(writer, "200 OK", {"ok": True})
        elif path == "/truth":
            if method == "DELETE":
                self.records.clear()
            self._json(writer, "200 OK", self.records)
        elif method == "POST" and path in ("/start_profile", "/stop_profile") and self.profile_dir:
            if path == "/start_profile":
                self.profiling_from = self.tokens_sent
            else:
                self._write_trace()
            self._json(writer, "200 OK", {})
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            request = json.loads(body)
            unexpected = sorted(set(self.reject_fields) & request.keys())
            if unexpected:
                self._json(writer, "422 Unprocessable Entity",
                           {"detail": f"Unexpected fields in the request: {set(unexpected)}"})
            else:
                return await self.stream(request, path.endswith("/chat/completions"), arrival, writer)
        else:
            self._json(writer, "404 Not Found", {"error": f"no route {method} {path}"})
        await writer.drain()
        return True

    def _write_trace(self) -> None:
        steps = self.tokens_sent - (self.profiling_from or 0)
        step_us = self.itl_s * 1e6
        events = []
        for n in range(steps):
            start = 1000.0 + n * step_us
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
                           "ts": start, "dur": step_us})
            events.append({"ph": "X", "cat": "cpu_op", "name": "fake::decode_step", "pid": 1, "tid": 1,
                           "ts": start + 0.05 * step_us, "dur": 0.9 * step_us})
        os.makedirs(str(self.profile_dir), exist_ok=True)
        path = os.path.join(str(self.profile_dir), f"fake.{os.getpid()}.{time.monotonic_ns()}.pt.trace.json.gz")
        with open(path, "wb") as out:
            out.write(gzip.compress(json.dumps({"traceEvents": events}).encode()))
        self.profiling_from = None

    async def stream(self, body: dict, chat: bool, arrival: float, writer) -> bool:
        max_tokens = int(body.get("max_tokens", 16))
        to_send = max_tokens if self.truncate_at is None else min(max_tokens, self.truncate_at)
        held = body.get("ignore_eos") or int(body.get("min_tokens") or 0) >= max_tokens
        if self.eos_at is not None and not held:
            to_send = min(to_send, self.eos_at)
        record = {"arrival_s": arrival, "first_token_s": None, "last_token_s": None, "tokens": 0,
                  "fields": sorted(body)}
        self.records.append(record)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        first_due = arrival + self.ttft_s
        itl_s = self.itl_s
        if self.slow_prompts:
            prompt = str(body.get("prompt") or "") + "".join(str(m.get("content")) for m in body.get("messages") or ())
            if self.slow_prompts[0].search(prompt):
                itl_s *= self.slow_prompts[1]
        for k in range(to_send):
            due = first_due + k * itl_s
            # never early: an event loop may run a timer up to its clock's resolution ahead
            # of time (uvloop's timers count whole milliseconds), and a token sent early would
            # let a client's TTFT fall below the schedule that tests hold as a hard floor
            while (delay := due - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            if self.drop_at is not None and k >= self.drop_at:
                return False
            last = k == to_send - 1
            finish = ("length" if to_send == max_tokens else "stop") if last else None
            text = f"{self.answer_prefix}t{k} "
            choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                      else {"index": 0, "text": text, "finish_reason": finish})
            writer.write(_chunk(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"))
            now = time.monotonic()
            record["first_token_s"] = record["first_token_s"] or now
            record["last_token_s"] = now
            record["tokens"] = k + 1
            self.tokens_sent += 1
            if self.exit_at is not None and self.tokens_sent >= self.exit_at:
                os._exit(17)
        usage = {"prompt_tokens": 8, "completion_tokens": to_send, "total_tokens": 8 + to_send,
                 **self.extra_usage}
        writer.write(_chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"))
        writer.write((b"" if self.no_done else _chunk(b"data: [DONE]\n\n")) + _chunk(b""))
        await writer.drain()
        return True
