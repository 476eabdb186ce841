"""Engine adapters: how to launch each engine for a mode, when it is ready, and what it says
about speculative decoding over one measured window.

* vLLM: ``python -m vllm.entrypoints.openai.api_server``; ready after ``/health`` answers 200
  and one real completion succeeds (``/health`` stays 200 on a stuck engine, vLLM #51663);
  acceptance length from deltas of the ``/metrics`` counters
  ``vllm:spec_decode_num_accepted_tokens_total`` and ``vllm:spec_decode_num_drafts_total``
  (1 + accepted / drafts), engine tok/s from ``vllm:generation_tokens_total``.
* SGLang: ``python -m sglang.launch_server --enable-metrics``; ready after
  ``/health_generate`` answers 200 and one real completion succeeds; acceptance length from,
  in order of preference, per-request ``spec_verify_ct`` (completion tokens / verify steps),
  the scheduler's 'Decode batch' log lines of the window, or the ``sglang:spec_accept_length``
  gauge; engine tok/s from the log lines' ``gen throughput``.
* command: any OpenAI-compatible server started by a configured argv; ready after its
  health path answers 200 and one real completion succeeds; reports no engine figures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from core._config import EngineConfig
from core._errors import EngineExitedError, EngineNotReadyError
from core._loadgen import Sample
from core._prometheus import sample_sums, sample_values
from core._sglang_log import window_figures


@dataclass(frozen=True)
class EngineFigures:
    """What the engine itself reported over the measured window.

    ``acceptance_length``: mean tokens emitted per verify step, bonus token included (``None``
    without speculative decoding). ``drafts`` and ``accepted_tokens``: counter deltas where
    the engine has them. ``output_tok_s``: the engine's own throughput figure, to
    cross-check the client. ``source`` names where the figures came from.
    """

    acceptance_length: float | None = None
    drafts: int | None = None
    accepted_tokens: int | None = None
    output_tokens: int | None = None
    output_tok_s: float | None = None
    source: str = ""


class EngineAdapter:
    """Base adapter: the argv and readiness logic every engine kind shares."""

    kind = ""
    health_path = "/health"
    reads_log = False  # whether end_window needs the log written during the window

    def __init__(self, config: EngineConfig) -> None:
        self.config = config

    def launch_argv(self, mode: str) -> list[str]:
        """The full launch argv for ``mode`` (CPU pinning prefix included).

        Raises:
            KeyError: ``mode`` is not one of the engine's configured modes.
        """
        argv = self._server_argv() + list(self.config.args) + list(self.config.modes[mode])
        if self.config.cpus:
            argv = ["taskset", "--cpu-list", ",".join(map(str, self.config.cpus)), *argv]
        return argv

    def _server_argv(self) -> list[str]:
        raise NotImplementedError

    def _served_name_args(self) -> list[str]:
        name = self.config.served_model_name
        return ["--served-model-name", name] if name else []

    async def wait_ready(
        self, client: httpx.AsyncClient, timeout_s: float, exited: Callable[[], int | None],
        log_tail: Callable[[], Awaitable[str]],
    ) -> None:
        """Poll the health route, then send one real completion, until both succeed.

        Args:
            client: bound to the engine's base URL.
            timeout_s: overall deadline in seconds.
            exited: returns the engine's exit status once it has exited, else ``None``.
            log_tail: a coroutine function giving the engine log's last lines, for errors.

        Raises:
            EngineExitedError: the engine exited before it was ready.
            EngineNotReadyError: the deadline passed.
        """
        deadline = time.monotonic() + timeout_s
        healthy = False
        last = "no answer yet"
        while True:
            code = exited()
            if code is not None:
                raise EngineExitedError(
                    f"{self.kind} engine exited with status {code} before it was ready", await log_tail()
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EngineNotReadyError(
                    f"{self.kind} engine not ready after {timeout_s:.0f} s (last check: {last}); "
                    f"raise engines.<name>.ready_timeout_s if it is only slow",
                    await log_tail(),
                )
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
                        json={"model": self.config.request_model_name, "prompt": "ready",
                              "max_tokens": 1, "temperature": 0.0},
                        timeout=max(0.1, remaining),
                    )
                    last = f"first completion -> {response.status_code}"
                    if response.status_code == 200:
                        return
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__} on {'completion' if healthy else self.health_path}"
            await asyncio.sleep(0.5)

    async def begin_window(self, client: httpx.AsyncClient) -> object:
        """Read whatever the engine needs at the start of the measured window."""
        return None

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str
    ) -> EngineFigures:
        """The engine's figures over the window, from ``start`` and the log written during it."""
        return EngineFigures()


class VllmAdapter(EngineAdapter):
    """vLLM's OpenAI server (the CPU build included)."""

    kind = "vllm"
    _DRAFTS = "vllm:spec_decode_num_drafts_total"
    _ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
    _GENERATED = "vllm:generation_tokens_total"

    def _server_argv(self) -> list[str]:
        return [
            self.config.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.config.model, "--host", "127.0.0.1", "--port", str(self.config.port),
            *self._served_name_args(),
        ]

    async def _counters(self, client: httpx.AsyncClient) -> dict[str, float]:
        response = await client.get("/metrics", timeout=10.0)
        response.raise_for_status()
        return sample_sums(response.text)

    async def begin_window(self, client: httpx.AsyncClient) -> object:
        return await self._counters(client)

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str
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
        drafts = int(end.get(self._DRAFTS, 0) - start.get(self._DRAFTS, 0))
        accepted = int(end.get(self._ACCEPTED, 0) - start.get(self._ACCEPTED, 0))
        speculative = self._DRAFTS in end
        return EngineFigures(
            acceptance_length=(1.0 + accepted / drafts) if speculative and drafts else None,
            drafts=drafts if speculative else None,
            accepted_tokens=accepted if speculative else None,
            output_tokens=generated,
            output_tok_s=generated / sample.window_s if sample.window_s > 0 else None,
            source="vllm /metrics counter deltas",
        )


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

    async def end_window(
        self, client: httpx.AsyncClient, start: object, sample: Sample, log_text: str
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


_ADAPTERS: dict[str, type[EngineAdapter]] = {a.kind: a for a in (VllmAdapter, SglangAdapter, CommandAdapter)}


def adapter_for(config: EngineConfig) -> EngineAdapter:
    """The adapter for ``config.kind`` (``vllm``, ``sglang`` or ``command``)."""
    return _ADAPTERS[config.kind](config)
