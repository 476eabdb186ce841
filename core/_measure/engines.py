"""Engine adapters: how to launch each engine for a mode, when it is ready, and what it says
about speculative decoding over one measured window.

* vLLM: ``python -m vllm.entrypoints.openai.api_server``; ready after ``/health`` answers 200
  and one real completion succeeds (``/health`` stays 200 on a stuck engine, vLLM #51663);
  acceptance length from deltas of the ``/metrics`` spec-decode counters, whichever set the
  version has (:func:`vllm_acceptance`), engine tok/s from ``vllm:generation_tokens_total``.
* SGLang: ``python -m sglang.launch_server --enable-metrics``; ready after
  ``/health_generate`` answers 200 and one real completion succeeds; acceptance length from,
  in order of preference, per-request ``spec_verify_ct`` (completion tokens / verify steps),
  the scheduler's 'Decode batch' log lines of the window, or the ``sglang:spec_accept_length``
  gauge; engine tok/s from the log lines' ``gen throughput``.
* command: any OpenAI-compatible server started by a configured argv (``transformers serve``,
  for one); ready after its health path answers 200 and one real completion succeeds;
  reports no engine figures.

Every kind finds at readiness how the server holds the output length fixed (the engine's
``output_length``, ``probe`` by default): the ready completion carries ``ignore_eos``; a
server that refuses the field (HTTP 400 or 422, as ``transformers serve`` does) is asked
again with ``min_tokens``, then with ``max_tokens`` alone. The method found is
:attr:`EngineAdapter.length_method`, which the benchmark client then uses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from core._config import EngineConfig
from core._errors import EngineExitedError, EngineNotReadyError, SpecperfError
from core._hosts import Host
from core._hosts.engine_log import fatal_line
from core._measure.client import LENGTH_METHODS, Sample, length_fields
from core._measure.prometheus import sample_sums, sample_values
from core._measure.sglang_log import window_figures


@dataclass(frozen=True)
class ProfilerHook:
    """How one launch of an engine is profiled with torch's profiler: launched with ``args``
    and ``env`` added, then ``POST start_path`` (JSON ``start_body``) after the warm-up and
    ``POST stop_path`` after the profiled requests; traces are written under the launch's
    trace folder on the engine's host."""

    args: list[str]
    env: dict[str, str]
    start_body: dict | None
    start_path: str = "/start_profile"
    stop_path: str = "/stop_profile"


PROFILER_CONFIG_SINCE = (0, 13)  # vLLM's --profiler-config (PR #29912); VLLM_TORCH_PROFILER_DIR before, gone in 0.16


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    parts = []
    for word in (version or "").split(".")[:2]:
        digits = "".join(c for c in word if c.isdigit()) if word[:1].isdigit() else ""
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts) if len(parts) == 2 else None


@dataclass(frozen=True)
class EngineFigures:
    """What the engine itself reported over the measured window.

    ``acceptance_length``: mean tokens emitted per verify step, bonus token included (``None``
    without speculative decoding). ``drafts`` and ``accepted_tokens``: counter deltas where
    the engine has them. ``output_tok_s``: the engine's own throughput figure, to
    cross-check the client. ``source`` names where the figures came from.
    ``acceptance_missing``: under speculation, why acceptance length could not be derived
    (which counter is missing); ``None`` otherwise. ``acceptance_per_position``: the share of
    drafts whose ``k``-th proposed token was accepted, ``k`` = 1 .. num_speculative_tokens
    (vLLM's ``spec_decode_num_accepted_tokens_per_pos`` over drafts; ``None`` where the engine
    has no such counter).
    """

    acceptance_length: float | None = None
    drafts: int | None = None
    accepted_tokens: int | None = None
    output_tokens: int | None = None
    output_tok_s: float | None = None
    source: str = ""
    acceptance_missing: str | None = None
    acceptance_per_position: tuple[float, ...] | None = None


FATAL_GRACE_S = 15.0  # how long an engine that logged a traceback (not out of memory) still gets to become ready


FATAL_FIRST_READ_S, FATAL_READ_EVERY_S = 5.0, 2.0  # an engine ready within 5 s never has its log read


class _FatalWatch:
    """The engine log read for a fatal error line during readiness: from
    :data:`FATAL_FIRST_READ_S` after the wait began, then every :data:`FATAL_READ_EVERY_S` (each
    read is two commands on an SSH host, which a quick engine should not wait behind)."""

    def __init__(self, log_tail: Callable[..., Awaitable[str]]) -> None:
        self._log_tail = log_tail
        self._read_at = time.monotonic() - FATAL_READ_EVERY_S + FATAL_FIRST_READ_S
        self._found: tuple[str, bool] | None = None
        self._since: float | None = None

    async def line(self) -> str | None:
        """The fatal line in the log now, if any."""
        await self._read(force=True)
        return self._found[0] if self._found else None

    async def given_up(self) -> str | None:
        """The fatal line once it is reason to stop waiting: out of memory at once, another
        error :data:`FATAL_GRACE_S` after it was first seen."""
        await self._read()
        if self._found is None or self._since is None:
            return None
        line, out_of_memory = self._found
        return line if out_of_memory or time.monotonic() - self._since >= FATAL_GRACE_S else None

    async def _read(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._read_at < FATAL_READ_EVERY_S:
            return
        self._read_at = now
        self._found = fatal_line(await self._log_tail(400))
        if self._found and self._since is None:
            self._since = now


class EngineAdapter:
    """Base adapter: the argv and readiness logic every engine kind shares."""

    kind = ""
    health_path = "/health"
    reads_log = False  # whether end_window needs the log written during the window

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.length_method: str = "ignore_eos" if config.output_length == "probe" else config.output_length

    def launch_argv(self, mode: str) -> list[str]:
        """The full launch argv for ``mode`` (CPU pinning prefix included; a container engine is
        pinned by its ``run`` options instead, core._hosts.container).

        Raises:
            KeyError: ``mode`` is not one of the engine's configured modes.
        """
        argv = self._server_argv() + list(self.config.args) + list(self.config.modes[mode])
        if self.config.cpus and not self.config.container:
            argv = ["taskset", "--cpu-list", ",".join(map(str, self.config.cpus)), *argv]
        return argv

    def _server_argv(self) -> list[str]:
        raise NotImplementedError

    def profiler(self, trace_dir: str, steps: int, version: str | None = None) -> ProfilerHook | None:
        """How to profile this engine into ``trace_dir`` (an absolute path on its host) for at
        most ``steps`` engine steps; ``version``: the engine library's version where the
        probe found it. ``None``: the engine has no profiler endpoint specperf can drive."""
        return None

    def _served_name_args(self) -> list[str]:
        name = self.config.served_model_name
        return ["--served-model-name", name] if name else []

    async def wait_ready(
        self, client: httpx.AsyncClient, timeout_s: float, exited: Callable[[], int | None],
        log_tail: Callable[..., Awaitable[str]],
    ) -> None:
        """Poll the health route, then send one real completion, until both succeed; the
        completion also finds :attr:`length_method` (module docstring). A failed check is
        retried after 0.05 s, doubling to every 0.5 s: an engine that starts in a second is
        seen at once, one that takes minutes is asked twice a second. From 5 s on, the log is
        read every 2 s for a fatal error (core._hosts.engine_log.fatal_line): an out-of-memory
        line ends the wait at once, another traceback's error :data:`FATAL_GRACE_S` later if the
        engine is still not ready (a server that lost its model can answer 503 for ever); each
        message leads with that line.

        Args:
            client: bound to the engine's base URL.
            timeout_s: overall deadline in seconds.
            exited: returns the engine's exit status once it has exited, else ``None``.
            log_tail: a coroutine function giving the engine log's last lines (``log_tail(n)``: n lines).

        Raises:
            EngineExitedError: the engine exited before it was ready.
            EngineNotReadyError: the deadline passed, or the engine logged a fatal error.
        """
        deadline = time.monotonic() + timeout_s
        healthy = False
        pause_s = 0.05
        last = "no answer yet"
        methods: list[str] = list(LENGTH_METHODS if self.config.output_length == "probe"
                                  else [self.config.output_length])
        fatal = _FatalWatch(log_tail)
        while True:
            code = exited()
            if code is not None:
                line = await fatal.line()
                raise EngineExitedError(
                    f"{self.kind} engine exited with status {code} before it was ready"
                    + (f": {line}" if line else ""), await log_tail())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                line = await fatal.line()
                raise EngineNotReadyError(
                    (f"{line}: " if line else "") + f"{self.kind} engine not ready after {timeout_s:.0f} s (last check: "
                    f"{last}); raise engines.<name>.ready_timeout_s if it is only slow", await log_tail())
            if given_up := await fatal.given_up():
                raise EngineNotReadyError(
                    f"{given_up}: the {self.kind} engine logged this before it was ready and still answers {last}; "
                    "specperf stopped waiting (fix the cause in its log; for out of memory, give the engine a smaller "
                    "memory share or fewer cached tokens)", await log_tail())
            try:
                if not healthy:
                    response = await client.get(self.health_path, timeout=min(5.0, remaining))
                    healthy = response.status_code == 200
                    last = f"GET {self.health_path} -> {response.status_code}"
                    if healthy:
                        continue  # the completion at once, not half a second later
                else:
                    response = await client.post(
                        "/v1/completions",
                        json={"model": self.config.request_model_name, "prompt": "ready", "temperature": 0.0,
                              **length_fields(methods[0], 1)},
                        timeout=max(0.1, remaining),
                    )
                    last = f"first completion ({methods[0]}) -> {response.status_code}"
                    if response.status_code == 200:
                        self.length_method = methods[0]
                        return
                    if response.status_code in (400, 422) and len(methods) > 1:
                        methods.pop(0)  # the server refuses that field: try the next method now
                        continue
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__} on {'completion' if healthy else self.health_path}"
            await asyncio.sleep(pause_s)
            pause_s = min(2 * pause_s, 0.5)

    async def begin_window(self, client: httpx.AsyncClient) -> object:
        """Read whatever the engine needs at the start of the measured window."""
        return None

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str, mode: str = ""
    ) -> EngineFigures:
        """The engine's figures over the window of a ``mode`` launch, from ``start`` and the log
        written during it."""
        return EngineFigures()


_SPEC_COUNTER = "spec_decode_num_{}_total"
NOT_DERIVED = "; acceptance length not derived: "  # joins a figures source and the reason


def num_speculative_tokens(args: list[str]) -> int | None:
    """``k``, the draft tokens per verify step, from vLLM launch arguments: the
    ``num_speculative_tokens`` of ``--speculative-config`` JSON, or ``--num-speculative-tokens``
    (older vLLM); ``None`` when neither is given."""
    for i, arg in enumerate(args):
        flag, _, inline = arg.partition("=")
        value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
        if flag.replace("_", "-") == "--speculative-config":
            try:
                k = json.loads(value).get("num_speculative_tokens")
            except (ValueError, AttributeError):
                k = None
            if isinstance(k, int) and k > 0:
                return k
        elif flag.replace("_", "-") == "--num-speculative-tokens" and value.isdigit() and int(value) > 0:
            return int(value)
    return None


@dataclass(frozen=True)
class VllmAcceptance:
    """Acceptance over a window from vLLM's spec-decode counters; see :func:`vllm_acceptance`."""

    acceptance_length: float | None
    drafts: int | None
    accepted_tokens: int | None
    formula: str | None
    missing: str | None


def vllm_acceptance(start: dict[str, float], end: dict[str, float], k: int | None) -> VllmAcceptance:
    """Acceptance length from whichever spec-decode counter set this vLLM exports.

    ``start`` and ``end`` are ``/metrics`` sample sums (name -> value) at the window's ends,
    names with or without the ``vllm:`` prefix; ``k`` is ``num_speculative_tokens``.
    In order of preference (vLLM V1 has the first, V1 before drafts were counted the second,
    V0 the third; the draft-token counter counts ``k`` per draft):

    * ``num_drafts``: 1 + accepted / drafts
    * ``num_draft_tokens`` and ``k``, ``num_emitted_tokens``: emitted / (draft tokens / k)
      (emitted tokens include the bonus token)
    * ``num_draft_tokens`` and ``k``, ``num_accepted_tokens``: 1 + accepted / (draft tokens / k)

    Returns every field ``None`` when no spec-decode counter exists (no speculation); when
    some exist but none of the sets fits, ``missing`` says which counter or setting is
    lacking.
    """
    def delta(name: str) -> float | None:
        for key in (f"vllm:{_SPEC_COUNTER.format(name)}", _SPEC_COUNTER.format(name)):
            if key in end:
                return end[key] - start.get(key, 0.0)
        return None

    drafts, draft_tokens, accepted, emitted = (delta(n) for n in ("drafts", "draft_tokens", "accepted_tokens",
                                                                 "emitted_tokens"))
    if drafts is None and draft_tokens is None and accepted is None and emitted is None:
        return VllmAcceptance(None, None, None, None, None)
    accepted_int = int(accepted) if accepted is not None else None
    if drafts is not None and accepted is not None:
        if not drafts:
            return VllmAcceptance(None, 0, accepted_int, None, "no drafts in the window")
        return VllmAcceptance(1.0 + accepted / drafts, int(drafts), accepted_int,
                              "1 + accepted / drafts", None)
    if draft_tokens is not None and k:
        derived = draft_tokens / k
        if not derived:
            return VllmAcceptance(None, 0, accepted_int, None, "no drafts in the window")
        if emitted is not None:
            return VllmAcceptance(emitted / derived, int(derived), accepted_int,
                                  f"emitted / (draft tokens / {k})", None)
        if accepted is not None:
            return VllmAcceptance(1.0 + accepted / derived, int(derived), accepted_int,
                                  f"1 + accepted / (draft tokens / {k})", None)
    if draft_tokens is not None and not k:
        missing = ("vllm:spec_decode_num_drafts_total is missing and num_speculative_tokens is not in the "
                   "mode's arguments (give it in --speculative-config)")
    elif drafts is None and draft_tokens is None:
        missing = "vllm:spec_decode_num_drafts_total and vllm:spec_decode_num_draft_tokens_total are missing"
    else:
        missing = ("vllm:spec_decode_num_accepted_tokens_total and vllm:spec_decode_num_emitted_tokens_total "
                   "are missing")
    return VllmAcceptance(None, None, accepted_int, None, missing)


_PER_POSITION = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="%d"}'


def acceptance_per_position(start: dict[str, float], end: dict[str, float], drafts: int | None
                            ) -> tuple[float, ...] | None:
    """Per draft position ``k`` (1, 2, ...), accepted tokens at position ``k - 1`` of vLLM's
    ``spec_decode_num_accepted_tokens_per_pos`` counter over the window, divided by the window's
    ``drafts``: the share of drafts whose ``k``-th token was accepted (vllm/v1/spec_decode/
    metrics.py counts position 0 first). ``None`` without the counter or without drafts."""
    if not drafts:
        return None
    shares: list[float] = []
    while (key := _PER_POSITION % len(shares)) in end:
        shares.append((end[key] - start.get(key, 0.0)) / drafts)
    return tuple(shares) or None


async def chat_template_digest(host: Host, engine: EngineConfig, mode: str) -> str:
    """Which chat template the engine applies to chat requests, as the first 16 hex digits of
    its SHA-256: the file ``--chat-template`` names in the engine's or the mode's arguments,
    else the model folder's ``chat_template.jinja``, else the ``chat_template`` of its
    ``tokenizer_config.json`` (read on ``host``; vLLM and SGLang look there in that order).
    ``"unknown: ..."`` with the reason when none can be read (a model named by its hub id: the
    template comes with the download)."""
    args = list(engine.args) + list(engine.modes.get(mode, []))
    named = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--chat-template"), None) or next(
        (arg.split("=", 1)[1] for arg in args if arg.startswith("--chat-template=")), None)
    folder = engine.model.rstrip("/")
    if not named and not folder:
        return "unknown: the engine names no model folder and no --chat-template"
    for path, key in ((named, None),) if named else ((f"{folder}/chat_template.jinja", None),
                                                       (f"{folder}/tokenizer_config.json", "chat_template")):
        try:
            text = await host.read_text(path)
        except SpecperfError:
            continue
        if key:
            try:
                template = json.loads(text).get(key)
            except (ValueError, AttributeError):
                continue
            text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
            if template is None:
                continue
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    where = named or f"{folder}/chat_template.jinja or tokenizer_config.json"
    return f"unknown: no chat template read from {where} on host {host.name}"


class VllmAdapter(EngineAdapter):
    """vLLM's OpenAI server (the CPU build included)."""

    kind = "vllm"
    _GENERATED = "vllm:generation_tokens_total"

    def _server_argv(self) -> list[str]:
        return [
            self.config.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.config.model, "--host", "127.0.0.1", "--port", str(self.config.port),
            *self._served_name_args(),
        ]

    def profiler(self, trace_dir: str, steps: int, version: str | None = None) -> ProfilerHook | None:
        """``--profiler-config`` from vLLM 0.13 on (or when the version is unknown), else
        ``VLLM_TORCH_PROFILER_DIR``; Python stacks off (they multiply the trace's size and the
        profiler's overhead); ``max_iterations`` bounds the profiled steps where the server
        takes it (vllm/entrypoints/serve/profile/api_router.py), older ones ignore the body."""
        parsed = _version_tuple(version)
        if parsed is not None and parsed < PROFILER_CONFIG_SINCE:
            return ProfilerHook([], {"VLLM_TORCH_PROFILER_DIR": trace_dir, "VLLM_TORCH_PROFILER_WITH_STACK": "0"},
                                None)
        config = {"profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False}
        return ProfilerHook(["--profiler-config", json.dumps(config)], {}, {"max_iterations": steps})

    async def _counters(self, client: httpx.AsyncClient) -> dict[str, float]:
        response = await client.get("/metrics", timeout=10.0)
        response.raise_for_status()
        return sample_sums(response.text, split="position")

    async def begin_window(self, client: httpx.AsyncClient) -> object:
        return await self._counters(client)

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str, mode: str = ""
    ) -> EngineFigures:
        assert isinstance(start, dict)
        # The counters are updated as engine steps finish, a moment after the client has its
        # last token: wait (up to 2 s) until the generated-token counter has caught up.
        deadline = time.monotonic() + 2.0
        while True:
            end = await self._counters(client)
            generated = int(end.get(self._GENERATED, 0) - start.get(self._GENERATED, 0))
            if generated >= sample.output_tokens or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        args = list(self.config.args) + list(self.config.modes.get(mode, []))
        spec = vllm_acceptance(start, end, num_speculative_tokens(args))
        if spec.missing is None and spec.formula is None and _speculative_args(args):
            spec = VllmAcceptance(None, None, None, None, "no vllm:spec_decode_* counter in /metrics")
        source = "vllm /metrics counter deltas" + (f" ({spec.formula})" if spec.formula else "")
        if spec.missing:
            source += NOT_DERIVED + spec.missing
        return EngineFigures(
            acceptance_length=spec.acceptance_length, drafts=spec.drafts, accepted_tokens=spec.accepted_tokens,
            output_tokens=generated,
            output_tok_s=generated / sample.window_s if sample.window_s > 0 else None,
            source=source, acceptance_missing=spec.missing,
            acceptance_per_position=acceptance_per_position(start, end, spec.drafts),
        )


def _speculative_args(args: list[str]) -> bool:
    return any(a.split("=", 1)[0].replace("_", "-") in ("--speculative-config", "--speculative-model")
               for a in args)


class SglangAdapter(EngineAdapter):
    """SGLang's server (``sglang.launch_server``)."""

    kind = "sglang"
    health_path = "/health_generate"
    reads_log = True

    def _server_argv(self) -> list[str]:
        return [
            self.config.python, "-m", "sglang.launch_server",
            "--model-path", self.config.model, "--host", "127.0.0.1", "--port", str(self.config.port),
            "--enable-metrics", *self._served_name_args(),
        ]

    def profiler(self, trace_dir: str, steps: int, version: str | None = None) -> ProfilerHook | None:
        """SGLang's ``/start_profile`` with ``output_dir`` (and ``SGLANG_TORCH_PROFILER_DIR``
        for versions that read only the variable), stopped by ``/stop_profile``; SGLang
        bounds nothing here, the profiled requests do."""
        return ProfilerHook([], {"SGLANG_TORCH_PROFILER_DIR": trace_dir}, {"output_dir": trace_dir})

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str, mode: str = ""
    ) -> EngineFigures:
        log_accept, log_tok_s, lines = window_figures(log_text)
        verify_steps = [r.spec_verify_ct for r in sample.requests if r.spec_verify_ct]
        if verify_steps and len(verify_steps) == len(sample.requests):
            return EngineFigures(
                acceptance_length=sample.output_tokens / sum(verify_steps),
                drafts=sum(verify_steps), output_tok_s=log_tok_s,
                source="sglang per-request spec_verify_ct",
            )
        if lines:
            return EngineFigures(
                acceptance_length=log_accept, output_tok_s=log_tok_s,
                source=f"sglang decode log ({lines} lines)",
            )
        try:
            response = await client.get("/metrics", timeout=10.0)
            values = sample_values(response.text, "sglang:spec_accept_length") if response.status_code == 200 else []
        except httpx.HTTPError:
            values = []
        if values:
            return EngineFigures(
                acceptance_length=sum(values) / len(values),
                source="sglang:spec_accept_length gauge (last log interval)",
            )
        return EngineFigures(source="sglang: no figures in the window")


class CommandAdapter(EngineAdapter):
    """Any OpenAI-compatible server started by ``command`` (``{port}``, ``{model}``, ``{python}``)."""

    kind = "command"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.health_path = config.health_path

    def _server_argv(self) -> list[str]:
        fields = {"{port}": str(self.config.port), "{model}": self.config.model, "{python}": self.config.python}
        argv = []
        for word in self.config.command:
            for placeholder, value in fields.items():
                word = word.replace(placeholder, value)
            argv.append(word)
        return argv

    def profiler(self, trace_dir: str, steps: int, version: str | None = None) -> ProfilerHook | None:
        """With ``profile_dir_env`` set: that variable names the trace folder, and the server
        answers vLLM's two profiler endpoints (:class:`core._config.EngineConfig`)."""
        if not self.config.profile_dir_env:
            return None
        return ProfilerHook([], {self.config.profile_dir_env: trace_dir}, {"max_iterations": steps})


_ADAPTERS: dict[str, type[EngineAdapter]] = {a.kind: a for a in (VllmAdapter, SglangAdapter, CommandAdapter)}


def adapter_for(config: EngineConfig) -> EngineAdapter:
    """The adapter for ``config.kind`` (``vllm``, ``sglang`` or ``command``)."""
    return _ADAPTERS[config.kind](config)
