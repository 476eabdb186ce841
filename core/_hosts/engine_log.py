"""What an engine's log says went wrong: the line that names a fatal error, and a tail with
runs of near-identical lines collapsed (twenty ``GET /health 503`` lines are one line and a
count), so a failure message leads with the cause instead of burying it (issue 43: on an H100,
two engines out of GPU memory kept answering 503, and the ``torch.OutOfMemoryError`` sat above
twenty 503 lines in the message, reached only after the whole 180 s readiness timeout).

Shapes recognised: an out-of-memory line (``torch.OutOfMemoryError: CUDA out of memory...``,
``RuntimeError: CUDA error: out of memory``, vLLM's and SGLang's own wording), and the last line
of a Python traceback (``ValueError: ...``: the exception line after the frames). Pure text
functions: no I/O.
"""

from __future__ import annotations

import re

_OOM = re.compile(r"OutOfMemoryError|out of memory|CUBLAS_STATUS_ALLOC_FAILED|Not enough memory", re.IGNORECASE)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$")
_DIGITS = re.compile(r"\d+")


def fatal_line(log_text: str) -> tuple[str, bool] | None:
    """(the line, whether it is out of memory) of the last fatal error in ``log_text``: an
    out-of-memory line wins over any other; else the exception line closing the last traceback;
    ``None`` when neither is there. Leading log prefixes (``ERROR 12-06 ...``) are kept."""
    lines = [line.rstrip() for line in log_text.splitlines()]
    for line in reversed(lines):
        if _OOM.search(line) and "Traceback" not in line:
            return line.strip(), True
    seen_traceback = False
    found = None
    for line in lines:
        stripped = line.strip()
        if "Traceback (most recent call last)" in stripped:
            seen_traceback = True
        elif seen_traceback and _EXCEPTION.match(_without_prefix(stripped)):
            found, seen_traceback = stripped, False
    return (found, False) if found else None


def _without_prefix(line: str) -> str:
    """A log line without a logger's ``LEVEL date time [file:line]`` prefix (vLLM's ``(EngineCore pid=1)
    ERROR 12-06 10:00:00 [core.py:12] ...``), so the exception name is at the start."""
    match = re.match(r"^(?:\([^)]*\)\s+)?(?:[A-Z]+\s+[\d-]+\s+[\d:.]+\s+(?:\[[^\]]*\]\s+)?)", line)
    return line[match.end():] if match else line


def collapsed(log_text: str) -> str:
    """``log_text`` with each run of consecutive lines that differ only in their digits (the same
    access-log line with other ports and times) cut to its first line and ``... (the line above
    N more times)``."""
    out: list[str] = []
    run_key, repeats = None, 0
    for line in log_text.splitlines():
        key = _DIGITS.sub("#", line)
        if key == run_key:
            repeats += 1
            continue
        if repeats:
            out.append(f"... (the line above {repeats} more time{'s' if repeats > 1 else ''})")
        out.append(line)
        run_key, repeats = key, 0
    if repeats:
        out.append(f"... (the line above {repeats} more time{'s' if repeats > 1 else ''})")
    return "\n".join(out)
