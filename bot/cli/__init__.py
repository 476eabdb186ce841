"""The ``specperf`` terminal command: parses arguments, runs one subcommand, maps errors to
exit statuses. Each subcommand lives in its own module of this package.

Exit status: :mod:`bot.cli.exit_status`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import typing
from types import FrameType

import uvloop
from rich.console import Console
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot._common import json_to_stdout
from bot.cli import bisection, compare, env, measure, report, slack_bot, triage
from bot.cli.exit_status import EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, EXIT_USAGE, failure


class OutputClosed(KeyboardInterrupt):
    """Standard output was closed under a command (``specperf compare ... | head -1``): a
    KeyboardInterrupt to everything that stops engines and marks runs (a compare ends
    ``interrupted``, its engines stopped), exit status 141."""


class _GuardedOutput:
    """The console's stream: a write to a closed pipe raises :class:`OutputClosed`, and later
    writes (the interpreter's last flush too) go nowhere."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._close()
            raise OutputClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._close()
            raise OutputClosed from None

    def _close(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


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
    guarded = typing.cast(typing.IO[str], _GuardedOutput(sys.stderr if to_stderr else sys.stdout))
    console = Console(file=guarded, soft_wrap=True, width=width)  # paths and messages stay whole when piped
    errors = Console(stderr=True, soft_wrap=True)  # one error, one unbroken line
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        # uvloop: about a quarter less client CPU per streamed token (bench/RESULTS.md)
        return uvloop.run(args.run(args, console))
    except core.SpecperfError as exc:
        label, status = failure(exc)
        errors.print(Text(f"{label}: ", style="bold red") + Text(str(exc)))
        return status
    except SQLAlchemyError as exc:  # the database failed after it was opened (locked, gone)
        errors.print(Text("storage error: ", style="bold red") + Text(f"the database failed: {storage.short_error(exc)}"))
        return EXIT_USAGE
    except OutputClosed:
        errors.print("standard output was closed; engines started by this command were stopped (a run is marked "
                     "interrupted)")
        return EXIT_PIPE_CLOSED
    except KeyboardInterrupt:
        errors.print("interrupted; engines started by this command were stopped (a run is marked interrupted)")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
