"""specperf's library: does a commit make an LLM serving engine slower, and why.

No Slack and no database here (``storage`` and ``bot`` build on this; ``core`` imports
neither). A compare from Python::

    import asyncio, core

    config = core.load_config("specperf.toml")
    result = asyncio.run(core.compare_commit(config, "slow-step", modes=["baseline"]))
    for mode, verdict in result.verdicts.items():
        print(mode, verdict.verdict, verdict.change_pct)

The curated public surface is ``__all__`` (each name's ``__module__`` is ``core``):

- entry points taking a config and names: :func:`compare_commit`, :func:`check_host`,
  :func:`triage_range`, and the mode rule :func:`engine_modes`;
- configuration: :class:`Config`, :func:`load_config`, :func:`parse_config` and its sections;
- results: :class:`CompareResult` (:class:`RunStatus`), :class:`Verdict`
  (:class:`VerdictKind`), :class:`HostReport` (:class:`Check`, :class:`CheckStatus`),
  :class:`TriageReport`; :class:`CompareObserver` to follow a compare;
- errors: :class:`SpecperfError` and its subclasses.

The other names imported here are the building blocks ``storage`` and ``bot`` compose (the
compare and bisect requests, hosts, the probe, statistics, history series, the summary): they
are importable, documented where they are defined, and not part of the promise above. Inside,
``core/_hosts/`` is the host package (base, local, SSH, Slurm); every other module is one concern.
"""

from core import _changepoints, _host_agent
from core._api import (
    HostReport,
    check_host,
    compare_commit,
    data_dir,
    engine_modes,
    triage_range,
)
from core._api import (
    lock_owner as lock_owner,
)
from core._calibrate import Plan as Plan
from core._calibrate import pair_spread_pct as pair_spread_pct
from core._calibrate import plan as plan
from core._changepoints import ChangePoint as ChangePoint
from core._changepoints import Drift as Drift
from core._changepoints import SeriesAnalysis as SeriesAnalysis
from core._checks import Check, CheckStatus
from core._checks import run_checks as run_checks
from core._checks import worst as worst
from core._commit_bisect import (
    BisectObserver as BisectObserver,
)
from core._commit_bisect import (
    BisectRequest as BisectRequest,
)
from core._commit_bisect import (
    BisectResult as BisectResult,
)
from core._commit_bisect import (
    BisectStatus as BisectStatus,
)
from core._commit_bisect import (
    BisectStep as BisectStep,
)
from core._commit_bisect import (
    CompareRunner as CompareRunner,
)
from core._commit_bisect import (
    bisect as bisect,
)
from core._compare import (
    Arm as Arm,
)
from core._compare import (
    CompareObserver,
    CompareResult,
    RunStatus,
)
from core._compare import (
    CompareRequest as CompareRequest,
)
from core._compare import (
    arm_differences as arm_differences,
)
from core._compare import (
    arm_trial as arm_trial,
)
from core._compare import (
    compare as compare,
)
from core._compare import (
    figures as figures,
)
from core._compare import judge_compare as judge_compare
from core._compare import kept as kept
from core._compare import (
    resolve_refs as resolve_refs,
)
from core._compare import (
    verdict_for as verdict_for,
)
from core._config import (
    CompareConfig,
    Config,
    EngineConfig,
    HostConfig,
    WorkloadConfig,
    load_config,
    parse_config,
)
from core._config import DisturbanceConfig as DisturbanceConfig
from core._config import SlurmConfig as SlurmConfig
from core._config import (
    StorageConfig as StorageConfig,
)
from core._config_base import ConfigSection as ConfigSection
from core._config_base import expand_vars as expand_vars
from core._disturbance import Culprit as Culprit
from core._disturbance import Disturbance as Disturbance
from core._disturbance import culprit_lines as culprit_lines
from core._disturbance import judge_trials as judge_trials
from core._disturbance import judge_window as judge_window
from core._engines import NOT_DERIVED as NOT_DERIVED
from core._engines import EngineAdapter as EngineAdapter
from core._engines import EngineFigures as EngineFigures
from core._engines import adapter_for as adapter_for
from core._errors import (
    CommandTimeout as CommandTimeout,
)
from core._errors import (
    ConfigError,
    EngineError,
    HostBusyError,
    HostError,
    SpecperfError,
)
from core._errors import (
    EngineExitedError as EngineExitedError,
)
from core._errors import (
    EngineNotReadyError as EngineNotReadyError,
)
from core._findings import BisectFinding as BisectFinding
from core._findings import CompareFinding as CompareFinding
from core._findings import FailedRun as FailedRun
from core._findings import FailureGroup as FailureGroup
from core._findings import PeriodRuns as PeriodRuns
from core._findings import failure_key as failure_key
from core._fingerprint import (
    Category as Category,
)
from core._fingerprint import (
    Change as Change,
)
from core._fingerprint import (
    SnapshotError as SnapshotError,
)
from core._fingerprint import (
    diff_snapshots as diff_snapshots,
)
from core._fingerprint import (
    flatten_snapshot as flatten_snapshot,
)
from core._fingerprint import (
    load_snapshot as load_snapshot,
)
from core._fingerprint import performance_env as performance_env
from core._git import (
    GitError,
)
from core._git import (
    branch_head as branch_head,
)
from core._git import (
    check_ref_text as check_ref_text,
)
from core._git import (
    first_parent_order as first_parent_order,
)
from core._git import (
    first_parent_range as first_parent_range,
)
from core._git import (
    resolve_commit as resolve_commit,
)
from core._history_check import HistoryCheck as HistoryCheck
from core._history_check import PastLaunches as PastLaunches
from core._history_check import check_history as check_history
from core._history_check import setup_of as setup_of
from core._history_site import INDEX_PAGE as INDEX_PAGE
from core._history_site import RunPage as RunPage
from core._history_site import build_history_site as build_history_site
from core._history_site import series_page as series_page
from core._hosts import CommandResult as CommandResult
from core._hosts import EngineHandle as EngineHandle
from core._hosts import Host as Host
from core._hosts import LocalHost as LocalHost
from core._hosts import SlurmHost as SlurmHost
from core._hosts import SlurmJob as SlurmJob
from core._hosts import SshHost as SshHost
from core._hosts import open_host as open_host
from core._hygiene import Holder as Holder
from core._hygiene import clean_gpus as clean_gpus
from core._hygiene import gpu_holders as gpu_holders
from core._loadgen import (
    InvalidSampleError,
)
from core._loadgen import (
    Quantiles as Quantiles,
)
from core._loadgen import (
    RequestRecord as RequestRecord,
)
from core._loadgen import (
    Sample as Sample,
)
from core._loadgen import (
    run_workload as run_workload,
)
from core._measure import TrialResult as TrialResult
from core._measure import measure as measure
from core._probe import (
    ProbeError,
)
from core._probe import (
    parse_probe_output as parse_probe_output,
)
from core._probe import (
    probe as probe,
)
from core._probe import (
    probe_async as probe_async,
)
from core._probe import (
    probe_cheap as probe_cheap,
)
from core._probe import (
    probe_options as probe_options,
)
from core._probe import (
    probe_script_text as probe_script_text,
)
from core._redact import REDACTED as REDACTED
from core._redact import redact as redact
from core._redact import secret_name as secret_name
from core._report import CompareReport
from core._report import launch_rows as launch_rows
from core._report import render_chart as render_chart
from core._report import summarize as summarize
from core._series import Series as Series
from core._series import SeriesPoint as SeriesPoint
from core._series import env_changes as env_changes
from core._sglang_log import DecodeLogLine as DecodeLogLine
from core._sglang_log import parse_decode_line as parse_decode_line
from core._stats import (
    IMPROVEMENT as IMPROVEMENT,
)
from core._stats import (
    INCONCLUSIVE as INCONCLUSIVE,
)
from core._stats import (
    NO_CHANGE as NO_CHANGE,
)
from core._stats import (
    REGRESSION as REGRESSION,
)
from core._stats import (
    ArmTrial as ArmTrial,
)
from core._stats import (
    Shift as Shift,
)
from core._stats import (
    Speedup as Speedup,
)
from core._stats import (
    Verdict,
    VerdictKind,
)
from core._stats import (
    decide as decide,
)
from core._stats import (
    speedup as speedup,
)
from core._stats import (
    speedup_change as speedup_change,
)
from core._stats import (
    unpaired_shift as unpaired_shift,
)
from core._summary import RegressionSummary
from core._summary import build_summary as build_summary
from core._summary import render_trend_chart as render_trend_chart
from core._triage import FileTriage as FileTriage
from core._triage import TriageEntry, TriageReport
from core._triage import triage as triage
from core._triage_rules import (
    TriageArea as TriageArea,
)
from core._triage_rules import (
    TriageConfig as TriageConfig,
)
from core._triage_rules import (
    TriageDefault as TriageDefault,
)
from core._triage_rules import (
    TriageGate as TriageGate,
)
from core._triage_rules import (
    TriageModelRule as TriageModelRule,
)
from core._triage_rules import (
    TriageRules as TriageRules,
)
from core._window import WindowMonitor as WindowMonitor
from core._worktree_engine import BuildError as BuildError

analyze_series, detect_change_points = _changepoints.analyze, _changepoints.detect
process_alive = _host_agent.pid_alive  # whether a local pid exists and is not a zombie

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
