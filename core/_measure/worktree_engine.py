"""An engine launched from a git worktree of one commit: source mode and build mode.

Source mode puts ``<worktree>/<source_dir>`` first on PYTHONPATH and checks, before the
first launch, that ``source_package`` is really imported from there (a stale
``pip install`` of the engine would otherwise be measured instead of the commit). Build
mode runs ``build`` once per commit into ``<workdir>/builds/<sha>``, cached by SHA.
"""

from __future__ import annotations

import json
import posixpath

from core._config import EngineConfig
from core._errors import CommandTimeout, EngineError
from core._hosts import Host

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


def engine_for_commit(engine: EngineConfig, worktree: str, prefix: str) -> EngineConfig:
    """``engine`` as launched from ``worktree`` (a path on its host): placeholders filled and
    PYTHONPATH set."""
    values = {"worktree": worktree, "prefix": prefix}
    env = {key: _fill(value, values) for key, value in engine.env.items()}
    if engine.source_dir is not None:
        source = posixpath.join(worktree, engine.source_dir)
        env["PYTHONPATH"] = ":".join(filter(None, [source, env.get("PYTHONPATH")]))
    return engine.model_copy(update={
        "python": _fill(engine.python, values),
        "args": [_fill(a, values) for a in engine.args],
        "modes": {name: [_fill(a, values) for a in args] for name, args in engine.modes.items()},
        "env": env,
    })


async def build_commit(host: Host, engine: EngineConfig, worktree: str, prefix: str, sha: str) -> None:
    """Run ``engine.build`` for ``sha`` on ``host`` unless ``prefix`` already holds a finished
    build; its output is kept in ``<prefix>/../<sha>.build.log`` on the host.

    Raises:
        BuildError: the build command is missing or exits non-zero (with its log tail).
        HostError: the host cannot be reached.
    """
    if not engine.build:
        return
    marker = f"{prefix}/.specperf-build-ok"
    if (await host.run(["test", "-e", marker])).returncode == 0:
        return
    await host.makedirs(prefix)
    log = f"{posixpath.dirname(prefix)}/{sha}.build.log"
    argv = [_fill(word, {"worktree": worktree, "prefix": prefix}) for word in engine.build]
    result = await host.run(argv, cwd=worktree, timeout_s=engine.build_timeout_s)
    output = result.stdout + result.stderr
    await host.write_file(log, output.encode())
    if result.returncode == 127:
        raise BuildError(f"cannot run the build of {sha[:12]}: {argv[0]}: not found")
    if result.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise BuildError(f"the build of {sha[:12]} failed with status {result.returncode} (log: {log} on host "
                         f"{host.name})", tail)
    await host.write_file(marker, b"")


async def check_import(host: Host, engine: EngineConfig, worktree: str) -> dict | None:
    """Import ``engine.source_package`` on ``host`` as the engine would and say where it came from.

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
        result = await host.run([engine.python, "-c", _IMPORT_PROBE, package], cwd=worktree, env=engine.env,
                                timeout_s=300)
    except CommandTimeout as exc:
        raise EngineError(f"cannot check which {package} the engine imports: {exc}") from None
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-20:])
        raise EngineError(f"the engine's python cannot import {package} from the worktree of "
                          f"{posixpath.basename(worktree)[:12]}", tail)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    path = posixpath.normpath(found["path"] or "")
    found["from_worktree"] = path.startswith(posixpath.normpath(worktree) + "/")
    if engine.source_dir is not None and not found["from_worktree"]:
        raise EngineError(
            f"{package} is imported from {path}, not from the worktree {worktree}: an installed copy "
            "shadows the commit's source; uninstall it from the engine's environment or fix source_dir"
        )
    return found
