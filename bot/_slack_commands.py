"""``/specperf`` command text -> a parsed command, with a real argument parser that never exits.

The text is split like a shell would split it (:func:`shlex.split`, which runs nothing), then
parsed by argparse subclassed so that every error raises :class:`UsageError` instead of
printing and calling ``sys.exit``; ``--help`` raises it too, carrying the help text. Commit
refs are checked with :func:`core.check_ref_text` here (no git runs), and resolved with
``git rev-parse --verify`` later; user text never reaches a shell.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

import core

HELP = """*specperf* measures whether a commit moved LLM serving throughput.
`/specperf compare <commit> [--base REF] [--host H] [--engine E] [--modes baseline,eagle3] [--rounds N]` queue a compare
`/specperf bisect <good> <bad> [--mode M] [--host H] [--engine E]` find the commit of a regression (or say there is none)
`/specperf status [job]` a job's state (default: the running ones)
`/specperf queue` the queued and running jobs per host
`/specperf cancel <job>` cancel a queued job, or stop a running one (its engine is stopped)
`/specperf history [engine]` the newest runs and their verdicts
`/specperf env [host]` probe a host's environment and run the checks
`/specperf help` this text"""

MAX_COMMAND_CHARS = 2000  # a command is a line; Slack's own limit on slash-command text is about 4,000
SUBCOMMANDS = ("compare", "bisect", "status", "queue", "cancel", "history", "env", "help")


class UsageError(Exception):
    """The command text is not a valid ``/specperf`` command; ``str()`` says why and how to fix it."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, exit_on_error=False, add_help=False, **kwargs)

    def error(self, message: str):  # argparse calls this for every usage error
        raise UsageError(f"{message}\nusage: {self.format_usage().removeprefix('usage: ').strip()}")

    def exit(self, status: int = 0, message: str | None = None):
        raise UsageError(message or self.format_usage())

    def print_help(self, file=None):
        raise UsageError(self.format_help())


def _ref(text: str) -> str:
    try:
        return core.check_ref_text(text)
    except core.GitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _name(text: str) -> str:
    if not text or not all(c.isalnum() or c in "-_." for c in text) or len(text) > 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a name (letters, digits, '-', '_', '.')")
    return text


def _modes(text: str) -> list[str]:
    modes = [_name(m) for m in text.split(",")]
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a mode")
    return modes


def _positive(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def _job_id(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (`/specperf queue` lists them)")
    return int(text)


def _build() -> _Parser:
    parser = _Parser(prog="/specperf")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("compare")
    c.add_argument("commit", type=_ref)
    c.add_argument("--base", type=_ref)
    c.add_argument("--host", type=_name)
    c.add_argument("--engine", type=_name)
    c.add_argument("--modes", type=_modes)
    c.add_argument("--rounds", type=_positive, help="exactly N ABBA rounds (2N launches per arm and mode)")
    b = sub.add_parser("bisect")
    b.add_argument("good", type=_ref)
    b.add_argument("bad", type=_ref)
    b.add_argument("--mode", type=_name)
    b.add_argument("--host", type=_name)
    b.add_argument("--engine", type=_name)
    s = sub.add_parser("status")
    s.add_argument("job", type=_job_id, nargs="?")
    sub.add_parser("queue")
    k = sub.add_parser("cancel")
    k.add_argument("job", type=_job_id)
    h = sub.add_parser("history")
    h.add_argument("engine", type=_name, nargs="?")
    e = sub.add_parser("env")
    e.add_argument("host", type=_name, nargs="?")
    sub.add_parser("help")
    return parser


_PARSER = _build()


@dataclass
class Command:
    """A parsed command: ``name`` (one of :data:`SUBCOMMANDS`) and its options (``commit``,
    ``base``, ``host``, ``engine``, ``modes``, ``rounds``, ``job``), unset ones ``None``."""

    name: str
    options: dict = field(default_factory=dict)

    def __getattr__(self, key: str):
        try:
            return self.options[key]
        except KeyError:
            raise AttributeError(key) from None


def parse(text: str) -> Command:
    """Parse the text after ``/specperf``; empty text is ``help``.

    Raises:
        UsageError: text longer than :data:`MAX_COMMAND_CHARS`, unbalanced quotes, an unknown
            subcommand or option, a missing or bad argument (a ref with shell characters, a
            non-numeric job id); the message says which, with the usage line.
    """
    if len(text or "") > MAX_COMMAND_CHARS:
        raise UsageError(f"the command is {len(text):,} characters long; at most {MAX_COMMAND_CHARS:,} are read")
    try:
        words = shlex.split(text or "")
    except ValueError as exc:
        raise UsageError(f"cannot read the command: {exc}\n{HELP}") from None
    if not words or words[0] in ("help", "--help", "-h"):
        return Command("help")
    if words[0] not in SUBCOMMANDS:
        raise UsageError(f"unknown command {words[0]!r}\n{HELP}")
    try:
        namespace = _PARSER.parse_args(words)
    except argparse.ArgumentError as exc:  # exit_on_error=False raises these for bad values
        raise UsageError(f"{exc}\nusage: {_usage(words[0])}") from None
    options = vars(namespace)
    return Command(options.pop("command"), options)


def _usage(name: str) -> str:
    for action in _PARSER._subparsers._group_actions:
        if name in action.choices:
            return action.choices[name].format_usage().removeprefix("usage: ").strip()
    return _PARSER.format_usage()
