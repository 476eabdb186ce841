"""The guide's Python examples run as written: the ```python blocks of docs/python.md,
in order, in one namespace, in a folder whose ``specperf.toml`` names the fast fake engine
(tests/fake_engine_repo.py) from a real git repository with ``main`` and a ``slow-step``
commit with twice the inter-token latency."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import pytest

import core
from tests.conftest import ROOT
from tests.fake_engine_repo import make_repo

KNOBS = dict(noise=0.004, fails=False, comment="")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs/python.md").read_text(), re.S)


@pytest.mark.e2e  # the fast fake engine, launched as a process by compare_commit
def test_the_readme_python_examples_run_as_written(tmp_path, unused_tcp_port, monkeypatch):
    repo = tmp_path / "engine-repo"
    shas = make_repo(repo, [("v1", "base", dict(itl=2.0, **KNOBS)),
                            ("slow-step", "model runner: slower decode step", dict(itl=4.0, **KNOBS))])
    subprocess.run(["git", "-C", str(repo), "update-ref", "refs/heads/main", shas["v1"]], check=True)
    (tmp_path / "specperf.toml").write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo}"\nsource_dir = "src"\nsource_package = "fake_engine"\n'
        f'python = "{sys.executable}"\ncommand = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\n'
        f'port = {unused_tcp_port}\nenv = {{ PYTHONPATH = "{ROOT}" }}\nready_timeout_s = 20\nstop_grace_s = 3\n'
        '[engines.fake.modes]\nbaseline = []\n'
        '[compare]\nmin_trials = 3\nmax_trials = 3\ncooldown_s = 0\n'
        '[workloads.default]\noutput_len = 64\nconcurrency = 2\nrequests = 6\nwarmup_requests = 1\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECPERF_HOME", str(tmp_path / "home"))
    blocks = python_blocks()
    assert len(blocks) == 3
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, "docs/python.md", "exec"), namespace)
    lines = out.getvalue().splitlines()
    result = namespace["result"]
    assert result.status is core.RunStatus.DONE and lines[0] == "done"
    verdict = result.verdicts["baseline"]
    assert verdict.verdict in set(core.VerdictKind) and verdict.change_pct < -20  # about -50% tok/s
    assert lines[1].startswith(f"baseline {verdict.verdict} {verdict.change_pct:+.1f}%")
    report = namespace["report"]
    assert report.host == "local" and report.checks and f"worst check: {report.worst}" in lines
    assert namespace["ranked"].entries[0].sha == shas["slow-step"]
    assert lines[-1] == f"1 {shas['slow-step'][:12]} model runner: slower decode step"
