"""The probe on a GPU: no host-device sync in the training loop, and the CUDA-only fields.

Skipped where there is no CUDA device. ``torch.cuda.set_sync_debug_mode("error")``
turns every hidden synchronisation on the training thread into an exception, so a
probe that called ``.item()`` or ``synchronize()`` in ``step()`` or in its backward
hooks would fail here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dltop.probe import Probe
from dltop.probe.decoding import read_records

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _read(log: Path) -> tuple[list[dict], list[dict]]:
    """The log's records, every line whole, and its step records."""
    recs, dec = read_records(str(log))
    assert dec.malformed == 0
    return recs, [r for r in recs if r["kind"] == "step"]


def test_cuda_training_with_sync_debug_mode_error(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    refs, losses = [], []
    with Probe(path=log, model=model, optimizer=opt, layers_every=2, memory_every=0.0) as probe:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i in range(6):
                if i == 5:  # the user's own norm: used as given, still no sync
                    x = torch.randn(32, 64, device=dev)
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
                    refs.append(norm.detach().clone())
                    opt.step()
                    opt.zero_grad()
                    probe.step(loss=loss, grad_norm=norm, acc=torch.ones((), device=dev))
                else:
                    x = torch.randn(32, 64, device=dev)
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    refs.append(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
                    opt.step()
                    opt.zero_grad()
                    probe.step(loss=loss, acc=torch.ones((), device=dev))
                losses.append(loss.detach().clone())
            with probe.phase("eval"):
                probe.eval(loss=losses[-1])
        finally:
            torch.cuda.set_sync_debug_mode(0)
    recs, steps = _read(log)
    assert len(steps) == 6
    assert [s["loss"] for s in steps] == pytest.approx([float(v) for v in losses], rel=1e-6)
    assert [s["grad_norm"] for s in steps] == pytest.approx([float(v) for v in refs], rel=1e-5)
    assert all(s["acc"] == 1.0 for s in steps)
    assert all(s["device_time"] > 0 for s in steps[1:])
    for s in steps:
        assert 0 < s["mem_allocated"] <= s["mem_reserved"] <= s["mem_limit"]
        assert s["mem_max_allocated"] >= s["mem_allocated"]
    layers = [r for r in recs if r["kind"] == "layers"]
    assert [r["step"] for r in layers] == [0, 2, 4] and all(
        len(r["zero_frac"]) == 4 for r in layers
    )
    assert [r for r in recs if r["kind"] == "eval"][0]["loss"] == pytest.approx(float(losses[-1]))
    assert not [r for r in recs if r.get("type") == "warning"]


def test_cuda_tensor_lr_is_read_back_without_a_sync(tmp_path: Path) -> None:
    """A CUDA tensor lr (capturable/fused optimizers) goes through the lazy read-back."""
    log = tmp_path / "run.jsonl"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01, device=dev), capturable=True)
    new_lr = torch.tensor(0.25, device=dev)  # made before: copying it there is a sync
    with Probe(path=log, model=model, optimizer=opt, system=False) as probe:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                model(torch.randn(8, 16, device=dev)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=0.5)
            probe.step(loss=0.5, lr=new_lr)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    recs, dec = read_records(str(log))
    steps = [r for r in recs if r["kind"] == "step"]
    assert [s["lr"] for s in steps] == pytest.approx([0.01, 0.01, 0.01, 0.25])
    assert not [r for r in recs if r.get("type") == "warning"]


def test_cuda_only_extras_and_a_grad_norm_given_now_and_then(tmp_path: Path) -> None:
    """The README's `probe.step(loss=loss, acc=acc)` with CUDA tensors: every extra a
    device value left no dict for the read-back, and every step was dropped. A grad norm
    given every other step (clipping only then) must leave the others measured."""
    log = tmp_path / "run.jsonl"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    accs, norms = [], []
    with Probe(path=log, model=model, optimizer=opt, system=False) as probe:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i in range(20):
                out = model(torch.randn(32, 16, device=dev))
                loss = out.pow(2).mean()
                loss.backward()
                ref = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
                given = ref * 0 + 100.0 + i if i % 2 else None
                norms.append(given if given is not None else ref)
                opt.step()
                opt.zero_grad()
                acc = (out > 0).float().mean()
                accs.append(acc)
                probe.step(loss=loss, acc=acc, grad_norm=given)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    recs, steps = _read(log)
    assert len(steps) == 20
    assert [s["acc"] for s in steps] == pytest.approx([float(a) for a in accs])
    assert [s["grad_norm"] for s in steps] == pytest.approx([float(n) for n in norms], rel=1e-5)
    assert not [r for r in recs if r.get("type") == "warning"]


def test_sparse_gradients_on_a_gpu_are_said_in_one_line_never_synced(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8, sparse=True), torch.nn.Linear(8, 1))
    model = model.to(dev)
    idx = torch.tensor([[1, 2, 1, 3]], device=dev)
    with Probe(path=log, model=model, system=False) as probe:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                loss = model(idx).pow(2).mean()
                loss.backward()
                model.zero_grad()
                probe.step(loss=loss)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    recs, steps = _read(log)
    assert len(steps) == 3 and all("grad_norm" not in s for s in steps)
    (warning,) = [r["message"] for r in recs if r.get("type") == "warning"]
    assert "sparse gradients on a GPU" in warning and "\n" not in warning


def test_loss_scale_and_the_amp_config_under_fp16_autocast_without_a_sync(tmp_path: Path) -> None:
    """``Probe(scaler=...)``: each step's ``loss_scale`` is the GradScaler's device scale,
    read back like the loss (``get_scale()`` would sync). The training's own
    ``scaler.step()`` syncs (it reads found_inf), so only the probe's parts run under the
    debug mode: the backward with its hooks, and ``probe.step()``."""
    log = tmp_path / "run.jsonl"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12)
    scales = []
    with Probe(path=log, model=model, optimizer=opt, scaler=scaler, system=False) as probe:
        for i in range(6):
            x = torch.randn(16, 32, device=dev)
            torch.cuda.set_sync_debug_mode("error")
            try:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x).float().pow(2).mean()
                if i == 3:
                    loss = loss * float("inf")  # an overflow: step skipped, scale halved
                scaler.scale(loss).backward()
            finally:
                torch.cuda.set_sync_debug_mode(0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())  # the test's reference: a sync of its own
            torch.cuda.set_sync_debug_mode("error")
            try:
                probe.step(loss=loss)
            finally:
                torch.cuda.set_sync_debug_mode(0)
    recs, steps = _read(log)
    assert [s["loss_scale"] for s in steps] == scales
    assert scales[3] == scales[2] / 2
    (config,) = [r for r in recs if r.get("type") == "config"]
    assert config["amp"] == {"dtype": "float16", "scaler": True}
    assert not [r for r in recs if r.get("type") == "warning"]
