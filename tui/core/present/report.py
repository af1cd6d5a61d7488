"""An incident report of one run: one Markdown file plus its charts as SVG images.

Why: when a run breaks, the person asking for help (an issue, a chat) has to retype
what the viewer shows: the environment, how it ended, the alert and its evidence, what
they already checked. ``dltop report`` and the viewer's ``r`` key write it for them.

Nothing here decides anything: the status and its reason come from the rules engine,
the crash headline and diagnosis from ``crash_view``/``crashdiag``, the checklist marks
from ``checklists.evaluate``, the person's ticks from the viewer's sidecar (``ticks``),
numbers from ``fmt``, the charts from ``panels.store_chart`` (the viewer's own min/max
decimation) drawn by ``svgchart``. Every string quoted from the log passes ``mdtext``,
so it shows as text wherever the report is pasted. The sections are in
``report_sections``; this module gathers the run and writes the files.

Where it goes: ``<log>.report.md`` next to the log (``<dir>.report.md`` next to a
directory of rank logs), with the images in the folder named like the report without
``.md`` (``<log>.report/loss.svg``); the Markdown links them by relative path, so the
pair can be moved or zipped together.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from . import report_sections as sections
from . import safewrite, svgchart
from .extra_panels import MAX_EXTRA, is_extra, pickable
from .panels import PANELS, panel_spec, store_chart
from .report_sections import ReportAlert, ReportRun
from .view_model import ViewState, alert_key, locked

if TYPE_CHECKING:
    from ..diagnosis.ticks import Ticks
    from ..store.run import RunModel

SUFFIX = ".report.md"
CHART_BUCKETS = 240  # a 120-column chart in the viewer asks for the same


@dataclass(frozen=True)
class Written:
    report: str
    charts: list[str]


def default_path(source: str) -> str:
    """``<log>.report.md`` beside the log (a directory's report beside the directory)."""
    return os.path.normpath(source) + SUFFIX


def viewer_path(log_path: str | None, run_id: str | None, now: float) -> str:
    """Where the viewer's ``r`` writes: beside the log; for a live socket (no file), the
    current directory, named by the run and the time."""
    if log_path:
        return default_path(log_path)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (run_id or "run"))[:60]
    return os.path.join(os.getcwd(), f"dltop-{safe.strip('.') or 'run'}-{stamp}{SUFFIX}")


def charts_dir(report_path: str) -> str:
    """The images' folder: the report's path without ``.md`` (``x.report.md`` -> ``x.report/``)."""
    base = report_path[:-3] if report_path.endswith(".md") else report_path + ".files"
    return base


def render(run: ReportRun, charts_link: str, now: float) -> tuple[str, dict[str, str]]:
    """The Markdown text and ``{file name: SVG}`` of the charts; ``charts_link`` is the
    images' folder as the Markdown links it (relative to the report)."""
    charts: dict[str, str] = {}
    titles: list[tuple[str, str]] = []
    empty: list[str] = []
    extras, left_out = report_panels(run)
    for key in [spec.key for spec in PANELS] + list(extras):
        data = store_chart(run.store, key, ViewState(), CHART_BUCKETS)
        title = panel_spec(run.store, key).title  # the memory panel of a CPU run: RSS
        if not data.has_points:
            empty.append(title)
            continue
        name = f"{chart_file(key)}.svg"
        charts[name] = svgchart.render(data, _panel_title(run, key, title))
        titles.append((title, f"{quote(charts_link)}/{name}"))
    if left_out:
        empty.append(f"{left_out} more series (`dltop report --panel NAME` charts them)")
    parts = [
        sections.heading(run.store.meta, run.source, run.verdict),
        sections.summary(run.state, run.store, [ra.alert for ra in run.alerts], run),
        sections.environment(run.store.meta, run.store, run.ranks),
        sections.ending(run.store, run.state),
        sections.last_values(run.store),
        sections.alerts(run.alerts, run.lang, alert_key),
        sections.charts(titles, empty, CHART_BUCKETS),
        sections.footer(now),
    ]
    return "\n\n".join(p.rstrip("\n") for p in parts if p) + "\n", charts


def report_panels(run: ReportRun) -> tuple[tuple[str, ...], int]:
    """The extra panels a report draws and how many series it leaves out."""
    if run.panels is not None:
        return run.panels, 0
    keys = [p.key for p in pickable(run.store) if not p.name.startswith("sys.")]
    return tuple(keys[:MAX_EXTRA]), max(0, len(keys) - MAX_EXTRA)


def chart_file(key: str) -> str:
    """A chart's file name: a built-in panel's key, or ``extra-<n>-<name>`` with the
    series name reduced to safe characters (it is the user's: ``rewards/mean``)."""
    if not is_extra(key):
        return key
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", key[1:])[:60].strip("._") or "series"
    return f"extra-{zlib.crc32(key.encode('utf-8', 'replace')) & 0xFFFF:04x}-{name}"


def _panel_title(run: ReportRun, key: str, title: str) -> str:
    run_id = (run.store.meta or {}).get("run_id")
    return f"{title} · {run_id}" if isinstance(run_id, str) and run_id else title


def write(run: ReportRun, path: str, now: float | None = None) -> Written:
    """Render and write the report and its images; raises ``OSError`` (the caller says it
    in one line). Each file is written whole or not at all (a temporary file renamed)."""
    now = time.time() if now is None else now
    folder = charts_dir(path)
    text, charts = render(run, os.path.basename(folder), now)
    return _write_files(path, folder, text, charts)


def _write_files(path: str, folder: str, text: str, charts: dict[str, str]) -> Written:
    """The report and its charts, each written whole; a symlink planted as the charts'
    folder, as one of its files or as the report is refused (``safewrite``), never
    written through."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(2, "no such directory", parent)
    parent_fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        # the file is replaced by a rename: onto /dev/null, a FIFO or a socket that would
        # put a regular file in place of the device (as root, in /dev itself)
        report_name = os.path.basename(path)
        safewrite.check_target(parent_fd, report_name, path)
        written: list[str] = []
        if charts:
            folder_fd = safewrite.open_folder(folder, create=True)
            try:
                for name, svg in charts.items():  # an older image left there is not linked
                    target = os.path.join(folder, name)
                    safewrite.write_in(folder_fd, name, svg, target)
                    written.append(target)
            finally:
                os.close(folder_fd)
        safewrite.write_in(parent_fd, report_name, text, path)
    finally:
        os.close(parent_fd)
    return Written(path, written)


def write_from_model(
    model: RunModel,
    source: str | None,
    ticks: Ticks | None,
    lang: str,
    now: float | None = None,
    path: str | None = None,
    panels: tuple[str, ...] | None = None,
) -> Written:
    """The viewer's ``r`` key: the run as the viewer holds it now (the rank shown, the
    ticks of its sidecar, the panels picked), rendered under the model's lock and written
    after it."""
    now = time.time() if now is None else now
    with locked(model):
        state = model.status(now)
        facts = model.facts()
        alerts = [
            ReportAlert(a, facts, ticks.ticked(alert_key(a)) if ticks is not None else set())
            for a in model.alerts()
        ]
        log_path = model.log_path
        meta = model.store.meta or {}
        run_id = meta.get("run_id")
        run_id = run_id if isinstance(run_id, str) else None
        # the followed file (the rank shown of a directory), else another tool's log path
        beside = log_path or (source if source and os.path.exists(source) else None)
        target = path or viewer_path(beside, run_id, now)
        run = ReportRun(
            source=source or log_path or model.label,
            store=model.store,
            state=state,
            alerts=alerts,
            lang=lang,
            skipped_lines=model.malformed,
            rules_error=model.engine_error,
            verdict=model.verdict(now, lang),
            panels=panels,
        )
        folder = charts_dir(target)
        text, charts = render(run, os.path.basename(folder), now)
    return _write_files(target, folder, text, charts)
