"""The ``specperf.toml`` configuration: hosts, engines (with their modes) and workloads.

The file is TOML (parsed with :mod:`tomllib`) validated by pydantic models that forbid unknown
keys, so a typo is an error, not a silently ignored setting. Strings in ``python``, ``model``, ``repo``,
``args``, mode arguments and ``env`` may reference environment variables as ``${NAME}``;
``python``, ``model`` and ``repo`` may also start with ``~``.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from core._errors import ConfigError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(text: str) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(f"references ${{{name}}}, which is not set in the environment")
        return os.environ[name]

    return _VAR.sub(sub, text)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostConfig(_Strict):
    """A machine that runs engines. With no ``ssh`` it is the local machine.

    ``ssh``: ``user@host`` (or ``host``), reached on ``port``; host keys are checked against
    ``known_hosts`` (default ``~/.ssh/known_hosts``), never skipped; authentication with
    ``identity_file`` or the SSH agent. ``jump``: a jump host (``user@bastion``), as ssh's
    ``-J``. ``exec_prefix``: words put before every command run on the host, for a container
    (``["pct", "exec", "129", "--"]``, ``["docker", "exec", "sglang"]``). ``workdir``: where
    worktrees, per-commit builds, engine logs and the host lock live (absolute; default: the
    data directory locally, ``/var/tmp/specperf`` over SSH). ``python``: the host's
    interpreter for specperf's small helper (standard library only). ``engine_address``:
    where the engine's port is reached from the host (a container's own address when the
    prefix enters another network namespace). ``device_paths``: globs of device files whose
    holders count as GPU users; ``ignore_holders``: programs that may hold them (system
    daemons). ``trial_deadline_s``: an engine is killed on the host after this long, whatever
    happens to specperf or the connection.
    """

    ssh: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    identity_file: str | None = None
    jump: str | None = None
    connect_timeout_s: float = Field(default=15.0, gt=0)
    exec_prefix: list[str] = Field(default_factory=list)
    workdir: str | None = None
    python: str = "python3"
    engine_address: str = "127.0.0.1"
    device_paths: list[str] = Field(default_factory=lambda: ["/dev/nvidia[0-9]*"])
    ignore_holders: list[str] = Field(default_factory=lambda: ["nvidia-persistenced", "nv-hostengine", "nv-fabricmanager", "dcgm"])
    trial_deadline_s: float = Field(default=7200.0, gt=0)

    @field_validator("ssh", "jump", "python", "engine_address", mode="before")
    @classmethod
    def _expand_text(cls, value):
        return _expand(value) if isinstance(value, str) else value

    @field_validator("exec_prefix", mode="before")
    @classmethod
    def _expand_words(cls, value):
        return [_expand(v) if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("workdir", mode="before")
    @classmethod
    def _absolute(cls, value):
        if not isinstance(value, str):
            return value
        value = _expand(value)
        if not value.startswith("/"):
            raise ValueError("must be an absolute path (no ~: it would not expand on the host)")
        return value.rstrip("/") or "/"

    @field_validator("known_hosts", "identity_file")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        return os.path.expanduser(_expand(value)) if value else value


class EngineConfig(_Strict):
    """One serving engine: how to launch it and which modes it has.

    Compare launches the engine from a git worktree of ``repo`` per commit. Source mode:
    ``source_dir`` (relative to the worktree, ``""`` for its root) goes first on PYTHONPATH,
    and ``source_package`` is the package that must then be imported from the worktree
    (checked before the first launch of each commit, so a stale install cannot be measured
    by mistake). Build mode: ``build`` is an argv run once per commit in its worktree, with
    ``{worktree}`` and ``{prefix}`` (a per-commit folder) replaced; ``{prefix}`` may also be
    used in ``python``, ``args`` and mode arguments (``python = "{prefix}/bin/python"``).
    ``modes`` maps a mode name (``baseline``, ``eagle3``, ...) to the extra launch arguments of
    that mode; ``args`` are common to every mode. ``command`` is only for ``kind = "command"``:
    the full argv, where ``{port}``, ``{model}`` and ``{python}`` are replaced.
    ``output_length``: how requests hold the output length fixed: ``ignore_eos``,
    ``min_tokens`` (= ``max_tokens``), ``max_tokens`` alone (an answer cut short by the model's
    end-of-sequence token invalidates the launch), or ``probe`` (default): the first of those
    the server accepts at readiness (an HTTP 400/422 to a field moves on to the next).
    """

    kind: Literal["vllm", "sglang", "command"]
    host: str = "local"
    repo: str | None = None
    source_dir: str | None = None
    source_package: str | None = None
    build: list[str] = Field(default_factory=list)
    python: str = "python3"
    model: str = ""
    served_model_name: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    modes: dict[str, list[str]] = Field(default_factory=lambda: {"baseline": []})
    command: list[str] = Field(default_factory=list)
    health_path: str = "/health"
    output_length: Literal["probe", "ignore_eos", "min_tokens", "max_tokens"] = "probe"
    port: int = Field(default=8199, ge=1, le=65535)
    cpus: list[int] | None = None
    ready_timeout_s: float = Field(default=600.0, gt=0)
    stop_grace_s: float = Field(default=15.0, gt=0)
    build_timeout_s: float = Field(default=7200.0, gt=0)

    @field_validator("python", "model", "repo")
    @classmethod
    def _expand_path(cls, value: str | None) -> str | None:
        return os.path.expanduser(_expand(value)) if value else value

    @field_validator("args", "command", "build")
    @classmethod
    def _expand_list(cls, value: list[str]) -> list[str]:
        return [_expand(v) for v in value]

    @field_validator("env")
    @classmethod
    def _expand_env(cls, value: dict[str, str]) -> dict[str, str]:
        return {k: _expand(v) for k, v in value.items()}

    @field_validator("modes")
    @classmethod
    def _expand_modes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if not value:
            raise ValueError("needs at least one mode, for example baseline = []")
        return {name: [_expand(v) for v in args] for name, args in value.items()}

    @model_validator(mode="after")
    def _kind_fields(self) -> EngineConfig:
        if self.kind == "command" and not self.command:
            raise ValueError('kind = "command" needs command = [...] (the full launch argv)')
        if self.kind != "command" and not self.model:
            raise ValueError(f'kind = "{self.kind}" needs model = "<path or name>"')
        return self

    @property
    def request_model_name(self) -> str:
        """The ``model`` field sent in requests: ``served_model_name`` or else ``model``."""
        return self.served_model_name or self.model


class WorkloadConfig(_Strict):
    """A seeded, fixed workload.

    ``prompt_words`` words of seeded text per prompt, ``output_len`` tokens generated per
    request (held fixed with ``ignore_eos``), ``concurrency`` requests in flight,
    ``requests`` measured requests after ``warmup_requests`` uncounted ones.
    """

    api: Literal["completions", "chat"] = "completions"
    prompt_words: int = Field(default=32, ge=1)
    output_len: int = Field(default=128, ge=2)
    concurrency: int = Field(default=1, ge=1)
    requests: int = Field(default=16, ge=1)
    warmup_requests: int = Field(default=2, ge=0)
    seed: int = 0
    request_timeout_s: float = Field(default=300.0, gt=0)


class CompareConfig(_Strict):
    """How a compare decides (see core._stats): ``margin_pct`` of base tok/s within which a
    change counts as none, rank-test ``alpha``, launches per arm and mode between
    ``min_trials`` and ``max_trials`` (rounds are added while INCONCLUSIVE), an overall
    ``time_budget_s``, and ``cooldown_s`` between launches."""

    margin_pct: float = Field(default=2.0, gt=0, lt=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_trials: int = Field(default=4, ge=2)
    max_trials: int = Field(default=8, ge=2)
    time_budget_s: float = Field(default=3600.0, gt=0)
    cooldown_s: float = Field(default=2.0, ge=0)
    modes: list[str] = Field(default_factory=lambda: ["baseline", "eagle3"])

    @model_validator(mode="after")
    def _trials(self) -> CompareConfig:
        if self.max_trials < self.min_trials:
            raise ValueError(f"max_trials ({self.max_trials}) is below min_trials ({self.min_trials})")
        return self


class TriageArea(_Strict):
    """A part of an engine's source tree: files matching ``paths`` (globs on repo-relative
    paths; ``*`` stays within a folder, ``**`` crosses folders) belong to area ``name`` with
    suspicion ``weight`` (0 to 100). The first area that matches a file wins."""

    name: str
    paths: list[str]
    weight: float = Field(ge=0, le=100)


class TriageDefault(_Strict):
    """How to tell a gate's default at one commit: it is on by default when the file
    ``path`` at that commit contains any of ``contains`` (for example the
    ``--disable-piecewise-cuda-graph`` flag exists only once the feature is on by default)."""

    path: str
    contains: list[str]


class TriageGate(_Strict):
    """A server flag or environment variable that turns a code path on.

    Code is under the gate when an enclosing ``if``/``while`` test (or an earlier early-exit
    guard) mentions one of ``markers`` (true when the gate is on: a function, attribute or
    name such as ``is_in_piecewise_cuda_graph``, or an environment variable's name) or of
    ``inverse_markers`` (true when it is off, such as ``disable_piecewise_cuda_graph``).
    The gate is on for a mode when the engine's ``args`` plus the mode's arguments hold one
    of ``enable_args`` after the last of ``disable_args``, or the engine's ``env`` sets one of
    ``env`` to a true value (1, true, yes, on); otherwise it has its default: ``default_on``,
    or, with ``default``, whatever the commit's own source says.
    """

    name: str
    markers: list[str] = Field(default_factory=list)
    inverse_markers: list[str] = Field(default_factory=list)
    enable_args: list[str] = Field(default_factory=list)
    disable_args: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    default_on: bool = False
    default: TriageDefault | None = None


class TriageModelRule(_Strict):
    """Model-specific code. With ``models``: files matching ``paths`` are used only by models
    whose architecture, ``model_type`` or name contains one of these words (``mamba``,
    ``qwen3_next``, ...). Without: each file is one model family's code, used when it names
    one of the configured model's architectures or is imported by a file that does."""

    paths: list[str]
    models: list[str] = Field(default_factory=list)


class TriageRules(_Strict):
    """Triage rules of one source layout (see core._triage): areas, dependency files and the
    packages whose pins are called out first, gates, and model-specific paths."""

    areas: list[TriageArea] = Field(default_factory=list)
    dependency_files: list[str] = Field(default_factory=list)
    dependency_packages: list[str] = Field(default_factory=list)
    gates: list[TriageGate] = Field(default_factory=list)
    model_paths: list[TriageModelRule] = Field(default_factory=list)


_HYBRID_MODELS = ["mamba", "jamba", "bamba", "nemotron_h", "nemotronh", "falcon_h1", "qwen3_next",
                  "granitemoehybrid", "lfm2", "kimi_linear", "minimax"]
_PINNED = ["torch", "flashinfer-python", "flashinfer-cubin", "flashinfer", "sgl-kernel", "nvidia-nccl-cu12",
           "nvidia-nccl-cu13", "nccl", "triton", "cuda-python", "xformers"]
_DOCS = TriageArea(name="docs and tests", paths=["docs/**", "test/**", "tests/**", "benchmark/**", "examples/**",
                                                  "**/*.md", "**/*.rst", ".github/**"], weight=0)

SGLANG_RULES = TriageRules(
    areas=[
        TriageArea(name="distributed communication and all-reduce", weight=70, paths=[
            "python/sglang/srt/distributed/**", "**/parallel_state.py", "**/pynccl*.py", "**/custom_all_reduce*.py"]),
        TriageArea(name="CUDA-graph runners", weight=60, paths=[
            "**/*cuda_graph_runner*.py", "python/sglang/srt/compilation/**"]),
        TriageArea(name="speculative decoding", weight=55, paths=[
            "python/sglang/srt/speculative/**", "**/*eagle*.py", "**/*spec*.py"]),
        TriageArea(name="attention backends", weight=55, paths=["python/sglang/srt/layers/attention/**"]),
        TriageArea(name="kernels", weight=50, paths=[
            "sgl-kernel/**", "python/sglang/jit_kernel/**", "python/sglang/srt/layers/moe/**",
            "python/sglang/srt/layers/quantization/**", "**/*.cu", "**/*.cuh", "**/*.cpp"]),
        TriageArea(name="scheduler", weight=45, paths=[
            "python/sglang/srt/managers/scheduler*.py", "python/sglang/srt/managers/schedule_*.py",
            "python/sglang/srt/managers/tp_worker*.py", "python/sglang/srt/managers/overlap*.py"]),
        TriageArea(name="model runner", weight=45, paths=["python/sglang/srt/model_executor/**"]),
        TriageArea(name="server arguments", weight=35, paths=["python/sglang/srt/server_args.py",
                                                               "python/sglang/srt/environ.py"]),
        TriageArea(name="models", weight=30, paths=["python/sglang/srt/models/**"]),
        TriageArea(name="layers", weight=30, paths=["python/sglang/srt/layers/**", "python/sglang/srt/mem_cache/**"]),
        _DOCS,
        TriageArea(name="other engine code", weight=10, paths=["python/**"]),
    ],
    dependency_files=["python/pyproject*.toml", "pyproject.toml", "**/requirements*.txt", "sgl-kernel/pyproject*.toml",
                      "docker/Dockerfile*"],
    dependency_packages=_PINNED,
    gates=[
        TriageGate(name="piecewise CUDA graph",
                   markers=["is_in_piecewise_cuda_graph", "enable_piecewise_cuda_graph", "piecewise_cuda_graph_runner"],
                   inverse_markers=["disable_piecewise_cuda_graph"],
                   enable_args=["--enable-piecewise-cuda-graph"], disable_args=["--disable-piecewise-cuda-graph"],
                   default=TriageDefault(path="python/sglang/srt/server_args.py",
                                         contains=["--disable-piecewise-cuda-graph", "disable_piecewise_cuda_graph"])),
        TriageGate(name="spec v2 (overlap scheduler for speculative decoding)",
                   markers=["SGLANG_ENABLE_SPEC_V2", "enable_spec_v2"], env=["SGLANG_ENABLE_SPEC_V2"]),
        TriageGate(name="speculative decoding",
                   markers=["is_eagle", "is_eagle3", "is_standalone", "is_ngram", "speculative_algorithm"],
                   inverse_markers=["spec_algorithm.is_none", "speculative_algorithm.is_none"],
                   enable_args=["--speculative-algorithm"]),
    ],
    model_paths=[
        TriageModelRule(paths=["python/sglang/srt/layers/attention/mamba/**", "python/sglang/srt/layers/attention/fla/**",
                               "**/*mamba*.py", "python/sglang/srt/layers/attention/hybrid_linear_attn_backend.py"],
                        models=_HYBRID_MODELS),
        TriageModelRule(paths=["python/sglang/srt/models/*.py"]),
    ],
)

VLLM_RULES = TriageRules(
    areas=[
        TriageArea(name="distributed communication and all-reduce", weight=70, paths=[
            "vllm/distributed/**", "**/parallel_state.py", "**/pynccl*.py", "**/custom_all_reduce*.py"]),
        TriageArea(name="CUDA-graph runners", weight=60, paths=[
            "vllm/compilation/**", "**/*cudagraph*.py", "**/*cuda_graph*.py"]),
        TriageArea(name="speculative decoding", weight=55, paths=["vllm/v1/spec_decode/**", "vllm/spec_decode/**",
                                                                  "**/*eagle*.py"]),
        TriageArea(name="attention backends", weight=55, paths=["vllm/attention/**", "vllm/v1/attention/**"]),
        TriageArea(name="kernels", weight=50, paths=[
            "csrc/**", "vllm/_custom_ops.py", "vllm/model_executor/layers/fused_moe/**",
            "vllm/model_executor/layers/quantization/**", "**/*.cu", "**/*.cuh", "CMakeLists.txt"]),
        TriageArea(name="scheduler", weight=45, paths=["vllm/v1/core/**", "vllm/core/**"]),
        TriageArea(name="model runner", weight=45, paths=["vllm/v1/worker/**", "vllm/worker/**"]),
        TriageArea(name="engine arguments", weight=35, paths=["vllm/config/**", "vllm/engine/arg_utils.py",
                                                               "vllm/envs.py"]),
        TriageArea(name="models", weight=30, paths=["vllm/model_executor/models/**"]),
        TriageArea(name="layers", weight=30, paths=["vllm/model_executor/layers/**"]),
        _DOCS,
        TriageArea(name="other engine code", weight=10, paths=["vllm/**"]),
    ],
    dependency_files=["pyproject.toml", "requirements/*.txt", "requirements*.txt", "setup.py", "docker/Dockerfile*"],
    dependency_packages=_PINNED,
    gates=[
        TriageGate(name="CUDA graphs", inverse_markers=["enforce_eager"], disable_args=["--enforce-eager"],
                   default_on=True),
        TriageGate(name="custom all-reduce", markers=["use_custom_allreduce"],
                   inverse_markers=["disable_custom_all_reduce"], disable_args=["--disable-custom-all-reduce"],
                   default_on=True),
        TriageGate(name="speculative decoding", markers=["speculative_config", "use_spec_decode"],
                   enable_args=["--speculative-config", "--speculative_config"]),
    ],
    model_paths=[
        TriageModelRule(paths=["vllm/model_executor/layers/mamba/**", "**/*mamba*.py"], models=_HYBRID_MODELS),
        TriageModelRule(paths=["vllm/model_executor/models/*.py"]),
    ],
)


class TriageConfig(_Strict):
    """``[triage]``: rules per source layout. ``[triage.rules.NAME]`` applies to the engine
    called NAME, else to engines of kind NAME; built in are ``sglang`` and ``vllm`` (an
    engine of kind ``command`` gets both). A table for a built-in name replaces only the
    fields it sets (``[triage.rules.sglang] areas = [...]`` keeps the built-in gates)."""

    rules: dict[str, TriageRules] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _with_builtins(self) -> TriageConfig:
        merged = {"sglang": SGLANG_RULES, "vllm": VLLM_RULES}
        for name, rules in self.rules.items():
            base = merged.get(name)
            merged[name] = base.model_copy(update={f: getattr(rules, f) for f in rules.model_fields_set}) if base else rules
        object.__setattr__(self, "rules", merged)
        return self

    def rules_for(self, engine_name: str, kind: str) -> TriageRules:
        """The rules for engine ``engine_name`` of kind ``kind`` (see the class docstring)."""
        if engine_name in self.rules:
            return self.rules[engine_name]
        if kind in self.rules:
            return self.rules[kind]
        sglang, vllm = self.rules["sglang"], self.rules["vllm"]
        return TriageRules(**{f: _union(getattr(sglang, f), getattr(vllm, f)) for f in TriageRules.model_fields})


def _union(first: list, second: list) -> list:
    return first + [x for x in second if x not in first]


class StorageConfig(_Strict):
    """Where runs are kept: any SQLAlchemy URL; empty means SQLite in the data directory."""

    url: str = ""


class AllowList(_Strict):
    """Slack user IDs (``U...``) and channel IDs (``C...``/``G...``) allowed to run commands."""

    users: list[str] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)


class SlackAllow(AllowList):
    """Who may use the bot. ``users``/``channels`` hold everywhere; ``hosts.NAME`` and
    ``engines.NAME`` add people and channels for that host or engine only. A command that
    targets (host, engine) is allowed when its user is in the union of the three user lists
    and its channel in the union of the three channel lists; nothing configured allows nobody."""

    hosts: dict[str, AllowList] = Field(default_factory=dict)
    engines: dict[str, AllowList] = Field(default_factory=dict)

    def allows(self, user: str, channel: str, host: str | None = None, engine: str | None = None) -> bool:
        """Whether ``user`` in ``channel`` may act on ``host``/``engine`` (``None``: any of them)."""
        lists = [self]
        lists += [v for k, v in self.hosts.items() if host is None or k == host]
        lists += [v for k, v in self.engines.items() if engine is None or k == engine]
        return any(user in a.users for a in lists) and any(channel in a.channels for a in lists)


class SlackConfig(_Strict):
    """The Slack bot (``specperf bot``).

    ``mode``: ``socket`` (Socket Mode: needs ``app_token``, no public URL) or ``http`` (an
    HTTP endpoint on ``http_port``, ``0`` for any free port, path ``/slack/events``; needs
    ``signing_secret``). Tokens are secrets (never shown) and usually come from the
    environment: ``bot_token = "${SLACK_BOT_TOKEN}"``. ``api_url`` moves the Web API (tests,
    proxies). ``requeue_interrupted``: a job a crashed bot left running is queued again once
    (else it fails). ``progress_interval_s``: seconds at least between edits of a run's
    progress message; ``channel_interval_s``: seconds at least between any two posts or
    edits in one channel (Slack allows about one per second).
    """

    mode: Literal["socket", "http"] = "socket"
    bot_token: SecretStr = SecretStr("")
    app_token: SecretStr = SecretStr("")
    signing_secret: SecretStr = SecretStr("")
    http_host: str = "0.0.0.0"
    http_port: int = Field(default=3000, ge=0, le=65535)
    api_url: str = "https://slack.com/api/"
    requeue_interrupted: bool = True
    progress_interval_s: float = Field(default=2.0, ge=0)
    channel_interval_s: float = Field(default=1.0, ge=0)
    allow: SlackAllow = Field(default_factory=SlackAllow)

    @field_validator("bot_token", "app_token", "signing_secret", mode="before")
    @classmethod
    def _expand_secret(cls, value):
        return _expand(value) if isinstance(value, str) else value

    @field_validator("api_url")
    @classmethod
    def _expand_url(cls, value: str) -> str:
        value = _expand(value)
        return value if value.endswith("/") else value + "/"


_CRON_FIELDS = (5, 6)


def _check_cron(value: str) -> str:
    fields = value.split()
    if len(fields) not in _CRON_FIELDS:
        raise ValueError("must be a cron expression of 5 fields (minute hour day month day-of-week, as crontab) "
                         "or 6 (a leading seconds field)")
    return " ".join(fields)


def _check_zone(value: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone (for example UTC or Europe/Berlin)") from None
    return value


class ScheduleConfig(_Strict):
    """``[schedule]``: when the bot posts the regression summary, and the settings its
    scheduled jobs share.

    ``summary_cron``: a cron expression (5 fields as crontab: minute hour day month
    day-of-week, or 6 with a leading seconds field), read in ``timezone`` (IANA name); empty
    means no scheduled summary. ``channel``: the Slack channel ID the summary goes to (and
    the default channel of ``[[watches]]``). ``period``: ``daily`` (the summary covers the
    last 24 hours, ``--since 1d``) or ``weekly`` (7 days). ``misfire_grace_s``: a tick missed
    while the bot was down (or its loop busy) still runs once after restart if it is at most
    this many seconds late; later ones are skipped until the next regular tick.
    """

    summary_cron: str = ""
    timezone: str = "UTC"
    channel: str = ""
    period: Literal["daily", "weekly"] = "weekly"
    misfire_grace_s: float = Field(default=6 * 3600.0, gt=0)

    @field_validator("summary_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return _check_cron(value) if value.strip() else ""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return _check_zone(value)

    @property
    def since_days(self) -> int:
        """The summary's period in days: 1 (daily) or 7 (weekly)."""
        return 1 if self.period == "daily" else 7


class WatchConfig(_Strict):
    """One ``[[watches]]`` entry: on ``cron`` (in ``[schedule].timezone``; 5 or 6 fields as
    ``summary_cron``), the bot fetches ``branch`` of engine ``engine``'s repo on ``host``
    (default: the engine's host) and, when its head moved since the last commit this watch
    queued, queues one compare of the new head against that commit (workload ``workload``,
    ``modes``: default ``[compare].modes`` that the engine has), below people's commands in
    the queue. Its messages go to ``channel`` (default ``[schedule].channel``). ``name``
    (default ``<engine>-<branch>``) identifies the watch: its scheduled job and its jobs."""

    name: str = ""
    engine: str
    branch: str = "main"
    host: str | None = None
    workload: str = "default"
    modes: list[str] | None = None
    cron: str
    channel: str = ""

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return _check_cron(value)

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str) -> str:
        if not value or re.search(r"[\s\\;&|$`'\"<>()*?\[\]~^:]|^-|\.\.|@\{", value):
            raise ValueError("is not a branch name")
        return value

    @model_validator(mode="after")
    def _default_name(self) -> WatchConfig:
        if not self.name:
            object.__setattr__(self, "name", f"{self.engine}-{self.branch}")
        return self


class Config(_Strict):
    """The whole configuration file.

    ``client_cpus`` pins the benchmark client (the specperf process) to those CPUs while it
    measures; with an engine's ``cpus`` this keeps client and engine off each other's cores.
    """

    hosts: dict[str, HostConfig] = Field(default_factory=lambda: {"local": HostConfig()})
    engines: dict[str, EngineConfig] = Field(default_factory=dict)
    workloads: dict[str, WorkloadConfig] = Field(default_factory=lambda: {"default": WorkloadConfig()})
    client_cpus: list[int] | None = None
    compare: CompareConfig = Field(default_factory=CompareConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    triage: TriageConfig = Field(default_factory=TriageConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    watches: list[WatchConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Config:
        hosts = dict(self.hosts)
        hosts.setdefault("local", HostConfig())
        object.__setattr__(self, "hosts", hosts)
        for name, engine in self.engines.items():
            if engine.host not in hosts:
                raise ValueError(
                    f"engines.{name}.host = {engine.host!r} is not a configured host "
                    f"(known: {', '.join(sorted(hosts))})"
                )
        for what, table, known in (("hosts", self.slack.allow.hosts, hosts), ("engines", self.slack.allow.engines,
                                                                                  self.engines)):
            for name in table:
                if name not in known:
                    raise ValueError(f"slack.allow.{what}.{name}: no such {what[:-1]} is configured")
        if self.schedule.summary_cron and not self.schedule.channel:
            raise ValueError("schedule.summary_cron needs schedule.channel (a Slack channel ID)")
        names = set()
        for i, watch in enumerate(self.watches):
            where = f"watches[{i}] ({watch.name})"
            if watch.name in names:
                raise ValueError(f"{where}: two watches are named {watch.name!r}; give each its own name")
            names.add(watch.name)
            if watch.engine not in self.engines:
                raise ValueError(f"{where}: engine {watch.engine!r} is not configured "
                                 f"(known: {', '.join(sorted(self.engines)) or 'none'})")
            engine = self.engines[watch.engine]
            if not engine.repo:
                raise ValueError(f"{where}: engine {watch.engine!r} has no repo to watch")
            if (watch.host or engine.host) not in hosts:
                raise ValueError(f"{where}: host {watch.host!r} is not a configured host")
            if watch.workload not in self.workloads:
                raise ValueError(f"{where}: workload {watch.workload!r} is not configured")
            missing = [m for m in (watch.modes or []) if m not in engine.modes]
            if missing or watch.modes == [] or not self.watch_modes(watch):
                raise ValueError(f"{where}: engine {watch.engine!r} has no mode {', '.join(missing) or '(none chosen)'}"
                                 f" (its modes: {', '.join(engine.modes)})")
            if not (watch.channel or self.schedule.channel):
                raise ValueError(f"{where}: needs channel, or schedule.channel")
        return self

    def watch_modes(self, watch: WatchConfig) -> list[str]:
        """The modes ``watch`` measures: its own, else ``[compare].modes`` that its engine has."""
        engine = self.engines[watch.engine]
        return list(watch.modes) if watch.modes else [m for m in self.compare.modes if m in engine.modes]

    def engine(self, name: str) -> EngineConfig:
        """The engine called ``name``; :class:`ConfigError` naming the known ones if absent."""
        return _pick(self.engines, name, "engine")

    def workload(self, name: str) -> WorkloadConfig:
        """The workload called ``name``; :class:`ConfigError` naming the known ones if absent."""
        return _pick(self.workloads, name, "workload")


def _pick(table: dict, name: str, what: str):
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise ConfigError(f"no {what} named {name!r} in the config (known {what}s: {known})")
    return table[name]


def _describe(error: dict, source: str) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key {loc!r}; check its spelling against the documented keys"
    where = f"{source}: {loc}" if loc else source
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message} (got {error.get('input')!r})" if loc else f"{where}: {message}"


def parse_config(text: str, source: str = "<config>") -> Config:
    """Parse and validate TOML ``text``.

    Args:
        text: the TOML document.
        source: the file name used in error messages.

    Raises:
        ConfigError: invalid TOML, an unknown key, a wrong type, or a broken reference; the
            message names ``source``, the dotted key and what was expected.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(err, source) for err in exc.errors()]
        raise ConfigError("\n".join(lines)) from None


def load_config(path: str | Path) -> Config:
    """Read and validate the TOML file at ``path``; raises :class:`ConfigError` (also when unreadable)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text (TOML files are UTF-8)") from None
    return parse_config(text, str(path))
