"""specperf against an OpenAI-compatible server other than vLLM and SGLang: ``transformers serve``
(transformers 5.x, the CPU test engine's tiny model) launched directly by ``kind = "command"``,
no wrapper. It answers HTTP 422 to ``ignore_eos`` and ``min_tokens`` and ends its streams
without ``data: [DONE]``: the readiness probe must settle on ``max_tokens`` and the client
must accept its clean stream ends (issue 15 item 8).

Slow: two commits, one mode, two launches per arm (about 30 s each on a busy CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import storage
from tests.conftest import ROOT, SPECPERF, server_repo

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]


def test_compare_of_two_commits_served_by_transformers_serve_gives_a_verdict(testenv, tmp_path, unused_tcp_port):
    python = testenv / "serve-venv/bin/python"
    assert python.exists(), "run scripts/setup-test-engine (it makes serve-venv for transformers serve)"
    repo = server_repo(tmp_path / "server-repo", "on CPU")
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.hf]\nkind = "command"\nrepo = "{repo}"\npython = "{python}"\n'
        f'model = "{testenv / "models/target"}"\nport = {unused_tcp_port}\nready_timeout_s = 300\n'
        'command = ["{python}", "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1", '
        '"--port", "{port}", "--device", "cpu", "{model}"]\n'
        '[engines.hf.modes]\nbaseline = []\n'
        # this test is about the server kind: a launch another process disturbs is kept, not measured
        # again, so the launch count stays 4 (disturbance has its own tests)
        '[compare]\nmin_trials = 2\nmax_trials = 2\ncooldown_s = 0\nmodes = ["baseline"]\non_disturbed = "keep"\n'
        '[workloads.default]\noutput_len = 16\nconcurrency = 1\nrequests = 3\nwarmup_requests = 1\n'
    )
    url = f"sqlite:///{tmp_path}/db.sqlite"
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    out = subprocess.run([*SPECPERF, "--config", str(config), "compare", "HEAD", "--db", url,
                          "--json", str(tmp_path / "report.json")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=840)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    verdict = report["modes"]["baseline"]["verdict"]
    assert verdict["verdict"] in ("NO CHANGE", "INCONCLUSIVE", "IMPROVEMENT", "REGRESSION")
    assert verdict["n_pairs"] == 2
    assert report["modes"]["baseline"]["base"]["output_tok_s"] > 0
    (run, _), = storage.list_runs(storage.open_database(url), None, 5)
    stored = storage.load_run(storage.open_database(url), run.id)
    assert run.status == "done" and [t.status for t in stored.trials] == ["ok"] * 4
    assert all(t.output_tokens == 3 * 16 for t in stored.trials)  # held at max_tokens, no short answer
    # the readiness probe: ignore_eos refused, min_tokens refused, then max_tokens alone answered
    log = Path(stored.trials[0].log_path).read_text()
    answers = [line.split('HTTP/1.1" ')[1][:3] for line in log.splitlines() if '"POST /v1/completions HTTP/1.1"' in line]
    assert answers[:3] == ["422", "422", "200"], answers
