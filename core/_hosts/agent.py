"""What specperf runs on a host: process-group lifecycle, listeners, device holders, files.

This module is standard-library Python only, so its source can be sent to any host (over
SSH, through an exec prefix into a container) and run as ``python3 -c <source> MODE ...``;
the local host imports the same functions, so both behave alike. Every mode prints one JSON
document per line on standard output.

Modes:

``run TIMEOUT_S ARGV...``
    Runs ARGV in a new session with this helper's standard input, output and error, and
    exits with its status. Its process group is stopped (SIGTERM, 2 s, SIGKILL) when it runs
    past TIMEOUT_S (then the exit status is 124 and the last line of standard error is
    ``specperf-agent: timed out``), when the reader of its output goes away (the SSH
    channel closed: a dropped connection, a cancelled or killed specperf), and on SIGTERM,
    SIGHUP or SIGINT to the helper, so no command outlives the session that asked for it.
``supervise SPEC``
    SPEC is JSON ``{"argv", "env", "cwd", "log_path", "grace_s", "deadline_s"}``. Starts
    ``argv`` in a new session (its process group id equals its pid) under
    ``timeout --kill-after=<grace> <deadline>`` (coreutils), so the group is killed at the
    deadline even if everything else is lost; output goes to ``log_path``. Prints
    ``{"pgid": N}`` at once, ``{"exit": status}`` when the leader exits, and ``{"stopped": true}``
    once the group is gone after a stop. The group is stopped (SIGTERM, ``grace_s``, SIGKILL)
    when a line ``stop`` arrives on standard input, when standard input closes (the SSH
    connection or specperf itself is gone), or on SIGTERM/SIGHUP to the supervisor.
``stop-recorded PGID LOG_PATH GRACE_S``
    Stops the group only if its leader's standard output is still ``LOG_PATH`` (a recycled
    pgid of someone else's process is never signalled). Prints ``{"stopped": bool}``.
``stop-pid PID START GRACE_S``
    SIGTERM one process, wait, SIGKILL (only for ``--force-clean``), checking before each
    signal that the pid still belongs to the process that started at START (clock ticks since
    boot, as listed): a pid reused by another process is never signalled. Prints
    ``{"stopped": bool}``.
``listeners PORT``
    Prints ``[{"pid", "pgid"}]`` of processes listening on TCP ``PORT`` (from ``/proc``).
``tree-groups PID``
    Prints the sorted process group ids of PID and all its descendants (a container's
    processes, which run in groups of their own under its first process).
``holders LOGS_DIR PATTERN...``
    Prints ``[{"pid", "pgid", "user", "cmdline", "start", "devices", "ours", "log"}]``: processes with a file
    matching a glob PATTERN open (``/dev/nvidia*``); ``ours`` when the leader of its process
    group writes its output into ``LOGS_DIR`` (an engine specperf started); ``log``: where
    that leader's output goes.
``describe LOGS_DIR PID...``
    Prints ``[{"pid", "pgid", "user", "cmdline", "start", "log", "ours"}]`` for those of the
    pids that exist (``ours`` as for ``holders``).
``read PATH OFFSET LIMIT``
    Writes the file's bytes from ``OFFSET`` (at most the last ``LIMIT``) to standard output.
``size PATH``
    Prints the file's size in bytes.
``monitor SPEC``
    The window monitor of one trial. SPEC is JSON ``{"pgid", "own_pids", "interval_s", "cpus",
    "pynvml_dir", "peer_pgids", "client_cpus"}``: the engine's process group, processes of
    specperf itself (the benchmark client), seconds between samples, the engine's CPUs
    (``null``: those its group may run on; all when there is none), where to import
    ``pynvml`` from when this Python has none, optionally more engine groups (both arms'
    engines at once) and the CPUs the benchmark client runs on. It prints ``{"ready": true}``
    and waits; a line ``start`` takes the first reading (prints ``{"started": true}``), then
    it samples every ``interval_s`` until a line ``stop`` (or the end of standard input),
    takes the last reading and prints the window document of :func:`window_summary`. It
    moves itself off the engine's CPUs when it can.
"""

import fnmatch
import json
import os
import pwd
import select
import signal
import subprocess
import sys
import time

# the secret rule; sent to a host, this line is replaced by its source (core._secret_rule.joined)
from core._secret_rule import redact_args


def group_exists(pgid):
    """Whether any process of group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_running(pgid):
    """Whether any process of group ``pgid`` exists that is not a zombie. A zombie has exited
    and holds nothing (no memory, no device, no port); an orphan's zombie waits for init to
    collect it, which some inits (a VM's) do only every second or so. Without ``/proc``, as
    :func:`group_exists`."""
    if not group_exists(pgid):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as fh:
                state, _ppid, pgrp = fh.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


def stop_group(pgid, grace_s, alive, hurry=lambda: False):
    """SIGTERM the group, wait ``grace_s`` s (less if ``hurry()`` turns true), SIGKILL, wait 5 s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if not alive():
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and alive():
            if sig == signal.SIGTERM and hurry():
                break
            time.sleep(0.1)


def leader_output(pgid):
    """Where the group leader's standard output points (``/proc/<pgid>/fd/1``), or None."""
    try:
        return os.readlink("/proc/%d/fd/1" % pgid)
    except OSError:
        return None


def stop_recorded_group(pgid, log_path, grace_s):
    """Stop group ``pgid`` if its leader still writes to ``log_path``; whether it was stopped."""
    if leader_output(pgid) != os.path.realpath(log_path):
        return False
    stop_group(pgid, grace_s, lambda: group_running(pgid))
    return True


def pid_alive(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: it answered the signal, so it exists


def start_ticks(pid):
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def stop_pid(pid, grace_s, start=None):
    """SIGTERM ``pid``, wait ``grace_s`` s, SIGKILL; whether a process was there to stop.
    With ``start``, each signal is sent only while ``pid`` is still the process that started
    then (a pid the kernel gave to another process is left alone)."""
    def alive():
        return pid_alive(pid) and (start is None or start_ticks(pid) == start)
    if not alive():
        return False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and alive():
            time.sleep(0.1)
        if not alive():
            return True
    return True


def _socket_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add("socket:[%s]" % fields[9])
        except OSError:
            continue
    return inodes


def _open_files():
    """(pid, [fd targets]) for every process whose fds can be read."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % name)
            targets = []
            for fd in fds:
                try:
                    targets.append(os.readlink("/proc/%s/fd/%s" % (name, fd)))
                except OSError:
                    continue
        except OSError:
            continue
        yield int(name), targets


def listening_pids(port):
    """Pids holding a listening TCP socket on ``port`` (IPv4 or IPv6), read from ``/proc``."""
    inodes = _socket_inodes(port)
    if not inodes:
        return set()
    return {pid for pid, targets in _open_files() if inodes.intersection(targets)}


def _describe(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        uid = os.stat("/proc/%d" % pid).st_uid
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return {"pid": pid, "pgid": os.getpgid(pid), "user": user, "cmdline": cmdline, "start": start_ticks(pid)}
    except OSError:
        return None


def describe(logs_dir, pid):
    """``_describe`` plus ``log`` (where the group leader's output goes) and ``ours`` (that is
    inside ``logs_dir``, symlinks resolved); None when the pid does not exist."""
    info = _describe(pid)
    if info is None:
        return None
    leader_log = leader_output(info["pgid"]) or ""
    info.update(log=leader_log or None, ours=leader_log.startswith(os.path.realpath(logs_dir) + os.sep))
    return info


def device_holders(logs_dir, patterns):
    """Processes holding a file that matches one of ``patterns`` open; see the module doc."""
    me = os.getpid()
    found = []
    for pid, targets in _open_files():
        devices = sorted({t for t in targets if any(fnmatch.fnmatch(t, p) for p in patterns)})
        if not devices or pid == me:
            continue
        info = describe(logs_dir, pid)
        if info is not None:
            info["devices"] = devices
            found.append(info)
    return found


def read_file(path, offset, limit):
    """Bytes of ``path`` from ``offset`` on, at most the last ``limit``."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(offset, size - limit))
        return fh.read()


def _emit(doc):
    try:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()
    except OSError:  # the reader is gone (connection lost): keep stopping what we started
        pass


def run_tied(timeout_s, argv):
    """Run ``argv`` tied to this helper's output pipe and a timeout; see the module doc."""
    try:
        proc = subprocess.Popen(argv, start_new_session=True)
    except OSError as exc:
        sys.stderr.write("%s: %s\n" % (argv[0], exc.strerror))
        return 126 if isinstance(exc, PermissionError) else 127
    deadline = time.monotonic() + timeout_s
    told = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda num, _frame: told.append(num))
    watch = select.poll()
    for fd in (1, 2):
        watch.register(fd, select.POLLERR | select.POLLHUP)
    wait_ms = 1  # a short command (git rev-parse) is answered in milliseconds, a long one checked every 200 ms
    while proc.poll() is None:
        gone = bool(told) or any(event & (select.POLLERR | select.POLLHUP) for _, event in watch.poll(wait_ms))
        wait_ms = min(2 * wait_ms, 200)
        late = time.monotonic() > deadline
        if gone or late:
            stop_group(proc.pid, 2.0, lambda: proc.poll() is None or group_running(proc.pid))
            if late:
                try:
                    sys.stderr.write("specperf-agent: timed out\n")
                except OSError:
                    pass
                return 124
            return 255
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def supervise(spec):
    """Run the engine described by ``spec`` and stop its group when told or orphaned."""
    os.makedirs(os.path.dirname(spec["log_path"]), mode=0o700, exist_ok=True)
    # owner-only: an engine echoes its arguments and environment into its log
    log = os.fdopen(os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    argv = ["timeout", "--kill-after=%gs" % spec["grace_s"], "%gs" % spec["deadline_s"]] + spec["argv"]
    env = dict(os.environ)
    env.update(spec["env"])
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=spec["cwd"], start_new_session=True)
    except OSError as exc:
        _emit({"error": "%s: %s" % (argv[0], exc.strerror)})
        return 127
    pgid = proc.pid
    _emit({"pgid": pgid})
    told = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda num, _frame: told.append(num))
    exited = False
    while not told:
        if not exited and proc.poll() is not None:
            exited = True
            _emit({"exit": proc.returncode})
        ready, _, _ = select.select([sys.stdin], [], [], 0.2)
        if ready:
            line = sys.stdin.readline()
            if not line or line.strip() == "stop":
                break
    stop_group(pgid, spec["grace_s"], lambda: proc.poll() is None or group_running(pgid), lambda: len(told) > 1)
    if not exited:
        _emit({"exit": proc.poll()})
    _emit({"stopped": not group_running(pgid)})
    return 0


# --- the window monitor ----------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# NVML throttle counters, both cumulative nanoseconds: violation policies and clock-event reasons
VIOLATION_POLICIES = (("power", "NVML_PERF_POLICY_POWER"), ("thermal", "NVML_PERF_POLICY_THERMAL"),
                      ("sync_boost", "NVML_PERF_POLICY_SYNC_BOOST"), ("board_limit", "NVML_PERF_POLICY_BOARD_LIMIT"),
                      ("low_utilization", "NVML_PERF_POLICY_LOW_UTILIZATION"),
                      ("reliability", "NVML_PERF_POLICY_RELIABILITY"))
CLOCK_EVENT_FIELDS = (("sw_power_cap", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
                      ("sync_boost", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
                      ("sw_thermal_slowdown", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
                      ("hw_thermal_slowdown", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
                      ("hw_power_brake_slowdown", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"))


def redact_command(argv, limit=300):
    """One line of ``argv`` with secret values hidden (core._secret_rule: the probe's rule too),
    cut to ``limit`` characters."""
    text = " ".join(" ".join(redact_args(argv)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_text(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return None


def cpu_times():
    """``{cpu: [user, nice, system, idle, iowait, irq, softirq, steal]}`` in clock ticks, from /proc/stat."""
    out = {}
    for line in (_read_text("/proc/stat") or "").splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            fields = line.split()
            out[int(fields[0][3:])] = [int(v) for v in fields[1:9]]
    return out


def _pid_group(pid):
    """The process group of ``pid`` (/proc/<pid>/stat field 5), or None when it is gone."""
    stat = _read_text("/proc/%d/stat" % pid)
    try:
        return int(stat.rsplit(")", 1)[1].split()[2]) if stat else None
    except (IndexError, ValueError):
        return None


def _tasks(pids):
    """``(pid, tid)`` of every thread of ``pids`` that can still be listed."""
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            yield pid, tid


def _all_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def tree_groups(pid):
    """Sorted process group ids of ``pid`` and every descendant of it (from /proc)."""
    parents = {}
    for child in _all_pids():
        stat = _read_text("/proc/%d/stat" % child)
        try:
            fields = stat.rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append((child, int(fields[2])))
        except (AttributeError, IndexError, ValueError):
            continue
    own = _pid_group(pid)
    groups, todo = set() if own is None else {own}, [pid]
    while todo:
        for child, pgid in parents.get(todo.pop(), []):
            groups.add(pgid)
            todo.append(child)
    return sorted(groups)


def group_pids(pgid):
    """The pids of process group ``pgid``."""
    return [pid for pid in _all_pids() if _pid_group(pid) == pgid]


def thread_times():
    """``{"pid/tid": [pid, pgid, ticks, cpu]}`` for every thread on the host: user+system clock
    ticks (/proc/<pid>/task/<tid>/stat fields 14-15) and the CPU it last ran on (field 39)."""
    out = {}
    for pid, tid in _tasks(_all_pids()):
        text = _read_text("/proc/%d/task/%s/stat" % (pid, tid))
        if not text:
            continue
        rest = text.rsplit(")", 1)[1].split()
        try:
            out["%d/%s" % (pid, tid)] = [pid, int(rest[2]), int(rest[11]) + int(rest[12]), int(rest[36])]
        except (IndexError, ValueError):
            continue
    return out


def _meminfo():
    out = {}
    for line in (_read_text("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            out[key] = int(value.split()[0]) // 1024
    return out


def _vmstat():
    out = {}
    for line in (_read_text("/proc/vmstat") or "").splitlines():
        key, _, value = line.partition(" ")
        if key in ("pswpin", "pswpout", "pgmajfault"):
            out[key] = int(value)
    return out


def parse_cpu_list(text):
    """A Linux cpulist (``"0-2,5"``, as ``Cpus_allowed_list`` and NVML's affinity in the probe
    write it) as a set of CPU numbers."""
    cpus = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        if low:
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def group_cpus(pgid):
    """The CPUs that processes of group ``pgid`` may run on (union of ``Cpus_allowed_list``)."""
    cpus = set()
    for pid in group_pids(pgid):
        for line in (_read_text("/proc/%d/status" % pid) or "").splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus |= parse_cpu_list(line.split(":", 1)[1])
    return sorted(cpus)


def group_runqueue_wait_ns(pgid):
    """Nanoseconds the threads of group ``pgid`` have waited on a run queue
    (/proc/<pid>/task/<tid>/schedstat, second field), summed; None when not available."""
    total, seen = 0, False
    for pid, tid in _tasks(group_pids(pgid)):
        fields = (_read_text("/proc/%d/task/%s/schedstat" % (pid, tid)) or "").split()
        if len(fields) >= 2:
            total += int(fields[1])
            seen = True
    return total if seen else None


def _process_info(pid):
    raw = _read_text("/proc/%d/cmdline" % pid)
    argv = [a for a in (raw or "").split("\0") if a]
    if argv:
        command = redact_command(argv)
    else:
        comm = _read_text("/proc/%d/comm" % pid)
        command = "[%s]" % comm.strip() if comm else None
    try:
        uid = os.stat("/proc/%d" % pid).st_uid
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    except OSError:
        user = None
    return {"pid": pid, "user": user, "command": command}


class Nvml:
    """NVML readings for the window monitor: cumulative throttle counters, SM clocks, compute
    processes; ``error`` says why there are none (no pynvml, no driver)."""

    def __init__(self, pynvml_dir=None):
        self.nv, self.error, self.handles = None, None, []
        try:
            try:
                import pynvml
            except ImportError:
                if not (pynvml_dir and os.path.isfile(os.path.join(pynvml_dir, "pynvml.py"))):
                    raise
                sys.path.insert(0, pynvml_dir)
                try:
                    import pynvml
                finally:
                    sys.path.remove(pynvml_dir)
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nv = pynvml
        except Exception as exc:  # noqa: BLE001 - ImportError or any NVMLError: no GPU readings
            self.error = "%s: %s" % (type(exc).__name__, exc)

    def counters(self):
        """Per device ``{"violation_ns": {policy: ns}, "clock_event_ns": {reason: ns},
        "unsupported": {name: reason}}``."""
        out = []
        for h in self.handles:
            dev = {"violation_ns": {}, "clock_event_ns": {}, "unsupported": {}}
            for name, const in VIOLATION_POLICIES:
                try:
                    v = self.nv.nvmlDeviceGetViolationStatus(h, getattr(self.nv, const))
                    dev["violation_ns"][name] = int(v.violationTime)
                except Exception as exc:  # noqa: BLE001 - NotSupported, or missing from this pynvml
                    dev["unsupported"]["violation." + name] = type(exc).__name__
            fields = [(name, getattr(self.nv, const, None)) for name, const in CLOCK_EVENT_FIELDS]
            for name, field in fields:
                if field is None:
                    dev["unsupported"]["clock_event." + name] = "not in this pynvml"
            known = [(n, f) for n, f in fields if f is not None]
            try:
                values = self.nv.nvmlDeviceGetFieldValues(h, [f for _, f in known])
                for (name, _), value in zip(known, values):
                    if value.nvmlReturn == 0:
                        dev["clock_event_ns"][name] = int(value.value.ullVal)
                    else:
                        dev["unsupported"]["clock_event." + name] = "NVML return %d" % value.nvmlReturn
            except Exception as exc:  # noqa: BLE001
                for name, _ in known:
                    dev["unsupported"]["clock_event." + name] = type(exc).__name__
            out.append(dev)
        return out

    def sample(self):
        """Per device ``{"sm_clock_mhz", "pids"}`` (compute processes)."""
        out = []
        for h in self.handles:
            dev = {"sm_clock_mhz": None, "pids": []}
            try:
                dev["sm_clock_mhz"] = self.nv.nvmlDeviceGetClockInfo(h, self.nv.NVML_CLOCK_SM)
            except Exception:  # noqa: BLE001
                pass
            try:
                dev["pids"] = [p.pid for p in self.nv.nvmlDeviceGetComputeRunningProcesses(h)]
            except Exception:  # noqa: BLE001
                pass
            out.append(dev)
        return out


def reading(nvml, counters):
    """One sample of the host: time, per-CPU and per-thread ticks, memory, GPU clocks and
    processes; with ``counters`` also swap/fault counts and NVML throttle counters."""
    doc = {"t": time.monotonic(), "cpu": cpu_times(), "threads": thread_times(),
           "mem_available_mib": _meminfo().get("MemAvailable"), "gpu": nvml.sample()}
    if counters:
        mem = _meminfo()
        doc["swap_used_mib"] = mem.get("SwapTotal", 0) - mem.get("SwapFree", 0)
        doc["vmstat"] = _vmstat()
        doc["gpu_counters"] = nvml.counters()
    return doc


def _median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def _foreign_processes(per_pid, describe, ticks_per_s, top):
    """The window document's ``foreign_processes`` from ``per_pid`` (``{pid: [ticks anywhere,
    ticks on the engine's CPUs]}``): the ``top`` on the engine's CPUs and the ``top`` anywhere,
    most on the engine's CPUs first, each described (user, command) and in CPU seconds."""
    on_engine = sorted(per_pid.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:top]
    anywhere = sorted(per_pid.items(), key=lambda kv: -kv[1][0])[:top]
    ranked = sorted(dict(on_engine + anywhere).items(), key=lambda kv: (-kv[1][1], -kv[1][0]))
    processes = []
    for pid, (total, on) in ranked:
        info = dict(describe(pid) or {"pid": pid, "user": None, "command": None})
        info.update(cpu_s=round(total / ticks_per_s, 3), engine_cpus_cpu_s=round(on / ticks_per_s, 3))
        processes.append(info)
    return processes


def _memory_window(chain):
    """The window document's ``memory`` from the readings ``chain`` (first to last): the least
    available memory seen, swap in and out (MiB) and major faults between first and last."""
    first, last = chain[0], chain[-1]
    available = [r["mem_available_mib"] for r in chain if r.get("mem_available_mib") is not None]
    vm0, vm1 = first.get("vmstat", {}), last.get("vmstat", {})
    page_mib = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / 1048576.0
    memory = {
        "available_min_mib": min(available) if available else None,
        "swap_in_mib": round((vm1.get("pswpin", 0) - vm0.get("pswpin", 0)) * page_mib, 2),
        "swap_out_mib": round((vm1.get("pswpout", 0) - vm0.get("pswpout", 0)) * page_mib, 2),
        "major_faults": vm1.get("pgmajfault", 0) - vm0.get("pgmajfault", 0),
    }
    return memory


def window_summary(first, samples, last, pgid, own_pids, engine_cpus, runqueue_wait_ns=None,
                   nvml_error=None, describe=_process_info, ticks_per_s=CLOCK_TICKS, top=5, peer_pgids=(),
                   client_cpus=None, group_of=_pid_group):
    """The window document from readings of :func:`reading` (``first`` and ``last`` with
    counters, ``samples`` between them, in time order).

    A thread's CPU ticks between two consecutive readings are counted on the CPU it was seen
    on at the later one. Foreign means: not in process group ``pgid`` (the engine) and not one
    of ``own_pids`` (specperf, this monitor). CPU time of processes that started and ended
    between two readings is not attributed to a pid; it shows as ``engine_cpus_unattributed_s``
    (busy time of the engine's CPUs that no live thread accounts for). ``peer_pgids``: more
    engine groups (the other arm's engine, when both arms run at once), never foreign.
    ``client_cpus``: where the benchmark client runs; foreign CPU time there is reported as
    ``client_cpus_foreign_share`` (a loaded client reads tokens late and sends the next
    request late), ``None`` when not given.

    Returns ``{"window_s", "host_cpus", "engine_cpus", "cpu": {...}, "foreign_processes":
    [{"pid", "user", "command", "cpu_s", "engine_cpus_cpu_s"}], "memory": {...}, "gpu": {...}}``;
    the foreign processes are the ``top`` by CPU time on the engine's CPUs and the ``top`` by
    CPU time anywhere, most on the engine's CPUs first
    (see ``core/_env/window.py`` for the meaning of each figure).
    """
    chain = [first] + list(samples) + [last]
    window_s = max(last["t"] - first["t"], 1e-9)
    cpus = sorted(set(int(c) for c in first["cpu"]) & set(int(c) for c in last["cpu"]))
    engine_cpus = [c for c in (engine_cpus or cpus) if c in cpus] or cpus
    own = set(own_pids)
    engine_groups = set([pgid]) | set(peer_pgids)
    watched_client = [c for c in (client_cpus or []) if c in cpus]
    foreign_client = 0
    per_pid, engine_on, foreign_on, attributed_on = {}, 0, 0, 0
    engine_total = 0
    for before, after in zip(chain, chain[1:]):
        for key, (pid, tgid_pgid, ticks, cpu) in after["threads"].items():
            prev = before["threads"].get(key)
            delta = ticks - (prev[2] if prev else 0)  # a thread new since ``before``: all its ticks
            if delta <= 0:
                continue
            on_engine = cpu in engine_cpus
            attributed_on += delta if on_engine else 0
            if tgid_pgid in engine_groups:
                engine_total += delta
                engine_on += delta if on_engine else 0
            elif pid not in own:
                entry = per_pid.setdefault(pid, [0, 0])
                entry[0] += delta
                entry[1] += delta if on_engine else 0
                foreign_on += delta if on_engine else 0
                foreign_client += delta if cpu in watched_client and not on_engine else 0

    def busy(cpu_list, columns):
        return sum(sum(last["cpu"][c][i] - first["cpu"][c][i] for i in columns) for c in cpu_list)

    task_cols, steal_col = (0, 1, 2), (7,)
    engine_busy = busy(engine_cpus, task_cols)
    unattributed = max(engine_busy - attributed_on, 0)
    capacity_host = window_s * len(cpus)
    capacity_engine = window_s * len(engine_cpus)
    foreign_total = sum(v[0] for v in per_pid.values())
    processes = _foreign_processes(per_pid, describe, ticks_per_s, top)
    cpu = {
        "host_busy_share": round(busy(cpus, task_cols) / ticks_per_s / capacity_host, 4),
        "host_foreign_share": round(foreign_total / ticks_per_s / capacity_host, 4),
        "engine_cpus_busy_share": round(engine_busy / ticks_per_s / capacity_engine, 4),
        "engine_cpus_foreign_share": round(foreign_on / ticks_per_s / capacity_engine, 4),
        "engine_cpus_foreign_s": round(foreign_on / ticks_per_s, 3),
        "engine_cpus_unattributed_s": round(unattributed / ticks_per_s, 3),
        "engine_cpus_steal_share": round(busy(engine_cpus, steal_col) / ticks_per_s / capacity_engine, 4),
        "engine_cpu_s": round(engine_total / ticks_per_s, 3),
        "engine_runqueue_wait_s": None if runqueue_wait_ns is None else round(runqueue_wait_ns / 1e9, 3),
        "client_cpus_foreign_share": (round(foreign_client / ticks_per_s / (window_s * len(watched_client)), 4)
                                      if watched_client and not set(watched_client) & set(engine_cpus) else None),
    }
    memory = _memory_window(chain)
    return {"window_s": round(window_s, 3), "host_cpus": len(cpus), "engine_cpus": engine_cpus,
            "client_cpus": watched_client or None, "cpu": cpu, "foreign_processes": processes, "memory": memory,
            "gpu": gpu_window(chain, pgid, nvml_error, describe, group_of, peer_pgids=peer_pgids)}


def gpu_window(chain, pgid, nvml_error=None, describe=_process_info, group_of=_pid_group, peer_pgids=()):
    """The ``gpu`` part of the window document: per device, the throttle counters' deltas in
    seconds (``violation_s``, ``clock_event_s``),
    ``unsupported`` counters with the reason, SM clock ``min``/``median`` over the samples, and
    compute processes seen in the window that are not in the engine's group (``group_of``:
    a pid's process group, ``None`` when it is not visible from here)."""
    first, last = chain[0], chain[-1]
    if nvml_error or not first.get("gpu_counters"):
        return {"available": False, "reason": nvml_error or "no GPU"}
    devices = []
    for index, (c0, c1) in enumerate(zip(first["gpu_counters"], last["gpu_counters"])):
        dev = {"index": index,
               "violation_s": {k: round((c1["violation_ns"][k] - v) / 1e9, 3)
                               for k, v in c0["violation_ns"].items() if k in c1["violation_ns"]},
               "clock_event_s": {k: round((c1["clock_event_ns"][k] - v) / 1e9, 3)
                                 for k, v in c0["clock_event_ns"].items() if k in c1["clock_event_ns"]},
               "unsupported": dict(c1["unsupported"], **c0["unsupported"])}
        clocks = [r["gpu"][index]["sm_clock_mhz"] for r in chain
                  if index < len(r["gpu"]) and r["gpu"][index]["sm_clock_mhz"] is not None]
        dev["sm_clock_mhz_min"] = min(clocks) if clocks else None
        dev["sm_clock_mhz_median"] = _median(clocks) if clocks else None
        dev["sm_clock_samples"] = len(clocks)
        pids = sorted({p for r in chain if index < len(r["gpu"]) for p in r["gpu"][index]["pids"]})
        foreign = []
        for pid in pids:
            group = group_of(pid)
            if group != pgid and group not in peer_pgids:
                info = describe(pid) if group is not None else None
                foreign.append(info or {"pid": pid, "user": None, "command": None, "visible": False})
        dev["foreign_processes"] = foreign
        devices.append(dev)
    return {"available": True, "devices": devices}


def move_off_cpus(cpus):
    """Leave the CPUs ``cpus`` (an engine's) when this process may run on others; nothing
    where it may not, or where affinity cannot be set."""
    if not cpus:
        return
    try:
        mine = os.sched_getaffinity(0) - set(cpus)
        if mine:
            os.sched_setaffinity(0, mine)
    except (AttributeError, OSError):
        pass


def monitor(spec, stdin=None, emit=None):
    """Run the window monitor (see the module doc); returns the window document."""
    stdin = stdin or sys.stdin
    emit = emit or _emit
    pgid = spec["pgid"]
    engine_cpus = spec.get("cpus") or group_cpus(pgid)
    move_off_cpus(engine_cpus)
    nvml = Nvml(spec.get("pynvml_dir"))
    own = [os.getpid(), os.getppid()] + list(spec.get("own_pids", []))
    peers = list(spec.get("peer_pgids") or [])
    emit({"ready": True})
    line = stdin.readline()
    if line.strip() != "start":
        return None
    def runqueue_wait():
        waits = [group_runqueue_wait_ns(group) for group in [pgid] + peers]
        return None if any(w is None for w in waits) else sum(waits)

    wait0 = runqueue_wait()
    first = reading(nvml, True)
    emit({"started": True})
    seen = {}  # pid -> who, described when first seen, so a process that exits is still named
    gpu_groups = {}  # GPU process pid -> its process group when first seen (ours, or not, even once gone)

    def remember(doc):
        for pid, group, _, _ in doc["threads"].values():
            if group != pgid and group not in peers and pid not in seen:
                seen[pid] = _process_info(pid)
        for dev in doc.get("gpu") or []:
            for pid in dev.get("pids") or []:
                if pid not in gpu_groups:
                    gpu_groups[pid] = _pid_group(pid)
                    if gpu_groups[pid] != pgid and gpu_groups[pid] not in peers and pid not in seen:
                        seen[pid] = _process_info(pid)

    remember(first)
    samples, interval = [], float(spec.get("interval_s", 0.5))
    while True:
        ready, _, _ = select.select([stdin], [], [], interval)
        if ready:
            break
        samples.append(reading(nvml, False))
        remember(samples[-1])
    last = reading(nvml, True)
    remember(last)
    wait1 = runqueue_wait()
    wait = wait1 - wait0 if wait0 is not None and wait1 is not None else None
    doc = window_summary(first, samples, last, pgid, own, engine_cpus, wait, nvml.error, seen.get,
                         peer_pgids=peers, client_cpus=spec.get("client_cpus"),
                         group_of=lambda pid: gpu_groups.get(pid) or _pid_group(pid))
    if spec.get("raw"):  # for recording fixtures: the readings without the per-thread tables
        doc["readings"] = [{k: v for k, v in r.items() if k != "threads"} for r in [first] + samples + [last]]
    emit({"window": doc})
    return doc


def main(argv):
    """Dispatch one mode (see the module docstring); returns the exit status."""
    mode, args = argv[0], argv[1:]
    if mode == "run":
        return run_tied(float(args[0]), args[1:])
    if mode == "supervise":
        return supervise(json.loads(args[0]))
    if mode == "stop-recorded":
        _emit({"stopped": stop_recorded_group(int(args[0]), args[1], float(args[2]))})
    elif mode == "stop-pid":
        _emit({"stopped": stop_pid(int(args[0]), float(args[2]), int(args[1]) if args[1] != "-" else None)})
    elif mode == "listeners":
        pids = listening_pids(int(args[0]))
        _emit([info for info in map(_describe, sorted(pids)) if info])
    elif mode == "holders":
        _emit(device_holders(args[0], args[1:]))
    elif mode == "tree-groups":
        _emit(tree_groups(int(args[0])))
    elif mode == "describe":
        _emit([info for info in (describe(args[0], int(pid)) for pid in args[1:]) if info])
    elif mode == "read":
        sys.stdout.buffer.write(read_file(args[0], int(args[1]), int(args[2])))
    elif mode == "monitor":
        monitor(json.loads(args[0]))
    elif mode == "size":
        _emit(os.stat(args[0]).st_size)
    else:
        sys.stderr.write("unknown mode %r\n" % mode)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
