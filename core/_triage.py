"""Triage without GPU time: the first-parent commits of a range, ranked by suspicion.

For each commit (``git log --first-parent`` order, each against its first parent):

* Every changed file gets an *area* from the rules (:class:`core.TriageRules`): the first
  area whose globs match. A changed dependency file whose changed lines move a watched
  package's pin (torch, flashinfer, sgl-kernel, NCCL, ...) is the area ``dependency pins``
  with weight 100, so such commits are called out first.
* Each changed hunk of a Python file (``git diff -U0``) is placed in the parsed source of
  the new file (added lines) and of the old file (removed lines) with :mod:`ast`: the
  conditions it runs under are its enclosing ``if``/``while`` tests (body: the test holds;
  ``else``: it does not) and the early-exit guards before it in the same block
  (``if not X: return`` means the lines after run only when X holds). A test that mentions
  a gate's marker is evaluated with the gate's state in each configured mode (engine
  ``args`` + mode arguments, engine ``env``, else the gate's default at that commit). A
  hunk whose lines all sit under a condition that is false in every mode is inert.
* A model-specific file (a Mamba layer, another family's model file) is inert when the
  configured model (its ``config.json`` architectures and ``model_type``, and any
  speculative draft's) does not use it.

A commit whose scored files are all inert is marked "likely inert in this configuration"
with the reasons, and ranked after every live commit. Nothing here runs an engine.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from core import _git
from core._config import EngineConfig
from core._hosts import Host
from core._triage_rules import TriageArea, TriageGate, TriageModelRule, TriageRules

DEPENDENCY_WEIGHT = 100.0
OTHER_DEPENDENCY_WEIGHT = 20.0  # a dependency file that moves no watched pin
DEFAULT_FLIP_WEIGHT = 65.0  # a commit that flips a gate's default changes what runs
_TRUE = {"1", "true", "yes", "on"}


@dataclass
class FileTriage:
    """One changed file of a commit.

    ``area``/``weight``: its area and suspicion (0-100; ``None``/0 when no rule matches).
    ``hunks``: changed hunks; ``inert_hunks``: how many of them no configured mode runs.
    ``inert``: the reason the whole file is inert in this configuration, else ``None``.
    ``gates``: notes on gates that changed lines sit under and that are on (why live).
    ``dependencies``: watched packages whose pins move, as ``"torch 2.8.0 -> 2.9.1"``.
    """

    path: str
    area: str | None
    weight: float
    hunks: int = 0
    inert_hunks: int = 0
    inert: str | None = None
    gates: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)


@dataclass
class TriageEntry:
    """One commit of the range. ``position``: 1 for the oldest commit after good.
    ``score``: the highest weight among its live files (0 when inert); ``rank``: 1 = most
    suspicious. ``inert``: the commit is likely inert in this configuration (``reasons`` say
    why). ``date``: committer date, ISO 8601."""

    sha: str
    position: int
    subject: str
    date: str
    files: list[FileTriage]
    score: float = 0.0
    rank: int = 0
    inert: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def areas(self) -> list[str]:
        """The areas of its files, most suspicious first, without repeats."""
        ordered = sorted((f for f in self.files if f.area), key=lambda f: -f.weight)
        return list(dict.fromkeys(f.area for f in ordered))

    @property
    def dependencies(self) -> list[str]:
        return [d for f in self.files for d in f.dependencies]

    def note(self) -> str:
        """What to say about it beyond its areas: pins, inertness, live gates."""
        parts = []
        if self.dependencies:
            parts.append("pins " + ", ".join(self.dependencies))
        if self.inert:
            parts.append("likely inert in this configuration: " + "; ".join(self.reasons))
        else:
            parts += [g for f in self.files for g in f.gates]
            parts += [f"{f.path}: {f.inert}" for f in self.files if f.inert]
        return "; ".join(dict.fromkeys(parts))

    def line(self) -> str:
        """One line: rank, short SHA, subject, areas and the note."""
        areas = ", ".join(self.areas) or "no scored area"
        note = self.note()
        return f"#{self.rank} {self.sha[:12]} {self.subject} [{areas}]" + (f" {note}" if note else "")

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"sha": self.sha, "position": self.position, "rank": self.rank, "subject": self.subject,
                "date": self.date, "score": self.score, "inert": self.inert, "reasons": self.reasons,
                "areas": self.areas, "note": self.note(),
                "files": [vars(f) for f in self.files]}


@dataclass
class TriageReport:
    """The range ``good..bad`` (full SHAs) and its commits: ``entries`` ranked (most
    suspicious first), ``commits`` the SHAs oldest first."""

    good_sha: str
    bad_sha: str
    commits: list[str]
    entries: list[TriageEntry]

    def entry(self, sha: str) -> TriageEntry:
        """The entry of commit ``sha``.

        Raises:
            KeyError: ``sha`` is not in the range.
        """
        for entry in self.entries:
            if entry.sha == sha:
                return entry
        raise KeyError(sha)


# --- globs -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, patterns: list[str]) -> bool:
    """Whether the repo-relative ``path`` matches any glob (``*`` within a folder, ``**`` across)."""
    return any(_glob(p).match(path) for p in patterns)


def _area(path: str, rules: TriageRules) -> TriageArea | None:
    return next((a for a in rules.areas if matches(path, a.paths)), None)


# --- the diff --------------------------------------------------------------------------------

@dataclass
class _Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


@dataclass
class _FileDiff:
    old_path: str | None
    new_path: str | None
    hunks: list[_Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> list[_FileDiff]:
    """The files and hunks of ``git diff -U0`` output (paths without their ``a/``/``b/``)."""
    files: list[_FileDiff] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            files.append(_FileDiff(None, None))
            a, _, b = line[len("diff --git "):].partition(" b/")
            files[-1].old_path, files[-1].new_path = a.removeprefix("a/"), b
        elif not files:
            continue
        elif line.startswith("--- "):
            files[-1].old_path = None if line == "--- /dev/null" else line[6:] if line.startswith("--- a/") else None
        elif line.startswith("+++ "):
            files[-1].new_path = None if line == "+++ /dev/null" else line[6:] if line.startswith("+++ b/") else None
        elif m := _HUNK.match(line):
            files[-1].hunks.append(_Hunk(int(m[1]), int(m[2] if m[2] is not None else 1),
                                         int(m[3]), int(m[4] if m[4] is not None else 1)))
        elif files[-1].hunks and line.startswith("-"):
            files[-1].hunks[-1].removed.append(line[1:])
        elif files[-1].hunks and line.startswith("+"):
            files[-1].hunks[-1].added.append(line[1:])
    return files


# --- dependency pins -------------------------------------------------------------------------

# a requirement line: name, optional extras, optional operator and version ("torch==2.9.1",)
_REQ = re.compile(r"""^\s*["']?([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"""
                  r"""(?:(===|==|>=|<=|~=|!=|<|>|@)\s*([^"',;\s]+))?""")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lines: list[str], watched: set[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        m = _REQ.match(line)
        if m and _norm(m[1]) in watched and (m[2] or '"' in line or "'" in line):
            found[_norm(m[1])] = f"{m[2] or ''}{m[3] or ''}" or "unpinned"
    return found


def dependency_changes(hunks: list[_Hunk], packages: list[str]) -> list[str]:
    """Watched packages whose requirement lines changed: ``["torch ==2.8.0 -> ==2.9.1", ...]``."""
    watched = {_norm(p) for p in packages}
    before = _pins([x for h in hunks for x in h.removed], watched)
    after = _pins([x for h in hunks for x in h.added], watched)
    out = []
    for name in dict.fromkeys([*before, *after]):
        old, new = before.get(name), after.get(name)
        if old != new:
            out.append(f"{name} {old or '(none)'} -> {new or '(removed)'}")
    return out


# --- gates -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GateState:
    """A gate in one mode: ``on`` and ``why`` (which argument, variable or default decided)."""

    gate: str
    on: bool
    why: str


def _flag(arg: str) -> str:
    return arg.split("=", 1)[0]


def gate_state(gate: TriageGate, args: list[str], env: dict[str, str], default_text: str | None) -> GateState:
    """The state of ``gate`` for launch arguments ``args`` and environment ``env``;
    ``default_text`` is the commit's copy of ``gate.default.path`` (``None`` if absent)."""
    decided: GateState | None = None
    for arg in args:
        if _flag(arg) in gate.enable_args:
            decided = GateState(gate.name, True, f"{_flag(arg)} is in the arguments")
        elif _flag(arg) in gate.disable_args:
            decided = GateState(gate.name, False, f"{_flag(arg)} is in the arguments")
    if decided:
        return decided
    for name in gate.env:
        if name in env:
            on = env[name].strip().lower() in _TRUE
            return GateState(gate.name, on, f"env {name}={env[name]}")
    if gate.default is not None:
        on = default_text is not None and any(word in default_text for word in gate.default.contains)
        where = f"{PurePosixPath(gate.default.path).name} {'has' if on else 'lacks'} {gate.default.contains[0]}"
        given = "" if on or not gate.enable_args else f" and no {' or '.join(gate.enable_args)} is given"
        return GateState(gate.name, on, f"{'on' if on else 'off'} by default at this commit ({where}){given}")
    turn = gate.disable_args if gate.default_on else gate.enable_args + gate.env
    return GateState(gate.name, gate.default_on, f"{'on' if gate.default_on else 'off'} by default"
                     + (f" (no {' or '.join(turn)} given)" if turn else ""))


def default_flip(gate: TriageGate, before: str | None, after: str | None) -> str | None:
    """``"turns X on by default"`` (or off) when the gate's default file changes its default."""
    if gate.default is None:
        return None
    was, now = (text is not None and any(w in text for w in gate.default.contains) for text in (before, after))
    return None if was == now else f"turns {gate.name} {'on' if now else 'off'} by default"


def _names(node: ast.AST) -> set[str]:
    """Dotted names and string constants mentioned anywhere in ``node``."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            parts, cur = [sub.attr], sub.value
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                parts.append(cur.id)
            out.add(".".join(reversed(parts)))
        elif isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.add(sub.value)
    return out


def _mentions(names: set[str], marker: str) -> bool:
    return any(f".{marker}." in f".{name}." for name in names)


def _truth(test: ast.expr, gates: list[TriageGate], states: dict[str, GateState]) -> tuple[bool | None, set[str]]:
    """Whether ``test`` holds with the gates in ``states`` (``None``: unknown), and the gates it used."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value, used = _truth(test.operand, gates, states)
        return (None if value is None else not value), used
    if isinstance(test, ast.BoolOp):
        results = [_truth(v, gates, states) for v in test.values]
        used = set().union(*(u for _, u in results))
        values = [v for v, _ in results]
        if isinstance(test.op, ast.And):
            return (False if False in values else True if all(v is True for v in values) else None), used
        return (True if True in values else False if all(v is False for v in values) else None), used
    names = _names(test)
    hits = []
    for gate in gates:
        if any(_mentions(names, m) for m in gate.markers):
            hits.append((gate, False))
        elif any(_mentions(names, m) for m in gate.inverse_markers):
            hits.append((gate, True))
    if len(hits) != 1:
        return None, set()
    gate, inverse = hits[0]
    value = states[gate.name].on != inverse
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        is_none = isinstance(right, ast.Constant) and right.value is None
        if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)) != is_none:
            value = not value
    return value, {gate.name}


_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def conditions(tree: ast.Module, line: int, span: tuple[int, int] | None = None) -> list[tuple[ast.expr, bool]]:
    """The conditions line ``line`` runs under in ``tree``: ``(test, must_hold)`` pairs from
    enclosing ``if``/``while`` blocks (``False`` in their ``else``) and from earlier
    early-exit guards in the same blocks (``if X: return`` gives ``(X, False)``). A line in
    a test itself gets no condition from that test (changing a test changes behaviour),
    unless the whole ``if`` without ``else`` lies in ``span`` (the hunk's lines, first and
    last): a block added or removed whole runs only when its test holds."""
    found: list[tuple[ast.expr, bool]] = []
    body: list[ast.stmt] = tree.body
    while True:
        stmt = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if stmt is None:
            return found
        for earlier in body:
            if earlier is stmt:
                break
            if (isinstance(earlier, ast.If) and not earlier.orelse and earlier.body
                    and isinstance(earlier.body[-1], _EXITS)):
                found.append((earlier.test, False))
        if isinstance(stmt, (ast.If, ast.While)):
            if stmt.test.lineno <= line <= (stmt.test.end_lineno or stmt.test.lineno):
                whole = span is not None and span[0] <= stmt.lineno and (stmt.end_lineno or line) <= span[1]
                if whole and not stmt.orelse:
                    found.append((stmt.test, True))
                return found
            in_body = not stmt.orelse or line <= (stmt.body[-1].end_lineno or line)
            found.append((stmt.test, in_body))
            body = stmt.body if in_body else stmt.orelse
            continue
        blocks = [getattr(stmt, name) for name in ("body", "orelse", "finalbody")
                  if isinstance(getattr(stmt, name, None), list)]
        blocks += [h.body for h in getattr(stmt, "handlers", [])] + [c.body for c in getattr(stmt, "cases", [])]
        inner = next((b for b in blocks if b and b[0].lineno <= line <= (b[-1].end_lineno or line)), None)
        if inner is None:
            return found
        body = inner


def _dead(tree: ast.Module, line: int, span: tuple[int, int], gates: list[TriageGate],
          modes: dict[str, dict[str, GateState]]) -> tuple[bool, set[str], set[str]]:
    """(no mode runs ``line``, gates that make it dead, gates it runs under that are on)."""
    conds = conditions(tree, line, span)
    dead_by, live_under = set(), set()
    for states in modes.values():
        mode_dead = False
        for test, must_hold in conds:
            value, used = _truth(test, gates, states)
            if value is not None and value != must_hold:
                mode_dead = True
                dead_by |= used
            elif value is not None:
                live_under |= used
        if not mode_dead:
            return False, set(), live_under
    return bool(modes), dead_by, live_under


# --- the configured model --------------------------------------------------------------------

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
        if _flag(arg) == "--speculative-draft-model-path":
            out.append(value)
        elif _flag(arg) in ("--speculative-config", "--speculative_config"):
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


class _ModelUse:
    """Decides, per commit, whether model-specific files are used by the configured model."""

    def __init__(self, files: _Files, sha: str, identity: ModelIdentity) -> None:
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


# --- one commit ------------------------------------------------------------------------------

class _Files:
    """Git reads of one repository on its host, cached (a file at a commit never changes)."""

    def __init__(self, host: Host, repo: str) -> None:
        self.host, self.repo = host, repo
        self._cache: dict[tuple[str, str], str | None] = {}

    async def at(self, sha: str, path: str) -> str | None:
        """The text of ``path`` at ``sha`` (``None``: not there)."""
        if (sha, path) not in self._cache:
            self._cache[sha, path] = await _git.file_at(self.host, self.repo, sha, path)
        return self._cache[sha, path]

    async def naming(self, sha: str, words: list[str], folder: str) -> list[str]:
        """Paths under ``folder`` at ``sha`` that contain any of ``words``."""
        return await _git.files_naming(self.host, self.repo, sha, words, folder)


def _parse(source: str | None) -> ast.Module | None:
    if source is None:
        return None
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _gate_lines(gates: set[str], modes: dict[str, dict[str, GateState]]) -> list[str]:
    out = []
    for name in sorted(gates):
        whys = {m: states[name].why for m, states in modes.items()}
        if len(set(whys.values())) == 1:
            out.append(f"with {name}, {next(iter(whys.values()))}")
        else:
            out.append(f"with {name}, " + "; ".join(f"{m}: {why}" for m, why in whys.items()))
    return out


async def _triage_file(files: _Files, parent: str, sha: str, diff: _FileDiff, rules: TriageRules,
                       mode_args: dict[str, list[str]], env: dict[str, str], models: _ModelUse) -> FileTriage:
    path = diff.path
    if matches(path, rules.dependency_files):
        pins = dependency_changes(diff.hunks, rules.dependency_packages)
        if pins:
            return FileTriage(path, "dependency pins", DEPENDENCY_WEIGHT, len(diff.hunks), dependencies=pins)
        return FileTriage(path, "other dependencies", OTHER_DEPENDENCY_WEIGHT, len(diff.hunks))
    area = _area(path, rules)
    result = FileTriage(path, area.name if area else None, area.weight if area else 0.0, len(diff.hunks))
    if not result.weight:
        return result
    for gate in rules.gates:
        if gate.default and gate.default.path == path and (
                flip := default_flip(gate, await files.at(parent, path), await files.at(sha, path))):
            decided = [m for m, args in mode_args.items()
                       if "by default" in gate_state(gate, args, env, None).why]
            if decided:
                result.gates.append(f"{flip} (modes {', '.join(decided)} do not set it)")
                result.weight = max(result.weight, DEFAULT_FLIP_WEIGHT)
    rule = next((r for r in rules.model_paths if matches(path, r.paths)), None)
    if rule and (why := await models.unused(path, rule)):
        result.inert = why
        return result
    if not path.endswith(".py") or not rules.gates or not diff.hunks:
        return result
    modes: dict[str, dict[str, GateState]] = {}
    defaults: dict[str, str | None] = {}
    for gate in rules.gates:
        if gate.default and gate.default.path not in defaults:
            defaults[gate.default.path] = await files.at(sha, gate.default.path)
    for mode, args in mode_args.items():
        modes[mode] = {g.name: gate_state(g, args, env, defaults.get(g.default.path) if g.default else None)
                       for g in rules.gates}
    new_tree = _parse(await files.at(sha, diff.new_path)) if diff.new_path else None
    old_tree = _parse(await files.at(parent, diff.old_path)) if diff.old_path else None
    dead_by_all: set[str] = set()
    live_gates: set[str] = set()
    for hunk in diff.hunks:
        new_span = (hunk.new_start, hunk.new_start + hunk.new_count - 1)
        old_span = (hunk.old_start, hunk.old_start + hunk.old_count - 1)
        lines = [(new_tree, n, new_span) for n in range(new_span[0], new_span[1] + 1)]
        lines += [(old_tree, n, old_span) for n in range(old_span[0], old_span[1] + 1)]
        hunk_dead, hunk_by = bool(lines), set()
        for tree, number, span in lines:
            if tree is None:
                hunk_dead = False
                break
            dead, by, live = _dead(tree, number, span, rules.gates, modes)
            live_gates |= live
            if not dead:
                hunk_dead = False
            hunk_by |= by
        if hunk_dead:
            result.inert_hunks += 1
            dead_by_all |= hunk_by
    if result.inert_hunks == result.hunks:
        states = _gate_lines(dead_by_all, modes)
        result.inert = f"its changed lines run only {'; '.join(states)}"
    else:
        result.gates += _gate_lines(live_gates, modes)
    return result


async def _entry(reads: _Files, sha: str, position: int, rules: TriageRules, mode_args: dict[str, list[str]],
                 env: dict[str, str], identity: ModelIdentity) -> TriageEntry:
    host, repo = reads.host, reads.repo
    parent = await _git.first_parent(host, repo, sha)
    subject, date = await _git.commit_summary(host, repo, sha)
    models = _ModelUse(reads, sha, identity)
    files = [await _triage_file(reads, parent, sha, diff, rules, mode_args, env, models)
             for diff in parse_diff(await _git.diff_u0(host, repo, parent, sha))]
    entry = TriageEntry(sha, position, subject, date, files)
    scored = [f for f in files if f.weight > 0]
    live = [f for f in scored if not f.inert]
    entry.score = max((f.weight for f in live), default=0.0)
    if scored and not live:
        entry.inert = True
        entry.reasons = list(dict.fromkeys(f"{PurePosixPath(f.path).name}: {f.inert}" for f in scored))
    return entry


async def triage(host: Host, repo: str, good_ref: str, bad_ref: str, engine: EngineConfig, rules: TriageRules,
                 modes: list[str] | None = None) -> TriageReport:
    """Rank the first-parent commits of ``good_ref..bad_ref`` in ``repo`` by suspicion.

    Args:
        host: where the repository is (git runs there).
        repo: the engine's git repository.
        good_ref, bad_ref: refs of the last good and the first known bad commit; good must
            be an ancestor of bad on its first-parent line.
        engine: the configured engine: its ``args``, ``modes`` and ``env`` decide the gates,
            its ``model`` (and drafts named in mode arguments) decide model-specific code.
        rules: the layout's rules (``Config.triage.rules_for(name, kind)``).
        modes: the modes that will be measured (default: all of the engine's); a gate is on
            when any of them turns it on.

    Returns:
        A :class:`TriageReport`; entries ranked most suspicious first (live before inert,
        then by score, then newest first).

    Raises:
        GitError: a bad ref, good not an ancestor of bad, or an empty range.
        HostError: the host cannot be reached.
    """
    repo = str(repo)
    good = await _git.resolve_commit(host, repo, good_ref)
    bad = await _git.resolve_commit(host, repo, bad_ref)
    shas = await _git.first_parent_range(host, repo, good, bad)
    chosen = modes or list(engine.modes)
    mode_args = {m: engine.args + engine.modes.get(m, []) for m in chosen}
    identity = model_identity(engine, chosen)
    reads = _Files(host, repo)
    entries = [await _entry(reads, sha, i + 1, rules, mode_args, dict(engine.env), identity)
               for i, sha in enumerate(shas)]
    weight = {e.sha: max((f.weight for f in e.files), default=0.0) for e in entries}
    ranked = sorted(entries, key=lambda e: (e.inert, -e.score, -weight[e.sha], -e.position))
    for rank, entry in enumerate(ranked, 1):
        entry.rank = rank
    return TriageReport(good, bad, shas, ranked)
