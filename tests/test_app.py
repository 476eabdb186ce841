"""The application layer (bot/_app.py) on a config alone: names to a validated request, modes
resolved by the one rule, options checked, observers composed. No host is reached."""

from __future__ import annotations

from pathlib import Path

import pytest

import core
from bot import _app as app
from bot import parse_config
from bot._slack.commands import UsageError, parse
from bot._slack.handlers import SlackCommands
from core._hosts import open_host

CONFIG = parse_config("""
[hosts.gpu-a]
ssh = "gpu-a.example"
[engines.sglang]
kind = "command"
command = ["serve"]
repo = "/repo"
host = "gpu-a"
[engines.sglang.modes]
eagle3 = ["--speculative"]
baseline = []
[engines.plain]
kind = "command"
command = ["serve"]
[engines.plain.modes]
fast = []
[compare]
modes = ["baseline", "eagle3"]
""")


def test_names_become_one_choice_on_the_engine_or_the_given_host():
    choice = app.choose(CONFIG, "sglang")
    assert (choice.engine_name, choice.workload_name, choice.host_name) == ("sglang", "default", "gpu-a")
    moved = app.choose(CONFIG, "sglang", host="local")
    assert moved.host_name == "local" and moved.engine.host == "local"
    with pytest.raises(core.ConfigError, match="more than one engine is configured"):
        app.choose(CONFIG)
    with pytest.raises(core.ConfigError, match="no workload named 'w'"):
        app.choose(CONFIG, "sglang", "w")


def test_modes_are_resolved_by_one_rule_for_every_front_end():
    assert app.resolve_modes(CONFIG, "sglang", None) == ["baseline", "eagle3"]
    message = "engine 'plain' has no mode (none chosen) (its modes: fast)"
    with pytest.raises(core.ConfigError) as cli:
        app.resolve_modes(CONFIG, "plain", None)
    assert str(cli.value) == message
    commands = SlackCommands(CONFIG, db=None, queue=None, notifier=None)
    with pytest.raises(UsageError) as slack:
        commands._target(parse("compare abc --engine plain"))
    assert str(slack.value) == message  # the Slack command says what the CLI says
    with pytest.raises(core.ConfigError, match=r"has no mode turbo \(its modes: eagle3, baseline\)"):
        app.bisect_mode(CONFIG, "sglang", "turbo")
    assert app.bisect_mode(CONFIG, "sglang", None) == "baseline"
    assert app.bisect_mode(CONFIG, "plain", None) == "fast"


def test_compare_options_are_checked_and_rounds_fix_the_launches():
    assert (app.compare_settings(CONFIG, rounds=3).min_trials, app.compare_settings(CONFIG, rounds=3).max_trials) == (6, 6)
    assert app.compare_settings(CONFIG, margin_pct=5.0).margin_pct == 5.0
    with pytest.raises(core.ConfigError, match="bad compare option"):
        app.compare_settings(CONFIG, min_trials=8, max_trials=4)


def test_a_request_carries_the_resolved_modes_and_the_engines_triage_rules(tmp_path: Path):
    host = open_host("local", CONFIG.hosts["local"], tmp_path)
    choice = app.choose(CONFIG, "sglang", host="local")
    request = app.compare_request(CONFIG, choice, host, "abc", None, None)
    assert request.modes == ["baseline", "eagle3"] and request.settings == CONFIG.compare
    bisect = app.bisect_request(CONFIG, choice, host, "good", "bad", None)
    assert bisect.mode == "baseline" and bisect.triage_rules == CONFIG.triage.rules_for("sglang", "command")


def test_observers_each_hear_every_hook_in_order():
    heard = []

    class Ear(core.CompareObserver):
        def __init__(self, name):
            self.name = name

        def progress(self, message):
            heard.append((self.name, message))

    app.CompareObservers(Ear("store"), None, Ear("view")).progress("launch 1")
    assert heard == [("store", "launch 1"), ("view", "launch 1")]
