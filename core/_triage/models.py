"""Which model files the configured model uses: its identity (``config.json`` architectures and
``model_type``, and any speculative draft's, :func:`model_identity`), and per commit whether a
model-specific file is one of them (:class:`ModelUse`: rule keywords, else the files of the
folder that name an architecture and the siblings they import)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from core._config import EngineConfig
from core._config.triage_rules import TriageModelRule
from core._triage.diff import CommitFiles
from core._triage.gates import flag_name


@dataclass(frozen=True)
class ModelIdentity:
    """What the configured model (and any speculative draft) is: ``architectures`` (class
    names from config.json) and ``words`` (those, ``model_type`` and the model's name)."""

    architectures: tuple[str, ...]
    words: tuple[str, ...]

    def describe(self) -> str:
        return ", ".join(self.architectures or self.words) or "unknown"


def _draft_paths(args: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
        if flag_name(arg) == "--speculative-draft-model-path":
            out.append(value)
        elif flag_name(arg) in ("--speculative-config", "--speculative_config"):
            try:
                model = json.loads(value).get("model")
            except (ValueError, AttributeError):
                model = None
            if model:
                out.append(model)
    return out


def model_identity(engine: EngineConfig, modes: list[str]) -> ModelIdentity:
    """The configured model's identity, read from ``config.json`` in ``engine.model`` and in
    any draft model folder named by the modes' arguments (a hub name gives only its words)."""
    archs, words = [], []
    paths = [engine.model] + [p for m in modes for p in _draft_paths(engine.args + engine.modes.get(m, []))]
    for path in filter(None, paths):
        words.append(PurePosixPath(path).name)
        config = Path(path) / "config.json"
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError):
            continue
        archs += [a for a in data.get("architectures") or [] if isinstance(a, str)]
        if isinstance(data.get("model_type"), str):
            words.append(data["model_type"])
    return ModelIdentity(tuple(dict.fromkeys(archs)), tuple(dict.fromkeys(archs + words)))


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


class ModelUse:
    """Decides, per commit, whether model-specific files are used by the configured model."""

    def __init__(self, files: CommitFiles, sha: str, identity: ModelIdentity) -> None:
        self.files, self.sha, self.identity = files, sha, identity
        self._used_in: dict[str, set[str]] = {}

    async def unused(self, path: str, rule: TriageModelRule) -> str | None:
        """Why the configured model does not use ``path`` under ``rule``, or ``None`` if it may."""
        if rule.models:
            words = [_squash(w) for w in self.identity.words]
            if not words or any(_squash(k) in w for k in rule.models for w in words):
                return None
            return f"model-specific path ({', '.join(rule.models[:3])}, ...) not used by the configured model " \
                   f"({self.identity.describe()})"
        if not self.identity.architectures:
            return None
        folder = str(PurePosixPath(path).parent)
        if path in await self._used(folder):
            return None
        return f"model file not used by the configured model ({self.identity.describe()})"

    async def _used(self, folder: str) -> set[str]:
        """Files of ``folder`` that name an architecture, and the files of ``folder`` they import."""
        if folder not in self._used_in:
            used = set(await self.files.naming(self.sha, list(self.identity.architectures), folder))
            todo = list(used)
            while todo:
                source = await self.files.at(self.sha, todo.pop())
                for module in _imported_siblings(source or "", PurePosixPath(folder).name):
                    candidate = f"{folder}/{module}.py"
                    if candidate not in used:
                        used.add(candidate)
                        todo.append(candidate)
            self._used_in[folder] = used
        return self._used_in[folder]


def _imported_siblings(source: str, package: str) -> set[str]:
    """Module names of the same folder that ``source`` imports (``from .x import``,
    ``from a.b.<package>.x import``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if node.level == 1 and len(parts) == 1:
                out.add(parts[0])
            elif node.level == 0 and len(parts) >= 2 and parts[-2] == package:
                out.add(parts[-1])
    return out
