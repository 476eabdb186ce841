"""Whether a trial's measured window was disturbed, by what, and how to say it.

The window document comes from the monitor on the engine's host (``core/_hosts/agent.py``,
:func:`core._hosts.agent.window_summary`): CPU time of foreign processes (outside the engine's
process group and specperf) on the engine's CPUs and on the whole host, VM steal time, memory
and swap, and per GPU the deltas of NVML's cumulative throttle counters, SM clock samples and
compute processes that are not the engine's. The judgement (thresholds in
:class:`core._config.DisturbanceConfig`, ``[compare.disturbance]``):

* disturbed: foreign CPU time on the engine's CPUs or on the benchmark client's CPUs, VM steal, swapping, a foreign GPU compute
  process, thermal slowdown, HW slowdown or power braking in the window, and a share of the
  window under the SW power cap that differs from the other trials of the same mode;
* not disturbed: an idle GPU before a launch, a boosted one after it, clock moves, and the
  power cap on its own (measured on an H200: a bf16 matmul loop spends its whole window there,
  ``tests/fixtures/nvml/h200_window_capped.json``), load on CPUs neither the engine nor the
  client uses.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from core._config import DisturbanceConfig

# clock-event reasons and violation policies that slow the GPU down whatever the engine does
_SLOWDOWN_EVENTS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_SLOWDOWN_VIOLATIONS = ("thermal", "reliability", "board_limit")


@dataclass
class Culprit:
    """Something that disturbed a window: a process (``pid``, ``user``, ``command``) with its
    ``cpu_s_per_s`` on the engine's CPUs (``what`` ``"cpu"``) or on the benchmark client's
    CPUs (``"client cpu"``), or a GPU condition (``pid`` None)."""

    what: str
    pid: int | None = None
    user: str | None = None
    command: str | None = None
    cpu_s_per_s: float | None = None

    def key(self) -> tuple:
        return (self.what, self.pid, self.command) if self.pid is not None else (self.what,)


@dataclass
class Disturbance:
    """The judgement of one trial's window: ``reasons`` (empty: quiet), ``culprits``, and the
    figure the CPU judgement is made on, for views to show the same number:
    ``engine_cpus_foreign_share`` (0..1 of the engine's CPUs' capacity taken by processes
    outside the engine, short-lived ones included; :func:`engine_cpus_foreign`) and
    ``engine_cpus_unattributed_share`` (the part of it not attributed to a pid); ``None``
    when there was no window to judge."""

    reasons: list[str] = field(default_factory=list)
    culprits: list[Culprit] = field(default_factory=list)
    engine_cpus_foreign_share: float | None = None
    engine_cpus_unattributed_share: float | None = None

    @property
    def disturbed(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict:
        return {"disturbed": self.disturbed, "reasons": self.reasons,
                "culprits": [vars(c) for c in self.culprits]}


def _short(command: str | None, limit: int = 100) -> str:
    text = command or "?"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _who(proc: dict) -> str:
    return f"pid {proc['pid']} ({proc.get('user') or '?'}) `{_short(proc.get('command'))}`"


def _cpus(cpus: list[int]) -> str:
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(map(str, cpus))


def power_cap_share(window: dict) -> float | None:
    """The largest share of the window any GPU spent under the SW power cap (clock-event
    counter, else the power violation counter); ``None`` without GPU readings."""
    gpu = window.get("gpu") or {}
    shares = []
    for dev in gpu.get("devices", []):
        seconds = dev.get("clock_event_s", {}).get("sw_power_cap", dev.get("violation_s", {}).get("power"))
        if seconds is not None and window.get("window_s"):
            shares.append(min(seconds / window["window_s"], 1.0))
    return max(shares) if shares else None


def engine_cpus_foreign(window: dict) -> tuple[float, float]:
    """(total, unattributed): the shares (0..1) of the engine's CPUs' capacity over the window
    that processes outside the engine took: all of them (the monitor's
    ``engine_cpus_foreign_share``, seen per pid, plus the busy time no pid accounts for,
    ``engine_cpus_unattributed_s``: processes that lived between two readings), and the
    unattributed part alone. The one computation of this figure: the judgement and the views
    both use it."""
    span = max(window.get("window_s") or 0.0, 1e-9)
    cpu = window.get("cpu", {})
    unattributed = (cpu.get("engine_cpus_unattributed_s") or 0.0) / span / max(len(window.get("engine_cpus") or []), 1)
    return (cpu.get("engine_cpus_foreign_share") or 0.0) + unattributed, unattributed


def judge_window(window: dict | None, limits: DisturbanceConfig, power_cap_median: float | None = None) -> Disturbance:
    """The judgement of one window (see the module docstring). ``power_cap_median``: the
    median power-cap share of the trials of the same mode (``None``: not judged).

    A window the monitor could not take (``None`` or ``{"error": ...}``) is not disturbed;
    the report says the monitor failed instead.
    """
    out = Disturbance()
    if not window or "error" in window:
        return out
    span = max(window.get("window_s") or 0.0, 1e-9)
    cpu = window.get("cpu", {})
    engine_cpus = window.get("engine_cpus") or []
    total, unattributed = engine_cpus_foreign(window)
    out.engine_cpus_foreign_share, out.engine_cpus_unattributed_share = total, unattributed
    if total > limits.engine_cpus_foreign_share:
        on_engine = [p for p in window.get("foreign_processes", []) if p.get("engine_cpus_cpu_s")]
        named = on_engine[:3]
        for proc in named:
            rate = proc["engine_cpus_cpu_s"] / span
            out.culprits.append(Culprit("cpu", proc["pid"], proc.get("user"), proc.get("command"), round(rate, 2)))
        who = "; ".join(f"{_who(p)}: {p['engine_cpus_cpu_s'] / span:.2f} CPU-s/s" for p in named)
        short = f"; {unattributed:.0%} by short-lived processes" if unattributed >= 0.05 else ""
        out.reasons.append(f"foreign processes took {total:.0%} of the engine's "
                           f"{_cpus(engine_cpus)} ({who or 'not attributed to a pid'}{short})")
    client_share = cpu.get("client_cpus_foreign_share")
    if limits.client_cpus_foreign_share is not None and client_share is not None \
            and client_share > limits.client_cpus_foreign_share:
        def off_engine_s(proc: dict) -> float:  # CPU time off the engine's CPUs (the client's, here)
            return (proc.get("cpu_s") or 0.0) - (proc.get("engine_cpus_cpu_s") or 0.0)

        named = sorted((p for p in window.get("foreign_processes", []) if off_engine_s(p) > 0),
                       key=off_engine_s, reverse=True)[:3]
        for proc in named:
            out.culprits.append(Culprit("client cpu", proc["pid"], proc.get("user"), proc.get("command"),
                                        round(off_engine_s(proc) / span, 2)))
        who = "; ".join(f"{_who(p)}: {off_engine_s(p) / span:.2f} CPU-s/s" for p in named)
        out.reasons.append(f"foreign processes took {client_share:.0%} of the benchmark client's "
                           f"{_cpus(window.get('client_cpus') or [])} ({who or 'not attributed to a pid'})")
    host_share = cpu.get("host_foreign_share") or 0.0
    if limits.host_foreign_share is not None and host_share > limits.host_foreign_share:
        out.reasons.append(f"foreign processes took {host_share:.0%} of the host's {window.get('host_cpus')} CPUs")
    steal = cpu.get("engine_cpus_steal_share") or 0.0
    if steal > limits.steal_share:
        out.reasons.append(f"the hypervisor took {steal:.0%} of the engine's {_cpus(engine_cpus)} (steal time)")
        out.culprits.append(Culprit("steal"))
    memory = window.get("memory", {})
    swapped = (memory.get("swap_in_mib") or 0.0) + (memory.get("swap_out_mib") or 0.0)
    if swapped > limits.swap_mib:
        out.reasons.append(f"the host swapped {swapped:.0f} MiB (available memory fell to "
                           f"{memory.get('available_min_mib')} MiB)")
        out.culprits.append(Culprit("swap"))
    for dev in (window.get("gpu") or {}).get("devices", []):
        _judge_gpu(dev, span, limits, power_cap_median, out)
    return out


def _judge_gpu(dev: dict, span: float, limits: DisturbanceConfig, power_cap_median: float | None,
               out: Disturbance) -> None:
    gpu = f"GPU{dev['index']}"
    if limits.foreign_gpu_processes:
        for proc in dev.get("foreign_processes", []):
            out.reasons.append(f"{gpu}: foreign compute process {_who(proc)}")
            out.culprits.append(Culprit("gpu process", proc["pid"], proc.get("user"), proc.get("command")))
    events = dev.get("clock_event_s", {})
    violations = dev.get("violation_s", {})
    slow = {name: events[name] for name in _SLOWDOWN_EVENTS if (events.get(name) or 0) > limits.gpu_slowdown_s}
    slow.update({f"{name} violation": violations[name] for name in _SLOWDOWN_VIOLATIONS
                 if (violations.get(name) or 0) > limits.gpu_slowdown_s})
    if slow:
        out.reasons.append(f"{gpu} slowed down: " + ", ".join(f"{k} {v:.1f} s of {span:.1f} s" for k, v in slow.items()))
        out.culprits.append(Culprit(f"{gpu} " + "/".join(slow)))
    capped = events.get("sw_power_cap", violations.get("power"))
    if power_cap_median is not None and capped is not None:
        share = min(capped / span, 1.0)
        if abs(share - power_cap_median) > limits.power_cap_share_spread:
            out.reasons.append(f"{gpu} spent {share:.0%} of the window under the power cap, against "
                               f"{power_cap_median:.0%} for the other trials of this mode")
            out.culprits.append(Culprit(f"{gpu} power cap"))


def judge_trials(windows: dict[int, dict | None], limits: DisturbanceConfig) -> dict[int, Disturbance]:
    """Judge the windows of one mode's trials, ``{launch seq: window}``; the power-cap rule
    compares each trial with the median of the others. Returns the disturbed ones only."""
    shares = {seq: power_cap_share(w) for seq, w in windows.items() if w and "error" not in w}
    out = {}
    for seq, window in windows.items():
        others = [s for k, s in shares.items() if k != seq and s is not None]
        median = statistics.median(others) if len(others) >= 2 else None
        judged = judge_window(window, limits, median)
        if judged.disturbed:
            out[seq] = judged
    return out


def _ranges(seqs: list[int]) -> str:
    """``[9, 10, 11, 12, 15]`` as ``9-12, 15``."""
    runs: list[list[int]] = []
    for seq in sorted(seqs):
        if runs and seq == runs[-1][-1] + 1:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def culprit_lines(disturbed: dict[int, Disturbance], limit: int = 3) -> list[str]:
    """One line per culprit across trials, the ``limit`` that weighed most first: ``pid 4121
    (root) `pip install ...`: 0.9 CPU-s/s on the engine's CPUs during launches 9-12`` (or ``on
    the benchmark client's CPUs``, where it was judged there).

    A process weighs the CPU-s/s it took on the CPUs it was judged on, summed over the launches
    it was in; a GPU condition or a foreign GPU process weighs 1 per launch (as a whole CPU taken).
    Most launches first would put a kernel thread that took 0.01 CPU-s/s in every disturbed
    window ahead of the loop that took half the engine's CPU in one."""
    grouped: dict[tuple, list[tuple[int, Culprit]]] = {}
    for seq, judged in disturbed.items():
        for culprit in judged.culprits:
            grouped.setdefault(culprit.key(), []).append((seq, culprit))

    def weight(entries: list[tuple[int, Culprit]]) -> tuple[float, int]:
        return (sum(1.0 if c.cpu_s_per_s is None else c.cpu_s_per_s for _, c in entries), len(entries))

    lines = []
    for entries in sorted(grouped.values(), key=weight, reverse=True)[:limit]:
        first = entries[0][1]
        seqs = _ranges([s for s, _ in entries])
        when = f"launch{'es' if len(entries) > 1 else ''} {seqs}"
        if first.pid is None:
            lines.append(f"{first.what} during {when}")
        elif first.cpu_s_per_s is not None:
            rate = statistics.mean(c.cpu_s_per_s for _, c in entries if c.cpu_s_per_s is not None)
            where = "the benchmark client's CPUs" if first.what == "client cpu" else "the engine's CPUs"
            lines.append(f"pid {first.pid} ({first.user or '?'}) `{_short(first.command)}`: {rate:.2f} CPU-s/s "
                         f"on {where} during {when}")
        else:
            lines.append(f"{first.what} pid {first.pid} ({first.user or '?'}) `{_short(first.command)}` during {when}")
    return lines
