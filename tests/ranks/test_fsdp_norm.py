"""The whole model's grad norm when gradients are sharded (contract: "Multi-rank runs").

Under FSDP2 a rank holds a shard of every gradient. The probe must not find the whole
norm itself (that takes a collective in the step): each rank logs ``grad_sq_local``, its
share of the squared norm, and ``dltop check DIR`` joins the shares per step into the
first rank's ``grad_norm``. The real job (``tests/fsdp_job.py``: torchrun, two CPU
processes, gloo, ``fully_shard``) logs the norm ``clip_grad_norm_`` finds with a
collective beside ours, so the joined figure is compared with the true one. Synthetic
rank files cover what a real job cannot be made to do on demand: a missing rank, a NaN
in one shard, a restart, a user's own ``grad_norm``.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkkit import check_run
from dltop.probe.decoding import read_records
from dltop.probe.encoding import encode_record
from dltop.tui.check_cmd import collect
from dltop.tui.core.ranks import shardnorm
from dltop.tui.core.rules import Config
from test_probe_ranks import CLEAN_ENV, gloo_startup_race

JOB = Path(__file__).resolve().parents[1] / "fsdp_job.py"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _steps(path: Path) -> list[dict[str, Any]]:
    return [r for r in _records(path) if r["kind"] == "step"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real two-rank FSDP2 job (then an HSDP one), each rank logging its own file."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available in this torch build")
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)")
    out = tmp_path_factory.mktemp("fsdp")
    for _ in range(3):  # gloo's connect at start-up can lose a race on a loaded machine
        shutil.rmtree(out / "logs", ignore_errors=True)
        res = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node=2", str(JOB), str(out / "logs")],
            capture_output=True, text=True, timeout=180, cwd=out,
            env=dict(CLEAN_ENV, OMP_NUM_THREADS="1", TORCH_GLOO_LAZY_INIT="1"),
        )  # fmt: skip
        if res.returncode == 0 or not gloo_startup_race(res.stderr):
            break
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return out / "logs"


@pytest.mark.slow
def test_fsdp2_ranks_log_their_share_and_no_collective_runs_in_backward(job: Path) -> None:
    r0, r1 = _steps(job / "fsdp" / "rank0.jsonl"), _steps(job / "fsdp" / "rank1.jsonl")
    assert len(r0) == len(r1) == 20
    for a, b in zip(r0, r1, strict=True):
        # no rank claims the whole norm: it would have needed a collective to know it
        assert "grad_norm" not in a and "grad_norm" not in b
        true = a["true_grad_norm"]
        assert b["true_grad_norm"] == pytest.approx(true)
        # each rank's own figure is a part of the norm, well short of it on its own
        assert math.sqrt(a["grad_sq_local"]) < 0.99 * true
        assert math.sqrt(b["grad_sq_local"]) < 0.99 * true
        assert math.sqrt(a["grad_sq_local"] + b["grad_sq_local"]) == pytest.approx(true, rel=1e-5)
        # the probe ran no DTensor collective in backward; the clipping's own one was seen
        assert a["dtensor_collectives"] == b["dtensor_collectives"] == 0
    assert r0[-1]["dtensor_collectives_total"] >= 20


@pytest.mark.slow
def test_fsdp2_layers_are_marked_as_the_ranks_own_shards(job: Path) -> None:
    layers = [r for r in _records(job / "fsdp" / "rank1.jsonl") if r["kind"] == "layers"]
    assert layers and all(r["sharded"] is True for r in layers)
    # the last layer has one output row: rank 1's shard of it is empty
    assert layers[0]["names"][-2:] == ["2.weight", "2.bias"]
    assert layers[0]["grad_norm"][-2:] == [0.0, 0.0]


@pytest.mark.slow
def test_hsdp_replicated_pieces_count_once(job: Path) -> None:
    """(Replicate(), Shard(0)) on a (2, 1) mesh: both ranks hold the whole gradient, so
    each one's share is half the squared norm, not all of it."""
    r0, r1 = _steps(job / "hsdp" / "rank0.jsonl"), _steps(job / "hsdp" / "rank1.jsonl")
    for a, b in zip(r0, r1, strict=True):
        half = a["true_grad_norm"] ** 2 / 2
        assert a["grad_sq_local"] == pytest.approx(half, rel=1e-5)
        assert b["grad_sq_local"] == pytest.approx(half, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fsdp", "hsdp"])
def test_check_joins_the_shares_into_the_whole_models_norm(job: Path, mode: str) -> None:
    results, _ = collect(str(job / mode), Config())
    first = results[0]
    assert first.rank == 0
    assert any("joined from 2 ranks" in n for n in first.notes), first.notes
    true = [s["true_grad_norm"] for s in _steps(job / mode / "rank0.jsonl")]
    facts = first.engine.facts()
    assert facts["grad_norm_max"].value == pytest.approx(max(true), rel=1e-5)
    # the other rank's rules never saw a norm (one job, one set of gradient alerts)
    assert results[1].engine.facts()["grad_norm_max"].value is None


# --- synthetic rank files ----------------------------------------------------------------
def _write_job(folder: Path, shares: dict[int, list[Any]], world: int | None = None) -> None:
    """One file per rank: a meta, then a step per share (None: no step record)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, values in shares.items():
        lines = [{"kind": "meta", "v": 1, "run_id": f"j.rank{rank}", "pid": 1, "rank": rank,
                  "world_size": world or len(shares), "t": 1000.0}]  # fmt: skip
        for step, v in enumerate(values):
            if v is not None:
                lines.append({"kind": "step", "step": step, "t": 1000.0 + step, "loss": 1.0,
                              "step_time": 0.1, "grad_sq_local": v})  # fmt: skip
        (folder / f"rank{rank}.jsonl").write_bytes(b"".join(encode_record(x) for x in lines))


def _joined(folder: Path) -> tuple[list[Any], str | None]:
    """The first rank's grad_norm per step after the join, read as `dltop check` reads a
    folder (the other ranks first, then the first), and the join's one-line summary. Read
    both ways: each rank into the join, and each rank apart and sent back through pickle
    as a worker process sends it (``detached``, packed arrays, ``absorb``); the norms must
    be the same floats and the summaries the same line."""
    got = [_joined_via(folder, workers) for workers in (False, True)]
    assert repr(got[0]) == repr(got[1])
    return got[0]


def _joined_via(folder: Path, workers: bool) -> tuple[list[Any], str | None]:
    join = shardnorm.GradNormJoin()
    files = sorted(folder.glob("rank*.jsonl"))
    for f in files[1:]:
        shares = join.detached() if workers else join.other()
        shares.feed(read_records(str(f))[0])
        shares.finish()
        if workers:
            join.absorb(pickle.loads(pickle.dumps(shares)))
    recs = read_records(str(files[0]))[0]
    join.primary().feed(recs)
    return [r["grad_norm"] for r in recs if r["kind"] == "step" and "grad_norm" in r], join.summary


def test_shares_of_every_rank_are_summed_per_step(tmp_path: Path) -> None:
    _write_job(tmp_path, {0: [9.0, 1.0], 1: [16.0, 1.0], 2: [0.0, 2.0]})
    norms, summary = _joined(tmp_path)
    assert norms == pytest.approx([5.0, 2.0])
    assert summary == "grad_norm of 2 steps joined from 3 ranks' grad_sq_local (sharded gradients)"


def test_a_missing_rank_leaves_no_norm_rather_than_part_of_it(tmp_path: Path) -> None:
    """world_size 3, two files: a norm of two shards would pass for the whole."""
    _write_job(tmp_path, {0: [9.0, 9.0], 1: [16.0, 16.0]}, world=3)
    norms, summary = _joined(tmp_path)
    assert norms == []
    assert summary is not None and "2 steps lack some rank's share" in summary


def test_a_step_a_rank_never_logged_gets_no_norm(tmp_path: Path) -> None:
    _write_job(tmp_path, {0: [9.0, 9.0, 9.0], 1: [16.0, None, 16.0]})
    norms, _ = _joined(tmp_path)
    assert norms == pytest.approx([5.0, 5.0])  # steps 0 and 2


def test_a_nan_in_another_ranks_shard_is_the_jobs_nan_gradient(tmp_path: Path) -> None:
    """Rank 1's shard goes NaN at step 10: rank 0's own share stays finite, but the whole
    model's gradient is NaN, and `dltop check` says so on rank 0."""
    n = 60
    _write_job(tmp_path, {0: [1.0] * n, 1: [1.0] * 10 + [math.nan] * (n - 10)})
    out = check_run(tmp_path)
    nan = [a for a in out["alerts"] if a["id"] == "nan_grad"]
    assert [(a["rank"], a["step"]) for a in nan] == [(0, 10)], out["alerts"]


def test_a_restarted_rank_counts_its_last_share_of_a_step(tmp_path: Path) -> None:
    _write_job(tmp_path, {0: [9.0, 9.0], 1: [100.0, 100.0]})
    # rank 1 restarted and redid both steps (a new segment appended to its file)
    again = [
        {"kind": "meta", "v": 1, "run_id": "j.rank1", "pid": 2, "rank": 1, "world_size": 2},
        {"kind": "step", "step": 0, "t": 2000.0, "grad_sq_local": 16.0},
        {"kind": "step", "step": 1, "t": 2001.0, "grad_sq_local": 16.0},
    ]
    with open(tmp_path / "rank1.jsonl", "a") as f:
        f.writelines(json.dumps(x) + "\n" for x in again)
    norms, _ = _joined(tmp_path)
    assert norms == pytest.approx([5.0, 5.0])


def test_a_grad_norm_on_record_wins_and_old_logs_are_unchanged(tmp_path: Path) -> None:
    _write_job(tmp_path / "given", {0: [9.0], 1: [16.0]})
    log = tmp_path / "given" / "rank0.jsonl"
    recs = _records(log)
    recs[1]["grad_norm"] = 7.0  # the user's own value (probe.step(grad_norm=...))
    log.write_text("".join(json.dumps(x) + "\n" for x in recs))
    assert _joined(tmp_path / "given")[0] == [7.0]
    # a log from before grad_sq_local: its grad_norm is read as it is, no note
    old = tmp_path / "old"
    old.mkdir()
    for r in (0, 1):
        (old / f"rank{r}.jsonl").write_text(
            json.dumps({"kind": "meta", "v": 1, "rank": r, "world_size": 2}) + "\n"
            + json.dumps({"kind": "step", "step": 0, "t": 1.0, "grad_norm": 3.0 + r}) + "\n"
        )  # fmt: skip
    assert _joined(old) == ([3.0], None)
    results, _ = collect(str(old), Config())
    assert results[0].notes == [] and results[0].engine.facts()["grad_norm_max"].value == 3.0


def test_one_sharded_rank_of_one_is_its_own_whole(tmp_path: Path) -> None:
    """A single file of a world of one (FSDP on one GPU) needs no other rank."""
    _write_job(tmp_path, {0: [25.0]})
    results, _ = collect(str(tmp_path / "rank0.jsonl"), Config())
    assert results[0].engine.facts()["grad_norm_max"].value == pytest.approx(5.0)


# --- the probe's weights, in this process ------------------------------------------------
def test_partial_gradients_are_refused_and_shards_summed_in_process(tmp_path: Path) -> None:
    """A one-rank gloo group: a Shard(0) gradient's share is its local sum of squares; a
    Partial one (not reduced yet) has no share, and the probe says why once."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available() or dist.is_initialized():
        pytest.skip("needs a fresh torch.distributed with gloo")
    from dltop.probe.gradnorm import GradNormTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Shard

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        p = torch.nn.Parameter(torch.zeros(3))
        tr = GradNormTracker([("w", p)])
        try:
            p.grad = DTensor.from_local(torch.tensor([1.0, 2.0, 2.0]), mesh, [Shard(0)])
            tr._measure()
            assert tr.latest is None and tr.take_sq() == pytest.approx(9.0)
            p.grad = DTensor.from_local(torch.tensor([1.0, 2.0, 2.0]), mesh, [Partial()])
            tr._measure()
            assert tr.latest is None and tr.take_sq() is None
            assert tr.error is not None and "Partial" in str(tr.error)
        finally:
            tr.remove()
    finally:
        dist.destroy_process_group()


# --- the viewer: a folder followed live ---------------------------------------------------
def _series(model: Any, name: str) -> list[float]:
    s = model.store.series(name)
    return [] if s is None else list(s.ys)


@pytest.mark.slow
def test_the_viewer_joins_a_sharded_folder_into_the_first_ranks_norm(job: Path) -> None:
    from dltop.tui.core.sources.dirsource import DirectorySource
    from dltop.tui.core.store.run import RunModel

    model = RunModel("job")
    src = DirectorySource(str(job / "fsdp"), model, follow=False)
    src.run()  # inline: every rank read to its end
    true = [s["true_grad_norm"] for s in _steps(job / "fsdp" / "rank0.jsonl")]
    assert _series(model, "grad_norm") == pytest.approx(true, rel=1e-5)
    assert src.join.joined == 20 and src.join.incomplete == 0


def _append(path: Path, *recs: dict[str, Any]) -> None:
    with open(path, "ab") as f:
        f.write(b"".join(encode_record(r) for r in recs))


@pytest.mark.parametrize("kept_open", [True, False])
def test_a_live_step_waits_for_the_other_ranks_share_then_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept_open: bool
) -> None:
    """The followed rank's step is written before rank 1's: it is held (and what follows
    it), joined when rank 1's line lands; a step rank 1 never logs goes out without a
    norm once its wait is over, never with part of one. The same with the peer file
    opened for each read (a job with more ranks than ``MAX_OPEN``)."""
    from dltop.tui.core.ranks import shardnorm as peers
    from dltop.tui.core.ranks.shardnorm import PeerJoin

    monkeypatch.setattr(peers, "MAX_OPEN", 1 if kept_open else 0)

    r1 = tmp_path / "rank1.jsonl"  # the followed rank 0 is fed by hand
    _append(r1, {"kind": "meta", "rank": 1, "world_size": 2})
    join = PeerJoin(hold_s=1.0)
    join.set_peers([str(r1)])
    step0 = {"kind": "step", "step": 0, "t": 1.0, "grad_sq_local": 9.0}
    after = {"kind": "eval", "step": 0, "t": 1.1, "loss": 1.0}
    meta = {"kind": "meta", "rank": 0, "world_size": 2}
    assert join.offer([meta, step0, after], now=10.0) == [meta]
    assert join.release(now=10.5) == []  # rank 1 has not written step 0 yet
    _append(r1, {"kind": "step", "step": 0, "t": 1.0, "grad_sq_local": 16.0})
    assert join.release(now=10.6) == [step0, after]
    assert step0["grad_norm"] == 5.0 and "grad_norm" not in after
    step1 = {"kind": "step", "step": 1, "t": 2.0, "grad_sq_local": 9.0}
    assert join.offer([step1], now=20.0) == []
    assert join.release(now=20.9) == []
    assert join.release(now=21.0) == [step1] and "grad_norm" not in step1
    assert (join.joined, join.incomplete) == (1, 1)
    # rank 1 went past a step without logging it: no wait at all
    _append(r1, {"kind": "step", "step": 3, "t": 4.0, "grad_sq_local": 1.0})
    step2 = {"kind": "step", "step": 2, "t": 3.0, "grad_sq_local": 9.0}
    assert join.offer([step2], now=30.0) == [step2] and "grad_norm" not in step2
    (peer,) = join.peers.values()
    assert (peer.fd >= 0) is kept_open
    join.close()


def test_an_unsharded_folder_passes_through_without_opening_a_peer(tmp_path: Path) -> None:
    from dltop.tui.core.ranks.shardnorm import PeerJoin

    join = PeerJoin()
    join.set_peers([str(tmp_path / "rank1.jsonl")])  # not even there
    recs = [{"kind": "step", "step": i, "grad_norm": 1.0, "grad_sq_local": 1.0} for i in range(3)]
    recs += [{"kind": "step", "step": 3, "loss": 1.0}]
    assert join.offer(recs, now=0.0) == recs
    assert all(p.fd < 0 and not p.gone for p in join.peers.values())


def test_a_ranks_shares_are_read_as_share_of_reads_them() -> None:
    """RankShares.feed reads the usual share (an int step, a float) inline and anything
    else through as_step / as_float: the shares kept are share_of's, on hostile values."""
    import random  # noqa: PLC0415

    rng = random.Random(4)
    values: list[Any] = [0.5, 2, "NaN", "Infinity", None, True, "x", 10**400, -1.0, math.nan]
    steps: list[Any] = [1, 2.0, 2.5, -3, 1 << 62, (1 << 62) - 1, None, "3", True, 10**30, 7]
    recs: list[dict[str, Any]] = []
    for _ in range(5000):
        rec: dict[str, Any] = {"kind": rng.choice(["step", "step", "eval", "meta"])}
        if rng.random() < 0.9:
            rec["step"] = rng.choice(steps)
        if rng.random() < 0.9:
            rec[shardnorm.GRAD_SQ_LOCAL] = rng.choice(values)
        recs.append(rec)
    want: dict[int, float] = {}
    for rec in recs:
        if rec["kind"] == "step" and (got := shardnorm.share_of(rec)) is not None:
            want[got[0]] = got[1]
    side = shardnorm.RankShares(shardnorm.GradNormJoin(), primary=False)
    side.feed(recs)
    assert repr(side.shares) == repr(want) and len(want) == 5  # 1, 2.0, -3, 2**62-1, 7
