"""specperf's front ends: the ``specperf`` terminal command (``bot.cli``) and the Slack bot,
with what they share: the configuration as the front ends read it (``core``'s file plus the
bot's ``[slack]``, ``[schedule]`` and ``[[watches]]``), the job queue, the scheduler, and the
renderers of reports for the terminal and Slack.

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

__all__ = ["load_config", "parse_config", "BotConfig", "SlackConfig", "SlackAllow", "AllowList", "ScheduleConfig",
           "WatchConfig"]
