"""Running the host probe (``core/_env/probe_script.py``) with an engine's Python and reading its JSON.

The probe runs in the engine's own interpreter, so what it reports (torch, NCCL, vllm or
sglang versions and import paths, ``VLLM_*`` variables) is what the engine itself sees. It is
always fed on standard input, ``[python, "-", *options]``, on this machine as on a remote host
(:func:`probe_script_text` and :func:`probe_options` give the two halves;
:func:`parse_probe_output` reads the answer). Never ``python <path of _probe_script.py>``: that
puts specperf's ``core/`` first on the engine Python's ``sys.path``, where any of our modules
named like a standard-library one shadows it (``core/_bisect.py`` stood in for the standard
``_bisect`` this way, running specperf's code inside the engine's Python). With ``-`` the first
``sys.path`` entry is the working directory, as for the engine's own ``python -m``. Not ``-I``:
that would also drop ``PYTHONPATH``, which the engine's environment may set. The argv is a list,
never a shell string, so nothing a user typed reaches a shell.

A snapshot is the probe's JSON document (its schema is in ``core/_env/probe_script.py``'s
docstring) plus ``wall_s``: seconds from starting the interpreter to having parsed its answer.
Measured costs are in ``bench/PROBE_RESULTS.md``: the full probe is dominated by ``import torch``;
the cheap per-trial probe (:func:`probe_cheap`) skips the software scan.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from core._config import ContainerConfig, HostConfig
from core._errors import CommandTimeout, SpecperfError
from core._hosts import Host, LocalHost
from core._hosts.container import run_argv
from core._secret_rule import joined

PROBE_SCRIPT = Path(__file__).with_name("probe_script.py")
SCHEMA = 1


class ProbeError(SpecperfError):
    """The probe could not run or did not answer with a snapshot (the message says which and why)."""


@functools.cache
def probe_script_text() -> str:
    """The probe's source with its secret rule joined in (core._secret_rule.joined), for feeding
    to ``python -`` on a host."""
    return joined(PROBE_SCRIPT.read_text())


def own_pynvml_dir() -> str | None:
    """The folder of specperf's own ``pynvml.py`` (a fallback for an engine Python without one)."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(spec.origin)


def probe_options(*, cheap: bool = False, import_torch: bool = True, repo: str | None = None,
                  pynvml_dir: str | None = None, sample_s: float | None = None) -> list[str]:
    """The probe's command-line options (see ``core/_env/probe_script.py``).

    Args:
        cheap: the per-trial variant (live GPU readings, env vars, load; no software scan).
        import_torch: the full probe imports torch for its CUDA, cuDNN and NCCL versions (3.9 s
            with CUDA torch on an H200 machine); ``False`` reads torch's ``version.py``, cuDNN's
            wheel metadata and libnccl through ctypes instead (0.5 s for the whole probe there).
        repo: the engine's git checkout on the host; its HEAD SHA and dirtiness are recorded.
        pynvml_dir: a directory holding ``pynvml.py``, used when the engine's Python has none.
        sample_s: seconds between the two ``/proc`` readings that rank the busiest processes.

    Raises:
        ProbeError: ``sample_s`` outside 0..10 s.
    """
    options = []
    if cheap:
        options.append("--cheap")
    if not import_torch:
        options.append("--no-import")
    if repo:
        options += ["--repo", str(repo)]
    if pynvml_dir:
        options += ["--pynvml-dir", str(pynvml_dir)]
    if sample_s is not None:
        if not 0 <= sample_s <= 10:
            raise ProbeError(f"sample_s must be between 0 and 10 seconds, got {sample_s}")
        options += ["--sample-s", repr(float(sample_s))]
    return options


def parse_probe_output(stdout: str, source: str) -> dict:
    """The snapshot in the probe's standard output.

    Args:
        stdout: everything the probe printed on standard output.
        source: what ran it (the interpreter, the host), for error messages.

    Raises:
        ProbeError: the output is not one JSON object of the probe's schema.
    """
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        head = stdout.strip()[:200]
        raise ProbeError(f"probe with {source} printed no JSON document ({exc.msg}); "
                         f"its output began: {head!r}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not {"gpu", "software", "system"} <= doc.keys():
        raise ProbeError(f"probe with {source} answered with JSON that is not a specperf snapshot "
                         f"(schema {SCHEMA} with gpu, software and system sections)")
    return doc


def _argv(python: str, cheap: bool, import_torch: bool, repo: str | None, sample_s: float | None,
          pynvml_dir: str | None) -> list[str]:
    options = probe_options(cheap=cheap, import_torch=import_torch, repo=repo, pynvml_dir=pynvml_dir,
                            sample_s=sample_s)
    return [python, "-", *options]


def _failure(python: str, exc: OSError) -> ProbeError:
    if isinstance(exc, FileNotFoundError):
        return ProbeError(f"cannot run the probe: {python} does not exist "
                          "(check the engine's python in the config)")
    if isinstance(exc, PermissionError):
        return ProbeError(f"cannot run the probe: {python} is not executable")
    return ProbeError(f"cannot run the probe with {python}: {exc}")


def _finish(python: str, returncode: int, stdout: str, stderr: str, started: float) -> dict:
    if returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise ProbeError(f"probe with {python} exited with status {returncode}" + (f":\n{tail}" if tail else ""))
    snapshot = parse_probe_output(stdout, python)
    snapshot["wall_s"] = round(time.monotonic() - started, 4)
    return snapshot


def probe(python: str = sys.executable, *, cheap: bool = False, import_torch: bool = True,
          repo: str | None = None, env: Mapping[str, str] | None = None, cwd: str | None = None,
          timeout_s: float = 120.0, sample_s: float | None = None) -> dict:
    """Run the probe with ``python`` on this machine and return its snapshot.

    Args:
        python: the engine's interpreter (its venv's ``bin/python``); default: specperf's own.
        cheap: the per-trial variant (see :func:`probe_cheap`).
        import_torch: see :func:`probe_options`.
        repo: the engine's git checkout, for its SHA.
        env: variables added to this process's environment for the probe, as the engine gets
            them (the engine's ``env`` from the config), so ``VLLM_*`` and the like are recorded.
        cwd: working directory (the engine's); first on the probe's ``sys.path``, as with
            ``python -m`` (the script is fed on standard input, see the module docstring).
        timeout_s: seconds before the probe is killed.
        sample_s: see :func:`probe_options`.

    Returns:
        The snapshot dict (schema in ``core/_env/probe_script.py``) with ``wall_s`` added.

    Raises:
        ProbeError: ``python`` missing or not executable, the probe timed out, exited non-zero,
            or printed something other than a snapshot.
    """
    argv = _argv(python, cheap, import_torch, repo, sample_s, own_pynvml_dir())
    started = time.monotonic()
    try:
        result = subprocess.run(argv, input=probe_script_text(), capture_output=True, text=True,
                                env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"probe with {python} did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise _failure(python, exc) from None
    return _finish(python, result.returncode, result.stdout, result.stderr, started)


def probe_cheap(python: str = sys.executable, **kwargs) -> dict:
    """The per-trial probe: GPU readings (P-state, clocks, clock-event reasons, PCIe link,
    temperature, power, memory, compute processes), ``NCCL_*``/``VLLM_*``/... variables, load
    average, free memory and the busiest processes; no package scan, no torch import, no git.
    Keyword arguments as for :func:`probe`.

    Raises:
        ProbeError: as :func:`probe`.
    """
    return probe(python, cheap=True, **kwargs)


async def probe_async(python: str = sys.executable, *, cheap: bool = False, import_torch: bool = True,
                      repo: str | None = None, env: Mapping[str, str] | None = None, cwd: str | None = None,
                      timeout_s: float = 120.0, sample_s: float | None = None,
                      host: Host | None = None, container: ContainerConfig | None = None) -> dict:
    """:func:`probe` on ``host`` (default: this machine) for event-loop code: the same
    arguments, result and errors, without blocking the loop. The script is fed on standard input
    (``python -``), so nothing needs installing on a remote host. With ``container`` (a
    container engine's), the probe runs in a container of its image, with the engine's run
    options, so it reads what the engine sees (``python`` is then the image's; ``cwd`` or
    ``repo`` is mounted at its own path).

    Raises:
        ProbeError: as :func:`probe`.
        HostError: the host cannot be reached or the connection was lost.
    """
    host = host or LocalHost("local", HostConfig(), "")
    remote = not host.is_local
    argv = _argv(python, cheap, import_torch, repo, sample_s, None if remote or container else own_pynvml_dir())
    if container:
        argv = run_argv(container, argv, name=None, workdir=host.workdir, env_names=sorted(env or {}),
                        cwd=cwd or repo, cpus=None, interactive=True)
    started = time.monotonic()
    try:
        result = await host.run(argv, input=probe_script_text().encode(), cwd=cwd,
                                env=dict(env or {}), timeout_s=timeout_s)
    except CommandTimeout:
        raise ProbeError(f"probe with {python} did not finish within {timeout_s:g} s") from None
    if result.returncode == 127:
        raise _failure(python, FileNotFoundError(python))
    if result.returncode == 126:
        raise _failure(python, PermissionError(python))
    return _finish(f"{python} on host {host.name}" if remote else python, result.returncode, result.stdout,
                   result.stderr, started)
