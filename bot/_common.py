"""What every ``specperf`` subcommand shares: the data directory, picking names from the
config, opening hosts and the database, and number formatting (the configuration itself:
:mod:`bot._settings`)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import core
import storage
from core._api import lock_owner
from core._env.disturbance import Disturbance
from core._hosts import Host
from core._hosts import open_host as _open_host


class SlackUnavailableError(core.SpecperfError):
    """Slack could not be reached, or kept answering with server errors, after bounded retries."""


def data_dir() -> Path:
    """specperf's data directory (:func:`core.data_dir`)."""
    return core.data_dir()


def pick(table: dict, given: str | None, what: str, default: str | None = None) -> str:
    """``given``, else ``default`` when configured, else the only entry of ``table``.

    Raises:
        core.ConfigError: none configured, or several and none chosen.
    """
    if given:
        return given
    if not table:
        raise core.ConfigError(f"no {what} is configured; add a [{what}s.<name>] table to the config")
    if default and default in table:
        return default
    if len(table) == 1:
        return next(iter(table))
    raise core.ConfigError(
        f"more than one {what} is configured ({', '.join(sorted(table))}); pick one with --{what}"
    )


def fmt(value: float | None, digits: int = 1) -> str:
    """``value`` with thousands separators and ``digits`` decimals; ``-`` for ``None``."""
    return "-" if value is None else f"{value:,.{digits}f}"


def pin_client(config: core.Config, console) -> None:
    """Pin this process (the benchmark client) to ``config.client_cpus``; warn if impossible."""
    if config.client_cpus:
        try:
            os.sched_setaffinity(0, config.client_cpus)
        except OSError as exc:
            console.print(f"[yellow]warning: cannot pin the client to CPUs {config.client_cpus}: {exc}")


def open_host(config: core.Config, name: str) -> Host:
    """The host ``name`` of the config (``local`` always exists); the local host's work
    directory is ``<data dir>/work``. Close it (``async with``) when done.

    Raises:
        core.ConfigError: no such host.
    """
    if name not in config.hosts:
        raise core.ConfigError(f"no host named {name!r} in the config (known hosts: {', '.join(sorted(config.hosts))})")
    return _open_host(name, config.hosts[name], data_dir() / "work", config.source)


STDOUT = "-"  # ``--json -``: the JSON document on standard output


def json_arg(parser, what: str, default: str = "") -> None:
    """``--json [PATH]``: where to write ``what`` as JSON (``default``: what happens without the
    option). ``-``, or the option without a PATH, writes only the JSON to standard output; the
    command's tables and notes then go to standard error (:func:`bot.cli.main` picks the
    console's stream by :func:`json_to_stdout`)."""
    parser.add_argument("--json", nargs="?", const=STDOUT, metavar="PATH",
                        help=f"write {what} as JSON to PATH{default}; '-' (or --json alone) writes only the JSON "
                             "to standard output, and the tables go to standard error")


def json_to_stdout(args) -> bool:
    """Whether ``args`` (a parsed command line) asks for the JSON on standard output."""
    return getattr(args, "json", None) == STDOUT


def check_output_path(option: str, path: str | None) -> None:
    """Fail before any work if ``--option path`` cannot be written (``-``, standard output, can).

    Raises:
        core.ConfigError: ``path`` is empty or a folder, its folder does not exist, or this user
            may not write there.
    """
    if path is None or path == STDOUT:
        return
    if not path.strip():
        raise core.ConfigError(f"--{option} was given an empty path: give a file to write, or '-' for standard output")
    target = Path(path)
    if target.is_dir() or not target.resolve().parent.is_dir():
        raise core.ConfigError(f"--{option} {path}: not a file in an existing folder")
    if not os.access(target if target.exists() else target.resolve().parent, os.W_OK):
        raise core.ConfigError(f"--{option} {path}: this user may not write there; give a path you may write to")


def write_json(path: str | Path, document: dict, console, label: str | None = "report:") -> None:
    """Write ``document`` as indented JSON to ``path`` and say so on ``console`` as
    ``LABEL PATH`` (``None``: say nothing); ``-`` writes it to standard output and says nothing.

    Raises:
        core.ConfigError: the file cannot be written (a full disk, ``/dev/full``): one line
            naming it and the cause.
    """
    text = json.dumps(document, indent=2)
    if str(path) == STDOUT:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    except OSError as exc:  # after the work: what was measured is stored, the file is not
        raise core.ConfigError(f"--json {path}: cannot write it ({exc.strerror or exc}); what was measured is stored "
                               "(`specperf show RUN --json PATH` writes a run's report again)") from None
    if label is not None:
        console.print(f"{label} {path}", markup=False, highlight=False)


def host_args(parser) -> None:
    """``--host``, ``--no-wait`` and ``--force-clean``: where an experiment runs and how it treats
    a busy host (its lock) and foreign GPU processes (core._env.hygiene)."""
    parser.add_argument("--host", help="host to run on (default: the engine's host from the config)")
    parser.add_argument("--no-wait", action="store_true", help="fail at once if the host is busy with another experiment")
    parser.add_argument("--force-clean", action="store_true",
                        help="stop foreign processes holding the host's GPUs instead of refusing to run")


def owner(command: str) -> dict:
    """Who holds a host lock: this process, for a waiter's message (:func:`core._api.lock_owner`)."""
    return lock_owner(command)


def owner_alive(db) -> Callable[[dict], bool]:
    """The one liveness rule of a recorded owner (of a run, a job or a received command):
    :func:`storage.owner_alive` on the database ``db`` (a process's identity that survives
    containers, and its lease; see storage._owners)."""
    return functools.partial(storage.owner_alive, db)


def database(config: core.Config, url: str | None = None, existing: bool = False):
    """The run database: ``url`` (``--db``), else ``[storage].url``, else SQLite in the data
    directory; migrated on open. ``existing``: for commands that only read runs, a SQLite file
    given by ``--db`` or the config must be there (:func:`storage.open_database`).

    Raises:
        storage.StorageError: it cannot be opened (or is missing, with ``existing``).
    """
    given = url or config.storage.url
    return storage.open_database(given or storage.default_url(data_dir()), existing=existing and bool(given))


def speedup_text(sides: dict) -> str:
    """EAGLE-3's speedup over baseline on each side and its change, one line (``""`` if none):
    ``sides`` is one entry of :func:`core._experiments.report.summarize`'s ``speedups``."""
    parts = []
    for role, label in (("base", "base"), ("head", "commit")):
        if s := sides[role]:
            parts.append(f"{label} {s['ratio']:.2f}x ({s['ci_low']:.2f}..{s['ci_high']:.2f})")
    if change := sides["change"]:
        moved = "changed" if change["ci_high"] < 1 or change["ci_low"] > 1 else "unchanged"
        parts.append(f"speedup {moved}: x{change['ratio']:.3f} ({change['ci_low']:.3f}..{change['ci_high']:.3f})")
    return "; ".join(parts)


def profile_lines(entry: dict) -> list[str]:
    """A mode's profile round in words (``entry``: one mode of a summarized report): the line
    naming the ops whose time per step moved, then where each arm's traces are kept (Perfetto,
    ui.perfetto.dev, opens them); ``[]`` for a mode not profiled. The same in the terminal and
    in Slack."""
    profile = entry.get("profile")
    if not profile:
        return []
    lines = [f"profile: {profile['line']}"]
    if profile.get("status") == "done":
        where = "; ".join(f"{label} {', '.join(profile[role]['traces'])}"
                          for role, label in (("base", "base"), ("head", "commit")))
        lines.append(f"traces (Perfetto opens them): {where}")
    return lines


def disturbed_lines(report: dict) -> list[str]:
    """One line per disturbed launch of a :func:`core._experiments.report.summarize` report: ``launch 9 (baseline
    commit, re-measured): <reasons>``; the same in the terminal and in Slack."""
    lines = []
    for row in report.get("launches", []):
        if row["disturbed"]:
            fate = "kept" if row["kept"] else "re-measured"
            role = "commit" if row["role"] == "head" else "base"
            lines.append(f"launch {row['seq']} ({row['mode']} {role}, {fate}): disturbed: " + "; ".join(row["disturbed"]))
    return lines


def seconds_arg(text: str) -> float:
    """An argparse type: a number of seconds in (0, 3600] (a watch's length).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 3600")
    return value


def window_rows(window: dict, judged: Disturbance) -> list[tuple[str, str]]:
    """(figure, value) rows of a window monitor's document, the same in the terminal and in
    Slack; the engine's CPUs' foreign share is the one ``judged`` (:func:`core._env.disturbance.judge_window` of
    this window) was decided on, so the table and the verdict line say the same number."""
    cpu, cpus, memory = window["cpu"], window["engine_cpus"], window["memory"]
    total, unattributed = judged.engine_cpus_foreign_share or 0.0, judged.engine_cpus_unattributed_share or 0.0
    return [(f"other processes on the engine's CPUs ({','.join(map(str, cpus))})", f"{total:.0%}"),
            ("  of which short-lived (not attributed to a pid)",
             f"{unattributed:.0%} ({cpu['engine_cpus_unattributed_s']:.2f} CPU-s)"),
            (f"other processes on all {window['host_cpus']} CPUs", f"{cpu['host_foreign_share']:.0%}"),
            ("steal (hypervisor) on the engine's CPUs", f"{cpu.get('engine_cpus_steal_share') or 0:.0%}"),
            ("available memory, lowest", "-" if memory.get("available_min_mib") is None
             else f"{memory['available_min_mib']} MiB"),
            ("swapped in / out", f"{memory.get('swap_in_mib', 0):g} / {memory.get('swap_out_mib', 0):g} MiB")]


def watch_verdict(judged: Disturbance) -> str:
    """The one line a watch ends with: DISTURBED and why, or quiet."""
    if judged.disturbed:
        return "a trial measured now would be DISTURBED: " + "; ".join(judged.reasons)
    return "quiet: a trial measured now would not be judged disturbed"
