"""Fingerprint diff: what changed between two env snapshots, most likely throughput mover first.

Two snapshots (two runs, the two arms of one run, two hosts) are flattened to dotted keys
(``software.packages.vllm.version``, ``gpu.devices.0.pcie_gen``) and compared. Changes are
ordered by category, in the order the seed's checklist reads them:

=============  ===========================================================================
category       keys
=============  ===========================================================================
driver         GPU presence and count, driver, CUDA driver and NVML versions
nccl           NCCL version, then NCCL's settings: ``NCCL_*`` and ``TORCH_NCCL_*`` variables
torch          torch version, its CUDA, HIP, cuDNN, git version
engine         vllm, sglang, sgl-kernel, flashinfer, triton versions (in that order), the
               engine checkout's SHA and dirtiness, then what the client asked of it (a
               compare's arm snapshots: ``client.*``, core._measure.client.request_settings):
               sampling, API, output length method, prompts, the chat template's digest,
               specperf's version
env            variables known to move engine performance: ``NCCL_*``, ``CUDA_*``,
               ``NVIDIA_*``, ``SGLANG_*``, ``SGL_*``, ``VLLM_*``, ``TORCH_*``, ``PYTORCH_*``,
               ``TORCHINDUCTOR_*``, ``TRITON_*``, ``FLASHINFER_*``, DeepGEMM's ``DG_*``,
               ``NVSHMEM_*``, ``UCX_*``, ``OMP_*``/``MKL_*``/``KMP_*`` threads, ``LD_PRELOAD``,
               ``LD_LIBRARY_PATH``, ``HF_HUB_OFFLINE``, ``PYTHONPATH``, ``MALLOC_*``
clocks_links   per GPU: P-state, SM/memory clocks (max, application, and current when they
               moved by more than 10 %), clock-event reasons, PCIe link, NVLink, power limit,
               persistence, MIG, ECC mode, NUMA node and CPU affinity; the number of compute
               processes; per pair of GPUs their link and P2P status
other          the rest (Python, transformers, import paths, GPU model and UUID, kernel,
               CPU, governor, memory size, the other environment variables, ...)
=============  ===========================================================================

Readings that move from one second to the next (temperature, power draw, memory in use,
utilisation, load average, free memory, the busiest processes, timestamps and timings) are
not compared. When one snapshot is full and the other cheap, only keys both have are compared;
when only one has a GPU, its per-GPU fields are left out (the GPU's presence, count and driver
say it).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core._errors import SpecperfError

ENGINE_LIBRARIES = ("vllm", "sglang", "sgl_kernel", "flashinfer", "triton")
CLOCK_TOLERANCE = 0.10
_MISSING = object()


class SnapshotError(SpecperfError):
    """A file or object is not an env snapshot (the message names the file and the problem)."""


class Category(enum.IntEnum):
    """Change categories, most likely to move throughput first (the value is the rank)."""

    DRIVER = 0
    NCCL = 1
    TORCH = 2
    ENGINE = 3
    ENV = 4
    CLOCKS_LINKS = 5
    OTHER = 6

    @property
    def label(self) -> str:
        """Lower-case name as shown to people (``clocks_links``)."""
        return self.name.lower()


@dataclass(frozen=True)
class Change:
    """One difference between snapshot ``a`` (before) and ``b`` (after).

    Attributes:
        category: where it ranks (see :class:`Category`).
        key: the dotted key in the snapshot, e.g. ``software.packages.vllm.version``.
        before: the value in ``a`` (``None`` when absent or unknown).
        after: the value in ``b``.
    """

    category: Category
    key: str
    before: Any
    after: Any

    @property
    def what(self) -> str:
        """A short human name of the key: ``vllm``, ``NCCL``, ``env VLLM_USE_V1``, ``GPU0 pcie_gen``."""
        return _label(self.key)

    @property
    def before_text(self) -> str:
        """``before`` for people: ``absent`` (``unset`` for env vars) for ``None``, lists joined."""
        return _show(self.key, self.before)

    @property
    def after_text(self) -> str:
        """``after`` for people, as :attr:`before_text`."""
        return _show(self.key, self.after)

    @property
    def line(self) -> str:
        """One human line: ``vllm 0.32.0 -> 0.32.1``."""
        return f"{self.what} {self.before_text} -> {self.after_text}"

    def to_dict(self) -> dict:
        """JSON-ready: ``{category, key, what, before, after, line}``."""
        return {"category": self.category.label, "key": self.key, "what": self.what,
                "before": self.before, "after": self.after, "line": self.line}


_VOLATILE = re.compile(
    r"^(schema|kind|taken_at|probe_s|wall_s|timings_s\..*"
    r"|system\.(loadavg_\w+|mem_available_mib|top_processes.*)"
    r"|software\.torch\.(import_s|source|error)|software\.nccl\.(code|source|reason)|software\.torch\.cudnn_code"
    r"|software\.packages\.torch\..*"  # the same facts as software.torch.*
    r"|gpu\.devices\.\d+\.(temperature_c|power_w|memory_used_mib|utilization_\w+|unavailable\..*"
    r"|clock_event_reasons)"  # the mask; its names are compared
    r"|gpu\.unavailable\..*|gpu\.pynvml_source)$"
)
_CURRENT_CLOCK = re.compile(r"^gpu\.devices\.\d+\.(sm_clock_mhz|mem_clock_mhz|graphics_clock_mhz)$")
_CLOCKS_LINKS = re.compile(
    r"^gpu\.devices\.\d+\.(pstate|\w*clock\w*|pcie_\w+|nvlink\w*|power_limit_w|power_default_limit_w"
    r"|persistence_mode|mig_mode|ecc_mode|compute_processes|numa_node|cpu_affinity)$"
    r"|^gpu\.topology\.\d+-\d+\.(link|p2p_read|p2p_write|nvlink_p2p)$"
)
_ORDER = {
    Category.DRIVER: ("gpu.available", "gpu.reason", "gpu.device_count", "gpu.driver_version",
                      "gpu.cuda_driver_version", "gpu.nvml_version"),
    Category.NCCL: ("software.nccl.version",),
    Category.TORCH: ("software.torch.version", "software.torch.cuda",
                     "software.torch.hip", "software.torch.cudnn", "software.torch.git_version"),
    Category.ENGINE: tuple(f"software.packages.{name}.version" for name in ENGINE_LIBRARIES)
    + ("system.git.sha", "system.git.dirty")
    + tuple(f"client.{key}" for key in ("temperature", "api", "output", "length", "max_tokens", "prompts",
                                        "chat_template", "client")),
}
PERFORMANCE_ENV = re.compile(
    r"^(NCCL_|CUDA_|NVIDIA_|SGLANG_|SGL_|VLLM_|TORCH_|PYTORCH_|TORCHINDUCTOR_|TRITON_|FLASHINFER_|DG_|NVSHMEM_"
    r"|UCX_|OMP_|MKL_|KMP_|MALLOC_|LD_PRELOAD$|LD_LIBRARY_PATH$|HF_HUB_OFFLINE$|PYTHONPATH$)")
_RANK_IN_CATEGORY = {key: (cat, i) for cat, keys in _ORDER.items() for i, key in enumerate(keys)}


def performance_env(env: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``env`` (a snapshot's ``software.env``: name -> value) whose names are
    known to move engine performance (:data:`PERFORMANCE_ENV`, the fingerprint's ``env``
    category), in their order; the rest (paths to CA bundles, the shell's, ...) left out."""
    return {name: value for name, value in env.items() if PERFORMANCE_ENV.match(name)}


def _categorize(key: str) -> Category:
    if key in _RANK_IN_CATEGORY:
        return _RANK_IN_CATEGORY[key][0]
    if key.startswith("software.env."):
        name = key.removeprefix("software.env.")
        if name.startswith(("NCCL_", "TORCH_NCCL_")):  # NCCL's own settings, beside its version
            return Category.NCCL
        return Category.ENV if PERFORMANCE_ENV.match(name) else Category.OTHER
    if _CLOCKS_LINKS.match(key):
        return Category.CLOCKS_LINKS
    return Category.OTHER


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif prefix == "gpu.devices" and isinstance(value, list):
        for device in value:
            index = device.get("index") if isinstance(device, Mapping) else None
            _flatten(device, f"gpu.devices.{index}", out)
    elif prefix.startswith("gpu.devices.") and prefix.endswith(".processes"):
        out[prefix.removesuffix(".processes") + ".compute_processes"] = None if value is None else len(value)
    elif isinstance(value, list):
        out[prefix] = [json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v for v in value]
    else:
        out[prefix] = value


def flatten_snapshot(snapshot: Mapping) -> dict[str, Any]:
    """The comparable keys of ``snapshot``: dotted key -> value, volatile readings left out.

    GPU devices are keyed by NVML index (``gpu.devices.0.name``); their process lists become a
    count (``gpu.devices.0.compute_processes``).
    """
    out: dict[str, Any] = {}
    _flatten(snapshot, "", out)
    return {k: v for k, v in out.items() if not _VOLATILE.match(k)}


def _clock_moved(before: Any, after: Any) -> bool:
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return before != after
    high = max(abs(before), abs(after))
    return high > 0 and abs(before - after) / high > CLOCK_TOLERANCE


def _idle(flat: Mapping[str, Any], clock_key: str) -> bool:
    """Whether the device of ``clock_key`` (``gpu.devices.N.<clock>``) was idle when read
    (clock-event reason ``gpu_idle``; on an H200 the SM clock then reads 345-465 MHz)."""
    device = clock_key.rsplit(".", 1)[0]
    return "gpu_idle" in (flat.get(f"{device}.clock_event_reason_names") or ())


def _check(snapshot: Any, name: str) -> None:
    if not isinstance(snapshot, Mapping) or not {"gpu", "software", "system"} <= snapshot.keys():
        raise SnapshotError(f"{name} is not an env snapshot (a mapping with gpu, software and system sections)")


def diff_snapshots(a: Mapping, b: Mapping) -> list[Change]:
    """What changed from snapshot ``a`` to snapshot ``b``, most likely throughput mover first.

    Args:
        a: the earlier or reference snapshot (``core._env.probe.probe``'s dict, or one loaded from JSON).
        b: the other snapshot.

    Returns:
        Changes ordered by :class:`Category`; inside a category, driver, NCCL, torch and engine
        keys in the order of the module docstring, the rest in snapshot order. Empty when
        nothing comparable changed.

    Raises:
        SnapshotError: either argument is not a snapshot.
    """
    _check(a, "the first snapshot")
    _check(b, "the second snapshot")
    flat_a, flat_b = flatten_snapshot(a), flatten_snapshot(b)
    keys = list(flat_a) + [k for k in flat_b if k not in flat_a]
    if a.get("kind") != b.get("kind"):
        keys = [k for k in keys if k in flat_a and k in flat_b]
    if flat_a.get("gpu.available") != flat_b.get("gpu.available"):
        keys = [k for k in keys if not k.startswith("gpu.devices.")]  # "a GPU appeared" says it all
    changes = []
    for position, key in enumerate(keys):
        before, after = flat_a.get(key, None), flat_b.get(key, None)
        if _CURRENT_CLOCK.match(key):
            if not _clock_moved(before, after) or (_idle(flat_a, key) and _idle(flat_b, key)):
                continue  # idle both times: its current clock says nothing about its speed under load
        elif before == after:
            continue
        category = _categorize(key)
        order = _RANK_IN_CATEGORY.get(key, (category, len(keys)))[1]
        changes.append((category, order, position, Change(category, key, before, after)))
    changes.sort(key=lambda c: c[:3])
    return [c[3] for c in changes]


def load_snapshot(path: str | Path) -> dict:
    """Read a snapshot written as JSON (``specperf env --json``).

    Raises:
        SnapshotError: the file cannot be read, is not JSON, or is not a snapshot.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SnapshotError(f"{path} is not a snapshot (not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path} is not JSON: {exc}") from None
    if isinstance(doc, Mapping) and isinstance(doc.get("snapshot"), Mapping):
        doc = doc["snapshot"]  # a file that holds a snapshot and its checks
    _check(doc, str(path))
    return dict(doc)


_LABELS = (
    (re.compile(r"^software\.packages\.(\w+)\.version$"), lambda m: m.group(1).replace("_", "-")),
    (re.compile(r"^software\.packages\.(\w+)\.(\w+)$"), lambda m: f"{m.group(1).replace('_', '-')} {m.group(2)}"),
    (re.compile(r"^software\.nccl\.version$"), lambda m: "NCCL"),
    (re.compile(r"^software\.torch\.version$"), lambda m: "torch"),
    (re.compile(r"^software\.torch\.(\w+)$"), lambda m: f"torch {m.group(1)}"),
    (re.compile(r"^software\.env\.(.+)$"), lambda m: f"env {m.group(1)}"),
    (re.compile(r"^software\.python\.(\w+)$"), lambda m: f"python {m.group(1)}"),
    (re.compile(r"^gpu\.devices\.(\w+)\.(.+)$"), lambda m: f"GPU{m.group(1)} {m.group(2)}"),
    (re.compile(r"^gpu\.(driver_version|cuda_driver_version|nvml_version)$"),
     lambda m: {"driver_version": "driver", "cuda_driver_version": "CUDA driver",
                "nvml_version": "NVML"}[m.group(1)]),
    (re.compile(r"^gpu\.(.+)$"), lambda m: f"gpu {m.group(1)}"),
    (re.compile(r"^system\.git\.sha$"), lambda m: "engine commit"),
    (re.compile(r"^system\.(.+)$"), lambda m: m.group(1).replace(".", " ")),
)


def _label(key: str) -> str:
    for pattern, make in _LABELS:
        match = pattern.match(key)
        if match:
            return make(match)
    return key


def _show(key: str, value: Any) -> str:
    if value is None:
        return "unset" if key.startswith("software.env.") else "absent"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)
