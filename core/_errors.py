"""Errors raised by specperf's library.

Every error names its cause and what to do about it in its message; callers (the CLI, the
bot) print ``str(error)`` as is. Errors that happen after data was gathered carry that data
(see :class:`core.InvalidSampleError`, defined beside the sample it carries) so nothing measured is lost.
"""

from __future__ import annotations


class SpecperfError(Exception):
    """Base class of every error specperf raises on purpose."""


class ConfigError(SpecperfError):
    """The configuration file is missing, unreadable, or does not validate."""


class EngineError(SpecperfError):
    """An engine could not be launched, never became ready, or died.

    Attributes:
        log_tail: the last lines of the engine's log (may be empty).
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        full = message if not log_tail else f"{message}{LOG_TAIL_MARK}{log_tail}"
        super().__init__(full)


LOG_TAIL_MARK = "\n--- engine log tail ---\n"


def without_log_tail(exc: BaseException) -> str:
    """An error's message without the engine log tail an :class:`EngineError` appends."""
    return str(exc).split(LOG_TAIL_MARK)[0]


class EngineNotReadyError(EngineError):
    """The engine did not pass its readiness probe within the timeout."""


class EngineExitedError(EngineError):
    """The engine process exited on its own (before readiness or during measurement)."""


class HostError(SpecperfError):
    """A host could not be reached, refused us (host key, authentication), or the connection
    to it was lost; or a command could not run there."""


class CommandTimeout(HostError):
    """A command on a host ran past its timeout; its process group was stopped."""


class HostBusyError(HostError):
    """The host is held by another experiment (its lock) or by foreign processes on its GPUs."""
