"""Health checks over one env snapshot: PASS, WARN or FAIL, each with one human line.

Input is a snapshot from :func:`core._env.probe.probe` (full or cheap; its schema is in
``core/_env/probe_script.py``). GPU checks look at the GPUs the engine uses: those named by the
snapshot's ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs; NVML numbers GPUs in PCI bus order,
which is CUDA's order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), else all of them.

What is judged, and how (NVML fields and clock-event bits as in FIELD_NOTES section 4):

=====================  ==========================================================================
check                  rule
=====================  ==========================================================================
gpu                    no NVML (no driver, no pynvml): WARN, GPU checks not run; a GPU that
                       cannot be read (fell off the bus): FAIL
p-state                under load only: P0 PASS, P1-P2 WARN, P3 and lower FAIL; on GeForce and
                       TITAN cards (NVML brand, else the name) CUDA compute runs in P2 by design,
                       so P0-P2 PASS there
power limit            enforced power limit below the board's default: WARN (a persistent
                       ``nvidia-smi -pl`` cap looks exactly like an engine regression)
clock events           HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80:
                       FAIL; SW power cap 0x4: WARN (a healthy card at full load can sit at its
                       power cap); idle 0x1 and the rest: PASS
pcie link              under load only (links train down when idle): below the max generation or
                       width: FAIL
gpu links              several engine GPUs: an NVLink link down: FAIL; a pair without P2P read
                       while other pairs have it, or no pair with P2P: WARN (probe's topology)
numa affinity          an engine pinned (``cpus``) to no CPU of a GPU's NVML CPU affinity: WARN
foreign processes      a compute process on an engine GPU whose pid is not in ``own_pids``: FAIL
ecc                    volatile uncorrected errors or a failed row remap: FAIL; a row remap or
                       page retirement pending (needs a GPU reset): WARN
persistence mode       off: WARN
mig                    on: WARN (the engine sees a slice)
gpu uniformity         engine GPUs differing in model, max or application clocks, max link,
                       power limit or VBIOS (and, under load, in SM clock by more than 10 % or
                       in link): WARN
temperature            at or above the slowdown threshold: FAIL; within 5 C of it, or above the
                       GPU's max operating temperature: WARN
cpu governor           any CPU not on ``performance``: WARN
busy processes         another process using 50 % of a CPU or more: WARN
memory                 less than 10 % of memory available: WARN
=====================  ==========================================================================

A check that passes on every GPU gives one PASS row; otherwise one row per GPU that did not
pass.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass

from core._hosts.agent import parse_cpu_list

TEMP_MARGIN_C = 5
BUSY_CPU_PCT = 50.0
MEM_AVAILABLE_MIN_FRACTION = 0.10
SM_CLOCK_SPREAD = 0.10
POWER_LIMIT_SLACK_W = 1.0  # NVML reports milliwatts; a limit within 1 W of default is the default
FAIL_REASONS = {0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                0x80: "HW power brake"}
WARN_REASONS = {0x4: "SW power cap"}


class CheckStatus(enum.StrEnum):
    """The outcome of one check; ordered PASS < WARN < FAIL by :attr:`rank`."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        """0 for PASS, 1 for WARN, 2 for FAIL."""
        return ("PASS", "WARN", "FAIL").index(self.value)


@dataclass(frozen=True)
class Check:
    """One check's outcome.

    Attributes:
        name: the check (``"clock events"``, ``"pcie link"``, ... as in the module docstring).
        status: PASS, WARN or FAIL.
        line: one human line, e.g. ``"GPU3 PCIe Gen4 x16 under load; max Gen5 x16"``.
        gpu: the NVML index of the GPU it is about, or ``None`` for the host or all GPUs.
    """

    name: str
    status: CheckStatus
    line: str
    gpu: int | None = None

    def to_dict(self) -> dict:
        """JSON-ready: ``{name, status, line, gpu}``."""
        out = asdict(self)
        out["status"] = str(self.status)
        return out


def worst(checks: Iterable[Check]) -> CheckStatus:
    """The most severe status among ``checks`` (PASS when there are none)."""
    return max((c.status for c in checks), key=lambda s: s.rank, default=CheckStatus.PASS)


def _engine_gpus(snapshot: Mapping, devices: list[dict]) -> list[dict]:
    env = (snapshot.get("software") or {}).get("env") or {}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return devices
    chosen: list[dict] = []
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            continue
        if token.isdigit():
            match = [d for d in devices if d.get("index") == int(token)]
        elif token.startswith("GPU-"):
            match = [d for d in devices if str(d.get("uuid", "")).startswith(token)]
        else:  # MIG UUIDs and other forms: cannot map, judge every GPU
            return devices
        if not match:
            break  # CUDA stops at the first invalid entry
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _names(devices: list[dict]) -> str:
    indices = [d["index"] for d in devices]
    if len(indices) == 1:
        return f"GPU{indices[0]}"
    if indices == list(range(indices[0], indices[0] + len(indices))):
        return f"GPU{indices[0]}-{indices[-1]}"
    return "GPUs " + ",".join(str(i) for i in indices)


def _per_gpu(name: str, devices: list[dict], judge, all_pass: str) -> list[Check]:
    """Apply ``judge(device) -> (CheckStatus, line) | None`` to each device; one PASS row if all pass."""
    results = []
    for device in devices:
        verdict = judge(device)
        if verdict is not None and verdict[0] is not CheckStatus.PASS:
            results.append(Check(name, verdict[0], verdict[1], device["index"]))
    if results:
        return results
    return [Check(name, CheckStatus.PASS, f"{_names(devices)}: {all_pass}")]


def _mhz(value) -> str:
    return "?" if value is None else f"{value:,}"


def _pstate(under_load: bool):
    def judge(d: dict):
        p = d.get("pstate")
        if p is None or not under_load:
            return None
        consumer = _consumer(d)
        if p == 0 or (consumer and p <= 2):
            return None
        status = CheckStatus.WARN if p <= 2 else CheckStatus.FAIL
        expected = "P0-P2 expected on a GeForce/TITAN card" if consumer else "P0 expected"
        return status, f"GPU{d['index']} in P{p} under load; {expected} (SM {_mhz(d.get('sm_clock_mhz'))} MHz)"
    return judge


def _consumer(d: dict) -> bool:
    """GeForce and TITAN cards: their driver holds CUDA compute in P2 (P0 is for graphics)."""
    brand = str(d.get("brand") or "").upper()
    if brand and brand[0].isalpha():
        return brand.startswith(("GEFORCE", "TITAN"))
    name = str(d.get("name") or "").upper()
    return "GEFORCE" in name or "TITAN" in name


def _power_limit(d: dict):
    limit, default = d.get("power_limit_w"), d.get("power_default_limit_w")
    if limit is None or default is None or limit >= default - POWER_LIMIT_SLACK_W:
        return None
    return CheckStatus.WARN, (f"GPU{d['index']} power limit {limit:.0f} W, below its default {default:.0f} W: "
                              f"a cap set with nvidia-smi -pl persists and slows every engine "
                              f"(restore it: nvidia-smi -i {d['index']} -pl {default:.0f})")


def _clock_events(d: dict):
    mask = d.get("clock_event_reasons")
    if mask is None:
        return None
    failing = [f"{label} (0x{bit:x})" for bit, label in FAIL_REASONS.items() if mask & bit]
    warning = [f"{label} (0x{bit:x})" for bit, label in WARN_REASONS.items() if mask & bit]
    if not failing and not warning:
        return None
    detail = f"SM {_mhz(d.get('sm_clock_mhz'))} of {_mhz(d.get('sm_clock_max_mhz'))} MHz"
    if failing and any(b & mask for b in (0x20, 0x40)):
        detail += f", {d.get('temperature_c')} C"
    if mask & 0x4 or mask & 0x80:
        power, limit = d.get("power_w"), d.get("power_limit_w")
        if power is not None and limit is not None:
            detail += f", {power:.0f} W of {limit:.0f} W"
    status = CheckStatus.FAIL if failing else CheckStatus.WARN
    return status, f"GPU{d['index']} clocks held by {', '.join(failing + warning)}: {detail}"


def _pcie(under_load: bool):
    def judge(d: dict):
        gen, width, gen_max, width_max = (d.get(k) for k in ("pcie_gen", "pcie_width", "pcie_gen_max",
                                                             "pcie_width_max"))
        if None in (gen, width, gen_max, width_max) or not under_load:
            return None
        if gen < gen_max or width < width_max:
            return CheckStatus.FAIL, f"GPU{d['index']} PCIe Gen{gen} x{width} under load; max Gen{gen_max} x{width_max}"
        return None
    return judge


def _ecc(d: dict):
    volatile = d.get("ecc_uncorrected_volatile")
    if volatile:
        return CheckStatus.FAIL, f"GPU{d['index']} has {volatile} uncorrected ECC errors since the driver loaded"
    if d.get("remap_failure"):
        return CheckStatus.FAIL, f"GPU{d['index']} row remapping failed: the GPU needs service"
    if d.get("remap_pending"):
        return CheckStatus.WARN, f"GPU{d['index']} has a row remap pending: reset the GPU to apply it"
    if d.get("retired_pages_pending"):
        return CheckStatus.WARN, f"GPU{d['index']} has a page retirement pending: reset the GPU to apply it"
    return None


def _persistence(d: dict):
    if d.get("persistence_mode") is False:
        return CheckStatus.WARN, (f"GPU{d['index']} persistence mode off: the driver sets the GPU up again for "
                             "every process (nvidia-smi -pm 1)")
    return None


def _mig(d: dict):
    if d.get("mig_mode"):
        return CheckStatus.WARN, f"GPU{d['index']} MIG mode on: the engine sees a MIG slice, not the whole GPU"
    return None


def _temperature(d: dict):
    temp, slowdown, gpu_max = d.get("temperature_c"), d.get("slowdown_temp_c"), d.get("gpu_max_temp_c")
    if temp is None:
        return None
    if slowdown is not None and temp >= slowdown:
        return CheckStatus.FAIL, f"GPU{d['index']} at {temp} C, at or above its slowdown threshold {slowdown} C"
    if slowdown is not None and temp >= slowdown - TEMP_MARGIN_C:
        return CheckStatus.WARN, (f"GPU{d['index']} at {temp} C, within {TEMP_MARGIN_C} C of its slowdown "
                                  f"threshold {slowdown} C")
    if gpu_max is not None and temp > gpu_max:
        return CheckStatus.WARN, f"GPU{d['index']} at {temp} C, above its max operating temperature {gpu_max} C"
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _foreign(devices: list[dict], own_pids: Collection[int]) -> list[Check]:
    rows = []
    for d in devices:
        procs = d.get("processes")
        if procs is None:
            reason = (d.get("unavailable") or {}).get("processes", "not read")
            rows.append(Check("foreign processes", CheckStatus.WARN,
                              f"GPU{d['index']} compute processes cannot be listed ({reason})", d["index"]))
            continue
        foreign = [p for p in procs if p.get("pid") not in own_pids]
        if foreign:
            described = "; ".join(
                f"pid {p['pid']} ({p.get('user') or '?'}, "
                f"{'?' if p.get('memory_mib') is None else format(p['memory_mib'], ',')} MiB) "
                f"{_one_line(p.get('command') or 'not visible from here')[:80]}"
                for p in foreign[:3])
            more = f"; and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            rows.append(Check("foreign processes", CheckStatus.FAIL,
                              f"GPU{d['index']} runs {len(foreign)} foreign compute process"
                              f"{'es' if len(foreign) > 1 else ''}: {described}{more}", d["index"]))
    if rows:
        return rows
    return [Check("foreign processes", CheckStatus.PASS, f"{_names(devices)}: no foreign compute processes")]


_UNIFORM = (("name", "model"), ("sm_clock_max_mhz", "max SM clock MHz"), ("mem_clock_max_mhz", "max memory clock MHz"),
            ("sm_app_clock_mhz", "application SM clock MHz"), ("pcie_gen_max", "max PCIe generation"),
            ("pcie_width_max", "max PCIe width"), ("power_limit_w", "power limit W"),
            ("vbios_version", "VBIOS"))


def _uniformity(devices: list[dict], under_load: bool) -> list[Check]:
    if len(devices) < 2:
        return [Check("gpu uniformity", CheckStatus.PASS, f"{_names(devices)}: one GPU, nothing to compare")]
    rows = []
    fields = list(_UNIFORM)
    if under_load:
        fields += [("pcie_gen", "PCIe generation under load"), ("pcie_width", "PCIe width under load")]
    for key, label in fields:
        groups: dict = {}
        for d in devices:
            if d.get(key) is not None:
                groups.setdefault(d[key], []).append(d)
        if len(groups) > 1:
            parts = ", ".join(f"{_names(ds)} {value:g}" if isinstance(value, float) else f"{_names(ds)} {value}"
                              for value, ds in groups.items())
            rows.append(Check("gpu uniformity", CheckStatus.WARN, f"GPUs differ in {label}: {parts}"))
    if under_load:
        clocks = [(d["index"], d["sm_clock_mhz"]) for d in devices if d.get("sm_clock_mhz")]
        if clocks:
            low, high = min(clocks, key=lambda c: c[1]), max(clocks, key=lambda c: c[1])
            if high[1] and (high[1] - low[1]) / high[1] > SM_CLOCK_SPREAD:
                rows.append(Check("gpu uniformity", CheckStatus.WARN,
                                  f"SM clocks under load differ by more than {SM_CLOCK_SPREAD:.0%}: "
                                  f"GPU{low[0]} {low[1]:,} MHz, GPU{high[0]} {high[1]:,} MHz"))
    same = f"{_names(devices)}: same model, clocks, links and limits"
    return rows or [Check("gpu uniformity", CheckStatus.PASS, same)]


def _links_between(gpu: Mapping, devices: list[dict]) -> list[Check]:
    """NVLink links down on a GPU, and pairs of the engine's GPUs without P2P while other pairs
    have it (NCCL then routes that pair through host memory, and the slowest pair sets an
    allreduce's time). One GPU: nothing to judge."""
    if len(devices) < 2:
        return [Check("gpu links", CheckStatus.PASS, f"{_names(devices)}: one GPU, no links between GPUs")]
    rows = []
    for d in devices:
        total, active = d.get("nvlink_links"), d.get("nvlink_links_active")
        if total and active is not None and active < total:
            rows.append(Check("gpu links", CheckStatus.FAIL, f"GPU{d['index']}: {active} of {total} NVLink links up",
                              d["index"]))
    indices = {d["index"] for d in devices}
    pairs = {tuple(int(i) for i in key.split("-")): pair for key, pair in (gpu.get("topology") or {}).items()}
    mine = {ij: pair for ij, pair in pairs.items() if set(ij) <= indices}
    without = sorted(ij for ij, pair in mine.items() if pair.get("p2p_read") not in (None, "OK"))
    if without and len(without) < len(mine):
        rows += [Check("gpu links", CheckStatus.WARN,
                       f"GPU{i}-GPU{j}: no P2P ({mine[(i, j)]['p2p_read']}) while other pairs have it; "
                       f"link {mine[(i, j)].get('link')}", i) for i, j in without]
    elif without:
        rows.append(Check("gpu links", CheckStatus.WARN, f"{_names(devices)}: no P2P between any pair "
                                                         f"({mine[without[0]]['p2p_read']}): NCCL goes through host memory"))
    if rows:
        return rows
    kinds = sorted({str(pair.get("link")) for pair in mine.values()})
    return [Check("gpu links", CheckStatus.PASS, f"{_names(devices)}: every NVLink link up, P2P between every pair"
                                                 + (f" (links: {', '.join(kinds)})" if kinds else ""))]


def _numa(devices: list[dict], engine_cpus: Collection[int] | None) -> list[Check]:
    """An engine pinned (``cpus``) to no CPU of a GPU's NUMA affinity: every host-to-GPU copy and
    kernel launch then crosses the socket interconnect. Unpinned engines are not judged."""
    if not engine_cpus:
        return []
    pinned = set(engine_cpus)
    rows = []
    for d in devices:
        if d.get("cpu_affinity") and not pinned & parse_cpu_list(d["cpu_affinity"]):
            node = f"NUMA node {d['numa_node']}" if d.get("numa_node") is not None else "its NUMA node"
            rows.append(Check("numa affinity", CheckStatus.WARN,
                              f"GPU{d['index']} is close to CPUs {d['cpu_affinity']} ({node}); the engine is pinned "
                              f"to CPUs {','.join(map(str, sorted(pinned)))}", d["index"]))
    if rows or not any(d.get("cpu_affinity") for d in devices):
        return rows
    return [Check("numa affinity", CheckStatus.PASS, f"{_names(devices)}: the engine's CPUs are on its GPUs' NUMA nodes")]


def _gpu_checks(snapshot: Mapping, under_load: bool, own_pids: Collection[int],
                engine_cpus: Collection[int] | None) -> list[Check]:
    gpu = snapshot.get("gpu") or {}
    if "error" in gpu:
        return [Check("gpu", CheckStatus.WARN, f"gpu section of the probe failed: {gpu['error']}; GPU checks not run")]
    if not gpu.get("available"):
        return [Check("gpu", CheckStatus.WARN, f"gpu: unavailable ({gpu.get('reason', 'no reason given')}); "
                                          "GPU checks not run")]
    all_devices = gpu.get("devices") or []
    broken = [d for d in all_devices if "error" in d]
    devices = [d for d in _engine_gpus(snapshot, all_devices) if "error" not in d]
    rows = [Check("gpu", CheckStatus.FAIL, f"GPU{d['index']} cannot be read: {d['error']}", d["index"]) for d in broken]
    if not devices:
        return rows + [Check("gpu", CheckStatus.WARN,
                             "no GPU to judge (none found, or CUDA_VISIBLE_DEVICES names none)")]
    names = sorted({str(d.get("name")) for d in devices})
    rows.append(Check("gpu", CheckStatus.PASS,
                      f"{len(devices)} x {', '.join(names)}; driver {gpu.get('driver_version')}, "
                      f"CUDA {gpu.get('cuda_driver_version')}"))
    idle_note = "judged under load only"
    rows += _per_gpu("p-state", devices, _pstate(under_load),
                     f"{_pstates(devices)} under load" if under_load
                     else f"{idle_note} (now {_pstates(devices)})")
    rows += _per_gpu("power limit", devices, _power_limit, "power limit at the board's default")
    rows += _per_gpu("clock events", devices, _clock_events, "no clock-event reason that costs speed")
    rows += _per_gpu("pcie link", devices, _pcie(under_load),
                     "links at their max under load" if under_load
                     else f"{idle_note}, links train down when idle (now {_links(devices)})")
    rows += _links_between(gpu, devices)
    rows += _numa(devices, engine_cpus)
    rows += _foreign(devices, own_pids)
    rows += _per_gpu("ecc", devices, _ecc, "no uncorrected ECC errors, no remap or retirement pending")
    rows += _per_gpu("persistence mode", devices, _persistence, "persistence mode on")
    rows += _per_gpu("mig", devices, _mig, "MIG off")
    rows += _uniformity(devices, under_load)
    rows += _per_gpu("temperature", devices, _temperature,
                     f"more than {TEMP_MARGIN_C} C below the slowdown threshold")
    return rows


def _pstates(devices: list[dict]) -> str:
    return ", ".join(sorted({f"P{d['pstate']}" for d in devices if d.get("pstate") is not None})) or "unknown"


def _links(devices: list[dict]) -> str:
    return ", ".join(sorted({f"Gen{d.get('pcie_gen')} x{d.get('pcie_width')}" for d in devices})) or "unknown"


def _system_checks(snapshot: Mapping, own_pids: Collection[int]) -> list[Check]:
    system = snapshot.get("system") or {}
    if "error" in system:
        return [Check("system", CheckStatus.WARN, f"system section of the probe failed: {system['error']}")]
    rows = []
    if "cpu_governor" in system:
        governor = system["cpu_governor"]
        if governor is None:
            rows.append(Check("cpu governor", CheckStatus.PASS,
                              "no cpufreq governor exposed (virtual machine or fixed clock)"))
        elif governor != "performance":
            rows.append(Check("cpu governor", CheckStatus.WARN,
                              f"CPU frequency governor {governor}; 'performance' keeps CPU clocks steady"))
        else:
            rows.append(Check("cpu governor", CheckStatus.PASS, "every CPU on the performance governor"))
    top = system.get("top_processes")
    if top is not None:
        busy = [p for p in top if p.get("cpu_pct", 0) >= BUSY_CPU_PCT and p.get("pid") not in own_pids]
        if busy:
            described = "; ".join(f"pid {p['pid']} ({p.get('user') or '?'}) {p['cpu_pct']:.0f}% "
                                  f"{_one_line(p.get('command') or '?')[:60]}" for p in busy[:3])
            rows.append(Check("busy processes", CheckStatus.WARN, f"other processes busy on the CPUs: {described}"))
        else:
            rows.append(Check("busy processes", CheckStatus.PASS,
                              f"no other process above {BUSY_CPU_PCT:.0f}% of a CPU"))
    total, available = system.get("mem_total_mib"), system.get("mem_available_mib")
    if total and available is not None:
        if available < MEM_AVAILABLE_MIN_FRACTION * total:
            rows.append(Check("memory", CheckStatus.WARN, f"only {available:,} of {total:,} MiB memory available"))
        else:
            rows.append(Check("memory", CheckStatus.PASS, f"{available:,} of {total:,} MiB memory available"))
    return rows


def run_checks(snapshot: Mapping, under_load: bool, own_pids: Collection[int] = (),
               engine_cpus: Collection[int] | None = None) -> list[Check]:
    """Judge one snapshot.

    Args:
        snapshot: a full or cheap snapshot from :func:`core._env.probe.probe` / :func:`core._env.probe.probe_cheap`.
        under_load: whether the engine GPUs were busy when it was taken (P-state and PCIe link
            are judged only then).
        own_pids: pids that belong to the measured engine; their GPU compute processes and CPU
            use are not foreign.
        engine_cpus: the CPUs the engine is pinned to (its config's ``cpus``), judged against its
            GPUs' NUMA affinity; ``None``: not pinned, not judged.

    Returns:
        The checks in a fixed order (gpu, p-state, clock events, pcie link, gpu links, numa
        affinity, foreign processes,
        ecc, persistence mode, mig, gpu uniformity, temperature, cpu governor, busy processes,
        memory); a cheap snapshot lacks the host-only ones it has no data for.

    Raises:
        ValueError: ``snapshot`` is not a mapping with ``gpu`` and ``system`` sections.
    """
    if not isinstance(snapshot, Mapping) or "gpu" not in snapshot or "system" not in snapshot:
        raise ValueError("run_checks needs a snapshot from core._env.probe.probe (a mapping with gpu and system sections)")
    own = set(own_pids)
    return _gpu_checks(snapshot, under_load, own, engine_cpus) + _system_checks(snapshot, own)
