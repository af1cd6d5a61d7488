"""The default log path of a multi-rank job (contract: "Multi-rank runs", item 1).

Under torchrun every rank writes ``dltop-runs/<job>/rank<R>.jsonl``, the ranks agreeing on
``<job>`` without talking; an elastic restart appends a second ``meta`` (its
``restart_count``) and the new attempt's steps to the same rank file. The torchrun tests
run real jobs: three CPU processes, gloo, a ``Linear`` in DDP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dltop.probe import jobpath
from dltop.probe.meta import build_meta
from dltop.probe.probe import Probe

LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
)
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
STAMP_JOB = re.compile(r"\d{8}-\d{6}-(\d+)")


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)


# --- the rule, in this process ------------------------------------------------------------
def test_a_single_process_keeps_its_time_pid_file(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    path = jobpath.default_path()
    assert os.path.dirname(path) == "dltop-runs"
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{os.getpid()}\.jsonl", os.path.basename(path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")  # a world of one is a single process
    assert os.path.dirname(jobpath.default_path()) == "dltop-runs"
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "7")  # out of range: not trusted, single-process default
    assert os.path.dirname(jobpath.default_path()) == "dltop-runs"


def test_the_job_is_torchelastics_run_id_made_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "exp-42")
    assert jobpath.default_path() == os.path.join("dltop-runs", "exp-42", "rank2.jsonl")
    assert jobpath.default_path("qs") == os.path.join("dltop-runs", "qs-exp-42", "rank2.jsonl")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "../../etc passwd")
    assert jobpath.default_path() == os.path.join("dltop-runs", ".._.._etc_passwd", "rank2.jsonl")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "..")
    assert jobpath.job_name() not in (".", "..")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x" * 500)
    assert len(jobpath.job_name()) == 100


def test_without_a_run_id_the_job_is_the_parents_start_and_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default without --rdzv-id
    job = jobpath.job_name()
    m = STAMP_JOB.fullmatch(job)
    assert m and int(m.group(1)) == os.getppid(), job
    assert job == jobpath.job_name()  # stable
    # where /proc cannot be read: the launcher's address and port, and the parent pid
    monkeypatch.setattr(jobpath, "_start_time", lambda pid: None)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert jobpath.job_name() == f"10.0.0.7-29500-{os.getppid()}"


def test_meta_has_the_restart_count_only_under_torchelastic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clean(monkeypatch)
    assert "restart_count" not in build_meta("r", None)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert build_meta("r", None)["restart_count"] == 2


def test_a_default_rank_file_is_appended_to_never_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    for attempt in range(2):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(attempt))
        with Probe(socket=False, system=False, crash=False) as probe:
            assert probe.run_id == "job7.rank1"
            probe.step(loss=1.0)
    recs = _records(tmp_path / "dltop-runs" / "job7" / "rank1.jsonl")
    metas = [r for r in recs if r["kind"] == "meta"]
    assert [m["restart_count"] for m in metas] == [0, 1]
    assert [m["rank"] for m in metas] == [1, 1] and [m["world_size"] for m in metas] == [2, 2]
    assert sum(r["kind"] == "step" for r in recs) == 2


# --- real launchers -----------------------------------------------------------------------
PLAIN_RANK = """
import os, sys
from dltop.probe import Probe
with Probe(socket=False, system=False) as probe:
    for i in range(3):
        probe.step(loss=float(i))
"""


def test_ranks_started_by_any_launcher_share_one_folder(tmp_path: Path) -> None:
    """No torchrun: a parent that sets RANK/WORLD_SIZE for three children."""
    launcher = f"""
import os, subprocess, sys
procs = [
    subprocess.Popen([sys.executable, "-c", {PLAIN_RANK!r}],
                     env=dict(os.environ, RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r)))
    for r in range(3)
]
print(os.getpid())
sys.exit(max(p.wait() for p in procs))
"""
    res = subprocess.run(
        [sys.executable, "-c", launcher],
        cwd=tmp_path,
        env=CLEAN_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    (job,) = (tmp_path / "dltop-runs").iterdir()
    m = STAMP_JOB.fullmatch(job.name)
    assert m and m.group(1) == res.stdout.strip(), job.name
    assert sorted(p.name for p in job.iterdir()) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    for r in range(3):
        recs = _records(job / f"rank{r}.jsonl")
        assert recs[0]["kind"] == "meta" and recs[0]["rank"] == r
        assert recs[0]["world_size"] == 3 and recs[0]["local_rank"] == r
        assert "restart_count" not in recs[0]
        assert sum(x["kind"] == "step" for x in recs) == 3


def _gloo() -> str | None:
    """Why torchrun jobs cannot run here, or None."""
    try:
        import torch.distributed as dist
    except Exception as e:  # pragma: no cover - torch is a dev dependency
        return f"torch.distributed cannot be imported ({e})"
    if not dist.is_available():
        return "torch.distributed is not available in this torch build"
    if not dist.is_gloo_available():
        return "the gloo backend is not available in this torch build"
    return None


def gloo_startup_race(stderr: str) -> bool:
    """A job that failed before training: gloo could not connect its ranks in time."""
    return "connectFullMesh failed" in stderr or "timed out connecting" in stderr


needs_gloo = pytest.mark.skipif(_gloo() is not None, reason=str(_gloo()))

DDP_SCRIPT = """
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dltop.probe import Probe

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
first_try = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
fail = os.environ.get("FAIL_FIRST_ATTEMPT") == "1" and first_try
if dist.get_rank() == 0:
    print("RUN_ID", os.environ.get("TORCHELASTIC_RUN_ID"), flush=True)
g = torch.Generator().manual_seed(dist.get_rank())
with Probe(model=model, optimizer=opt, socket=False) as probe:
    for step in range(20):
        x = torch.randn(16, 8, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        probe.step(loss=loss)
        if fail and step == 4:
            raise RuntimeError("first attempt fails on purpose")
dist.destroy_process_group()
"""


def _torchrun(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=3",
        *args,
        str(script),
    ]
    # gloo's full-mesh connect at start-up can lose a race on a loaded machine, and after an
    # elastic restart it was refused every time here: lazy init connects at the first
    # collective instead (TORCH_GLOO_LAZY_INIT), and a job that still failed to connect is
    # run again
    for _ in range(3):
        shutil.rmtree(tmp_path / "dltop-runs", ignore_errors=True)
        res = subprocess.run(
            cmd,
            cwd=tmp_path,
            env=dict(CLEAN_ENV, OMP_NUM_THREADS="1", TORCH_GLOO_LAZY_INIT="1", **(env or {})),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if res.returncode == 0 or not gloo_startup_race(res.stderr):
            break
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return res.stdout


def _job_folder(tmp_path: Path, stdout: str) -> Path:
    (job,) = (tmp_path / "dltop-runs").iterdir()  # exactly one folder for the whole job
    assert job.is_dir()
    run_ids = re.findall(r"^RUN_ID (\S+)$", stdout, re.MULTILINE)
    assert run_ids and job.name == jobpath.safe_name(run_ids[0])  # torchrun's run id
    assert sorted(p.name for p in job.iterdir()) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    return job


@pytest.mark.slow
@needs_gloo
def test_torchrun_writes_one_folder_with_a_file_per_rank(tmp_path: Path) -> None:
    job = _job_folder(tmp_path, _torchrun(tmp_path))
    for r in range(3):
        recs = _records(job / f"rank{r}.jsonl")
        (meta,) = [x for x in recs if x["kind"] == "meta"]
        assert recs[0] is meta
        assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (r, 3, r)
        assert meta["restart_count"] == 0 and meta["run_id"] == f"{job.name}.rank{r}"
        assert meta["log_path"] == str(job / f"rank{r}.jsonl")
        steps = [x for x in recs if x["kind"] == "step"]
        assert [s["step"] for s in steps] == list(range(20))
        assert all("grad_norm" in s and "loss" in s for s in steps)
        assert recs[-1]["kind"] == "event" and recs[-1]["status"] == "ok"


@pytest.mark.slow
@needs_gloo
def test_an_elastic_restart_appends_a_new_segment_to_each_rank_file(tmp_path: Path) -> None:
    out = _torchrun(tmp_path, "--max-restarts=1", env={"FAIL_FIRST_ATTEMPT": "1"})
    job = _job_folder(tmp_path, out)
    for r in range(3):
        recs = _records(job / f"rank{r}.jsonl")
        metas = [i for i, x in enumerate(recs) if x["kind"] == "meta"]
        assert len(metas) == 2 and metas[0] == 0, metas
        first, second = recs[: metas[1]], recs[metas[1] :]
        m0, m1 = first[0], second[0]
        assert [m0["restart_count"], m1["restart_count"]] == [0, 1]
        assert m0["pid"] != m1["pid"]  # a new process: the viewer starts a new segment
        for m in (m0, m1):
            assert (m["rank"], m["world_size"], m["local_rank"]) == (r, 3, r)
        assert [x["step"] for x in first if x["kind"] == "step"] == list(range(5))
        assert any(x.get("type") == "exception" for x in first)
        assert first[-1].get("type") == "exit" and first[-1]["status"] == "exception"
        assert [x["step"] for x in second if x["kind"] == "step"] == list(range(20))
        assert second[-1].get("type") == "exit" and second[-1]["status"] == "ok"
