"""One secret rule in every place that shows or stores argv, environment, config or logs
(core/_secret_rule.py; issue 43: ``--passwd x`` was hidden by the probe and shown by the window
monitor and in the stored argv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core._env import probe_script
from core._env.probe import probe_script_text
from core._hosts import agent
from core._hosts.base import AGENT_SOURCE
from core._redact import redact
from core._secret_rule import REDACTED, redact_line, secret_name

SECRETS = ["--passwd", "hunter22", "--api-key", "sk-live-1234", "--hf-token=hf_abcdef", "PASSWORD=opensesame",
           "HF_TOKEN=hf_zyxwvu"]
ARGV = ["python", "-m", "server", "--max-num-batched-tokens", "8192", *SECRETS, "--port", "8000"]
HIDDEN = ("hunter22", "sk-live-1234", "hf_abcdef", "opensesame", "hf_zyxwvu")
KEPT = ("--max-num-batched-tokens 8192", "--port 8000", "--passwd", "--api-key", "PASSWORD=", "HF_TOKEN=")


def assert_hidden(text: str) -> None:
    assert not [s for s in HIDDEN if s in text], text
    assert all(k in text for k in KEPT), text


def test_names_that_look_secret_and_counts_of_tokens_that_do_not():
    for name in ("--passwd", "--api-key", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                 "--private-key-file", "SLACK_SIGNING_SECRET", "db.password"):
        assert secret_name(name), name
    for name in ("--max-num-batched-tokens", "--speculative-num-draft-tokens", "max_tokens", "--port", "CUDA_HOME"):
        assert not secret_name(name), name


def test_every_place_hides_the_same_values():
    command_line = " ".join(ARGV)
    log = f"INFO args: {command_line}\nINFO url postgresql://spec:pw-9876@db/runs"
    places = {
        "stored argv (storage, JSON, pages)": " ".join(redact(list(ARGV))),
        "window monitor's process lines": agent.redact_command(ARGV),
        "the probe's busiest processes": probe_script._redact_command(ARGV),
        "an engine log's copy in the database": redact(log),
        "a line of text": redact_line(command_line),
    }
    for place, text in places.items():
        assert_hidden(text), place
    assert "pw-9876" not in redact(log) and f"spec:{REDACTED}@db" in redact(log)
    environment = probe_script.redact_environment({"HF_TOKEN": "hf_x", "DB_URL": "postgresql://u:pw@h/d", "PATH": "/b"})
    assert environment == {"HF_TOKEN": REDACTED, "DB_URL": f"postgresql://u:{REDACTED}@h/d", "PATH": "/b"}


@pytest.mark.parametrize("source", ["agent", "probe"])
def test_the_sources_sent_to_a_host_carry_the_rule_and_run_without_specperf(tmp_path, source):
    """What runs on a host is the script with the rule's source joined in: run isolated (no
    specperf importable), it hides what the local import hides."""
    text = AGENT_SOURCE if source == "agent" else probe_script_text()
    assert not [line for line in text.splitlines() if line.startswith("from core._secret_rule import")]
    script = tmp_path / "joined.py"
    script.write_text(text)
    call = "redact_command(ARGV)" if source == "agent" else "_redact_command(ARGV)"
    code = (f"import json, sys; ns = {{'__name__': 'joined'}}; exec(open({str(script)!r}).read(), ns); "
            f"ns['ARGV'] = json.loads(sys.argv[1]); print(eval({call!r}, ns))")
    out = subprocess.run([sys.executable, "-I", "-c", code, json.dumps(ARGV)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PATH": os.environ["PATH"]}, check=True).stdout
    assert_hidden(out)
