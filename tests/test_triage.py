"""Triage on a generated repository shaped like SGLang's source tree: areas, a torch pin
called out first, all-reduce changes under the piecewise-CUDA-graph condition (inert or
live depending on the arguments and on the default at that commit), an environment-gated
spec-v2 change, and model-specific code the configured model does not use."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

import core
from core._config.triage_rules import TriageConfig
from core._triage.rank import triage as _triage
from core.testing import FakeHost
from tests.conftest import ROOT, specperf_in_process
from tests.fake_engine_repo import _git

PYPROJECT = '''[project]
name = "sglang"
dependencies = [
    "torch=={torch}",
    "flashinfer-python==0.4.1",
    "sgl-kernel==0.3.16",
    "requests",
]
'''

SERVER_ARGS_OLD = '''import argparse
from dataclasses import dataclass


@dataclass
class ServerArgs:
    enable_piecewise_cuda_graph: bool = False

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument("--enable-piecewise-cuda-graph", action="store_true")
'''

SERVER_ARGS_NEW = '''import argparse
from dataclasses import dataclass


@dataclass
class ServerArgs:
    disable_piecewise_cuda_graph: bool = False

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument("--disable-piecewise-cuda-graph", action="store_true")
        parser.add_argument("--enable-piecewise-cuda-graph", action="store_true", help="deprecated")
'''

PARALLEL_STATE = '''from sglang.srt.compilation.piecewise_context_manager import is_in_piecewise_cuda_graph


class GroupCoordinator:
    def all_reduce(self, input_):
        if self.world_size == 1:
            return input_
        if is_in_piecewise_cuda_graph():
            out = self._graph_all_reduce(input_)
            return out{extra_in_branch}
        return self._all_reduce_out_place(input_)

    def _graph_all_reduce(self, input_):
        if not is_in_piecewise_cuda_graph():
            raise RuntimeError("only inside a piecewise CUDA graph")
        out = input_.clone(){extra_after_guard}
        self.pynccl_comm.all_reduce(out)
        return out

    def _all_reduce_out_place(self, input_):
        return self.ca_comm.custom_all_reduce(input_)
'''

EAGLE_WORKER = '''from sglang.srt.environ import envs


class EAGLEWorker:
    def forward_batch(self, batch):{spec}
        if envs.SGLANG_ENABLE_SPEC_V2.get():
            return self._overlapped(batch)
        return self._plain(batch)
'''

SCHEDULER = '''class Scheduler:
    def get_next_batch_to_run(self):
        batch = self.running_batch{sched}
        return batch
'''

MAMBA = '''def causal_conv1d_update(x, state):
    state.copy_(x){mamba}
    return state
'''

LLAMA = '''class LlamaForCausalLM:
    pass


EntryClass = LlamaForCausalLM
'''

QWEN3_NEXT = '''from sglang.srt.models.qwen2_moe import Qwen2MoeMLP


class Qwen3NextForCausalLM:
    layers = 48{qwen}


EntryClass = Qwen3NextForCausalLM
'''

KNOBS = {"torch": "2.8.0", "server_args": SERVER_ARGS_OLD, "extra_in_branch": "", "extra_after_guard": "",
         "spec": "", "sched": "", "mamba": "", "qwen": "", "docs": ""}

# (tag, subject, changes): each commit changes one thing against the one before
COMMITS = [
    ("good", "the last good commit", {}),
    ("docs", "docs: fix a typo", {"docs": "typo fixed"}),
    ("ar-old", "all-reduce: sync the graph-safe path",
     {"extra_in_branch": "\n            self.pynccl_comm.synchronize()",
      "extra_after_guard": "\n        out = out.contiguous()"}),
    ("mamba", "mamba: fuse the conv state update", {"mamba": "\n    state.mul_(1.0)"}),
    ("torch", "deps: bump torch to 2.9.1", {"torch": "2.9.1"}),
    ("sched", "scheduler: recompute the batch each step", {"sched": "\n        batch = batch.copy()"}),
    ("default", "server_args: piecewise CUDA graph on by default", {"server_args": SERVER_ARGS_NEW}),
    ("ar-new", "all-reduce: chunk large tensors in the graph-safe path",
     {"extra_in_branch": "\n            self.pynccl_comm.synchronize()\n            out = out.chunk(2)[0]"}),
    ("specv2", "spec v2: drain before overlapping (a new gated block)",
     {"spec": "\n        if envs.SGLANG_ENABLE_SPEC_V2.get():\n            self._drain()"}),
    ("qwen", "qwen3-next: more layers", {"qwen": "\n    heads = 16"}),
]


def tree_files(knobs: dict) -> dict[str, str]:
    return {
        "python/pyproject.toml": PYPROJECT.format(torch=knobs["torch"]),
        "python/sglang/srt/server_args.py": knobs["server_args"],
        "python/sglang/srt/distributed/parallel_state.py": PARALLEL_STATE.format(**knobs),
        "python/sglang/srt/compilation/piecewise_context_manager.py":
            "_IN = False\n\n\ndef is_in_piecewise_cuda_graph():\n    return _IN\n",
        "python/sglang/srt/speculative/eagle_worker.py": EAGLE_WORKER.format(**knobs),
        "python/sglang/srt/managers/scheduler.py": SCHEDULER.format(**knobs),
        "python/sglang/srt/layers/attention/mamba/causal_conv1d.py": MAMBA.format(**knobs),
        "python/sglang/srt/models/llama.py": LLAMA,
        "python/sglang/srt/models/qwen3_next.py": QWEN3_NEXT.format(**knobs),
        "docs/README.md": f"# SGLang\n{knobs['docs']}\n",
    }


def commit(path: Path, tag: str, subject: str, files: dict[str, str]) -> str:
    """Write ``files`` (repo-relative path -> text) into ``path``, commit them, tag ``tag``; the SHA."""
    if not (path / ".git").exists():
        path.mkdir(parents=True, exist_ok=True)
        _git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", subject)
    _git(path, "tag", tag)
    return _git(path, "rev-parse", "HEAD")


def make_sglang_repo(path: Path) -> dict[str, str]:
    """A linear repository in SGLang's layout; returns {tag: SHA} for COMMITS."""
    knobs, shas = dict(KNOBS), {}
    for tag, subject, changes in COMMITS:
        knobs.update(changes)
        shas[tag] = commit(path, tag, subject, tree_files(knobs))
    return shas


@pytest.fixture(scope="module")
def sglang_repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("sglang") / "repo"
    return path, make_sglang_repo(path)


def model_dir(root: Path, name: str, architecture: str, model_type: str) -> str:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": model_type}))
    return str(folder)


EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "3"]


def engine(repo: Path, model: str, args=(), env=None) -> core.EngineConfig:
    return core.EngineConfig(kind="sglang", repo=str(repo), model=model, args=list(args), env=env or {},
                             modes={"baseline": [], "eagle3": EAGLE3})


def triage(repo: Path, *args) -> core.TriageReport:
    """core._triage.rank.triage on this machine's copy of ``repo``, through the fake host: git runs directly,
    without the local host's helper process per command (an interpreter start-up each, 54 in a
    triage of COMMITS); test_triage_command_prints_the_ranked_table goes through the local host."""
    return asyncio.run(_triage(FakeHost(repo.parent / "work", itl_ms=lambda launch: None), str(repo), *args))


def run_triage(repo, model, args=(), env=None) -> dict[str, core.TriageEntry]:
    rules = TriageConfig().rules_for("k2", "sglang")
    report = triage(repo[0], "good", "qwen", engine(repo[0], model, args, env), rules)
    return {tag: report.entry(sha) for tag, sha in repo[1].items() if tag != "good"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return model_dir(tmp_path_factory.mktemp("models"), "llama-8b", "LlamaForCausalLM", "llama")


@pytest.fixture(scope="module")
def llama_entries(sglang_repo, llama) -> dict[str, core.TriageEntry]:
    """The triage of the whole range for the Llama model, no arguments: read by several tests."""
    return run_triage(sglang_repo, llama)


def test_torch_bump_ranks_first_and_areas_follow_the_layout(llama_entries):
    entries = llama_entries
    assert entries["torch"].rank == 1
    assert entries["torch"].areas == ["dependency pins"]
    assert entries["torch"].dependencies == ["torch ==2.8.0 -> ==2.9.1"]
    assert "all-reduce" in entries["ar-new"].areas[0]
    assert entries["sched"].areas == ["scheduler"]
    assert entries["docs"].areas == ["docs and tests"] and entries["docs"].score == 0
    # live commits come before inert ones, the docs commit (nothing scored) last among the live
    order = sorted(entries.values(), key=lambda e: e.rank)
    assert [e.inert for e in order] == sorted(e.inert for e in order)
    assert entries["ar-new"].rank < entries["sched"].rank < entries["docs"].rank
    assert entries["torch"].subject == "deps: bump torch to 2.9.1" and entries["torch"].date[:4].isdigit()
    assert [f.path for f in entries["torch"].files] == ["python/pyproject.toml"]


def test_piecewise_all_reduce_follows_the_default_of_its_commit(llama_entries):
    """No flag given: before the default flipped the gated all-reduce change is inert, after it live."""
    entries = llama_entries
    old, new = entries["ar-old"], entries["ar-new"]
    assert old.inert, old.line()
    assert "piecewise CUDA graph" in old.note() and "off by default at this commit" in old.note()
    assert old.files[0].inert_hunks == 2  # the branch body and the lines after the early-exit guard
    assert not new.inert, new.line()
    assert "with piecewise CUDA graph, on by default at this commit" in new.note()
    assert new.score == 70
    flip = entries["default"]
    assert "turns piecewise CUDA graph on by default" in flip.note() and flip.score == 65


def test_disable_flag_makes_the_new_all_reduce_change_inert(sglang_repo, llama):
    entries = run_triage(sglang_repo, llama, args=["--tp", "8", "--disable-piecewise-cuda-graph"])
    assert entries["ar-new"].inert
    assert "--disable-piecewise-cuda-graph is in the arguments" in entries["ar-new"].note()
    assert entries["ar-new"].rank > entries["docs"].rank  # inert ranks after every live commit


def test_enable_flag_makes_the_old_all_reduce_change_live(sglang_repo, llama):
    entries = run_triage(sglang_repo, llama, args=["--enable-piecewise-cuda-graph"])
    assert not entries["ar-old"].inert
    assert "--enable-piecewise-cuda-graph is in the arguments" in entries["ar-old"].note()


def test_model_specific_code_is_inert_unless_the_model_uses_it(sglang_repo, llama_entries, tmp_path):
    entries = llama_entries
    assert entries["mamba"].inert and "not used by the configured model (LlamaForCausalLM)" in entries["mamba"].note()
    assert entries["qwen"].inert and "model file not used" in entries["qwen"].note()
    mamba = model_dir(tmp_path, "mamba-2.8b", "MambaForCausalLM", "mamba")
    assert not run_triage(sglang_repo, mamba)["mamba"].inert
    qwen = model_dir(tmp_path, "qwen3-next", "Qwen3NextForCausalLM", "qwen3_next")
    live = run_triage(sglang_repo, qwen)
    assert not live["qwen"].inert and live["mamba"].inert is False  # a hybrid model uses the Mamba layer


def test_spec_v2_change_needs_its_environment_variable(sglang_repo, llama, llama_entries):
    assert llama_entries["specv2"].inert
    live = run_triage(sglang_repo, llama, env={"SGLANG_ENABLE_SPEC_V2": "1"})["specv2"]
    assert not live.inert and "env SGLANG_ENABLE_SPEC_V2=1" in live.note()


MODEL_RUNNER = '''class GPUModelRunner:
    def capture_model(self):
        if self.model_config.enforce_eager:
            return
        self._capture_cudagraphs({sizes})

    def execute_model(self, batch):
        return self.model(batch){extra}
'''


def test_vllm_layout_enforce_eager_and_requirements(tmp_path, llama):
    path = tmp_path / "vllm"
    runner = "vllm/v1/worker/gpu_model_runner.py"
    shas = {"good": commit(path, "good", "good", {runner: MODEL_RUNNER.format(sizes="[1, 2]", extra=""),
                                                  "requirements/cuda.txt": "torch==2.8.0\nnumba==0.61\n"})}
    shas["graphs"] = commit(path, "graphs", "capture more sizes", {runner: MODEL_RUNNER.format(sizes="[1, 2, 4]", extra="")})
    shas["numba"] = commit(path, "numba", "bump numba", {"requirements/cuda.txt": "torch==2.8.0\nnumba==0.62\n"})
    shas["torch"] = commit(path, "torch", "bump torch", {"requirements/cuda.txt": "torch==2.9.0\nnumba==0.62\n"})
    shas["exec"] = commit(path, "exec", "execute: sync", {runner: MODEL_RUNNER.format(sizes="[1, 2, 4]", extra=".sync()")})
    rules = TriageConfig().rules_for("tiny", "vllm")
    for args, inert in (([], False), (["--enforce-eager"], True)):
        eng = core.EngineConfig(kind="vllm", repo=str(path), model=llama, args=args)
        report = triage(path, "good", "exec", eng, rules)
        assert report.entries[0].sha == shas["torch"] and report.entries[0].dependencies == ["torch ==2.8.0 -> ==2.9.0"]
        graphs = report.entry(shas["graphs"])
        assert graphs.areas == ["model runner"] and graphs.inert is inert, graphs.line()
        assert not report.entry(shas["exec"]).inert
        numba = report.entry(shas["numba"])
        assert numba.dependencies == [] and numba.areas == ["other dependencies"]  # not a watched pin
    assert "--enforce-eager is in the arguments" in graphs.note()


def test_triage_rules_are_strict_config_that_extends_the_defaults():
    config = core.parse_config('[triage.rules.sglang]\nareas = [{ name = "ours", paths = ["src/**"], weight = 90 }]\n'
                               '[triage.rules.k2]\ndependency_packages = ["torch"]\n')
    sglang = config.triage.rules_for("any", "sglang")
    assert [a.name for a in sglang.areas] == ["ours"] and sglang.gates == TriageConfig().rules["sglang"].gates
    assert config.triage.rules_for("k2", "sglang").dependency_packages == ["torch"]
    assert len(config.triage.rules_for("x", "command").areas) > len(sglang.areas)  # both layouts
    for bad in ('[triage]\nrule = {}\n', '[triage.rules.sglang]\nareas = [{ name = "a", paths = [], weight = 101 }]\n',
                '[triage.rules.sglang.gates]\n'):
        with pytest.raises(core.ConfigError):
            core.parse_config(bad)


def test_bad_ranges_are_one_line_errors(sglang_repo, llama):
    path, _ = sglang_repo
    rules = TriageConfig().rules_for("k2", "sglang")
    eng = engine(path, llama)
    for good, bad, message in [("good", "no-such-ref", "names no commit"), ("qwen", "good", "is not an ancestor"),
                               ("torch", "torch", "range is empty"), ("good; rm -rf /", "qwen", "is not a git ref")]:
        with pytest.raises(core.GitError, match=message):
            triage(path, good, bad, eng, rules)


def test_good_merged_from_a_side_branch_is_refused(tmp_path, llama):
    path = tmp_path / "merged"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    for name in ("one", "two"):
        (path / name).write_text(name)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", name)
    _git(path, "checkout", "-q", "-b", "side", "HEAD~1")
    (path / "side").write_text("side")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "side")
    _git(path, "checkout", "-q", "main")
    _git(path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    with pytest.raises(core.GitError, match="not on the first-parent line"):
        triage(path, "side", "main", engine(path, llama), TriageConfig().rules_for("k2", "sglang"))
    report = triage(path, "main~1", "main", engine(path, llama), TriageConfig().rules_for("k2", "sglang"))
    assert [e.subject for e in report.entries] == ["merge side"]  # the merge, against its first parent


def test_triage_command_prints_the_ranked_table(sglang_repo, llama, tmp_path):
    path, shas = sglang_repo
    config = tmp_path / "specperf.toml"
    config.write_text(f'[engines.k2]\nkind = "sglang"\nrepo = "{path}"\nmodel = "{llama}"\n'
                      'args = ["--disable-piecewise-cuda-graph"]\n'
                      '[engines.k2.modes]\nbaseline = []\n')
    out = specperf_in_process(["--config", config, "triage", "good", "qwen", "--json", tmp_path / "t.json"],
                              cwd=ROOT, env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    assert "deps: bump torch to 2.9.1" in out.stdout and "likely inert" in out.stdout
    report = json.loads((tmp_path / "t.json").read_text())
    assert report["entries"][0]["sha"] == shas["torch"]
    assert {e["sha"] for e in report["entries"] if e["inert"]} == {shas["ar-new"], shas["ar-old"], shas["mamba"],
                                                                  shas["specv2"], shas["qwen"]}
    bad = specperf_in_process(["--config", config, "triage", "qwen", "good"], cwd=ROOT)
    assert bad.returncode == 2 and "is not an ancestor" in bad.stderr


def test_the_ops_a_profile_names_rank_commits_in_their_area_up(sglang_repo, llama, llama_entries):
    """Issue 27 item 4: a profile round that names communication ops lifts the live all-reduce
    commit above the scheduler's and says why; the inert one stays inert; without categories
    nothing moves."""
    rules = TriageConfig().rules_for("k2", "sglang")
    report = triage(sglang_repo[0], "good", "qwen", engine(sglang_repo[0], llama), rules, None, ["communication"])
    entries = {tag: report.entry(sha) for tag, sha in sglang_repo[1].items() if tag != "good"}
    new, old = entries["ar-new"], entries["ar-old"]
    assert new.profiled == ["communication"] and new.score == llama_entries["ar-new"].score + 25
    assert "the profile names communication ops" in new.note() and new.to_dict()["profiled"] == ["communication"]
    assert new.rank <= llama_entries["ar-new"].rank and new.rank < entries["default"].rank
    assert old.inert and old.profiled == [] and old.score == 0
    assert entries["sched"].profiled == [] and entries["sched"].score == llama_entries["sched"].score
    assert all(e.profiled == [] for e in llama_entries.values())
