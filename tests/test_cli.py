"""The ``specperf`` command line as a person meets it (bot/cli/__init__.py and the options every
subcommand shares): ``--json -`` puts the JSON alone on standard output, and a run id that is
not in the database is its own error."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from bot import cli
from tests.conftest import specperf_in_process

FIXTURE_DB = Path(__file__).parent / "fixtures" / "history.sqlite"
# the positional arguments each subcommand needs to parse at all
POSITIONAL = {"compare": ["abc123"], "show": ["1"], "recheck": ["1"], "triage": ["a", "b"], "bisect": ["a", "b"]}


def _json_commands() -> list[str]:
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, parser in sub.choices.items()
                  if any(a.dest == "json" for a in parser._actions))


def test_every_json_option_takes_a_dash_or_no_path_for_standard_output():
    commands = _json_commands()
    # every command that writes a document has the option (a new one joins this list by itself)
    assert {"bisect", "calibrate", "compare", "env", "measure", "recheck", "report", "show", "triage"} <= set(commands)
    for name in commands:
        for given in (["--json", "-"], ["--json"]):
            args = cli._parser().parse_args([name, *POSITIONAL.get(name, []), *given])
            assert args.json == "-", (name, given)
        assert cli._parser().parse_args([name, *POSITIONAL.get(name, []), "--json", "out.json"]).json == "out.json"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPECPERF_CONFIG"}
    return {**env, "SPECPERF_HOME": str(tmp_path / "home"), "COLUMNS": "200"}


@pytest.mark.parametrize("given", [["--json", "-"], ["--json"]])
def test_show_json_to_stdout_is_only_the_json_and_the_tables_go_to_stderr(tmp_path, given):
    db = tmp_path / "history.sqlite"
    shutil.copy(FIXTURE_DB, db)
    done = specperf_in_process(["show", "1", "--db", f"sqlite:///{db}", *given], cwd=tmp_path, env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # nothing but the document
    assert report["run_id"] == 1 and list(report["modes"]) == ["baseline"]
    assert "run 1 (done)" in done.stderr and "chart:" in done.stderr
    assert not (tmp_path / "-").exists()


def test_env_and_its_watch_write_json_to_stdout(tmp_path):
    config = tmp_path / "specperf.toml"
    config.write_text(f'[engines.stand-in]\nkind = "vllm"\npython = "{sys.executable}"\nmodel = "m"\n')
    env = _env(tmp_path)
    probe = specperf_in_process(["--config", config, "env", "--cheap", "--json", "-"], cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr
    doc = json.loads(probe.stdout)
    assert doc["snapshot"]["kind"] == "cheap" and "checks (idle)" in probe.stderr
    watch = specperf_in_process(["--config", config, "env", "--watch", "0.3", "--json"], cwd=tmp_path, env=env)
    assert watch.returncode == 0, watch.stderr
    doc = json.loads(watch.stdout)
    assert doc["window"]["window_s"] > 0 and "disturbed" in doc["disturbed"]
    assert "window: host local" in watch.stderr
    assert not (tmp_path / "home" / "env").exists()  # no file written beside the stdout document


def test_a_run_id_not_in_the_database_is_its_own_error(tmp_path):
    db = tmp_path / "history.sqlite"
    shutil.copy(FIXTURE_DB, db)
    env = _env(tmp_path)
    done = specperf_in_process(["show", "99999", "--db", f"sqlite:///{db}"], cwd=tmp_path, env=env)
    assert done.returncode == 2  # as other usage and storage errors (README's exit statuses)
    message = " ".join(done.stderr.split())
    assert message == (f"no such run: 99999 is not in the database sqlite:///{db}; `specperf history` lists the runs "
                       "there")
    assert "config error" not in message


def test_a_report_file_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    """A path that passes the check before the work but fails on writing (a full disk, here
    /dev/full) is a config error naming the file and the cause, not a traceback after the run."""
    import core
    from bot._common import write_json

    with pytest.raises(core.ConfigError) as caught:
        write_json("/dev/full", {"run_id": 1}, console=None)
    assert str(caught.value).startswith("--json /dev/full: cannot write it (No space left on device); what was "
                                        "measured is stored")
    write_json(tmp_path / "ok.json", {"run_id": 1}, console=None, label=None)
    assert json.loads((tmp_path / "ok.json").read_text()) == {"run_id": 1}
