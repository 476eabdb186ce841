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


def group_exists(pgid):
    """Whether any process of group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    stop_group(pgid, grace_s, lambda: group_exists(pgid))
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
    while proc.poll() is None:
        gone = bool(told) or any(event & (select.POLLERR | select.POLLHUP) for _, event in watch.poll(200))
        late = time.monotonic() > deadline
        if gone or late:
            stop_group(proc.pid, 2.0, lambda: proc.poll() is None or group_exists(proc.pid))
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
    os.makedirs(os.path.dirname(spec["log_path"]), exist_ok=True)
    log = open(spec["log_path"], "ab")
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
    stop_group(pgid, spec["grace_s"], lambda: proc.poll() is None or group_exists(pgid), lambda: len(told) > 1)
    if not exited:
        _emit({"exit": proc.poll()})
    _emit({"stopped": not group_exists(pgid)})
    return 0


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
    elif mode == "describe":
        _emit([info for info in (describe(args[0], int(pid)) for pid in args[1:]) if info])
    elif mode == "read":
        sys.stdout.buffer.write(read_file(args[0], int(args[1]), int(args[2])))
    elif mode == "size":
        _emit(os.stat(args[0]).st_size)
    else:
        sys.stderr.write("unknown mode %r\n" % mode)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
