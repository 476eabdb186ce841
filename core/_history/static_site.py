"""History pages: the stored history as a static site of plain files (``specperf report --html DIR``).

:func:`build_history_site` writes, from data objects only (no database here):

- ``index.html``: the headline, one row per series (engine, host, mode, workload) linked to
  its trend page, and every run linked to its page;
- one trend page per series (:func:`series_page`; a prompt set's category has series of its
  own, ``WORKLOAD:CATEGORY``, without compare markers): output tok/s over the series' commits in
  the order the summary has them (:func:`core._history.summary.build_summary` entries), with each compare's
  95% interval and verdict on its head commit (REGRESSION red down-triangle, IMPROVEMENT
  green up-triangle, NO CHANGE grey diamond, INCONCLUSIVE hollow orange square), disturbed
  launches as red-edged crosses (hollow: left out of the statistics), and what
  :func:`core._history.summary.draw_series_layers` draws (change points, environment changes at the
  foot of the axis, last good commit, drift, acceptance length). Every point, interval,
  verdict marker and cross links to its run's page;
- one page per run (:func:`run_page`): its trials in launch order, its chart
  (:func:`core._experiments.report.render_chart`, as an SVG file under ``charts/``), the verdicts with their
  reasons and limits, and the fingerprint differences between its arms, all as
  ``specperf show`` computes them (the caller passes that report in :class:`RunPage`).

The trend graph is an SVG inlined in its page, its links SVG ``<a>`` elements that
matplotlib's SVG backend writes for artists with URLs (``Collection.set_urls``): an image
map would need pixel positions recomputed from matplotlib's transforms and breaks when the
browser scales the image; an inline SVG's links scale with it and stay on the drawn marks.
Nothing is fetched: no scripts, fonts (matplotlib writes text as paths) or remote images;
the pages open from disk (``file://``) and from any static web server alike.

A rebuild draws only what changed: the index and the trend pages are written every time, a
run's page (and its chart) only when the page differs from the one there (:func:`build_history_site`).

The folder is the user's: every page carries :data:`GENERATOR` and is written to a new file
beside its name, then renamed over it (:func:`_write_new`), so nothing is written through a
symbolic link and a half-written page never shows. Before anything is written, every name the
build will write is checked (:func:`_check_names`): a symbolic link there, or a page there that
specperf did not write (a user's own ``index.html``), stops the build with its name and nothing
is written; charts live in ``charts/``, which must not be a link either.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import hashlib
import html
import io
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from core._experiments.report import render_chart
from core._experiments.stats import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, ArmTrial
from core._history.summary import RegressionSummary, draw_series_layers, trial_dots

INDEX_PAGE = "index.html"
_CHARTS = "charts"
GENERATOR = '<meta name="generator" content="specperf history pages">'

# verdict -> (marker, face colour, edge colour); a hollow face is "none"
VERDICT_MARKERS = {
    REGRESSION: ("v", "#c44e52", "#c44e52"),
    IMPROVEMENT: ("^", "#55a868", "#55a868"),
    NO_CHANGE: ("D", "#8c8c8c", "#8c8c8c"),
    INCONCLUSIVE: ("s", "none", "#dd8452"),
}


def series_page(engine: str, host: str, mode: str, workload: str) -> str:
    """The file name (relative to the site's folder) of a series' trend page:
    ``trend-<engine>-<mode>-<workload>-<host>-<8 hex>.html``, characters outside
    ``[A-Za-z0-9_.-]`` replaced by ``_`` and the hash of the exact names keeping two series
    apart whose names differ only there. Safe in a URL as it is."""
    key = "\x00".join((engine, host, mode, workload))
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{engine}-{mode}-{workload}-{host}")[:80]
    return f"trend-{slug}-{hashlib.sha1(key.encode()).hexdigest()[:8]}.html"


def run_page(run_id: int) -> str:
    """The file name of run ``run_id``'s page: ``run-<id>.html``."""
    return f"run-{run_id}.html"


@dataclasses.dataclass(frozen=True)
class RunPage:
    """What one run's page shows: the stored run, and what ``specperf show`` computes of it.

    Attributes:
        run_id, kind (``compare``, ``bisect``), status (``done``, ``failed``, ...), engine,
            host, workload, modes, base_ref, base_sha, head_ref, head_sha, created_at (UTC),
            reason (why it failed or was interrupted, else ``None``), log_tail.
        report: the run's :func:`core._experiments.report.summarize` report (verdicts, ``launches`` in launch
            order, ``environment.arms_differ``), ``None`` when no trial was measured.
        trials: per mode and arm role the :class:`core._experiments.stats.ArmTrial` in the statistics (the
            input of :func:`core._experiments.report.render_chart`), with ``report``.
        figures: per launch number, the ok trial's figures (tok/s, acceptance length, TPOT).
        bisect: a bisect run's record (``settings["bisect"]``: steps, outcome, culprit).
    """

    run_id: int
    kind: str
    status: str
    engine: str
    host: str
    workload: str
    modes: list[str]
    base_ref: str
    base_sha: str
    head_ref: str
    head_sha: str
    created_at: dt.datetime
    reason: str | None = None
    log_tail: str | None = None
    report: dict | None = None
    trials: dict[str, dict[str, list[ArmTrial]]] | None = None
    figures: dict[int, ArmTrial] = dataclasses.field(default_factory=dict)
    bisect: dict | None = None

    def verdict(self, mode: str) -> dict | None:
        """The report's verdict dict of ``mode`` (``verdict``, ``change_pct``, ``ci_low_pct``,
        ``ci_high_pct``, ``p_value``, ``n_pairs``, ``reason``), or ``None``."""
        return ((self.report or {}).get("modes", {}).get(mode) or {}).get("verdict")


# ---------------------------------------------------------------------------------------------
# HTML helpers


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
nav { margin-bottom: 1em; } .dim { color: #777; }
.REGRESSION { color: #c44e52; font-weight: bold; } .IMPROVEMENT { color: #2e7d32; font-weight: bold; }
.NO_CHANGE { color: #666; } .INCONCLUSIVE { color: #c7641f; } .FAILED { color: #c44e52; }
.disturbed { background: #fdecea; }
figure { margin: 0.5em 0; } figure svg, figure img { max-width: 100%; height: auto; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _verdict_span(verdict: str | None) -> str:
    if not verdict:
        return "-"
    return f'<span class="{_e(verdict.replace(" ", "_"))}">{_e(verdict)}</span>'


def _page(title: str, body: str, nav: bool = True) -> str:
    back = f'<nav><a href="{INDEX_PAGE}">specperf history</a></nav>\n' if nav else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n{GENERATOR}\n<title>{_e(title)}</title>\n'
            f"<style>{_STYLE}</style>\n</head>\n<body>\n{back}<h1>{_e(title)}</h1>\n{body}\n</body>\n</html>\n")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
           row_class: Sequence[str] | None = None, table_id: str | None = None) -> str:
    """Cells are HTML already (escape text with :func:`_e`)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    lines = []
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = "".join(f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>" for j, c in enumerate(row))
        lines.append(f"<tr{cls}>{cells}</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(lines) + "\n</tbody>\n</table>"


def _commit(ref: str | None, sha: str) -> str:
    return f"{_e(ref)} <code>{_e(sha[:12])}</code>" if ref and ref != sha else f"<code>{_e(sha[:12])}</code>"


def _run_link(run_id: int, known: set[int]) -> str:
    return f'<a href="{run_page(run_id)}">run {run_id}</a>' if run_id in known else f"run {run_id}"


# ---------------------------------------------------------------------------------------------
# the trend graph


def _series_runs(e: dict, runs: Sequence[RunPage]) -> list[RunPage]:
    """The compares of series ``e``'s engine, host and workload that measured its mode."""
    return [r for r in runs if r.kind != "bisect" and (r.engine, r.host, r.workload) == (e["engine"], e["host"], e["workload"])
            and e["mode"] in r.modes]


def _point_url(point: dict, by_id: dict[int, RunPage]) -> str | None:
    """The page a point links to: of the newest run that had its commit as head, else of the
    newest that measured it; ``None`` when none of its runs has a page."""
    pages = [r for r in point["run_ids"] if r in by_id]
    heads = [r for r in pages if by_id[r].head_sha == point["sha"]]
    return run_page(max(heads or pages)) if pages else None


def _compare_marks(e: dict, runs: Sequence[RunPage], index: dict[str, int]
                   ) -> tuple[dict[str, tuple[list[float], list[float], list[str]]], tuple[list, list]]:
    """Where :func:`trend_svg` draws the compares of series ``e`` whose head is a point of it
    (``index``: sha -> x): ``({verdict: (xs, ys, run page links)}, (interval segments, their
    links))``, several compares of one commit side by side right of its median."""
    mine = [r for r in _series_runs(e, runs) if r.head_sha in index]
    per_commit: dict[str, list[RunPage]] = {}
    for r in mine:
        per_commit.setdefault(r.head_sha, []).append(r)
    marks: dict[str, tuple[list[float], list[float], list[str]]] = {}
    bars: tuple[list, list] = ([], [])
    for sha, group in per_commit.items():
        for n, r in enumerate(group):
            at = index[sha] + 0.12 * (n - (len(group) - 1) / 2) + 0.18  # right of the commit's median
            v, base = r.verdict(e["mode"]), ((r.report or {}).get("modes", {}).get(e["mode"]) or {}).get("base", {})
            base_tok_s = base.get("output_tok_s")
            if v and base_tok_s and v.get("change_pct") is not None:
                if v.get("ci_low_pct") is not None and v.get("ci_high_pct") is not None:
                    bars[0].append([(at, base_tok_s * (1 + v["ci_low_pct"] / 100)),
                                    (at, base_tok_s * (1 + v["ci_high_pct"] / 100))])
                    bars[1].append(run_page(r.run_id))
                xv, yv, urls = marks.setdefault(v["verdict"], ([], [], []))
                xv.append(at)
                yv.append(base_tok_s * (1 + v["change_pct"] / 100))
                urls.append(run_page(r.run_id))
    return marks, bars


def _disturbed_crosses(e: dict, runs: Sequence[RunPage], index: dict[str, int]
                       ) -> dict[bool, tuple[list[float], list[float], list[str]]]:
    """The disturbed launches of series ``e``'s runs at their commits: ``{kept: (xs, ys, run
    page links)}`` (kept, or left out and re-measured)."""
    crosses: dict[bool, tuple[list[float], list[float], list[str]]] = {True: ([], [], []), False: ([], [], [])}
    for r in _series_runs(e, runs):
        for row in (r.report or {}).get("launches", []):
            sha = r.head_sha if row["role"] == "head" else r.base_sha
            if row["mode"] == e["mode"] and row["disturbed"] and sha in index and row["output_tok_s"] is not None:
                xv, yv, urls = crosses[bool(row["kept"])]
                xv.append(index[sha])
                yv.append(row["output_tok_s"])
                urls.append(run_page(r.run_id))
    return crosses


def trend_svg(e: dict, runs: Sequence[RunPage]) -> str:
    """The trend graph of series ``e`` (a :func:`core._history.summary.build_summary` series dict) as an SVG
    document (text, ``<svg ...>...</svg>`` without the XML prologue), its marks linked to
    the pages of ``runs`` (:func:`run_page`, relative): x is the point index in ``e``'s
    commit order, y output tok/s. A compare's interval is its 95% CI of the change applied to
    its base arm's median tok/s, drawn at its head commit (several compares of one commit
    side by side); its verdict marker sits at the estimated change. Compares whose head is
    not a point of the series (a side branch) are left off the graph (the page lists them).

    The marks' SVG groups are named: ``medians``, ``intervals``, ``verdict-REGRESSION``,
    ``verdict-IMPROVEMENT``, ``verdict-NO_CHANGE``, ``verdict-INCONCLUSIVE``, ``disturbed``,
    ``disturbed-left-out``, and :func:`core._history.summary.draw_series_layers`' ``change-point-<i>``
    and ``environment-change-<i>``; each link is an ``<a>`` inside its group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = e["points"]
    index = {p["sha"]: i for i, p in enumerate(points)}
    by_id = {r.run_id: r for r in runs}
    xs = list(range(len(points)))
    fig, ax = plt.subplots(figsize=(11, 4.6))
    ax.scatter(*trial_dots(points), s=10, color="#4c72b0", alpha=0.35)
    ax.plot(xs, [p["output_tok_s"] for p in points], color="#4c72b0", lw=1.5)
    medians = ax.scatter(xs, [p["output_tok_s"] for p in points], color="#4c72b0", s=36, zorder=3,
                         label="output tok/s (median of the commit's trials)")
    medians.set_urls([_point_url(p, by_id) for p in points])
    medians.set_gid("medians")

    marks, bars = _compare_marks(e, runs, index)
    crosses = _disturbed_crosses(e, runs, index)
    if bars[0]:
        from matplotlib.collections import LineCollection

        lines = LineCollection(bars[0], colors="#555555", linewidths=1.2, zorder=4, label="compare's 95% interval")
        lines.set_urls(bars[1])
        lines.set_gid("intervals")
        ax.add_collection(lines)
    for verdict, (marker, face, edge) in VERDICT_MARKERS.items():
        if verdict in marks:
            xv, yv, urls = marks[verdict]
            dots = ax.scatter(xv, yv, marker=marker, s=60, facecolors=face, edgecolors=edge, linewidths=1.5, zorder=5,
                              label=verdict)
            dots.set_urls(urls)
            dots.set_gid(f"verdict-{verdict.replace(' ', '_')}")
    for kept, (xv, yv, urls) in crosses.items():
        if xv:
            dots = ax.scatter(xv, yv, marker="X", s=70, facecolors="#4c72b0" if kept else "none", edgecolors="#c44e52",
                              linewidths=1.5, zorder=5,
                              label="disturbed launch" + ("" if kept else " (left out, re-measured)"))
            dots.set_urls(urls)
            dots.set_gid("disturbed" if kept else "disturbed-left-out")
    draw_series_layers(ax, e)
    ax.set_xlim(-0.6, len(points) - 0.4)
    ax.set_title(f"{e['engine']} / {e['mode']} ({e['workload']}, host {e['host']}, {e['ordered_by']} order)",
                 fontsize=10, pad=24)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.06, 1.0))
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Type": None})
    plt.close(fig)
    text = buffer.getvalue()
    # matplotlib opens links in a new tab (target="_blank"); a page of the site opens in place
    return text[text.index("<svg"):].replace(' target="_blank"', "")


# ---------------------------------------------------------------------------------------------
# pages


def _index_html(history: RegressionSummary, runs: Sequence[RunPage], headline: str, generated_at: dt.datetime) -> str:
    known = {r.run_id for r in runs}
    rows = []
    for e in history.series:
        latest = e["latest"]
        rows.append([f'<a href="{series_page(e["engine"], e["host"], e["mode"], e["workload"])}">'
                     f"{_e(e['engine'])} / {_e(e['mode'])}</a>", _e(e["workload"]), _e(e["host"]), str(e["n_points"]),
                     _commit(latest["ref"], latest["sha"]), _num(latest["output_tok_s"]),
                     str(len(e["change_points"])), str(len(e["env_changes"]))])
    series = _table(["series", "workload", "host", "commits", "latest", "output tok/s", "change points",
                     "environment changes"], rows, numeric=(3, 5, 6, 7), table_id="series") \
        if rows else "<p>No series: no done run measured a commit.</p>"
    run_rows = []
    for r in sorted(runs, key=lambda r: r.run_id, reverse=True):
        verdicts = ", ".join(f"{_e(m)}: {_verdict_span(v['verdict'])} {_pct(v.get('change_pct'))}"
                             for m in r.modes if (v := r.verdict(m))) or "-"
        if r.kind == "bisect":
            verdicts = _e(f"bisect: {(r.bisect or {}).get('outcome', 'unfinished')}")
        run_rows.append([_run_link(r.run_id, known), _e(f"{r.created_at:%Y-%m-%d %H:%M}"), _e(r.kind),
                         _verdict_span("FAILED") if r.status == "failed" else _e(r.status), _e(r.engine), _e(r.host),
                         _commit(r.head_ref, r.head_sha), _commit(r.base_ref, r.base_sha), verdicts])
    body = (f"<p><strong>{_e(headline)}</strong></p>\n<p class=\"dim\">generated {generated_at:%Y-%m-%d %H:%M} UTC "
            f"from {len(runs)} stored runs</p>\n<h2>Series</h2>\n{series}\n<h2>Runs</h2>\n"
            + (_table(["run", "when (UTC)", "kind", "status", "engine", "host", "commit", "base", "verdicts"], run_rows,
                      table_id="runs") if run_rows else "<p>No runs.</p>"))
    return _page("specperf history", body, nav=False)


def _trend_html(e: dict, runs: Sequence[RunPage]) -> str:
    known = {r.run_id for r in runs}
    shas = {p["sha"] for p in e["points"]}
    parts = [f"<figure id=\"trend\">{trend_svg(e, runs)}</figure>",
             "<p class=\"dim\">Dots: the commit's trials; circles: their median (linked to the run that measured the "
             "commit as head); bars and markers at a head commit: each compare's 95% interval and verdict (linked to "
             "its run); crosses: disturbed launches; dashed lines: confirmed change points; dotted orange lines: "
             "environment changes.</p>"]
    for cp in e["change_points"]:
        test = cp["test"] or {}
        parts.append(f"<p>{_verdict_span(cp['verdict'])} change point at <code>{_e(cp['range'])}</code>: "
                     f"{_num(cp['output_tok_s_before'])} &rarr; {_num(cp['output_tok_s_after'])} tok/s, "
                     f"{_pct(test.get('change_pct'))} (95% CI {_pct(test.get('ci_low_pct'))} .. "
                     f"{_pct(test.get('ci_high_pct'))}); bisect: <code>{_e(cp['bisect'])}</code></p>")
    drift = e["drift"]
    if drift and drift["flagged"]:
        parts.append(f"<p class=\"REGRESSION\">Trailing drift: {_pct(drift['test']['change_pct'])} against the last good "
                     f"<code>{_e(drift['good_sha'][:12])}</code>; bisect: <code>{_e(drift['bisect'])}</code></p>")
    if e["short_series"]:
        short = e["short_series"]
        parts.append(f"<p>Short series: {_e(short['reason'])}; {_verdict_span(short['verdict'])}</p>")
    if e["env_changes"]:
        parts.append("<h2>Environment changes</h2>\n<ul>" + "".join(
            f"<li><code>{_e(c['sha'][:12])}</code>: {_e('; '.join(c['lines']))}</li>" for c in e["env_changes"]) + "</ul>")
    rows = [[str(i), _commit(p["ref"], p["sha"]), _num(p["output_tok_s"]), _num(p["acceptance_length"], 2),
             str(len(p["trials_output_tok_s"])), ", ".join(_run_link(r, known) for r in p["run_ids"])]
            for i, p in enumerate(e["points"])]
    parts.append("<h2>Commits</h2>\n" + _table(["#", "commit", "output tok/s", "acceptance length", "trials", "runs"], rows,
                                               numeric=(0, 2, 3, 4), table_id="points"))
    compares = []
    for r in sorted(_series_runs(e, runs), key=lambda r: r.run_id):
        v = r.verdict(e["mode"]) or {}
        interval = (f"{_pct(v['ci_low_pct'])} .. {_pct(v['ci_high_pct'])}" if v.get("ci_low_pct") is not None else "-")
        off = "" if r.head_sha in shas else ' <span class="dim">(head not on the series)</span>'
        compares.append([_run_link(r.run_id, known), _commit(r.head_ref, r.head_sha) + off, _commit(r.base_ref, r.base_sha),
                         (_verdict_span(v.get("verdict")) + (" <strong>(outputs changed)</strong>"
                                                             if (v.get("outputs") or {}).get("status") == "changed"
                                                             else "")) if r.status == "done" else _e(r.status),
                         _pct(v.get("change_pct")),
                         interval])
    if compares:
        parts.append("<h2>Compares</h2>\n" + _table(["run", "commit", "base", "verdict", "change", "95% CI"], compares,
                                                    numeric=(4,), table_id="compares"))
    return _page(f"{e['engine']} / {e['mode']} ({e['workload']}, host {e['host']})", "\n".join(parts))


def _run_html(r: RunPage, chart: str | None, series_pages: dict[tuple[str, str, str, str], str],
              known: set[int], chart_source: str = "",
              category_pages: dict[tuple[str, str, str, str], list[tuple[str, str]]] | None = None) -> str:
    """``category_pages``: per (engine, host, mode, workload) its categories' trend pages,
    ``(category, page)`` in category order (:func:`_category_pages`)."""
    parts = [f"<p>{_e(r.kind)} of <strong>{_e(r.engine)}</strong> on host {_e(r.host)}, workload {_e(r.workload)}, "
             f"modes {_e(', '.join(r.modes))}: {_commit(r.head_ref, r.head_sha)} against {_commit(r.base_ref, r.base_sha)}, "
             f"started {r.created_at:%Y-%m-%d %H:%M:%S} UTC; status <strong>{_e(r.status)}</strong></p>"]
    trends = []
    for m in r.modes:
        if (key := (r.engine, r.host, m, r.workload)) in series_pages:
            trends.append(f'<a href="{series_pages[key]}">{_e(m)} trend</a>')
        if per_category := (category_pages or {}).get(key, []):
            trends.append(f"{_e(m)} per category: "
                          + ", ".join(f'<a href="{page}">{_e(category)}</a>' for category, page in per_category))
    if trends:
        parts.append("<p>" + " &middot; ".join(trends) + "</p>")
    if r.reason:
        parts.append(f"<p>reason: {_e(r.reason)}</p>")
    if r.log_tail and r.status == "failed":
        parts.append(f"<pre>{_e(r.log_tail)}</pre>")
    if r.bisect is not None:
        steps = [[_e(s.get("number", "")), _e(s.get("kind", "")), f"<code>{_e(s.get('head_sha', '')[:12])}</code>",
                  f"<code>{_e(s.get('base_sha', '')[:12])}</code>",
                  _verdict_span(s.get("verdict")) if s.get("verdict") else _e(s.get("evidence") or s.get("status", "")),
                  _run_link(s["compare_run_id"], known) if s.get("compare_run_id") else "-", _e(s.get("outcome", ""))]
                 for s in r.bisect.get("steps", [])]
        parts.append("<h2>Bisect</h2>\n" + _table(["step", "kind", "commit", "against", "evidence", "compare run",
                                                   "outcome"], steps, table_id="steps"))
        culprit = r.bisect.get("culprit")
        parts.append(f"<p>{_e(str(r.bisect.get('status') or 'unfinished').upper())}: {_e(r.bisect.get('message', ''))}"
                     + (f"; culprit <code>{_e(culprit)}</code>" if culprit else "") + "</p>")
    report = r.report
    if report is None:
        if r.bisect is None:
            parts.append("<p>No trial was measured: nothing to report.</p>")
        return _page(f"run {r.run_id}", "\n".join(parts))
    if report.get("headline"):
        parts.append(f"<p class=\"INCONCLUSIVE\">{_e(report['headline'])}</p>")
    rows = []
    for mode, entry in report["modes"].items():
        base, head, v = entry["base"], entry["head"], entry.get("verdict") or {}
        interval = f"{_pct(v['ci_low_pct'])} .. {_pct(v['ci_high_pct'])}" if v.get("ci_low_pct") is not None else "-"
        rows.append([_e(mode), _num(base["output_tok_s"]), _num(head["output_tok_s"]), _pct(v.get("change_pct")), interval,
                     "-" if v.get("p_value") is None else f"{v['p_value']:.3g}", _verdict_span(v.get("verdict")),
                     f"{_num(base['acceptance_length'], 2)} &rarr; {_num(head['acceptance_length'], 2)}",
                     f"{_num(base['step_ms'], 2)} &rarr; {_num(head['step_ms'], 2)}"])
    above = [line for entry in report["modes"].values() for line in entry.get("above", [])]
    if above:
        parts.append("<ul id=\"outputs-changed\">" + "".join(f"<li><strong>{_e(line)}</strong></li>" for line in above)
                     + "</ul>")
    parts.append("<h2>Verdicts</h2>\n" + _table(["mode", "base tok/s", "commit tok/s", "change", "95% CI", "p", "verdict",
                                                 "acceptance length", "ms / step"], rows, numeric=(1, 2, 3, 5),
                                                table_id="verdicts"))
    reasons = []
    for mode, entry in report["modes"].items():
        if v := entry.get("verdict"):
            limits = "".join(f"<li>{_e(line)}</li>" for line in entry.get("limits", []) + entry.get("notes", []))
            reasons.append(f"<li>{_e(mode)}: {_verdict_span(v['verdict'])} ({v['n_pairs']} pairs): {_e(v['reason'])}"
                           + (f"<ul>{limits}</ul>" if limits else "") + "</li>")
    if reasons:
        parts.append("<h2>Why</h2>\n<ul id=\"reasons\">" + "".join(reasons) + "</ul>")
    if cost := report.get("cost"):
        parts.append(f'<p id="cost">{_e(cost["line"])}</p>')
    differ = (report.get("environment") or {}).get("arms_differ") or []
    parts.append("<h2>Fingerprint differences between the arms</h2>\n" + (
        "<ul id=\"fingerprint\">" + "".join(f"<li>{_e(line)}</li>" for line in differ) + "</ul>" if differ
        else "<p id=\"fingerprint\">none: both arms ran in the same environment (driver, libraries, settings).</p>"))
    if chart:
        parts.append(f'<h2>Chart</h2>\n<figure><img src="{chart}" alt="output tok/s per launch of run {r.run_id}" '
                     f'data-chart-source="{chart_source}"></figure>')
    trial_rows, classes = [], []
    for row in report.get("launches", []):
        figures = r.figures.get(row["seq"])
        tok_s = row["output_tok_s"]
        sha = r.head_sha if row["role"] == "head" else r.base_sha
        cell = f'<span data-output-tok-s="{tok_s!r}">{_num(tok_s, 2)}</span>' if tok_s is not None else "-"
        trial_rows.append([str(row["seq"]), _e(row["mode"]), "commit" if row["role"] == "head" else "base",
                           f"<code>{_e(sha[:12])}</code>", cell,
                           _num(figures.acceptance_length if figures else None, 2),
                           _num(figures.tpot_ms if figures else None, 2),
                           _e("; ".join(row["disturbed"])) if row["disturbed"] else "-",
                           "yes" if row["kept"] else "no (re-measured)"])
        classes.append("disturbed" if row["disturbed"] else "")
    parts.append("<h2>Trials, in launch order</h2>\n" + _table(
        ["launch", "mode", "arm", "sha", "output tok/s", "acceptance length", "TPOT ms", "disturbed", "in the statistics"],
        trial_rows, numeric=(0, 4, 5, 6), row_class=classes, table_id="trials"))
    return _page(f"run {r.run_id}: {r.engine} {r.head_sha[:12]} vs {r.base_sha[:12]}", "\n".join(parts))


def _refuse(path: Path, why: str) -> OSError:
    return FileExistsError(errno.EEXIST, f"{path} {why}: move it away or give another folder; nothing was written")


def _check_names(directory: Path, pages: Sequence[str], charts: Sequence[str]) -> None:
    """Raise before anything is written if a name the build writes is a symbolic link, or a
    page there was not written by specperf (no :data:`GENERATOR` in its head)."""
    if directory.is_symlink() and not directory.is_dir():
        raise _refuse(directory, "is a symbolic link to nothing")
    for name in [*pages, _CHARTS, *(f"{_CHARTS}/{c}" for c in charts)]:
        path = directory / name
        if path.is_symlink():
            raise _refuse(path, "is a symbolic link, which specperf does not write through")
    for name in pages:
        path = directory / name
        if path.exists():
            with path.open("rb") as page:
                head = page.read(4096)
            if GENERATOR.encode() not in head:
                raise _refuse(path, "was not written by specperf")


def _write_new(path: Path, write) -> None:
    """``write(temporary path)`` into a new file beside ``path`` (created exclusively), then
    renamed over ``path``: an existing name is replaced, never opened, so no link is followed."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclasses.dataclass(frozen=True)
class SiteBuild:
    """What :func:`build_history_site` did.

    Attributes:
        pages: every page of the site: ``index.html`` first, then the trend pages, then the
            run pages (their charts in ``charts/run-<id>.svg``).
        written: the pages this build wrote (the index and the trend pages always; a run's
            page, and its chart, only when the page it would write differs from the one there).
    """

    pages: list[Path]
    written: list[Path]


def _chart_code() -> str:
    """A digest of what draws a run's chart: :func:`render_chart`'s module source and
    matplotlib's version (either changed: every chart is drawn again)."""
    import matplotlib

    from core._experiments import report

    return hashlib.sha256(Path(report.__file__).read_bytes() + matplotlib.__version__.encode()).hexdigest()


def _chart_source(r: RunPage, title: str, code: str) -> str:
    """The digest of everything run ``r``'s chart is drawn from (its trials, launches, title,
    and :func:`_chart_code`): the page records it, so an unchanged page means an unchanged chart."""
    drawn = repr((r.trials, (r.report or {}).get("launches"), title, code))
    return hashlib.sha256(drawn.encode()).hexdigest()[:32]


def _category_pages(series: Sequence[dict], series_pages: dict[tuple[str, str, str, str], str]
                    ) -> dict[tuple[str, str, str, str], list[tuple[str, str]]]:
    """Per (engine, host, mode, workload), the trend pages of its categories' series (entries
    with a ``category``, whose workload is ``WORKLOAD:CATEGORY``), ``(category, page)`` sorted."""
    pages: dict[tuple[str, str, str, str], list[tuple[str, str]]] = {}
    for e in series:
        if category := e.get("category"):
            key = (e["engine"], e["host"], e["mode"], e["workload"].removesuffix(f":{category}"))
            pages.setdefault(key, []).append((category, series_pages[(e["engine"], e["host"], e["mode"], e["workload"])]))
    return {key: sorted(found) for key, found in pages.items()}


def _same_file(path: Path, content: bytes) -> bool:
    """Whether ``path`` is a file that holds exactly ``content`` (never a link: those were
    refused by :func:`_check_names`)."""
    try:
        return path.stat().st_size == len(content) and path.read_bytes() == content
    except OSError:
        return False


def build_history_site(directory: Path, history: RegressionSummary, runs: Sequence[RunPage], *,
                       headline: str | None = None, generated_at: dt.datetime | None = None) -> SiteBuild:
    """Write the history pages into ``directory`` (created if missing; files of an earlier
    build with the same names are replaced, others left).

    The index and the trend pages are written every time (any new run changes them). A run's
    page is written only when the page it would be differs from the one there, and its chart
    drawn only then: the page records the digest of what its chart is drawn from
    (:func:`_chart_source`), so a rebuild over a long history draws only the new or changed
    runs' charts (drawing is nearly all of a build's time: bench/HISTORY_PAGES_RESULTS.md).

    Args:
        directory: the site's folder.
        history: the summary over the whole history (:func:`core._history.summary.build_summary` with
            ``since`` before the first run): one trend page per entry of its ``series``.
        runs: one page per run (:class:`RunPage`), the index lists them newest first.
        headline: the line at the top of the index (default ``history.headline``).
        generated_at: when, for the index (default: now, UTC).

    Returns:
        :class:`SiteBuild`: the site's pages and those written.

    Raises:
        OSError: the folder or a file in it cannot be written.
    """
    generated_at = generated_at or dt.datetime.now(dt.UTC)
    known = {r.run_id for r in runs}
    series_pages = {(e["engine"], e["host"], e["mode"], e["workload"]): series_page(e["engine"], e["host"], e["mode"],
                                                                                     e["workload"])
                    for e in history.series}
    charted = {r.run_id for r in runs if r.report is not None and r.trials}
    _check_names(directory, [INDEX_PAGE, *series_pages.values(), *(run_page(r.run_id) for r in runs)],
                 [f"run-{run_id}.svg" for run_id in charted])
    directory.mkdir(parents=True, exist_ok=True)
    pages = [directory / INDEX_PAGE]
    _write_new(pages[0], lambda p: p.write_text(_index_html(history, runs, headline or history.headline, generated_at),
                                                encoding="utf-8"))
    for e in history.series:
        path = directory / series_pages[(e["engine"], e["host"], e["mode"], e["workload"])]
        _write_new(path, lambda p, e=e: p.write_text(_trend_html(e, runs), encoding="utf-8"))
        pages.append(path)
    written = list(pages)
    if charted:
        (directory / _CHARTS).mkdir(exist_ok=True)
    code = _chart_code() if charted else ""
    category_pages = _category_pages(history.series, series_pages)
    for r in runs:
        chart = source = None
        if r.run_id in charted:
            chart = f"{_CHARTS}/run-{r.run_id}.svg"
            title = f"run {r.run_id}: {r.engine} {r.head_sha[:12]} vs {r.base_sha[:12]}"
            source = _chart_source(r, title, code)
        path = directory / run_page(r.run_id)
        pages.append(path)
        content = _run_html(r, chart, series_pages, known, source or "", category_pages).encode()
        if _same_file(path, content) and (chart is None or (directory / chart).is_file()):
            continue
        if chart is not None:
            _write_new(directory / chart, lambda p, r=r, title=title: render_chart(
                r.trials, p, title, r.report.get("launches"), image_format="svg"))
        _write_new(path, lambda p, content=content: p.write_bytes(content))
        written.append(path)
    return SiteBuild(pages, written)
