"""The ``specperf`` command's exit statuses and which error gives which (docs/exit-statuses.md):
0 success, 2 usage, config, git or database error, 3 engine error, 4 invalid measurement, 5 host
error (unreachable, refused, busy; also Slack unreachable or failing at bot start-up), 130
interrupted, 141 standard output closed (a reader such as ``head`` went away: the run is
stopped and marked interrupted, as the shell's 128 + SIGPIPE)."""

from __future__ import annotations

import core
import storage
from bot._common import SlackUnavailableError

EXIT_USAGE, EXIT_ENGINE, EXIT_INVALID, EXIT_HOST, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED = 2, 3, 4, 5, 130, 141
_FAILURES = (
    (core.ConfigError, "config error", EXIT_USAGE),
    (core.GitError, "git error", EXIT_USAGE),
    (storage.NoSuchRunError, "no such run", EXIT_USAGE),  # before StorageError, its base
    (storage.StorageError, "storage error", EXIT_USAGE),
    (core.InvalidSampleError, "invalid measurement", EXIT_INVALID),
    (core.EngineError, "engine error", EXIT_ENGINE),
    (core.HostError, "host error", EXIT_HOST),
    (SlackUnavailableError, "Slack error", EXIT_HOST),
)


def failure(exc: BaseException | None, default: int = EXIT_USAGE) -> tuple[str, int]:
    """(label, exit status) of an error: the first of the table above that it is an instance of,
    else (no error too) ``("error", default)``."""
    return next(((label, status) for kind, label, status in _FAILURES if isinstance(exc, kind)), ("error", default))
