"""``/specperf`` command text -> a parsed command, with a real argument parser that never exits.

The text is split like a shell would split it (:func:`shlex.split`, which runs nothing), then
parsed by argparse subclassed so that every error raises :class:`UsageError` instead of
printing and calling ``sys.exit``; ``--help`` raises it too, carrying the help text. Commit
refs are checked with :func:`core._git.check_ref_text` here (no git runs), and resolved with
``git rev-parse --verify`` later; user text never reaches a shell.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

import core
from bot._common import seconds_arg
from core._git import check_ref_text

MAX_COMMAND_CHARS = 2000  # a command is a line; Slack's own limit on slash-command text is about 4,000


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
        return check_ref_text(text)
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
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def _id(what: str, listed_by: str) -> Callable[[str], int]:
    """An argparse type for a positive id of ``what`` (``job``, ``run``), ASCII digits only; its
    error says which command lists them."""
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**63:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} id (`/specperf {listed_by}` lists them)")
        return int(text)
    return parse


_job_id = _id("job", "queue")
_run_id = _id("run", "history")


def _recheck_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=_run_id)
    p.add_argument("--base-only", action="store_true", help="only the run's base, on both sides")


def _percent(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("commit", type=_ref, nargs="?", help="none when neither engine has a repo (two set-ups)")
    p.add_argument("--base", type=_ref)
    p.add_argument("--host", type=_name)
    p.add_argument("--engine", type=_name)
    p.add_argument("--modes", type=_modes)
    p.add_argument("--rounds", type=_positive, help="exactly N ABBA rounds (2N launches per arm and mode)")
    p.add_argument("--base-engine", type=_name, help="launch the base arm from this engine entry (its own release, "
                   "args or environment; same host and model); without --base both arms run the commit")


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--commit", type=_ref, default="HEAD")
    p.add_argument("--host", type=_name)
    p.add_argument("--engine", type=_name)
    p.add_argument("--modes", type=_modes)
    p.add_argument("--launches", type=_positive, default=6)
    p.add_argument("--change-pct", type=_percent, default=5.0)
    p.add_argument("--power", type=_percent, default=0.9)
    p.add_argument("--windows", type=_positive, default=3, help="measured windows per launch")


def _watch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("seconds", type=seconds_arg, nargs="?", default=30.0)
    p.add_argument("--host", type=_name)
    p.add_argument("--engine", type=_name)


def _bisect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("good", type=_ref)
    p.add_argument("bad", type=_ref)
    p.add_argument("--mode", type=_name)
    p.add_argument("--host", type=_name)
    p.add_argument("--engine", type=_name)


def _optional(dest: str, kind) -> Callable[[argparse.ArgumentParser], object]:
    return lambda p: p.add_argument(dest, type=kind, nargs="?")


@dataclass(frozen=True)
class Spec:
    """One ``/specperf`` command: what it does (``summary``), one ``example`` of its text, its
    arguments (``add_args(parser)``), and whether it becomes a job in the host's queue."""

    summary: str
    example: str
    add_args: Callable[[argparse.ArgumentParser], object] | None = None
    queued: bool = False


# The one table of commands: the parser, the dispatcher (SlackCommands._cmd_<name>) and the
# help text are all built from it, so none of them can leave a command out.
COMMANDS: dict[str, Spec] = {
    "compare": Spec("queue a compare of a commit against its base (default: its first parent), a verdict per mode",
                    "compare 1a2b3c4 --modes baseline,eagle3", _compare_args, queued=True),
    "calibrate": Spec("queue A/A launches of one commit: this host's launch-to-launch spread per mode, and the margin "
                      "and launches a compare needs; stored as the host's calibration",
                      "calibrate --commit main --launches 6", _calibrate_args, queued=True),
    "recheck": Spec("queue a stored compare again on its host with its workload, modes and launches: whether its "
                    "figures hold today, and what changed if not", "recheck 12 --base-only", _recheck_args, queued=True),
    "watch": Spec("queue the per-trial window monitor alone for SECONDS (default 30): what on the host would "
                  "disturb a measurement now", "watch 60 --host h200-a", _watch_args, queued=True),
    "bisect": Spec("queue a bisect: the commit of a regression between GOOD and BAD (or that there is none)",
                   "bisect v0.5.0 main --mode eagle3", _bisect_args, queued=True),
    "status": Spec("a job's state (default: the running ones)", "status 12", _optional("job", _job_id)),
    "queue": Spec("the queued and running jobs per host", "queue"),
    "cancel": Spec("cancel a queued job, or stop a running one (its engine is stopped)", "cancel 12",
                   lambda p: p.add_argument("job", type=_job_id)),
    "history": Spec("the newest runs and their verdicts", "history sglang-k2", _optional("engine", _name)),
    "env": Spec("probe a host's environment and run the checks", "env h200-a", _optional("host", _name)),
    "help": Spec("this list", "help"),
}
SUBCOMMANDS = tuple(COMMANDS)
QUEUED = tuple(name for name, spec in COMMANDS.items() if spec.queued)


def _build() -> _Parser:
    parser = _Parser(prog="/specperf")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, spec in COMMANDS.items():
        command = sub.add_parser(name)
        if spec.add_args is not None:
            spec.add_args(command)
    return parser


_PARSER = _build()


def _help() -> str:
    lines = ["*specperf* measures whether a commit moved LLM serving throughput. Commands:"]
    for name, spec in COMMANDS.items():
        usage = " ".join(_usage(name).split()).removeprefix("/specperf ")
        lines.append(f"`/specperf {usage}` {spec.summary}; e.g. `/specperf {spec.example}`")
    return "\n".join(lines)


@dataclass
class Command:
    """A parsed command: ``name`` (one of :data:`SUBCOMMANDS`) and its options (``commit``,
    ``base``, ``host``, ``engine``, ``base_engine``, ``modes``, ``rounds``, ``job``, ``launches``, ``change_pct``,
    ``power``, ``seconds``, ``run``, ``base_only``), unset ones ``None``."""

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
            non-numeric job id, a compare with neither a commit nor ``--base-engine``); the
            message says which, with the usage line.
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
    if options["command"] == "compare" and options["commit"] is None and options["base_engine"] is None:
        raise UsageError("compare takes the commit to test (or, for two engine entries without a repo, "
                         f"--base-engine and no commit)\nusage: {_usage('compare')}")
    return Command(options.pop("command"), options)


def _usage(name: str) -> str:
    """The usage line of subcommand ``name`` (``/specperf compare [--base BASE] ... commit``)."""
    for action in _PARSER._subparsers._group_actions:
        if name in action.choices:
            return action.choices[name].format_usage().removeprefix("usage: ").strip()
    return _PARSER.format_usage()


HELP = _help()  # every command of COMMANDS with its usage and one example
