"""The streaming benchmark client: one workload against an OpenAI-compatible server.

Definitions follow vLLM's and SGLang's own serving benchmarks (``vllm bench serve``,
``sglang.bench_serving``):

* request sent: the moment the request (headers with the body) is written to the socket,
  on a connection already open (core/_measure/http_stream.py), so the client's own queuing at high
  concurrency is not charged to the engine; before that the issue time stands in.
* TTFT: request sent -> first chunk carrying generated text. A read from the socket gets one
  timestamp, shared by the events it holds.
* ITL: gaps between successive chunks carrying text (a chunk may hold several tokens under
  speculative decoding, as in those tools).
* TPOT: (E2E - TTFT) / (output tokens - 1), per request.
* E2E latency: request sent -> end of stream.
* output tok/s: output tokens of all measured requests / measured window, where the window
  runs from the first measured request sent to the last one finished.

Output tokens are the server's ``usage.completion_tokens`` (asked for with
``stream_options.include_usage``); if the server sends no usage, the number of text chunks.
The request's own speculative-decoding figures, where the server sends them on that last
chunk: SGLang's ``usage.spec_verify_ct`` (verify steps), and vLLM's
``metrics.speculative_decoding`` (vLLM started with ``--per-request-spec-decode-metrics
summary``: ``num_spec_steps`` and ``acceptance_histogram``, index ``j`` the steps that accepted
exactly ``j`` draft tokens), kept as :attr:`RequestRecord.spec_steps` and
:attr:`RequestRecord.spec_accepted_per_position` (position ``p``'s accepted drafts: the steps
with ``j >= p``).
Under ``output = "fixed"`` the output length is held by the engine's length method
(:data:`LENGTH_METHODS`): ``ignore_eos`` (vLLM, SGLang), ``min_tokens`` = ``max_tokens``, or
``max_tokens`` alone, where a model that stops early gives a short answer; under ``"natural"``
only ``max_tokens`` caps it and an early stop is the model's answer. Every request is greedy
(``temperature`` 0), and its generated text is kept (:attr:`RequestRecord.text`, decoded from the
stream's bytes after the request set ends, so decoding costs nothing inside the measured window)
for the outputs check (core/_experiments/outputs.py). A request that returns fewer tokens than
asked under ``fixed``, fails, or ends its stream neither with ``[DONE]`` nor cleanly with a
``finish_reason`` on every choice (``transformers serve`` sends no ``[DONE]``) makes the
sample invalid, with a reason per request.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from urllib.parse import urlsplit

import numpy as np

from core._config import WorkloadConfig
from core._errors import SpecperfError
from core._measure.http_stream import StreamConnection
from core._measure.workload import make_prompts
from core._prompts import Prompt


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are ``time.monotonic()`` seconds; latencies ms."""

    index: int
    start_s: float
    end_s: float = 0.0
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    output_tokens: int = 0
    expected_tokens: int = 0
    text_chunks: int = 0
    finish_reason: str | None = None
    spec_verify_ct: int | None = None
    spec_steps: int | None = None
    spec_accepted_per_position: list[int] | None = None
    error: str | None = None
    category: str | None = None
    text: str | None = None
    window: int = 0

    @property
    def e2e_ms(self) -> float:
        """Request sent to end of stream, ms."""
        return (self.end_s - self.start_s) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1), ms; ``None`` with fewer than two tokens."""
        if self.ttft_ms is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    @property
    def invalid_reason(self) -> str | None:
        """Why this request cannot be counted, or ``None`` when it is good."""
        if self.error:
            return f"request {self.index}: {self.error}"
        if self.output_tokens < self.expected_tokens:
            return (
                f"request {self.index} returned {self.output_tokens} of {self.expected_tokens} tokens "
                f"(finish_reason={self.finish_reason}): the output was truncated, so its tok/s would "
                "be wrong; check that the engine holds the length fixed (engines.<name>.output_length) "
                "and that max-model-len fits"
            )
        return None


@dataclass(frozen=True)
class Quantiles:
    """Summary of one latency distribution, ms."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Quantiles | None:
        """Mean and percentiles (numpy's linear interpolation) of ``values``; ``None`` if empty."""
        if not values:
            return None
        arr = np.asarray(values, dtype=float)
        p50, p90, p99 = np.percentile(arr, [50, 90, 99])
        return cls(float(arr.mean()), float(p50), float(p90), float(p99))


@dataclass
class Sample:
    """The measured requests of one workload run, with their summary.

    ``window_s`` spans first measured request sent to last finished; ``output_tok_s`` and
    ``request_per_s`` are over that window. ``measured_by``: where the client ran,
    ``{"where": "here" | "host", "hostname", "pid", "python"}`` (``"host"`` adds the host's
    name: the client on an SSH host, core/_measure/host_client/__init__.py); empty when not recorded.
    ``active_s``: for one arm of an alternated measurement (:func:`run_alternating`), the sum
    of its own turns, which is then its ``window_s`` (the other arm's turns are not its time).
    """

    requests: list[RequestRecord]
    window_start_s: float
    window_end_s: float
    measured_by: dict = field(default_factory=dict)
    active_s: float | None = None

    @property
    def window_s(self) -> float:
        return self.active_s if self.active_s is not None else self.window_end_s - self.window_start_s

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

    @property
    def request_per_s(self) -> float:
        return len(self.requests) / self.window_s if self.window_s > 0 else 0.0

    @property
    def ttft_ms(self) -> Quantiles | None:
        return Quantiles.of([r.ttft_ms for r in self.requests if r.ttft_ms is not None])

    @property
    def tpot_ms(self) -> Quantiles | None:
        return Quantiles.of([t for r in self.requests if (t := r.tpot_ms) is not None])

    @property
    def itl_ms(self) -> Quantiles | None:
        return Quantiles.of([gap for r in self.requests for gap in r.itl_ms])

    @property
    def e2e_ms(self) -> Quantiles | None:
        return Quantiles.of([r.e2e_ms for r in self.requests])

    @property
    def invalid_reasons(self) -> list[str]:
        return [reason for r in self.requests if (reason := r.invalid_reason)]

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    def raise_if_invalid(self) -> None:
        """Raise :class:`InvalidSampleError` (carrying this sample) if any request is invalid."""
        if not self.valid:
            raise InvalidSampleError(self)

    @property
    def window_tok_s(self) -> list[float]:
        """Output tok/s of each measured window (``WorkloadConfig.windows``), in order
        (:func:`tok_s_by_window`)."""
        return tok_s_by_window([(r.window, r.start_s, r.end_s, r.output_tokens) for r in self.requests])

    def summary(self) -> dict:
        """The figures of this sample as plain JSON-ready values (units in the keys)."""
        quantiles = {
            name: (asdict(q) if (q := getattr(self, name)) else None)
            for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
        }
        return {
            "requests": len(self.requests),
            "output_tokens": self.output_tokens,
            "window_s": self.window_s,
            "output_tok_s": self.output_tok_s,
            "request_per_s": self.request_per_s,
            "window_tok_s": self.window_tok_s,
            **quantiles,
            "valid": self.valid,
            "invalid_reasons": self.invalid_reasons,
        }


def tok_s_by_window(requests: Iterable[tuple[int, float, float, int]]) -> list[float]:
    """Output tok/s of each measured window of one launch, in window order, from its requests'
    ``(window, start_s, end_s, output_tokens)``: a window's tokens over the time during which at
    least one of its requests was in flight (the union of their intervals, s). One definition for
    both ways of measuring: windows one after another (:func:`run_workload`), where that time is
    the window's span, and two engines in turns (:func:`run_alternating`), where it is the sum of
    the arm's own turns in that window. ``[]`` for no requests; a window whose requests took no
    time reads 0.0."""
    by_window: dict[int, list[tuple[float, float, int]]] = {}
    for window, start, end, tokens in requests:
        by_window.setdefault(window, []).append((start, end, tokens))
    figures = []
    for window in sorted(by_window):
        spans = sorted(by_window[window])
        busy, reach = 0.0, float("-inf")
        for start, end, _ in spans:  # the union's length, the intervals sorted by their start
            if end > reach:
                busy += end - max(start, reach)
                reach = end
        tokens = sum(t for _, _, t in spans)
        figures.append(tokens / busy if busy > 0 else 0.0)
    return figures


LENGTH_METHODS = ("ignore_eos", "min_tokens", "max_tokens")


def length_fields(method: str, output_len: int) -> dict[str, object]:
    """The request fields that hold the output at ``output_len`` tokens with ``method`` (one
    of :data:`LENGTH_METHODS`): ``ignore_eos``, ``min_tokens`` or nothing (``max_tokens`` only).

    Raises:
        KeyError: an unknown method.
    """
    held: dict[str, dict[str, object]] = {"ignore_eos": {"ignore_eos": True}, "min_tokens": {"min_tokens": output_len},
                                          "max_tokens": {}}
    return {**held[method], "max_tokens": output_len}


SAMPLING = {"temperature": 0.0}  # greedy: the outputs check compares answers request by request


def request_settings(workload: WorkloadConfig, length_method: str) -> dict:
    """What every request of ``workload`` asks of the engine beside its prompt: the API, the
    sampling, how the length is held (``natural``: capped only), and the client (specperf's
    version). Recorded with each arm, so a change in any of them is named like a driver's."""
    try:
        client = f"specperf {version('specperf')}"
    except PackageNotFoundError:
        client = "specperf (source tree)"
    return {"api": workload.api, **SAMPLING, "output": workload.output,
            "length": "max_tokens" if workload.output == "natural" else length_method,
            "max_tokens": workload.output_len, "prompts": workload.prompts, "client": client}


def _payload(api: str, model: str, prompt: Prompt, output_len: int, length_method: str = "ignore_eos") -> dict:
    body: dict = {
        "model": model,
        **SAMPLING,
        **length_fields(length_method, output_len),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        body["messages"] = prompt.chat()
    else:
        body["prompt"] = prompt.text
    return body


def _chunk_text(event: dict, api: str) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if api == "chat":
        return (choice.get("delta") or {}).get("content") or ""
    return choice.get("text") or ""


_decode_json = json.JSONDecoder().decode  # str in: skips json.loads' encoding sniffing of bytes
# The key of the generated text in a choice, by API, and the bytes that may follow it
# before the string value (engines write compact JSON; json.dumps puts a space).
_TEXT_KEYS = {"completions": (b'"text":"', b'"text": "'), "chat": (b'"content":"', b'"content": "')}


def _plain_text_chunk(payload: bytes, text_keys: tuple[bytes, bytes]) -> bool:
    """Whether ``payload`` is, without parsing it, an event of one choice with non-empty text,
    no finish_reason, no usage and no error: the bulk of a stream. Literal quotes cannot occur
    inside JSON strings (they are escaped), so the keys found are keys; anything unsure gives
    ``False`` and the event is parsed in full."""
    if (b'"finish_reason":null' not in payload and b'"finish_reason": null' not in payload) \
            or b'"usage":{' in payload or b'"usage": {' in payload or b'"error"' in payload:
        return False
    for key in text_keys:
        start = payload.find(key)
        if start >= 0:
            return payload[start + len(key):start + len(key) + 1] not in (b'"', b"")
    return False


# A text value in a stream's events, by API: the JSON string after the key, escapes included.
_TEXT_VALUE = {api: re.compile(rb'"%s": ?"((?:[^"\\]|\\.)*)"' % key) for api, key in (("completions", b"text"),
                                                                                     ("chat", b"content"))}


class _StreamParser:
    """Incremental server-sent-events parser that fills one :class:`RequestRecord`."""

    def __init__(self, record: RequestRecord, api: str) -> None:
        self.record = record
        self.api = api
        self.text_keys = _TEXT_KEYS[api]
        self.buffer = b""
        self.last_text_s: float | None = None
        self.usage_tokens: int | None = None
        self.done = False
        self.finished_choices: dict[int, bool] = {}  # choice index -> has a finish_reason
        self.raw: list[bytes] = []  # every complete line block, decoded by text() afterwards

    def feed(self, data: bytes, now: float) -> None:
        """Parse the complete lines of ``data`` (bytes as read), all stamped ``now``.

        A read whose events are all plain text events (as :func:`_plain_text_chunk` would
        judge each one) is counted from byte counts over the whole read, without splitting it
        into lines; this holds because a request asks for one choice, so an event carries at
        most one ``finish_reason`` and one text key. Any other read is parsed line by line.
        """
        if self.buffer:
            data = self.buffer + data
        end = data.rfind(b"\n") + 1
        self.buffer = data[end:]
        block = data[:end]
        self.raw.append(block)
        events = block.count(b"\ndata:") + block.startswith(b"data:")
        key, spaced = self.text_keys
        if events and block.count(key) + block.count(spaced) == events \
                and block.count(b'"finish_reason":null') + block.count(b'"finish_reason": null') == events \
                and key + b'"' not in block and spaced + b'"' not in block \
                and b'"usage":{' not in block and b'"usage": {' not in block and b'"error"' not in block:
            self._text(now, events)
            return
        for line in block.splitlines():
            if line[:5] == b"data:":
                if _plain_text_chunk(line, self.text_keys):
                    self._text(now)
                else:
                    self._event(line[5:], now)

    def _text(self, now: float, chunks: int = 1) -> None:
        """``chunks`` text chunks arrived in one read at ``now``: the first after the previous
        read's gap, the rest 0 ms after it."""
        record = self.record
        if self.last_text_s is None:
            record.ttft_ms = (now - record.start_s) * 1000.0
        else:
            record.itl_ms.append((now - self.last_text_s) * 1000.0)
        if chunks > 1:
            record.itl_ms.extend([0.0] * (chunks - 1))
        self.last_text_s = now
        record.text_chunks += chunks

    def _event(self, payload: bytes, now: float) -> None:
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        event = _decode_json(payload.decode())
        record = self.record
        if "error" in event and not event.get("choices"):
            record.error = f"server error in stream: {json.dumps(event['error'])[:300]}"
            return
        if _chunk_text(event, self.api):
            self._text(now)
        for choice in event.get("choices") or []:
            finished = self.finished_choices.get(choice.get("index", 0), False)
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
                finished = True
            self.finished_choices[choice.get("index", 0)] = finished
        usage = event.get("usage")
        if usage:
            self.usage_tokens = usage.get("completion_tokens", self.usage_tokens)
            if "spec_verify_ct" in usage:
                record.spec_verify_ct = usage["spec_verify_ct"]
        spec = (event.get("metrics") or {}).get("speculative_decoding")
        if isinstance(spec, dict) and isinstance(spec.get("acceptance_histogram"), list):
            histogram = [int(n) for n in spec["acceptance_histogram"]]
            record.spec_steps = int(spec.get("num_spec_steps", sum(histogram)))
            record.spec_accepted_per_position = [sum(histogram[p:]) for p in range(1, len(histogram))]

    def text(self) -> str:
        """The generated text of the stream, from its kept bytes (call after the stream): every
        text value in order (a JSON string holds no bare quote, so the pattern finds each whole),
        each decoded as JSON only when it holds an escape."""
        values = _TEXT_VALUE[self.api].findall(b"".join(self.raw))
        self.raw = []
        return "".join(_decode_json(f'"{v.decode("utf-8", "replace")}"') if b"\\" in v else v.decode("utf-8", "replace")
                       for v in values)

    def finish(self, now: float) -> None:
        record = self.record
        record.end_s = now
        record.output_tokens = self.usage_tokens if self.usage_tokens is not None else record.text_chunks
        # a stream that ended cleanly with every choice finished is complete without [DONE]
        complete = self.done or (bool(self.finished_choices) and all(self.finished_choices.values()))
        if record.error is None and not complete:
            record.error = (
                f"stream ended without [DONE] and without a finish_reason after {record.output_tokens} tokens "
                "(truncated response: the connection closed early or the engine died)"
            )


async def _one_request(
    connection: StreamConnection, path: str, url: str, body: bytes, record: RequestRecord, api: str, timeout_s: float
) -> _StreamParser:
    parser = _StreamParser(record, api)

    def sent(now: float) -> None:
        record.start_s = now

    try:
        async with asyncio.timeout(timeout_s):
            status = await connection.post(path, body, parser.feed, sent)
        if status != 200:
            record.error = f"HTTP {status} from {url}: {connection.error_body.decode(errors='replace')[:300]}"
            record.end_s = time.monotonic()
            return parser
    except TimeoutError:
        record.error = f"no complete response within request_timeout_s = {timeout_s:g} s"
    except (OSError, json.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {exc or 'connection failed'} (the engine may have died)"
    parser.finish(time.monotonic())
    return parser


async def _run_requests(
    connections: list[StreamConnection],
    base_url: str,
    model: str,
    workload: WorkloadConfig,
    prompts: list[Prompt],
    on_done: Callable[[RequestRecord], None] | None,
    length_method: str,
) -> list[RequestRecord]:
    """Send ``prompts`` with ``workload.concurrency`` in flight, each slot on a connection
    taken from ``connections`` (opened when there is none) and put back when the slot ends.
    Each record's ``text`` is decoded once all have ended."""
    endpoint = "/v1/chat/completions" if workload.api == "chat" else "/v1/completions"
    url = base_url.rstrip("/") + endpoint
    path = (urlsplit(base_url).path.rstrip("/") + endpoint)
    records: list[RequestRecord] = []
    parsers: list[_StreamParser] = []
    next_index = iter(range(len(prompts)))
    natural = workload.output == "natural"
    method = "max_tokens" if natural else length_method
    expected = 0 if natural else workload.output_len

    async def worker() -> None:
        connection = connections.pop() if connections else StreamConnection(base_url)
        try:
            for index in next_index:
                record = RequestRecord(index=index, start_s=time.monotonic(), expected_tokens=expected,
                                       category=prompts[index].category)
                records.append(record)
                body = json.dumps(_payload(workload.api, model, prompts[index], workload.output_len, method))
                parsers.append(await _one_request(connection, path, url, body.encode(), record, workload.api,
                                                  workload.request_timeout_s))
                if on_done:
                    on_done(record)
        finally:
            connections.append(connection)

    await asyncio.gather(*(worker() for _ in range(min(workload.concurrency, len(prompts)))))
    for parser in parsers:
        parser.record.text = parser.text()
    records.sort(key=lambda r: r.index)
    return records


def workload_prompts(workload: WorkloadConfig) -> tuple[list[Prompt], list[Prompt]]:
    """(measured, warm-up) prompts of one launch of ``workload`` (core._measure.workload)."""
    return (make_prompts(workload, workload.requests, stream=0),
            make_prompts(workload, workload.warmup_requests, stream=1))


async def run_workload(
    base_url: str,
    model: str,
    workload: WorkloadConfig,
    *,
    on_request_done: Callable[[RequestRecord], None] | None = None,
    on_measure_start: Callable[[], object] | None = None,
    length_method: str = "ignore_eos",
    prompts: tuple[list[Prompt], list[Prompt]] | None = None,
) -> Sample:
    """Run ``workload`` against the server at ``base_url`` and return the measured sample.

    Warm-up requests (``workload.warmup_requests``, same concurrency, their own prompts) run
    first and are not counted; a failed warm-up request is still an error. Then
    ``on_measure_start`` is awaited if it returns an awaitable (used to snapshot engine
    counters at the window's start), then the measured requests run with ``concurrency``
    in flight.

    Args:
        base_url: e.g. ``http://127.0.0.1:8199``.
        model: the ``model`` field of each request.
        workload: what to send.
        on_request_done: called after each measured request (progress bars).
        on_measure_start: called once between warm-up and measurement.
        length_method: how the output length is held fixed (:func:`length_fields`).
        prompts: (measured, warm-up) prompts; default :func:`workload_prompts` (the host's
            client is given them, since the prompt set's file is where specperf runs).

    Returns:
        The :class:`Sample` (check ``valid``; it is returned even when invalid).

    Raises:
        InvalidSampleError: a warm-up request failed or was truncated (the engine is unusable).
        ValueError: ``base_url`` is not an http(s) URL.
    """
    # One keep-alive connection per concurrency slot, as that many independent users would
    # have, kept from the warm-up to the measured requests. No per-read timeout; _one_request
    # bounds each whole request by the workload's request_timeout_s instead.
    StreamConnection(base_url)  # a bad URL fails here, before anything is sent
    connections: list[StreamConnection] = []
    measured, warm = prompts or workload_prompts(workload)
    try:
        if workload.warmup_requests:
            warm_records = await _run_requests(connections, base_url, model, workload, warm, None, length_method)
            warm_sample = Sample(warm_records, 0.0, 0.0)
            if not warm_sample.valid:
                warm_sample.raise_if_invalid()
        if on_measure_start is not None:
            result = on_measure_start()
            if asyncio.iscoroutine(result):
                await result
        records = []
        for window in range(workload.windows):  # the measured requests again per window, one after another
            got = await _run_requests(connections, base_url, model, workload, measured, on_request_done, length_method)
            for record in got:
                record.window = window
            records.extend(got)
    finally:
        for connection in connections:
            connection.close()
    start = min(r.start_s for r in records)
    end = max(r.end_s for r in records)
    return Sample(records, start, end)


def turn_order(turns: int, first: int) -> list[int]:
    """Which arm (0 or 1) takes each of ``turns`` turns: ABBA repeated (``first`` starts), so
    neither arm is always first after the other: ``turn_order(6, 0) == [0, 1, 1, 0, 0, 1]``."""
    pattern = (first, 1 - first, 1 - first, first)
    return [pattern[i % 4] for i in range(turns)]


async def run_alternating(
    base_urls: tuple[str, str],
    model: str,
    workload: WorkloadConfig,
    *,
    first: int = 0,
    on_request_done: Callable[[int, RequestRecord], None] | None = None,
    on_measure_start: Callable[[], object] | None = None,
    length_methods: tuple[str, str] = ("ignore_eos", "ignore_eos"),
) -> tuple[Sample, Sample]:
    """Measure two servers in turns: the workload's measured requests cut into turns of
    ``concurrency`` requests (one request each in flight at a time, as in :func:`run_workload`),
    each arm getting every turn's prompts in the same order, the arms taking turns in ABBA order
    (:func:`turn_order`), so both see the machine in the same state within a second or so. A
    CPU whose speed drifts from second to second (a VM's neighbours: +-20% within seconds,
    measured in bench/NOISE_RESULTS.md) then slows both arms alike.

    Warm-up: ``warmup_requests`` on each server first (arm 0, then arm 1), not counted.
    ``on_measure_start`` is awaited (if it returns an awaitable) between warm-up and the
    measured turns. ``on_request_done(arm, record)`` after each measured request.

    Returns:
        (arm 0's sample, arm 1's sample), each with ``workload.requests`` requests and
        ``active_s`` the sum of its turns (first request sent .. last done, per turn), so its
        ``output_tok_s`` is its tokens over its own time.

    Raises:
        InvalidSampleError: a warm-up request failed or was truncated.
        ValueError: a base URL is not an http(s) URL.
    """
    for url in base_urls:
        StreamConnection(url)  # a bad URL fails here, before anything is sent
    connections: tuple[list[StreamConnection], list[StreamConnection]] = ([], [])
    records: tuple[list[RequestRecord], list[RequestRecord]] = ([], [])
    active = [0.0, 0.0]
    prompts, warm = workload_prompts(workload)
    try:
        if workload.warmup_requests:
            for arm in (0, 1):
                warm_records = await _run_requests(connections[arm], base_urls[arm], model, workload, warm, None,
                                                   length_methods[arm])
                Sample(warm_records, 0.0, 0.0).raise_if_invalid()
        if on_measure_start is not None:
            result = on_measure_start()
            if asyncio.iscoroutine(result):
                await result
        size = workload.concurrency
        turns = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        for window in range(workload.windows):  # every turn of the measured requests again per window
            taken = [0, 0]
            for arm in turn_order(2 * len(turns), first):
                batch = turns[taken[arm]]
                taken[arm] += 1
                done = (lambda record, arm=arm: on_request_done(arm, record)) if on_request_done else None
                got = await _run_requests(connections[arm], base_urls[arm], model, workload, batch, done,
                                          length_methods[arm])
                offset = size * (taken[arm] - 1)  # the prompt's place in the window
                for record in got:
                    record.index += offset
                    record.window = window
                records[arm].extend(got)
                active[arm] += max(r.end_s for r in got) - min(r.start_s for r in got)
    finally:
        for pool in connections:
            for connection in pool:
                connection.close()
    return tuple(Sample(records[arm], min(r.start_s for r in records[arm]), max(r.end_s for r in records[arm]),
                        active_s=active[arm]) for arm in (0, 1))  # type: ignore[return-value]


class InvalidSampleError(SpecperfError):
    """A measured sample cannot be trusted (a request returned fewer tokens than asked, or failed).

    Attributes:
        sample: the :class:`core._measure.client.Sample` as measured, with every request record kept.
    """

    def __init__(self, sample: Sample) -> None:
        self.sample = sample
        super().__init__(f"sample invalid: {invalid_text(sample)}")


def invalid_text(sample: Sample) -> str:
    """Why ``sample`` is invalid, once per cause: the truncated requests as one count with the
    first as the example (``3 of 16 requests returned fewer tokens than asked, e.g. request 7
    returned 12 of 128 tokens (...)``), then up to 5 failed requests' own errors."""
    truncated = [r for r in sample.requests if not r.error and r.output_tokens < r.expected_tokens]
    failed = [r.invalid_reason for r in sample.requests if r.error]
    parts = []
    if len(truncated) == 1:
        parts.append(truncated[0].invalid_reason)
    elif truncated:
        parts.append(f"{len(truncated)} of {len(sample.requests)} requests returned fewer tokens than asked, "
                     f"e.g. {truncated[0].invalid_reason}")
    parts += failed[:5]
    if len(failed) > 5:
        parts.append(f"and {len(failed) - 5} more failed requests")
    return "; ".join(p for p in parts if p)
