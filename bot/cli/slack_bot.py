"""``specperf bot``: run the Slack bot until stopped (Ctrl-C or SIGTERM).

Reads ``[slack]`` from the config (tokens usually from the environment), opens the run
database, reconciles what a crashed bot left, starts one worker per host and connects:
Socket Mode by default, or an HTTP endpoint at ``/slack/events`` (``--mode http``). Prints
one line when ready: ``listening on http://HOST:PORT/slack/events`` or ``connected (Socket
Mode)``, then one about the scheduler (``scheduler: running N schedule(s): ...``, or why it
is not running here: none configured, or another bot process holds its lock). Tokens and
secrets are never printed or logged.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from rich.console import Console

from bot._common import database
from bot._settings import load_config


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bot`` subcommand to ``sub``."""
    b = sub.add_parser("bot", help="run the Slack bot (/specperf commands, job queue, threaded verdicts)")
    b.add_argument("--mode", choices=["socket", "http"], help="override [slack].mode")
    b.add_argument("--port", type=int, help="override [slack].http_port (0: any free port)")
    b.add_argument("--db", help="database URL (default: [storage].url, else SQLite in the data directory)")
    b.set_defaults(run=run)


async def run(args: argparse.Namespace, console: Console) -> int:
    """Run the bot until SIGTERM or Ctrl-C; returns 0 after a clean stop.

    Raises:
        core.ConfigError: ``[slack]`` lacks the mode's token or secret.
        storage.StorageError: the database cannot be opened.
    """
    from bot._slack.app import SlackBot  # slack-bolt is only imported by the bot
    from bot._slack.client import RedactingFormatter, check_config

    config = load_config(args.config)
    overrides = {k: v for k, v in (("mode", args.mode), ("http_port", args.port)) if v is not None}
    if overrides:
        config = config.model_copy(update={"slack": config.slack.model_copy(update=overrides)})
    check_config(config.slack)  # before the database is opened or made
    handler = logging.StreamHandler()  # every line redacted: no exception text leaks a secret
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for noisy in ("slack_bolt", "slack_sdk", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    bot = SlackBot(config, database(config, args.db))
    await bot.start()
    # SIGTERM and Ctrl-C set an event rather than raise KeyboardInterrupt wherever the loop happens
    # to be: raised inside a transport callback, uvloop logs it as a transport error and goes on.
    # Installed before the ready lines: once they are printed, a SIGTERM is a clean stop.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    if config.slack.mode == "http":
        console.print(f"listening on http://{config.slack.http_host}:{bot.port}/slack/events", markup=False)
    else:
        console.print("connected (Socket Mode)", markup=False)
    console.print(f"scheduler: {bot.schedules.status}", markup=False)
    try:
        await stopping.wait()
        console.print("stopping: the running job's engine is stopped and the job queued again", markup=False)
    finally:
        await bot.stop()
    return 0
