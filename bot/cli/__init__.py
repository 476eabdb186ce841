"""The ``specperf`` terminal command: parses arguments, runs one subcommand, maps errors to
exit statuses. Each subcommand lives in its own module of this package.

Exit status: 0 success, 2 usage, config or database error (a run id not in the database too),
3 engine error, 4 invalid measurement, 5 host error (unreachable, refused, busy; also Slack unreachable or failing at bot start-up),
130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

import uvloop
from rich.console import Console
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot._common import SlackUnavailableError, json_to_stdout
from bot.cli import bisection, compare, env, measure, report, slack_bot, triage

EXIT_USAGE, EXIT_ENGINE, EXIT_INVALID, EXIT_HOST, EXIT_INTERRUPTED = 2, 3, 4, 5, 130
_FAILURES = (
    (core.ConfigError, "config error", EXIT_USAGE),
    (core.GitError, "git error", EXIT_USAGE),
    (storage.NoSuchRunError, "no such run", EXIT_USAGE),  # before StorageError, its base
    (storage.StorageError, "storage error", EXIT_USAGE),
    (core.InvalidSampleError, "invalid measurement", EXIT_INVALID),
    (core.EngineError, "engine error", EXIT_ENGINE),
    (core.HostError, "host error", EXIT_HOST),
    (SlackUnavailableError, "Slack error", EXIT_HOST),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specperf", description="Measure and compare LLM serving throughput.")
    parser.add_argument("--config", help="specperf.toml to use (default: ./specperf.toml or the embedded test engine)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (measure, compare, env, triage, bisection, report, slack_bot):
        command.register(sub)
    return parser


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops engines like Ctrl-C, once: a second SIGTERM, as a supervisor or a double
    ``kill`` sends, is ignored, so it cannot cut short the clean-up that marks the run
    interrupted (it used to leave the run ``running``). A Ctrl-C still can.

    While the event loop runs, the stop goes through asyncio.Runner's own SIGINT handler, as a
    Ctrl-C does: the main task is cancelled and its clean-up runs, then the runner raises
    KeyboardInterrupt. A KeyboardInterrupt raised from here would land on whatever bytecode runs,
    inside the loop's or a library's own bookkeeping too. Where Runner installed no handler (SIGINT
    ignored, as in a shell's background job, or no loop yet), KeyboardInterrupt is raised here."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    on_sigint = signal.getsignal(signal.SIGINT)
    if callable(on_sigint) and on_sigint is not signal.default_int_handler:
        on_sigint(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specperf`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    # --json -: standard output carries the JSON alone, so the tables and notes go to standard error
    to_stderr = json_to_stdout(args)
    # Piped output gets a report-wide page instead of rich's 80 columns (COLUMNS still rules).
    width = None if (sys.stderr if to_stderr else sys.stdout).isatty() or "COLUMNS" in os.environ else 160
    console = Console(stderr=to_stderr, soft_wrap=True, width=width)  # paths and messages stay whole when piped
    errors = Console(stderr=True, soft_wrap=True)  # one error, one unbroken line
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        # uvloop: about a quarter less client CPU per streamed token (bench/RESULTS.md)
        return uvloop.run(args.run(args, console))
    except core.SpecperfError as exc:
        label, status = next(((lbl, st) for kind, lbl, st in _FAILURES if isinstance(exc, kind)),
                             ("error", EXIT_USAGE))
        errors.print(Text(f"{label}: ", style="bold red") + Text(str(exc)))
        return status
    except SQLAlchemyError as exc:  # the database failed after it was opened (locked, gone)
        errors.print(Text("storage error: ", style="bold red") + Text(f"the database failed: {storage.short_error(exc)}"))
        return EXIT_USAGE
    except KeyboardInterrupt:
        errors.print("interrupted; engines started by this command were stopped (a run is marked interrupted)")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
