"""A real git repository of a small "engine" for fast compare tests.

The engine is the exact-rate server (tests/exact_rate_server.py) started by a module that
lives in the repository, ``src/fake_engine.py``, whose constants each commit changes: the
inter-token latency (so throughput moves by a known fraction), a per-launch noise, and
whether it starts at all. ``--itl-scale`` in a mode's arguments stands in for speculative
decoding making tokens cheaper, and ``FAKE_ENGINE_ITL_SCALE`` in the engine's environment
multiplies the ITL of every commit (a set-up's difference: issue 39).

Commits (linear, on ``main``, each tagged): ``base``; ``noop`` (a comment); ``slow`` (ITL x
1.30, -23% tok/s: under the suite's load four Slurm nodes and the rest tier share two vCPUs, and
a -9% plant at the 3% margin once read INCONCLUSIVE at 4 pairs in CI, 2026-12-06); ``broken``
(exits at start with an error). ``linear_history()`` gives
the longer histories the bisect and history tests plant instead: a first commit, then
``c1`` ... ``cN`` (or another tag), where one commit slows ITL by 10% for good and one may
fail to start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core import EngineConfig

ENGINE = '''"""A fake engine: the exact-rate server at this commit's speed (times FAKE_ENGINE_ITL_SCALE)."""
import os
import random
import sys

from tests import exact_rate_server

ITL_MS = {itl}
LAUNCH_NOISE = {noise}
FAILS = {fails}
ANSWER_PREFIX = {prefix!r}
SLOW_PROMPTS = {slow_prompts!r}
{comment}

if __name__ == "__main__":
    if FAILS:
        print("fake_engine: CUDA error: an illegal memory access was encountered", flush=True)
        sys.exit(1)
    args = sys.argv[1:]
    scale = 1.0
    if "--itl-scale" in args:
        i = args.index("--itl-scale")
        scale = float(args[i + 1])
        del args[i:i + 2]
    scale *= float(os.environ.get("FAKE_ENGINE_ITL_SCALE") or 1)  # a set-up's difference (issue 39)
    itl = ITL_MS * scale * (1 + random.gauss(0, LAUNCH_NOISE))
    sys.argv = ["fake_engine", *args, "--itl-ms", str(itl), "--ttft-ms", "5", "--answer-prefix", ANSWER_PREFIX]
    if SLOW_PROMPTS:
        sys.argv += ["--slow-prompts", SLOW_PROMPTS]
    exact_rate_server.main()
'''

COMMITS = [
    ("base", "base", dict(itl=2.0, noise=0.004, fails=False, comment="")),
    ("noop", "docs: a comment", dict(itl=2.0, noise=0.004, fails=False, comment="# nothing changes")),
    ("slow", "slower tokens", dict(itl=2.6, noise=0.004, fails=False, comment="")),
    ("broken", "breaks start-up", dict(itl=2.2, noise=0.004, fails=True, comment="")),
]


def linear_history(n: int = 16, slow: int = 8, broken: int = 0, noise: float = 0.004, tag: str = "c",
                   first: str = "good", slow_itl: float = 2.2) -> list[tuple[str, str, dict]]:
    """A first commit (tag ``first``) and ``n`` commits after it (tags ``<tag>1``..``<tag>N``):
    ``<tag><slow>`` (subject "slower decode step") and every later commit have ITL ``slow_itl``
    ms against 2.0 (x 1.10 by default); ``<tag><broken>`` alone exits at start; 0 plants neither.
    For :func:`make_repo`."""
    commits = [(first, first, {"itl": 2.0, "noise": noise, "fails": False, "comment": ""})]
    for i in range(1, n + 1):
        subject = "slower decode step" if i == slow else "breaks start-up" if i == broken else f"refactor {i}"
        knobs = {"itl": slow_itl if slow and i >= slow else 2.0, "noise": noise, "fails": i == broken,
                 "comment": f"# change {i}"}
        commits.append((f"{tag}{i}", subject, knobs))
    return commits


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def engine_source(**knobs) -> str:
    """``src/fake_engine.py`` with ``knobs`` (``itl``, ``noise``, ``fails``, ``comment``; ``prefix``
    and ``slow_prompts`` optional: core.testing.ExactRateServer's answer prefix and slow prompts)."""
    return ENGINE.format(**{"prefix": "", "slow_prompts": None, **knobs})


def make_repo(path: Path, commits: list[tuple[str, str, dict]] | None = None) -> dict[str, str]:
    """Create the repository at ``path`` with ``commits`` (tag, message, knobs) in order, by
    default :data:`COMMITS`; returns {tag: full SHA}."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    shas = {}
    for tag, message, knobs in commits or COMMITS:
        (path / "src").mkdir(exist_ok=True)
        (path / "src/fake_engine.py").write_text(engine_source(**knobs))
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", message)
        _git(path, "tag", tag)
        shas[tag] = _git(path, "rev-parse", "HEAD")
    return shas


def fake_engine(repo: Path, port: int, root: Path) -> EngineConfig:
    """The engine config that launches ``src/fake_engine.py`` from each commit's worktree."""
    return EngineConfig(
        kind="command", repo=str(repo), source_dir="src", source_package="fake_engine", port=port,
        python=sys.executable, command=["{python}", "-m", "fake_engine", "--port", "{port}"],
        env={"PYTHONPATH": str(root)}, ready_timeout_s=20, stop_grace_s=3,
        modes={"baseline": [], "eagle3": ["--itl-scale", "0.5"]},
    )
