"""Record real window-monitor documents on an NVIDIA GPU host (fixtures for tests/fixtures/nvml).

Runs ``core/_hosts/agent.py monitor`` (the per-trial window monitor) around stand-in engines:
torch bf16 matmul loops started in their own process group, as specperf starts an engine.

    python3 -m bench.record_window_gpu OUT_DIR

Writes ``window_<case>.json`` (the monitor's document with its NVML readings) and
``cheap_before.json`` / ``cheap_after.json`` (the per-trial cheap probe of an idle card
before and of a boosted card right after a launch). Cases: ``idle`` (no GPU work), ``light``
(a small matmul loop: the engine boosts the card), ``after`` (just after that loop ended),
``capped`` (an 8192 bf16 loop: the card sits at its power cap), ``foreign`` (the capped
loop plus a second loop, outside the engine's group, started mid-window).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT = (ROOT / "core" / "_hosts" / "agent.py").read_text()
PROBE = ROOT / "core" / "_env" / "probe_script.py"
LOOP = """
import sys, time, torch
n, seconds = int(sys.argv[1]), float(sys.argv[2])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
(a @ b); torch.cuda.synchronize(); print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def loop(n: int, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(n), str(seconds)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def window(pgid: int, seconds: float, during=None) -> dict:
    mon = subprocess.Popen([sys.executable, "-c", AGENT, "monitor",
                            json.dumps({"pgid": pgid, "own_pids": [], "interval_s": 0.5, "raw": True})],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert json.loads(mon.stdout.readline()) == {"ready": True}
    mon.stdin.write("start\n")
    mon.stdin.flush()
    mon.stdout.readline()
    t0 = time.monotonic()
    extra = during() if during else None
    time.sleep(max(seconds - (time.monotonic() - t0), 0))
    mon.stdin.write("stop\n")
    mon.stdin.flush()
    doc = json.loads(mon.stdout.readline())["window"]
    mon.wait()
    if extra is not None:
        doc["foreign_pid"] = extra.pid
        extra.kill()
    return doc


def cheap() -> dict:
    return json.loads(subprocess.run([sys.executable, str(PROBE), "--cheap"], capture_output=True, text=True,
                                     check=True).stdout)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    idle = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (out / "window_idle.json").write_text(json.dumps(window(idle.pid, 5.0), indent=1))
    (out / "cheap_before.json").write_text(json.dumps(cheap(), indent=1))
    light = loop(2048, 12.0)
    (out / "window_light.json").write_text(json.dumps(window(light.pid, 8.0), indent=1))
    light.wait()
    (out / "cheap_after.json").write_text(json.dumps(cheap(), indent=1))
    (out / "window_after.json").write_text(json.dumps(window(idle.pid, 4.0), indent=1))
    capped = loop(8192, 25.0)
    time.sleep(2.0)
    (out / "window_capped.json").write_text(json.dumps(window(capped.pid, 15.0), indent=1))
    capped.wait()
    engine = loop(8192, 30.0)
    time.sleep(2.0)

    def foreign():
        time.sleep(5.0)
        return loop(8192, 30.0)

    (out / "window_foreign.json").write_text(json.dumps(window(engine.pid, 20.0, foreign), indent=1))
    engine.kill()
    idle.kill()
    for name in sorted(out.glob("window_*.json")):
        doc = json.loads(name.read_text())
        print(name.name, json.dumps({k: doc[k] for k in ("window_s", "cpu", "foreign_processes")})[:600])
        for dev in doc["gpu"].get("devices", []):
            print("  ", json.dumps({k: v for k, v in dev.items()}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
