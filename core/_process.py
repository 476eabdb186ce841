"""Engine processes on the local host: own session and process group, stopped by group.

An engine is started with ``start_new_session=True`` so it leads a new process group whose
id (pgid) equals its pid; everything it spawns (vLLM's engine core, SGLang's scheduler and
detokenizer) stays in that group. Stopping sends SIGTERM to the group, waits a grace
period, then SIGKILLs what is left. Nothing outside the recorded group is ever signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core._errors import EngineError

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class EngineProcess:
    """One launched engine process group, logging stdout and stderr to ``log_path``."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, cwd: str | None = None) -> None:
        """Start ``argv`` with ``env`` added to this process's environment.

        Raises:
            FileNotFoundError: the program (``argv[0]``) does not exist.
        """
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env={**os.environ, **env}, cwd=cwd, start_new_session=True,
                preexec_fn=_unblock_stop_signals,
            )
        except OSError:
            self._log.close()
            raise
        self.pid = self._proc.pid
        self.pgid = self.pid  # a new session's leader leads its own process group

    @property
    def returncode(self) -> int | None:
        """The leader's exit status once it has exited, else ``None``."""
        return self._proc.poll()

    def group_alive(self) -> bool:
        """Whether any process of the group still exists (the leader's zombie is reaped first)."""
        self._proc.poll()
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the group, wait up to ``grace_s`` seconds, then SIGKILL what is left.

        Returns once no process of the group remains (or 5 s after SIGKILL). Idempotent.
        """
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            if not self.group_alive():
                break
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self.group_alive():
                time.sleep(0.1)
        self._log.close()

    def log_size(self) -> int:
        """Bytes written to the log so far (an offset for :meth:`read_log`)."""
        self._log.flush()
        return self.log_path.stat().st_size

    def read_log(self, offset: int = 0) -> str:
        """The log text from byte ``offset`` on."""
        with open(self.log_path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log."""
        with open(self.log_path, "rb") as fh:
            tail = deque(fh, maxlen=lines)
        return b"".join(tail).decode(errors="replace").rstrip()


def _unblock_stop_signals() -> None:
    # Runs in the child between fork and exec: a signal mask survives exec, and the engine
    # must be stoppable by SIGTERM.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


@contextmanager
def launched(name: str, argv: list[str], env: dict[str, str], log_path: Path, cwd: str | None,
             grace_s: float) -> Iterator[EngineProcess]:
    """Start an :class:`EngineProcess` and stop its group when the block ends, however it ends.

    SIGINT and SIGTERM are held back from the moment before the engine is started until the
    block is entered, so a Ctrl-C can never land between the launch and the code that
    stops it (it is delivered, as KeyboardInterrupt, inside the block).

    Raises:
        EngineError: the program (``argv[0]``) could not be started.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        process = EngineProcess(argv, env, log_path, cwd)
    except BaseException as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if isinstance(exc, OSError):
            raise EngineError(f"cannot start engine {name!r}: {argv[0]}: {exc.strerror}") from None
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        yield process
    finally:
        process.stop(grace_s)
