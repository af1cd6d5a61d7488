"""``dltop export``'s metrics without Prometheus: a real exporter scraped over HTTP, and
the caps on what a log can make it export.

Everything in a label comes from a log, so a hostile log (a run id with quotes, newlines,
an escape sequence, a lone surrogate, 5 000 characters) must still give an exposition that
parses, with every label escaped and cut; and no number of ranks may grow the series
count past the cap, the refused ones counted. ``test_export_prometheus.py`` runs the same
exporter under a real Prometheus.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.core.present import metrics
from dltop.tui.core.present.rankjob import JobView
from dltop.tui.core.ranks.jobs import RankLog
from dltop.tui.core.store.run import RunModel
from test_app_support import records, write_log

needs_client = pytest.mark.skipif(
    importlib.util.find_spec("prometheus_client") is None,
    reason="needs prometheus-client (pip install 'dltop-monitor[prometheus]')",
)


@contextmanager
def exporter(*sources: str, bind: str = "127.0.0.1:0") -> Iterator[tuple[int, str]]:
    """A running ``dltop export``: its port and its start line."""
    cmd = [sys.executable, "-m", "dltop.tui", "export", "--prometheus", bind, *sources]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        port = re.search(r":(\d+)/metrics", line)
        assert port, line + proc.stderr.read()
        yield int(port.group(1)), line
    finally:
        proc.terminate()
        proc.wait(20)


def scrape(port: int, openmetrics: bool = False) -> str:
    accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.read().decode("utf-8"))


def samples(text: str, openmetrics: bool = False) -> list[tuple[str, dict[str, str], float]]:
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families  # type: ignore[assignment]
    return [
        (s.name, dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


# quotes and a line break (the exposition's syntax), an OSC 52 clipboard write, a bidi
# override, a lone surrogate (as JSON may spell it: UTF-8 cannot encode it), 5 000 chars
HOSTILE = 'evil"} 1\n\x1b]52;c;aGk=\x07\u202e\ud800' + "x" * 5000


def _hostile_log(path: Path) -> Path:
    with open(path, "wb") as f:
        for rec in records("nan", 260):
            if rec["kind"] == "meta":
                rec["run_id"] = HOSTILE
                f.write(json.dumps(rec).encode() + b"\n")  # ensure_ascii: \ud800 as JSON has it
                continue
            f.write(encode_record(rec))
    return path


@needs_client
@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_a_hostile_log_gives_an_exposition_that_parses(tmp_path: Path, openmetrics: bool) -> None:
    log = _hostile_log(tmp_path / "run.jsonl")
    with exporter(str(log)) as (port, line):
        assert "this machine only" in line
        from waiting import wait_for

        assert wait_for(lambda: "dltop_alert{" in scrape(port), 30)
        text = scrape(port, openmetrics)
    found = samples(text, openmetrics)
    assert _unique(found)
    run_ids = {labels["run_id"] for _, labels, _ in found if "run_id" in labels}
    assert run_ids and all(len(r) <= metrics.MAX_LABEL for r in run_ids)
    assert all("\x1b" not in r and "\n" not in r and "\u202e" not in r for r in run_ids)
    assert any(r.startswith('evil"} 1\\n\\x1b]52') for r in run_ids), run_ids
    loss = [v for n, labels, v in found if n == "dltop_loss"]
    assert len(loss) == 1 and loss[0] != loss[0]  # one series, and it is NaN
    nan = [labels for n, labels, v in found if n == "dltop_alert" and v == 1]
    assert {labels["id"] for labels in nan} >= {"nan_loss"}
    truncated = [v for n, _, v in found if n == "dltop_exporter_truncated_labels"]
    assert truncated and truncated[0] >= 1


def _model(rank: int) -> RunModel:
    model = RunModel(f"rank{rank}")
    batch = list(records("healthy", 3))
    batch[0] = {**batch[0], "rank": rank, "world_size": 300}
    model.ingest(batch)
    return model


def test_no_log_grows_the_series_past_the_rank_cap(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    n = metrics.MAX_RANKS + 44
    ranks = tuple(RankLog(r, str(job / f"rank{r}.jsonl"), _model(r)) for r in range(n))
    view = JobView(lambda: ranks)
    fams = {f.name: f for f in metrics.collect([metrics.Watched(str(job), view, ranks[0].model)])}
    exported = {labels["rank"] for labels, _ in fams["dltop_loss"].samples}
    assert len(exported) == metrics.MAX_RANKS
    refused = dict(
        (labels["what"], v) for labels, v in fams["dltop_exporter_refused_series"].samples
    )
    assert refused == {"rank": 44, "alert": 0}
    assert fams["dltop_ranks"].samples == [({"job": "job"}, metrics.MAX_RANKS + 44)]


def test_two_files_saying_one_rank_are_two_series(tmp_path: Path) -> None:
    job = tmp_path / "job-7"
    job.mkdir()
    a, b = RunModel("a"), RunModel("b")
    a.ingest(list(records("healthy", 3)))  # both metas say rank 0
    b.ingest(list(records("healthy", 3)))
    ranks = (RankLog(0, str(job / "rank0.jsonl"), a), RankLog(None, str(job / "copy.jsonl"), b))
    fams = metrics.collect([metrics.Watched(str(job), JobView(lambda: ranks), a)])
    assert sorted(labels["rank"] for labels, _ in fams[0].samples) == ["0", "copy.jsonl"]
    assert fams[0].samples[0][0]["job"] == "job-7"


def _unique(found: list[tuple[str, dict[str, str], float]]) -> bool:
    keys = [(name, tuple(sorted(labels.items()))) for name, labels, _ in found]
    return len(keys) == len(set(keys))


def _rank_file(folder: Path, rank: int, scenario: str) -> Path:
    path = folder / f"rank{rank}.jsonl"
    with open(path, "wb") as f:
        for rec in records(scenario, 30):
            if rec["kind"] == "meta":
                rec.update(rank=rank, world_size=16, run_id=f"job-7.rank{rank}")
            f.write(encode_record(rec))
    return path


@needs_client
def test_rank_files_named_one_by_one_are_one_job(tmp_path: Path) -> None:
    folder = tmp_path / "job-7"
    folder.mkdir()
    files = [str(_rank_file(folder, r, "healthy")) for r in range(4)]
    solo = write_log(tmp_path / "solo.jsonl", "healthy", 30)  # run id demo-run
    # a node's share of a shared folder, plus another log, plus the same log again
    with exporter(files[2], files[3], str(solo), str(solo)) as (port, _):
        from waiting import wait_for

        assert wait_for(lambda: scrape(port).count("dltop_steps_total{") == 4, 30)
        found = samples(scrape(port))
    assert _unique(found)
    jobs = {labels["job"]: v for n, labels, v in found if n == "dltop_ranks"}
    assert jobs == {"job-7": 2, "demo-run": 2}
    ranks = sorted(
        (labels["job"], labels["rank"]) for n, labels, _ in found if n == "dltop_steps_total"
    )
    assert ranks == [("demo-run", "0"), ("demo-run", "solo.jsonl"), ("job-7", "2"), ("job-7", "3")]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args], capture_output=True, text=True
    )


@needs_client
def test_a_network_bind_is_allowed_and_said(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 20)
    with exporter(str(log), bind="0.0.0.0:0") as (port, line):
        assert "reachable from the network, no token" in line
        assert "dltop_steps_total" in scrape(port)


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    out = _run("export", "--prometheus", "127.0.0.1:0", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "nope.jsonl" in out.stderr
    out = _run("export", "--prometheus", "127.0.0.1:x", os.devnull)
    assert out.returncode == 3 and "bad port" in out.stderr and out.stderr.count("\n") == 1
    out = _run("export", str(tmp_path))
    assert out.returncode == 2 and "--prometheus" in out.stderr and "Traceback" not in out.stderr
