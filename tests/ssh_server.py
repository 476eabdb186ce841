"""A real OpenSSH server (Debian's ``openssh-server``) on loopback for the tests.

It gets its own host key, one client key in its own ``authorized_keys``, and a
``known_hosts`` file that names it, all in a temporary folder; nothing of the machine's own
SSH set-up is read or changed. ``scripts/test`` installs the package.
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

import core

SSHD = "/usr/sbin/sshd"


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


class NetnsUnavailable(RuntimeError):
    """This machine does not let the tests make a network namespace (no CAP_NET_ADMIN, no ip)."""


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {result.stderr.strip()}")


class SshServer:
    """``sshd -D`` at a free port, on 127.0.0.1 or, with ``netns``, on 10.203.N.2 inside a
    network namespace of its own joined to this one by a veth pair (a second machine's
    network: its loopback is not ours); ``host_config()`` gives a matching HostConfig."""

    def __init__(self, netns: bool = False) -> None:
        if not Path(SSHD).exists():
            raise RuntimeError("openssh-server is not installed: scripts/test installs it (apt-get install openssh-server)")
        self.dir = Path(tempfile.mkdtemp(prefix="specperf-sshd-"))
        host_pub = _keygen(self.dir / "host_key")
        client_pub = _keygen(self.dir / "client_key")
        (self.dir / "authorized_keys").write_text(client_pub + "\n")
        from tests.conftest import free_port

        self.port = free_port()  # below the ephemeral range (free_port's docstring)
        self.address, self.netns, wrap = "127.0.0.1", None, []
        if netns:
            self._make_netns()
            wrap = ["ip", "netns", "exec", self.netns]
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"[{self.address}]:{self.port} {' '.join(host_pub.split()[:2])}\n")
        (self.dir / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress {self.address}\nHostKey {self.dir}/host_key\nPidFile {self.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin yes\nAllowTcpForwarding yes\nMaxSessions 10\nLogLevel VERBOSE\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # the privilege-separation directory
        self.log = open(self.dir / "sshd.log", "ab")
        self.proc = subprocess.Popen([*wrap, SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                sock.settimeout(1)
                if sock.connect_ex((self.address, self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.dir / 'sshd.log').read_text()[-2000:]}")

    def _make_netns(self) -> None:
        subnet = 1 + os.getpid() % 250
        self.netns = f"specperf-test-{os.getpid()}"
        outer, inner = f"spt{os.getpid() % 100000}a", f"spt{os.getpid() % 100000}b"
        _ip("netns", "add", self.netns)
        try:
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", self.netns)
            _ip("addr", "add", f"10.203.{subnet}.1/30", "dev", outer)
            _ip("link", "set", outer, "up")
            for args in (("addr", "add", f"10.203.{subnet}.2/30", "dev", inner), ("link", "set", inner, "up"),
                         ("link", "set", "lo", "up")):
                _ip("netns", "exec", self.netns, "ip", *args)
        except NetnsUnavailable:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
            raise
        self.address = f"10.203.{subnet}.2"

    def host_config(self, **extra) -> core.HostConfig:
        """A host reached through this server as root, with its key and known_hosts."""
        return core.HostConfig(ssh=f"root@{self.address}", port=self.port, known_hosts=str(self.known_hosts),
                               identity_file=str(self.dir / "client_key"), **extra)

    def drop_connections(self) -> int:
        """SIGKILL the sshd processes serving connections (not the listener, not what they
        run): the way a network drop or a crashed sshd looks to both sides. Returns how many."""
        killed = 0
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if child.name() == "sshd":
                    child.send_signal(signal.SIGKILL)
                    killed += 1
            except psutil.NoSuchProcess:
                continue
        return killed

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.drop_connections()
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        if self.netns:  # deleting the namespace deletes the veth pair with it
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
