"""Git, safely: refs resolved to full SHAs before use, one worktree per SHA.

User text never reaches a shell: every git call is an argv list, and a ref is first checked
against git's own ref-name rules and then resolved with
``git rev-parse --verify --end-of-options <ref>^{commit}``, so option-looking text
(``--upload-pack=x``) or shell syntax (``HEAD; touch /tmp/x``) is rejected before any other
command runs. Git runs on the engine's host (:mod:`core._hosts`). Worktrees live under the
host's work directory (``<workdir>/worktrees/<sha>``),
are reused across runs, and never touch the user's checkout.
"""

from __future__ import annotations

import re

from core._errors import SpecperfError
from core._hosts import CommandResult, Host


class GitError(SpecperfError):
    """A git operation failed, or a ref does not name a commit."""


# Characters git forbids in ref names (git-check-ref-format), plus whitespace, quotes and
# shell metacharacters, which no ref a person types needs; "^", "~" and "@{" stay allowed.
_FORBIDDEN = re.compile(r"[\s\\;&|$`'\"<>()*?\[\]]|^-|\x00")


async def _git(host: Host, repo: str, *args: str, check: bool = True) -> CommandResult:
    result = await host.run(["git", "-C", str(repo), *args], timeout_s=600)
    if result.returncode == 127:
        raise GitError(f"git is not installed on host {host.name}")
    if check and result.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed in {repo} on host {host.name}: {result.stderr.strip()}")
    return result


MAX_REF_CHARS = 255  # git allows longer names; no branch or tag a person types is near this


def check_ref_text(ref: str) -> str:
    """``ref`` itself when it could be a git ref; no git runs.

    Raises:
        GitError: it is empty, longer than :data:`MAX_REF_CHARS`, starts with ``-``, or holds
            whitespace or shell characters.
    """
    if len(ref) > MAX_REF_CHARS:
        raise GitError(f"a ref of {len(ref):,} characters is not a git ref (at most {MAX_REF_CHARS}); give a "
                       "commit SHA, branch or tag")
    if not ref or _FORBIDDEN.search(ref):
        raise GitError(
            f"{ref!r} is not a git ref: refs cannot start with '-' or contain whitespace or shell "
            "characters; give a commit SHA, branch or tag"
        )
    return ref


async def resolve_commit(host: Host, repo: str, ref: str) -> str:
    """The full 40-hex SHA of the commit ``ref`` names in ``repo`` on ``host``.

    Raises:
        GitError: ``repo`` is not a git repository, ``ref`` contains characters no ref has
            (it starts with ``-``, or holds whitespace or shell syntax), or it names no commit.
        HostError: the host cannot be reached.
    """
    check_ref_text(ref)
    probe = await _git(host, repo, "rev-parse", "--git-dir", check=False)
    if probe.returncode != 0:
        raise GitError(f"engine repository {repo} on host {host.name} is not a git repository "
                       f"({probe.stderr.strip()[:200]}); set engines.<name>.repo")
    result = await _git(host, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                        check=False)
    sha = result.stdout.strip()
    if result.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise GitError(f"{ref!r} names no commit in {repo}; check the ref (git log --oneline) and fetch it")
    return sha


async def first_parent(host: Host, repo: str, sha: str) -> str:
    """The first parent of ``sha`` (a full SHA); :class:`GitError` for a root commit."""
    result = await _git(host, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{sha}^1", check=False)
    if result.returncode != 0:
        raise GitError(f"{sha[:12]} has no parent; pass --base REF")
    return result.stdout.strip()


async def worktree(host: Host, repo: str, sha: str) -> str:
    """A checkout of ``sha`` at ``<host workdir>/worktrees/<sha>``, created on first use,
    reused after; returns its path on the host.

    A reused worktree must be at ``sha`` with no change to tracked files (a checkout killed
    half-way is recreated). The repository's own worktree records (``.git/worktrees``) are
    changed under ``flock`` on ``specperf-worktrees.lock`` in its git directory: compares that
    no host lock serialises (Slurm jobs on several nodes over one shared repository, a k-ary
    bisect's probes against one good commit) add worktrees of the same commit at once, and git
    does not guard its records against that (a concurrent ``worktree prune`` removed one being
    added: "failed to read .git/worktrees/<sha>/commondir").

    Raises:
        GitError: git could not create the worktree.
    """
    git_dir = (await _git(host, repo, "rev-parse", "--git-common-dir")).stdout.strip()
    lock = f"{git_dir if git_dir.startswith('/') else f'{repo}/{git_dir}'}/specperf-worktrees.lock"

    async def recorded(*args: str) -> CommandResult:  # git worktree ARGS, under the repository's lock
        result = await host.run(["flock", lock, "git", "-C", str(repo), "worktree", *args], timeout_s=600)
        if result.returncode == 127:
            raise GitError(f"git or util-linux's flock is not installed on host {host.name}")
        return result

    path = f"{host.workdir}/worktrees/{sha}"
    await host.makedirs(f"{host.workdir}/worktrees")
    head = await _git(host, path, "rev-parse", "HEAD", check=False)
    if head.returncode == 0 or (await host.run(["test", "-e", path])).returncode == 0:
        dirty = await _git(host, path, "status", "--porcelain", "--untracked-files=no", check=False)
        if head.stdout.strip() == sha and dirty.returncode == 0 and not dirty.stdout.strip():
            return path
        await recorded("remove", "--force", path)
        await host.run(["rm", "-rf", "--", path])
    pruned = await recorded("prune")
    if pruned.returncode != 0:
        raise GitError(f"git worktree prune failed in {repo} on host {host.name}: {pruned.stderr.strip()}")
    result = await recorded("add", "--detach", "--force", path, sha)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith(("fatal", "error"))]
        raise GitError(f"git worktree add of {sha[:12]} failed: {' '.join(errors) or result.stderr[-300:]}")
    return path


async def first_parent_range(host: Host, repo: str, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` along ``bad``'s first-parent line, oldest first.

    Both are full SHAs (see :func:`resolve_commit`). The last element is ``bad``; the first
    element's first parent is ``good``.

    Raises:
        GitError: ``good`` is not an ancestor of ``bad``, ``good`` is not on ``bad``'s
            first-parent line (it was merged in from a side branch), or the range is empty.
    """
    if good == bad:
        raise GitError(f"good and bad are the same commit ({good[:12]}): the range is empty")
    if (await _git(host, repo, "merge-base", "--is-ancestor", good, bad, check=False)).returncode != 0:
        raise GitError(f"good {good[:12]} is not an ancestor of bad {bad[:12]}; give the older commit first")
    shas = (await _git(host, repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}")).stdout.split()
    if not shas:
        raise GitError(f"no commits between good {good[:12]} and bad {bad[:12]}")
    if await first_parent(host, repo, shas[0]) != good:
        raise GitError(f"good {good[:12]} is not on the first-parent line of bad {bad[:12]} "
                       "(it was merged from a side branch); pick a commit on the main line")
    return shas


async def commit_summary(host: Host, repo: str, sha: str) -> tuple[str, str]:
    """(subject, committer date in ISO 8601) of the commit ``sha``."""
    out = (await _git(host, repo, "show", "-s", "--format=%s%x00%cI", sha)).stdout.rstrip("\n")
    subject, _, date = out.partition("\x00")
    return subject, date


async def diff_u0(host: Host, repo: str, parent: str, sha: str) -> str:
    """``git diff -U0`` between two commits (no renames, no colour, no external diff)."""
    return (await _git(host, repo, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-renames", parent, sha,
                       "--")).stdout


async def changed_files(host: Host, repo: str, base: str, head: str) -> list[str]:
    """The paths that differ between commits ``base`` and ``head`` (``git diff --name-only``, no
    renames: a renamed file is its old and its new path)."""
    result = await _git(host, repo, "diff", "--name-only", "--no-renames", "--no-ext-diff", base, head, "--")
    return [line for line in result.stdout.splitlines() if line]


async def file_at(host: Host, repo: str, sha: str, path: str) -> str | None:
    """The text of ``path`` at commit ``sha``, or ``None`` if it does not exist there."""
    result = await _git(host, repo, "show", f"{sha}:{path}", check=False)
    return result.stdout if result.returncode == 0 else None


async def files_naming(host: Host, repo: str, sha: str, words: list[str], folder: str) -> list[str]:
    """Paths under ``folder`` at commit ``sha`` whose text contains any of ``words`` (fixed strings)."""
    if not words:
        return []
    args = ["grep", "-l", "-F"]
    for word in words:
        args += ["-e", word]
    result = await _git(host, repo, *args, sha, "--", folder, check=False)
    return [line.split(":", 1)[1] for line in result.stdout.splitlines() if ":" in line]


async def first_parent_order(host: Host, repo: str, ref: str = "HEAD", limit: int | None = None) -> list[str]:
    """The commits on ``ref``'s first-parent chain in ``repo`` on ``host``, oldest first
    (full SHAs; with ``limit``, only the newest ``limit``): the order a branch's history is read
    in. The whole chain by default: a history cut at the newest 2,000 commits lost an older
    change point without a word (issue 43); git lists 100,000 first parents in well under a second.

    Raises:
        GitError: ``ref`` is not a ref or names no commit (see :func:`resolve_commit`).
        HostError: the host cannot be reached.
    """
    sha = await resolve_commit(host, repo, ref)
    count = [f"--max-count={int(limit)}"] if limit is not None else []
    result = await _git(host, repo, "rev-list", "--first-parent", *count, sha)
    return list(reversed(result.stdout.split()))


async def branch_head(host: Host, repo: str, branch: str, fetch: bool = True) -> str:
    """The full SHA of the head of ``branch`` in ``repo`` on ``host``.

    With ``fetch`` and a remote (``origin`` if there is one, else the first ``git remote``
    lists), ``git fetch <remote> <branch>`` runs first and the remote-tracking head
    ``<remote>/<branch>`` is read; a repository without a remote has its own ``branch`` read.

    Raises:
        GitError: ``branch`` is not a ref name, the fetch failed, or the branch names no commit.
        HostError: the host cannot be reached.
    """
    check_ref_text(branch)
    remotes = (await _git(host, repo, "remote", check=False)).stdout.split()
    if fetch and remotes:
        remote = "origin" if "origin" in remotes else remotes[0]
        result = await _git(host, repo, "fetch", "--quiet", "--no-tags", remote,
                            f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}", check=False)
        if result.returncode != 0:
            raise GitError(f"git fetch {remote} {branch} failed in {repo} on host {host.name}: "
                           f"{result.stderr.strip()[-300:]}")
        return await resolve_commit(host, repo, f"refs/remotes/{remote}/{branch}")
    return await resolve_commit(host, repo, f"refs/heads/{branch}")
