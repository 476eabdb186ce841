"""A compare's database writes off the event loop: :class:`WriteBehind` hands each hook of a
recorder (a :class:`storage.RunStore`) to one writer thread, in order, and returns at once.

Why: the hooks of a compare are called on the event loop (core's observer protocol is
synchronous). A write that waits on the database, a SQLite lock up to the driver's 5 s busy
timeout or a PostgreSQL that does not answer until the TCP connect timeout, stopped the whole
loop with it: the bot's lease heartbeat, Slack acknowledgements and cancels waited behind a
trial's row (issue 29). Behind this wrapper the loop goes on; the writes queue up in launch
order and land when the database answers.

What is kept: every write happens, in the order of the hooks, on one thread (a hook's row
exists before the next hook's write needs it). A write that fails is not retried here: the
first error is kept, later writes are dropped (they would build on a row that is not there),
and the error is raised on the event loop at the next hook, so the compare stops its engine and
ends as it did when the write failed in place, and by :meth:`WriteBehind.drain`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from core import CompareObserver
from storage._db import StorageError

_STOP = object()
MAX_PENDING = 1000  # writes waiting at most: a compare makes about 5 per launch


class WriteBehind(CompareObserver):
    """Every hook of ``recorder`` run on a writer thread of its own, in order.

    At most ``max_pending`` writes wait; one more is a :class:`StorageError` at the hook, never
    a silent drop. Call :meth:`drain` (from a thread: ``await asyncio.to_thread(w.drain)``) after the compare
    returns: it waits for the queued writes, ends the thread and raises the first write's error.
    """

    def __init__(self, recorder: CompareObserver, max_pending: int = MAX_PENDING) -> None:
        self.recorder = recorder
        self._queue: queue.Queue = queue.Queue(max_pending)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, name="specperf-run-writer", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            if self._error is None:
                try:
                    item()
                except Exception as exc:  # kept, raised on the loop at the next hook and by drain()
                    self._error = exc
            self._queue.task_done()
        self._queue.task_done()

    def _put(self, write: Callable[[], None]) -> None:
        """Queue ``write``; first raise the error of an earlier write, if one failed.

        Raises:
            StorageError: ``max_pending`` writes are already waiting (the database has taken
                none for that long); the compare stops rather than drop a write.
        """
        if self._error is not None:
            raise self._error
        try:
            self._queue.put_nowait(write)
        except queue.Full:
            raise StorageError(f"the database has taken none of the last {self._queue.maxsize} writes of this run; "
                               "check that it is reachable and not locked, then run the compare again") from None

    def drain(self, raise_error: bool = True) -> None:
        """Wait until every queued write is done, end the writer thread, and raise the first
        write's error (unless ``raise_error`` is false: a compare that already failed keeps its
        own exception). Blocks: call it from a thread, not the event loop."""
        self._queue.put(_STOP)
        self._thread.join()
        if raise_error and self._error is not None:
            raise self._error

    def started(self, base_sha, head_sha) -> None:
        self._put(lambda: self.recorder.started(base_sha, head_sha))

    def progress(self, message) -> None:
        self._put(lambda: self.recorder.progress(message))

    def trial_launched(self, arm, seq, process) -> None:
        self._put(lambda: self.recorder.trial_launched(arm, seq, process))

    def profile_launched(self, mode, role, process) -> None:
        self._put(lambda: self.recorder.profile_launched(mode, role, process))

    def trial_finished(self, arm, seq, trial) -> None:
        self._put(lambda: self.recorder.trial_finished(arm, seq, trial))

    def trial_failed(self, arm, seq, error) -> None:
        self._put(lambda: self.recorder.trial_failed(arm, seq, error))

    def verdicts_updated(self, verdicts) -> None:
        verdicts = dict(verdicts)  # as they are now, not as the compare changes them later
        self._put(lambda: self.recorder.verdicts_updated(verdicts))

    def snapshot(self, phase, data, seq) -> None:
        self._put(lambda: self.recorder.snapshot(phase, data, seq))

    def finished(self, result) -> None:
        self._put(lambda: self.recorder.finished(result))
