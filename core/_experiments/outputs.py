"""The outputs check: what the arms generated, compared request by request, before any speed.

Every request is greedy (core._measure.client.SAMPLING), and every launch of a workload sends
the same prompts in the same order, so request ``i`` of every launch answers one prompt. Under
greedy sampling an unchanged engine gives the same answer, and EAGLE-3 must give the answer the
target alone gives (it is lossless); a commit whose answers change measures different work, and
one that speeds up by accepting tokens the target would not have chosen is wrong, not faster.

The check, per mode:

1. Each arm's answer to request ``i`` is the most common text over its launches; request ``i``
   is *unstable* in an arm whose launches disagree on it (real GPU kernels are not always
   bit-reproducible, so an arm can disagree with itself).
2. Request ``i`` *changed* when it is stable in both arms and their answers differ. The outputs
   changed when at least one request changed and more changed than are unstable: a commit is
   not blamed for differences of the size the arms show on their own.

The speed verdict of a mode whose outputs changed is kept (it is what was measured) and shown
below an ``OUTPUTS CHANGED`` line in every view: it compares different answers, so it is never
read as the commit's speed alone.

Beside it, flags that make a run's speed meaningless whatever the verdict
(:func:`degenerate_lines`): a speculative mode whose draft is never accepted (acceptance length
1), answers that end in a repetition loop, empty answers; and the lossless check of a
speculative mode against ``baseline`` on the same commit (:func:`lossless_lines`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from core._experiments.stats import ArmTrial

EXCERPT_CHARS = 40
NEVER_ACCEPTED = 1.05  # acceptance length at or under this: no draft token is accepted
LOOP_SHARE = 0.25  # a quarter of the requests or more ending in a loop is flagged
_LOOP_MIN_CHARS = 32
_LOOP_MAX_PERIOD = 200
_LOOP_REPEATS = 4


def answers(trials: Sequence[ArmTrial]) -> tuple[list[str | None], set[int]] | None:
    """(the arm's answer per request index: the most common text over its launches, the indices
    of the requests its launches disagree on); ``None`` when no launch kept its texts (a run
    stored before outputs were kept)."""
    texts = [[r.get("text") for r in t.requests] for t in trials if t.requests]
    if not texts or all(text is None for launch in texts for text in launch):
        return None
    count = min(len(launch) for launch in texts)
    reference, unstable = [], set()
    for i in range(count):
        seen = Counter(launch[i] for launch in texts)
        reference.append(seen.most_common(1)[0][0])
        if len(seen) > 1:
            unstable.add(i)
    return reference, unstable


def _first_difference(a: str, b: str) -> int:
    """The index of the first character where ``a`` and ``b`` differ."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - 10)
    return ("..." if start else "") + text[start:start + EXCERPT_CHARS]


def compare_answers(base: Sequence[ArmTrial], head: Sequence[ArmTrial], names: tuple[str, str] = ("base", "commit")
                    ) -> dict | None:
    """The outputs check of two sides (module docstring): ``None`` when either kept no texts,
    else ``{"requests", "same", "changed", "unstable", "status": "same"|"changed", "first":
    {"request", "category", "char", "base", "head"} | None, "line"}``, ``line`` saying it in
    words with the two sides called ``names``."""
    got = answers(base), answers(head)
    if got[0] is None or got[1] is None:
        return None
    (a, unstable_a), (b, unstable_b) = got  # type: ignore[misc]
    count = min(len(a), len(b))
    unknown = {i for i in range(count) if a[i] is None or b[i] is None}  # a request whose text was not kept
    unstable = ((unstable_a | unstable_b) & set(range(count))) - unknown
    changed = [i for i in range(count) if i not in unstable and i not in unknown and a[i] != b[i]]
    first = None
    if changed:
        i = changed[0]
        at = _first_difference(a[i] or "", b[i] or "")
        category = next((t.requests[i].get("category") for t in head if len(t.requests) > i), None)
        first = {"request": i, "category": category, "char": at, "base": _excerpt(a[i] or "", at),
                 "head": _excerpt(b[i] or "", at)}
    status = "changed" if changed and len(changed) > len(unstable) else "same"
    vary = (f"; {len(unstable)} vary from launch to launch within a side and are not counted" if unstable else "")
    vary += f"; {len(unknown)} without a kept text are not counted" if unknown else ""
    vary += f"; the sides answered {len(a)} and {len(b)} requests, the first {count} compared" \
        if len(a) != len(b) else ""
    if status == "changed" and first:
        where = f"request {first['request']}" + (f" ({first['category']})" if first["category"] else "")
        line = (f"{len(changed)} of {count} requests differ from {names[0]}, first {where} from character "
                f"{first['char']}: {names[0]} {first['base']!r}, {names[1]} {first['head']!r}{vary}")
    else:
        line = f"{count - len(changed) - len(unstable) - len(unknown)} of {count} requests the same in both{vary}" + (
            f" ({len(changed)} differ, no more than vary on their own)" if changed else "")
    return {"requests": count, "same": count - len(changed) - len(unstable) - len(unknown), "changed": len(changed),
            "unstable": len(unstable), "unknown": len(unknown), "status": status, "first": first, "line": line}


def repetition_loop(text: str) -> bool:
    """Whether ``text`` ends in a loop: without its trailing white space, its last half (at
    least 32 characters) is one unit of 1-200 characters repeated, at least 4 times. Prose,
    code and lists do not repeat exactly like that; a model stuck on a phrase does. A short
    answer that ends in a run of digits or dots ("0.33333") is too short to be judged."""
    text = text.rstrip()
    span = max(len(text) // 2, _LOOP_MIN_CHARS)
    if len(text) < span or len(text) < _LOOP_MIN_CHARS:
        return False
    tail = text[-span:]
    for period in range(1, min(_LOOP_MAX_PERIOD, span // _LOOP_REPEATS) + 1):
        if tail[period:] == tail[:-period]:
            return True
    return False


def degenerate_lines(arms: dict[str, list[ArmTrial]], speculative: bool) -> list[str]:
    """What makes an arm's speed meaningless, one line per finding (empty when none): under
    speculation a median acceptance length at or under 1.05 (no draft token accepted); a
    quarter or more of the answers ending in a repetition loop (:func:`repetition_loop`); empty
    answers (no visible character) where tokens were generated or asked. ``arms``:
    ``{"base"|"head": [ArmTrial]}``."""
    found: dict[str, list[str]] = {}
    for role, trials in arms.items():
        side = "base" if role == "base" else "commit"
        accepted = sorted(t.acceptance_length for t in trials if t.acceptance_length is not None)
        if speculative and accepted and accepted[len(accepted) // 2] <= NEVER_ACCEPTED:
            found.setdefault(f"the draft is never accepted (acceptance length {accepted[len(accepted) // 2]:.2f}): "
                             "check the draft model and the speculative algorithm", []).append(side)
        reference = answers(trials)
        if reference is None:
            continue
        texts = [t or "" for t in reference[0]]
        loops = [i for i, t in enumerate(texts) if repetition_loop(t)]
        if texts and len(loops) >= LOOP_SHARE * len(texts):
            found.setdefault(f"{len(loops)} of {len(texts)} answers end in a repetition loop (e.g. request {loops[0]}: "
                             f"{_excerpt(texts[loops[0]], len(texts[loops[0]]) - 20)!r})", []).append(side)
        empty = [i for i, t in enumerate(texts) if not t.strip()]
        if empty:
            found.setdefault(f"{len(empty)} of {len(texts)} answers are empty (e.g. request {empty[0]})", []).append(side)
    return [f"{' and '.join(sides) if len(sides) == 1 else 'both arms'}: {line}" for line, sides in found.items()]


def lossless_lines(mode: str, arms: dict[str, list[ArmTrial]], baseline: dict[str, list[ArmTrial]]) -> list[str]:
    """The lossless check of speculative ``mode`` against ``baseline`` on each side's commit:
    one line per side, from :func:`compare_answers` (empty when texts were not kept)."""
    lines = []
    for role, side in (("base", "base"), ("head", "commit")):
        check = compare_answers(baseline.get(role, []), arms.get(role, []), ("baseline", mode))
        if check is None:
            continue
        if check["status"] == "changed":
            lines.append(f"{mode} is not lossless on the {side}: {check['line']}")
        else:
            lines.append(f"{mode} against baseline on the {side}: {check['line']} (lossless under greedy sampling)")
    return lines
