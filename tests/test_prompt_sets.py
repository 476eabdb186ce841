"""Prompt sets read from files and built in (core._prompts): each format, each kind of bad file
as one config error naming the file and line before anything is launched, and the seeded
selection each launch sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import core
from core._config import load_config
from core._measure.client import workload_prompts
from core._prompts import read_prompt_set, select_prompts
from tests.conftest import ROOT, SPECPERF

SPEC_BENCH = [{"question_id": 81, "category": "writing", "turns": ["Write a travel blog post about Hawaii.", "Now"]},
              {"question_id": 101, "category": "reasoning", "turns": ["You overtake the second person: where?"]}]
SHAREGPT = [{"id": "a", "conversations": [{"from": "human", "value": "Hello, who are you?"},
                                          {"from": "gpt", "value": "An assistant."}]},
            {"id": "b", "conversations": [{"from": "gpt", "value": "starts with the model: skipped"}]},
            {"id": "c", "conversations": [{"from": "human", "value": "Explain TCP slow start."}]}]
JSONL = [{"prompt": "Summarise: the cat sat.", "category": "summary"},
         {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
          "category": "math"}]


def write_jsonl(path: Path, entries: list) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def config_with(tmp_path: Path, workload: str) -> Path:
    config = tmp_path / "specperf.toml"
    config.write_text(f"[workloads.w]\n{workload}\n")
    return config


def test_each_format_is_read_with_its_categories(tmp_path):
    spec = read_prompt_set(str(write_jsonl(tmp_path / "question.jsonl", SPEC_BENCH)))
    assert [(p.text, p.category) for p in spec] == [("Write a travel blog post about Hawaii.", "writing"),
                                                     ("You overtake the second person: where?", "reasoning")]
    assert spec[1].where.endswith("question.jsonl:2")
    (tmp_path / "sg.json").write_text(json.dumps(SHAREGPT))
    shared = read_prompt_set(str(tmp_path / "sg.json"))
    assert [p.text for p in shared] == ["Hello, who are you?", "Explain TCP slow start."]
    mine = read_prompt_set(str(write_jsonl(tmp_path / "mine.jsonl", JSONL)))
    assert mine[0].text == "Summarise: the cat sat." and mine[1].text is None
    assert mine[1].chat() == JSONL[1]["messages"]
    assert mine[0].chat() == [{"role": "user", "content": "Summarise: the cat sat."}]


def test_the_built_in_set_has_six_categories_of_twelve():
    prompts = read_prompt_set("categories")
    counts: dict[str, int] = {}
    for p in prompts:
        counts[p.category] = counts.get(p.category, 0) + 1
    assert counts == {name: 12 for name in ("chat", "code", "math", "summarisation", "translation", "qa")}
    assert len({p.text for p in prompts}) == 72
    assert core.Config().workloads["categories"].prompts == "categories"  # a named workload in every config


@pytest.mark.parametrize("name, content, fmt, message", [
    ("missing.jsonl", None, "auto", r"prompt set .*missing.jsonl does not exist"),
    ("bad.jsonl", '{"prompt": "ok"}\n{"prompt": "no end"\n', "auto", r"bad.jsonl:2: not JSON"),
    ("empty.jsonl", "\n\n", "auto", r"empty.jsonl holds no usable prompt"),
    ("noprompt.jsonl", '{"prompt": "ok"}\n{"text": "wrong key"}\n', "auto", r"noprompt.jsonl:2: no usable prompt"),
    ("turns.jsonl", '{"question_id": 1, "turns": []}\n', "spec-bench", r"turns.jsonl:1: no usable prompt"),
    ("sg.json", '[{"conversations": [{"from": "gpt", "value": "x"}]}]', "sharegpt", r"sg.json holds no usable"),
    ("sg2.json", '[{"conversations": [\n{"from": "human" "value": "x"}]}]', "sharegpt", r"sg2.json:2: not JSON"),
    ("sg3.json", '[{"turns": ["x"]}]', "sharegpt", r"sg3.json: entry 1: no \"conversations\""),
    ("array.jsonl", "[1, 2]\n", "jsonl", r"array.jsonl:1: expected a JSON object"),
])
def test_a_bad_file_is_one_config_error_naming_file_and_line(tmp_path, name, content, fmt, message):
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(core.ConfigError, match=message):
        load_config(config_with(tmp_path, f'prompts = "{name}"\nformat = "{fmt}"'))


def test_categories_and_api_are_checked_against_the_file(tmp_path):
    write_jsonl(tmp_path / "mine.jsonl", JSONL)
    with pytest.raises(core.ConfigError, match=r"categories \['code'\] are not in prompt set .*mine.jsonl "
                                               r"\(its categories: math, summary\)"):
        load_config(config_with(tmp_path, 'prompts = "mine.jsonl"\napi = "chat"\ncategories = ["code"]'))
    with pytest.raises(core.ConfigError, match=r"mine.jsonl:2 holds chat messages, which only api = \"chat\" can send"):
        load_config(config_with(tmp_path, 'prompts = "mine.jsonl"'))
    with pytest.raises(core.ConfigError, match=r"requests = 1 is fewer than the 2 categories"):
        load_config(config_with(tmp_path, 'prompts = "mine.jsonl"\napi = "chat"\nrequests = 1'))
    kept = load_config(config_with(tmp_path, 'prompts = "mine.jsonl"\napi = "chat"\ncategories = ["math"]\n'
                                             'requests = 1'))
    assert [p.category for p in workload_prompts(kept.workload("w"))[0]] == ["math"]


def test_a_bad_prompt_file_stops_compare_before_anything_is_launched(tmp_path):
    import subprocess
    (tmp_path / "bad.jsonl").write_text('{"prompt": "fine"}\nnot json\n')
    config = config_with(tmp_path, 'prompts = "bad.jsonl"')
    out = subprocess.run([*SPECPERF, "--config", str(config), "compare", "HEAD", "--workload", "w",
                          "--db", f"sqlite:///{tmp_path}/db.sqlite"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "SPECPERF_HOME": str(tmp_path / "home")})
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{tmp_path / 'bad.jsonl'}:2: not JSON" in out.stderr
    assert not (tmp_path / "db.sqlite").exists() and not (tmp_path / "home").exists()


def test_the_selection_is_seeded_balanced_and_keeps_warm_up_apart():
    prompts = read_prompt_set("categories")
    measured = select_prompts(prompts, 24, seed=0, stream=0, mix="balanced", prompt_words=32)
    assert measured == select_prompts(prompts, 24, seed=0, stream=0, mix="balanced", prompt_words=32)
    assert [p.category for p in measured[:6]] == ["chat", "code", "math", "qa", "summarisation", "translation"]
    assert {p.category: sum(q.category == p.category for q in measured) for p in measured} == \
        {name: 4 for name in ("chat", "code", "math", "qa", "summarisation", "translation")}
    warm = select_prompts(prompts, 6, seed=0, stream=1, mix="balanced", prompt_words=32)
    assert not {p.text for p in warm} & {p.text for p in measured}
    other = select_prompts(prompts, 24, seed=1, stream=0, mix="balanced", prompt_words=32)
    assert [p.text for p in other] != [p.text for p in measured]
    mixed = select_prompts(prompts[:14], 14, seed=0, stream=0, mix="file", prompt_words=32)
    assert sorted(p.text for p in mixed) == sorted(p.text for p in prompts[:14])  # the file's mix: 12 chat, 2 code
    words = select_prompts((), 3, seed=0, stream=0, mix="balanced", prompt_words=5)
    assert all(len(p.text.split()) == 5 and p.category is None for p in words)


def test_a_relative_path_is_taken_from_the_config_files_folder(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    write_jsonl(folder / "mine.jsonl", JSONL[:1])
    monkeypatch.chdir(tmp_path)
    config = load_config(config_with(folder, 'prompts = "mine.jsonl"'))
    assert config.workload("w").prompts == str(folder / "mine.jsonl")


@pytest.mark.parametrize("content, message", [
    (b"\xef\xbb\xbf" + json.dumps(SHAREGPT).encode(), None),  # a byte-order mark is not content
    (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', r"bad.jsonl:2: not UTF-8 text \(byte 0xe9\)"),
    (b'{"prompt": "ok", "category": "co\\nde"}\n', r"bad.jsonl:1: category 'co\\nde' holds a control character"),
])
def test_encodings_and_category_names(tmp_path, content, message):
    (tmp_path / "bad.jsonl").write_bytes(content)
    config = config_with(tmp_path, 'prompts = "bad.jsonl"')
    if message is None:
        assert sorted({p.text for p in workload_prompts(load_config(config).workload("w"))[0]}) == \
            ["Explain TCP slow start.", "Hello, who are you?"]
        return
    with pytest.raises(core.ConfigError, match=message) as caught:
        load_config(config)
    assert "specperf.toml: workloads.w: " in str(caught.value)  # which workload names the file


@pytest.mark.parametrize("path", ["loop1", "~nosuchuser-specperf/x.jsonl"])
def test_a_path_that_cannot_be_resolved_is_a_config_error(tmp_path, path):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(core.ConfigError, match=r"workloads.w"):
        load_config(config_with(tmp_path, f'prompts = "{path}"'))
