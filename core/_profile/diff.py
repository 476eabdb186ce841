"""Two arms' profiles set side by side per engine step, ops ranked by the change of their time.

Per arm, the traces that mark engine steps are the workers' (one per rank; the API server's
own trace marks none): each op's self time and calls are divided by that trace's steps, then
averaged over the ranks, giving milliseconds and calls *per step*. Without step markers in any
trace, the unit is the profiled window (both arms ran the same requests), and said so; the
GPU's traces are then the ranks (an API server's CPU trace beside them is left out). Two arms
of which only one marks steps are not comparable (:class:`NotComparableError`).

The change of an op is commit minus base, in ms per step; ops are ranked by its size, and the
calls ratio says whether an op got slower or now runs more often (x2.0: twice the calls per
step). An arm's time per step is the sum of its ops' (the device's busy time per step on a
GPU, the host's on a CPU): the step markers' own durations would miss work the engine does
between them, such as vLLM's draft proposal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from core._errors import SpecperfError
from core._profile.categories import category_of
from core._profile.traces import TraceProfile

TOP = 3  # ops named in a verdict's line
SHORT = 72  # characters of an op's name in a line (CUDA kernels' template names run to thousands)


class NotComparableError(SpecperfError):
    """The arms' profiles are in different units (one marks engine steps, the other does not) or
    on different devices."""


def short_name(name: str) -> str:
    """An op's name for a line: a C++ kernel's without ``void`` and its template and argument
    lists (``void at::native::elementwise_kernel<128, 4, ...>(int, ...)`` reads
    ``at::native::elementwise_kernel<...>``; an anonymous namespace is dropped, so
    ``void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, ...>(...)`` reads
    ``at::native::cunn_SoftMaxForward<...>``), at most :data:`SHORT` characters."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")  # its parentheses are no argument list
    cut = min((i for i in (text.find("<"), text.find("(")) if i > 0), default=-1)
    if cut > 0 and not text.startswith(("aten::", "vllm::", "_C::")):
        text = text[:cut] + ("<...>" if text[cut] == "<" else "")
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."


@dataclass
class ArmProfile:
    """One arm's profile per step: ``ops`` ``{name: (ms per step, calls per step)}``;
    ``steps``: steps profiled per rank (``None``: no step markers, the unit is the window);
    ``device``: ``cuda`` or ``cpu``; ``traces``: the files read (the kept copies)."""

    ops: dict[str, tuple[float, float]]
    steps: float | None
    device: str
    traces: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, traces: list[TraceProfile]) -> ArmProfile:
        """The arm's profile from its traces (see the module docstring). Raises ValueError for none."""
        if not traces:
            raise ValueError("an arm's profile needs at least one trace")
        ranks = [t for t in traces if t.steps] or [t for t in traces if t.device == "cuda"] or traces
        ops: dict[str, tuple[float, float]] = {}
        for trace in ranks:
            per = trace.steps or 1
            for name, op in trace.ops.items():
                ms, calls = ops.get(name, (0.0, 0.0))
                ops[name] = (ms + op.self_us / 1000 / per / len(ranks), calls + op.calls / per / len(ranks))
        marked = [t for t in ranks if t.steps]
        steps = sum(t.steps for t in marked) / len(marked) if marked else None
        device = "cuda" if any(t.device == "cuda" for t in ranks) else "cpu"
        return cls(ops, steps, device, [t.path for t in traces])

    @property
    def step_ms(self) -> float:
        """Milliseconds of op time per step (per window without step markers)."""
        return sum(ms for ms, _ in self.ops.values())


@dataclass(frozen=True)
class OpChange:
    """One op across the arms, per step: ``base_ms``/``head_ms`` self time, ``change_ms``
    their difference; ``base_calls``/``head_calls`` calls; ``category`` its label
    (:func:`core._profile.categories.category_of`)."""

    name: str
    category: str
    base_ms: float
    head_ms: float
    change_ms: float
    base_calls: float
    head_calls: float

    def text(self, unit: str) -> str:
        """```name`` (category) +8.91 ms/step (x1.0 calls)``; an op already run many times a step
        that now runs once more reads ``(x1.03 calls, +1.0/step)``."""
        delta = self.head_calls - self.base_calls
        if not self.base_calls:
            calls = f"new: {self.head_calls:.1f} calls/{unit}"
        elif not self.head_calls:
            calls = "gone"
        elif abs(delta) >= 0.5:
            calls = f"x{self.head_calls / self.base_calls:.2f} calls, {delta:+.1f}/{unit}"
        else:
            calls = f"x{self.head_calls / self.base_calls:.1f} calls"
        return f"`{short_name(self.name)}` ({self.category}) {self.change_ms:+.2f} ms/{unit} ({calls})"


@dataclass
class ProfileDiff:
    """Both arms' profiles and the ops ranked by the change of their time per step (largest
    change first); ``unit`` is ``step`` or ``window`` (no step markers)."""

    base: ArmProfile
    head: ArmProfile
    ops: list[OpChange]
    unit: str

    def step_change_ms(self) -> float:
        """Commit minus base op time per step (per window), ms."""
        return self.head.step_ms - self.base.step_ms

    def categories(self, top: int = TOP) -> list[str]:
        """The categories of the ``top`` ops named (those whose change counts, largest first)."""
        return list(dict.fromkeys(op.category for op in self.named(top)))

    def named(self, top: int = TOP) -> list[OpChange]:
        """The ops worth naming: the ``top`` largest changes that are each at least 5% of the
        largest (so a 0.01 ms wobble is not named beside an 8 ms op)."""
        if not self.ops:
            return []
        largest = abs(self.ops[0].change_ms)
        return [op for op in self.ops[:top] if largest and abs(op.change_ms) >= 0.05 * largest]

    def line(self, top: int = TOP) -> str:
        """``op time per step +10.2 ms (4.10 -> 14.30 ms, 64 and 64 steps profiled, cpu): `aten::mm`
        (GEMM) +8.91 ms/step (x1.0 calls), ...``."""
        change, base, head = self.step_change_ms(), self.base, self.head
        if self.unit == "step":
            start = (f"op time per step {change:+.2f} ms ({base.step_ms:.2f} -> {head.step_ms:.2f} ms, "
                     f"{base.steps:.0f} and {head.steps:.0f} steps profiled, {base.device})")
        else:
            start = (f"op time {change:+.2f} ms per profiled window ({base.step_ms:.2f} -> {head.step_ms:.2f} ms; no "
                     f"step markers in the traces: the unit is the window, the same requests on both sides, "
                     f"{base.device})")
        named = self.named(top)
        return start + (": " + ", ".join(op.text(self.unit) for op in named) if named else "")

    def to_dict(self, top: int = 20) -> dict:
        """JSON-ready: both arms (without their op tables), the ``top`` op changes, the line."""
        def arm(a: ArmProfile) -> dict:
            return {"steps": a.steps, "step_ms": a.step_ms, "device": a.device, "traces": a.traces}
        return {"unit": self.unit, "step_change_ms": self.step_change_ms(), "base": arm(self.base),
                "head": arm(self.head), "ops": [asdict(op) for op in self.ops[:top]],
                "categories": self.categories(), "line": self.line()}


def diff_profiles(base: ArmProfile, head: ArmProfile) -> ProfileDiff:
    """Every op of either arm with its change per step (or per window), largest change first.

    Raises:
        NotComparableError: one arm's traces mark steps and the other's do not, or one arm was
            profiled on a GPU and the other on a CPU.
    """
    if bool(base.steps) != bool(head.steps):
        marked, bare = ("base", "commit") if base.steps else ("commit", "base")
        raise NotComparableError(f"the profiles are not comparable: the {marked}'s traces mark engine steps, the "
                                 f"{bare}'s none (per step against per window)")
    if base.device != head.device:
        raise NotComparableError(f"the profiles are not comparable: the base was profiled on {base.device}, the "
                                 f"commit on {head.device}")
    unit = "step" if base.steps else "window"
    changes = []
    for name in set(base.ops) | set(head.ops):
        b_ms, b_calls = base.ops.get(name, (0.0, 0.0))
        h_ms, h_calls = head.ops.get(name, (0.0, 0.0))
        changes.append(OpChange(name, category_of(name), b_ms, h_ms, h_ms - b_ms, b_calls, h_calls))
    changes.sort(key=lambda op: (-abs(op.change_ms), op.name))
    return ProfileDiff(base, head, changes, unit)
