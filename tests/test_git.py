"""core._git: worktrees of one repository made by compares that no host lock serialises (Slurm
jobs on several nodes over a shared repository, the probes of a k-ary bisect round), against
a real git repository."""

from __future__ import annotations

import asyncio
import subprocess

from core._git import first_parent_order, worktree
from tests.conftest import local_host
from tests.fake_engine_repo import linear_history, make_repo


async def test_worktrees_of_one_commit_made_at_once_on_many_hosts_all_check_out(tmp_path):
    """Rounds of ten "nodes" (hosts with work directories of their own) each add a worktree of
    the same commit at once. git keeps one record per worktree in .git/worktrees and reads
    them all while adding one, so without the repository's lock an add or prune could meet a
    record still being written ("failed to read .git/worktrees/<sha>34/commondir"): seen in
    CI in a k-ary bisect round, and here about once in 60 adds without the lock (2026-12-02)."""
    repo = tmp_path / "repo"
    shas = make_repo(repo, linear_history(n=2, slow=0))
    made = []
    for round_ in range(6):
        hosts = [local_host(tmp_path / f"round{round_}-node{i}") for i in range(10)]
        paths = await asyncio.gather(*(worktree(h, str(repo), shas["good"]) for h in hosts))
        assert paths == [f"{h.workdir}/worktrees/{shas['good']}" for h in hosts]
        made += paths
    for path in made:
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        assert head.stdout.strip() == shas["good"]
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert all(f"worktree {path}\n" in listed for path in made)  # each one recorded by git, none lost


async def test_the_first_parent_order_holds_the_whole_history(tmp_path):
    """2,050 first-parent commits (made with git fast-import): the order reaches the root, so a
    change point on an old commit stays in the history (on 039b3a5 the order stopped at the
    newest 2,000 and the history page of such a run said "Quiet")."""
    repo = tmp_path / "long"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    stream = []
    for i in range(1, 2051):
        message = f"commit {i}"
        stream += ["commit refs/heads/main", f"mark :{i}", f"committer t <t@x> {1700000000 + i} +0000",
                   f"data {len(message)}", message]
        if i > 1:
            stream.append(f"from :{i - 1}")
        stream += ["M 644 inline f", "data 2", f"{i % 10}\n", ""]
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input="\n".join(stream) + "\n", text=True,
                   check=True)
    root = subprocess.run(["git", "-C", str(repo), "rev-list", "--max-parents=0", "main"], capture_output=True,
                          text=True, check=True).stdout.strip()
    order = await first_parent_order(local_host(tmp_path / "work"), str(repo), "main")
    assert len(order) == 2050 and order[0] == root
