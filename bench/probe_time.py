"""Benchmark: how long the env probe takes, full and cheap (per trial), so a compare's overhead is known.

Each variant runs ``--repeat`` times through :func:`core._env.probe.probe` (a fresh interpreter each time,
as in a trial), after one untimed warm-up run that fills the page cache:

* ``full``: the whole snapshot, importing torch for its CUDA, cuDNN and NCCL versions;
* ``full --no-import``: the whole snapshot, torch's versions read from files, NCCL via ctypes;
* ``cheap``: the per-trial variant (GPU readings, env vars, load, busiest processes);
* ``cheap, stdin``: the same fed on standard input (``python -``), as over SSH.

Reported per variant: median and min of ``wall_s`` (interpreter start to parsed JSON) and of
``probe_s`` (inside the script), and the full probe's median per-section timings.

``--record DIR`` also writes the fixture readings of tests/fixtures/nvml: a full and a cheap
snapshot idle, then the same under load (a bf16 8192x8192 matmul loop in a separate torch
process on GPU 0, probed once it has run ``--settle-s`` seconds), as
``{idle,load}{,_cheap}.json``.

Run: ``.venv/bin/python -m bench.probe_time --python ~/.cache/specperf/testenv/engine-venv/bin/python``
(default python: this one). Results: bench/PROBE_RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from core._env.probe import probe, probe_cheap

LOAD_CODE = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
(a @ b).sum().item()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def start_load(python: str, seconds: float) -> subprocess.Popen:
    """A torch process running bf16 8192x8192 matmuls on GPU 0 for ``seconds``; returns once its
    first product is done (it prints ``ready``).

    Raises:
        RuntimeError: the process exited before it was ready.
    """
    proc = subprocess.Popen([python, "-c", LOAD_CODE, str(seconds)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"GPU load process did not start (exit {proc.wait()})")
    return proc


VARIANTS = (
    ("full", {}),
    ("full --no-import", {"import_torch": False}),
    ("cheap", {"cheap": True}),
    ("cheap, stdin", {"cheap": True, "stdin_script": True}),
)


def time_variants(python: str, repeat: int) -> dict:
    """{variant: {wall_s: [...], probe_s: [...], timings_s: {section: median}}}."""
    out = {}
    for name, kwargs in VARIANTS:
        probe(python, **kwargs)  # warm-up: page cache, .pyc files
        walls, inside, sections = [], [], {}
        for _ in range(repeat):
            snapshot = probe(python, **kwargs)
            walls.append(snapshot["wall_s"])
            inside.append(snapshot["probe_s"])
            for section, seconds in snapshot["timings_s"].items():
                sections.setdefault(section, []).append(seconds)
        out[name] = {"wall_s": walls, "probe_s": inside,
                     "timings_s": {k: round(statistics.median(v), 4) for k, v in sections.items()}}
    return out


def record(python: str, directory: Path, settle_s: float) -> None:
    """Write idle.json, idle_cheap.json, load.json, load_cheap.json under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "idle.json").write_text(json.dumps(probe(python), indent=1))
    (directory / "idle_cheap.json").write_text(json.dumps(probe_cheap(python), indent=1))
    load = start_load(python, settle_s + 20)
    try:
        time.sleep(settle_s)
        (directory / "load.json").write_text(json.dumps(probe(python), indent=1))
        (directory / "load_cheap.json").write_text(json.dumps(probe_cheap(python), indent=1))
    finally:
        load.kill()
        load.wait()
    print(f"load process pid {load.pid}; readings in {directory}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter to probe with")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the raw timings here")
    parser.add_argument("--record", help="also record idle and under-load fixture readings in this directory")
    parser.add_argument("--settle-s", type=float, default=4.0, help="seconds of load before probing")
    args = parser.parse_args()
    if args.record:
        record(args.python, Path(args.record), args.settle_s)
    about = probe(args.python)
    gpu = about["gpu"]
    machine = {
        "host": about["system"].get("hostname"), "cpu": about["system"].get("cpu_model"),
        "cpus": about["system"].get("cpu_count"), "kernel": about["system"].get("kernel"),
        "gpu": (f"{gpu['device_count']} x {gpu['devices'][0]['name']}, driver {gpu['driver_version']}"
                if gpu.get("available") and gpu.get("devices") else f"none ({gpu.get('reason')})"),
        "python": args.python, "torch": about["software"]["torch"].get("version"),
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "platform": platform.platform(),
    }
    results = time_variants(args.python, args.repeat)
    print(f"machine: {json.dumps(machine)}")
    print("| variant | wall median s | wall min s | in-script median s | runs |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(f"| {name} | {statistics.median(r['wall_s']):.3f} | {min(r['wall_s']):.3f} | "
              f"{statistics.median(r['probe_s']):.3f} | {len(r['wall_s'])} |")
    for name in ("full", "cheap"):
        print(f"{name} sections (median s): {json.dumps(results[name]['timings_s'])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=1))


if __name__ == "__main__":
    main()
