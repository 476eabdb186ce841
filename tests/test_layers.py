"""The import structure ARCHITECTURE.md describes: ``bot`` over ``storage`` over ``core``, and
inside ``core`` and ``bot`` each package (a sub-package or a top-level module) importing only
the ones in lower layers. Read from the source with :mod:`ast` (imports inside functions
included), so an upward import or a circle between packages fails here, before review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("core", "bot", "storage")

# bottom layer first; a unit may import its own layer's members only where they are listed
# together as one layer and it does not form a circle (checked separately)
CORE_LAYERS = [
    {"core._errors", "core._secret_rule", "core._redact", "core._strict_model", "core._prompts"},
    {"core._config"},
    {"core._hosts"},
    {"core._git", "core._env", "core._profile"},
    {"core._triage", "core._measure"},
    {"core._experiments"},
    {"core._history"},
    {"core.testing", "core._api"},
    {"core"},
]
BOT_LAYERS = [
    {"bot._common", "bot._settings"},
    {"bot._slurm_batch"},
    {"bot._runs"},
    {"bot._app", "bot._history_pages"},
    {"bot._jobs"},
    {"bot._slack"},
    {"bot.cli"},
    {"bot"},
]


def _unit(module: str) -> str:
    """The package a dotted module belongs to: ``core._env.probe`` -> ``core._env``;
    ``core`` (its ``__init__``) stays ``core``."""
    return ".".join(module.split(".")[:2])


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Dotted names of our packages imported by ``path`` (``from core import _git`` gives
    ``core._git``, ``from core import Config`` gives ``core``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in TOPS:
                found |= {f"{node.module}.{a.name}" if a.name.startswith("_") or a.name == "testing"
                          or a.name == "cli" else node.module for a in node.names}
            else:
                found.add(node.module)
    return {name for name in found if name.split(".")[0] in TOPS}


def _edges() -> dict[str, set[str]]:
    """``{unit: units it imports}`` over every module of ``core``, ``bot`` and ``storage``
    (migrations left out: Alembic loads them)."""
    edges: dict[str, set[str]] = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            unit = _unit(_module_of(path))
            edges.setdefault(unit, set()).update(u for u in map(_unit, _imports(path)) if u != unit)
    return edges


def test_the_three_packages_import_only_downwards():
    order = {"core": 0, "storage": 1, "bot": 2}
    upward = sorted((a, b) for a, targets in _edges().items() for b in targets
                    if order[b.split(".")[0]] > order[a.split(".")[0]])
    assert upward == []


@pytest.mark.parametrize("layers", [CORE_LAYERS, BOT_LAYERS], ids=["core", "bot"])
def test_each_package_imports_only_the_layers_below_it(layers):
    top = next(iter(layers[-1]))
    level = {unit: i for i, layer in enumerate(layers) for unit in layer}
    edges = {a: {b for b in targets if b.split(".")[0] == top} for a, targets in _edges().items()
             if a.split(".")[0] == top}
    assert set(edges) <= set(level), f"packages missing from the layers (add them, and to ARCHITECTURE.md): " \
                                     f"{sorted(set(edges) - set(level))}"
    upward = sorted((a, b) for a, targets in edges.items() for b in targets if level[b] > level[a])
    assert upward == [], "imports against the layers (a -> b, b above a)"
    same = {(a, b) for a, targets in edges.items() for b in targets if level[b] == level[a]}
    assert not {(a, b) for a, b in same if (b, a) in same}, "packages of one layer importing each other"


def test_the_layer_reader_sees_an_upward_import(tmp_path, monkeypatch):
    """The rules above read real imports: a module of ``core._hosts`` that imports
    ``core._experiments`` shows up as that edge."""
    fake = ROOT / "core" / "_hosts" / "base.py"
    source = fake.read_text() + "\n\ndef _late():\n    from core._experiments import stats  # noqa\n"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == fake else _read(self))
    assert "core._experiments" in _edges()["core._hosts"]


_read = Path.read_text
