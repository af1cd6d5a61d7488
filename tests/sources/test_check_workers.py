"""`dltop check` of a job's ranks in worker processes: the same answers as one process.

Real parts: real rank files on disk, real forked workers (``tui/core/sources/workers.py``), and
the whole ``check_cmd.collect`` compared field by field with a check in one process: a
sharded job whose grad norm is joined across ranks (the same floats only if the ranks'
shares are summed in the same order), a NaN on one rank, a straggler, a crash, and a
rank file that cannot be read.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui import check_cmd
from dltop.tui.check_output import as_json, verdict_of
from dltop.tui.core.rules import Config
from dltop.tui.core.sources import workers
from test_check_cmd import ctrl_c
from threadkit import threads_left

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
WORLD = 6
STEPS = 1500

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods(),
    reason="workers need Linux's fork",
)


@pytest.fixture(autouse=True)
def _this_thread_alone() -> None:
    """Workers are forked only while this process runs one thread (``workers.can_fork``):
    what an earlier test in this pytest process left ending is waited for, and a thread
    still running is named here; otherwise the check would quietly run in one process."""
    left = threads_left([threading.main_thread()], within=15.0)
    assert not left, f"threads an earlier test left running keep workers from forking: {left}"
    assert workers.can_fork()


def _rank(rank: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"kind": "meta", "v": 1, "run_id": f"job.rank{rank}", "t": T0, "host": "h",
         "pid": 100 + rank, "rank": rank, "world_size": WORLD},
    ]  # fmt: skip
    data = 0.04 if rank == 3 else 0.001  # rank 3 waits for data: a straggler
    for i in range(STEPS):
        loss = 2.0 * math.exp(-i / 400) + 0.1 + 0.01 * math.sin(i * (rank + 1))
        if rank == 2 and i >= 1200:
            loss = math.nan
        out.append(
            {"kind": "step", "step": i, "t": T0 + i * 0.05 + rank * 1e-3, "loss": loss,
             "grad_sq_local": (0.1 + 0.013 * rank) * (1 + 0.3 * math.sin(i / 7)),
             "lr": 1e-3, "step_time": 0.05, "data_time": data, "compute_time": 0.05 - data}
        )  # fmt: skip
    if rank == 4:
        out.append({"kind": "event", "type": "exception", "t": T0 + STEPS * 0.05,
                    "message": "RuntimeError: boom"})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    for r in range(WORLD):
        with open(folder / f"rank{r}.jsonl", "wb") as f:
            for rec in _rank(r):
                f.write(encode_record(rec))
    (folder / "rank9.jsonl").write_bytes(b"\0\1\2 not a log\n")  # unreadable: skipped
    return folder


def _everything(results: list[check_cmd.FileResult], skipped: list[str]) -> str:
    """Every alert with its evidence, every fact and status of every rank, the notes."""
    out = []
    for r in results:
        out.append(
            {
                "path": r.path,
                "rank": r.rank,
                "alerts": [a.to_json() for a in r.engine.alerts()],
                "facts": {k: repr(v) for k, v in sorted(r.engine.facts().items())},
                "status": [r.state.status, r.state.reason],
                "notes": r.notes,
                "skipped": r.skipped,
            }
        )
    doc = as_json("job", results, verdict_of(results))
    doc.pop("checked_at", None)
    return json.dumps([out, doc, skipped], sort_keys=True, default=repr)


def test_workers_give_the_answers_of_one_process(job: Path) -> None:
    one = check_cmd.collect(str(job), Config(), jobs=1)
    two = check_cmd.collect(str(job), Config(), jobs=2)
    three = check_cmd.collect(str(job), Config(), jobs=3)
    assert _everything(*one) == _everything(*two) == _everything(*three)
    results, skipped = one
    ids = {r.rank: {a.id for a in r.engine.alerts()} for r in results}
    # the check had something to agree on: the joined norm, each rank's own trouble
    assert any("joined from 6 ranks" in n for n in results[0].notes)
    assert "nan_loss" in ids[2] and "crash" in ids[4]
    assert "straggler" in {a.id for r in results for a in r.engine.alerts()}
    assert len(skipped) == 1 and "rank9.jsonl" in skipped[0]


def test_the_report_gets_every_ranks_store_from_the_workers(job: Path) -> None:
    results, _ = check_cmd.collect(str(job), Config(), with_store=True, jobs=2)
    assert all(r.store is not None and r.store.steps == STEPS for r in results)


def test_ordered_map_keeps_the_order_and_the_exceptions() -> None:
    assert list(workers.ordered_map(_square, list(range(12)), 3)) == [i * i for i in range(12)]
    with pytest.raises(ValueError, match="seven"):
        list(workers.ordered_map(_square, [1, -7, 2], 2))


def test_a_worker_that_dies_leaves_its_job_to_this_process() -> None:
    """The kernel's OOM killer takes a worker: the jobs whose results had not come back
    run here instead (here the job does not kill this process)."""
    parent = os.getpid()
    assert list(workers.ordered_map(_die_in_a_worker, [parent] * 4, 2)) == [parent] * 4


@pytest.mark.parametrize("command", ["check", "report"])
def test_ctrl_c_stops_the_workers_with_one_line(job: Path, command: str) -> None:
    """``dltop report DIR`` reads a job's ranks through the same workers as ``check``."""
    code, err, took = ctrl_c(command, job)
    assert code == 130 and err == f"dltop {command}: interrupted\n", err
    assert took < 10  # the workers were stopped, not waited for (each sleeps 60 s)


def _square(x: int) -> int:
    if x == -7:
        raise ValueError("seven")
    return x * x


def _die_in_a_worker(parent: int) -> int:
    if os.getpid() != parent:
        os._exit(9)  # as SIGKILL would: no result, no exception
    return parent


def _noting_pid(task: check_cmd._RankTask, **kwargs: Any) -> check_cmd._RankOutcome:
    out = _REAL_CHECK_RANK(task, **kwargs)
    if out.result is not None:
        out.result.notes.append(f"pid {os.getpid()}")
    return out


_REAL_CHECK_RANK = check_cmd._check_rank


def test_the_other_ranks_really_go_to_workers(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_cmd, "_check_rank", _noting_pid)
    results, _ = check_cmd.collect(str(job), Config(), jobs=2)
    pids = {r.rank: _pid(r) for r in results}
    assert pids[0] == os.getpid()  # the first rank reads the job's joined norm, here
    assert all(pid != os.getpid() for rank, pid in pids.items() if rank != 0)
    # and a small job stays in this process unless asked
    results, _ = check_cmd.collect(str(job), Config())
    assert {_pid(r) for r in results} == {os.getpid()}


def _pid(r: check_cmd.FileResult) -> int:
    return next(int(n.split()[1]) for n in r.notes if n.startswith("pid "))


class _NoProcesses(workers.ProcessPoolExecutor):
    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(11, "Resource temporarily unavailable")


def test_no_process_to_be_had_means_one_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(workers, "ProcessPoolExecutor", _NoProcesses)
    assert list(workers.ordered_map(_square, [1, 2, 3], 2)) == [1, 4, 9]
    assert "no worker processes" in capsys.readouterr().err


def _check_in_a_daemon(folder: str, out: Any) -> None:
    results, _ = check_cmd.collect(folder, Config(), jobs=2)
    out.put(sorted(a.id for r in results for a in r.engine.alerts()))


def test_a_check_inside_a_daemon_process_stays_in_it(job: Path) -> None:
    """A daemonic process may not have children (multiprocessing raises): the check
    runs there, one rank after the other, instead of failing."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_check_in_a_daemon, args=(str(job), out), daemon=True)
    proc.start()
    ids = out.get(timeout=60)
    proc.join(timeout=10)
    assert proc.exitcode == 0
    results, _ = check_cmd.collect(str(job), Config(), jobs=1)
    assert ids == sorted(a.id for r in results for a in r.engine.alerts())


FORK_SIGINT = """
import os, signal
from dltop.tui.core.sources import workers

def square(x):
    return x * x

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
# a Ctrl-C in the instant after each worker's fork, before it can set anything
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGINT))
print(list(workers.ordered_map(square, list(range(6)), 2)))
"""


def test_a_ctrl_c_right_after_a_workers_fork_does_not_reach_the_worker() -> None:
    """SIGINT is blocked across the fork and ignored before the worker unblocks it: a
    Ctrl-C that lands before the worker's first line is dropped there (the parent handles
    Ctrl-C), not raised as a KeyboardInterrupt that prints a traceback beside ours."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_SIGINT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([i * i for i in range(6)])
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
