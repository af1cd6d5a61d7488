"""The probe on real tiny CPU trainings: what it records is what the training did.

References are computed in the test itself, right after backward and before any
clipping, with ``torch.nn.utils.get_total_norm`` on the same gradients.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from dltop.probe import Probe
from dltop.probe.decoding import read_records

torch.set_num_threads(1)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))


def _batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(5, 6, generator=g), torch.randn(5, 2, generator=g)


def _ref_norm(model: torch.nn.Module) -> float:
    return float(
        torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    )


def _records(path: Path, kind: str | None = None) -> list[dict]:
    recs, dec = read_records(str(path))
    assert dec.malformed == 0
    return [r for r in recs if kind is None or r["kind"] == kind]


def _train(path: Path, style: str, steps: int = 6, accum: int = 1, max_norm: float | None = 0.05):
    """A real loop in one of the shapes users write; returns the reference norms per step."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    refs: list[float] = []
    with Probe(path=path, model=model, optimizer=opt, system=False) as probe:
        for i in range(steps):
            if style == "zero_first":
                opt.zero_grad()
            for k in range(accum):
                x, y = _batch(i * accum + k)
                loss = torch.nn.functional.mse_loss(model(x), y) / accum
                loss.backward()
            refs.append(_ref_norm(model))  # the fully accumulated gradient, before clipping
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if style == "callback":  # minGPT: clip, step, zero, then on_batch_end
                opt.step()
                opt.zero_grad(set_to_none=True)
                probe.step(loss=loss.item())
            elif style == "zero_first":
                opt.step()
                probe.step(loss=loss)
            else:  # zero_grad after probe.step
                opt.step()
                probe.step(loss=loss)
                opt.zero_grad()
    return refs


@pytest.mark.parametrize("style", ["zero_after", "zero_first", "callback"])
@pytest.mark.parametrize("max_norm", [None, 0.05])
def test_grad_norm_is_the_pre_clip_norm(tmp_path: Path, style: str, max_norm: float | None) -> None:
    log = tmp_path / "run.jsonl"
    refs = _train(log, style, max_norm=max_norm)
    steps = _records(log, "step")
    got = [s["grad_norm"] for s in steps]
    assert got == pytest.approx(refs, rel=1e-6)
    if max_norm is not None:  # the clip really happened, and the probe did not see its result
        assert min(refs) > max_norm * 2


@pytest.mark.parametrize("style", ["zero_after", "zero_first", "callback"])
def test_grad_norm_with_gradient_accumulation(tmp_path: Path, style: str) -> None:
    log = tmp_path / "run.jsonl"
    refs = _train(log, style, steps=4, accum=3)
    got = [s["grad_norm"] for s in _records(log, "step")]
    assert got == pytest.approx(refs, rel=1e-6)


def test_no_backward_means_no_grad_norm_and_explicit_values_win(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    with Probe(path=log, model=model, optimizer=opt, system=False, layers_every=0) as probe:
        probe.step(loss=1.0)  # no backward yet: no grad norm recorded
        x, y = _batch(0)
        torch.nn.functional.mse_loss(model(x), y).backward()
        probe.step(loss=2.0, grad_norm=7.5, lr=0.125, batch_size=9, step=100)
        tracker = probe._grad
        assert tracker is not None and tracker.compute_total  # given once: still measured
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        probe.step(loss=3.0, grad_norm=torch.tensor(1.5))
        assert not tracker.compute_total  # given at every step: our own work stopped
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert tracker.latest is None
        probe.step(loss=4.0)  # none given: none measured at this step, measured from the next
        assert tracker.compute_total
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        want = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])
        ).item()
        probe.step(loss=5.0)
    s = _records(log, "step")
    assert "grad_norm" not in s[0] and s[0]["step"] == 0 and s[0]["lr"] == 0.3
    assert (s[1]["step"], s[1]["grad_norm"], s[1]["lr"], s[1]["batch_size"]) == (100, 7.5, 0.125, 9)
    assert s[1]["samples_per_s"] == pytest.approx(9 / s[1]["step_time"])
    assert (s[2]["step"], s[2]["grad_norm"]) == (101, 1.5)
    assert s[3]["step"] == 102 and "grad_norm" not in s[3]
    assert s[4]["grad_norm"] == pytest.approx(want, rel=1e-6)


def test_a_grad_norm_given_once_or_every_other_step_leaves_the_rest_measured(
    tmp_path: Path,
) -> None:
    """One `grad_norm=` (or one every other step, when the user clips only then) turned
    the probe's own measure off for the rest of the run: every later step had none."""
    log = tmp_path / "run.jsonl"
    model = _model()
    want: list[float | None] = []
    with Probe(path=log, model=model, system=False, layers_every=0) as probe:
        for i in range(6):
            model.zero_grad()
            x, y = _batch(i)
            torch.nn.functional.mse_loss(model(x), y).backward()
            given = 100.0 + i if i in (0, 2, 4) else None
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])
            ).item()
            want.append(given if given is not None else norm)
            probe.step(loss=1.0, grad_norm=given)
    got = [s.get("grad_norm") for s in _records(log, "step")]
    assert got == pytest.approx(want, rel=1e-6)


def test_loss_as_float_tensor_and_nan(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    loss_t = torch.tensor(0.25, requires_grad=True) * 2
    with Probe(path=log, system=False) as probe:
        probe.step(loss=0.5)
        probe.step(loss=loss_t, acc=torch.tensor(0.75), tokens=128, name_ok=3.5)
        probe.step(loss=float("nan"))
        probe.step(loss=torch.tensor(float("inf")))
        probe.step()
    s = _records(log, "step")
    assert s[0]["loss"] == 0.5
    assert (s[1]["loss"], s[1]["acc"], s[1]["tokens"], s[1]["name_ok"]) == (0.5, 0.75, 128, 3.5)
    assert math.isnan(s[2]["loss"]) and s[3]["loss"] == math.inf
    assert "loss" not in s[4]
    raw = log.read_text()
    assert '"loss":"NaN"' in raw and "NaN," not in raw.replace('"NaN"', "")


def test_per_layer_norms_zero_fractions_and_no_grad(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    torch.manual_seed(1)
    model = torch.nn.ModuleDict(
        {
            "hidden": torch.nn.Linear(4, 8),
            "out": torch.nn.Linear(8, 1),
            "unused": torch.nn.Linear(3, 3),  # trainable, never in the graph: grad stays None
        }
    )
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    model.register_parameter("frozen", frozen)
    with torch.no_grad():
        model["hidden"].bias[:6] = -100.0  # 6 of 8 ReLU units are dead for any input near 0
    expected: list[dict[str, float]] = []
    with Probe(path=log, model=model, system=False, layers_every=3) as probe:
        for i in range(7):
            x = torch.randn(16, 4, generator=torch.Generator().manual_seed(i))
            loss = model["out"](torch.relu(model["hidden"](x))).pow(2).mean()
            loss.backward()
            expected.append(
                {n: float(p.grad.norm()) for n, p in model.named_parameters() if p.grad is not None}
            )
            probe.step(loss=loss)
            model.zero_grad()
    layers = _records(log, "layers")
    assert [r["step"] for r in layers] == [0, 3, 6]
    for rec in layers:
        assert rec["names"] == ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]
        assert rec["no_grad"] == ["unused.weight", "unused.bias"]
        ref = expected[rec["step"]]
        assert rec["grad_norm"] == pytest.approx([ref[n] for n in rec["names"]], rel=1e-6)
        zf = dict(zip(rec["names"], rec["zero_frac"], strict=True))
        assert zf["hidden.weight"] == pytest.approx(6 / 8)  # the dead units' rows
        assert zf["hidden.bias"] == pytest.approx(6 / 8)
        assert zf["out.weight"] == pytest.approx(6 / 8)  # inputs from dead units are 0
        assert zf["out.bias"] == 0.0
    # the layers record follows its step record in the log
    kinds = [(r["kind"], r.get("step")) for r in _records(log) if r["kind"] in ("step", "layers")]
    assert kinds.index(("layers", 3)) == kinds.index(("step", 3)) + 1


def test_lr_per_param_group(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _model()
    opt = torch.optim.AdamW(
        [
            {"params": model[0].parameters(), "lr": 1e-3},
            {"params": model[2].parameters(), "lr": 5e-4},
        ]
    )
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with Probe(path=log, model=model, optimizer=opt, system=False) as probe:
        for i in range(3):
            x, y = _batch(i)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            probe.step()
            sched.step()
    s = _records(log, "step")
    assert [r["lr"] for r in s] == pytest.approx([1e-3, 5e-4, 2.5e-4])
    assert [r["lrs"] for r in s] == [pytest.approx([1e-3 / 2**i, 5e-4 / 2**i]) for i in range(3)]
    assert all(r["grad_norm"] > 0 for r in s)


class _SlowData:
    """A loader whose every batch takes ``delay`` seconds to arrive."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.delay)
            yield _batch(i)


def test_data_wait_step_time_and_batch_size_from_the_loader(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _model()
    with Probe(path=log, model=model, system=False) as probe:
        loader = probe.loader(_SlowData(4, delay=0.05))
        assert len(loader) == 4 and loader.delay == 0.05  # the wrapped loader stays reachable
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            time.sleep(0.02)  # "compute"
            probe.step()
    s = _records(log, "step")
    assert len(s) == 4
    for r in s:
        assert r["data_time"] >= 0.05
        assert r["step_time"] >= r["data_time"] + 0.02
        assert r["compute_time"] == pytest.approx(r["step_time"] - r["data_time"])
        assert r["compute_time"] >= 0.02
        assert r["batch_size"] == 5
        assert r["samples_per_s"] == pytest.approx(5 / r["step_time"])
    assert s[0]["step_time"] < 0.5  # the first step is timed from the first next()


def test_forward_and_backward_time_split_the_step_from_the_loaders_batch(
    tmp_path: Path,
) -> None:
    """Batch ready (``probe.loader``) -> first gradient is the forward, first -> last
    gradient the backward; a step with no new batch since the last has no split."""
    log = tmp_path / "run.jsonl"
    model = _model()
    model[0].register_forward_hook(lambda *_: time.sleep(0.03))  # a slow forward
    model[2].register_full_backward_hook(lambda *_: time.sleep(0.02))  # between the grads
    with Probe(path=log, model=model, system=False) as probe:
        for x, y in probe.loader([_batch(i) for i in range(3)]):
            torch.nn.functional.mse_loss(model(x), y).backward()
            probe.step()
        torch.nn.functional.mse_loss(model(x), y).backward()
        probe.step()  # the loader's last batch belongs to the previous step
    s = _records(log, "step")
    assert len(s) == 4
    for r in s[:3]:
        assert 0.03 <= r["forward_time"] < r["compute_time"], r
        assert r["backward_time"] >= 0.02, r
    assert "forward_time" not in s[3] and "backward_time" not in s[3]


def test_eval_note_phase_heartbeat_and_exit(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, system=False, heartbeat_every=0.1) as probe:
        probe.step(loss=1.0)
        probe.step(loss=0.9)
        with probe.phase("eval"):
            probe.eval(loss=0.8, acc=torch.tensor(0.5))
        probe.note("checkpoint saved", path="ckpt.pt")
        time.sleep(0.45)
    recs = _records(log)
    assert recs[0]["kind"] == "meta" and recs[0]["run_id"] == "run"
    ev = [r for r in recs if r["kind"] == "eval"]
    assert ev == [{"kind": "eval", "step": 1, "t": ev[0]["t"], "loss": 0.8, "acc": 0.5}]
    phases = [(r["name"], r["state"]) for r in recs if r.get("type") == "phase"]
    assert phases == [("eval", "begin"), ("eval", "end")]
    note = next(r for r in recs if r.get("type") == "note")
    assert note["text"] == "checkpoint saved" and note["path"] == "ckpt.pt" and note["step"] == 1
    beats = [r for r in recs if r["kind"] == "heartbeat"]
    assert len(beats) >= 2 and beats[-1]["step"] == 1
    assert recs[-1] == {
        "kind": "event",
        "type": "exit",
        "t": recs[-1]["t"],
        "status": "ok",
        "step": 1,
        "steps": 2,
    }


def test_exception_is_recorded_and_reraised_unchanged(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    err = RuntimeError("boom at step 3")
    with pytest.raises(RuntimeError) as info, Probe(path=log, system=False) as probe:
        for i in range(5):
            probe.step(loss=float(i))
            if i == 3:
                raise err
    assert info.value is err
    recs = _records(log)
    exc = [r for r in recs if r.get("type") == "exception"]
    assert len(exc) == 1 and exc[0]["step"] == 3 and "boom at step 3" in str(exc[0])
    assert recs[-1]["type"] == "exit" and recs[-1]["status"] == "exception"
    assert recs[-1]["steps"] == 4


def test_keyboard_interrupt_exit_status(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with pytest.raises(KeyboardInterrupt), Probe(path=log, system=False) as probe:
        probe.step(loss=1.0)
        raise KeyboardInterrupt
    assert _records(log)[-1]["status"] == "interrupted"


def test_path_none_without_socket_is_an_error() -> None:
    with pytest.raises(ValueError, match="nowhere to write"):
        Probe(path=None, socket=False)


def test_path_none_with_the_default_socket_serves_a_viewer() -> None:
    """The contract: the socket is on by default, so a file-less probe is valid."""
    from dltop.probe import rendezvous
    from dltop.tui.core.sources.socket_source import parse_address, peek

    with Probe(path=None, system=False) as probe:
        for i in range(5):
            probe.step(loss=float(i))
        probe.flush()
        mine = [r for r in rendezvous.list_runs() if r.get("pid") == os.getpid()]
        assert len(mine) == 1 and mine[0]["run_id"] == probe.run_id
        recs = peek(parse_address("unix:" + mine[0]["socket"]), timeout=2.0)
    assert recs[0]["kind"] == "meta" and recs[0]["run_id"] == probe.run_id
    assert [r["step"] for r in recs if r["kind"] == "step"] == [0, 1, 2, 3, 4]
    assert [r for r in rendezvous.list_runs() if r.get("pid") == os.getpid()] == []


def test_default_path_and_explicit_start_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    probe = Probe(system=False).start()
    probe.step(loss=1.0)
    probe.close()
    probe.close()  # idempotent
    logs = list((tmp_path / "dltop-runs").glob("*.jsonl"))
    assert len(logs) == 1 and logs[0].name.endswith(f"-{os.getpid()}.jsonl")
    assert [r["kind"] for r in _records(logs[0])] == ["meta", "step", "event"]


def test_probe_errors_never_reach_the_loop(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, system=False) as probe:
        probe.step(loss=torch.ones(3), acc=0.5)  # not a scalar: the field is dropped, once
        probe.step(loss=1.0, weird=object())
        probe.step(loss=2.0)
    s = _records(log, "step")
    assert len(s) == 3 and "loss" not in s[0] and s[0]["acc"] == 0.5 and s[2]["loss"] == 2.0
    assert "weird" not in s[1]
    warnings = [r for r in _records(log) if r.get("type") == "warning"]
    assert len(warnings) == 2 and "'loss'" in warnings[0]["message"]


def test_a_close_on_another_thread_during_a_step_is_no_probe_error(tmp_path: Path) -> None:
    """A layers step whose ``close()`` (another thread: a signal handler, atexit) lands
    between the step's record and its layers record: the step had the queue when it
    began and finishes with it, instead of calling the None that close() left and
    warning "probe error in step" about its own shutdown."""
    model = _model()
    probe = Probe(path=tmp_path / "run.jsonl", model=model, system=False, layers_every=1)
    probe.start()
    tracker = probe._grad
    assert tracker is not None
    take = tracker.take_layers

    def close_first() -> Any:
        probe.close()  # as if another thread closed the probe at this very moment
        return take()

    tracker.take_layers = close_first  # type: ignore[method-assign]
    x, y = _batch(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    probe.step(loss=1.0)
    assert probe.warnings == []
    # the config event (the autocast look of the forward) came before the step
    assert [r["type"] for r in _records(tmp_path / "run.jsonl", "event")] == ["config", "exit"]


def test_hooks_are_removed_on_close(tmp_path: Path) -> None:
    model = _model()
    with Probe(path=tmp_path / "run.jsonl", model=model, system=False) as probe:
        tracker = probe._grad
    x, y = _batch(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    assert tracker is not None and tracker.latest is None


def test_float_path_works_without_torch(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "from dltop.probe import Probe\n"
        f"with Probe(path={str(log)!r}) as p:\n"
        "    for i, b in enumerate(p.loader([[1, 2]] * 3)):\n"
        "        p.step(loss=1.0 / (i + 1), grad_norm=2.0, lr=0.1, batch_size=len(b))\n"
        "    p.eval(loss=0.5)\n"
        "print('torch' in sys.modules and sys.modules['torch'] is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    s = _records(log, "step")
    assert [r["loss"] for r in s] == pytest.approx([1.0, 0.5, 1 / 3])
    assert all(r["batch_size"] == 2 and "data_time" in r for r in s)


def test_grad_norm_with_an_amp_grad_scaler(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    refs, scales = [], []
    with Probe(path=log, model=model, optimizer=opt, scaler=scaler, system=False) as probe:
        for i in range(5):
            x, y = _batch(i)
            scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
            scaler.unscale_(opt)
            refs.append(_ref_norm(model))  # unscaled, before clipping
            scales.append(float(scaler.get_scale()))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            probe.step()
    assert scales[0] != scales[-1]  # the scale changed during the run
    got = [s["grad_norm"] for s in _records(log, "step")]
    assert got == pytest.approx(refs, rel=1e-5)
    layers = _records(log, "layers")[0]
    assert math.sqrt(sum(n * n for n in layers["grad_norm"])) == pytest.approx(refs[0], rel=1e-5)


@pytest.mark.parametrize("reentrant", [True, False])
def test_grad_norm_with_activation_checkpointing(tmp_path: Path, reentrant: bool) -> None:
    """Reentrant checkpointing runs nested backward passes: the last norm must still be the full one."""
    from torch.utils.checkpoint import checkpoint

    log = tmp_path / "run.jsonl"
    model = _model()
    refs = []
    with Probe(path=log, model=model, system=False) as probe:
        for i in range(3):
            x, y = _batch(i)
            x.requires_grad_(True)  # the reentrant variant needs an input that requires grad
            h = checkpoint(lambda t: model[1](model[0](t)), x, use_reentrant=reentrant)
            torch.nn.functional.mse_loss(model[2](h), y).backward()
            refs.append(_ref_norm(model))
            probe.step()
            model.zero_grad()
    got = [s["grad_norm"] for s in _records(log, "step")]
    assert got == pytest.approx(refs, rel=1e-6)


def test_batch_size_inference_reads_only_shapes() -> None:
    from dltop.probe.loader import batch_size_of

    x = torch.zeros(7, 3)
    assert batch_size_of(x) == 7
    assert batch_size_of((x, torch.zeros(7))) == 7
    assert batch_size_of([x]) == 7
    assert batch_size_of({"input_ids": torch.zeros(4, 128, dtype=torch.long), "mask": x}) == 4
    assert batch_size_of(torch.tensor(3.0)) is None  # 0-d: no batch dimension
    assert batch_size_of([1, 2, 3]) is None and batch_size_of("text") is None
    assert batch_size_of(()) is None and batch_size_of({}) is None


def test_a_batch_whose_shape_raises_reaches_the_loop(tmp_path: Path) -> None:
    """A nested tensor's ``.shape`` raises: `probe.loader()` raised it into training."""
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(5, 3)])
    batches = [nested, [nested, torch.zeros(2)], {"x": nested}, (torch.zeros(4, 1),)]
    with Probe(path=tmp_path / "run.jsonl", socket=False, system=False) as probe:
        seen = []
        for batch in probe.loader(batches):
            seen.append(batch)
            probe.step(loss=1.0)
    assert len(seen) == 4 and seen[0] is nested
    sizes = [s.get("batch_size") for s in _records(tmp_path / "run.jsonl", "step")]
    assert sizes == [None, None, None, 4]


def test_step_before_start_says_so_once(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    probe = Probe(path=tmp_path / "run.jsonl", system=False)
    probe.step(loss=1.0)
    probe.step(loss=2.0)
    err = capfd.readouterr().err
    assert err.count("before start()") == 1
    assert not (tmp_path / "run.jsonl").exists()


def test_tensor_learning_rates_are_recorded(tmp_path: Path) -> None:
    """``Adam(lr=torch.tensor(...))`` keeps a tensor in its param groups: it is still an lr."""
    log = tmp_path / "run.jsonl"
    model = _model()
    opt = torch.optim.Adam(
        [
            {"params": model[0].parameters()},
            {"params": model[2].parameters(), "lr": torch.tensor(0.004)},
        ],
        lr=torch.tensor(0.002),
    )
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    expected = []
    with Probe(path=log, model=model, optimizer=opt, system=False) as probe:
        for i in range(3):
            x, y = _batch(i)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            expected.append([float(g["lr"]) for g in opt.param_groups])
            probe.step(loss=1.0)
            sched.step()  # changes the tensors in place: the step keeps its own value
        probe.step(loss=1.0, lr=torch.tensor(0.25, dtype=torch.float64))
    s = _records(log, "step")
    assert [r["lr"] for r in s[:3]] == pytest.approx([e[0] for e in expected])
    assert [r["lrs"] for r in s[:3]] == [pytest.approx(e) for e in expected]
    assert expected[1][0] == pytest.approx(0.001)  # the schedule really moved between steps
    assert s[3]["lr"] == 0.25 and "lrs" not in s[3]
    assert not [r for r in _records(log) if r.get("type") == "warning"]


def test_batch_size_sums_the_micro_batches_of_gradient_accumulation(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    accum = 3
    with Probe(path=log, model=model, optimizer=opt, system=False) as probe:
        for i, (x, y) in enumerate(probe.loader([_batch(k) for k in range(4 * accum)])):
            (torch.nn.functional.mse_loss(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                probe.step()
        with probe.phase("eval"), torch.no_grad():  # an eval loader does not count
            for x, _ in probe.loader([_batch(99)] * 4):
                model(x)
        for x, y in probe.loader([_batch(50)]):  # one more step without accumulation
            torch.nn.functional.mse_loss(model(x), y).backward()
            probe.step()
    s = _records(log, "step")
    assert [r["batch_size"] for r in s] == [5 * accum] * 4 + [5]
    assert all(r["samples_per_s"] == pytest.approx(r["batch_size"] / r["step_time"]) for r in s)


def test_empty_path_without_socket_is_the_same_error() -> None:
    with pytest.raises(ValueError, match="nowhere to write"):
        Probe(path="", socket=False)


def test_no_per_layer_pass_before_it_is_asked_for() -> None:
    from dltop.probe.gradnorm import GradNormTracker

    model = _model()
    tracker = GradNormTracker(list(model.named_parameters()))
    try:
        x, y = _batch(0)
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert tracker.latest == pytest.approx(_ref_norm(model), rel=1e-6)
        assert tracker.layers is None  # only the total norm was computed
        tracker.want_layers = True
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert tracker.take_layers() is not None
    finally:
        tracker.remove()


@pytest.mark.parametrize(
    ("exc", "signal", "expected"),
    [
        (None, None, ("ok", False)),
        (KeyboardInterrupt(), None, ("interrupted", True)),
        (SystemExit(0), None, ("ok", False)),
        (SystemExit(None), None, ("ok", False)),
        (SystemExit(143), "SIGTERM", ("signal", False)),  # our own handler's exit
        (SystemExit(2), None, ("exception", True)),  # sys.exit(2): the script failed
        (RuntimeError("boom"), None, ("exception", True)),
        (RuntimeError("boom"), "SIGTERM", ("signal", True)),
    ],
)
def test_how_a_with_block_ended_goes_on_record(
    exc: BaseException | None, signal: str | None, expected: tuple[str, bool]
) -> None:
    """The ``exit`` status and whether a crash event is written first: Ctrl-C is on record
    but no crash, a clean ``sys.exit`` records nothing, a failing one is a crash."""
    from dltop.probe.lifecycle import exit_status

    assert exit_status(exc, signal) == expected


def test_sparse_gradients_are_measured(tmp_path: Path) -> None:
    """`nn.Embedding(sparse=True)`: the norm failed with an 80-line dispatch error in the
    log and on stderr, and no step had a grad norm. A sparse COO gradient repeats an index
    per use in the batch, so its norm is taken coalesced."""
    log = tmp_path / "run.jsonl"
    torch.manual_seed(0)
    emb, lin = torch.nn.Embedding(50, 8, sparse=True), torch.nn.Linear(8, 1)
    model = torch.nn.Sequential(emb, lin)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    refs = []
    with Probe(path=log, model=model, optimizer=opt, system=False, layers_every=2) as probe:
        for _ in range(4):
            loss = model(torch.tensor([[1, 2, 1, 3]])).pow(2).mean()
            loss.backward()
            dense = [emb.weight.grad.to_dense(), *(p.grad for p in lin.parameters())]
            refs.append(float(torch.nn.utils.get_total_norm(dense)))
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)
    recs = _records(log)
    assert [r["grad_norm"] for r in recs if r["kind"] == "step"] == pytest.approx(refs, rel=1e-6)
    assert not [r for r in recs if r.get("type") == "warning"]
    layer = next(r for r in recs if r["kind"] == "layers")
    assert layer["zero_frac"][0] == pytest.approx(1 - 3 / 50)  # 3 of 50 rows used
