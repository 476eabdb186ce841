"""A torch profiler trace read into time per op.

The format is the Chrome trace event format that ``torch.profiler`` exports
(``export_chrome_trace`` and ``tensorboard_trace_handler``, which vLLM's and SGLang's
``/start_profile`` use): a JSON object whose ``traceEvents`` list holds complete events
(``"ph": "X"``) with ``name``, ``cat``, ``pid``, ``tid``, ``ts`` and ``dur`` in microseconds.
A file may be gzip-compressed whatever its name (vLLM writes ``*.pt.trace.json.gz`` by
default); its first two bytes say so.

What counts:

* on a GPU (the trace has ``cat = "kernel"`` events): the device's kernels, memcpys and
  memsets, each event's duration is its time (one kernel per stream at a time);
* on a CPU: the host's ops (``cat = "cpu_op"``) and user annotations, each with its *self
  time*, its duration less that of the events nested directly in it on the same thread
  (Python stack events, ``python_function``, are transparent: left out of the nesting);
* the engine's steps: vLLM annotates each model-runner step (``execute_context_<n>(<tokens>)
  _generation_<n>(<tokens>)``, vllm/v1/worker), torch's schedule marks ``ProfilerStep#<n>``;
  their count is the trace's ``steps``, and their own self time is the pseudo-op
  :data:`core._profile.categories.STEP_OWN`. (Their duration is not the step's time: vLLM's
  draft proposal, for one, runs after the marked model step.)
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from core._errors import SpecperfError
from core._profile.categories import STEP_OWN

STEP_MARKER = re.compile(r"^(?:execute_context_\d+\(\d+\)_generation_\d+\(\d+\)|ProfilerStep#\d+)$")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATS = {"cpu_op", "user_annotation"}


class TraceError(SpecperfError):
    """A trace file that cannot be read: not JSON, truncated, without ``traceEvents``, or with
    no complete event whose ``ts`` and ``dur`` are finite numbers."""


@dataclass
class OpTime:
    """One op or kernel over a trace: ``self_us`` its self time in microseconds, ``calls`` how
    many events of that name."""

    self_us: float = 0.0
    calls: int = 0


@dataclass
class TraceProfile:
    """A trace's time per op. ``device``: ``"cuda"`` (kernels counted) or ``"cpu"`` (host ops);
    ``steps``: engine steps marked in it (0: none); ``ops``: ``{name: OpTime}``; ``path``: the
    file it came from."""

    path: str
    device: str
    steps: int = 0
    ops: dict[str, OpTime] = field(default_factory=dict)

    def add(self, name: str, self_us: float) -> None:
        op = self.ops.setdefault(name, OpTime())
        op.self_us += self_us
        op.calls += 1


def load_events(path: str | Path) -> list[dict]:
    """The ``traceEvents`` of the trace at ``path`` (gunzipped when it starts with gzip's magic).

    Raises:
        TraceError: unreadable, not JSON (a truncated file is named as such) or no events list.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        document = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:  # gzip.BadGzipFile is an OSError
        raise TraceError(f"cannot read the profiler trace {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise TraceError(f"the profiler trace {path} is not complete JSON ({exc.msg} at byte {exc.pos}): "
                         "truncated while written? profile again") from exc
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceError(f"the profiler trace {path} has no traceEvents list: not a torch profiler trace")
    return events


def _timed(event: object) -> dict | None:
    """A complete event (``"ph": "X"``) with ``ts`` and ``dur`` as finite floats and ``name`` as
    text, or ``None`` for anything else (metadata, flow and counter events, a malformed one)."""
    if not isinstance(event, dict) or event.get("ph") != "X":
        return None
    try:
        ts, dur = float(event["ts"]), float(event["dur"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
        return None
    return {**event, "ts": ts, "dur": dur, "name": str(event.get("name", ""))}


def read_trace(path: str | Path) -> TraceProfile:
    """The :class:`TraceProfile` of the trace at ``path`` (see the module docstring).

    Raises:
        TraceError: as :func:`load_events`, or the trace holds no timed event at all.
    """
    events = [t for e in load_events(path) if (t := _timed(e)) is not None]
    if not events:
        raise TraceError(f"the profiler trace {path} holds no complete event with a time and a duration: "
                         "the profiler recorded nothing (was /start_profile called before the requests?)")
    device = any(e.get("cat") in DEVICE_CATS for e in events)
    profile = TraceProfile(str(path), "cuda" if device else "cpu")
    for e in events:
        if e.get("cat") == "user_annotation" and STEP_MARKER.match(e["name"]):
            profile.steps += 1
    if device:
        for e in events:
            if e.get("cat") in DEVICE_CATS:
                profile.add(e["name"], e["dur"])
        return profile
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") in HOST_CATS:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for thread in by_thread.values():
        for name, self_us in _self_times(thread):
            profile.add(STEP_OWN if STEP_MARKER.match(name) else name, self_us)
    return profile


def _self_times(events: list[dict]) -> list[tuple[str, float]]:
    """(name, self time in us) of each event of one thread: its duration less the time its
    direct children (events that start inside it) spend inside it, found with a stack over start
    order. A child that outlives its parent (clock skew between ops and annotations) is charged
    only up to the parent's end."""
    ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    stack: list[list] = []  # [end_us, name, dur, children_us]
    out: list[tuple[str, float]] = []

    def close(entry: list) -> None:
        out.append((entry[1], max(entry[2] - entry[3], 0.0)))

    for e in ordered:
        start, dur = e["ts"], e["dur"]
        while stack and stack[-1][0] <= start + 1e-3:
            close(stack.pop())
        if stack:
            stack[-1][3] += min(start + dur, stack[-1][0]) - start
        stack.append([start + dur, e["name"], dur, 0.0])
    while stack:
        close(stack.pop())
    return out
