"""scripts/demo's closing line, run as the demo runs it (``python scripts/demo_line.py
REPORT``, in a process of its own) on compare reports of the shape ``specperf compare --json``
writes: the restructure of core once broke it (it called names core no longer exports) and
only a user's demo run found out."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from tests.conftest import ROOT


def _report(verdicts: dict[str, str]) -> dict:
    base = [178.1, 180.2, 176.5, 179.0]
    head = {"REGRESSION": [151.4, 150.2, 153.0, 149.8], "NO CHANGE": [178.4, 179.9, 176.0, 179.6]}
    return {"modes": {mode: {"verdict": {"verdict": v}, "base": {"output_tok_s_all": base, "trials": 4},
                             "head": {"output_tok_s_all": head[v], "trials": 4}} for mode, v in verdicts.items()}}


def _line(tmp_path, report: dict) -> str:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, "scripts/demo_line.py", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_demo_says_it_found_the_planted_slowdown_with_the_launches_and_the_spread(tmp_path):
    line = _line(tmp_path, _report({"baseline": "REGRESSION", "eagle3": "REGRESSION"}))
    assert line.startswith("demo: found the planted 15% slowdown: baseline REGRESSION after 4 launches per arm "
                           "(launch-to-launch spread "), line
    assert "; eagle3 REGRESSION after 4 launches per arm" in line and "margin with" in line


def test_the_demo_says_so_when_a_mode_missed_it():
    spec = importlib.util.spec_from_file_location("demo_line", ROOT / "scripts" / "demo_line.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # in this process: the script itself ran in the test above
    line = module.line(_report({"baseline": "NO CHANGE", "eagle3": "REGRESSION"}))
    assert line.startswith("demo: did NOT find the planted 15% slowdown in every mode: baseline NO CHANGE"), line
