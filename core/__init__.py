"""specperf's library: does a commit make an LLM serving engine slower, and why.

No Slack and no database here (``storage`` and ``bot`` build on this; ``core`` imports
neither). A compare from Python::

    import asyncio, core

    config = core.load_config("specperf.toml")
    result = asyncio.run(core.compare_commit(config, "slow-step", modes=["baseline"]))
    for mode, verdict in result.verdicts.items():
        print(mode, verdict.verdict, verdict.change_pct)

The public surface is ``__all__``, and nothing else is imported here (each name's
``__module__`` is ``core``):

- entry points taking a config and names: :func:`compare_commit`, :func:`check_host`,
  :func:`triage_range`, and the mode rule :func:`engine_modes`;
- configuration: :class:`Config`, :func:`load_config`, :func:`parse_config` and its sections;
- results: :class:`CompareResult` (:class:`RunStatus`), :class:`Verdict`
  (:class:`VerdictKind`), :class:`CompareReport`, :class:`HostReport` (:class:`Check`,
  :class:`CheckStatus`), :class:`TriageReport`, :class:`RegressionSummary`;
  :class:`CompareObserver` to follow a compare;
- errors: :class:`SpecperfError` and its subclasses.

Inside, one package per concern (ARCHITECTURE.md draws them): ``_hosts`` (where engines run:
local, SSH, Slurm, and the helper sent to each host), ``_env`` (what a host is: the probe,
checks, fingerprint, GPU hygiene, the window monitor and its judgement), ``_measure`` (one
trial: engines, workloads, the benchmark client), ``_experiments`` (compare, calibrate,
bisect, the statistics and the compare's report), ``_history`` (series, change points,
findings, the summary and the history pages) and ``_triage`` (ranking a range's commits
without GPU time); the configuration, errors, git and redaction at the top. ``storage``,
``bot``, tests and benchmarks import those building blocks from their modules; they are
documented where they are defined and not part of the promise above.
"""

from core._api import HostReport, check_host, compare_commit, data_dir, engine_modes, triage_range
from core._config import CompareConfig, Config, EngineConfig, HostConfig, WorkloadConfig, load_config, parse_config
from core._env.checks import Check, CheckStatus
from core._env.probe import ProbeError
from core._errors import ConfigError, EngineError, HostBusyError, HostError, SpecperfError
from core._experiments.compare import CompareObserver, CompareResult, RunStatus
from core._experiments.report import CompareReport
from core._experiments.stats import Verdict, VerdictKind
from core._git import GitError
from core._history.summary import RegressionSummary
from core._measure.client import InvalidSampleError
from core._triage.rank import TriageEntry, TriageReport

__all__ = [
    "Check",
    "CheckStatus",
    "CompareConfig",
    "CompareObserver",
    "CompareReport",
    "CompareResult",
    "Config",
    "ConfigError",
    "EngineConfig",
    "EngineError",
    "GitError",
    "HostBusyError",
    "HostConfig",
    "HostError",
    "HostReport",
    "InvalidSampleError",
    "ProbeError",
    "RegressionSummary",
    "RunStatus",
    "SpecperfError",
    "TriageEntry",
    "TriageReport",
    "Verdict",
    "VerdictKind",
    "WorkloadConfig",
    "check_host",
    "compare_commit",
    "data_dir",
    "engine_modes",
    "load_config",
    "parse_config",
    "triage_range",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = "core"
del _name, _obj
