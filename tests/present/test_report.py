"""`dltop report`: the Markdown incident report and its SVG charts, end to end.

The report is pasted where Markdown is rendered, so besides "every section is there" the
tests render it (markdown-it, CommonMark with tables, as trackers do) and check that text
from a hostile log stays text: no tag, link, image, heading or emphasis of its own. Bad
input must end as one line with a hint and exit 3, as `dltop check` does.
"""

from __future__ import annotations

import asyncio
import html
import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import pytest
from dltop.demos._common import DEMOS
from dltop.probe.encoding import encode_record
from dltop.tui.core.diagnosis.checklists import load_checklist
from dltop.tui.core.diagnosis.ticks import sidecar_path
from dltop.tui.core.present import report, svgchart
from dltop.tui.core.present.chartdata import EVAL, RAW, ChartData, Trace
from dltop.tui.core.present.report_sections import HEADINGS
from dltop.tui.core.text import mdtext as md
from dltop.tui.core.text.safetext import visible
from markdown_it import MarkdownIt
from rulekit import Run
from test_app_support import records as support_records

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "DLTOP_DEMO_THREADS": "1", "PYTHONUNBUFFERED": "1"}
SVG = "{http://www.w3.org/2000/svg}"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")
HOSTILE = (
    "<img src=x onerror=alert(1)> **bold** [link](http://evil.example) "
    "![i](http://evil.example/p.png) `tick` ``` \x1b]52;c;cm0=\x07\x1b[2J\x9b31m \u202egnp "
    "| _u_ $x$ @someone &amp; <script>alert(2)</script>"
)


def dltop(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
    )


def render_html(text: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(text)


def write_log(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(encode_record(r) for r in records))
    return path


def nan_log(path: Path) -> Path:
    return write_log(path, list(Run(loss_at=lambda i, x: math.nan if i >= 300 else x).records()))


def assert_report(md_path: Path) -> tuple[str, list[Path]]:
    """Every section in order, every linked chart present and a well-formed SVG."""
    text = md_path.read_text(encoding="utf-8")
    found = re.findall(r"^## (.+)$", text, flags=re.M)
    assert found == list(HEADINGS), found
    section = text.split("\n## Charts\n")[1]
    links = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", section, flags=re.M)
    charts = [md_path.parent / unquote(src) for src in links]
    assert charts, "a run with steps has charts"
    for svg in charts:
        root = ET.parse(svg).getroot()  # raises on a malformed image
        assert root.tag == f"{SVG}svg"
        assert root.find(f"{SVG}rect") is not None  # its own background: dark and light pages
    return text, charts


# ------------------------------------------------------------------------ Markdown safety


@pytest.mark.parametrize(
    "s",
    ["# x", "1. a", "12) b", "3.5", "- c", "+ d", "> q", "===", "    code", "<b>x</b> & y", "a\\*b\\",
     "**b** _i_ `c` [l](u) ![i](u) <http://a.b>", "x\x1b[2J\u202ey\x07", "a | b", HOSTILE],
)  # fmt: skip
def test_text_and_code_render_as_the_literal_text(s: str) -> None:
    """Property: what a reader sees is exactly the visible text, never markup."""

    def literal(t: str) -> str:
        return html.escape(t, quote=False).replace('"', "&quot;")

    assert render_html(md.text(s)) == f"<p>{literal(visible(s).lstrip(' '))}</p>\n"
    assert render_html(md.code(s)) == f"<p><code>{literal(visible(s))}</code></p>\n"
    fence = md.fenced(f"{s}\n```\n# not a heading\n{s}")
    assert render_html(fence).count("<pre>") == 1 and "<h1>" not in render_html(fence)


# ------------------------------------------------------------------------------ charts


def test_svg_chart_draws_spikes_nan_marks_and_escapes_text() -> None:
    lo: list[float | None] = [1.0, 0.5, None, 0.4, None, 0.3]
    hi: list[float | None] = [1.0, 9.0, None, 0.4, None, 0.3]
    data = ChartData(
        start=0,
        end=59,
        traces=(
            Trace("loss", lo, hi, [False, False, False, False, True, False], RAW),
            Trace("eval", [None, 0.8, None, None, None, 0.5], [None, 0.8, None, None, None, 0.5],
                  style=EVAL, connect=False),
        ),
        legend=f"loss 0.3 {HOSTILE}",
    )  # fmt: skip
    svg = svgchart.render(data, f"loss {HOSTILE}")
    root = ET.fromstring(svg)
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "<img src=x onerror" in texts and not any(c in svg for c in RAW_CONTROLS)
    assert "\\x1b" in texts  # escaped where it was, not dropped
    (line,) = [p for p in root.iter(f"{SVG}path") if p.get("fill") == "none"]
    ys = [float(v) for v in re.findall(r"[ML][\d.]+ ([\d.]+)", line.get("d", ""))]
    assert min(ys) < 70, "the one-bucket spike to 9.0 reaches the top of the plot"
    assert line.get("d", "").count("M") == 2, "the NaN bucket breaks the line, once"
    crosses = [p for p in root.iter(f"{SVG}path") if p.get("stroke") == svgchart.BAD]
    assert len(crosses) == 2  # one on the plot, one in the legend
    assert len(list(root.iter(f"{SVG}circle"))) == 2  # evals as points


def test_svg_chart_of_an_empty_panel_says_why() -> None:
    svg = svgchart.render(ChartData(0, 0, empty_text="no lr (pass optimizer= or lr=)"), "lr")
    assert "no lr" in "".join(ET.fromstring(svg).itertext())


# ---------------------------------------------------------------------- the command


def test_report_of_a_nan_run(tmp_path: Path) -> None:
    log = nan_log(tmp_path / "nan.jsonl")
    ticks = {"v": 1, "ticks": {"nan_loss@300": ["lr_high", "data_finite"]}}
    sidecar_path(log).write_text(json.dumps(ticks))
    p = dltop("report", str(log))
    assert p.returncode == 0, p.stderr
    out = tmp_path / "nan.jsonl.report.md"
    assert p.stdout.strip() == str(out)
    text, charts = assert_report(out)
    assert {c.name for c in charts} >= {"loss.svg", "grad_norm.svg", "step_time.svg"}
    assert all(c.parent == tmp_path / "nan.jsonl.report" for c in charts)
    assert "**Status: finished**" in text and "`nan_loss` at step 300" in text
    assert "- `loss`: NaN" in text  # evidence
    assert "| loss | NaN | 999 | 300 |" in text  # last values, with the first NaN
    # the checklist: marks from the log, ticks from the viewer's sidecar
    assert "- [x] **✓ yes** Was the learning rate high" in text
    assert "- [x] **? cannot tell** Do the inputs and targets contain NaN" in text
    assert "- [ ] **✗ no** Did the gradient norm explode" in text
    assert "(2 of 6 ticked in the viewer" in text
    loss = (tmp_path / "nan.jsonl.report" / "loss.svg").read_text()
    assert f'stroke="{svgchart.BAD}"' in loss  # the NaN marks
    # -o elsewhere, and --lang: the checklist in Chinese, the rest the same
    zh = load_checklist("nan_loss", "zh")
    assert zh is not None and zh.lang == "zh"
    (tmp_path / "out").mkdir()
    p = dltop("report", str(log), "-o", str(tmp_path / "out" / "r.md"), "--lang", "zh")
    assert p.returncode == 0, p.stderr
    text_zh, charts_zh = assert_report(tmp_path / "out" / "r.md")
    assert zh.title in text_zh and zh.steps[0].text in text_zh
    assert all(c.parent == tmp_path / "out" / "r" for c in charts_zh)


def test_report_of_a_crash_has_the_exception_traceback_and_diagnosis(tmp_path: Path) -> None:
    frames = [
        {"file": f"/w/f{i}.py", "line": i, "func": f"f{i}", "code": f"call{i}()"} for i in range(40)
    ]
    recs = list(Run(steps=200, end=None).records())
    recs.append(
        {"kind": "event", "type": "exception", "t": recs[-1]["t"] + 1, "step": 199,
         "exc_type": "RuntimeError",
         "message": "shape '[64, 784]' is invalid for input of size 25088" + "x" * 5000,
         "traceback": frames, "traceback_omitted": 3}
    )  # fmt: skip
    recs.append({"kind": "event", "type": "exit", "t": recs[-1]["t"] + 1, "status": "exception"})
    log = write_log(tmp_path / "crash.jsonl", recs)
    p = dltop("report", str(log))
    assert p.returncode == 0, p.stderr
    text, _ = assert_report(tmp_path / "crash.jsonl.report.md")
    ending = text.split("## How the run ended")[1].split("## Last values")[0]
    assert "**CRASHED at step 199**" in ending and "Diagnosis: **" in ending
    assert "Raised at `f39.py:39 in f39`" in ending
    assert "```pytb" in ending and "23 outer frames not shown" in ending  # 40 - 20 + 3
    assert 'File "/w/f39.py", line 39, in f39' in ending and "f19.py" not in ending
    assert "chars cut]" in ending  # the message is bounded too
    assert "### 1. ✖" in text and "`crash`" in text


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """Every text field of a log hostile: terminal escapes, HTML, Markdown, backticks."""
    meta = {
        "kind": "meta", "v": 1, "run_id": f"run {HOSTILE}", "t": 1_700_000_000.0,
        "host": f"h{HOSTILE}", "pid": 7, "argv": ["train.py", HOSTILE], "cwd": f"/w/{HOSTILE}",
        "python": HOSTILE, "torch": HOSTILE, "cuda": HOSTILE, "notes": [f"GPU {HOSTILE}"],
        "devices": [{"type": "cuda", "index": 0, "name": HOSTILE, "mem_total": 1 << 34,
                     "capability": HOSTILE}],
    }  # fmt: skip
    recs: list[dict] = [meta]
    for i in range(80):
        recs.append({"kind": "step", "step": i, "t": 1_700_000_001.0 + i, "loss": 1 / (i + 1),
                     "step_time": 1.0, f"acc {HOSTILE}": 0.5})  # fmt: skip
    recs.append(
        {"kind": "event", "type": "exception", "t": 1_700_000_100.0, "step": 79,
         "exc_type": f"ValueError{HOSTILE}",
         "message": f"bad {HOSTILE}\n```\n# Injected heading\n[x](http://evil.example)",
         "traceback": [{"file": f"/w/{HOSTILE}.py", "line": 3, "func": HOSTILE, "code": HOSTILE}],
         "cause": {"exc_type": HOSTILE, "message": HOSTILE}}
    )  # fmt: skip
    recs.append({"kind": "event", "type": "exit", "t": 1_700_000_101.0, "status": "exception"})
    return write_log(tmp_path / "run [x](y) <b> \x1b[2J.jsonl", recs)


def test_hostile_text_renders_as_text_not_markup(hostile: Path, tmp_path: Path) -> None:
    p = dltop("report", str(hostile))
    assert p.returncode == 0, p.stderr
    assert not any(c in p.stdout + p.stderr for c in RAW_CONTROLS)
    out = Path(str(hostile) + ".report.md")
    text, charts = assert_report(out)
    for doc in [text] + [c.read_text() for c in charts]:
        assert not any(c in doc for c in RAW_CONTROLS)
    page = render_html(text)
    # the only tags are ours: one title, six sections, our chart images, no link, no script
    assert page.count("<h1>") == 1 and page.count("<h2>") == len(HEADINGS)
    assert "<script" not in page and "<a " not in page and "<b>" not in page
    imgs = re.findall(r'<img src="([^"]+)"', page)
    assert imgs and all(src.endswith(".svg") for src in imgs)
    assert all((tmp_path / unquote(src)).is_file() for src in imgs)  # the odd name still links
    assert "<strong>bold</strong>" not in page and "<em>u</em>" not in page
    assert "Injected heading" in page and "<h1>Injected" not in page
    # ...and shown: the reader sees the hostile text, escaped, not lost
    assert "&lt;img src=x onerror=alert(1)&gt; **bold** [link](http://evil.example)" in page
    assert "\\x1b]52;c;cm0=\\x07" in page


def test_report_of_a_directory_of_ranks(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        recs = list(Run(steps=300).records())
        recs[0] = {**recs[0], "rank": rank, "world_size": 2, "run_id": f"job.rank{rank}"}
        write_log(job / f"rank{rank}.jsonl", recs)
    p = dltop("report", str(job))
    assert p.returncode == 0, p.stderr
    text, _ = assert_report(tmp_path / "job.report.md")
    assert (
        "Rank files:" in text and "rank0.jsonl (rank 0)" in text and "rank1.jsonl (rank 1)" in text
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.jsonl"], "no such file"),
        ([], "no SOURCE given"),
        (["--bogus", "x.jsonl"], "unrecognized arguments"),
        (["{log}", "-o", "{tmp}/no/such/dir/r.md"], "cannot write"),
        (["{log}", "-o", "{log}/r.md"], "cannot write"),  # a path under a file
        (["{log}", "-o", "{tmp}"], "is a directory"),
        (["{log}", "-o", "{log}"], "is the log itself"),
        (["{log}", "--set", "nope.key=1"], ""),
        (["{tmp}/empty.jsonl"], "is empty"),
        (["{log}", "-o", "{tmp}/fifo"], "not a regular file"),  # renamed over: a file there
    ],
)
def test_bad_input_is_one_line_with_a_hint_and_exit_3(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    log = nan_log(tmp_path / "nan.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo")  # what -o /dev/null is: not a file to replace
    p = dltop("report", *(a.format(log=log, tmp=tmp_path) for a in args), cwd=tmp_path)
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "hint" in p.stderr, p.stderr
    assert needle in p.stderr
    assert not (tmp_path / "nan.jsonl.report.md").exists() or "-o" in args
    assert (tmp_path / "fifo").is_fifo() and not (tmp_path / "fifo.files").exists()


# --------------------------------------------------------------------------- the viewer


@pytest.mark.slow
def test_r_in_the_viewer_writes_the_same_charts_and_says_where(tmp_path: Path) -> None:
    """The key reports the run as the viewer holds it: the same charts as the command
    (the store's own decimation), the ticks made on screen."""
    from dltop.tui.app.app import DltopApp
    from test_app_support import end_time
    from test_app_support import write_log as support_log

    log = support_log(tmp_path / "run.jsonl", "crashed", 60)
    cli = dltop("report", str(log), "-o", str(tmp_path / "cli.md"))
    assert cli.returncode == 0, cli.stderr
    target = Path(report.default_path(str(log)))

    async def go() -> list[str]:
        app = DltopApp(str(log), follow=False, now=end_time(60) + 3, poll_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if app.model.store.steps >= 60 and app.model.alerts():
                    break
            await pilot.press("r")
            for _ in range(100):
                await pilot.pause(0.05)
                if target.exists():
                    break
            return [n.message for n in app._notifications]

    # a toast's path is broken after its "/" (tui/app/toast.py): read it back whole
    notes = [n.replace("\n", "") for n in asyncio.run(go())]
    assert any(n.startswith("report written to") and str(target) in n for n in notes), notes
    text, charts = assert_report(target)
    assert "**CRASHED at step" in text
    for chart in charts:
        assert chart.read_text() == (tmp_path / "cli" / chart.name).read_text(), chart.name


# ------------------------------------------------------------------------------ demos


def _demo_params() -> list:
    return [
        pytest.param(name, marks=[pytest.mark.slow] if demo.slow else [], id=name)
        for name, demo in DEMOS.items()
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", _demo_params())
def test_report_of_every_demo_log(name: str, tmp_path: Path) -> None:
    log = tmp_path / f"demo-{name}.jsonl"
    run = dltop("demo", name, "--no-ui", "--fast", "--out", str(log), timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    p = dltop("report", str(log))
    assert p.returncode == 0, p.stderr
    text, charts = assert_report(Path(p.stdout.strip()))
    assert "loss.svg" in {c.name for c in charts}
    assert "- Python: `3." in text and "- torch: `" in text  # the environment from meta
    demo = DEMOS[name]
    if demo.alert is None:
        assert "None: dltop saw nothing wrong" in text
    else:
        assert f"`{demo.alert}`" in text
        assert re.search(r"^- \[ \] \*\*(✓ yes|✗ no|\? cannot tell)\*\* ", text, flags=re.M)
    if demo.alert in ("crash", "oom"):
        ending = text.split("## How the run ended")[1]
        assert "**CRASHED at step" in ending and "```pytb" in ending and "Diagnosis: **" in ending


def test_last_values_say_what_is_not_listed_and_what_was_not_read() -> None:
    """A log naming a new field each step: the report counted the store's kept series as
    "more metrics in the log" and said nothing of the thousands refused past its limit."""
    from dltop.tui.core.present.report_sections import MAX_VALUES, last_values
    from dltop.tui.core.store.runstore import Store
    from dltop.tui.core.store.serieslimit import MAX_SERIES

    store = Store()
    n = MAX_SERIES + 500
    store.ingest([{"kind": "step", "step": i, "loss": 1.0, f"m{i}": 1.0} for i in range(n)])
    text = last_values(store)
    listed = re.findall(r"^\| (m\d+) \|", text, re.MULTILINE)
    assert listed == sorted(listed) and len(listed) < MAX_VALUES  # by name, not at random
    kept = len(store.names("", "step"))  # loss and the m<i> the store took
    assert f"{kept - MAX_VALUES} more metrics are in the log, not listed here" in text
    refused = n - (kept - 1)
    assert re.search(rf"Left out of this report and the charts: {refused}\+? fields", text), text


# ------------------------------------------------- planted symlinks (issue 29, 8)


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    """A log, and a folder elsewhere holding files named like the report's charts."""
    (tmp_path / "run").mkdir()
    log = nan_log(tmp_path / "run" / "nan.jsonl")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("loss.svg", "grad_norm.svg", "precious.md"):
        (elsewhere / name).write_text(f"{name}: not yours to overwrite\n")
    return log, elsewhere


def _untouched(elsewhere: Path) -> None:
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        "grad_norm.svg",
        "loss.svg",
        "precious.md",
    ]
    for p in elsewhere.iterdir():
        assert p.read_text() == f"{p.name}: not yours to overwrite\n", p


def _refused(p: subprocess.CompletedProcess[str], where: Path) -> None:
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and "hint" in line, line
    assert f"cannot write {where}: is a symbolic link (refused" in line, line


def test_a_symlink_planted_as_the_charts_folder_is_refused(tmp_path: Path) -> None:
    """`<log>.report -> elsewhere/`: the report used to write its charts there, over the
    files of the same name."""
    log, elsewhere = _planted(tmp_path)
    folder = Path(report.charts_dir(report.default_path(str(log))))
    folder.symlink_to(elsewhere, target_is_directory=True)
    _refused(dltop("report", str(log)), folder)
    _untouched(elsewhere)
    assert folder.is_symlink() and not Path(report.default_path(str(log))).exists()


@pytest.mark.parametrize("planted", ["loss.svg", "report"])
def test_a_symlink_planted_as_a_file_of_the_report_is_refused(tmp_path: Path, planted: str) -> None:
    """A chart file in a real folder, or the report itself, planted as a symlink: refused
    (not replaced, not followed)."""
    log, elsewhere = _planted(tmp_path)
    md_path = Path(report.default_path(str(log)))
    if planted == "report":
        link = md_path
        link.symlink_to(elsewhere / "precious.md")
    else:
        folder = Path(report.charts_dir(str(md_path)))
        folder.mkdir()
        link = folder / planted
        link.symlink_to(elsewhere / planted)
    _refused(dltop("report", str(log)), link)
    _untouched(elsewhere)
    assert link.is_symlink()


def test_the_viewers_r_refuses_a_planted_charts_folder_too(tmp_path: Path) -> None:
    from dltop.tui.core.store.run import RunModel

    log, elsewhere = _planted(tmp_path)
    model = RunModel(str(log))
    model.ingest(list(Run(loss_at=lambda i, x: x).records()))
    folder = Path(report.charts_dir(report.default_path(str(log))))
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        report.write_from_model(model, str(log), None, "en", path=report.default_path(str(log)))
    _untouched(elsewhere)


def test_the_report_charts_the_extras_and_evals_as_a_line_with_dots(tmp_path: Path) -> None:
    """A log with extras (``acc``, eval ``acc`` and ``f1``) gets their panels in the
    report, as the viewer's ``m`` shows them; ``--panel`` chooses; evals are a line with
    a dot per evaluation."""
    import json as _json

    log = tmp_path / "extras.jsonl"
    with open(log, "w") as f:
        for rec in support_records("healthy", 300):
            if rec["kind"] == "step":
                rec["acc"] = 0.5 + rec["step"] / 1000
                rec["rewards/mean"] = 0.1
            f.write(_json.dumps(rec) + "\n")
            if rec["kind"] == "step" and rec["step"] % 50 == 49:
                ev = {"kind": "eval", "step": rec["step"], "t": rec["t"], "acc": 0.4, "f1": 0.3}
                f.write(_json.dumps(ev) + "\n")
    out = tmp_path / "r.md"
    done = dltop("report", str(log), "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    charts = sorted(p.name for p in (tmp_path / "r").iterdir())
    extras = [c for c in charts if c.startswith("extra-")]
    assert len(extras) == 4, charts  # acc (+ eval), rewards/mean, eval.f1, batch_size
    acc = next(c for c in extras if c.endswith("-acc.svg"))
    assert any(c.endswith("-rewards_mean.svg") for c in extras)  # a safe file name
    svg = (tmp_path / "r" / acc).read_text()
    assert svg.count("<circle") == 6 and "eval 0.4" in svg  # one dot per evaluation
    assert "loss.svg" in charts and f"r/{acc}" in text
    picked = tmp_path / "p.md"
    done = dltop("report", str(log), "-o", str(picked), "--panel", "eval.f1")
    assert done.returncode == 0, done.stderr
    assert [c for c in os.listdir(tmp_path / "p") if c.startswith("extra-")] == [
        next(c for c in os.listdir(tmp_path / "p") if c.endswith("eval.f1.svg"))
    ]


def test_a_crash_memory_state_of_hundreds_of_digits_is_no_traceback(tmp_path: Path) -> None:
    """The crash's memory state is shown in binary units; an int of 400 digits there made
    ``nbytes`` raise (found by fuzzing: the report printed a traceback)."""
    recs: list[dict] = [{"kind": "meta", "v": 1, "run_id": "r", "t": 1_700_000_000.0, "pid": 7}]
    recs += [{"kind": "step", "step": i, "t": 1_700_000_001.0 + i, "loss": 1.0} for i in range(20)]
    recs.append(
        {"kind": "event", "type": "oom", "t": 1_700_000_030.0, "step": 19,
         "exc_type": "OutOfMemoryError", "message": "CUDA out of memory",
         "memory": {"allocated": 10**400, "reserved": -(10**400), "limit": 1 << 34}}
    )  # fmt: skip
    log = tmp_path / "oom.jsonl"  # written by another tool: the digits, not the probe's "Infinity"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    p = dltop("report", str(log), "-o", str(tmp_path / "r.md"))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "Inf" in text and "16 GiB" in text
