"""Triage on field data that specperf once got wrong (issue 15 items 1 and 2): dependency pins
in every shape engines' dependency files use, and gate defaults read from the commit's own
source (env registries, argparse defaults, dataclass fields)."""

from __future__ import annotations

import asyncio

import pytest

import core
from core._triage import _Hunk, dependency_changes
from tests.conftest import local_host
from tests.test_triage import commit, engine, model_dir

WATCHED = core.TriageConfig().rules_for("sglang", "sglang").dependency_packages


def changes(removed: list[str], added: list[str]) -> list[str]:
    return dependency_changes([_Hunk(1, len(removed), 1, len(added), removed, added)], WATCHED)


@pytest.mark.parametrize(("removed", "added", "expected"), [
    # the input: a Dockerfile RUN line
    (["RUN pip install nvidia-nccl-cu12==2.26.2"], ["RUN pip install nvidia-nccl-cu12==2.27.3"],
     ["nvidia-nccl-cu12 ==2.26.2 -> ==2.27.3"]),
    # && chains and flags around the pin, a continued line
    (["    && python3 -m pip install --no-cache-dir nvidia-nccl-cu12==2.27.6 --force-reinstall --no-deps \\"],
     ["    && python3 -m pip install --no-cache-dir nvidia-nccl-cu12==2.28.3 --force-reinstall --no-deps \\"],
     ["nvidia-nccl-cu12 ==2.27.6 -> ==2.28.3"]),
    (["RUN uv pip install --system torch==2.8.0 triton==3.4.0 && rm -rf /root/.cache"],
     ["RUN uv pip install --system torch==2.9.1 triton==3.4.0 && rm -rf /root/.cache"],
     ["torch ==2.8.0 -> ==2.9.1"]),
    # a continuation line that holds only the pin
    (["      flashinfer-python==0.4.1 \\"], ["      flashinfer-python==0.5.3 \\"],
     ["flashinfer-python ==0.4.1 -> ==0.5.3"]),
    # ARG / ENV version variables
    (["ARG FLASHINFER_VERSION=0.4.1"], ["ARG FLASHINFER_VERSION=0.5.3"], ["flashinfer ==0.4.1 -> ==0.5.3"]),
    (["ENV SGL_KERNEL_VERSION 0.3.16"], ["ENV SGL_KERNEL_VERSION 0.3.17.post1"],
     ["sgl-kernel ==0.3.16 -> ==0.3.17.post1"]),
    (['export TORCH_VERSION="2.8.0"'], ['export TORCH_VERSION="2.9.1"'], ["torch ==2.8.0 -> ==2.9.1"]),
    # TOML arrays (several on a line), setup.py lists, markers and extras
    (['dependencies = ["requests", "torch==2.8.0", "sgl-kernel==0.3.16"]'],
     ['dependencies = ["requests", "torch==2.8.0", "sgl-kernel==0.3.17"]'], ["sgl-kernel ==0.3.16 -> ==0.3.17"]),
    (["    install_requires=['triton>=3.3,<3.4', 'numpy'],"], ["    install_requires=['triton>=3.4,<3.5', 'numpy'],"],
     ["triton <3.4,>=3.3 -> <3.5,>=3.4"]),
    (["torch==2.8.0; platform_machine == 'x86_64'  # CUDA build"],
     ["torch[opt-einsum]==2.9.1; platform_machine == 'x86_64'"], ["torch ==2.8.0 -> ==2.9.1"]),
    (['    "xformers @ https://example.org/xformers-0.0.31.whl",'],
     ['    "xformers @ https://example.org/xformers-0.0.32.whl",'],
     ["xformers @ https://example.org/xformers-0.0.31.whl -> @ https://example.org/xformers-0.0.32.whl"]),
    # a requirement removed; an unwatched package moved; a comment is no pin
    (["torch==2.8.0"], [], ["torch ==2.8.0 -> (removed)"]),
    (["RUN pip install numpy==1.26.4"], ["RUN pip install numpy==2.1.0"], []),
    (["# torch==2.8.0 was slow"], ["# torch==2.9.1 is faster"], []),
])
def test_pin_shapes(removed, added, expected):
    assert changes(removed, added) == expected


def test_nccl_pin_in_the_dockerfile_ranks_first(tmp_path):
    """The issue's smallest input in a repository: the Dockerfile pin outranks scheduler and
    attention commits (it fell to "other dependencies", score 20, before)."""
    repo = tmp_path / "sglang"
    dockerfile = "FROM nvidia/cuda:12.9.1-devel-ubuntu24.04\nRUN pip install nvidia-nccl-cu12=={nccl}\n"
    files = {"docker/Dockerfile": dockerfile.format(nccl="2.26.2"),
             "python/sglang/srt/managers/scheduler.py": "class Scheduler:\n    pass\n",
             "python/sglang/srt/layers/attention/flashinfer_backend.py": "class Backend:\n    pass\n"}
    shas = {"good": commit(repo, "good", "the last good commit", files)}
    shas["sched"] = commit(repo, "sched", "scheduler: a field", {
        "python/sglang/srt/managers/scheduler.py": "class Scheduler:\n    steps = 1\n"})
    shas["nccl"] = commit(repo, "nccl", "docker: bump NCCL", {"docker/Dockerfile": dockerfile.format(nccl="2.27.3")})
    shas["attn"] = commit(repo, "attn", "attention: a field", {
        "python/sglang/srt/layers/attention/flashinfer_backend.py": "class Backend:\n    tiles = 2\n"})
    model = model_dir(tmp_path / "models", "llama", "LlamaForCausalLM", "llama")
    report = asyncio.run(core.triage(local_host(tmp_path / "work"), str(repo), "good", "attn",
                                     engine(repo, model), core.TriageConfig().rules_for("sglang", "sglang")))
    first = report.entries[0]
    assert first.sha == shas["nccl"] and first.areas == ["dependency pins"]
    assert first.dependencies == ["nvidia-nccl-cu12 ==2.26.2 -> ==2.27.3"]
    assert "pins nvidia-nccl-cu12 ==2.26.2 -> ==2.27.3" in first.line()
