"""Heartbeats say where the training loop is (``where``, ``where_since``).

The state machine first, then real CPU trainings blocked on purpose in each place (a
loader that sleeps, a forward hook, a gradient hook, an optimizer hook): the heartbeats
written meanwhile name the place and the time it was entered. Last, a real 3-rank
torchrun job (gloo) where one rank hangs in its loader and the others in the
all-reduce: each rank's latest heartbeat tells which is which.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from dltop.probe import Probe
from dltop.probe.decoding import read_records
from dltop.probe.schema import WHERE_PLACES
from dltop.probe.whereabouts import (
    AFTER_STEP,
    BACKWARD,
    COMPUTE,
    DATA_WAIT,
    FORWARD,
    OPTIMIZER,
    OUTSIDE_LOOP,
    Whereabouts,
)
from hangkit import hung_job, latest_heartbeat, rank_records
from test_probe_ranks import needs_gloo

torch.set_num_threads(1)
BEAT = 0.05  # heartbeat_every of these trainings
SLEEP = 0.6  # how long the blocked place lasts


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))


def _batches(
    n: int, sleep_at: int | None = None, marks: list[float] | None = None
) -> Iterator[Any]:
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        if i == sleep_at and marks is not None:
            marks.append(time.time())
            time.sleep(SLEEP)
            marks.append(time.time())
        yield torch.randn(5, 6, generator=g), torch.randn(5, 2, generator=g)


def _beats_during(log: Path, marks: list[float]) -> list[dict[str, Any]]:
    """The heartbeats made while the loop was blocked (between the marks, a margin kept
    at the end: a heartbeat's place is read just after its ``t``)."""
    recs, dec = read_records(str(log))
    assert dec.malformed == 0
    begin, end = marks
    beats = [r for r in recs if r["kind"] == "heartbeat" and begin < r["t"] < end - 0.05]
    assert len(beats) >= 3, "the writer made no heartbeats during the block"
    return beats


def _assert_place(beats: list[dict[str, Any]], place: str, entered_before: float) -> None:
    assert {b["where"] for b in beats} == {place}
    # one stay, one time: entered just before the block began
    assert len({b["where_since"] for b in beats}) == 1
    since = beats[0]["where_since"]
    assert entered_before - 0.3 < since <= entered_before


_ARMED = [False]  # the blocking hooks block at the step that sets it


def _sleeper(marks: list[float]) -> Callable[..., None]:
    """A hook that blocks once, at the armed step, between two marks (Unix time)."""

    def sleep(*_: Any) -> None:
        if _ARMED[0] and not marks:
            marks.append(time.time())
            time.sleep(SLEEP)
            marks.append(time.time())

    return sleep


Block = Callable[[torch.nn.Module, torch.optim.Optimizer, list[float]], Any]


def _train(
    log: Path, block: Block | None = None, loader: bool = True, given_norm: bool = False
) -> list[float]:
    """A plain loop of 4 steps blocked at step 2: by ``block`` (which installs a hook made
    by ``_sleeper``) once the probe started, else by the loader's ``next()``. With
    ``given_norm`` the loop passes its own ``grad_norm=`` at every step."""
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    marks: list[float] = []
    probe = Probe(
        path=log, model=net, optimizer=opt, system=False, socket=False, heartbeat_every=BEAT
    )
    with probe:
        if block is not None:  # after the probe's own hooks: they run first
            block(net, opt, marks)
        data = _batches(4, sleep_at=2 if block is None else None, marks=marks)
        try:
            for i, (x, y) in enumerate(probe.loader(data) if loader else data):
                _ARMED[0] = i == 2
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss, grad_norm=1.0 if given_norm else None)
        finally:
            _ARMED[0] = False
    return marks


# --- the state machine ----------------------------------------------------------------------
def test_the_places_are_the_schemas() -> None:
    assert {OUTSIDE_LOOP, DATA_WAIT, FORWARD, COMPUTE, BACKWARD, OPTIMIZER, AFTER_STEP} == set(
        WHERE_PLACES
    )


def test_moves_and_their_times() -> None:
    w = Whereabouts()
    assert w.place == OUTSIDE_LOOP
    w.move(DATA_WAIT, 10.0)
    assert (w.place, w.since) == (DATA_WAIT, 10.0)
    w.move(FORWARD, 11.0)
    w.forward()  # the model's own forward, after the batch: the stay goes on
    assert (w.place, w.since) == (FORWARD, 11.0)
    w.move(BACKWARD, 12.0)
    w.forward()  # a recompute (activation checkpointing) inside backward: still backward
    assert (w.place, w.since) == (BACKWARD, 12.0)
    w.backward_ended(13.0)
    assert (w.place, w.since) == (AFTER_STEP, 13.0)
    w.step_begins(closure=False)
    assert w.place == OPTIMIZER and w.since > 13.0 and w.in_step
    w.step_ended()
    assert w.place == AFTER_STEP and not w.in_step
    w.forward()
    assert w.place == FORWARD


def test_a_closure_runs_forward_and_backward_inside_the_optimizer_step() -> None:
    """Lightning and LBFGS: step(closure) runs the forward and backward; the end of that
    backward is back in the optimizer, not after it."""
    w = Whereabouts()
    w.move(FORWARD, 1.0)
    w.step_begins(closure=True)
    assert (w.place, w.since) == (FORWARD, 1.0)
    w.move(BACKWARD, 2.0)
    w.backward_ended(3.0)
    assert (w.place, w.since) == (OPTIMIZER, 3.0)
    w.step_ended()
    assert w.place == AFTER_STEP


def test_read_gives_unix_time_once_per_stay() -> None:
    w = Whereabouts()
    before = time.time()
    w.move(DATA_WAIT)
    place, since = w.read()
    assert place == DATA_WAIT and before <= since <= time.time()
    time.sleep(0.01)
    assert w.read() == (DATA_WAIT, since)  # the same stay: the same time, no jitter
    w.move(DATA_WAIT)
    assert w.read()[1] > since  # a new stay in the same place


# --- real trainings, blocked in each place -------------------------------------------------
def test_a_loader_that_blocks_is_data_wait(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    marks = _train(log)
    beats = _beats_during(log, marks)
    _assert_place(beats, DATA_WAIT, marks[0])
    assert {b["step"] for b in beats} == {1}  # the last completed step


def test_a_forward_that_blocks_is_forward(tmp_path: Path) -> None:
    """Without probe.loader(): the model's forward pre-hook says forward."""
    log = tmp_path / "run.jsonl"
    marks = _train(log, lambda net, opt, m: net.register_forward_hook(_sleeper(m)), loader=False)
    _assert_place(_beats_during(log, marks), FORWARD, marks[0])


@pytest.mark.parametrize("given_norm", [False, True])
def test_a_backward_that_blocks_is_backward(tmp_path: Path, given_norm: bool) -> None:
    """A hook on the hidden activation's gradient sleeps, after the last layer's gradients
    came (the probe's first gradient hook of the pass) and before the first layer's. Also
    when the loop gives its own norm at every step and the hooks measure nothing."""
    log = tmp_path / "run.jsonl"

    def block(net: torch.nn.Module, opt: Any, marks: list[float]) -> None:
        sleep = _sleeper(marks)

        def on_hidden(_mod: Any, _args: Any, out: torch.Tensor) -> None:
            out.register_hook(sleep)

        net[1].register_forward_hook(on_hidden)

    marks = _train(log, block, given_norm=given_norm)
    _assert_place(_beats_during(log, marks), BACKWARD, marks[0])
    steps = [r for r in read_records(str(log))[0] if r["kind"] == "step"]
    assert steps[2]["backward_time"] >= SLEEP  # the same pass times the step's phases


def test_an_optimizer_step_that_blocks_is_optimizer(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    marks = _train(log, lambda net, opt, m: opt.register_step_pre_hook(_sleeper(m)))
    _assert_place(_beats_during(log, marks), OPTIMIZER, marks[0])


def test_after_the_step_and_outside_the_loop(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with Probe(
        path=log, model=net, optimizer=opt, system=False, socket=False, heartbeat_every=BEAT
    ) as probe:
        assert probe._where.place == OUTSIDE_LOOP
        time.sleep(0.2)  # set-up before the loop: heartbeats say outside_loop
        for x, y in probe.loader(_batches(2)):
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad()
            probe.step()
            assert probe._where.place == AFTER_STEP
            marks = [time.time()]
            time.sleep(0.3)  # the user's own work after the step (a checkpoint...)
            marks.append(time.time())
            break
        assert probe._where.place == AFTER_STEP
    assert probe._where.place == OUTSIDE_LOOP  # after the `with` block
    recs, _ = read_records(str(log))
    beats = [r for r in recs if r["kind"] == "heartbeat"]
    assert beats[0]["where"] == OUTSIDE_LOOP and beats[0]["step"] is None
    _assert_place(_beats_during(log, marks), AFTER_STEP, marks[0])


def test_without_a_model_the_step_is_compute(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, system=False, socket=False, heartbeat_every=BEAT) as probe:
        for i, x in enumerate(probe.loader(range(3))):
            if i == 1:
                marks = [time.time()]
                time.sleep(0.3)
                marks.append(time.time())
            probe.step(loss=float(x))
        assert probe._where.place == OUTSIDE_LOOP  # the loader is exhausted: the loop is over
    _assert_place(_beats_during(log, marks), COMPUTE, marks[0])


def test_a_lightning_style_closure_backward_ends_in_the_optimizer(tmp_path: Path) -> None:
    """``optimizer.step(closure)``: the backward inside the step ends back in ``optimizer``
    (where the parameters are updated), not ``after_step``."""
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    seen: list[str] = []
    with Probe(
        path=tmp_path / "run.jsonl", model=net, optimizer=opt, system=False, socket=False
    ) as probe:
        opt.register_step_post_hook(lambda *_: seen.append(probe._where.place))
        for x, y in probe.loader(_batches(2)):

            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                seen.append(probe._where.place)  # the end-of-backward callback has run
                return loss

            opt.step(closure)
            opt.zero_grad()
            probe.step()
    assert seen == [OPTIMIZER, AFTER_STEP] * 2  # after each backward; after the step


def test_the_hooks_are_removed_on_close(tmp_path: Path) -> None:
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    hooks = (len(net._forward_pre_hooks), len(net[0]._forward_pre_hooks))
    opt_hooks = (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks))
    with Probe(path=tmp_path / "run.jsonl", model=net, optimizer=opt, system=False, socket=False):
        assert len(net._forward_pre_hooks) == hooks[0] + 1
        assert len(net[0]._forward_pre_hooks) == hooks[1] + 1  # the autocast look, armed
        assert len(opt._optimizer_step_pre_hooks) == opt_hooks[0] + 1
    assert (len(net._forward_pre_hooks), len(net[0]._forward_pre_hooks)) == hooks
    assert (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks)) == opt_hooks


# --- a real hung job -----------------------------------------------------------------------
@pytest.mark.slow
@needs_gloo
@pytest.mark.timeout(300)
def test_a_hung_torchrun_job_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    """Rank 1 blocks forever in its loader before step 100's forward; ranks 0 and 2 block
    in step 100's gradient all-reduce. Each rank's latest heartbeat says so."""
    with hung_job(tmp_path / "job", hung_rank=1, hang_step=100) as job:
        assert job.hung(), job.stderr.read_text(errors="replace")[-3000:]
        pids = job.worker_pids()
        assert len(pids) == 3
        beats = {r: latest_heartbeat(rank_records(job.out, r)) for r in range(3)}
    for rank, beat in beats.items():
        assert beat is not None
        assert beat["step"] == 99, (rank, beat)  # the last step every rank completed
        assert beat["where"] == (DATA_WAIT if rank == 1 else BACKWARD), (rank, beat)
        assert beat["t"] - beat["where_since"] >= 1.0  # there for a while: hung, not passing
    assert not [p for p in pids if psutil.pid_exists(p) and _running(p)]  # no leftovers


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
