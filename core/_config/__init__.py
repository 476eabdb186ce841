"""The ``specperf.toml`` configuration: hosts, engines (with their modes) and workloads.

The file is TOML (parsed with :mod:`tomllib`) validated by pydantic models that forbid unknown
keys, so a typo is an error, not a silently ignored setting. Strings in ``python``, ``model``, ``repo``,
``args``, mode arguments and ``env`` may reference environment variables as ``${NAME}``;
``python``, ``model`` and ``repo`` may also start with ``~``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core._config.triage_rules import TriageConfig
from core._errors import ConfigError
from core._prompts import BUILTIN_PROMPT_SETS, UNCATEGORISED, check_prompt_set
from core._redact import REDACTED, redact, secret_name
from core._strict_model import ConfigSection as _Strict
from core._strict_model import expand_vars as _expand


class SlurmConfig(_Strict):
    """How a Slurm host asks for a node (``[hosts.<name>.slurm]``; each is the ``sbatch``
    option of that name). ``partition``, ``gres`` (``gpu:8``), ``exclusive`` (the whole node,
    default), ``time_limit`` (Slurm's ``[D-]HH:MM:SS``; a compare that outlives it is ended by
    Slurm and marked with Slurm's reason), ``account``, ``qos``, ``constraint``, ``nodelist``,
    and ``sbatch_args``: further options, word by word. ``python``: the interpreter on the
    nodes that has specperf installed (default: the one running specperf, which must then be
    on the shared file system; required when the host's Slurm commands go over ``ssh`` to a
    login node, where this machine's interpreter means nothing). ``poll_s``: how often the submitter reads the job's state and
    its progress in the database. ``bisect_parallel``: how many compares a bisect runs side by
    side, each a job on a node of its own (k of the k-ary search, core._experiments.bisection);
    default: the partition's node count, at most 4 (each doubling of k costs more node-hours
    than it saves rounds: k = 3 halves the rounds for about 1.5 times the compares, k = 7 a
    third of them for about 2.3 times), 2 where sinfo does not answer."""

    partition: str | None = None
    gres: str | None = None
    exclusive: bool = True
    time_limit: str = Field(default="02:00:00", pattern=r"^(\d+-)?\d+(:\d+){0,2}$")
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodelist: str | None = None
    sbatch_args: list[str] = Field(default_factory=list)
    python: str | None = None
    poll_s: float = Field(default=2.0, gt=0)
    bisect_parallel: int | None = Field(default=None, ge=1)

    @field_validator("python", mode="before")
    @classmethod
    def _expand_python(cls, value):
        return _expand(value) if isinstance(value, str) else value

    def sbatch_options(self) -> list[str]:
        """These settings as ``sbatch`` options (``--partition=gpu``, ``--exclusive``, ...)."""
        named = {"partition": self.partition, "gres": self.gres, "time": self.time_limit, "account": self.account,
                 "qos": self.qos, "constraint": self.constraint, "nodelist": self.nodelist}
        return ([f"--{k}={v}" for k, v in named.items() if v] + (["--exclusive"] if self.exclusive else [])
                + list(self.sbatch_args))


def slurm_python_missing(name: str, ssh: str) -> str:
    """The error for a Slurm host reached over SSH without ``[hosts.<name>.slurm] python``."""
    return (f"hosts.{name}.slurm.python is required: hosts.{name} runs Slurm's commands over ssh on "
            f"{ssh}, so this machine's interpreter means nothing on the cluster; set it to the "
            "interpreter on the nodes that has specperf installed")


def client_python_missing(name: str) -> str:
    """The error for ``[hosts.<name>] client = "host"`` without ``client_python``."""
    return (f'hosts.{name}.client_python is required with client = "host": the path of an interpreter on '
            f'host {name} that has specperf installed (the same version as here), for example '
            'client_python = "/opt/specperf/bin/python"')


class HostConfig(_Strict):
    """A machine that runs engines. With no ``ssh`` it is the local machine; with ``kind =
    "slurm"`` a partition of a Slurm cluster (:class:`SlurmConfig` in ``[hosts.<name>.slurm]``):
    each compare is one Slurm job holding one node, whose work directory is ``workdir``
    (required: a folder the nodes and the submitting side share, for worktrees, logs and job
    files). Slurm's commands run on this machine, or, with ``ssh`` (and the other SSH keys
    below), on a login node reached over SSH: then every Slurm command, the engine's git
    refs and every file the submitter touches under ``workdir`` (job specs, job output) go
    to the login node, whose ``python`` runs specperf's helper, and ``[slurm] python`` is
    required. Inside the job, on the node, everything runs locally (no SSH from the node).

    ``ssh``: ``user@host`` (or ``host``), reached on ``port``; host keys are checked against
    ``known_hosts`` (default ``~/.ssh/known_hosts``), never skipped; authentication with
    ``identity_file`` or the SSH agent. ``jump``: a jump host (``user@bastion``), as ssh's
    ``-J``. ``exec_prefix``: words put before every command run on the host, for a container
    (``["pct", "exec", "129", "--"]``, ``["docker", "exec", "sglang"]``). ``workdir``: where
    worktrees, per-commit builds, engine logs and the host lock live (absolute; default: the
    data directory locally, ``/var/tmp/specperf`` over SSH). ``python``: the host's
    interpreter for specperf's small helper (standard library only). ``engine_address``:
    where the engine's port is reached from the host (a container's own address when the
    prefix enters another network namespace). ``device_paths``: globs of device files whose
    holders count as GPU users; ``ignore_holders``: programs that may hold them (system
    daemons). ``trial_deadline_s``: an engine is killed on the host after this long, whatever
    happens to specperf or the connection.

    ``client``: where the benchmark client runs for an SSH host. ``"here"`` (default): in
    specperf's process, reaching the engine through an SSH tunnel (the tunnel's latency and
    jitter are then inside TTFT, ITL and the measured window). ``"host"``: on the host, beside
    the engine, as specperf's own client started there with ``client_python`` (an interpreter
    on the host that has the same specperf installed: required then), sending the measured
    requests to ``http://{engine_address}:{port}`` (core/_measure/host_client/__init__.py). Only SSH hosts take
    ``"host"``: a local host's client already runs beside the engine, and a Slurm job runs it
    on the node.
    """

    ssh: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    identity_file: str | None = None
    jump: str | None = None
    connect_timeout_s: float = Field(default=15.0, gt=0)
    exec_prefix: list[str] = Field(default_factory=list)
    workdir: str | None = None
    python: str = "python3"
    engine_address: str = "127.0.0.1"
    device_paths: list[str] = Field(default_factory=lambda: ["/dev/nvidia[0-9]*"])
    ignore_holders: list[str] = Field(default_factory=lambda: ["nvidia-persistenced", "nv-hostengine", "nv-fabricmanager", "dcgm"])
    trial_deadline_s: float = Field(default=7200.0, gt=0)
    kind: Literal["local", "ssh", "slurm"] | None = None
    slurm: SlurmConfig | None = None
    client: Literal["here", "host"] = "here"
    client_python: str | None = None

    @model_validator(mode="after")
    def _kind(self) -> HostConfig:
        kind = self.kind or ("slurm" if self.slurm else "ssh" if self.ssh else "local")
        if kind == "slurm":
            if not self.workdir:
                raise ValueError('kind = "slurm" needs workdir = "/shared/..." (a folder the nodes share)')
        elif self.slurm:
            raise ValueError(f'[slurm] settings need kind = "slurm" (got kind = "{kind}")')
        elif (kind == "ssh") != bool(self.ssh):
            raise ValueError('kind = "ssh" needs ssh = "user@host"' if kind == "ssh" else
                             f'kind = "{kind}" cannot have ssh = ...; leave kind out or set it to "ssh"')
        if self.client == "host" and kind != "ssh":
            where = "on the Slurm node" if kind == "slurm" else "on this machine"
            raise ValueError(f'client = "host" is for SSH hosts: on a {kind} host the benchmark client already runs '
                             f'{where}, beside the engine; leave client out')
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "slurm", self.slurm or (SlurmConfig() if kind == "slurm" else None))
        return self

    @field_validator("ssh", "jump", "python", "engine_address", "client_python", mode="before")
    @classmethod
    def _expand_text(cls, value):
        return _expand(value) if isinstance(value, str) else value

    @field_validator("exec_prefix", mode="before")
    @classmethod
    def _expand_words(cls, value):
        return [_expand(v) if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("workdir", mode="before")
    @classmethod
    def _absolute(cls, value):
        if not isinstance(value, str):
            return value
        value = _expand(value)
        if not value.startswith("/"):
            raise ValueError("must be an absolute path (no ~: it would not expand on the host)")
        return value.rstrip("/") or "/"

    @field_validator("known_hosts", "identity_file")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        return os.path.expanduser(_expand(value)) if value else value


class ContainerConfig(_Strict):
    """An engine run as a container (``[engines.<name>.container]``; docs/engines.md). The
    engine's own argv (its kind's server command, args and mode arguments) becomes the
    container's command; specperf adds ``run --rm --name <per-trial name> --label
    specperf.workdir=<host workdir> --network host --pull never``, the engine's ``env`` passed
    by name (``-e KEY``: values stay out of the argv), the engine's worktree mounted at its own
    path and used as the working folder (when it has a ``repo``) and its ``cpus`` as
    ``--cpuset-cpus``. ``cli``: the container program and its global options, word by word
    (``["docker"]``, ``["podman", "--runtime", "runc"]``, ``["sudo", "docker"]``); ``image``:
    the image reference; ``run_args``: more ``run`` options (GPUs: ``--gpus all`` for Docker,
    ``--device nvidia.com/gpu=all`` for Podman with CDI; mounts, ``--ipc host``, ulimits);
    ``pull``: pull a missing image before the first launch (default: a missing image is an
    error, so no compare silently measures whatever a registry serves that day);
    ``pull_timeout_s``: how long that pull may take."""

    cli: list[str] = Field(default_factory=lambda: ["docker"], min_length=1)
    image: str = Field(min_length=1)
    run_args: list[str] = Field(default_factory=list)
    pull: bool = False
    pull_timeout_s: float = Field(default=3600.0, gt=0)

    @field_validator("cli", "run_args")
    @classmethod
    def _expand_list(cls, value: list[str]) -> list[str]:
        return [_expand(v) for v in value]

    @field_validator("image")
    @classmethod
    def _expand_image(cls, value: str) -> str:
        return _expand(value)


class EngineConfig(_Strict):
    """One serving engine: how to launch it and which modes it has.

    Compare launches the engine from a git worktree of ``repo`` per commit. Source mode:
    ``source_dir`` (relative to the worktree, ``""`` for its root) goes first on PYTHONPATH,
    and ``source_package`` is the package that must then be imported from the worktree
    (checked before the first launch of each commit, so a stale install cannot be measured
    by mistake). Build mode: ``build`` is an argv run once per commit in its worktree, with
    ``{worktree}`` and ``{prefix}`` (a per-commit folder) replaced; ``{prefix}`` may also be
    used in ``python``, ``args`` and mode arguments (``python = "{prefix}/bin/python"``).
    ``modes`` maps a mode name (``baseline``, ``eagle3``, ...) to the extra launch arguments of
    that mode; ``args`` are common to every mode. ``command`` is only for ``kind = "command"``:
    the full argv, where ``{port}``, ``{model}`` and ``{python}`` are replaced.
    ``output_length``: how requests hold the output length fixed: ``ignore_eos``,
    ``min_tokens`` (= ``max_tokens``), ``max_tokens`` alone (an answer cut short by the model's
    end-of-sequence token invalidates the launch), or ``probe`` (default): the first of those
    the server accepts at readiness (an HTTP 400/422 to a field moves on to the next).
    ``profile_dir_env``: only for ``kind = "command"``: the environment variable that tells
    the server where to write torch profiler traces; setting it says the server answers
    ``POST /start_profile`` (JSON body ``{"max_iterations": steps}``) and ``POST /stop_profile``
    as vLLM's does, so compare's profile round can use it (vLLM and SGLang need nothing).
    ``container``: run the engine in a container (:class:`ContainerConfig`); ``python`` and
    ``model`` are then paths inside the image (or its mounts).
    """

    kind: Literal["vllm", "sglang", "command"]
    host: str = "local"
    repo: str | None = None
    source_dir: str | None = None
    source_package: str | None = None
    build: list[str] = Field(default_factory=list)
    python: str = "python3"
    model: str = ""
    served_model_name: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    modes: dict[str, list[str]] = Field(default_factory=lambda: {"baseline": []})
    command: list[str] = Field(default_factory=list)
    health_path: str = "/health"
    profile_dir_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    output_length: Literal["probe", "ignore_eos", "min_tokens", "max_tokens"] = "probe"
    port: int = Field(default=8199, ge=1, le=65535)
    cpus: list[int] | None = None
    ready_timeout_s: float = Field(default=600.0, gt=0)
    stop_grace_s: float = Field(default=15.0, gt=0)
    build_timeout_s: float = Field(default=7200.0, gt=0)
    container: ContainerConfig | None = None

    @field_validator("python", "model", "repo")
    @classmethod
    def _expand_path(cls, value: str | None) -> str | None:
        return os.path.expanduser(_expand(value)) if value else value

    @field_validator("args", "command", "build")
    @classmethod
    def _expand_list(cls, value: list[str]) -> list[str]:
        return [_expand(v) for v in value]

    @field_validator("env")
    @classmethod
    def _expand_env(cls, value: dict[str, str]) -> dict[str, str]:
        return {k: _expand(v) for k, v in value.items()}

    @field_validator("modes")
    @classmethod
    def _expand_modes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if not value:
            raise ValueError("needs at least one mode, for example baseline = []")
        return {name: [_expand(v) for v in args] for name, args in value.items()}

    @model_validator(mode="after")
    def _kind_fields(self) -> EngineConfig:
        if self.kind == "command" and not self.command:
            raise ValueError('kind = "command" needs command = [...] (the full launch argv)')
        if self.kind != "command" and not self.model:
            raise ValueError(f'kind = "{self.kind}" needs model = "<path or name>"')
        if self.kind != "command" and self.profile_dir_env:
            raise ValueError(f'profile_dir_env is for kind = "command" only (kind = "{self.kind}" is profiled '
                             "through its own profiler settings)")
        if self.container and (self.build or self.source_package):
            raise ValueError("a container engine cannot have build or source_package (both run the engine's python "
                             "on the host, outside the image): build the image per commit instead, or run the "
                             "engine without [container]")
        return self

    @property
    def request_model_name(self) -> str:
        """The ``model`` field sent in requests: ``served_model_name`` or else ``model``."""
        return self.served_model_name or self.model


class WorkloadConfig(_Strict):
    """A seeded, fixed workload (docs/workloads.md).

    ``prompts``: where the prompts come from: ``"random-words"`` (``prompt_words`` seeded words
    each, drawn from a fixed list), ``"categories"`` (the prompt set shipped with specperf, six
    categories: core/_prompts/categories.jsonl), or the path of a prompt-set file in ``format``
    (``"auto"`` tells by content: Spec-Bench ``question.jsonl``, ShareGPT JSON, or JSONL with
    ``prompt`` or ``messages``); a relative path is taken from the config file's folder.
    ``categories``: the file's categories to use (empty: all). ``mix``: ``"balanced"`` takes
    the same number of requests from each category, in turn; ``"file"`` keeps the file's mix.
    ``output``: ``"fixed"`` holds every answer at ``output_len`` tokens (the engine's length
    method, e.g. ``ignore_eos``); ``"natural"`` lets the model stop at its end token, capped at
    ``output_len``. ``concurrency`` requests in flight, ``requests`` measured requests after
    ``warmup_requests`` uncounted ones. ``windows``: measured windows per launch, the measured
    requests sent that many times one after another after the one warm-up: each window's tok/s
    is kept (the spread within a launch), the launch's figure is over all of them, and the
    launch stays the unit of the statistics (docs/verdicts.md); a compare planned from a
    calibration sets it (core._experiments.calibrate).
    """

    api: Literal["completions", "chat"] = "completions"
    prompts: str = Field(default="random-words", min_length=1)
    format: Literal["auto", "spec-bench", "sharegpt", "jsonl"] = "auto"
    categories: list[str] = Field(default_factory=list)
    mix: Literal["balanced", "file"] = "balanced"
    output: Literal["fixed", "natural"] = "fixed"
    prompt_words: int = Field(default=32, ge=1)
    output_len: int = Field(default=128, ge=2)
    concurrency: int = Field(default=1, ge=1)
    requests: int = Field(default=16, ge=1)
    warmup_requests: int = Field(default=2, ge=0)
    windows: int = Field(default=1, ge=1, le=64)
    seed: int = 0
    request_timeout_s: float = Field(default=300.0, gt=0)


BUILTIN_WORKLOADS = {
    "random-words": WorkloadConfig(),
    "categories": WorkloadConfig(prompts="categories", api="chat", output="natural", requests=24, output_len=128),
}


def check_prompts(workload: WorkloadConfig, where: str) -> None:
    """Read ``workload``'s prompt set now (core._prompts), so a bad file, a category it lacks,
    or fewer measured requests than the balanced categories need stops the command before
    anything is launched. ``where`` names the workload in the message.

    Raises:
        ConfigError: naming the file and line, or the key to change.
    """
    prompts = check_prompt_set(workload.prompts, workload.format, workload.categories, workload.api, where)
    categories = {p.category or UNCATEGORISED for p in prompts}
    if workload.mix == "balanced" and len(categories) > workload.requests:
        raise ConfigError(f"{where}: requests = {workload.requests} is fewer than the {len(categories)} categories "
                          "of its prompt set, so some would not be measured; raise requests (a multiple of "
                          "the categories gives each the same number) or name fewer categories")


class DisturbanceConfig(_Strict):
    """When a trial's measured window counts as disturbed (``[compare.disturbance]``; the
    window monitor's figures are in ``core/_hosts/agent.py``, the judgement in
    ``core/_env/disturbance.py``). The defaults hold on a shared 2-CPU VM and on a quiet GPU host:
    a boosted or idle GPU, clock moves and the power cap alone are not disturbances.

    ``engine_cpus_foreign_share``: CPU time of processes outside the engine's group (and not
    specperf's) on the CPUs the engine may run on, as a share of those CPUs over the window.
    ``host_foreign_share``: the same over all the host's CPUs (``None``: not judged, since a
    shared host is busy elsewhere by design). ``steal_share``: time the hypervisor took from
    the engine's CPUs. ``gpu_slowdown_s``: seconds of thermal slowdown, HW slowdown or power
    braking in the window. ``power_cap_share_spread``: a trial whose share of its window under
    the SW power cap differs from the median of its mode's trials by more than this (a heavy
    engine sits at the cap all the time; a difference means something else drew power).
    ``swap_mib``: swapped in or out in the window. ``foreign_gpu_processes``: a compute process
    outside the engine's group on its GPUs disturbs. ``client_cpus_foreign_share``: CPU time of
    foreign processes on the benchmark client's CPUs (where they are not the engine's), as a
    share of those CPUs: a loaded client reads tokens and sends requests late (``None``: not
    judged)."""

    engine_cpus_foreign_share: float = Field(default=0.10, gt=0, le=1)
    client_cpus_foreign_share: float | None = Field(default=0.25, gt=0, le=1)
    host_foreign_share: float | None = Field(default=None, gt=0, le=1)
    steal_share: float = Field(default=0.05, gt=0, le=1)
    gpu_slowdown_s: float = Field(default=0.5, ge=0)
    power_cap_share_spread: float = Field(default=0.25, gt=0, le=1)
    swap_mib: float = Field(default=64.0, ge=0)
    foreign_gpu_processes: bool = True


class CompareConfig(_Strict):
    """How a compare decides (see core._experiments.stats): ``margin_pct`` of base tok/s within which a
    change counts as none, the paired t-test's ``alpha``, launches per arm and mode between
    ``min_trials`` and ``max_trials`` (rounds are added while INCONCLUSIVE), an overall
    ``time_budget_s``, and ``cooldown_s`` between launches.

    ``on_disturbed``: what a trial judged disturbed (``disturbance``) does: ``remeasure``
    (default) keeps it stored and shown but leaves its pair out of the statistics and measures
    another ABBA round, at most ``max_remeasured_pairs`` pairs per mode (later disturbed pairs
    are kept and named); ``keep`` keeps it in the statistics and names it; ``fail`` ends the
    run as FAILED.

    ``pairing``: ``sequential`` (default) launches one engine at a time, ABBA then BAAB; ``concurrent``
    launches both arms' engines at once on the same host and CPUs/GPUs (the commit's on port
    + 1) and measures them in turns of ``concurrency`` requests (core._measure.client.run_alternating):
    for hosts whose speed drifts within seconds (a VM's CPUs) and engines small enough for two
    to fit at once (the CPU test engine). Each round is two such paired launches, the arms
    taking the first turn in turn.

    ``profile``: when a profile round follows the verdicts (core._experiments.profiling):
    ``on-change`` (default) for each mode whose verdict is REGRESSION or IMPROVEMENT,
    ``always`` for every mode, ``never``. A round is one more launch per arm of the mode with
    the engine's torch profiler on, ``profile_requests`` of the workload's requests profiled
    after its warm-up, at most ``profile_steps`` engine steps."""

    margin_pct: float = Field(default=2.0, gt=0, lt=100)
    pairing: Literal["sequential", "concurrent"] = "sequential"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_trials: int = Field(default=4, ge=2)
    max_trials: int = Field(default=8, ge=2)
    time_budget_s: float = Field(default=3600.0, gt=0)
    cooldown_s: float = Field(default=2.0, ge=0)
    modes: list[str] = Field(default_factory=lambda: ["baseline", "eagle3"])
    on_disturbed: Literal["remeasure", "keep", "fail"] = "remeasure"
    max_remeasured_pairs: int = Field(default=4, ge=0)
    disturbance: DisturbanceConfig = Field(default_factory=DisturbanceConfig)
    profile: Literal["on-change", "always", "never"] = "on-change"
    profile_requests: int = Field(default=4, ge=1, le=1000)
    profile_steps: int = Field(default=64, ge=1, le=100000)

    @field_validator("max_trials")
    @classmethod
    def _trials(cls, value: int, info: ValidationInfo) -> int:
        # on the field, so an error names the key (a model-level error has no location)
        low = info.data.get("min_trials")
        if low is not None and value < low:
            raise ValueError(f"max_trials ({value}) is below min_trials ({low})")
        return value



class StorageConfig(_Strict):
    """Where runs are kept: any SQLAlchemy URL; empty means SQLite in the data directory.
    ``owner_lease_s``: a bot renews its lease on its jobs and runs every third of this; a job
    or run whose owner has not renewed it for this long is taken as orphaned (re-queued, its
    engine stopped) by any other bot, wherever the owner ran."""

    url: str = ""
    owner_lease_s: float = Field(default=60.0, ge=1.0)



class Config(_Strict):
    """The whole configuration file.

    ``client_cpus`` pins the benchmark client (the specperf process) to those CPUs while it
    measures; with an engine's ``cpus`` this keeps client and engine off each other's cores.
    ``[slack]``, ``[schedule]``, ``[report]`` and ``[[watches]]`` belong to the bot: read here
    as raw tables, validated by ``bot``'s configuration (a subclass of this one).
    """

    hosts: dict[str, HostConfig] = Field(default_factory=lambda: {"local": HostConfig()})
    engines: dict[str, EngineConfig] = Field(default_factory=dict)
    workloads: dict[str, WorkloadConfig] = Field(default_factory=lambda: {"default": WorkloadConfig()})
    client_cpus: list[int] | None = None
    compare: CompareConfig = Field(default_factory=CompareConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    triage: TriageConfig = Field(default_factory=TriageConfig)
    # The bot's sections: kept here as raw tables so one file serves both; ``bot`` validates
    # them (its BotConfig types these four fields).
    slack: dict = Field(default_factory=dict)
    schedule: dict = Field(default_factory=dict)
    report: dict = Field(default_factory=dict)
    watches: list[dict] = Field(default_factory=list)
    _source: str = PrivateAttr(default="the config file")

    @property
    def source(self) -> str:
        """Where this configuration was read from (the file name given to :func:`parse_config`),
        for messages that name a key to change."""
        return self._source

    @model_validator(mode="after")
    def _references(self) -> Config:
        hosts = dict(self.hosts)
        hosts.setdefault("local", HostConfig())
        object.__setattr__(self, "hosts", hosts)
        for name, host in hosts.items():
            if host.kind == "slurm" and host.ssh and not (host.slurm and host.slurm.python):
                raise ValueError(slurm_python_missing(name, host.ssh))
            if host.client == "host" and not host.client_python:
                raise ValueError(client_python_missing(name))
        workloads = dict(BUILTIN_WORKLOADS)
        workloads.update(self.workloads)
        object.__setattr__(self, "workloads", workloads)
        for name, engine in self.engines.items():
            if engine.host not in hosts:
                raise ValueError(
                    f"engines.{name}.host = {engine.host!r} is not a configured host "
                    f"(known: {', '.join(sorted(hosts))})"
                )
        return self

    def engine(self, name: str) -> EngineConfig:
        """The engine called ``name``; :class:`ConfigError` naming the known ones if absent."""
        return _pick(self.engines, name, "engine")

    def workload(self, name: str) -> WorkloadConfig:
        """The workload called ``name``; :class:`ConfigError` naming the known ones if absent."""
        return _pick(self.workloads, name, "workload")


C = TypeVar("C", bound=Config)


def _pick(table: dict, name: str, what: str):
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise ConfigError(f"no {what} named {name!r} in the config (known {what}s: {known})")
    return table[name]


def _describe(error: dict, source: str) -> str:
    """One line for one validation error: the file, the dotted key, what was expected and what
    was given, with secrets redacted (:func:`core._redact.redact`; the whole value under a
    secret-looking key)."""
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key {loc!r}; check its spelling against the documented keys"
    where = f"{source}: {loc}" if loc else source
    message = redact(error["msg"].removeprefix("Value error, "))
    given = REDACTED if any(secret_name(str(part)) for part in error["loc"]) else redact(error.get("input"))
    return f"{where}: {message} (got {given!r})" if loc else f"{where}: {message}"


def parse_config(text: str, source: str = "<config>", model: type[C] = Config) -> C:  # type: ignore[assignment]
    """Parse and validate TOML ``text``.

    Args:
        text: the TOML document.
        source: the file name used in error messages.
        model: the model to validate with: :class:`Config`, or a front end's subclass that
            types its own sections.

    Raises:
        ConfigError: invalid TOML, an unknown key, a wrong type, or a broken reference; the
            message names ``source``, the dotted key and what was expected.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(err, source) for err in exc.errors()]
        raise ConfigError("\n".join(lines)) from None
    config._source = source
    folder = Path(source).parent if Path(source).is_file() else Path.cwd()
    for name, workload in list(config.workloads.items()):
        if workload.prompts not in BUILTIN_PROMPT_SETS:
            try:
                path = str((folder / Path(workload.prompts).expanduser()).resolve())
            except (RuntimeError, ValueError, OSError) as exc:  # a link loop, ~nosuchuser, a NUL byte
                raise ConfigError(f"{source}: workloads.{name}.prompts = {workload.prompts!r} is not a usable path: "
                                  f"{exc}") from None
            config.workloads[name] = workload = workload.model_copy(update={"prompts": path})
        check_prompts(workload, f"{source}: workloads.{name}")
    return config


def load_config(path: str | Path, model: type[C] = Config) -> C:  # type: ignore[assignment]
    """Read and validate the TOML file at ``path`` (with ``model``, as :func:`parse_config`);
    raises :class:`ConfigError` (also when unreadable)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text (TOML files are UTF-8)") from None
    return parse_config(text, str(path), model)
