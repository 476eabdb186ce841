"""The high-level entry points of ``import core``: each takes a :class:`Config` and names from it
(engine, workload, host, modes), opens the host, holds its lock where the work needs the
host's GPUs, and returns a typed result. Front ends with more to do (recording runs, progress
in Slack) compose the building blocks themselves, through the same mode rule
(:func:`engine_modes`).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from core._config import Config, EngineConfig
from core._env.checks import Check, CheckStatus, run_checks, worst
from core._env.probe import probe_async
from core._errors import ConfigError
from core._experiments.arms import base_set_up
from core._experiments.compare import (
    CompareObserver,
    CompareRequest,
    CompareResult,
    compare,
    resolve_refs,
)
from core._hosts import Host, open_host
from core._triage.rank import TriageReport, triage


def data_dir() -> Path:
    """specperf's data directory: ``$SPECPERF_HOME``, else ``$XDG_DATA_HOME/specperf``
    (``~/.local/share/specperf``); the local host's work directory is ``work/`` under it."""
    if home := os.environ.get("SPECPERF_HOME"):
        return Path(home)
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "specperf"


def lock_owner(doing: str) -> dict:
    """Who holds a host lock, as its waiters are told: this user and process, doing ``doing``."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    return {"by": f"{user}@{os.uname().nodename} pid {os.getpid()}", "doing": doing}


def engine_modes(config: Config, engine: str, modes: list[str] | None = None) -> list[str]:
    """The modes to measure on ``engine``: ``modes``, else ``[compare].modes`` that it has.

    Raises:
        ConfigError: no such engine, the engine lacks one of the modes, or none is left.
    """
    spec = config.engine(engine)
    wanted = list(modes) if modes else [m for m in config.compare.modes if m in spec.modes]
    missing = [m for m in wanted if m not in spec.modes]
    if missing or not wanted:
        raise ConfigError(f"engine {engine!r} has no mode {', '.join(missing) or '(none chosen)'} "
                          f"(its modes: {', '.join(spec.modes)})")
    return wanted


def _only(table: dict, given: str | None, what: str) -> str:
    if given:
        return given
    if not table:
        raise ConfigError(f"no {what} is configured; add a [{what}s.<name>] table to the config")
    if len(table) == 1:
        return next(iter(table))
    raise ConfigError(f"more than one {what} is configured ({', '.join(sorted(table))}); name one with {what}=")


def _host(config: Config, name: str, workdir: str | Path | None) -> Host:
    if name not in config.hosts:
        raise ConfigError(f"no host named {name!r} in the config (known hosts: {', '.join(sorted(config.hosts))})")
    return open_host(name, config.hosts[name], Path(workdir) if workdir else data_dir() / "work", config.source)


async def compare_commit(config: Config, commit: str | None, *, base: str | None = None, engine: str | None = None,
                         workload: str = "default", modes: list[str] | None = None, host: str | None = None,
                         workdir: str | Path | None = None, wait: bool = True,
                         observer: CompareObserver | None = None, base_engine: str | None = None) -> CompareResult:
    """Compare ``commit`` against ``base`` (default: its first parent) on ``engine`` (default:
    the only one) and its host (or ``host``), holding the host's lock (``wait``: wait for a busy
    host, else raise). Nothing is stored; ``observer`` hears the progress. ``base_engine``: the
    base arm on that engine entry's set-up (issue 39, core._experiments.arms; default base: the
    commit itself); when neither engine has a repo, ``commit`` and ``base`` are ``None`` and the
    arms are the two set-ups alone.

    Returns:
        The :class:`CompareResult`: ``status`` (a :class:`RunStatus`), ``verdicts`` by mode
        (each a :class:`Verdict` whose ``verdict`` is a :class:`VerdictKind`), the trials.

    Raises:
        ConfigError: an unknown engine, workload, host or mode, or a base engine that cannot
            be the other arm (another model or host, a mode it lacks), or a missing container image.
        GitError: a bad ref (before anything runs), a commit named for set-ups without a
            repo, or none named for an engine with one.
        HostError: the host cannot be reached, or is busy and ``wait`` is false.
    """
    name = _only(config.engines, engine, "engine")
    spec = config.engine(name)
    chosen = engine_modes(config, name, modes)
    other = None if base_engine is None else base_set_up(base_engine, config.engine(base_engine), name, spec, chosen)
    async with _host(config, host or spec.host, workdir) as target:
        request = CompareRequest(engine_name=name, engine=spec, workload_name=workload,
                                 workload=config.workload(workload), head_ref=commit, base_ref=base,
                                 modes=chosen, settings=config.compare, host=target,
                                 base_engine_name=base_engine, base_engine=other)
        shas = await resolve_refs(request)
        async with target.lock(lock_owner(f"compare {shas[1][:12]}"), wait=wait):
            return await compare(request, observer, shas=shas)


@dataclass(frozen=True)
class HostReport:
    """A host's environment: the probe's ``snapshot`` (JSON-able dict: GPUs, software, system,
    environment variables) and the ``checks`` run on it."""

    host: str
    snapshot: dict
    checks: list[Check]

    @property
    def worst(self) -> CheckStatus:
        """The worst status of the checks (PASS < WARN < FAIL)."""
        return worst(self.checks)


async def check_host(config: Config, host: str | None = None, *, engine: str | None = None,
                     under_load: bool = False, workdir: str | Path | None = None) -> HostReport:
    """Probe ``host`` (default: ``engine``'s host, else ``local``) with ``engine``'s Python
    (default: the first engine configured on that host, else the host's ``python``) and run the
    checks (``under_load``: judged as during a measurement). Nothing is launched.

    Raises:
        ConfigError: an unknown host or engine.
        ProbeError: the probe could not run or its output could not be read.
        HostError: the host cannot be reached.
    """
    spec: EngineConfig | None
    if engine:
        spec = config.engine(engine)
        host = host or spec.host
    else:
        host = host or "local"
        spec = next((e for e in config.engines.values() if e.host == host), None)
    async with _host(config, host, workdir) as target:
        python = spec.python if spec else config.hosts[host].python
        snapshot = await probe_async(python, cheap=False, env=dict(spec.env) if spec else {}, host=target,
                                     container=spec.container if spec else None)
    return HostReport(host, snapshot, run_checks(snapshot, under_load=under_load, engine_cpus=spec.cpus if spec else None))


async def triage_range(config: Config, good: str, bad: str, *, engine: str | None = None,
                       modes: list[str] | None = None, host: str | None = None,
                       workdir: str | Path | None = None) -> TriageReport:
    """Rank the first-parent commits after ``good`` up to ``bad`` in ``engine``'s repo by
    suspicion (``modes``: whose arguments decide the gates; default all the engine's). No engine
    is launched and no lock is taken.

    Raises:
        ConfigError: an unknown engine, host or mode, or the engine has no repo.
        GitError: a bad ref, or ``good`` is not on ``bad``'s first-parent line.
    """
    name = _only(config.engines, engine, "engine")
    spec = config.engine(name)
    if not spec.repo:
        raise ConfigError(f"engine {name!r} has no repo; set engines.{name}.repo")
    chosen = engine_modes(config, name, modes) if modes else None
    async with _host(config, host or spec.host, workdir) as target:
        return await triage(target, spec.repo, good, bad, spec, config.triage.rules_for(name, spec.kind), chosen)
