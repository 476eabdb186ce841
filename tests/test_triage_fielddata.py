"""Triage on field data that specperf once got wrong (issue 15 items 1 and 2): dependency pins
in every shape engines' dependency files use, and gate defaults read from the commit's own
source (env registries, argparse defaults, dataclass fields)."""

from __future__ import annotations

import pytest

import core
from core._config.triage_rules import TriageConfig, TriageDefault, TriageGate
from core._triage.diff import Hunk as _Hunk
from core._triage.gates import declared_default, gate_state
from core._triage.pins import dependency_changes
from tests.test_triage import commit, engine, model_dir, triage

WATCHED = TriageConfig().rules_for("sglang", "sglang").dependency_packages


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
    report = triage(repo, "good", "attn", engine(repo, model), TriageConfig().rules_for("sglang", "sglang"))
    first = report.entries[0]
    assert first.sha == shas["nccl"] and first.areas == ["dependency pins"]
    assert first.dependencies == ["nvidia-nccl-cu12 ==2.26.2 -> ==2.27.3"]
    assert "pins nvidia-nccl-cu12 ==2.26.2 -> ==2.27.3" in first.line()


ENVIRON = "from sglang.srt.environ_types import EnvBool\n\n\nclass Envs:\n    SGLANG_ENABLE_SPEC_V2 = EnvBool({v2})\n\n\nenvs = Envs()\n"
EAGLE = '''from sglang.srt.environ import envs


class EAGLEWorker:
    def forward_batch(self, batch):
        if envs.SGLANG_ENABLE_SPEC_V2.get():
            return self._overlapped(batch{extra})
        return self._plain(batch)
'''


def sglang_triage(tmp_path, steps: list[tuple[str, dict[str, str]]], env=None) -> dict[str, core.TriageEntry]:
    repo = tmp_path / "sglang"
    shas = {tag: commit(repo, tag, tag, files) for tag, files in steps}
    model = model_dir(tmp_path / "models", "llama", "LlamaForCausalLM", "llama")
    report = triage(repo, steps[0][0], steps[-1][0], engine(repo, model, env=env),
                    TriageConfig().rules_for("sglang", "sglang"))
    return {tag: report.entry(sha) for tag, sha in shas.items() if tag != steps[0][0]}


def test_gate_on_by_default_in_the_commits_env_registry_is_live(tmp_path):
    """The issue's input: environ.py has EnvBool(True) at both commits; the mode sets no env."""
    entries = sglang_triage(tmp_path, [
        ("good", {"python/sglang/srt/environ.py": ENVIRON.format(v2="True"),
                  "python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra="")}),
        ("v2", {"python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra=", chunked=True")}),
    ])
    entry = entries["v2"]
    assert not entry.inert and entry.score > 0
    assert "on by default at this commit (environ.py: SGLANG_ENABLE_SPEC_V2 = True)" in entry.note()
    # the same registry with the default off: inert, and the env of the engine turns it back on
    off = sglang_triage(tmp_path / "off", [
        ("good", {"python/sglang/srt/environ.py": ENVIRON.format(v2="default=False"),
                  "python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra="")}),
        ("v2", {"python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra=", chunked=True")}),
    ])["v2"]
    assert off.inert and "off by default at this commit (environ.py: SGLANG_ENABLE_SPEC_V2 = False)" in off.note()


def test_a_commit_that_flips_a_declared_default_is_named(tmp_path):
    entries = sglang_triage(tmp_path, [
        ("good", {"python/sglang/srt/environ.py": ENVIRON.format(v2="False"),
                  "python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra="")}),
        ("flip", {"python/sglang/srt/environ.py": ENVIRON.format(v2="True")}),
        ("after", {"python/sglang/srt/speculative/eagle_worker.py": EAGLE.format(extra=", chunked=True")}),
    ])
    flip = entries["flip"]
    assert "turns spec v2 (overlap scheduler for speculative decoding) on by default" in flip.note()
    assert flip.rank == 1 and flip.score >= 65
    assert not entries["after"].inert


@pytest.mark.parametrize(("source", "on", "what"), [
    # vLLM's envs.py: a lambda over os.getenv with a string default
    ('environment_variables = {\n    "VLLM_USE_CUSTOM_AR": lambda: bool(int(os.getenv("VLLM_USE_CUSTOM_AR", "1"))),\n}\n',
     True, "VLLM_USE_CUSTOM_AR = True"),
    # a dataclass field named by an inverse marker: disable_... = False means on
    ("@dataclass\nclass ParallelConfig:\n    disable_custom_all_reduce: bool = False\n", True,
     "disable_custom_all_reduce = False"),
    ("@dataclass\nclass ParallelConfig:\n    disable_custom_all_reduce: bool = True\n", False,
     "disable_custom_all_reduce = True"),
    # argparse: store_true means off by default, an explicit default wins
    ('parser.add_argument("--use-custom-allreduce", action="store_true")\n', False, "use_custom_allreduce = False"),
    ('parser.add_argument("--use-custom-allreduce", action="store_true", default=True)\n', True,
     "use_custom_allreduce = True"),
    ('get_bool_env_var("VLLM_USE_CUSTOM_AR", "false")\n', False, "VLLM_USE_CUSTOM_AR = False"),
])
def test_declared_default_shapes(source, on, what):
    gate = TriageGate(name="custom all-reduce", markers=["use_custom_allreduce"], env=["VLLM_USE_CUSTOM_AR"],
                           inverse_markers=["disable_custom_all_reduce"],
                           default=TriageDefault(path="vllm/config/parallel.py"))
    assert declared_default(gate, source) == (on, what)
    state = gate_state(gate, [], {}, source)
    assert state.on is on and f"by default at this commit (parallel.py: {what})" in state.why
    assert declared_default(gate, "x = 1\n") is None and gate_state(gate, [], {}, "x = 1\n").on is False
