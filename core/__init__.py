"""specperf's library: configuration, hosts (local and SSH), engines, the benchmark client,
one-trial measurement, compare, GPU hygiene, and the environment probe with its checks and
fingerprint diff.

No Slack and no database here; ``bot`` and ``storage`` build on this. Public names::

    load_config, parse_config, Config, EngineConfig, WorkloadConfig, HostConfig
    run_workload, Sample, RequestRecord, Quantiles
    adapter_for, EngineAdapter, EngineFigures
    measure, TrialResult
    parse_decode_line, DecodeLogLine
    compare, resolve_refs, CompareRequest, CompareResult, CompareObserver, Arm, CompareConfig,
    StorageConfig, verdict_for, arm_trial, figures, drift_lines, summarize, render_chart
    decide, Verdict, ArmTrial, speedup, speedup_change, Speedup, REGRESSION, IMPROVEMENT,
    NO_CHANGE, INCONCLUSIVE
    probe, probe_cheap, probe_async, probe_options, probe_script_text, parse_probe_output, ProbeError
    run_checks, Check, CheckStatus, worst
    diff_snapshots, Change, Category, flatten_snapshot, load_snapshot, SnapshotError
    GitError, check_ref_text, BuildError, first_parent_order, first_parent_range, resolve_commit, branch_head
    Series, SeriesPoint, env_changes, analyze_series, detect_change_points, SeriesAnalysis, ChangePoint,
    Drift, unpaired_shift, Shift, build_summary, render_trend_chart, Summary
    PeriodRuns, CompareFinding, BisectFinding, FailedRun, FailureGroup, failure_key
    Host, LocalHost, SshHost, EngineHandle, CommandResult, open_host, gpu_holders, clean_gpus, Holder,
    process_alive
    bisect, BisectRequest, BisectResult, BisectStep, BisectObserver
    triage, TriageReport, TriageEntry, FileTriage, TriageConfig, TriageRules, TriageArea, TriageGate,
    TriageModelRule, TriageDefault
    ConfigSection, expand_vars (for front ends' own config sections)
    SpecperfError, ConfigError, EngineError, EngineNotReadyError, EngineExitedError,
    InvalidSampleError, HostError, HostBusyError, CommandTimeout
"""

from core._bisect import BisectObserver, BisectRequest, BisectResult, BisectStep, bisect
from core._changepoints import ChangePoint, Drift, SeriesAnalysis
from core._changepoints import analyze as analyze_series
from core._changepoints import detect as detect_change_points
from core._checks import Check, CheckStatus, run_checks, worst
from core._compare import (
    Arm,
    CompareObserver,
    CompareRequest,
    CompareResult,
    arm_trial,
    compare,
    drift_lines,
    figures,
    resolve_refs,
    verdict_for,
)
from core._config import (
    CompareConfig,
    Config,
    EngineConfig,
    HostConfig,
    StorageConfig,
    WorkloadConfig,
    load_config,
    parse_config,
)
from core._config_base import ConfigSection, expand_vars
from core._engines import EngineAdapter, EngineFigures, adapter_for
from core._errors import (
    CommandTimeout,
    ConfigError,
    EngineError,
    EngineExitedError,
    EngineNotReadyError,
    HostBusyError,
    HostError,
    SpecperfError,
)
from core._fingerprint import (
    Category,
    Change,
    SnapshotError,
    diff_snapshots,
    flatten_snapshot,
    load_snapshot,
)
from core._git import (
    GitError,
    branch_head,
    check_ref_text,
    first_parent_order,
    first_parent_range,
    resolve_commit,
)
from core._host_agent import pid_alive as process_alive
from core._hosts import CommandResult, EngineHandle, Host, LocalHost, SshHost, open_host
from core._hygiene import Holder, clean_gpus, gpu_holders
from core._loadgen import (
    InvalidSampleError,
    Quantiles,
    RequestRecord,
    Sample,
    run_workload,
)
from core._measure import TrialResult, measure
from core._probe import (
    ProbeError,
    parse_probe_output,
    probe,
    probe_async,
    probe_cheap,
    probe_options,
    probe_script_text,
)
from core._report import render_chart, summarize
from core._series import Series, SeriesPoint, env_changes
from core._sglang_log import DecodeLogLine, parse_decode_line
from core._stats import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    ArmTrial,
    Shift,
    Speedup,
    Verdict,
    decide,
    speedup,
    speedup_change,
    unpaired_shift,
)
from core._findings import (
    BisectFinding,
    CompareFinding,
    FailedRun,
    FailureGroup,
    PeriodRuns,
    failure_key,
)
from core._summary import Summary, build_summary, render_trend_chart
from core._triage import FileTriage, TriageEntry, TriageReport, triage
from core._triage_rules import (
    TriageArea,
    TriageConfig,
    TriageDefault,
    TriageGate,
    TriageModelRule,
    TriageRules,
)
from core._worktree_engine import BuildError

__all__ = [
    "Config", "EngineConfig", "HostConfig", "ConfigSection", "expand_vars",
    "WorkloadConfig", "load_config", "parse_config",
    "EngineAdapter", "EngineFigures", "adapter_for",
    "ConfigError", "EngineError", "EngineExitedError", "EngineNotReadyError", "InvalidSampleError",
    "SpecperfError",
    "Quantiles", "RequestRecord", "Sample", "run_workload",
    "TrialResult", "measure",
    "DecodeLogLine", "parse_decode_line",
    "Arm", "CompareObserver", "CompareRequest", "CompareResult", "arm_trial", "compare", "resolve_refs",
    "verdict_for", "figures", "drift_lines", "CompareConfig", "StorageConfig", "summarize", "render_chart",
    "IMPROVEMENT", "INCONCLUSIVE", "NO_CHANGE", "REGRESSION", "ArmTrial", "Speedup", "Verdict", "decide",
    "speedup", "speedup_change",
    "GitError", "check_ref_text", "BuildError", "first_parent_order", "first_parent_range", "resolve_commit", "branch_head",
    "Series", "SeriesPoint", "env_changes", "analyze_series", "detect_change_points", "SeriesAnalysis",
    "ChangePoint", "Drift", "unpaired_shift", "Shift", "build_summary", "render_trend_chart",
    "Summary", "PeriodRuns", "CompareFinding", "BisectFinding", "FailedRun", "FailureGroup",
    "failure_key",
    "Host", "LocalHost", "SshHost", "EngineHandle", "CommandResult", "open_host", "gpu_holders", "clean_gpus",
    "Holder", "process_alive", "HostError", "HostBusyError", "CommandTimeout",
    "bisect", "BisectRequest", "BisectResult", "BisectStep", "BisectObserver",
    "triage", "TriageReport", "TriageEntry", "FileTriage", "TriageConfig", "TriageRules", "TriageArea", "TriageGate",
    "TriageModelRule", "TriageDefault",
    "ProbeError", "parse_probe_output", "probe", "probe_async", "probe_cheap", "probe_options", "probe_script_text",
    "Check", "CheckStatus", "run_checks", "worst",
    "Category", "Change", "SnapshotError", "diff_snapshots", "flatten_snapshot", "load_snapshot",
]
