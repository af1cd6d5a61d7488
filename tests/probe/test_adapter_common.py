"""The adapters' framework-neutral rules (``dltop.probe.adapter``), without a framework
(the ranks' job name: two real gloo processes, torch.distributed alone)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from adapterkit import ROOT
from dltop.probe.adapter import eval_name, probe_kwargs
from dltop.probe.rankpath import rank_path

AUTO = object()


def test_one_log_per_rank_follows_the_multi_rank_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "exp-7")  # no process group: the run id decides
    assert rank_path(AUTO, AUTO, 1, 4) == (
        os.path.join("dltop-runs", "exp-7", "rank1.jsonl"),
        "exp-7.rank1",
    )
    # an explicit file becomes a folder of rank files: one file for several ranks would mix them
    assert rank_path("runs/exp.jsonl", AUTO, 3, 4) == (
        os.path.join("runs/exp", "rank3.jsonl"),
        "exp.rank3",
    )
    assert rank_path("runs/exp/", AUTO, 0, 2)[0] == os.path.join("runs/exp", "rank0.jsonl")
    # one process: the path as given, or the probe's own default
    assert rank_path("runs/exp.jsonl", AUTO, 0, 1) == ("runs/exp.jsonl", None)
    assert rank_path(None, AUTO, 0, 4) == (None, None)
    assert rank_path("", AUTO, 0, 1) == (None, None)


def test_eval_metrics_are_named_as_the_rules_read_them() -> None:
    assert eval_name("val_loss") == "loss" and eval_name("eval_loss") == "loss"
    assert eval_name("val/acc") == "acc" and eval_name("val_loss_epoch") == "loss"
    assert eval_name("eval_squad_f1") == "squad_f1"
    assert eval_name("eval_runtime") is None and eval_name("eval_samples_per_second") is None
    assert eval_name("epoch") is None
    assert eval_name("val_") == "val_"  # a bare prefix is a name, not a prefix


def test_keyword_arguments_are_checked_at_the_users_line() -> None:
    assert probe_kwargs("X", {"path": "a.jsonl", "layers_every": 0}) == {
        "path": "a.jsonl",
        "layers_every": 0,
    }
    with pytest.raises(TypeError, match=r"X\(\) got unknown keyword argument\(s\) 'sockett'"):
        probe_kwargs("X", {"sockett": False})
    with pytest.raises(ValueError, match="nowhere to write"):
        probe_kwargs("X", {"path": "", "socket": False})
    assert probe_kwargs("X", {"path": None, "socket": False, "tcp": "127.0.0.1:0"})


# Two real gloo ranks on 127.0.0.1; each prints one JSON line of what it saw. The process
# group's own timeout is short so that a mismatched collective fails in seconds, not minutes.
RANKS_SCRIPT = """
import datetime, json, os, sys, time
import torch
import torch.distributed as dist
from dltop.probe import rankpath

rank, mode, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
    timeout=datetime.timedelta(seconds=10),
)
out = {}
if mode == "twice":
    # rank 0 names each call differently; rank 1 alone would name it after its parent
    if rank == 0:
        os.environ["TORCHELASTIC_RUN_ID"] = "first"
    out["names"] = [rankpath.shared_job()]
    if rank == 0:
        time.sleep(1.0)  # rank 1 asks for the second name before rank 0 has posted it
        os.environ["TORCHELASTIC_RUN_ID"] = "second"
    out["names"].append(rankpath.shared_job())
elif mode == "skip":
    # one rank never reaches the callback; the other one does
    if rank == int(sys.argv[4]):
        rankpath._AGREE_TIMEOUT_S = 1.0  # what the waiting rank would wait, shortened
        t = time.perf_counter()
        out["names"] = [rankpath.shared_job()]
        out["took"] = time.perf_counter() - t
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)  # training's own collective, right after the callback
out["sum"] = x.item()
dist.destroy_process_group()
print(json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_ranks(tmp_path: Path, *args: str, timeout: float = 25) -> list[dict[str, Any]]:
    """``RANKS_SCRIPT`` as ranks 0 and 1 of one gloo group; each rank's JSON line."""
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), *args[:1], port, *args[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, stderr[-3000:]
            outs.append((json.loads(stdout.splitlines()[-1]), stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [dict(out, stderr=err) for out, err in outs]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_ranks_agree_on_rank_0s_job_name_and_a_second_call_gets_a_fresh_one(
    tmp_path: Path,
) -> None:
    r0, r1 = _two_ranks(tmp_path, "twice")
    assert r0["names"] == r1["names"] == ["first", "second"]  # never the first call's, again
    assert r0["sum"] == r1["sum"] == 3.0
    assert "warning" not in r0["stderr"] + r1["stderr"]


@pytest.mark.timeout(60)
def test_a_rank_that_never_asks_for_the_job_name_leaves_training_unharmed(
    tmp_path: Path,
) -> None:
    # rank 1 skips the callback (its adapter failed, or it has none) and goes on to
    # training's all-reduce: rank 0 posts its name and returns, and the sum is right
    r0, r1 = _two_ranks(tmp_path, "skip", "0")
    assert r0["took"] < 2.0 and "names" not in r1
    assert r0["sum"] == r1["sum"] == 3.0
    assert "warning" not in r0["stderr"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_rank_whose_rank_0_never_posts_a_name_falls_back_after_a_short_wait(
    tmp_path: Path,
) -> None:
    r0, r1 = _two_ranks(tmp_path, "skip", "1")
    (name,) = r1["names"]
    assert name and 0.9 < r1["took"] < 5.0  # the (shortened) wait, then its own name
    assert "dltop: warning: ranks could not agree on a log folder" in r1["stderr"]
    assert r0["sum"] == r1["sum"] == 3.0
