"""specperf's library: configuration, engines, the benchmark client and one-trial measurement.

No Slack and no database here; ``bot`` and ``storage`` build on this. Public names::

    load_config, parse_config, Config, EngineConfig, WorkloadConfig, HostConfig
    run_workload, Sample, RequestRecord, Quantiles
    adapter_for, EngineAdapter, EngineFigures
    measure, TrialResult
    parse_decode_line, DecodeLogLine
    SpecperfError, ConfigError, EngineError, EngineNotReadyError, EngineExitedError,
    InvalidSampleError
"""

from core._config import Config, EngineConfig, HostConfig, WorkloadConfig, load_config, parse_config
from core._engines import EngineAdapter, EngineFigures, adapter_for
from core._errors import (
    ConfigError,
    EngineError,
    EngineExitedError,
    EngineNotReadyError,
    InvalidSampleError,
    SpecperfError,
)
from core._loadgen import Quantiles, RequestRecord, Sample, run_workload
from core._measure import TrialResult, measure
from core._sglang_log import DecodeLogLine, parse_decode_line

__all__ = [
    "Config", "EngineConfig", "HostConfig", "WorkloadConfig", "load_config", "parse_config",
    "EngineAdapter", "EngineFigures", "adapter_for",
    "ConfigError", "EngineError", "EngineExitedError", "EngineNotReadyError", "InvalidSampleError",
    "SpecperfError",
    "Quantiles", "RequestRecord", "Sample", "run_workload",
    "TrialResult", "measure",
    "DecodeLogLine", "parse_decode_line",
]
