"""The bot's pieces that need no Slack: the command parser (never exits, rejects shell text),
the [slack] config (strict, secrets hidden, allow-lists), the app manifest, and the job queue's
claim (each job claimed once, on SQLite and PostgreSQL, by racing claimers)."""

from __future__ import annotations

import json
import threading

import pytest

import core
import storage
from bot import parse_config as parse_bot_config
from bot._common import owner_alive
from bot._slack.commands import UsageError, parse
from tests.conftest import ROOT


def test_parser_reads_every_subcommand():
    c = parse("compare abc123 --base v1.2 --host local --engine e --modes baseline,eagle3 --rounds 3")
    assert (c.name, c.commit, c.base, c.host, c.engine, c.modes, c.rounds) == \
        ("compare", "abc123", "v1.2", "local", "e", ["baseline", "eagle3"], 3)
    assert parse("status").job is None and parse("status 7").job == 7
    assert parse("cancel 3").job == 3 and parse("history e").engine == "e" and parse("env").host is None
    assert parse("").name == parse("help").name == "help"


@pytest.mark.parametrize("text", ["compare", "compare a b", "compare a --rounds 0", "compare a --modes a,a",
                                  "compare -x", "compare --upload-pack=x", "compare 'a;b'", "compare 'a b'",
                                  "compare a --base '$(id)'", "compare a --host 'h;x'", "cancel", "cancel -1",
                                  "status x", "queue now", "rm -rf /", "compare 'oops", "compare a --help"])
def test_parser_turns_every_mistake_into_a_usage_error_and_never_exits(text):
    with pytest.raises(UsageError) as info:
        parse(text)
    assert str(info.value)  # a message, not a SystemExit


SLACK = """
[engines.e]
kind = "command"
command = ["x"]
[hosts.gpu]
ssh = "root@gpu"
[slack]
mode = "http"
bot_token = "${TEST_BOT_TOKEN}"
signing_secret = "s3cret-value"
[slack.allow]
users = ["U1"]
channels = ["C1"]
[slack.allow.hosts.gpu]
users = ["U2"]
channels = ["C2"]
[slack.allow.engines.e]
users = ["U3"]
"""


def test_slack_config_expands_tokens_hides_them_and_checks_allow_lists(monkeypatch):
    monkeypatch.setenv("TEST_BOT_TOKEN", "xoxb-very-secret")
    config = parse_bot_config(SLACK)
    assert config.slack.bot_token.get_secret_value() == "xoxb-very-secret"
    assert "xoxb-very-secret" not in repr(config) and "s3cret-value" not in str(config.slack)
    allow = config.slack.allow
    assert allow.allows("U1", "C1", "local", "e")
    assert allow.allows("U2", "C2", "gpu", None) and not allow.allows("U2", "C2", "local", "e")
    assert allow.allows("U3", "C1", "local", "e") and not allow.allows("U3", "C2", "local", "e")
    assert not allow.allows("U9", "C1") and not allow.allows("U1", "C9")
    assert not parse_bot_config('[slack]\nbot_token = "x"\n').slack.allow.allows("U1", "C1")  # nobody by default


@pytest.mark.parametrize("bad, message", [
    ('[slack]\nmode = "webhook"\n', "slack.mode"),
    ('[slack]\nbot_tokn = "x"\n', "unknown key 'slack.bot_tokn'"),
    ('[slack.allow]\nuser = ["U1"]\n', "unknown key 'slack.allow.user'"),
    ('[slack.allow.hosts.nowhere]\nusers = ["U1"]\n', "no such host"),
    ('[slack]\nbot_token = "${NOT_SET_ANYWHERE}"\n', "NOT_SET_ANYWHERE"),
])
def test_slack_config_mistakes_are_errors(bad, message):
    with pytest.raises(core.ConfigError) as info:
        parse_bot_config(bad, "t.toml")
    assert message in str(info.value)


def test_manifest_has_the_command_scopes_and_socket_mode():
    manifest = json.loads((ROOT / "slack/manifest.json").read_text())
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/specperf"]
    assert {"commands", "chat:write", "files:write"} <= set(manifest["oauth_config"]["scopes"]["bot"])
    assert manifest["settings"]["socket_mode_enabled"] is True


def test_racing_claimers_take_each_job_exactly_once(db_url):
    db = storage.open_database(db_url)  # the PostgreSQL database is shared by the session: earlier jobs are closed
    for old in storage.list_jobs(db, limit=10_000):
        storage.update_job(db, old.id, status="done")
    ids = [storage.enqueue(db, storage.Job(host=h, engine_name="e", workload_name="w", user_id="U",
                                           channel_id="C")).id for h in ["local", "gpu"] * 15]
    claimed: list[tuple[str, int]] = []
    lock = threading.Lock()

    def claimer(host: str) -> None:
        while (job := storage.claim_next(db, host)) is not None:
            with lock:
                claimed.append((host, job.id))

    threads = [threading.Thread(target=claimer, args=(h,)) for h in ["local", "gpu"] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(i for _, i in claimed) == sorted(ids)  # every job once, none twice
    assert all(storage.get_job(db, i).host == h for h, i in claimed)
    assert storage.list_jobs(db, ("queued",)) == []


def test_queue_operations_on_sqlite_and_postgresql(db_url, monkeypatch):
    db = storage.open_database(db_url)  # the PostgreSQL database is shared by the session: earlier jobs are closed
    for old in storage.list_jobs(db, limit=10_000):
        storage.update_job(db, old.id, status="done")

    def job(key=None):
        return storage.Job(host="local", engine_name="e", workload_name="w", user_id="U", channel_id="C",
                           dedupe_key=key, args={"head_ref": "slow"}, slack={"channel": "C"})

    key = f"T1:trig-{__import__('time').time_ns()}"
    first = storage.enqueue(db, job(key))
    assert storage.enqueue(db, job(key)) is None  # a redelivery
    second, third = storage.enqueue(db, job()), storage.enqueue(db, job())
    assert storage.cancel_queued(db, third.id, "by U") and not storage.cancel_queued(db, third.id, "again")
    claimed = storage.claim_next(db, "local")
    assert claimed.id == first.id and claimed.owner["pid"] == __import__("os").getpid()
    storage.update_job(db, first.id, slack={"thread_ts": "1.2"})
    storage.update_job(db, first.id, slack={"progress_ts": "1.3"})
    assert storage.get_job(db, first.id).slack == {"channel": "C", "thread_ts": "1.2", "progress_ts": "1.3"}
    assert storage.orphaned_jobs(db, owner_alive(db)) == []  # its owner (this process) is alive
    # an owner in another PID namespace (a container) that never took a lease: dead
    storage.update_job(db, first.id, owner={**storage.identity().as_owner(), "instance": "gone", "pid_ns": "pid:[1]"})
    assert [j.id for j in storage.orphaned_jobs(db, owner_alive(db))] == [first.id]
    assert storage.requeue_or_fail(db, first.id, True, "crash") == "queued"
    assert [j.id for j in storage.list_jobs(db, ("queued",))] == [first.id, second.id]  # it keeps its place
    storage.record_command(db, "U", "C", "T1", "compare slow", "queued job 1", first.id)
    assert [(c.command, c.result, c.job_id) for c in storage.list_commands(db)][-1] == ("compare slow", "queued job 1",
                                                                                          first.id)


def test_help_lists_every_command_the_dispatcher_knows_with_an_example_that_parses():
    from bot._slack.commands import COMMANDS, HELP, QUEUED, SUBCOMMANDS
    from bot._slack.handlers import SlackCommands

    handlers = {name.removeprefix("_cmd_") for name in vars(SlackCommands) if name.startswith("_cmd_")}
    assert handlers | {"help"} == set(SUBCOMMANDS)  # every parsed command has a handler, and back
    assert {"calibrate", "watch"} <= set(QUEUED) and {"compare", "bisect"} <= set(QUEUED)
    lines = HELP.splitlines()[1:]
    assert len(lines) == len(SUBCOMMANDS)
    for name, line in zip(SUBCOMMANDS, lines, strict=True):
        assert line.startswith(f"`/specperf {name}")
        example = line.rsplit("e.g. `/specperf ", 1)[1].rstrip("`")
        assert example == COMMANDS[name].example and parse(example).name == name


def test_calibrate_and_watch_parse_with_their_defaults_and_refuse_bad_values():
    c = parse("calibrate")
    assert (c.commit, c.launches, c.change_pct, c.power, c.modes) == ("HEAD", 6, 5.0, 0.9, None)
    c = parse("calibrate --commit v1 --launches 4 --change-pct 3 --power 0.8 --modes baseline --host h --engine e")
    assert (c.commit, c.launches, c.change_pct, c.power, c.modes, c.host, c.engine) == \
        ("v1", 4, 3.0, 0.8, ["baseline"], "h", "e")
    assert parse("watch").seconds == 30.0 and parse("watch 2.5 --host h").seconds == 2.5
    for text in ("calibrate --commit 'a;b'", "calibrate --launches x", "calibrate --power high", "watch 0",
                 "watch 4000", "watch soon", "watch 5 6", "calibrate main"):
        with pytest.raises(UsageError):
            parse(text)
