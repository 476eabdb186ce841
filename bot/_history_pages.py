"""The stored history as the front ends read it: each engine's commit order
(:func:`commit_orders`, for ``specperf report`` and the scheduled summary), and the history
pages from the database: ``specperf report --html DIR`` builds them with
:func:`write_history_site` (each run's page from :func:`bot._runs.run_page`, the pages
themselves by :func:`core._history.static_site.build_history_site`), after :func:`writable_dir` has proved the
folder can be written.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path

import core
import storage
from bot._common import open_host
from bot._runs import run_page
from core._git import first_parent_order
from core._history.series import Series
from core._history.static_site import SiteBuild, build_history_site
from core._history.summary import build_summary

_BEFORE_ANY_RUN = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


async def commit_orders(config: core.Config, engine: str | None, say) -> dict[str, list[str]]:
    """Per configured engine (or just ``engine``), its repo's first-parent order of ``HEAD`` on
    its host; an engine whose repo cannot be read is left out (its series go by run time)
    and ``say`` gets why."""
    orders = {}
    for name, cfg in config.engines.items():
        if (engine and name != engine) or not cfg.repo:
            continue
        try:
            async with open_host(config, cfg.host) as host:
                orders[name] = await first_parent_order(host, cfg.repo)
        except (core.GitError, core.HostError, core.ConfigError) as exc:
            say(f"{name}: commits in run-time order ({exc})")
    return orders


def html_dir_error(option: str, folder: Path, exc: OSError) -> str:
    """The one line for a history-pages folder that cannot be written: the option, the path,
    the system's reason and what to do."""
    why = exc.strerror or str(exc)
    return (f"{option} {folder}: cannot write the history pages there ({why}); give a folder you may write to, "
            "or a new one under a folder you may write to")


def writable_dir(option: str, path: str | Path) -> Path:
    """``path`` as a folder to write the pages into: created (with its parents) if missing,
    then a new file of a name no one else has created there and removed, to prove it before any
    work is done (a fixed name was truncated and unlinked through a link of that name).

    Raises:
        core.ConfigError: it cannot be (a file in the way, no permission, a read-only file
            system): :func:`html_dir_error`'s one line.
    """
    if not str(path).strip():
        raise core.ConfigError(f"{option} was given an empty path: give the folder to write the history pages into")
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".specperf-write-test.", dir=folder)  # a new name: nothing of the user's
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise core.ConfigError(html_dir_error(option, folder, exc)) from None
    return folder


def write_history_site(db, series: list[Series], directory: Path, *, engine: str | None = None,
                       headline: str | None = None, margin_pct: float = 2.0, alpha: float = 0.05) -> SiteBuild:
    """The history pages in ``directory``: a trend page per series of ``series``
    (``storage.load_series``, in the order the report uses; with ``by_category=True`` also a
    page per category of a prompt set) analysed over the whole history
    (:func:`core._history.summary.build_summary` with the compare rule ``margin_pct``, ``alpha``), and a page
    per stored run (of ``engine``, if given). ``headline`` tops the index (default: the
    whole history's).

    Returns:
        :class:`core._history.static_site.SiteBuild`: the site's pages (``index.html`` first)
        and those this build wrote (a run's page only when it changed).

    Raises:
        core.ConfigError: a file cannot be written (:func:`html_dir_error`).
    """
    history = build_summary(series, since=_BEFORE_ANY_RUN, margin_pct=margin_pct, alpha=alpha)
    pages = [run_page(stored) for run, _ in storage.list_runs(db, engine, limit=None)
             if run.id is not None and (stored := storage.load_run(db, run.id)) is not None]
    try:
        return build_history_site(directory, history, pages, headline=headline)
    except OSError as exc:
        raise core.ConfigError(html_dir_error("--html", directory, exc)) from None

