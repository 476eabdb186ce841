"""Which operation moved, on a real NVIDIA GPU (issue 27): a compare of two commits of the
tests' own OpenAI-compatible engine (tests/profiled_server.py: a random-weight Llama from
``scripts/make_test_models.py`` under transformers, with vLLM's profiler endpoints) whose
commits differ by one kernel path, eager attention against SDPA, with ``profile = "always"``.
The profile round launches each arm once more with torch's profiler on (CPU and CUDA), and the
diff of the kernels per decode step names the attention kernels.

Marked ``gpu``; skipped where NVML cannot start (no driver), the one allowed skip, as in
tests/test_env_gpu.py. With ``SPECPERF_FIXTURE_OUT`` set, the kept traces are copied there (the
``gpu-*`` fixtures of tests/test_profile.py came from such a run).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

import core
from core._experiments.compare import CompareRequest, compare
from core._profile.categories import ATTENTION
from tests.conftest import ROOT, free_port, local_host, two_commit_repo
from tests.test_env_gpu import _REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or ""),
              pytest.mark.timeout(600)]


def _attention_repo(repo: Path) -> Path:
    """Two commits: ``attention.txt`` says ``eager``, then ``sdpa`` (tests/profiled_server.py reads it)."""
    return two_commit_repo(repo, "attention.txt", ("eager\n", "base: eager attention"),
                           ("sdpa\n", "attention: scaled_dot_product_attention kernels"))


class Lines(core.CompareObserver):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def progress(self, message: str) -> None:
        self.lines.append(message)


async def test_the_profile_diff_names_the_attention_kernels_between_eager_and_sdpa(tmp_path):
    spec = importlib.util.spec_from_file_location("make_test_models", ROOT / "scripts/make_test_models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    models.make_target(tmp_path / "model")
    engine = core.EngineConfig(
        kind="command", repo=str(_attention_repo(tmp_path / "repo")), python=sys.executable,
        model=str(tmp_path / "model"), port=free_port(), ready_timeout_s=300,
        command=["{python}", str(ROOT / "tests/profiled_server.py"), "--port", "{port}", "--model", "{model}"],
        profile_dir_env="PROFILED_SERVER_TRACE_DIR")
    request = CompareRequest(
        engine_name="profiled-gpu", engine=engine, workload_name="short",
        workload=core.WorkloadConfig(output_len=32, concurrency=1, requests=4, warmup_requests=2),
        head_ref="HEAD", base_ref=None, modes=["baseline"],
        settings=core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, modes=["baseline"], on_disturbed="keep",
                                    profile="always", profile_requests=2, profile_steps=32),
        host=local_host(tmp_path / "work"), profile_dir=str(tmp_path / "kept"))
    observer = Lines()
    result = await compare(request, observer)
    print("\n".join(observer.lines))
    assert result.status == core.RunStatus.DONE, result.reason
    profile = result.profiles["baseline"]
    assert profile["status"] == "done", profile
    print(profile["line"])
    for op in profile["ops"][:10]:
        print(f"  {op['name'][:90]} ({op['category']}): {op['base_ms']:.4f} -> {op['head_ms']:.4f} ms/step, "
              f"calls {op['base_calls']:.1f} -> {op['head_calls']:.1f}")
    assert profile["base"]["device"] == profile["head"]["device"] == "cuda"
    assert profile["base"]["steps"] and profile["head"]["steps"]
    assert ATTENTION in profile["categories"], profile["line"]
    named = [op for op in profile["ops"][:3] if op["category"] == ATTENTION]
    assert named and all(op["base_calls"] == 0 for op in named), profile["ops"][:3]  # SDPA's kernels are new
    if out := os.environ.get("SPECPERF_FIXTURE_OUT"):
        for role, label in (("base", "gpu-eager"), ("head", "gpu-sdpa")):
            for path in profile[role]["traces"]:
                shutil.copy(path, Path(out) / f"{label}.{Path(path).name}")
