"""``specperf report --html DIR`` writes only what it may into a folder the user named (issue
43): no write through a symbolic link, no file of the user's truncated or replaced, and the
folder's writability proved without touching any name that may already be there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import storage
from tests.conftest import specperf_in_process


@pytest.fixture
def report_html(tmp_path):
    url = f"sqlite:///{tmp_path}/runs.sqlite"
    storage.open_database(url)  # an empty history: the index alone

    def report(folder: Path):
        return specperf_in_process(["report", "--db", url, "--html", str(folder), "--since", "7d"],
                                   env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")})
    return report


def test_links_and_a_users_own_index_are_refused_and_left_as_they_were(tmp_path, report_html):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's notes\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").symlink_to(victim)
    (site / ".specperf-write-test").symlink_to(victim)  # the old probe truncated this and removed the link
    result = report_html(site)
    assert result.returncode == 2, result.stderr
    assert "index.html is a symbolic link" in result.stderr and "nothing was written" in result.stderr
    assert victim.read_text() == "the user's notes\n"
    assert (site / "index.html").is_symlink() and (site / ".specperf-write-test").is_symlink()

    (site / "index.html").unlink()
    (site / "index.html").write_text("<html>my own page</html>")
    result = report_html(site)
    assert result.returncode == 2 and "index.html was not written by specperf" in result.stderr, result.stderr
    assert (site / "index.html").read_text() == "<html>my own page</html>"


def test_pages_of_an_earlier_build_are_replaced_and_nothing_else_is_left(tmp_path, report_html):
    site = tmp_path / "site"
    assert report_html(site).returncode == 0
    first = (site / "index.html").read_text()
    assert report_html(site).returncode == 0  # its own page: replaced
    assert (site / "index.html").read_text().startswith("<!DOCTYPE html>") and first
    assert sorted(p.name for p in site.iterdir()) == ["index.html"]  # no probe or temporary file left


def test_an_empty_html_or_json_path_is_a_usage_error(tmp_path, report_html):
    url = f"sqlite:///{tmp_path}/runs.sqlite"
    for option in ("--html", "--json"):
        result = specperf_in_process(["report", "--db", url, option, ""],
                                     env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")})
        assert result.returncode == 2 and "empty path" in result.stderr, (option, result.stderr)


def test_a_mistyped_db_path_creates_nothing(tmp_path):
    missing = tmp_path / "no" / "such" / "runs.sqlite"
    result = specperf_in_process(["show", "1", "--db", f"sqlite:///{missing}"],
                                 env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")})
    assert result.returncode == 2 and "no database at" in result.stderr, result.stderr
    assert not (tmp_path / "no").exists()
