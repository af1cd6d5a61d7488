"""``dltop export --prometheus`` against a real Prometheus server.

A writer subprocess appends a run that goes NaN; ``dltop export`` follows it; Debian's
``prometheus`` (started here on a loopback port, scraping every second, evaluating the
shipped rules every second, stopped after) must hold the loss series, dltop's NaN alert
and the verdict, and fire the shipped ``DltopNaN`` rule. ``promtool`` checks the rules
file. Skipped with a reason where Prometheus cannot be had (``.ci/run`` installs it).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from test_app_support import SCRIPT, records
from test_export_metrics import exporter
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tui" / "data" / "prometheus" / "dltop-rules.yml"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_client = pytest.mark.skipif(
    importlib.util.find_spec("prometheus_client") is None,
    reason="needs prometheus-client (pip install 'dltop-monitor[prometheus]')",
)
WAIT = 90.0  # seconds; scrapes and rule evaluations are 1 s apart


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus(tmp_path: Path, target: int) -> Iterator[int]:
    """A private Prometheus scraping ``127.0.0.1:target``; yields its HTTP port."""
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: dltop\n"
        "    honor_labels: true  # `job` is the training job's (docs/live.md)\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
    )
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    assert PROMETHEUS is not None
    proc = subprocess.Popen(
        [
            PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        ready = wait_for(lambda: _get(port, "/-/ready") is not None or proc.poll() is not None, 60)
        assert ready and proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            body = r.read()
    except OSError:
        return None
    return json.loads(body) if path.startswith("/api/") else body


def query(port: int, promql: str) -> list[dict[str, Any]]:
    found = _get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return list(found["data"]["result"]) if found and found.get("status") == "success" else []


def firing(port: int, name: str) -> list[dict[str, Any]]:
    found = _get(port, "/api/v1/alerts") or {"data": {"alerts": []}}
    return [
        a
        for a in found["data"]["alerts"]
        if a["labels"].get("alertname") == name and a["state"] == "firing"
    ]


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (apt-get install prometheus)")
def test_promtool_accepts_the_shipped_rules() -> None:
    assert PROMTOOL is not None
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 5 rules found" in out.stdout


@pytest.mark.slow
@needs_client
@pytest.mark.skipif(PROMETHEUS is None, reason="needs prometheus (apt-get install prometheus)")
def test_prometheus_scrapes_the_loss_and_fires_the_nan_rule(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with open(log, "wb") as f:  # the run's start: its meta and step 0; the writer goes on
        f.writelines(encode_record(r) for r in records("nan", 1))
    writer: subprocess.Popen[bytes] | None = None
    try:
        with exporter(str(log)) as (target, _), prometheus(tmp_path, target) as port:
            series = 'dltop_loss{job="demo-run",rank="0",run_id="demo-run"}'
            # a finite loss scraped before the writer goes on to the NaN
            assert wait_for(lambda: bool(query(port, f"{series} > 0")), WAIT), query(port, "up")
            assert not firing(port, "DltopNaN")
            writer = subprocess.Popen(
                [sys.executable, SCRIPT, str(log), "nan", "--steps", "299", "--start", "1",
                 "--rate", "100"]
            )  # fmt: skip
            nan = 'dltop_alert{id="nan_loss",job="demo-run",severity="critical"} == 1'
            assert wait_for(lambda: bool(query(port, nan)), WAIT), query(port, "dltop_alert")
            verdict = query(port, 'dltop_verdict_info{job="demo-run"}')
            assert any("Loss is NaN since step 240" in v["metric"]["verdict"] for v in verdict)
            assert wait_for(lambda: bool(firing(port, "DltopNaN")), WAIT), _get(
                port, "/api/v1/alerts"
            )
            alert = firing(port, "DltopNaN")[0]
            assert alert["labels"]["job"] == "demo-run" and alert["labels"]["rank"] == "0"
            assert alert["labels"]["severity"] == "critical"
            assert not firing(port, "DltopStraggler")  # one rank: nothing to compare
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
