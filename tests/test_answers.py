"""What the arms answered, end to end on the fake engine from a real git repository (issues 37
and 38): the built-in prompt set's categories judged one by one, and answers compared before
speed.

The repository's commits: ``base``; ``code-slow`` (prompts of the built-in set's ``code``
category get 2x the token interval: about -50% tok/s for that category's requests, nothing for
the other five); ``wrong-fast`` (every answer changes, and tokens come twice as fast: +100% tok/s, several times
the pair spread the suite's load gave these launches, 71-91% of the CPU taken by others in
2026-12-06's run, where a 20% plant read short of IMPROVEMENT).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

import storage
from core._history.summary import build_summary
from tests.conftest import ROOT, free_port, record_verdict, specperf_in_process
from tests.fake_engine_repo import make_repo

# Matches exactly the 12 prompts of the built-in set's code category (checked below).
CODE = r"Python|\bC\b|SQL|Bash|JavaScript|Rust|Java\b|\bGo\b|regular expression"
BASE = dict(itl=2.0, noise=0.004, fails=False, comment="")
COMMITS = [
    ("base", "base", BASE),
    ("code-slow", "slower decoding of code", {**BASE, "slow_prompts": f"{CODE}=2.0"}),
    ("wrong-fast", "faster, with other answers", {**BASE, "itl": 1.0, "prefix": "x"}),
]


def config_for(tmp_path: Path, repo: Path, port: int, pairs: int) -> Path:
    """The fake engine (baseline only), the built-in prompt set at 2 requests per category,
    sequential pairs, ``pairs`` launches per arm."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\nstop_grace_s = 3\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n[engines.fake.modes]\nbaseline = []\n'
        f'[compare]\nmin_trials = {pairs}\nmax_trials = {pairs}\ncooldown_s = 0\non_disturbed = "keep"\n'
        'modes = ["baseline"]\npairing = "sequential"\n'
        '[workloads.categories]\nprompts = "categories"\napi = "chat"\noutput = "natural"\noutput_len = 24\n'
        'requests = 12\nwarmup_requests = 1\n')
    return config


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """Two compares on one repository: code-slow and wrong-fast, each against base."""
    root = tmp_path_factory.mktemp("answers")
    make_repo(root / "repo", COMMITS)
    port, reports = free_port(), {}
    # a wide terminal, so that the verdict cell "IMPROVEMENT (outputs changed)" is not wrapped
    env = {**__import__("os").environ, "SPECPERF_HOME": str(root / "home"), "COLUMNS": "250"}
    for head, pairs in (("code-slow", 6), ("wrong-fast", 4)):
        out = specperf_in_process(["--config", str(config_for(root, root / "repo", port, pairs)), "compare", head,
                                   "--base", "base", "--workload", "categories", "--db", f"sqlite:///{root}/db.sqlite",
                                   "--json", str(root / f"{head}.json")], cwd=ROOT, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        reports[head] = (json.loads((root / f"{head}.json").read_text()), out.stdout)
    return root, reports


def test_the_code_pattern_picks_exactly_the_code_category():
    import re

    from core._prompts import read_prompt_set
    prompts = read_prompt_set("categories")
    assert sorted({p.category for p in prompts if re.search(CODE, p.text or "")}) == ["code"]
    assert sum(1 for p in prompts if re.search(CODE, p.text or "")) == 12


@pytest.mark.e2e
def test_a_slowdown_of_one_category_is_named_as_that_category_only(answered, record_property):
    root, reports = answered
    report, stdout = reports["code-slow"]
    entry = report["modes"]["baseline"]
    categories = entry["verdict"]["categories"]
    assert categories["family"] == 6 and categories["alpha"] == pytest.approx(0.05 / 6)
    verdicts = {name: c["verdict"]["verdict"] for name, c in categories["categories"].items()}
    for name, category in categories["categories"].items():
        record_verdict(record_property, name, category["verdict"])
    assert verdicts["code"] == "REGRESSION", categories
    assert all(v in ("NO CHANGE", "INCONCLUSIVE") for name, v in verdicts.items() if name != "code"), verdicts
    assert -60.0 < categories["categories"]["code"]["verdict"]["change_pct"] < -35.0  # 2x ITL on code: about -50%
    assert "REGRESSION on code (" in categories["line"] and " only" in categories["line"]
    assert categories["line"] in stdout and "baseline: REGRESSION on code only" in stdout
    # the answers did not change: the slowdown is speed only
    assert entry["verdict"]["outputs"]["status"] == "same" and entry["above"] == []
    assert entry["verdict"]["outputs"]["same"] == 12
    # stored, and read back as it was decided
    stored = storage.load_run(storage.open_database(f"sqlite:///{root}/db.sqlite"), 1)
    assert stored.verdicts[0].categories["categories"]["code"]["verdict"]["verdict"] == "REGRESSION"
    requests = stored.trials[0].requests
    assert {r["category"] for r in requests} == {"chat", "code", "math", "summarisation", "translation", "qa"}
    assert all(r["text"].startswith("t0 t1 ") for r in requests)


@pytest.mark.e2e
def test_answers_that_change_are_said_above_a_faster_verdict(answered):
    root, reports = answered
    report, stdout = reports["wrong-fast"]
    entry = report["modes"]["baseline"]
    outputs = entry["verdict"]["outputs"]
    assert outputs["status"] == "changed" and outputs["changed"] == 12 and outputs["unstable"] == 0
    assert outputs["first"] == {"request": 0, "category": outputs["first"]["category"], "char": 0,
                                "base": "t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 t11 t1",
                                "head": "xt0 xt1 xt2 xt3 xt4 xt5 xt6 xt7 xt8 xt9 "}  # 40 characters each
    assert entry["above"][0].startswith("OUTPUTS CHANGED in baseline: 12 of 12 requests differ from base")
    assert "the speed verdict below compares different answers" in entry["above"][0]
    # it is faster, and never shown as a bare IMPROVEMENT
    assert entry["verdict"]["verdict"] == "IMPROVEMENT"
    assert "IMPROVEMENT (outputs changed)" in stdout
    assert stdout.index("OUTPUTS CHANGED in baseline") < stdout.index("IMPROVEMENT (outputs changed)")
    # the client's settings are in each arm's snapshot
    stored = storage.load_run(storage.open_database(f"sqlite:///{root}/db.sqlite"), 2)
    arm = next(s.data for s in stored.snapshots if s.phase == "arm-head")
    assert arm["client"]["temperature"] == 0.0 and arm["client"]["api"] == "chat"
    assert arm["client"]["output"] == "natural" and arm["client"]["prompts"] == "categories"
    assert arm["client"]["chat_template"] == "unknown: the engine names no model folder and no --chat-template"
    # counted by the period's summary, as a finding of its own
    db = storage.open_database(f"sqlite:///{root}/db.sqlite")
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    summary = build_summary(storage.load_series(db), since=since, runs=storage.load_findings(db, since=since))
    assert "1 compare whose outputs changed" in summary.headline, summary.headline
    (finding,) = [c for c in summary.runs.compares if c.outputs]
    assert finding.run_id == 2 and finding.line().startswith("OUTPUTS CHANGED (12 of 12 requests differ from base")


@pytest.mark.e2e
def test_the_history_pages_draw_a_series_per_category(answered):
    """``report --html``: beside the workload's series, one per category of the prompt set, its
    points the categories' own figures; the terminal summary keeps to the workload's series."""
    from core._experiments.categories import split_by_category
    from core._experiments.stats import ArmTrial
    from core._history.static_site import series_page

    root, _ = answered
    db = storage.open_database(f"sqlite:///{root}/db.sqlite")
    series = storage.load_series(db, by_category=True)
    assert {s.workload for s in series} == {"categories"} | {f"categories:{c}" for c in
                                                            ("chat", "code", "math", "qa", "summarisation", "translation")}
    assert [s.workload for s in storage.load_series(db)] == ["categories"]
    code = next(s for s in series if s.category == "code")
    stored = storage.load_run(db, 1)  # code-slow against base
    head = next(a.id for a in stored.arms.values() if a.role == "head")
    expected = [split_by_category(ArmTrial(t.output_tok_s, requests=tuple(t.requests)))["code"].output_tok_s
                for t in stored.trials if t.arm_id == head and t.status == "ok"]
    point = next(p for p in code.points if p.sha == stored.run.head_sha)
    assert point.trials_output_tok_s == pytest.approx(expected)  # code-slow was measured by run 1 only
    assert [v["verdict"] for v in point.verdicts] == ["REGRESSION"]  # the code category's own verdict
    chat = next(s for s in series if s.category == "chat")
    (chat_verdict,) = next(p for p in chat.points if p.sha == stored.run.head_sha).verdicts
    assert chat_verdict["verdict"] in ("NO CHANGE", "INCONCLUSIVE")

    site = root / "site"
    env = {**__import__("os").environ, "SPECPERF_HOME": str(root / "home"), "COLUMNS": "250"}
    (root / "report.toml").write_text("")
    done = specperf_in_process(["--config", str(root / "report.toml"), "report", "--db", f"sqlite:///{root}/db.sqlite",
                                "--since", "2020-01-01", "--html", str(site)], cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    pages = {p.name for p in site.glob("trend-*.html")}
    assert pages == {series_page(s.engine, s.host, s.mode, s.workload) for s in series} and len(pages) == 7
    run_page = (site / "run-1.html").read_text()
    assert "baseline per category: " in run_page
    assert f'<a href="{series_page(code.engine, code.host, code.mode, code.workload)}">code</a>' in run_page
    assert "categories:code" not in done.stdout  # the terminal summary: the workload's series only
