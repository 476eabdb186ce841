"""Benchmark: ``specperf report --html DIR`` over a long stored history: time, peak memory and
bytes written for a first build, a rebuild with nothing changed, and a rebuild after one new run.

The history is tests/fixtures/history.sqlite (eight compares of the fake engine, migrated to
the newest schema) copied ``--copies`` times into one SQLite file (625 copies: 5,000 runs),
each copy's runs, arms, trials, verdicts and snapshots under new ids, its commits under new
shas (one sha per copy and original commit, so the series have ``8 * copies`` points) and its
times shifted a day per copy. One new run is a copy of the newest run under a new id.

Each build is ``specperf report --since 2020-01-01 --html DIR`` in its own process, timed by
the wall clock; the peak resident memory is the child's ``ru_maxrss`` (``os.wait4``); bytes written are the
sizes of the folder's files whose modification time is after the build started.

Run: ``.venv/bin/python -m bench.history_pages [--copies 625] [--keep DIR] [--tree CHECKOUT] [--builds N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import storage

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/history.sqlite"
_TABLES = ("runs", "arms", "trials", "verdicts", "env_snapshots")


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def make_history(path: Path, copies: int) -> int:
    """Write the ``copies``-fold history into ``path``; return its number of runs."""
    shutil.copyfile(FIXTURE, path)
    storage.open_database(f"sqlite:///{path}").dispose()  # migrated to the newest schema
    db = sqlite3.connect(path)
    db.create_function("copy_sha", 2, lambda sha, k: sha if not sha else
                       hashlib.sha1(f"{k}:{sha}".encode()).hexdigest())
    offsets = {t: db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {t}").fetchone()[0] for t in _TABLES}
    columns = {t: _columns(db, t) for t in _TABLES}
    shifted = {"runs": ("created_at", "finished_at"), "trials": ("started_at",), "env_snapshots": ("taken_at",)}
    moved = {"id": None, "run_id": "runs", "arm_id": "arms", "trial_id": "trials"}
    for k in range(1, copies):
        for table in _TABLES:
            exprs = []
            for name in columns[table]:
                if name in moved:
                    target = moved[name] or table
                    exprs.append(f"{name} + {k * offsets[target]}")
                elif name in ("base_sha", "head_sha", "sha"):
                    exprs.append(f"copy_sha({name}, {k})")
                elif name in shifted.get(table, ()):
                    exprs.append(f"datetime({name}, '+{k} days')")
                else:
                    exprs.append(name)
            db.execute(f"INSERT INTO {table} ({', '.join(columns[table])}) SELECT {', '.join(exprs)} FROM {table} "
                       f"WHERE id <= {offsets[table]}")
    db.commit()
    runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    db.close()
    return runs


def add_run(path: Path) -> int:
    """A copy of the newest run (with its arms, trials, verdicts, snapshots) under new ids; its id."""
    db = sqlite3.connect(path)
    newest = db.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    new_ids = {t: db.execute(f"SELECT MAX(id) FROM {t}").fetchone()[0] for t in _TABLES}
    arm_map = {}
    for table in _TABLES:
        cols = _columns(db, table)
        rows = db.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE "
                          + ("id = ?" if table == "runs" else "run_id = ?") + " ORDER BY id", (newest,)).fetchall()
        for row in rows:
            values = dict(zip(cols, row))
            new_ids[table] += 1
            if table == "arms":
                arm_map[values["id"]] = new_ids[table]
            values["id"] = new_ids[table] if table != "runs" else newest + 1
            if "run_id" in values:
                values["run_id"] = newest + 1
            if table == "trials":
                values["arm_id"] = arm_map[values["arm_id"]]
            if table == "env_snapshots" and values.get("trial_id") is not None:
                values["trial_id"] = None  # the copy's snapshots are the run's own
            db.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                       list(values.values()))
    db.commit()
    db.close()
    return newest + 1


def build(path: Path, site: Path, home: Path, tree: Path | None = None) -> dict:
    """One ``specperf report --html`` build (with ``tree``: that checkout's code, first on
    ``PYTHONPATH``): seconds, peak MB, MB written, pages said."""
    config = home / "specperf.toml"
    config.write_text("[compare]\nmargin_pct = 2.0\n")
    env = {**os.environ, "SPECPERF_HOME": str(home), "COLUMNS": "200"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    started = time.time()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([str(Path(sys.executable).with_name("specperf")), "--config", str(config), "report", "--db",
                                  f"sqlite:///{path}", "--since", "2020-01-01", "--html", str(site)],
                                 env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.time() - started
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"report failed ({os.waitstatus_to_exitcode(status)}): {stderr[-2000:]}")
    written = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and f.stat().st_mtime >= started)
    said = [line for line in stdout.splitlines() if line.startswith("history pages:")]
    return {"s": seconds, "peak_mb": usage.ru_maxrss / 1024,
            "written_mb": written / 1e6, "said": said[-1] if said else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=625)
    parser.add_argument("--keep", type=Path, help="build here and keep it (default: a temporary folder)")
    parser.add_argument("--tree", type=Path, help="build with this checkout's code (for example a `git worktree` of "
                                                  "an earlier commit) instead of the installed one")
    parser.add_argument("--builds", type=int, default=3, choices=(1, 2, 3),
                        help="how many of the three builds to run (the first one or two alone: slow code)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="specperf-bench-pages-"))
    work.mkdir(parents=True, exist_ok=True)
    path, site, home = work / "history.sqlite", work / "site", work / "home"
    home.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    shutil.rmtree(site, ignore_errors=True)
    runs = make_history(path, args.copies)
    print(f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; {runs} runs, {path.stat().st_size / 1e6:.1f} MB of SQLite", flush=True)
    builds = (("first build", None), ("rebuild, nothing changed", None), ("rebuild after one new run", add_run))
    print(f"code: {args.tree or ROOT}", flush=True)
    for label, step in builds[:args.builds]:
        if step:
            step(path)
        result = build(path, site, home, args.tree)
        print(f"{label}: {result['s']:.1f} s, peak {result['peak_mb']:.0f} MB, {result['written_mb']:.1f} MB written; "
              f"{result['said']}", flush=True)
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
