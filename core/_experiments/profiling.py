"""The profile round of a compare: where inside the step the time went.

After the verdicts, for each mode whose verdict asks for it (``[compare] profile``:
``on-change``, the default, for REGRESSION and IMPROVEMENT; ``always``; ``never``: :func:`wanted`;
core._experiments.compare runs the round and keeps each mode's document), each arm is
launched once more with the engine's torch profiler on (core._measure.profiled), one arm at a
time so neither profile carries the other's load. The traces are copied into the run's profile
folder, read (core._profile.traces) and diffed per engine step (core._profile.diff): the mode's
profile document names the ops whose time per step moved most.

A profile round never changes a verdict and never fails a run: an engine without a profiler
endpoint, a launch that fails, a trace that cannot be read or two profiles that are not
comparable give the mode a document with ``status`` ``none`` or ``failed`` and a line saying
why. Interrupted (Ctrl-C, a cancelled job), the mode's document says ``interrupted`` and the
cancellation goes on to the caller, which keeps the verdicts (core._experiments.compare).
"""

from __future__ import annotations

import datetime as dt
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

from core._config import CompareConfig, EngineConfig, WorkloadConfig
from core._errors import SpecperfError, without_log_tail
from core._experiments.stats import IMPROVEMENT, REGRESSION
from core._hosts import EngineHandle, Host
from core._measure.profiled import NoProfilerError, profile_launch
from core._profile.diff import ArmProfile, diff_profiles
from core._profile.traces import read_trace

ENGINE_LIBRARIES = {"vllm": "vllm", "sglang": "sglang"}
INTERRUPTED = {"status": "interrupted", "reason": "interrupted by the user",
               "line": "no profile: the profile round was interrupted (the verdicts stand)"}


def wanted(setting: str, verdict: str | None) -> bool:
    """Whether a mode with ``verdict`` gets a profile round under ``[compare] profile = setting``."""
    return setting == "always" or (setting == "on-change" and verdict in (REGRESSION, IMPROVEMENT))


def library_version(snapshot: dict | None, kind: str) -> str | None:
    """The engine library's version in an arm's full snapshot (``packages``), where found."""
    package = ENGINE_LIBRARIES.get(kind)
    info = ((snapshot or {}).get("packages") or {}).get(package) if package else None
    return info.get("version") if isinstance(info, dict) else None


async def profile_mode(engine_name: str, host: Host, workload: WorkloadConfig, settings: CompareConfig, mode: str,
                       engines: dict[str, tuple[EngineConfig, str | None]], snapshots: dict[str, dict | None], *,
                       head_sha: str, profile_dir: str | None, progress: Callable[[str], None],
                       on_launch: Callable[[str, EngineHandle], None]) -> dict:
    """One mode's profile round. Returns ``{"status": "done", ...}`` with
    :meth:`core._profile.diff.ProfileDiff.to_dict`'s keys (``line``, ``ops``, ``categories``,
    each arm's ``traces`` as copied here), or ``{"status": "none" | "failed", "line", "reason"}``
    (``none``: the engine has no profiler endpoint; ``failed``: any other cause, in ``reason``).
    ``engines``: each arm's (engine, worktree) by role; ``snapshots``: each arm's full snapshot;
    ``profile_dir``: where the traces are kept here (default: a folder under the temporary
    directory); ``progress`` hears each step; ``on_launch(role, engine)`` each profiled launch.
    Raises only on cancellation."""
    stamp = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{head_sha[:12]}"
    local_root = Path(profile_dir or Path(tempfile.gettempdir()) / "specperf-profiles" / stamp)
    workload = workload.model_copy(update={"requests": settings.profile_requests})
    arms = {}
    try:
        for role in ("base", "head"):
            engine, tree = engines[role]
            progress(f"profile {mode} {role}: launching with the profiler on")
            paths = await profile_launch(
                engine_name, engine, mode, workload, f"{host.workdir}/logs", host=host, cwd=tree,
                trace_dir=f"{host.workdir}/profiles/{stamp}-{mode}-{role}", local_dir=local_root / mode / role,
                steps=settings.profile_steps, version=library_version(snapshots.get(role), engine.kind),
                on_launch=functools.partial(on_launch, role))
            arms[role] = ArmProfile.of([read_trace(p) for p in paths])
        return {"status": "done", **diff_profiles(arms["base"], arms["head"]).to_dict()}
    except NoProfilerError as exc:
        return {"status": "none", "reason": str(exc), "line": f"no profile: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a profile round never fails the run: its cause is said instead
        reason = without_log_tail(exc) if isinstance(exc, SpecperfError) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "reason": reason, "line": f"no profile: the profile round failed: {reason}"}
