"""The history pages (core/_history/static_site.py, bot/_history_pages.py, ``specperf report --html``)
built from the stored history tests/fixtures/history.sqlite (eight compares of the fake
engine, h0..h8; copied first, never changed) and from a constructed history whose change
point, environment change, verdicts and disturbed launch are known; the Slack summary's links
to them; and, in a real headless Chromium, that the pages render and a trend point's link
reaches its run's page.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html.parser
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from PIL import Image

import core
import storage
from bot._history_pages import write_history_site
from bot._settings import parse_config
from bot._slack.summary_blocks import summary_blocks
from core._experiments.report import summarize
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, ArmTrial
from core._history.static_site import RunPage, build_history_site, series_page
from core._history.summary import build_summary
from tests.conftest import ROOT, SPECPERF, specperf_in_process
from tests.test_summary import NOW, history

FIXTURE = ROOT / "tests/fixtures/history.sqlite"


@pytest.fixture
def db_file(tmp_path) -> Path:
    """A byte copy of the stored history to build from: the fixture is never opened (SQLite
    would leave its -shm and -wal files beside it, even read-only)."""
    copy = tmp_path / "history.sqlite"
    shutil.copyfile(FIXTURE, copy)
    return copy


def _config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "specperf.toml"
    config.write_text('[compare]\nmargin_pct = 2.0\n' + extra)
    return config


def _report(tmp_path: Path, db_file: Path, *extra: str) -> subprocess.CompletedProcess:
    """``specperf report --since 2020-01-01 ...`` on the copy, in this process."""
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return specperf_in_process(["--config", str(_config(tmp_path)), "report", "--db", f"sqlite:///{db_file}",
                                "--since", "2020-01-01", *extra], cwd=tmp_path, env=env)


class _Links(html.parser.HTMLParser):
    """Every element's id, every ``href``/``xlink:href``/``src`` (with the ids of the ``<g>``
    groups around it), the trials table's rows of cell texts, the ``data-output-tok-s`` values
    and the page's title."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, tuple[str, ...]]] = []  # (attribute, value, enclosing g ids)
        self.anchors: list[tuple[str, tuple[str, ...]]] = []  # each <a>'s target and enclosing g ids
        self.title = ""
        self.cells: list[list[str]] = []
        self.tok_s: list[float] = []
        self._groups: list[str] = []
        self._tables: list[str] = []
        self._row: list[str] | None = None
        self._cell: str | None = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "g":
            self._groups.append(a.get("id", ""))
        for name in ("href", "xlink:href", "src"):
            if a.get(name) is not None:
                self.links.append((name, a[name], tuple(self._groups)))
        if tag == "a":
            self.anchors.append((a.get("href") or a.get("xlink:href") or "", tuple(self._groups)))
        if "data-output-tok-s" in a:
            self.tok_s.append(float(a["data-output-tok-s"]))
        if tag == "table":
            self._tables.append(a.get("id", ""))
        elif tag == "tr" and self._tables and self._tables[-1] == "trials":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = ""
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag == "g" and self._groups:
            self._groups.pop()
        elif tag == "table" and self._tables:
            self._tables.pop()
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.cells.append(self._row)
            self._row = None
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._cell is not None:
            self._cell += data


def _parse(page: Path) -> _Links:
    parsed = _Links()
    parsed.feed(page.read_text())
    return parsed


def _stored_trials(db_file: Path) -> dict[int, list[tuple[int, float]]]:
    """Straight from the table: run id -> [(launch, output tok/s)] of its ok trials."""
    with sqlite3.connect(db_file) as db:
        rows = db.execute("SELECT run_id, seq, output_tok_s FROM trials WHERE status = 'ok' ORDER BY run_id, seq")
        found: dict[int, list[tuple[int, float]]] = {}
        for run_id, seq, tok_s in rows:
            found.setdefault(run_id, []).append((seq, tok_s))
        return found


def _check_links(site: Path) -> int:
    """Every link of every page resolves to a file of the site (a fragment to an id of its page);
    none leads outside (http://, https://, //host). Returns the number checked."""
    checked = 0
    for page in site.glob("*.html"):
        parsed = _parse(page)
        for attribute, value, _ in parsed.links:
            parts = urlsplit(value)
            assert not parts.scheme and not parts.netloc, f"{page.name}: {attribute}={value!r} leaves the site"
            if parts.path:
                assert (page.parent / unquote(parts.path)).is_file(), f"{page.name}: {attribute}={value!r} is missing"
            else:
                assert parts.fragment in parsed.ids, f"{page.name}: {attribute}={value!r} names no element"
            checked += 1
    for chart in site.glob("charts/*.svg"):
        for value in re.findall(r'(?:href|src)="([^"]*)"', chart.read_text()):
            assert value.startswith("#"), f"{chart.name}: {value!r}"
    return checked


def test_the_site_of_the_stored_history(tmp_path, db_file):
    site = tmp_path / "site"
    done = _report(tmp_path, db_file, "--html", str(site))
    assert done.returncode == 0, done.stderr
    # index, 1 trend, 8 runs
    assert f"history pages: {site / 'index.html'} (10 pages, 10 written, 0 unchanged)" in done.stdout

    db = storage.open_database(f"sqlite:///{db_file}")
    series = storage.load_series(db)
    trend_pages = {series_page(*s.key) for s in series}
    assert len(trend_pages) == len(series) == 1
    assert {p.name for p in site.glob("trend-*.html")} == trend_pages
    stored = _stored_trials(db_file)
    with sqlite3.connect(db_file) as con:
        run_ids = [r for (r,) in con.execute("SELECT id FROM runs ORDER BY id")]
    assert run_ids == list(range(1, 9))
    assert {p.name for p in site.glob("run-*.html")} == {f"run-{r}.html" for r in run_ids}

    assert _check_links(site) > 50
    index = _parse(site / "index.html")
    index_targets = {value for _, value, _ in index.links}
    assert trend_pages | {f"run-{r}.html" for r in run_ids} <= index_targets

    # the numbers on each run page are the stored trials, in launch order
    for run_id in run_ids:
        page = _parse(site / f"run-{run_id}.html")
        assert page.title.startswith(f"run {run_id}: fake ")
        assert page.tok_s == [tok_s for _, tok_s in stored[run_id]]
        assert [int(row[0]) for row in page.cells] == [seq for seq, _ in stored[run_id]]
        assert [row[4] for row in page.cells] == [f"{tok_s:,.2f}" for _, tok_s in stored[run_id]]
        assert f"charts/run-{run_id}.svg" in {value for _, value, _ in page.links}
        assert series_page(*series[0].key) in {value for _, value, _ in page.links}

    # each commit's point on the trend links to the run that measured it as head (h0: base only)
    (s,) = series
    trend = _parse(site / series_page(*s.key))
    points = [value for value, groups in trend.anchors if "medians" in groups]
    head_of = {}
    with sqlite3.connect(db_file) as con:
        for run_id, head_sha in con.execute("SELECT id, head_sha FROM runs"):
            head_of[head_sha] = run_id
    assert points == [f"run-{head_of.get(p.sha, 1)}.html" for p in s.points]
    assert len(s.points) == 9
    # every compare's verdict marker links to its own run: seven INCONCLUSIVE, one NO CHANGE
    verdicts = {}
    for value, groups in trend.anchors:
        for group in groups:
            if group.startswith("verdict-"):
                verdicts.setdefault(group, []).append(value)
    assert {k: sorted(v) for k, v in verdicts.items()} == {
        "verdict-INCONCLUSIVE": sorted(f"run-{r}.html" for r in (1, 3, 4, 5, 6, 7, 8)),
        "verdict-NO_CHANGE": ["run-2.html"]}
    intervals = [value for value, groups in trend.anchors if "intervals" in groups]
    assert sorted(intervals) == sorted(f"run-{r}.html" for r in run_ids)


def test_no_page_fetches_anything_from_outside(tmp_path, db_file):
    site = tmp_path / "site"
    assert _report(tmp_path, db_file, "--html", str(site)).returncode == 0
    for page in [*site.glob("*.html"), *site.glob("charts/*.svg")]:
        text = page.read_text()
        outside = re.findall(r'(?:src|href|xlink:href|action|srcset)\s*=\s*["\']?\s*(?:https?:)?//', text, re.I)
        assert outside == [], page.name
        # no style that loads anything (url(#id) is an SVG's own clip path), no script at all
        assert "@import" not in text and not re.search(r"url\((?!#)", text) and "<script" not in text.lower(), page.name


def _run_page(run_id: int, base: str, head: str, verdict: str, change_pct: float, mode: str = "eagle3",
              disturbed: bool = False) -> RunPage:
    """A compare of ``head`` against ``base`` (series ``history()``'s engine, host, workload),
    two launches per arm, its report made by core._experiments.report.summarize as ``specperf show`` makes it."""
    base_tok, head_tok = 100.0, 100.0 * (1 + change_pct / 100)
    trials = {mode: {"base": [ArmTrial(base_tok - 1), ArmTrial(base_tok + 1)],
                     "head": [ArmTrial(head_tok - 1), ArmTrial(head_tok + 1)]}}
    settings = core.CompareConfig()
    v = core.Verdict(verdict, 2, change_pct, change_pct - 1.5, change_pct + 1.5, 0.01, 2.0, 0.05, None, None, None,
                     None, f"planted {verdict}")
    launches = [{"seq": seq, "mode": mode, "role": role, "output_tok_s": t.output_tok_s,
                 "disturbed": ["foreign CPU time 40% on the engine's CPUs"] if disturbed and seq == 2 else [],
                 "kept": True, "monitor_error": None}
                for seq, (role, t) in enumerate([("base", trials[mode]["base"][0]), ("head", trials[mode]["head"][0]),
                                                 ("head", trials[mode]["head"][1]), ("base", trials[mode]["base"][1])],
                                                start=1)]
    report = summarize(trials, {mode: v}, settings, {"arms_differ": ["NCCL 2.27.3 -> 2.28.9"]}, launches)
    return RunPage(run_id=run_id, kind="compare", status="done", engine="sglang-k2", host="h200-a",
                        workload="decode-bs1", modes=[mode], base_ref="b", base_sha=base, head_ref="h", head_sha=head,
                        created_at=NOW, report=report, trials=trials,
                        figures={row["seq"]: ArmTrial(row["output_tok_s"]) for row in launches})


def test_the_trend_shows_each_verdict_kind_change_points_environment_and_disturbance(tmp_path):
    s = history()  # a REGRESSION change point at 16, NCCL changes at 20
    shas = [p.sha for p in s.points]
    planted = {101: (shas[2], shas[3], REGRESSION, -8.0, False), 102: (shas[5], shas[6], IMPROVEMENT, 7.0, False),
               103: (shas[8], shas[9], NO_CHANGE, 0.3, True), 104: (shas[15], shas[16], INCONCLUSIVE, -4.0, False)}
    runs = [_run_page(r, base, head, verdict, change, disturbed=disturbed)
            for r, (base, head, verdict, change, disturbed) in planted.items()]
    for p, run_id in ((s.points[3], 101), (s.points[6], 102), (s.points[9], 103), (s.points[16], 104)):
        p.run_ids.append(run_id)
    summary = build_summary([s], since=NOW - dt.timedelta(days=400), now=NOW)
    written = build_history_site(tmp_path / "site", summary, runs, generated_at=NOW).pages
    assert [p.name for p in written] == ["index.html", series_page(*s.key)] + [f"run-{r}.html" for r in planted]
    trend = _parse(written[1])
    groups: dict[str, list[str]] = {}
    for value, enclosing in trend.anchors:
        for g in enclosing:
            groups.setdefault(g, []).append(value)
    # each verdict has its own marker group, linked to its run
    assert {g: v for g, v in groups.items() if g.startswith("verdict-")} == {
        "verdict-REGRESSION": ["run-101.html"], "verdict-IMPROVEMENT": ["run-102.html"],
        "verdict-NO_CHANGE": ["run-103.html"], "verdict-INCONCLUSIVE": ["run-104.html"]}
    assert groups["disturbed"] == ["run-103.html"]
    assert "change-point-16" in trend.ids and "environment-change-20" in trend.ids
    assert sorted(groups["intervals"]) == [f"run-{r}.html" for r in planted]
    # the commits these runs measured as head link to them; the others, whose runs have no page here, to nothing
    assert groups["medians"] == ["run-101.html", "run-102.html", "run-103.html", "run-104.html"]
    text = written[1].read_text()
    assert "NCCL" in text and "change point at" in text
    run103 = written[4].read_text()
    assert "foreign CPU time 40% on the engine&#x27;s CPUs" in run103 and 'class="disturbed"' in run103
    assert "NCCL 2.27.3 -&gt; 2.28.9" in run103 and "planted NO CHANGE" in run103


def test_a_rebuild_writes_only_the_runs_that_changed(tmp_path, db_file):
    """Drawing a run's chart is nearly all of a build's time (bench/HISTORY_PAGES_RESULTS.md):
    a rebuild draws and writes only the runs whose page changed; the index and the trend page
    are written every time."""
    site = tmp_path / "site"

    def build() -> tuple[str, dict[str, int]]:
        done = _report(tmp_path, db_file, "--html", str(site))
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stdout.splitlines() if line.startswith("history pages:")]
        return said[0], {str(f.relative_to(site)): f.stat().st_mtime_ns for f in site.rglob("*") if f.is_file()}

    first_line, first = build()
    assert first_line.endswith("(10 pages, 10 written, 0 unchanged)")
    charts = sorted(name for name in first if name.startswith("charts/"))
    assert len(charts) == 8
    again_line, again = build()
    assert again_line.endswith("(10 pages, 2 written, 8 unchanged)")
    assert {n: t for n, t in again.items() if n.startswith(("run-", "charts/"))} == \
        {n: t for n, t in first.items() if n.startswith(("run-", "charts/"))}
    assert again["index.html"] != first["index.html"]

    with sqlite3.connect(db_file) as db:  # one run's launch re-read: its page and chart must follow
        run_id, trial_id = db.execute("SELECT run_id, id FROM trials WHERE status = 'ok' ORDER BY id LIMIT 1").fetchone()
        db.execute("UPDATE trials SET output_tok_s = 12345.5 WHERE id = ?", (trial_id,))
    changed_line, changed = build()
    assert changed_line.endswith("(10 pages, 3 written, 7 unchanged)")
    moved = {n for n in changed if changed[n] != first[n]} - {"index.html"} - {n for n in changed if n.startswith("trend-")}
    assert moved == {f"run-{run_id}.html", f"charts/run-{run_id}.svg"}
    assert 12345.5 in _parse(site / f"run-{run_id}.html").tok_s


def test_an_unwritable_folder_is_one_line_naming_it(tmp_path, db_file):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = _report(tmp_path, db_file, "--html", str(blocker / "site"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"config error: --html {blocker / 'site'}: cannot write the history pages there ")
    assert "Not a directory" in lines[0] and "give a folder you may write to" in lines[0]
    assert done.stdout == ""  # refused before the report ran


def test_the_summary_links_to_the_pages_when_a_base_url_is_set(tmp_path, db_file):
    config = parse_config('[report]\nhtml_base_url = "https://perf.example/specperf/"\n')
    assert config.report.html_base_url == "https://perf.example/specperf"
    db = storage.open_database(f"sqlite:///{db_file}")
    series = storage.load_series(db)
    site = tmp_path / "site"
    write_history_site(db, series, site)
    summary = build_summary(series, since=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
                                 now=dt.datetime(2026, 12, 2, tzinfo=dt.UTC))
    summary = dataclasses.replace(summary, quiet=False)  # the fixture's period is quiet: show its series
    blocks, text = summary_blocks(summary, links={}, pages_url=config.report.html_base_url)
    links = re.findall(r"<(https://perf\.example/specperf/[^|>]+)\|([a-z ]+)>", str(blocks))
    assert links == [("https://perf.example/specperf/index.html", "history pages"),
                     (f"https://perf.example/specperf/{series_page(*series[0].key)}", "trend")]
    for url, _ in links:
        assert (site / url.rsplit("/", 1)[1]).is_file()
        assert url in text
    plain, plain_text = summary_blocks(summary, links={})
    assert "perf.example" not in str(plain) + plain_text


@pytest.mark.parametrize("table, message", [
    ('[report]\nhtml_base_ur = "https://x"\n', "unknown key 'report.html_base_ur'"),
    ('[report]\nhtml_base_url = "perf.example/specperf"\n', "report.html_base_url: must be the http:// or https://"),
    ('[report]\nhtml_base_url = "https://perf.example/?a=1"\n', "report.html_base_url: must be"),
])
def test_a_bad_report_key_names_itself(table, message):
    with pytest.raises(core.ConfigError) as error:
        parse_config(table, "specperf.toml")
    assert str(error.value).count("\n") == 0 and message in str(error.value)


# ---------------------------------------------------------------------------------------------
# in a real browser


def _browser(chromium: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run, console messages on stderr (``--enable-logging=stderr``)."""
    profile = tmp_path / "chromium-profile"
    return subprocess.run([str(chromium), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                           "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=120, check=False)


def _console_errors(stderr: str) -> list[str]:
    """The console messages (``INFO:CONSOLE:<line>] "..."``: console calls and uncaught
    exceptions) and failed page loads in a ``--enable-logging=stderr`` stderr. A missing
    image or stylesheet logs nothing there: the fast tests check that every link resolves."""
    return [line for line in stderr.splitlines()
            if re.search(r"CONSOLE[:(]\d+|Uncaught|Page load failed|net::ERR_", line)]


def _screenshot(chromium: Path, tmp_path: Path, url: str, name: str) -> Path:
    shot = tmp_path / f"{name}.png"
    done = _browser(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,1400", url)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert _console_errors(done.stderr) == [], done.stderr[-4000:]
    print(f"screenshot: {shot}")
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20) or []
        assert rgb.size == (1280, 1400)
        # not one colour: a white page with text, tables and a chart has many
        assert len(colours) > 50, f"{shot}: {len(colours)} colours"
        ink = sum(n for n, colour in colours if sum(colour) < 600)  # pixels clearly darker than white
        assert ink > 0.005 * 1280 * 1400, f"{shot}: {ink} dark pixels"
    return shot


def test_the_pages_render_in_chromium_and_a_trend_point_reaches_its_run(tmp_path, db_file, chromium):
    # the console channel works: a page's console.error and its uncaught exception are caught
    probe = tmp_path / "probe.html"
    probe.write_text('<!DOCTYPE html><html><body><script>console.error("probe-error"); throw new Error("probe-throw")'
                     "</script></body></html>")
    seen = _console_errors(_browser(chromium, tmp_path, "--dump-dom", probe.as_uri()).stderr)
    assert any("probe-error" in line for line in seen) and any("probe-throw" in line for line in seen), seen
    assert _console_errors(_browser(chromium, tmp_path, "--dump-dom", (tmp_path / "no-such.html").as_uri()).stderr)

    site = tmp_path / "site"
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    done = subprocess.run([*SPECPERF, "--config", str(_config(tmp_path)), "report", "--db", f"sqlite:///{db_file}",
                           "--since", "2020-01-01", "--html", str(site)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (trend,) = site.glob("trend-*.html")
    _screenshot(chromium, tmp_path, (site / "index.html").as_uri(), "index")
    _screenshot(chromium, tmp_path, trend.as_uri(), "trend")

    dom = _browser(chromium, tmp_path, "--dump-dom", trend.as_uri())
    assert dom.returncode == 0 and _console_errors(dom.stderr) == [], dom.stderr[-4000:]
    parsed = _Links()
    parsed.feed(dom.stdout)
    assert {"trend", "medians", "points"} <= parsed.ids  # the inline SVG is in the live DOM
    points = [value for value, groups in parsed.anchors if "medians" in groups]
    assert len(points) == 9
    target = trend.parent / points[5]  # h5, whose head run is run 5
    assert target.name == "run-5.html"
    run_dom = _browser(chromium, tmp_path, "--dump-dom", target.as_uri())
    assert run_dom.returncode == 0 and _console_errors(run_dom.stderr) == [], run_dom.stderr[-4000:]
    run = _Links()
    run.feed(run_dom.stdout)
    assert run.title.startswith("run 5: fake ") and "trials" in run.ids
    assert run.tok_s == [tok_s for _, tok_s in _stored_trials(db_file)[5]]
    _screenshot(chromium, tmp_path, target.as_uri(), "run-5")
