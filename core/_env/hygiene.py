"""GPU hygiene before a run: who holds the host's GPUs, and what to do about each.

Holders come from two places: the device files (``/dev/nvidia<N>`` by default, the host's
``device_paths``) held open by a process, read from ``/proc`` on the host, and NVML's compute
processes in the probe's snapshot (a process in another container can show in NVML without
being visible in ``/proc``). Each holder is classified:

- **ours**: its process group leader writes into ``<host workdir>/logs``, i.e. an engine this
  tool started and recorded (left by a crashed run): stopped by group, and reported;
- **ignored**: a program named in the host's ``ignore_holders`` (``nvidia-persistenced``...);
- **foreign**: anything else. The run refuses, naming pid, user and command, unless the user
  asked for ``force_clean``; then that one process is stopped (SIGTERM, grace, SIGKILL) and
  reported; before each signal the pid is checked to still be the process that was listed
  (its start time), and a pid NVML lists but ``/proc`` does not show (another container) is
  never signalled. Nothing is ever stopped by name, and ``fuser -k`` on the devices is never
  used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from core._config import ContainerConfig
from core._errors import HostBusyError
from core._hosts import Host
from core._hosts.container import remove_leftovers


@dataclass
class Holder:
    """A process holding a GPU: ``kind`` is ``ours``, ``foreign`` or ``ignored``; ``source``
    is ``device`` (an open device file) or ``nvml`` (NVML compute process)."""

    pid: int
    pgid: int | None
    user: str | None
    cmdline: str
    kind: str
    source: str
    log: str | None = None
    start: int | None = None

    @property
    def line(self) -> str:
        """One line for reports: ``pid 123 (alice): python train.py``."""
        command = " ".join(self.cmdline.split())[:160]  # one line, whatever the arguments hold
        return f"pid {self.pid} ({self.user or 'user unknown'}): {command or 'command unknown'}"


def _program(cmdline: str) -> str:
    return os.path.basename(cmdline.split(" ", 1)[0]) if cmdline else ""


async def gpu_holders(host: Host, snapshot: dict | None = None) -> list[Holder]:
    """Every process holding the host's GPUs, classified (see the module docstring).

    Args:
        snapshot: a probe snapshot taken on ``host``, for NVML's compute processes.

    Raises:
        HostError: the host cannot be reached.
    """
    found: dict[int, Holder] = {}
    for info in await host.holders():
        found[info["pid"]] = _classify(host, info, "device")
    nvml_pids: set[int] = set()
    for device in ((snapshot or {}).get("gpu") or {}).get("devices") or []:
        nvml_pids.update(p["pid"] for p in device.get("processes") or [])
    described = {info["pid"]: info for info in await host.describe(sorted(nvml_pids - found.keys()))}
    for pid in sorted(nvml_pids - found.keys()):
        info = described.get(pid) or {"pid": pid, "pgid": None, "user": None, "cmdline": "", "log": None, "ours": False}
        found[pid] = _classify(host, info, "nvml")
    return sorted(found.values(), key=lambda h: h.pid)


def _classify(host: Host, info: dict, source: str) -> Holder:
    if info["ours"]:  # its group leader writes into <workdir>/logs (symlinks resolved on the host)
        kind = "ours"
    elif _program(info["cmdline"]) in host.config.ignore_holders:
        kind = "ignored"
    else:
        kind = "foreign"
    return Holder(info["pid"], info["pgid"], info["user"], info["cmdline"], kind, source, info.get("log"),
                  info.get("start"))


async def clean_gpus(host: Host, snapshot: dict | None = None, *, force_clean: bool = False,
                     grace_s: float = 15.0, containers: list[ContainerConfig] | None = None) -> list[str]:
    """Make the host's GPUs ours alone before a run; returns what was done, one line each.

    Engine containers of ours left behind (through the container programs of ``containers``,
    the run's container engines) are removed by name (core._hosts.container), then engines
    of ours left behind are stopped by group. Foreign holders make this refuse unless
    ``force_clean``, in which case each is stopped.

    Raises:
        HostBusyError: foreign processes hold the GPUs and ``force_clean`` is false (the
            message names each one's pid, user and command).
        HostError: the host cannot be reached.
    """
    done = await remove_leftovers(host, containers, grace_s) if containers else []
    holders = await gpu_holders(host, snapshot)
    foreign = [h for h in holders if h.kind == "foreign"]
    unseen = [h for h in foreign if h.start is None]  # NVML's pid from another pid namespace
    if unseen and force_clean:
        raise HostBusyError(
            f"GPUs of host {host.name} are in use by processes NVML lists but specperf cannot see from "
            f"where it runs (another container or VM): {'; '.join(h.line for h in unseen)}. specperf never "
            "signals a pid it cannot identify: stop them where they run")
    if foreign and not force_clean:
        raise HostBusyError(
            f"GPUs of host {host.name} are in use by processes specperf did not start: "
            + "; ".join(h.line for h in foreign)
            + ". Stop them, wait for them, or pass --force-clean to have specperf stop them"
        )
    for holder in holders:
        if holder.kind == "ours" and holder.pgid and holder.log:
            if await host.stop_recorded_group(holder.pgid, holder.log, grace_s):
                done.append(f"stopped a leftover engine of specperf (process group {holder.pgid}): {holder.line}")
        elif holder.kind == "foreign":
            if await host.stop_pid(holder.pid, holder.start, grace_s):
                done.append(f"stopped a foreign GPU process (--force-clean): {holder.line}")
    return done
