"""Config validation: every mistake names the file, the key and what was expected."""

from __future__ import annotations

import subprocess

import pytest

from bot import load_config as load_bot_config
from core import ConfigError, load_config, parse_config
from tests.conftest import SPECPERF

GOOD = """
[engines.e]
kind = "vllm"
model = "/models/m"
args = ["--port-ignored"]
[engines.e.modes]
baseline = []
eagle3 = ["--speculative-config", '{"model": "${SPEC_DRAFT}"}']
[workloads.w]
output_len = 64
"""


def test_good_config_parses_and_expands_variables(monkeypatch):
    monkeypatch.setenv("SPEC_DRAFT", "/drafts/d")
    config = parse_config(GOOD)
    engine = config.engine("e")
    assert engine.modes["eagle3"][1] == '{"model": "/drafts/d"}'
    assert config.workload("w").output_len == 64
    assert "local" in config.hosts


def test_unknown_key_names_file_and_key(tmp_path):
    path = tmp_path / "specperf.toml"
    path.write_text('[engines.e]\nkind = "vllm"\nmodel = "m"\nmodle_path = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert "engines.e.modle_path" in message
    assert "unknown key" in message


def test_wrong_type_says_what_was_expected():
    with pytest.raises(ConfigError, match=r"workloads\.w\.concurrency: .*integer.*'many'"):
        parse_config('[workloads.w]\nconcurrency = "many"\n')


def test_unset_variable_is_named(monkeypatch):
    monkeypatch.delenv("SPEC_DRAFT", raising=False)
    with pytest.raises(ConfigError, match=r"\$\{SPEC_DRAFT\}, which is not set"):
        parse_config(GOOD)


def test_engine_on_unknown_host():
    with pytest.raises(ConfigError, match="'gpu-a' is not a configured host"):
        parse_config('[engines.e]\nkind = "sglang"\nmodel = "m"\nhost = "gpu-a"\n')


def test_kind_specific_requirements():
    with pytest.raises(ConfigError, match='kind = "command" needs command'):
        parse_config('[engines.e]\nkind = "command"\n')
    with pytest.raises(ConfigError, match='kind = "vllm" needs model'):
        parse_config('[engines.e]\nkind = "vllm"\n')


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[engines\n", "x.toml")
    with pytest.raises(ConfigError, match="cannot read config .*nope.toml"):
        load_config(tmp_path / "nope.toml")


def test_unknown_engine_lists_known():
    with pytest.raises(ConfigError, match=r"no engine named 'x' .*known engines: e"):
        parse_config('[engines.e]\nkind = "vllm"\nmodel = "m"\n').engine("x")


def test_embedded_default_describes_the_test_engine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECPERF_CONFIG", raising=False)
    monkeypatch.setenv("SPECPERF_TESTENV", "/opt/testenv")
    config = load_bot_config()
    engine = config.engine("tiny-vllm")
    assert engine.python == "/opt/testenv/engine-venv/bin/python"
    assert {"baseline", "eagle3", "eagle3-unrelated"} <= set(engine.modes)


def test_cli_exits_2_on_a_wrong_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[workloads.w]\noutput_length = 5\n')
    result = subprocess.run(
        [*SPECPERF, "--config", str(path), "measure"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert "workloads.w.output_length" in result.stderr
    assert "Traceback" not in result.stderr
