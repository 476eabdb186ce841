"""A commit's changes as triage reads them: ``git diff -U0`` output parsed into files and hunks
(:func:`parse_diff`), and the files of a repository at a commit, read once through its host
(:class:`CommitFiles`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core import _git
from core._hosts import Host


@dataclass
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


@dataclass
class FileDiff:
    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> list[FileDiff]:
    """The files and hunks of ``git diff -U0`` output (paths without their ``a/``/``b/``)."""
    files: list[FileDiff] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            files.append(FileDiff(None, None))
            a, _, b = line[len("diff --git "):].partition(" b/")
            files[-1].old_path, files[-1].new_path = a.removeprefix("a/"), b
        elif not files:
            continue
        elif line.startswith("--- "):
            files[-1].old_path = None if line == "--- /dev/null" else line[6:] if line.startswith("--- a/") else None
        elif line.startswith("+++ "):
            files[-1].new_path = None if line == "+++ /dev/null" else line[6:] if line.startswith("+++ b/") else None
        elif m := _HUNK.match(line):
            files[-1].hunks.append(Hunk(int(m[1]), int(m[2] if m[2] is not None else 1),
                                         int(m[3]), int(m[4] if m[4] is not None else 1)))
        elif files[-1].hunks and line.startswith("-"):
            files[-1].hunks[-1].removed.append(line[1:])
        elif files[-1].hunks and line.startswith("+"):
            files[-1].hunks[-1].added.append(line[1:])
    return files


class CommitFiles:
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
