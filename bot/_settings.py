"""The bot's settings: ``[slack]`` (tokens, mode, pacing, who may use it), ``[schedule]`` (the
scheduled regression summary), ``[report]`` (where the history pages are served) and
``[[watches]]`` (branches whose new heads are compared),
and :class:`BotConfig`, the whole ``specperf.toml`` as the front ends read it (core's
:class:`core.Config` with these three sections typed and cross-checked).

Everything in ``bot`` reads its configuration through :func:`load_config` or
:func:`parse_config` here.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

import core
from core._strict_model import ConfigSection, expand_vars


class AllowList(ConfigSection):
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


class SlackConfig(ConfigSection):
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
        return expand_vars(value) if isinstance(value, str) else value

    @field_validator("api_url")
    @classmethod
    def _expand_url(cls, value: str) -> str:
        value = expand_vars(value)
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


class ScheduleConfig(ConfigSection):
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


class ReportConfig(ConfigSection):
    """``[report]``: the history pages (``specperf report --html DIR``).

    ``html_base_url``: the ``http://`` or ``https://`` address at which DIR is served (for
    example ``https://perf.example/specperf``; ``${NAME}`` is read from the environment, a
    trailing ``/`` dropped). When set, the scheduled summary links to the index there and each
    series to its trend page; empty: no links.
    """

    html_base_url: str = ""

    @field_validator("html_base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = expand_vars(value).strip()
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("must be the http:// or https:// address where the folder of "
                             "`specperf report --html DIR` is served, without ?query or #fragment (or empty)")
        return value.rstrip("/")


class WatchConfig(ConfigSection):
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
    modes: list[str] | None = Field(default=None, min_length=1)
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


class BotConfig(core.Config):
    """``specperf.toml`` with the bot's sections validated (see :class:`core.Config`)."""

    slack: SlackConfig = Field(default_factory=SlackConfig)  # type: ignore[assignment]
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)  # type: ignore[assignment]
    report: ReportConfig = Field(default_factory=ReportConfig)  # type: ignore[assignment]
    watches: list[WatchConfig] = Field(default_factory=list)  # type: ignore[assignment]

    @model_validator(mode="after")
    def _bot_references(self) -> BotConfig:
        hosts = self.hosts
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
            try:
                self.watch_modes(watch)
            except core.ConfigError as exc:
                raise ValueError(f"{where}: {exc}") from None
            if not (watch.channel or self.schedule.channel):
                raise ValueError(f"{where}: needs channel, or schedule.channel")
        return self

    def watch_modes(self, watch: WatchConfig) -> list[str]:
        """The modes ``watch`` measures: its own, else ``[compare].modes`` that its engine has
        (:func:`core.engine_modes`).

        Raises:
            core.ConfigError: the engine lacks one of them, or none is chosen.
        """
        return core.engine_modes(self, watch.engine, watch.modes)


def parse_config(text: str, source: str = "<config>") -> BotConfig:
    """:func:`core.parse_config` with the bot's sections validated.

    Raises:
        core.ConfigError: as :func:`core.parse_config`, also for the bot's sections.
    """
    return core.parse_config(text, source, BotConfig)


def load_config(path: str | None = None) -> BotConfig:
    """The configuration: ``path``, else ``$SPECPERF_CONFIG``, else ``./specperf.toml``, else the
    embedded default (``bot/default.toml``, the local CPU test engine under
    ``$SPECPERF_TESTENV``, default ``~/.cache/specperf/testenv``).

    Raises:
        core.ConfigError: the file is unreadable or invalid.
    """
    os.environ.setdefault("SPECPERF_TESTENV", str(Path.home() / ".cache/specperf/testenv"))
    path = path or os.environ.get("SPECPERF_CONFIG")
    if path is None and Path("specperf.toml").exists():
        path = "specperf.toml"
    if path is not None:
        return core.load_config(path, BotConfig)
    text = resources.files("bot").joinpath("default.toml").read_text()
    return parse_config(text, "<embedded default config>")
