"""An engine launched from a git worktree of one commit: source mode and build mode.

Source mode puts ``<worktree>/<source_dir>`` first on PYTHONPATH and checks, before the
first launch, that ``source_package`` is really imported from there (a stale
``pip install`` of the engine would otherwise be measured instead of the commit). Build
mode runs ``build`` once per commit into ``<workdir>/builds/<sha>``, cached by SHA.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from core._config import EngineConfig
from core._errors import EngineError

_IMPORT_PROBE = (
    "import importlib, json, sys\n"
    "m = importlib.import_module(sys.argv[1])\n"
    "v = getattr(m, '__version__', None)\n"
    "if v is None:\n"
    "    try:\n"
    "        from importlib.metadata import version; v = version(sys.argv[1])\n"
    "    except Exception: v = None\n"
    "print(json.dumps({'package': sys.argv[1], 'version': v, 'path': getattr(m, '__file__', None)}))\n"
)


class BuildError(EngineError):
    """A commit's build command failed; the commit cannot be measured."""


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def engine_for_commit(engine: EngineConfig, worktree: Path, prefix: Path) -> EngineConfig:
    """``engine`` as launched from ``worktree``: placeholders filled and PYTHONPATH set."""
    values = {"worktree": str(worktree), "prefix": str(prefix)}
    env = {key: _fill(value, values) for key, value in engine.env.items()}
    if engine.source_dir is not None:
        source = str(worktree / engine.source_dir)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    return engine.model_copy(update={
        "python": _fill(engine.python, values),
        "args": [_fill(a, values) for a in engine.args],
        "modes": {name: [_fill(a, values) for a in args] for name, args in engine.modes.items()},
        "env": env,
    })


def build_commit(engine: EngineConfig, worktree: Path, prefix: Path, sha: str) -> None:
    """Run ``engine.build`` for ``sha`` unless ``prefix`` already holds a finished build.

    Raises:
        BuildError: the build command is missing or exits non-zero (with its log tail).
    """
    if not engine.build:
        return
    marker = prefix / ".specperf-build-ok"
    if marker.exists():
        return
    prefix.mkdir(parents=True, exist_ok=True)
    log = prefix.parent / f"{sha}.build.log"
    argv = [_fill(word, {"worktree": str(worktree), "prefix": str(prefix)}) for word in engine.build]
    with open(log, "wb") as out:
        try:
            code = subprocess.run(argv, cwd=worktree, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL).returncode
        except OSError as exc:
            raise BuildError(f"cannot run the build of {sha[:12]}: {argv[0]}: {exc.strerror}") from None
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise BuildError(f"the build of {sha[:12]} failed with status {code} (log: {log})", tail)
    marker.touch()


def check_import(engine: EngineConfig, worktree: Path) -> dict | None:
    """Import ``engine.source_package`` as the engine would and say where it came from.

    Returns:
        ``{"package", "version", "path", "from_worktree"}``, or ``None`` when the engine
        names no package to check.

    Raises:
        EngineError: the package does not import, or in source mode it is imported from
            outside the worktree (a stale install shadows the commit's source).
    """
    package = engine.source_package
    if not package:
        return None
    try:
        result = subprocess.run(
            [engine.python, "-c", _IMPORT_PROBE, package], cwd=worktree, capture_output=True, text=True,
            env={**os.environ, **engine.env}, timeout=300, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"cannot check which {package} the engine imports: {exc}") from None
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-20:])
        raise EngineError(f"the engine's python cannot import {package} from the worktree of {worktree.name[:12]}", tail)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    path = Path(found["path"] or "").resolve()
    found["from_worktree"] = worktree.resolve() in path.parents
    if engine.source_dir is not None and not found["from_worktree"]:
        raise EngineError(
            f"{package} is imported from {path}, not from the worktree {worktree}: an installed copy "
            "shadows the commit's source; uninstall it from the engine's environment or fix source_dir"
        )
    return found
