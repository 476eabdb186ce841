"""Remeasure against keep, on the same launches: a stored compare with disturbed trials (the
test suite's session compare, tests/conftest.py ``slow_spec_compare``: a CPU hog on the
engine's CPU during four launches of round 1) replayed round by round under each
``on_disturbed`` policy, with compare's own stop rule (``min_trials`` / ``max_trials`` on the
pairs kept, extra rounds while INCONCLUSIVE).

Per mode and policy it prints the verdict and change where the policy would have stopped, the
launches that took and their wall time (each launch's start to the next launch's start, as
stored), and, for reference, the verdict of the run's undisturbed pairs alone (what a quiet
host would have given, within noise). Replaying one run side by side keeps the machine's noise
the same for both policies; the rounds a policy would not have reached are left unused, and a
policy that would have needed more rounds than the run holds is said to.

Usage: ``.venv/bin/python -m bench.disturbed_policies sqlite:///PATH/db.sqlite [RUN_ID]``
(the newest run when RUN_ID is left out). Results: bench/RESULTS.md.
"""

from __future__ import annotations

import sys

import core
import storage
from bot._runs import stored_launches
from core._experiments.compare import judge_compare, kept, verdict_for
from core._experiments.stats import INCONCLUSIVE


def replay(stored: storage.StoredRun, policy: str) -> dict[str, dict]:
    """Per mode: ``{"verdict", "change_pct", "launches", "wall_s", "complete"}`` where a compare
    under ``policy`` would have stopped on the stored launches (``complete`` False when it would
    have needed more rounds than were stored)."""
    settings = core.CompareConfig.model_validate(stored.run.settings["compare"]).model_copy(
        update={"on_disturbed": policy})
    seqs, figures, windows = stored_launches(stored)
    starts = sorted((t.seq, t.started_at) for t in stored.trials)
    took = {seq: (nxt - at).total_seconds() for (seq, at), (_, nxt) in zip(starts, starts[1:])}
    out = {}
    for mode, by_role in seqs.items():
        complete = False
        for r in range(1, len(by_role["base"]) // 2 + 1):
            prefix = {role: arm[:2 * r] for role, arm in by_role.items()}
            _, left_out = judge_compare({mode: prefix}, windows, settings)
            view = kept({role: [figures[s] for s in arm] for role, arm in prefix.items()}, left_out[mode])
            verdict = verdict_for(view, settings)
            n = len(view["base"])
            if n >= settings.min_trials and (verdict.verdict != INCONCLUSIVE or n >= settings.max_trials):
                complete = True
                break
        used = [s for arm in prefix.values() for s in arm]
        out[mode] = {"verdict": verdict.verdict, "change_pct": verdict.change_pct, "launches": len(used),
                     "wall_s": sum(took.get(s, 0.0) for s in used), "complete": complete}
    return out


def quiet_reference(stored: storage.StoredRun) -> dict[str, tuple[str, float | None, int]]:
    """Per mode: (verdict, change %, pairs) of the run's pairs without a disturbed trial."""
    settings = core.CompareConfig.model_validate(stored.run.settings["compare"])
    seqs, figures, windows = stored_launches(stored)
    disturbed, _ = judge_compare(seqs, windows, settings)
    out = {}
    for mode, by_role in seqs.items():
        pairs = [(b, h) for b, h in zip(by_role["base"], by_role["head"]) if b not in disturbed and h not in disturbed]
        view = {"base": [figures[b] for b, _ in pairs], "head": [figures[h] for _, h in pairs]}
        verdict = verdict_for(view, settings)
        out[mode] = (verdict.verdict, verdict.change_pct, len(pairs))
    return out


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    db = storage.open_database(argv[0])
    run_id = int(argv[1]) if len(argv) > 1 else storage.list_runs(db, limit=1)[0][0].id
    stored = storage.load_run(db, run_id)
    print(f"run {run_id}: {stored.run.head_ref} against its base, modes {', '.join(stored.run.modes)}, "
          f"{len(stored.trials)} launches stored")
    reference = quiet_reference(stored)
    for policy in ("remeasure", "keep"):
        for mode, row in replay(stored, policy).items():
            change = "n/a" if row["change_pct"] is None else f"{row['change_pct']:+.1f}%"
            more = "" if row["complete"] else " (needed more rounds than stored)"
            print(f"{policy:9} {mode:8} {row['verdict']:12} {change:>7}  {row['launches']:2} launches "
                  f"{row['wall_s']:5.0f} s{more}")
    for mode, (verdict, change, pairs) in reference.items():
        print(f"undisturbed pairs only: {mode:8} {verdict:12} "
              f"{'n/a' if change is None else f'{change:+.1f}%':>7}  ({pairs} pairs)")


if __name__ == "__main__":
    main(sys.argv[1:])
