"""Git, safely: refs resolved to full SHAs before use, one worktree per SHA.

User text never reaches a shell: every git call is an argv list, and a ref is first checked
against git's own ref-name rules and then resolved with
``git rev-parse --verify --end-of-options <ref>^{commit}``, so option-looking text
(``--upload-pack=x``) or shell syntax (``HEAD; touch /tmp/x``) is rejected before any other
command runs. Worktrees live under the tool's work directory (``<workdir>/worktrees/<sha>``),
are reused across runs, and never touch the user's checkout.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from pathlib import Path

from core._errors import SpecperfError


class GitError(SpecperfError):
    """A git operation failed, or a ref does not name a commit."""


# Characters git forbids in ref names (git-check-ref-format), plus whitespace, quotes and
# shell metacharacters, which no ref a person types needs; "^", "~" and "@{" stay allowed.
_FORBIDDEN = re.compile(r"[\s\\;&|$`'\"<>()*?\[\]]|^-|\x00")


def _git(repo: str | Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise GitError("git is not installed on this host") from None
    if check and result.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed in {repo}: {result.stderr.strip()}")
    return result


def check_ref_text(ref: str) -> str:
    """``ref`` itself when it could be a git ref; no git runs.

    Raises:
        GitError: it is empty, starts with ``-``, or holds whitespace or shell characters.
    """
    if not ref or _FORBIDDEN.search(ref):
        raise GitError(
            f"{ref!r} is not a git ref: refs cannot start with '-' or contain whitespace or shell "
            "characters; give a commit SHA, branch or tag"
        )
    return ref


def resolve_commit(repo: str | Path, ref: str) -> str:
    """The full 40-hex SHA of the commit ``ref`` names in ``repo``.

    Raises:
        GitError: ``repo`` is not a git repository, ``ref`` contains characters no ref has
            (it starts with ``-``, or holds whitespace or shell syntax), or it names no commit.
    """
    check_ref_text(ref)
    if not Path(repo).is_dir():
        raise GitError(f"engine repository {repo} does not exist; set engines.<name>.repo")
    result = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    sha = result.stdout.strip()
    if result.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise GitError(f"{ref!r} names no commit in {repo}; check the ref (git log --oneline) and fetch it")
    return sha


def first_parent(repo: str | Path, sha: str) -> str:
    """The first parent of ``sha`` (a full SHA); :class:`GitError` for a root commit."""
    result = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{sha}^1", check=False)
    if result.returncode != 0:
        raise GitError(f"{sha[:12]} has no parent; pass --base REF")
    return result.stdout.strip()


def worktree(repo: str | Path, sha: str, workdir: Path) -> Path:
    """A checkout of ``sha`` at ``workdir/worktrees/<sha>``, created on first use, reused after.

    A reused worktree must be at ``sha`` with no change to tracked files (a checkout killed
    half-way is recreated). Creation holds a lock in ``workdir/worktrees`` so two runs
    sharing a work directory do not race.

    Raises:
        GitError: git could not create the worktree.
    """
    path = workdir / "worktrees" / sha
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            head = _git(path, "rev-parse", "HEAD", check=False).stdout.strip()
            dirty = _git(path, "status", "--porcelain", "--untracked-files=no", check=False)
            if head == sha and dirty.returncode == 0 and not dirty.stdout.strip():
                return path
            _git(repo, "worktree", "remove", "--force", str(path), check=False)
            shutil.rmtree(path, ignore_errors=True)
        _git(repo, "worktree", "prune")
        result = _git(repo, "worktree", "add", "--detach", "--force", str(path), sha, check=False)
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if line.startswith(("fatal", "error"))]
            raise GitError(f"git worktree add of {sha[:12]} failed: {' '.join(errors) or result.stderr[-300:]}")
    return path
