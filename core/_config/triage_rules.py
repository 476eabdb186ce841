"""Triage rule data: the areas, dependency files, gates and model-path rules that rank the
files a commit touched (read by :mod:`core._triage.rank`), the built-in rules of SGLang's and vLLM's
source layouts, and the ``[triage]`` section that overrides or extends them.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from core._strict_model import ConfigSection as _Strict


class TriageArea(_Strict):
    """A part of an engine's source tree: files matching ``paths`` (globs on repo-relative
    paths; ``*`` stays within a folder, ``**`` crosses folders) belong to area ``name`` with
    suspicion ``weight`` (0 to 100). The first area that matches a file wins."""

    name: str
    paths: list[str]
    weight: float = Field(ge=0, le=100)


class TriageDefault(_Strict):
    """Where a gate's default is declared, read at each commit from the file ``path``.

    With ``contains``: on by default when the file contains any of them (for example the
    ``--disable-piecewise-cuda-graph`` flag exists only once the feature is on by default).
    Without: the default the file declares for one of the gate's ``env`` names or markers
    (``inverse_markers`` count the other way), parsed with :mod:`ast`: an env registry
    (``SGLANG_ENABLE_SPEC_V2 = EnvBool(True)``, ``os.getenv("VLLM_X", "1")``), a dataclass
    field (``disable_custom_all_reduce: bool = False``) or an argparse flag
    (``action="store_true"``, ``default=...``)."""

    path: str
    contains: list[str] = Field(default_factory=list)


class TriageGate(_Strict):
    """A server flag or environment variable that turns a code path on.

    Code is under the gate when an enclosing ``if``/``while`` test (or an earlier early-exit
    guard) mentions one of ``markers`` (true when the gate is on: a function, attribute or
    name such as ``is_in_piecewise_cuda_graph``, or an environment variable's name) or of
    ``inverse_markers`` (true when it is off, such as ``disable_piecewise_cuda_graph``).
    The gate is on for a mode when the engine's ``args`` plus the mode's arguments hold one
    of ``enable_args`` after the last of ``disable_args``, or the engine's ``env`` sets one of
    ``env`` to a true value (1, true, yes, on); otherwise it has its default: ``default_on``,
    or, with ``default``, whatever the commit's own source says.
    """

    name: str
    markers: list[str] = Field(default_factory=list)
    inverse_markers: list[str] = Field(default_factory=list)
    enable_args: list[str] = Field(default_factory=list)
    disable_args: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    default_on: bool = False
    default: TriageDefault | None = None


class TriageModelRule(_Strict):
    """Model-specific code. With ``models``: files matching ``paths`` are used only by models
    whose architecture, ``model_type`` or name contains one of these words (``mamba``,
    ``qwen3_next``, ...). Without: each file is one model family's code, used when it names
    one of the configured model's architectures or is imported by a file that does."""

    paths: list[str]
    models: list[str] = Field(default_factory=list)


class TriageRules(_Strict):
    """Triage rules of one source layout (see core._triage.rank): areas, dependency files and the
    packages whose pins are called out first, gates, and model-specific paths."""

    areas: list[TriageArea] = Field(default_factory=list)
    dependency_files: list[str] = Field(default_factory=list)
    dependency_packages: list[str] = Field(default_factory=list)
    gates: list[TriageGate] = Field(default_factory=list)
    model_paths: list[TriageModelRule] = Field(default_factory=list)


_HYBRID_MODELS = ["mamba", "jamba", "bamba", "nemotron_h", "nemotronh", "falcon_h1", "qwen3_next",
                  "granitemoehybrid", "lfm2", "kimi_linear", "minimax"]
_PINNED = ["torch", "flashinfer-python", "flashinfer-cubin", "flashinfer", "sgl-kernel", "nvidia-nccl-cu12",
           "nvidia-nccl-cu13", "nccl", "triton", "cuda-python", "xformers"]
_DOCS = TriageArea(name="docs and tests", paths=["docs/**", "test/**", "tests/**", "benchmark/**", "examples/**",
                                                  "**/*.md", "**/*.rst", ".github/**"], weight=0)

SGLANG_RULES = TriageRules(
    areas=[
        TriageArea(name="distributed communication and all-reduce", weight=70, paths=[
            "python/sglang/srt/distributed/**", "**/parallel_state.py", "**/pynccl*.py", "**/custom_all_reduce*.py"]),
        TriageArea(name="CUDA-graph runners", weight=60, paths=[
            "**/*cuda_graph_runner*.py", "python/sglang/srt/compilation/**"]),
        TriageArea(name="speculative decoding", weight=55, paths=[
            "python/sglang/srt/speculative/**", "**/*eagle*.py", "**/*spec*.py"]),
        TriageArea(name="attention backends", weight=55, paths=["python/sglang/srt/layers/attention/**"]),
        TriageArea(name="kernels", weight=50, paths=[
            "sgl-kernel/**", "python/sglang/jit_kernel/**", "python/sglang/srt/layers/moe/**",
            "python/sglang/srt/layers/quantization/**", "**/*.cu", "**/*.cuh", "**/*.cpp"]),
        TriageArea(name="scheduler", weight=45, paths=[
            "python/sglang/srt/managers/scheduler*.py", "python/sglang/srt/managers/schedule_*.py",
            "python/sglang/srt/managers/tp_worker*.py", "python/sglang/srt/managers/overlap*.py"]),
        TriageArea(name="model runner", weight=45, paths=["python/sglang/srt/model_executor/**"]),
        TriageArea(name="server arguments", weight=35, paths=["python/sglang/srt/server_args.py",
                                                               "python/sglang/srt/environ.py"]),
        TriageArea(name="models", weight=30, paths=["python/sglang/srt/models/**"]),
        TriageArea(name="layers", weight=30, paths=["python/sglang/srt/layers/**", "python/sglang/srt/mem_cache/**"]),
        _DOCS,
        TriageArea(name="other engine code", weight=10, paths=["python/**"]),
    ],
    dependency_files=["python/pyproject*.toml", "pyproject.toml", "**/requirements*.txt", "sgl-kernel/pyproject*.toml",
                      "docker/Dockerfile*"],
    dependency_packages=_PINNED,
    gates=[
        TriageGate(name="piecewise CUDA graph",
                   markers=["is_in_piecewise_cuda_graph", "enable_piecewise_cuda_graph", "piecewise_cuda_graph_runner"],
                   inverse_markers=["disable_piecewise_cuda_graph"],
                   enable_args=["--enable-piecewise-cuda-graph"], disable_args=["--disable-piecewise-cuda-graph"],
                   default=TriageDefault(path="python/sglang/srt/server_args.py",
                                         contains=["--disable-piecewise-cuda-graph", "disable_piecewise_cuda_graph"])),
        TriageGate(name="spec v2 (overlap scheduler for speculative decoding)",
                   markers=["SGLANG_ENABLE_SPEC_V2", "enable_spec_v2"], env=["SGLANG_ENABLE_SPEC_V2"],
                   default=TriageDefault(path="python/sglang/srt/environ.py")),
        TriageGate(name="speculative decoding",
                   markers=["is_eagle", "is_eagle3", "is_standalone", "is_ngram", "speculative_algorithm"],
                   inverse_markers=["spec_algorithm.is_none", "speculative_algorithm.is_none"],
                   enable_args=["--speculative-algorithm"]),
    ],
    model_paths=[
        TriageModelRule(paths=["python/sglang/srt/layers/attention/mamba/**", "python/sglang/srt/layers/attention/fla/**",
                               "**/*mamba*.py", "python/sglang/srt/layers/attention/hybrid_linear_attn_backend.py"],
                        models=_HYBRID_MODELS),
        TriageModelRule(paths=["python/sglang/srt/models/*.py"]),
    ],
)

VLLM_RULES = TriageRules(
    areas=[
        TriageArea(name="distributed communication and all-reduce", weight=70, paths=[
            "vllm/distributed/**", "**/parallel_state.py", "**/pynccl*.py", "**/custom_all_reduce*.py"]),
        TriageArea(name="CUDA-graph runners", weight=60, paths=[
            "vllm/compilation/**", "**/*cudagraph*.py", "**/*cuda_graph*.py"]),
        TriageArea(name="speculative decoding", weight=55, paths=["vllm/v1/spec_decode/**", "vllm/spec_decode/**",
                                                                  "**/*eagle*.py"]),
        TriageArea(name="attention backends", weight=55, paths=["vllm/attention/**", "vllm/v1/attention/**"]),
        TriageArea(name="kernels", weight=50, paths=[
            "csrc/**", "vllm/_custom_ops.py", "vllm/model_executor/layers/fused_moe/**",
            "vllm/model_executor/layers/quantization/**", "**/*.cu", "**/*.cuh", "CMakeLists.txt"]),
        TriageArea(name="scheduler", weight=45, paths=["vllm/v1/core/**", "vllm/core/**"]),
        TriageArea(name="model runner", weight=45, paths=["vllm/v1/worker/**", "vllm/worker/**"]),
        TriageArea(name="engine arguments", weight=35, paths=["vllm/config/**", "vllm/engine/arg_utils.py",
                                                               "vllm/envs.py"]),
        TriageArea(name="models", weight=30, paths=["vllm/model_executor/models/**"]),
        TriageArea(name="layers", weight=30, paths=["vllm/model_executor/layers/**"]),
        _DOCS,
        TriageArea(name="other engine code", weight=10, paths=["vllm/**"]),
    ],
    dependency_files=["pyproject.toml", "requirements/*.txt", "requirements*.txt", "setup.py", "docker/Dockerfile*"],
    dependency_packages=_PINNED,
    gates=[
        TriageGate(name="CUDA graphs", inverse_markers=["enforce_eager"], disable_args=["--enforce-eager"],
                   default_on=True, default=TriageDefault(path="vllm/config/model.py")),
        TriageGate(name="custom all-reduce", markers=["use_custom_allreduce"],
                   inverse_markers=["disable_custom_all_reduce"], disable_args=["--disable-custom-all-reduce"],
                   default_on=True, default=TriageDefault(path="vllm/config/parallel.py")),
        TriageGate(name="speculative decoding", markers=["speculative_config", "use_spec_decode"],
                   enable_args=["--speculative-config", "--speculative_config"]),
    ],
    model_paths=[
        TriageModelRule(paths=["vllm/model_executor/layers/mamba/**", "**/*mamba*.py"], models=_HYBRID_MODELS),
        TriageModelRule(paths=["vllm/model_executor/models/*.py"]),
    ],
)


class TriageConfig(_Strict):
    """``[triage]``: rules per source layout. ``[triage.rules.NAME]`` applies to the engine
    called NAME, else to engines of kind NAME; built in are ``sglang`` and ``vllm`` (an
    engine of kind ``command`` gets both). A table for a built-in name replaces only the
    fields it sets (``[triage.rules.sglang] areas = [...]`` keeps the built-in gates)."""

    rules: dict[str, TriageRules] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _with_builtins(self) -> TriageConfig:
        merged = {"sglang": SGLANG_RULES, "vllm": VLLM_RULES}
        for name, rules in self.rules.items():
            base = merged.get(name)
            merged[name] = base.model_copy(update={f: getattr(rules, f) for f in rules.model_fields_set}) if base else rules
        object.__setattr__(self, "rules", merged)
        return self

    def rules_for(self, engine_name: str, kind: str) -> TriageRules:
        """The rules for engine ``engine_name`` of kind ``kind`` (see the class docstring)."""
        if engine_name in self.rules:
            return self.rules[engine_name]
        if kind in self.rules:
            return self.rules[kind]
        sglang, vllm = self.rules["sglang"], self.rules["vllm"]
        return TriageRules(**{f: _union(getattr(sglang, f), getattr(vllm, f)) for f in TriageRules.model_fields})


def _union(first: list, second: list) -> list:
    return first + [x for x in second if x not in first]
