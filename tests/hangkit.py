"""A real hung torchrun job: started, watched until every rank has said where it hangs,
and killed without leftovers.

``tests/rank_job.py`` in MODE ``hang``: three CPU ranks on gloo, one of them
(``hung_rank``) blocked forever in its data loader before the forward of ``hang_step``,
the others blocked in that step's gradient all-reduce, waiting for it. Heartbeats come
every 0.5 s. For the probe's tests (``test_probe_where.py``) and the viewer's, which read
the same rank files.

    with hung_job(tmp_path / "job") as job:
        assert job.wait_hung()
        ...read job.out / "rank<R>.jsonl"...
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from dltop.probe.decoding import read_records
from test_probe_ranks import CLEAN_ENV, gloo_startup_race

JOB = Path(__file__).with_name("rank_job.py")
RANKS = 3
HUNG_FOR_S = 1.5  # a rank is hung once its heartbeats go on this long after its last step


def rank_records(out: Path, rank: int) -> list[dict[str, Any]]:
    """The rank file's complete records so far (a line still being written is left out)."""
    path = out / f"rank{rank}.jsonl"
    if not path.exists():
        return []
    recs, _ = read_records(str(path))
    return recs


def latest_heartbeat(recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    beats = [r for r in recs if r.get("kind") == "heartbeat"]
    return beats[-1] if beats else None


class HungJob:
    """One running ``rank_job.py hang`` job under torchrun (its own process group)."""

    def __init__(self, out: Path, hung_rank: int = 1, hang_step: int = 100) -> None:
        self.out = out
        self.hung_rank = hung_rank
        self.hang_step = hang_step
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr = out.parent / f"{out.name}.torchrun.err"

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={RANKS}", str(JOB), str(self.out), "hang",
            str(self.hung_rank), str(self.hang_step),
        ]  # fmt: skip
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.out.parent,
                env=dict(CLEAN_ENV, OMP_NUM_THREADS="1", TORCH_GLOO_LAZY_INIT="1"),
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # its own process group, killed as one
            )

    def hung(self) -> bool:
        """Every rank file has heartbeats ``HUNG_FOR_S`` past its last step, which is the
        one before the hang."""
        for rank in range(RANKS):
            recs = rank_records(self.out, rank)
            steps = [r for r in recs if r.get("kind") == "step"]
            beat = latest_heartbeat(recs)
            if not steps or beat is None or steps[-1]["step"] != self.hang_step - 1:
                return False
            if beat["t"] - steps[-1]["t"] < HUNG_FOR_S:
                return False
        return True

    def wait_hung(self, timeout: float = 150.0) -> bool:
        """Poll until the job hangs as planned, or it ended, or ``timeout`` passed."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.hung():
                return True
            if self.proc is not None and self.proc.poll() is not None:
                return self.hung()  # it ended: a start-up failure, or a bug
            time.sleep(0.2)
        return self.hung()

    def failed_to_start(self) -> bool:
        """The job ended before training: gloo lost its start-up race (run it again)."""
        if self.proc is None or self.proc.poll() is None:
            return False
        return gloo_startup_race(self.stderr.read_text(errors="replace"))

    def kill(self) -> list[int]:
        """SIGKILL torchrun's process group and every process under it (the ranks run in
        sessions of their own); the pids still alive after, none if all went."""
        if self.proc is None:
            return []
        procs: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        end = time.monotonic() + 30
        while (alive := [p.pid for p in procs if _alive(p)]) and time.monotonic() < end:
            time.sleep(0.1)
        return alive

    def worker_pids(self) -> list[int]:
        """The ranks' pids, from their ``meta`` records."""
        pids = []
        for rank in range(RANKS):
            metas = [r for r in rank_records(self.out, rank) if r.get("kind") == "meta"]
            if metas:
                pids.append(int(metas[0]["pid"]))
        return pids


def _alive(p: psutil.Process) -> bool:
    """Running; a zombie (dead, its parent gone before reaping it) counts as gone."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def hung_job(out: Path, hung_rank: int = 1, hang_step: int = 100) -> Iterator[HungJob]:
    """A job started (again after a gloo start-up race, up to three times), killed at the
    end of the block whatever happens in it."""
    job = HungJob(out, hung_rank, hang_step)
    try:
        for _ in range(3):
            job.start()
            if job.wait_hung() or not job.failed_to_start():
                break
            job.kill()
            for f in out.glob("rank*.jsonl"):
                f.unlink()
        yield job
    finally:
        left = job.kill()
        assert not left, f"processes of the hung job still alive: {left}"
