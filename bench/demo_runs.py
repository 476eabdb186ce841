"""Benchmark: the README's demo, repeated, and the A/A beside it (issue 24).

Runs ``scripts/demo`` (``compare slow-step``: the planted 15% slower decode step) ``--demos``
times and ``specperf compare noop`` (a comment: an A/A) ``--aa`` times, one after another, each
with its own SQLite database (so no stored calibration carries over), and appends one row per
run to a JSON file: what it was, the verdict and change per mode, launches per arm, and the
wall time of the compare (set-up excluded: the first demo's set-up is timed apart).

Run: ``.venv/bin/python -m bench.demo_runs --demos 3 --aa 2 --out /tmp/demo-runs.json``, then
``--table /tmp/demo-runs.json`` prints the markdown table kept in bench/DEMO_RESULTS.md.
``--load-cpu N`` runs every demo and A/A beside a steady load of about half of CPU N (a Python
loop, busy 50 ms then asleep 50 ms, pinned with ``os.sched_setaffinity``), started and stopped
by this script; the row records the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HALF_A_CORE = """
import os, time
os.sched_setaffinity(0, {%d})
while True:
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    time.sleep(0.05)
"""


def one(kind: str, index: int, load_cpu: int | None = None) -> dict:
    """One demo (``kind == "demo"``) or A/A (``"aa"``) run, beside half a core's load on ``load_cpu``
    when given; its row."""
    work = Path(tempfile.mkdtemp(prefix=f"specperf-{kind}-"))
    report = work / "report.json"
    db = f"sqlite:///{work}/specperf.db"
    env = {**os.environ, "SPECPERF_HOME": str(work)}
    argv = ["scripts/demo", "--db", db] if kind == "demo" else [".venv/bin/specperf", "compare", "noop", "--db", db]
    started, load = time.monotonic(), os.getloadavg()[0]
    hog = None if load_cpu is None else subprocess.Popen([sys.executable, "-c", HALF_A_CORE % load_cpu])
    try:
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    wall = time.monotonic() - started
    subprocess.run([".venv/bin/specperf", "show", "1", "--db", db, "--json", str(report), "--chart", str(work / "c.png")],
                   cwd=ROOT, capture_output=True, text=True, env=env)  # the stored run's report
    row: dict = {"kind": kind, "index": index, "status": out.returncode, "wall_s": round(wall), "load_1m": load,
                 "load_cpu": load_cpu,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "last_line": out.stdout.strip()[-300:]}
    if report.exists():
        data = json.loads(report.read_text())
        for mode, entry in data["modes"].items():
            verdict = entry.get("verdict") or {}
            row[mode] = {"verdict": verdict.get("verdict"), "change_pct": verdict.get("change_pct"),
                         "launches_per_arm": entry["base"]["trials"]}
    return row


def table(rows: list[dict]) -> str:
    """Markdown: one line per run."""
    lines = ["| run | when | baseline | eagle3 | launches per arm (baseline, eagle3) | wall s | load |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for mode in ("baseline", "eagle3"):
            m = row.get(mode) or {}
            change = f" {m['change_pct']:+.1f}%" if m.get("change_pct") is not None else ""
            cells.append(f"{m.get('verdict', '-')}{change}")
        launches = ", ".join(str((row.get(m) or {}).get("launches_per_arm", "-")) for m in ("baseline", "eagle3"))
        loaded = f" (50% loop on CPU {row['load_cpu']})" if row.get("load_cpu") is not None else ""
        lines.append(f"| {row['kind']} {row['index']}{loaded} | {row['date']} | {cells[0]} | {cells[1]} | {launches} | "
                     f"{row['wall_s']} | {row['load_1m']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", type=int, default=10)
    parser.add_argument("--aa", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True, help="JSON rows, appended after each run")
    parser.add_argument("--table", action="store_true", help="print the table of --out and exit")
    parser.add_argument("--load-cpu", type=int, help="run beside a loop at about 50%% of this CPU")
    args = parser.parse_args()
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    if not args.table:
        for kind, count in (("demo", args.demos), ("aa", args.aa)):
            for index in range(count):
                rows.append(one(kind, index + 1, args.load_cpu))
                args.out.write_text(json.dumps(rows, indent=1))
                print(json.dumps(rows[-1]), flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
