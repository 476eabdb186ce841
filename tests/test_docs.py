"""The README, CONTRIBUTING.md and the guide in docs/ say what the code does: every relative link
resolves (file and heading), every `specperf` command example names a subcommand and options
that its parser accepts, the README stays a five-minute read, and docs/configuration.md lists
every key of the configuration with its default, as the configuration's own definitions
(core/_config/__init__.py, bot/_settings.py) give them."""

from __future__ import annotations

import argparse
import re
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from bot._settings import BotConfig
from bot.cli import _parser
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_readme_is_short_and_the_guide_has_its_pages():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES
    assert len(PAGES) >= 12, [p.name for p in PAGES]


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def _commands(page: Path) -> list[str]:
    """Every `specperf ...` example of a page: lines of its shell code blocks that run specperf
    (``specperf``, ``.venv/bin/specperf``, after ``VAR=value`` words), and inline code spans that
    start with it."""
    text = page.read_text()
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    found = []
    for line in lines:
        words = line.split()
        while words and re.match(r"[A-Z_]+=", words[0]):
            words = words[1:]
        if len(words) > 1 and words[0] in ("specperf", ".venv/bin/specperf"):
            found.append(" ".join(["specperf", *words[1:]]))
    return found


def _options(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Subcommand name -> the option strings its parser accepts (the top level's included)."""
    top = {s for action in parser._actions for s in action.option_strings}
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: top | {s for action in p._actions for s in action.option_strings} for name, p in sub.choices.items()}


def test_every_command_example_uses_options_its_parser_accepts():
    options = _options(_parser())
    wrong, seen = [], 0
    for page in PAGES:
        for command in _commands(page):
            words = command.split()
            if words[1] == "--config":
                words = words[:1] + words[3:]
            name = words[1]
            seen += 1
            if name in ("--help", "-h"):
                continue
            if name not in options:
                wrong.append(f"{page.relative_to(ROOT)}: `{command}`: no subcommand {name}")
                continue
            for word in words[2:]:
                flag = re.sub(r"[\[\]]", "", word).split("=")[0]
                if flag.startswith("--") and flag.rstrip(".") not in options[name] and flag != "--":
                    wrong.append(f"{page.relative_to(ROOT)}: `{command}`: {name} has no option {flag}")
    assert wrong == []
    assert seen >= 20  # the examples were found at all


def _table_of(annotation: object) -> tuple[str, type[BaseModel]] | None:
    """How a field nests a config model: ("table" | "named" | "array", model), or None for a value."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table", annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _table_of(args[0])
    if origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return "named", args[1]
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return "array", args[0]
    return None


def _toml(value: object) -> str:
    """A default as the reference writes it (TOML; ``(none)`` for unset)."""
    if value is None:
        return "(none)"
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    return repr(value)


def _reference(model: type[BaseModel], path: str = "", array: bool = False) -> dict[str, dict[str, str]]:
    """Section heading (``[compare]``, ``[[watches]]``, ``Top level``) -> key -> default, for
    every table the configuration accepts."""
    rows, nested = {}, {}
    for key, field in model.model_fields.items():
        table = _table_of(field.annotation)
        if table is None:
            required = field.default is PydanticUndefined and field.default_factory is None
            rows[key] = "required" if required else _toml(field.get_default(call_default_factory=True))
            continue
        kind, sub = table
        sub_path = f"{path}.{key}" if path else key
        nested |= _reference(sub, sub_path + (".NAME" if kind == "named" else ""), kind == "array")
    heading = (f"[[{path}]]" if array else f"[{path}]") if path else "Top level"
    return ({heading: rows} if rows else {}) | nested


def test_the_configuration_reference_lists_every_key_with_its_default():
    documented: dict[str, dict[str, str]] = {}
    section = None
    for line in (ROOT / "docs/configuration.md").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
            documented[section] = {}
        elif section and (row := re.match(r"\| `([a-z_]+)` \| `(.*?)` \|", line)):
            documented[section][row.group(1)] = row.group(2)
    assert documented == _reference(BotConfig)


def test_architecture_names_every_package_and_only_files_that_exist():
    """ARCHITECTURE.md stays true: each ``core`` and ``bot`` package (folder or top-level
    module) is named there, and every path it names (``core/_env/probe.py``, ``_jobs/``, a
    module of a table row) is a file or folder of the tree."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    spans = set(re.findall(r"`([^`\s]+)`", text))
    missing = []
    for top in ("core", "bot"):
        for item in sorted((ROOT / top).iterdir()):
            if item.name.startswith(("__", ".")) or item.suffix not in (".py", ""):
                continue
            name = item.name + "/" if item.is_dir() else item.name
            if name not in spans:
                missing.append(f"{top}/{name}")
    assert missing == [], "packages ARCHITECTURE.md does not name"
    names = [s for s in spans if re.fullmatch(r"[a-z_]+(/[a-z_]+)*(\.py|/)", s)]
    places = [ROOT, *(ROOT / t for t in ("core", "bot", "storage")),
              *(p for t in ("core", "bot") for p in (ROOT / t).iterdir() if p.is_dir())]
    assert names and [n for n in names if not any((p / n).exists() for p in places)] == []
    # the modules column of core's table: `| `_env/` | concern | `probe`, `checks`, ... |`
    rows = re.findall(r"^\| `(_?[a-z]+)/` \|[^|]*\| ([^|]+) \|$", text, flags=re.M)
    assert len(rows) >= 8
    absent = [f"{pkg}/{m}" for pkg, modules in rows for m in re.findall(r"`([a-z_]+/?)`", modules)
              if not ((ROOT / "core" / pkg / f"{m}.py").exists() or (ROOT / "core" / pkg / m).is_dir())]
    assert absent == [], "modules ARCHITECTURE.md lists that core does not have"
