"""The window monitor and the disturbance judgement, without an engine: the monitor run for
real against a CPU hog on this machine, the judgement on windows recorded on an NVIDIA H200
(tests/fixtures/nvml/h200_window_*.json, bench/record_window_gpu.py), the re-measure
bookkeeping, and the report's wording."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import core
from bot._common import disturbed_lines
from core._config import DisturbanceConfig
from core._env.disturbance import Culprit, Disturbance, culprit_lines, judge_trials, judge_window, power_cap_share
from core._env.window import WindowMonitor
from core._experiments.compare import judge_compare, kept, verdict_for
from core._experiments.report import launch_rows, render_chart, summarize
from core._experiments.stats import INCONCLUSIVE, ArmTrial
from core._hosts import LocalHost
from core._hosts import agent as _host_agent
from core._hosts.base import Spawned
from tests.conftest import specperf_in_process

NVML = Path(__file__).parent / "fixtures" / "nvml"
LIMITS = DisturbanceConfig()
HOG = "import time  # specperf-fast-test-hog\nwhile True: time.time()"


def recorded(case: str) -> dict:
    return json.loads((NVML / f"h200_window_{case}.json").read_text())


# --- the monitor, for real -------------------------------------------------------------------

@pytest.fixture
def engine_stand_in():
    """A process in its own group pinned to this machine's last CPU, as an engine with ``cpus``."""
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen(["taskset", "--cpu-list", str(cpu), "sleep", "60"], start_new_session=True)
    yield proc, cpu
    proc.kill()
    proc.wait()


async def _window_with_hog(engine_pid: int, hog_cpu: int, **monitor_args) -> tuple[dict, int]:
    """A 2 s window of a monitor (``monitor_args``: WindowMonitor's options) with a busy loop on ``hog_cpu``."""
    monitor = WindowMonitor(LocalHost("local", core.HostConfig(), "/tmp"), sys.executable, engine_pid,
                                 **monitor_args)
    await monitor.open()
    await monitor.start()
    hog = subprocess.Popen(["taskset", "--cpu-list", str(hog_cpu), sys.executable, "-c", HOG])
    try:
        await asyncio.sleep(2.0)
    finally:
        hog.kill()
        hog.wait()
    return await monitor.stop(), hog.pid


@pytest.mark.alone  # the hog's CPU share in a 1.5-2 s window
async def test_monitor_names_a_hog_on_the_engine_cpu(engine_stand_in):
    engine, cpu = engine_stand_in
    window, hog_pid = await _window_with_hog(engine.pid, cpu)
    assert window["engine_cpus"] == [cpu]
    assert 1.9 < window["window_s"] < 4.0
    hog = next(p for p in window["foreign_processes"] if p["pid"] == hog_pid)
    assert "specperf-fast-test-hog" in hog["command"] and hog["engine_cpus_cpu_s"] > 0.2
    judged = judge_window(window, LIMITS)
    assert judged.disturbed
    assert any(c.pid == hog_pid for c in judged.culprits), judged.reasons
    assert f"pid {hog_pid}" in judged.reasons[0] and f"CPU {cpu}" in judged.reasons[0]
    assert window["gpu"]["available"] is False and window["gpu"]["reason"]  # no GPU here: said, not guessed


@pytest.mark.alone
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a CPU besides the engine's")
async def test_monitor_leaves_a_hog_on_another_cpu_out_of_the_engine_share(engine_stand_in):
    engine, cpu = engine_stand_in
    other = min(os.sched_getaffinity(0))
    window, hog_pid = await _window_with_hog(engine.pid, other)
    hog = next(p for p in window["foreign_processes"] if p["pid"] == hog_pid)
    assert hog["cpu_s"] > 0.2 and hog["engine_cpus_cpu_s"] == 0.0
    assert window["cpu"]["host_foreign_share"] > 0.1


@pytest.mark.alone  # the hog's CPU share in a 2 s window
async def test_a_hog_on_the_benchmark_clients_cpu_disturbs_the_window_and_is_named(engine_stand_in):
    engine, cpu = engine_stand_in
    client = min(os.sched_getaffinity(0) - {cpu})
    window, hog_pid = await _window_with_hog(engine.pid, client, cpus=[cpu], client_cpus=[client])
    assert window["client_cpus"] == [client] and window["cpu"]["client_cpus_foreign_share"] > 0.5, window["cpu"]
    assert window["cpu"]["engine_cpus_foreign_share"] < 0.1  # the engine's own CPU stayed quiet
    judged = judge_window(window, LIMITS)
    assert judged.disturbed and any(c.pid == hog_pid for c in judged.culprits), judged.reasons
    reason = next(r for r in judged.reasons if "benchmark client" in r)
    assert f"the benchmark client's CPU {client}" in reason and f"pid {hog_pid}" in reason
    off = judge_window(window, DisturbanceConfig(client_cpus_foreign_share=None))
    assert not any("benchmark client" in r for r in off.reasons)


class _AnsweringHelper(Spawned):
    """A window monitor helper whose next answer the test gives (``pending``)."""

    pending: asyncio.Future

    async def readline(self) -> str:
        self.pending = asyncio.get_running_loop().create_future()
        return await self.pending

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass

    async def wait(self) -> int | None:
        return 0


class _HelperHost(LocalHost):
    def __init__(self, helper: Spawned) -> None:
        super().__init__("local", core.HostConfig(), "/tmp")
        self.helper = helper

    async def spawn(self, argv, *, cwd=None, env=None, stderr=False) -> Spawned:
        return self.helper


async def test_a_cancel_that_lands_as_the_monitor_answers_still_cancels():
    """A Slack cancel was lost this way on Python 3.11: ``asyncio.wait_for`` returned the
    monitor's answer and the compare ran to its end (CPython gh-86296; ruff now bans it)."""
    helper = _AnsweringHelper()
    monitor = WindowMonitor(_HelperHost(helper), sys.executable, -1)
    opening = asyncio.create_task(monitor.open())
    await asyncio.sleep(0)
    helper.pending.set_result('{"ready": true}\n')
    await opening
    starting = asyncio.create_task(monitor.start())
    await asyncio.sleep(0)  # it waits for the answer
    helper.pending.set_result('{"started": 0}\n')
    starting.cancel()  # in the same turn of the loop as the answer
    with pytest.raises(asyncio.CancelledError):
        await starting


# --- the summary from readings ---------------------------------------------------------------

def _reading(t: float, cpu: dict, threads: dict) -> dict:
    return {"t": t, "cpu": cpu, "threads": threads, "mem_available_mib": 1000, "gpu": [],
            "vmstat": {"pswpin": 0, "pswpout": 0, "pgmajfault": 0}}


def test_window_summary_counts_threads_on_the_cpu_they_ran_on():
    # engine group 100 on CPU 1; pid 7 (foreign) moves from CPU 0 to CPU 1; pid 8 is specperf
    first = _reading(0.0, {0: [0] * 8, 1: [0] * 8}, {"100/100": [100, 100, 0, 1], "7/7": [7, 7, 0, 0],
                                                      "8/8": [8, 8, 0, 1]})
    mid = _reading(1.0, {0: [50, 0, 0, 50, 0, 0, 0, 0], 1: [100, 0, 0, 0, 0, 0, 0, 0]},
                   {"100/100": [100, 100, 60, 1], "7/7": [7, 7, 50, 0], "8/8": [8, 8, 40, 1]})
    last = _reading(2.0, {0: [50, 0, 0, 150, 0, 0, 0, 0], 1: [200, 0, 0, 0, 0, 0, 0, 0]},
                    {"100/100": [100, 100, 100, 1], "7/7": [7, 7, 80, 1], "8/8": [8, 8, 60, 1]})
    who = {7: {"pid": 7, "user": "alice", "command": "pip install x"}}
    doc = _host_agent.window_summary(first, [mid], last, 100, [8], [1], None, "no GPU", who.get, ticks_per_s=100)
    cpu = doc["cpu"]
    assert cpu["engine_cpu_s"] == 1.0 and cpu["engine_cpus_foreign_s"] == 0.3
    assert cpu["engine_cpus_busy_share"] == 1.0 and cpu["engine_cpus_foreign_share"] == 0.15
    assert cpu["engine_cpus_unattributed_s"] == pytest.approx(0.1)  # 2.0 busy - 1.9 seen on CPU 1
    assert doc["foreign_processes"] == [{"pid": 7, "user": "alice", "command": "pip install x", "cpu_s": 0.8,
                                         "engine_cpus_cpu_s": 0.3}]
    assert doc["gpu"] == {"available": False, "reason": "no GPU"}


def test_redacted_commands():
    assert _host_agent.redact_command(["serve", "--api-key", "s3cret", "--hf-token=abc", "--port", "1"]) == \
        "serve --api-key <redacted> --hf-token=<redacted> --port 1"


def test_gpu_window_from_recorded_h200_readings():
    doc = recorded("capped")
    again = _host_agent.gpu_window(doc["readings"], pgid=-1, group_of=lambda pid: -1)
    assert again["devices"][0]["clock_event_s"] == doc["gpu"]["devices"][0]["clock_event_s"]
    assert again["devices"][0]["violation_s"] == doc["gpu"]["devices"][0]["violation_s"]
    assert again["devices"][0]["sm_clock_mhz_median"] == 1440
    # the recording's engine stand-in was pid 558 (its own group), the foreign loop pid 585
    foreign = _host_agent.gpu_window(recorded("foreign")["readings"], pgid=558,
                                     group_of=lambda pid: 558 if pid == 558 else None, describe=lambda pid: None)
    assert foreign["devices"][0]["foreign_processes"] == [{"pid": 585, "user": None, "command": None, "visible": False}]


# --- the judgement on recorded H200 windows --------------------------------------------------

@pytest.mark.parametrize("case", ["idle", "light", "after", "capped"])
def test_quiet_h200_windows_are_not_disturbed(case):
    # idle card, boosted card right after work, a loop at the power cap for its whole window:
    # the normal states of a GPU host, none a disturbance
    assert judge_window(recorded(case), LIMITS).reasons == []


def test_the_power_cap_alone_is_the_normal_state_of_a_heavy_engine():
    capped = recorded("capped")
    device = capped["gpu"]["devices"][0]
    assert device["clock_event_s"]["sw_power_cap"] == pytest.approx(capped["window_s"], abs=0.2)
    assert power_cap_share(capped) > 0.99
    windows = {1: capped, 2: recorded("light"), 3: recorded("foreign")}
    assert not any("power cap" in r for d in judge_trials(windows, LIMITS).values() for r in d.reasons)


def test_foreign_gpu_process_in_the_window_is_named():
    judged = judge_window(recorded("foreign"), LIMITS)
    assert judged.disturbed
    assert any(c.pid == 585 and c.what == "gpu process" for c in judged.culprits)
    assert "GPU0: foreign compute process pid 585 (root)" in judged.reasons[0]


def test_thermal_slowdown_is_disturbed_with_its_duration():
    window = recorded("capped")
    window["gpu"]["devices"][0]["clock_event_s"]["hw_thermal_slowdown"] = 3.2
    judged = judge_window(window, LIMITS)
    assert judged.reasons == ["GPU0 slowed down: hw_thermal_slowdown 3.2 s of 15.0 s"]


def test_a_power_cap_share_unlike_the_other_trials_is_disturbed():
    odd = recorded("capped")
    odd["gpu"]["devices"][0]["clock_event_s"]["sw_power_cap"] = 6.0  # 40% of its window, the others ~100%
    judged = judge_trials({1: recorded("capped"), 2: recorded("light"), 3: odd, 4: recorded("capped")}, LIMITS)
    assert list(judged) == [3]
    assert "GPU0 spent 40% of the window under the power cap, against 100%" in judged[3].reasons[0]


def test_unsupported_counters_are_listed_not_guessed():
    window = recorded("capped")
    device = window["gpu"]["devices"][0]
    device["unsupported"] = {"clock_event.hw_power_brake_slowdown": "NVMLError_NotSupported"}
    del device["clock_event_s"]["hw_power_brake_slowdown"]
    assert judge_window(window, LIMITS).reasons == []


def test_the_culprit_that_took_most_is_named_first():
    """Seen on a 2-vCPU VM (2026-12-02): a kernel thread at 0.01 CPU-s/s in all four hogged
    windows was named ahead of the hogs (one pid each, about 0.5 CPU-s/s)."""
    kernel = Culprit("cpu", pid=79, user="root", command="[kdamond.0]", cpu_s_per_s=0.01)
    disturbed = {seq: Disturbance(["foreign processes took 50%"],
                                       [kernel, Culprit("cpu", pid=1000 + seq, user="root",
                                                             command="python -c spin", cpu_s_per_s=0.5)])
                 for seq in (2, 3, 5, 8)}
    disturbed[9] = Disturbance(["GPU 0 thermal slowdown 2.0 s"], [Culprit("GPU 0 thermal slowdown")])
    lines = culprit_lines(disturbed, limit=3)
    assert lines[0] == "GPU 0 thermal slowdown during launch 9"  # a GPU condition weighs a whole CPU
    assert lines[1].startswith("pid 1002 (root) `python -c spin`: 0.50 CPU-s/s on the engine's CPUs during launch 2")
    assert lines[2].startswith("pid 1003 ")
    assert not any("kdamond" in line for line in lines)
    assert "kdamond" in culprit_lines(disturbed, limit=6)[-1]  # still named, last


def test_a_culprit_on_the_clients_cpu_is_said_to_be_there():
    """Seen in the demo under a 50% loop on CPU 0, the client's (2026-12-05): each launch said
    "the benchmark client's CPU 0", and the summary line above the verdicts said "0.49 CPU-s/s
    on the engine's CPUs"."""
    hog = dict(pid=24307, user="root", command="python3 /tmp/hog50.py", cpu_s_per_s=0.49)
    disturbed = {seq: Disturbance(["foreign processes took 50% of the benchmark client's CPU 0"],
                                  [Culprit("client cpu", **hog)]) for seq in (1, 2, 3)}
    disturbed[4] = Disturbance(["foreign processes took 40% of the engine's CPU 1"], [Culprit("cpu", **hog)])
    lines = culprit_lines(disturbed)
    assert lines == ["pid 24307 (root) `python3 /tmp/hog50.py`: 0.49 CPU-s/s on the benchmark client's CPUs "
                     "during launches 1-3",
                     "pid 24307 (root) `python3 /tmp/hog50.py`: 0.49 CPU-s/s on the engine's CPUs during launch 4"]


# --- re-measure bookkeeping ------------------------------------------------------------------

def _hog_window(pid: int, share: float = 0.6) -> dict:
    return {"window_s": 10.0, "host_cpus": 2, "engine_cpus": [1],
            "cpu": {"engine_cpus_foreign_share": share, "engine_cpus_unattributed_s": 0.0, "host_foreign_share": 0.3},
            "foreign_processes": [{"pid": pid, "user": "root", "command": "pip install -e .", "cpu_s": 6.0,
                                   "engine_cpus_cpu_s": 6.0 * share / 0.6}],
            "memory": {}, "gpu": {"available": False, "reason": "no GPU"}}


QUIET = {"window_s": 10.0, "host_cpus": 2, "engine_cpus": [1],
         "cpu": {"engine_cpus_foreign_share": 0.01, "engine_cpus_unattributed_s": 0.0, "host_foreign_share": 0.4},
         "foreign_processes": [], "memory": {}, "gpu": {"available": False, "reason": "no GPU"}}
SEQS = {"baseline": {"base": [1, 4, 5, 8, 9, 12], "head": [2, 3, 6, 7, 10, 11]}}


def test_remeasure_leaves_out_the_pairs_of_disturbed_trials_up_to_the_limit():
    windows = {seq: QUIET for seq in range(1, 13)} | {3: _hog_window(4121), 9: _hog_window(4121),
                                                       12: _hog_window(4121)}
    settings = core.CompareConfig(max_remeasured_pairs=2)
    disturbed, left_out = judge_compare(SEQS, windows, settings)
    assert sorted(disturbed) == [3, 9, 12]
    assert left_out == {"baseline": [1, 4]}  # seq 3 is pair 1, seq 9 and 12 pair 4
    three = judge_compare(SEQS, windows | {6: _hog_window(4121)}, settings)[1]
    assert three == {"baseline": [1, 2]}  # the limit: pair 4 is kept
    for policy in ("keep", "fail"):
        assert judge_compare(SEQS, windows, core.CompareConfig(on_disturbed=policy))[1] == {"baseline": []}
    assert kept({"base": "abcdef", "head": "ABCDEF"}, [1, 4]) == {"base": list("acdf"), "head": list("ACDF")}


def test_a_busy_host_is_named_at_the_top_with_what_would_settle_it():
    windows = {seq: QUIET for seq in range(1, 13)} | {seq: _hog_window(4121, 0.9) for seq in (9, 10, 11, 12)}
    settings = core.CompareConfig(on_disturbed="keep", margin_pct=2.0)
    disturbed, left_out = judge_compare(SEQS, windows, settings)
    base = [100.0, 101.0, 99.0, 100.5, 90.0, 97.0]
    head = [99.0, 102.5, 97.0, 100.0, 95.0, 89.0]
    trials = {"baseline": {"base": [ArmTrial(v, None, None) for v in base],
                           "head": [ArmTrial(v, None, None) for v in head]}}
    verdicts = {"baseline": verdict_for(trials["baseline"], settings)}
    assert verdicts["baseline"].verdict == INCONCLUSIVE
    tok_s = dict(zip(SEQS["baseline"]["base"] + SEQS["baseline"]["head"], base + head))
    launches = launch_rows(SEQS, tok_s, disturbed, left_out, windows)
    report = summarize(trials, verdicts, settings, None, launches, disturbed)
    assert report["headline"] == ("host busy: 4 of 12 trials disturbed (kept in the statistics): pid 4121 (root) "
                                  "`pip install -e .`: 0.90 CPU-s/s on the engine's CPUs during launches 9-12")
    limits = report["modes"]["baseline"]["limits"]
    assert limits[0].startswith("4 of 12 trials disturbed: pid 4121")
    assert limits[0].endswith("4 disturbed trials kept in the statistics (on_disturbed = keep)")
    assert limits[1].startswith("launch-to-launch spread: the pair changes vary by ")
    assert limits[2].startswith("would settle it: measure again on a quiet host (`specperf env --watch 60`")
    assert disturbed_lines(report)[0].startswith("launch 9 (baseline base, kept): disturbed: foreign processes took 90%")
    json.dumps(report)  # JSON-ready


def test_an_inconclusive_verdict_at_the_cap_says_so_and_never_asks_for_a_wider_margin():
    seqs = {"baseline": {"base": list(range(1, 9)), "head": list(range(9, 17))}}
    windows = {seq: QUIET for seq in range(1, 17)}
    settings = core.CompareConfig(margin_pct=3.0, min_trials=4, max_trials=8)
    base = [160.0, 237.0, 165.0, 171.0, 155.0, 240.0, 168.0, 162.0]  # two-valued launches, as seen on a busy VM
    head = [140.0, 150.0, 210.0, 139.0, 143.0, 148.0, 200.0, 141.0]
    trials = {"baseline": {"base": [ArmTrial(v) for v in base], "head": [ArmTrial(v) for v in head]}}
    verdicts = {"baseline": verdict_for(trials["baseline"], settings)}
    assert verdicts["baseline"].verdict == INCONCLUSIVE and verdicts["baseline"].more_trials
    tok_s = dict(zip(seqs["baseline"]["base"] + seqs["baseline"]["head"], base + head))
    disturbed, left_out = judge_compare(seqs, windows, settings)
    launches = launch_rows(seqs, tok_s, disturbed, left_out, windows)
    limits = summarize(trials, verdicts, settings, None, launches, disturbed)["modes"]["baseline"]["limits"]
    text = "\n".join(limits)
    assert "stopped at the cap of 8 launches per arm ([compare].max_trials)" in text, text
    more = verdicts["baseline"].more_trials
    assert f"about {more} more launches per arm (`--max-trials {8 + more}` lifts the cap)" in text, text
    assert "a margin above" not in text and "specperf calibrate" in text
    # sequential pairing with a spread far beyond the margin: the concurrent pairing is named
    assert 'pairing = "concurrent"' in text and "10.5% to 2.1%" in text, text
    # a run of fixed launches (a recheck: min = max) is not told to use --max-trials, which recheck lacks
    fixed = settings.model_copy(update={"min_trials": 8})
    text = "\n".join(summarize(trials, verdicts, fixed, None, launches, disturbed)["modes"]["baseline"]["limits"])
    assert "lifts the cap" not in text and "this run's launches were fixed" in text, text


def test_a_quiet_compare_has_no_headline():
    windows = {seq: QUIET for seq in range(1, 13)}
    disturbed, left_out = judge_compare(SEQS, windows, core.CompareConfig())
    assert disturbed == {} and left_out == {"baseline": []}
    launches = launch_rows(SEQS, {s: 100.0 for s in range(1, 13)}, disturbed, left_out, windows)
    assert [r["seq"] for r in launches] == list(range(1, 13)) and not any(r["disturbed"] for r in launches)
    trials = {"baseline": {"base": [ArmTrial(100.0, None, None)] * 6, "head": [ArmTrial(100.0, None, None)] * 6}}
    report = summarize(trials, {}, core.CompareConfig(), None, launches, disturbed)
    assert report["headline"] is None and disturbed_lines(report) == []


def test_chart_marks_disturbed_launches(tmp_path):
    windows = {seq: QUIET for seq in range(1, 13)} | {3: _hog_window(7)}
    settings = core.CompareConfig()
    disturbed, left_out = judge_compare(SEQS, windows, settings)
    launches = launch_rows(SEQS, {s: 100.0 + s for s in range(1, 13)}, disturbed, left_out, windows)
    trials = {"baseline": {"base": [], "head": []}}
    path = render_chart(trials, tmp_path / "c.png", "t", launches)
    assert path.stat().st_size > 1000


def test_disturbance_settings_in_the_config():
    config = core.parse_config('[compare]\non_disturbed = "keep"\n[compare.disturbance]\n'
                               'engine_cpus_foreign_share = 0.2\n')
    assert config.compare.on_disturbed == "keep" and config.compare.disturbance.engine_cpus_foreign_share == 0.2
    with pytest.raises(core.ConfigError, match="on_disturbed"):
        core.parse_config('[compare]\non_disturbed = "sometimes"\n')



@pytest.mark.alone  # the hog's CPU share in a 1.5-2 s window
def test_env_watch_runs_the_monitor_alone_and_judges_it(tmp_path):
    # an engine on the last CPU this process may use (scripts/test runs the tests without an
    # engine beside the real-engine tests, kept off the real engine's CPU)
    cpu = max(os.sched_getaffinity(0))
    config = tmp_path / "specperf.toml"
    config.write_text(f'[engines.stand-in]\nkind = "vllm"\npython = "{sys.executable}"\nmodel = "m"\ncpus = [{cpu}]\n')
    out = tmp_path / "watch.json"
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path)}
    hog = subprocess.Popen(["taskset", "--cpu-list", str(cpu), sys.executable, "-c", HOG])
    try:
        done = specperf_in_process(["--config", config, "env", "--watch", "1.5", "--json", out], env=env)
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr
    saved = json.loads(out.read_text())
    assert saved["window"]["engine_cpus"] == [cpu]  # the configured engine's cpus
    assert any(p["pid"] == hog.pid for p in saved["window"]["foreign_processes"])
    assert saved["disturbed"]["disturbed"] and "DISTURBED" in done.stdout
    assert "busiest other processes" in done.stdout


def test_gpu_processes_keep_the_identity_they_had_when_first_seen(monkeypatch):
    """An engine process of our own group and a foreign process each hold the GPU (stub NVML
    readings) and exit inside the window: ours is never foreign, the foreign one is named by
    what it was when first seen (user and command), not as an unknown pid."""
    import threading
    import time

    from core._hosts import agent as _host_agent

    # the engine's group leader and a worker of its group, which holds the GPU
    engine = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], start_new_session=True, stdout=subprocess.PIPE,
                              text=True)
    ours = int(engine.stdout.readline())
    foreign = subprocess.Popen(["sleep", "30"], start_new_session=True)
    holders = [ours, foreign.pid]

    class StubNvml:
        error, handles = None, [object()]

        def __init__(self, pynvml_dir=None):
            pass

        def counters(self):
            return [{"violation_ns": {}, "clock_event_ns": {}, "unsupported": {}}]

        def sample(self):
            return [{"sm_clock_mhz": 1980, "pids": list(holders)}]

    monkeypatch.setattr(_host_agent, "Nvml", StubNvml)
    read_fd, write_fd = os.pipe()
    emitted: list[dict] = []
    stdin = os.fdopen(read_fd)
    spec = {"pgid": engine.pid, "own_pids": [], "interval_s": 0.1, "cpus": None}
    runner = threading.Thread(target=_host_agent.monitor, args=(spec, stdin, emitted.append))
    runner.start()
    try:
        os.write(write_fd, b"start\n")
        # the monitor's first reading sees both (it is taken before "started" is emitted); under
        # the suite's load a fixed 0.5 s once ended before it (2026-12-06)
        deadline = time.monotonic() + 30
        while {"started": True} not in emitted and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(ours, signal.SIGKILL)  # both exit inside the window, before its last reading
        foreign.kill()
        foreign.wait()
        holders.clear()
        time.sleep(0.3)
        os.write(write_fd, b"stop\n")
        runner.join(10)
    finally:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait()
        os.close(write_fd)
    window = emitted[-1]["window"]
    named = window["gpu"]["devices"][0]["foreign_processes"]
    assert [p["pid"] for p in named] == [foreign.pid], named
    assert named[0]["command"] and "sleep" in named[0]["command"] and named[0]["user"], named


def test_steal_time_on_the_engines_cpus_disturbs_above_its_limit():
    window = recorded("idle")
    window["cpu"]["engine_cpus_steal_share"] = 0.12  # as the hypervisor took from CPU 1 on 2026-12-03
    judged = judge_window(window, LIMITS)
    assert judged.disturbed and any("steal time" in r and "12%" in r for r in judged.reasons), judged.reasons
    window["cpu"]["engine_cpus_steal_share"] = 0.03
    assert not any("steal" in r for r in judge_window(window, LIMITS).reasons)
