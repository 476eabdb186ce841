"""specperf's code never leaks into a foreign interpreter: the probe runs in the engine's Python
without specperf's folders on its ``sys.path``, and no module of ours is named like a
standard-library module (issue 12: ``python core/_env/probe_script.py`` put ``core/`` first on
the engine Python's path, where ``core/_bisect.py`` stood in for the standard ``_bisect``)."""

from __future__ import annotations

import asyncio
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import bot
import core
import storage
from core._env import probe as _probe
from core._env.probe import probe as run_probe
from core._env.probe import probe_async
from tests.conftest import ROOT


def _our_module_names() -> list[tuple[str, str]]:
    """(last name part, dotted name) of every module and package of specperf's packages, and of
    the repository's top-level Python folders (tests, bench, scripts: pytest and ``python -m``
    put the repository root on ``sys.path``)."""
    names = [(p.__name__, p.__name__) for p in (core, bot, storage)]
    for package in (core, bot, storage):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names.append((info.name.rpartition(".")[2], info.name))
    for folder in ("tests", "bench", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            names.append((path.stem, str(path.relative_to(ROOT))))
        names.append((folder, folder))
    return names


def test_no_module_of_ours_is_named_like_a_standard_library_module():
    names = _our_module_names()
    assert ("bisection", "core._experiments.bisection") in names and len(names) > 60  # the walk sees them all
    clashes = sorted(dotted for last, dotted in names if last in sys.stdlib_module_names)
    assert clashes == [], f"named like standard-library modules (rename them): {clashes}"


@pytest.fixture()
def script_beside_a_shadowing_module(tmp_path, monkeypatch) -> Path:
    """The probe script in a folder that also holds ``json.py`` and ``_bisect.py`` which exit at
    import: run by its path, the probe would import them instead of the standard library's."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "_probe_script.py").write_text(_probe.PROBE_SCRIPT.read_text())
    for name in ("json", "_bisect"):
        (folder / f"{name}.py").write_text(f"raise SystemExit('shadowed: {name} from the script folder')\n")
    shadowed = subprocess.run([sys.executable, str(folder / "_probe_script.py"), "--cheap", "--sample-s", "0"],
                              capture_output=True, text=True, cwd=tmp_path)
    # by its path the folder shadows the standard library (``_bisect`` is imported first on
    # python.org's builds, ``json`` on Debian's 3.11 in the project's image)
    assert shadowed.returncode != 0 and "from the script folder" in shadowed.stderr, shadowed.stderr
    monkeypatch.setattr(_probe, "PROBE_SCRIPT", folder / "_probe_script.py")
    return folder


def test_the_probe_never_has_its_own_folder_on_sys_path(script_beside_a_shadowing_module, tmp_path):
    snapshot = run_probe(sys.executable, import_torch=False, sample_s=0, cwd=str(tmp_path))
    assert snapshot["kind"] == "full" and snapshot["software"]["python"]["executable"] == sys.executable
    cheap = asyncio.run(probe_async(sys.executable, cheap=True, sample_s=0, cwd=str(tmp_path)))
    assert cheap["kind"] == "cheap"


def test_the_probe_runs_in_a_python_that_can_import_specperf():
    # The situation that failed on 3.11: the engine's Python is one where specperf is installed
    # (here, the tests' own interpreter), so anything on the probe's path resolves to our code.
    where = subprocess.run([sys.executable, "-c", "import importlib.util, sys; print(importlib.util.find_spec('core')"
                            ".origin); print(sys.version)"],  # found, not imported (that costs 1.5 s of CPU)
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert Path(where[0]).resolve().parent == Path(core.__file__).resolve().parent
    snapshot = run_probe(sys.executable, import_torch=False, sample_s=0)
    assert snapshot["software"]["python"]["version"] == where[1].split()[0]
    assert snapshot["gpu"]["available"] in (True, False) and snapshot["system"]["cpu_count"] > 0
