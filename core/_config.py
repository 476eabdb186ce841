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
    """A machine that runs engines. With no ``ssh`` it is the local machine."""

    ssh: str | None = None
    exec_prefix: list[str] = Field(default_factory=list)
    workdir: str | None = None


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
    port: int = Field(default=8199, ge=1, le=65535)
    cpus: list[int] | None = None
    ready_timeout_s: float = Field(default=600.0, gt=0)
    stop_grace_s: float = Field(default=15.0, gt=0)

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
    slack: SlackConfig = Field(default_factory=SlackConfig)

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
        return self

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
