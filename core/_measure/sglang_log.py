"""SGLang's scheduler 'Decode batch' log lines, parsed field by field.

SGLang prints one such line every ``--decode-log-interval`` decode steps (default 40).
Shapes seen across versions (FIELD_NOTES section 2)::

    Decode batch. #running-req: 1, #token: 9322, token usage: 0.00, gen throughput (token/s): 97.52, #queue-req: 0
    [2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, accept len: 1.95, accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0,
    [2026-01-05 08:00:01 TP0] Decode batch [1234], #running-req: 2, ..., cpu graph: False, ...

Every field is optional and found by its label, so new or missing fields do not break the
parser. ``accept len`` includes the bonus token.

With several scheduler ranks (data-parallel attention, pipeline stages) every rank prints its
own line per interval, tagged in the prefix: ``[2026-01-05 08:00:01 DP1 TP1] Decode batch...``
or ``[DP0 TP0 EP0] ...``. The rank is the set of ``DP``/``TP``/``PP``/``EP`` tags of that prefix.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

_LINE = re.compile(r"Decode batch(?:\s*\[(?P<iteration>\d+)\])?[.,]")
_RANK_TAG = re.compile(r"\b(?:DP|TP|PP|EP)\d+\b")
_FIELDS = {
    "running_req": (re.compile(r"#running-req:\s*(\d+)"), int),
    "num_tokens": (re.compile(r"#token:\s*(\d+)"), int),
    "token_usage": (re.compile(r"token usage:\s*([\d.]+)"), float),
    "accept_len": (re.compile(r"accept len:\s*([\d.]+)"), float),
    "accept_rate": (re.compile(r"accept rate:\s*([\d.]+)"), float),
    "graph": (re.compile(r"(?:cuda|cpu) graph:\s*(True|False)"), lambda s: s == "True"),
    "gen_tok_s": (re.compile(r"gen throughput \(token/s\):\s*([\d.]+)"), float),
    "queue_req": (re.compile(r"#queue-req:\s*(\d+)"), int),
}


@dataclass(frozen=True)
class DecodeLogLine:
    """One parsed 'Decode batch' line; a field the line lacks is ``None``.

    ``rank``: the scheduler rank's tags from the line's prefix (``"DP1 TP1"``), ``""`` untagged.
    """

    iteration: int | None = None
    rank: str = ""
    running_req: int | None = None
    num_tokens: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    graph: bool | None = None
    gen_tok_s: float | None = None
    queue_req: int | None = None


def parse_decode_line(line: str) -> DecodeLogLine | None:
    """Parse one log line; ``None`` if it is not a 'Decode batch' line."""
    head = _LINE.search(line)
    if head is None:
        return None
    rest = line[head.end():]
    values = {}
    for name, (pattern, convert) in _FIELDS.items():
        match = pattern.search(rest)
        if match:
            values[name] = convert(match.group(1))
    iteration = head.group("iteration")
    rank = " ".join(_RANK_TAG.findall(line[:head.start()]))
    return DecodeLogLine(iteration=int(iteration) if iteration else None, rank=rank, **values)


def decode_lines(text: str) -> list[DecodeLogLine]:
    """Every 'Decode batch' line of a log excerpt, in order."""
    return [parsed for line in text.splitlines() if (parsed := parse_decode_line(line))]


IDLE_SHARE = 0.1  # a decode line under this share of its rank's median throughput covered an idle gap


def _busy(lines: list[DecodeLogLine]) -> list[DecodeLogLine]:
    """One rank's decode lines less those that cover an idle gap: the first (the gap before the
    measured requests) and any whose throughput is under :data:`IDLE_SHARE` of the rank's median
    (a gap inside the window: a client that stalled between two requests, the pause between two
    windows). SGLang's first line after idle reports a near-zero throughput and a bogus
    acceptance length (the stub's 0.05 tok/s and 9.99: a CI run of 2026-12-07 read 3.998 for
    2.50 with one such line inside the window)."""
    rest = lines[1:]
    rates = [x.gen_tok_s for x in rest if x.gen_tok_s]
    if not rates:
        return rest
    floor = IDLE_SHARE * statistics.median(rates)
    return [x for x in rest if x.gen_tok_s is None or x.gen_tok_s >= floor]


def window_figures(text: str) -> tuple[float | None, float | None, int]:
    """Acceptance length and gen throughput (tok/s) over one measured window.

    ``text`` is the log written during the window. Each rank's lines that cover an idle gap are
    dropped (:func:`_busy`): its first, which covers the gap before the measured requests, and
    any other whose throughput is near zero against the rank's median.
    The n-th line of every rank makes interval n (ranks log on the same decode-step count);
    intervals that not every rank reached are left out. Per interval, the ranks' throughputs
    are summed (the engine's total) and their acceptance lengths averaged weighted by each
    rank's throughput (its share of the tokens). Every interval covers the same number of
    decode steps, so a plain mean over intervals is the per-step mean.

    Returns:
        (acceptance length or None, gen tok/s or None, number of lines used).
    """
    by_rank: dict[str, list[DecodeLogLine]] = {}
    for line in decode_lines(text):
        by_rank.setdefault(line.rank, []).append(line)
    ranks = [_busy(lines) for lines in by_rank.values()]
    intervals = list(zip(*ranks)) if ranks else []
    accept, tput = [], []
    for interval in intervals:
        rates = [x.gen_tok_s for x in interval if x.gen_tok_s is not None]
        if len(rates) == len(interval):
            tput.append(sum(rates))
        pairs = [(x.accept_len, x.gen_tok_s) for x in interval if x.accept_len is not None]
        if len(pairs) == len(interval):
            weights = [t for _, t in pairs] if all(t for _, t in pairs) else [1.0] * len(pairs)
            accept.append(sum(a * w for (a, _), w in zip(pairs, weights)) / sum(weights))
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return mean(accept), mean(tput), len(intervals) * len(ranks)
