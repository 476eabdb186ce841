"""specperf's front ends: the ``specperf`` terminal command (``bot.cli``) and the Slack bot,
with what they share: the configuration as the front ends read it (``core``'s file plus the
bot's ``[slack]``, ``[schedule]`` and ``[[watches]]``), the job queue, the scheduler, and the
renderers of reports for the terminal and Slack.

The application layer (``_app.py``) is where a front end's request becomes a validated
compare or bisect run under the host lock; the CLI (``cli/``), the Slack app (``_slack/``)
and the job queue and scheduler (``_jobs/``) parse, call it, and render (ARCHITECTURE.md).

``bot`` is the top layer: it may import ``core`` and ``storage``; nothing imports ``bot``
(tests and ``bench`` use the public names below). Public names::

    load_config, parse_config, BotConfig, SlackConfig, SlackAllow, AllowList, ScheduleConfig, WatchConfig
"""

from bot._settings import (
    AllowList,
    BotConfig,
    ScheduleConfig,
    SlackAllow,
    SlackConfig,
    WatchConfig,
    load_config,
    parse_config,
)

__all__ = [
    "AllowList",
    "BotConfig",
    "ScheduleConfig",
    "SlackAllow",
    "SlackConfig",
    "WatchConfig",
    "load_config",
    "parse_config",
]
