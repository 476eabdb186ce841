"""The demo's closing line (scripts/demo): from the report ``specperf compare --json`` wrote,
whether every mode found the planted slowdown, after how many launches per arm, the launches'
spread (sd of the pair changes, :func:`core._experiments.calibrate.pair_spread_pct`) and the
margin this machine supports at that spread (:func:`core._experiments.calibrate.plan`).

    python scripts/demo_line.py REPORT.json
"""

from __future__ import annotations

import json
import sys

from core._experiments.calibrate import pair_spread_pct, plan
from core._experiments.stats import ArmTrial


def line(report: dict) -> str:
    """``demo: found the planted 15% slowdown: baseline REGRESSION after 4 launches per arm
    (launch-to-launch spread 2.1%; this machine supports a 2.6% margin with 6 launches per
    arm); ...`` from a compare report (``report["modes"][mode]``: ``verdict``, ``base`` and
    ``head`` with ``output_tok_s_all`` and ``trials``)."""
    found, said = [], []
    for mode, entry in report["modes"].items():
        verdict = (entry.get("verdict") or {}).get("verdict", "no verdict")
        found.append(verdict == "REGRESSION")
        base, head = entry["base"]["output_tok_s_all"], entry["head"]["output_tok_s_all"]
        spread = pair_spread_pct([ArmTrial(v) for v in base], [ArmTrial(v) for v in head])
        supported = plan(spread) if spread else None
        margin = (f"; this machine supports a {supported.margin_pct:.1f}% margin with {supported.pairs} launches per arm"
                  if supported and supported.margin_pct else "")
        said.append(f"{mode} {verdict} after {entry['base']['trials']} launches per arm"
                    + (f" (launch-to-launch spread {spread:.1f}%{margin})" if spread else ""))
    head = "found the planted 15% slowdown" if found and all(found) else \
        "did NOT find the planted 15% slowdown in every mode"
    return f"demo: {head}: {'; '.join(said)}"


if __name__ == "__main__":
    with open(sys.argv[1]) as report:
        print(line(json.load(report)))
