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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core._errors import EngineError
from core._hosts.agent import group_running, listening_pids, stop_group

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
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # owner-only: an engine echoes its arguments and environment into its log
        self._log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env={**os.environ, **env}, cwd=cwd, start_new_session=True,
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
        """Whether any process of the group still runs (the leader's zombie is reaped first;
        an orphan's zombie, which init collects in its own time, does not count)."""
        self._proc.poll()
        return group_running(self.pgid)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the group, wait up to ``grace_s`` seconds, then SIGKILL what is left.

        Returns once no process of the group remains (or 5 s after SIGKILL). Idempotent.
        A Ctrl-C or SIGTERM that arrives meanwhile cannot cut the stop short: it ends the
        grace period at once (straight to SIGKILL) and is delivered when the group is gone.
        """
        with _DeferredSignals() as deferred:
            stop_group(self.pgid, grace_s, self.group_alive, lambda: bool(deferred.received))
            self._log.close()

    def log_size(self) -> int:
        """Bytes written to the log so far (an offset for :meth:`read_log`)."""
        self._log.flush()
        return self.log_path.stat().st_size

    def read_log(self, offset: int = 0, limit_bytes: int = 16 << 20) -> str:
        """The log text from byte ``offset`` on, at most its last ``limit_bytes`` (a verbose
        engine can write gigabytes)."""
        with open(self.log_path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(offset, size - limit_bytes))
            return fh.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log (read from the end, whatever the log's size)."""
        text = self.read_log(0, limit_bytes=256 << 10)
        return "\n".join(text.splitlines()[-lines:]).rstrip()

    def holds_port(self, port: int) -> bool | None:
        """Whether a process of this group listens on TCP ``port`` (Linux ``/proc``);
        ``None`` when the listener cannot be identified (no ``/proc``, no permission)."""
        holders = listening_pids(port)
        if not holders:
            return None
        for pid in holders:
            try:
                if os.getpgid(pid) == self.pgid:
                    return True
            except ProcessLookupError:
                continue
        return False


class _DeferredSignals:
    """While active (main thread only), SIGINT and SIGTERM are recorded instead of handled;
    on exit the previous handlers are restored and each recorded signal is handed to them
    (for Ctrl-C that raises KeyboardInterrupt or cancels the asyncio main task). Python runs
    signal handlers in the main thread whatever thread the OS picked, so this holds in a
    process with other threads too, where a signal mask would not."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, lambda num, _frame: self.received.append(num))
                              for sig in _STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def release(self) -> None:
        """Restore the handlers and deliver what was recorded (idempotent)."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        received, self.received = self.received, []
        for sig in received:
            handler = previous.get(sig)
            if callable(handler):
                handler(sig, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(sig)


@contextmanager
def launched(name: str, argv: list[str], env: dict[str, str], log_path: Path, cwd: str | None,
             grace_s: float) -> Iterator[EngineProcess]:
    """Start an :class:`EngineProcess` and stop its group when the block ends, however it ends.

    SIGINT and SIGTERM are deferred from just before the engine is started until the block
    is entered, so a Ctrl-C can never land between the launch and the code that stops it
    (it is delivered inside the block).

    Raises:
        EngineError: the program (``argv[0]``) could not be started.
    """
    deferred = _DeferredSignals().__enter__()
    try:
        process = EngineProcess(argv, env, log_path, cwd)
    except OSError as exc:
        deferred.release()
        raise EngineError(f"cannot start engine {name!r}: {argv[0]}: {exc.strerror}") from None
    except BaseException:
        deferred.release()
        raise
    try:
        deferred.release()
        yield process
    finally:
        process.stop(grace_s)
