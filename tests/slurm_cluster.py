"""A real Slurm cluster (Debian's ``slurm-wlm`` 22.05 and ``munge``) on loopback for the tests.

One ``munged`` with its own key and socket, one ``slurmctld`` and ``NODES`` ``slurmd``
instances (``slurmd -N node1`` ...), each at its own free port, all state, logs, spool and
configuration in one temporary folder; nothing of the machine's own Slurm or munge set-up is
read or changed (the client commands find this cluster through ``SLURM_CONF``, which
:meth:`SlurmCluster.env` gives). Every node advertises ``GPUS`` GPUs as a GRES whose device
files are placeholder regular files (``AutoDetect=off``: with a count and no files Slurm
registers none and drains the node). The several slurmd on one machine stand in for separate
nodes: each job gets a node of its own, but they share this machine's CPUs. ``scripts/test``
installs the packages.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from tests.conftest import free_port

NODES = 4
GPUS = 2
KILL_WAIT_S = 5  # SIGTERM to SIGKILL when Slurm ends a job (scancel, time limit)


class SlurmCluster:
    """munged + slurmctld + :data:`NODES` slurmd on 127.0.0.1, partition ``test`` (the default).

    Raises:
        RuntimeError: the packages are missing, or a daemon did not come up (with its log).
    """

    def __init__(self) -> None:
        for program in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"):
            if not Path(program).exists():
                raise RuntimeError(f"{program} is missing: scripts/test installs it (apt-get install slurm-wlm munge)")
        self.dir = Path(tempfile.mkdtemp(prefix="specperf-slurm-"))
        self.nodes = [f"node{i}" for i in range(1, NODES + 1)]
        self.procs: list[subprocess.Popen] = []
        self.munge_socket = self.dir / "munge" / "munge.socket"
        try:
            self._start_munge()
            self._write_config()
            self.start_controller()
            for node in self.nodes:
                self._start(f"slurmd-{node}", ["/usr/sbin/slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self._wait(self._nodes_idle, "slurmd")
        except BaseException:
            self.close()
            raise

    def start_controller(self) -> None:
        """Start slurmctld (it recovers the jobs it knew from its state folder) and wait until
        ``scontrol ping`` says it is up."""
        self._start("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._controller = self.procs[-1]
        self._wait(lambda: self.run("scontrol", "ping").stdout.count("UP") > 0, "slurmctld")

    def stop_controller(self) -> None:
        """Stop slurmctld (SIGTERM: it saves its state first), as an outage of the controller
        does; the nodes' slurmd and the jobs they run go on."""
        self._controller.terminate()
        self._controller.wait(timeout=30)
        self.procs.remove(self._controller)

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    def env(self) -> dict[str, str]:
        """Variables that point Slurm's client commands at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (text output)."""
        return subprocess.run(list(argv), env={**os.environ, **self.env()}, capture_output=True, text=True,
                              check=check, timeout=30)

    def _start_munge(self) -> None:
        munge = self.dir / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        subprocess.run(["/usr/sbin/munged", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
                        f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                        f"--seed-file={munge}/munged.seed"], check=True, capture_output=True, timeout=30)
        self._munged_pid = int((munge / "munged.pid").read_text())

    def _write_config(self) -> None:
        gpus = [self.dir / f"gpu{i}" for i in range(GPUS)]
        for path in gpus:
            path.touch()
        for node in self.nodes:
            (self.dir / "spool" / node).mkdir(parents=True)
        (self.dir / "state").mkdir()
        auth = f"socket={self.munge_socket}"
        hostname = socket.gethostname()
        node_lines = "\n".join(
            f"NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={free_port()} CPUs=2 "
            f"RealMemory=1000 Gres=gpu:{GPUS} State=UNKNOWN" for node in self.nodes)
        self.conf.write_text(f"""\
ClusterName=specperftest
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo={auth}
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool/%n
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd-%n.pid
SlurmctldLogFile={self.dir}/slurmctld.log
SlurmdLogFile={self.dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
KillWait={KILL_WAIT_S}
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=300
MailProg=/bin/true
{node_lines}
PartitionName=test Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
""")
        (self.dir / "gres.conf").write_text(
            f"AutoDetect=off\nName=gpu File={self.dir}/gpu[0-{GPUS - 1}]\n")

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.stdout", "ab")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env()},
                                           start_new_session=True))
        log.close()

    def _nodes_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        states = dict(line.split() for line in states if line.strip())
        for node, state in states.items():
            if state.startswith(("drain", "down", "inval")) and state != "down*":
                self.run("scontrol", "update", f"nodename={node}", "state=resume")
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def _wait(self, ready, what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                if ready():
                    return
            except subprocess.SubprocessError:
                pass
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.dir.glob("*.log"))
                         if p.is_file())
        raise RuntimeError(f"{what} did not come up within {timeout_s:g} s; logs:\n{logs}")

    def _ours(self, pid: int) -> bytes | None:
        """The raw environment of process ``pid`` if it belongs to this cluster (its
        ``SLURM_CONF`` is this cluster's), else ``None``."""
        try:
            # read raw: psutil's parse of a retitled process's environment misses the variable
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None
        return environ if f"SLURM_CONF={self.conf}\0".encode() in environ else None

    def job_processes(self) -> list[psutil.Process]:
        """Processes that this cluster's jobs started and that are still alive (a job's worker,
        its engine: anything whose environment has ``SLURM_JOB_ID`` and this ``SLURM_CONF``),
        and its job steps (``slurmstepd``: detached from slurmd, they outlive it and ignore
        SIGTERM). Never this process or one outside this cluster."""
        found = []
        for proc in psutil.process_iter(["name"]):
            if proc.pid == os.getpid() or (environ := self._ours(proc.pid)) is None:
                continue
            if proc.info["name"] == "slurmstepd" or b"\0SLURM_JOB_ID=" in b"\0" + environ:
                found.append(proc)
        return found

    def kill_job_processes(self) -> list[int]:
        """SIGKILL each of :meth:`job_processes`; returns their pids."""
        killed = []
        for leftover in self.job_processes():
            try:
                leftover.kill()
                killed.append(leftover.pid)
            except psutil.Error:
                pass
        return killed

    def close(self) -> None:
        """Stop the daemons this fixture started (by their pids), then kill what this cluster's
        jobs left behind (:meth:`job_processes`: a failing test must leave no worker or engine
        running); remove the folder."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.kill_job_processes()
        pid = getattr(self, "_munged_pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
