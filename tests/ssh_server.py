"""A real OpenSSH server (Debian's ``openssh-server``) on loopback for the tests.

It gets its own host key, one client key in its own ``authorized_keys``, and a
``known_hosts`` file that names it, all in a temporary folder; nothing of the machine's own
SSH set-up is read or changed. ``scripts/test`` installs the package.
"""

from __future__ import annotations

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


class SshServer:
    """``sshd -D`` on 127.0.0.1 at a free port; ``host_config()`` gives a matching HostConfig."""

    def __init__(self) -> None:
        if not Path(SSHD).exists():
            raise RuntimeError("openssh-server is not installed: scripts/test installs it (apt-get install openssh-server)")
        self.dir = Path(tempfile.mkdtemp(prefix="specperf-sshd-"))
        host_pub = _keygen(self.dir / "host_key")
        client_pub = _keygen(self.dir / "client_key")
        (self.dir / "authorized_keys").write_text(client_pub + "\n")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {' '.join(host_pub.split()[:2])}\n")
        (self.dir / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.dir}/host_key\nPidFile {self.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin yes\nAllowTcpForwarding yes\nMaxSessions 10\nLogLevel VERBOSE\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # the privilege-separation directory
        self.log = open(self.dir / "sshd.log", "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.dir / 'sshd.log').read_text()[-2000:]}")

    def host_config(self, **extra) -> core.HostConfig:
        """A host reached through this server as root, with its key and known_hosts."""
        return core.HostConfig(ssh="root@127.0.0.1", port=self.port, known_hosts=str(self.known_hosts),
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
        shutil.rmtree(self.dir, ignore_errors=True)
