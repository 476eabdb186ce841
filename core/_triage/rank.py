"""Triage without GPU time: the first-parent commits of a range, ranked by suspicion.

For each commit (``git log --first-parent`` order, each against its first parent):

* Every changed file gets an *area* from the rules (:class:`core._config.triage_rules.TriageRules`): the first
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

With the categories a compare's profile round named (core._profile.diff: communication,
attention, draft model, sampling, GEMM), a live commit with a file in the matching area
(:data:`PROFILE_AREAS`) scores :data:`PROFILE_BOOST` more, and its note says why.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from core import _git
from core._config import EngineConfig
from core._config.triage_rules import TriageArea, TriageRules
from core._hosts import Host
from core._profile.categories import ATTENTION, COMMUNICATION, DRAFT, GEMM, SAMPLING
from core._triage.diff import CommitFiles, FileDiff, parse_diff
from core._triage.gates import GateState, dead_lines, default_flip, gate_state, parse_source
from core._triage.models import ModelIdentity, ModelUse, model_identity
from core._triage.pins import dependency_changes

DEPENDENCY_WEIGHT = 100.0
OTHER_DEPENDENCY_WEIGHT = 20.0  # a dependency file that moves no watched pin
DEFAULT_FLIP_WEIGHT = 65.0  # a commit that flips a gate's default changes what runs
PROFILE_BOOST = 25.0  # a commit in the area of the ops the profile names
PROFILE_AREAS = {  # a profiled op's category -> words of the areas (core._config.triage_rules) it points at
    COMMUNICATION: ("communication", "all-reduce"), ATTENTION: ("attention",), DRAFT: ("speculative",),
    SAMPLING: ("sampl",), GEMM: ("kernels", "layers"),
}


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
    profiled: list[str] = field(default_factory=list)  # profile categories its areas match

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
        if self.profiled:
            parts.append(f"the profile names {' and '.join(self.profiled)} ops")
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
                "profiled": self.profiled,
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


def _gate_lines(gates: set[str], modes: dict[str, dict[str, GateState]]) -> list[str]:
    out = []
    for name in sorted(gates):
        whys = {m: states[name].why for m, states in modes.items()}
        if len(set(whys.values())) == 1:
            out.append(f"with {name}, {next(iter(whys.values()))}")
        else:
            out.append(f"with {name}, " + "; ".join(f"{m}: {why}" for m, why in whys.items()))
    return out


async def _triage_file(files: CommitFiles, parent: str, sha: str, diff: FileDiff, rules: TriageRules,
                       mode_args: dict[str, list[str]], env: dict[str, str], models: ModelUse) -> FileTriage:
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
    new_tree = parse_source(await files.at(sha, diff.new_path)) if diff.new_path else None
    old_tree = parse_source(await files.at(parent, diff.old_path)) if diff.old_path else None
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
            dead, by, live = dead_lines(tree, number, span, rules.gates, modes)
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


async def _entry(reads: CommitFiles, sha: str, position: int, rules: TriageRules, mode_args: dict[str, list[str]],
                 env: dict[str, str], identity: ModelIdentity) -> TriageEntry:
    host, repo = reads.host, reads.repo
    parent = await _git.first_parent(host, repo, sha)
    subject, date = await _git.commit_summary(host, repo, sha)
    models = ModelUse(reads, sha, identity)
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


def _profile_matches(entry: TriageEntry, categories: list[str]) -> list[str]:
    """The profile categories whose areas (:data:`PROFILE_AREAS`) one of the entry's live files is in."""
    areas = [f.area.lower() for f in entry.files if f.area and f.weight > 0 and not f.inert]
    return [c for c in categories if any(word in area for area in areas for word in PROFILE_AREAS.get(c, ()))]


async def triage(host: Host, repo: str, good_ref: str, bad_ref: str, engine: EngineConfig, rules: TriageRules,
                 modes: list[str] | None = None, profile_categories: list[str] | None = None) -> TriageReport:
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
        profile_categories: the op categories a profile round named (``ProfileDiff.categories``):
            live commits in their areas rank up (module docstring).

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
    reads = CommitFiles(host, repo)
    entries = [await _entry(reads, sha, i + 1, rules, mode_args, dict(engine.env), identity)
               for i, sha in enumerate(shas)]
    for entry in entries:
        entry.profiled = [] if entry.inert else _profile_matches(entry, profile_categories or [])
        if entry.profiled:
            entry.score = min(100.0, entry.score + PROFILE_BOOST)
    weight = {e.sha: max((f.weight for f in e.files), default=0.0) for e in entries}
    ranked = sorted(entries, key=lambda e: (e.inert, -e.score, -weight[e.sha], -e.position))
    for rank, entry in enumerate(ranked, 1):
        entry.rank = rank
    return TriageReport(good, bad, shas, ranked)
