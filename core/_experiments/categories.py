"""Figures and verdicts per category of the prompt set, beside a mode's overall verdict.

A launch sends every category's prompts in one measured window (core._prompts: balanced, in
turn), so a category has no window of its own. Its figure in a launch is its requests' output
tokens over their summed request time (first request sent to last token, E2E), in tok/s: the
speed one user of that category saw. Its acceptance length comes from each request's own
figures, where the engine sends them (core._measure.client): under vLLM started with
``--per-request-spec-decode-metrics summary``, 1 + the category's accepted draft tokens over its
verify steps, and the share of its verify steps that accepted each draft position; under
SGLang, whose responses carry ``spec_verify_ct``, its tokens over its verify steps. Without
them (an older vLLM, or the option not given) a category's acceptance is not known: vLLM's
Prometheus counters count all requests together (said in the line).

Each category's launches are paired as the mode's are and judged by the same statistics
(core._experiments.stats.decide, the same margin and place-in-round correction). With ``k``
categories each verdict is taken at significance ``alpha / k`` (Bonferroni), so the chance that
any category of an unchanged commit reads as a change stays under ``alpha``; the intervals
shown are the matching ``1 - alpha / k`` ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from core._experiments.stats import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    ArmTrial,
    Verdict,
    median_or_none,
    median_per_position,
    moved_position,
)
from core._prompts import UNCATEGORISED


def split_by_category(trial: ArmTrial) -> dict[str, ArmTrial]:
    """One launch's figures per category (module docstring), each an :class:`ArmTrial` in the
    launch's place in its round; requests without a category form ``uncategorised`` (as the
    balanced selection counts them); empty when no request carries a category."""
    if not any(request.get("category") for request in trial.requests):
        return {}
    groups: dict[str, list[dict]] = {}
    for request in trial.requests:
        groups.setdefault(request.get("category") or UNCATEGORISED, []).append(request)
    out = {}
    for category, requests in groups.items():
        tokens = sum(r.get("output_tokens") or 0 for r in requests)
        seconds = sum((r.get("e2e_ms") or 0.0) for r in requests) / 1000.0
        acceptance, per_position = _acceptance(requests, tokens)
        if tokens and seconds > 0:
            out[category] = ArmTrial(tokens / seconds, acceptance, None, None, trial.round_edge,
                                     acceptance_per_position=per_position)
    return out


def _acceptance(requests: list[dict], tokens: int) -> tuple[float | None, tuple[float, ...] | None]:
    """A group of requests' acceptance length and per-position acceptance (the share of their
    verify steps that accepted draft position 1, 2, ...) from their own figures: vLLM's
    ``spec_steps`` and ``spec_accepted_per_position`` where every request has them, else
    SGLang's tokens over ``spec_verify_ct`` (no positions); ``(None, None)`` when neither."""
    steps = [r.get("spec_steps") for r in requests]
    positions = [r.get("spec_accepted_per_position") for r in requests]
    if all(steps) and all(positions) and len({len(p) for p in positions}) == 1:  # type: ignore[arg-type]
        total = sum(steps)  # type: ignore[arg-type]
        accepted = [sum(column) for column in zip(*positions, strict=True)]  # type: ignore[misc]
        return 1.0 + sum(accepted) / total, tuple(a / total for a in accepted)
    verify = [r.get("spec_verify_ct") for r in requests]
    if all(verify) and sum(verify):  # type: ignore[arg-type]
        return tokens / sum(verify), None  # type: ignore[arg-type]
    return None, None


def category_verdicts(base: Sequence[ArmTrial], head: Sequence[ArmTrial], alpha: float,
                      judge: Callable[[list[ArmTrial], list[ArmTrial], float], Verdict]) -> dict | None:
    """Per category of paired launches ``base[i]``/``head[i]``: its verdict by ``judge(base,
    head, alpha)`` at ``alpha / k``, and the medians of each arm. ``None`` with fewer than two
    categories (the overall verdict says it all).

    Returns ``{"family": k, "alpha": alpha / k, "categories": {name: {"verdict": {Verdict
    fields}, "base_tok_s", "head_tok_s", "base_acceptance", "head_acceptance",
    "base_per_position", "head_per_position"}}, "line"}`` (acceptance figures ``None`` where
    the requests carry none, module docstring).
    """
    split = [split_by_category(t) for t in base], [split_by_category(t) for t in head]
    names = sorted({c for launch in split[0] + split[1] for c in launch})
    if len(names) < 2:
        return None
    level = alpha / len(names)
    found = {}
    for name in names:
        pairs = [(b[name], h[name]) for b, h in zip(*split, strict=False) if name in b and name in h]
        b_trials, h_trials = [p[0] for p in pairs], [p[1] for p in pairs]
        verdict = judge(b_trials, h_trials, level)
        found[name] = {"verdict": dataclasses.asdict(verdict),
                       "base_tok_s": median_or_none([t.output_tok_s for t in b_trials]),
                       "head_tok_s": median_or_none([t.output_tok_s for t in h_trials]),
                       "base_acceptance": median_or_none([t.acceptance_length for t in b_trials]),
                       "head_acceptance": median_or_none([t.acceptance_length for t in h_trials]),
                       "base_per_position": median_per_position(b_trials),
                       "head_per_position": median_per_position(h_trials)}
    speculative = any(t.acceptance_length is not None for t in [*base, *head])
    return {"family": len(names), "alpha": level, "categories": found, "line": _line(found, level, speculative)}


def _line(found: dict, level: float, speculative: bool) -> str:
    """``REGRESSION on code only (-23.1%, -30.0 .. -15.2, acceptance 4.00 -> 1.00, position 1:
    1.00 -> 0.00); NO CHANGE on chat, math; ...``, then each category's acceptance length
    (base -> commit) where the requests carried it, else (in a ``speculative`` mode: the engine
    gave the launch an acceptance length) that it is not known."""
    by_kind: dict[str, list[str]] = {}
    for name, entry in found.items():
        by_kind.setdefault(entry["verdict"]["verdict"], []).append(name)
    parts = []
    for kind in (REGRESSION, IMPROVEMENT, INCONCLUSIVE, NO_CHANGE):
        names = by_kind.get(kind, [])
        if not names:
            continue
        if kind in (REGRESSION, IMPROVEMENT):
            only = " only" if len(names) < len(found) else ""
            shown = []
            for name in names:
                v, entry = found[name]["verdict"], found[name]
                acceptance = (f", acceptance {entry['base_acceptance']:.2f} -> {entry['head_acceptance']:.2f}"
                              if entry["base_acceptance"] and entry["head_acceptance"] else "")
                moved = (moved_position(entry["base_per_position"], entry["head_per_position"])
                         if entry.get("base_per_position") and entry.get("head_per_position") else None)
                position = f", position {moved[0]}: {moved[1]:.2f} -> {moved[2]:.2f}" if moved else ""
                shown.append(f"{name} ({v['change_pct']:+.1f}%, {v['ci_low_pct']:+.1f} .. {v['ci_high_pct']:+.1f}"
                             f"{acceptance}{position})")
            parts.append(f"{kind} on {', '.join(shown)}{only}")
        else:
            parts.append(f"{kind} on {', '.join(names)}")
    known = {name: e for name, e in found.items() if e["base_acceptance"] and e["head_acceptance"]}
    tail = ""
    if known:
        tail = "; acceptance length per category (base -> commit): " + ", ".join(
            f"{name} {e['base_acceptance']:.2f} -> {e['head_acceptance']:.2f}" for name, e in known.items())
    elif speculative:
        tail = ("; acceptance per category not known (the requests carried no acceptance of their own: for vLLM "
                "add --per-request-spec-decode-metrics summary to the mode's arguments, where its version has it)")
    return (f"per category ({len(found)}, each at p < {level:.3g} so the family stays at the mode's level; "
            f"tok/s per request): " + "; ".join(parts) + tail)


def category_moves(categories: dict | None) -> str | None:
    """The categories that moved, in a few words (``"REGRESSION on code only"``), from a
    verdict's ``categories`` (:func:`category_verdicts`); ``None`` when none did."""
    if not categories:
        return None
    found = categories["categories"]
    parts = []
    for kind in (REGRESSION, IMPROVEMENT):
        names = [name for name, entry in found.items() if entry["verdict"]["verdict"] == kind]
        if names:
            parts.append(f"{kind} on {', '.join(names)}" + (" only" if len(names) < len(found) else ""))
    return "; ".join(parts) or None
