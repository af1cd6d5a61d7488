"""``dltop.probe.lightning.DltopCallback`` on real Lightning trainings of tiny CPU models.

References are taken inside the same training, independently of the adapter: the module
keeps the loss each ``training_step`` returned, and a reference callback reads the
gradient in ``on_before_optimizer_step`` (Lightning runs it after AMP unscaling and
before ``gradient_clip_val`` clipping) with ``torch.nn.utils.get_total_norm``, and the
learning rates the optimizer is about to use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pl = pytest.importorskip("lightning.pytorch")
import torch  # noqa: E402
from adapterkit import (  # noqa: E402
    ROOT,
    alert_ids,
    assert_phases_are_never_stalls,
    blocked_import,
    check,
    events,
    records,
)
from dltop.probe import Probe  # noqa: E402
from dltop.probe.lightning import DltopCallback  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

torch.set_num_threads(1)
CLIP = 0.01


def _data(n: int, seed: int = 0, features: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, x @ torch.randn(features, 1, generator=g) + 0.1)


class Tiny(pl.LightningModule):
    """Two layers, two param groups with a per-step schedule; keeps what it returned."""

    def __init__(
        self, lr: float = 0.05, fail_at: int | None = None, val_sleep: float = 0.0
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.lr, self.fail_at, self.val_sleep = lr, fail_at, val_sleep
        self.raw: list[float] = []  # each training_step's loss, as returned
        self.save_sleep = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and self.global_step == self.fail_at:
            raise ValueError("shapes do not match: (8, 3) vs (8, 1)")
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.raw.append(float(loss.detach()))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.val_sleep)
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        time.sleep(self.save_sleep)  # a slow disk, inside trainer.save_checkpoint

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(
            [
                {"params": self.net[0].parameters(), "lr": self.lr},
                {"params": self.net[2].parameters(), "lr": self.lr / 2},
            ]
        )
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Reference(pl.Callback):
    def __init__(self) -> None:
        self.norms: list[float] = []
        self.lrs: list[list[float]] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.nn.utils.get_total_norm(grads)))
        self.lrs.append([g["lr"] for g in optimizer.param_groups])


def _trainer(callbacks: list[Any], **kw: Any) -> pl.Trainer:
    args: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    return pl.Trainer(callbacks=callbacks, **(args | kw))


@pytest.mark.parametrize(
    ("precision", "accum"), [("32-true", 1), ("32-true", 4), ("bf16-mixed", 4)]
)
def test_each_step_has_its_loss_pre_clip_norm_and_lr(
    tmp_path: Path, precision: str, accum: int
) -> None:
    log = tmp_path / "run.jsonl"
    model, ref = Tiny(), Reference()
    cb = DltopCallback(path=log, socket=False, system=False)
    # 10 batches an epoch: with accumulation 4 the third step of each epoch has only 2
    train = DataLoader(_data(80), batch_size=8)
    trainer = _trainer(
        [ref, cb],
        max_steps=5,
        accumulate_grad_batches=accum,
        gradient_clip_val=CLIP,
        precision=precision,
        val_check_interval=4,
        limit_val_batches=2,
    )
    trainer.fit(model, train, DataLoader(_data(16, seed=1), batch_size=8))

    steps = records(log, "step")
    assert [s["step"] for s in steps] == list(range(5))
    assert [s["grad_norm"] for s in steps] == pytest.approx(ref.norms, rel=1e-5)
    assert min(ref.norms) > 2 * CLIP  # the clip really happened, after the probe's reading
    assert [s["lrs"] for s in steps] == [pytest.approx(lrs) for lrs in ref.lrs]
    assert [s["lr"] for s in steps] == pytest.approx([lrs[0] for lrs in ref.lrs])
    sizes = [accum, accum, 10 - 2 * accum] if accum == 4 else [1] * 5  # micro-batches per step
    per_step, i = [], 0
    for k in (sizes * 2)[:5]:
        per_step.append(sum(model.raw[i : i + k]) / k)
        i += k
    assert [s["loss"] for s in steps] == pytest.approx(per_step, rel=1e-5)
    assert [s["batch_size"] for s in steps] == [8 * k for k in (sizes * 2)[:5]]
    assert all(s["data_time"] >= 0 and s["data_time"] < s["step_time"] for s in steps)
    # the step split from the last micro-batch's start (the adapter marks it) to its gradients
    assert all(0 <= s["forward_time"] < s["compute_time"] for s in steps)
    assert all(0 <= s["backward_time"] < s["compute_time"] for s in steps)

    evals = records(log, "eval")
    assert evals and all(set(e) >= {"loss", "step"} for e in evals)
    phases = events(log, "phase")
    assert [(p["name"], p["state"]) for p in phases] == [("eval", "begin"), ("eval", "end")] * len(
        evals
    )
    assert events(log, "exit")[0]["status"] == "ok"
    # the trainer's settings: the real optimizer behind the lr snapshot, its clip, precision
    config = events(log, "config")[-1]  # all of it by the first step (a slow start: two)
    assert len(events(log, "config")) <= 2
    assert config["optimizer"]["class"] == "SGD"
    assert [g["lr"] for g in config["optimizer"]["groups"]] == [0.05, 0.025]  # initial lrs
    assert config["clip"] == {"max_norm": CLIP, "norm_type": 2.0}
    assert config["precision"] == precision
    assert config["amp"] == {"dtype": "bfloat16" if "bf16" in precision else None, "scaler": False}


def test_the_config_event_says_value_clipping_or_none(tmp_path: Path) -> None:
    for algorithm, clip in (("value", {"max_value": 0.5}), (None, None)):
        log = tmp_path / f"{algorithm}.jsonl"
        cb = DltopCallback(path=log, socket=False, system=False)
        kw: dict[str, Any] = {"gradient_clip_val": 0.5, "gradient_clip_algorithm": "value"}
        trainer = _trainer([cb], max_steps=2, **(kw if algorithm else {}))
        trainer.fit(Tiny(), DataLoader(_data(16), batch_size=8))
        config = events(log, "config")[-1]
        assert config.get("clip") == clip and config["precision"] == "32-true"


class SlowData(TensorDataset):
    """Sample 20 (the first of step 2's batch) takes long to load."""

    def __init__(self, marks: dict[str, list[float]]) -> None:
        super().__init__(*_data(64).tensors)
        self.marks = marks

    def __getitem__(self, i: int) -> Any:
        if i == 20 and not self.marks["data"]:
            _blocked(self.marks["data"])
        return super().__getitem__(i)


class SlowStep(Tiny):
    """Step 4's training_step takes long (its forward, inside the optimizer's closure)."""

    def __init__(self, marks: dict[str, list[float]]) -> None:
        super().__init__()
        self.marks = marks

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 4 and not self.marks["forward"]:
            _blocked(self.marks["forward"])
        return super().training_step(batch, batch_idx)


def _blocked(marks: list[float]) -> None:
    marks.append(time.time())
    time.sleep(0.6)
    marks.append(time.time())


def test_heartbeats_say_where_the_lightning_loop_is(tmp_path: Path) -> None:
    """Lightning fetches the batch itself and runs the forward inside the optimizer's
    closure: the adapter's marks say ``data_wait`` while the fetch blocks, ``forward``
    while ``training_step`` does, each since the moment it began."""
    log = tmp_path / "run.jsonl"
    marks: dict[str, list[float]] = {"data": [], "forward": []}
    cb = DltopCallback(path=log, socket=False, system=False, heartbeat_every=0.05)
    _trainer([cb], max_steps=6).fit(SlowStep(marks), DataLoader(SlowData(marks), batch_size=10))
    beats = records(log, "heartbeat")
    for key, place in (("data", "data_wait"), ("forward", "forward")):
        begin, end = marks[key]
        during = [b for b in beats if begin < b["t"] < end - 0.05]
        assert len(during) >= 3 and {b["where"] for b in during} == {place}, key
        assert begin - 0.3 < during[0]["where_since"] <= begin
    assert not events(log, "warning")


def _slow_eval_and_save(log: Path, tmp_path: Path) -> None:
    """110 quick steps (the stall line is a multiple of their p95), two 0.6 s validations
    and one 0.6 s checkpoint save."""
    model = Tiny(val_sleep=0.6)
    model.save_sleep = 0.6
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / log.stem, every_n_train_steps=75)
    trainer = _trainer(
        [DltopCallback(path=log, socket=False, system=False), saver],
        max_steps=110,
        enable_checkpointing=True,
        check_val_every_n_epoch=5,
        limit_val_batches=1,
    )
    trainer.fit(model, DataLoader(_data(80), batch_size=8), DataLoader(_data(8), batch_size=8))


@pytest.mark.slow
def test_validation_and_checkpointing_are_phases_never_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_phases_are_never_stalls(_slow_eval_and_save, tmp_path, monkeypatch)


def test_an_exception_in_training_step_is_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    trainer = _trainer([DltopCallback(path=log, socket=False, system=False)], max_steps=10)
    with pytest.raises(ValueError, match="shapes do not match"):
        trainer.fit(Tiny(fail_at=3), DataLoader(_data(80), batch_size=8))
    (exc,) = events(log, "exception")
    assert exc["exc_type"] == "ValueError" and exc["step"] == 2
    assert events(log, "exit")[0]["status"] == "exception"
    report = check(log)
    assert report["status"] == "crashed" and "crash" in alert_ids(report)


def _plain_loop(path: Path, lr: float, steps: int) -> None:
    """The same training as ``Tiny`` without the lr schedule, written as a plain loop."""
    model = Tiny(lr=lr)
    opt = model.configure_optimizers()["optimizer"]
    loader = DataLoader(_data(80), batch_size=8)
    with Probe(path=path, model=model, optimizer=opt, socket=False, system=False) as probe:
        done = 0
        while done < steps:
            for x, y in probe.loader(loader):
                loss = nn.functional.mse_loss(model.net(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                done += 1
                if done == steps:
                    break


class ConstantLr(Tiny):
    def configure_optimizers(self) -> Any:
        return super().configure_optimizers()["optimizer"]


def test_a_too_high_lr_raises_the_alerts_the_plain_loop_raises(tmp_path: Path) -> None:
    lr, steps = 0.8, 120
    plain, ours = tmp_path / "plain.jsonl", tmp_path / "lightning.jsonl"
    _plain_loop(plain, lr, steps)
    trainer = _trainer([DltopCallback(path=ours, socket=False, system=False)], max_steps=steps)
    trainer.fit(ConstantLr(lr=lr), DataLoader(_data(80), batch_size=8))
    want, got = check(plain), check(ours)
    assert alert_ids(want), "the lr is meant to be too high: the plain loop must raise alerts"
    assert alert_ids(got) == alert_ids(want)
    first = {a["id"]: a["step"] for a in want["alerts"]}
    assert {a["id"]: a["step"] for a in got["alerts"]} == first


def test_keyword_arguments_are_the_probes_and_bad_ones_say_so() -> None:
    with pytest.raises(TypeError, match="layer_every.*layers_every"):
        DltopCallback(layer_every=5)
    with pytest.raises(TypeError, match="takes the model and optimizer from the trainer"):
        DltopCallback(model=nn.Linear(1, 1))
    with pytest.raises(ValueError, match="nowhere to write"):
        DltopCallback(path=None, socket=False)


def test_without_lightning_the_import_error_names_the_extra() -> None:
    out = blocked_import("dltop.probe.lightning", "lightning").stdout.splitlines()
    assert out[0].startswith("ImportError ") and "pip install 'dltop-monitor[lightning]'" in out[0]
    assert out[1] == "cause None True"  # one error, not a chain of two tracebacks


RANK_SCRIPT = """
import json, os, sys
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader
sys.path[:0] = {paths!r}  # this test's folder (the module) and tests/ (its kits)
from test_adapter_lightning import Reference, Tiny, _data
from dltop.probe.lightning import DltopCallback

if __name__ == "__main__":
    torch.set_num_threads(1)
    ref = Reference()
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=4, accumulate_grad_batches=2,
        gradient_clip_val={clip}, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[ref, DltopCallback(socket=False, system=False)],
    )
    trainer.fit(Tiny(), DataLoader(_data(64), batch_size=4))
    with open(f"ref{{trainer.global_rank}}.json", "w") as f:
        json.dump(ref.norms, f)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_on_two_cpu_processes_writes_one_log_per_rank(tmp_path: Path) -> None:
    script = tmp_path / "ddp_run.py"
    paths = [str(Path(__file__).resolve().parent), str(ROOT / "tests")]
    script.write_text(RANK_SCRIPT.format(paths=paths, clip=CLIP))
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=170,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = (tmp_path / "dltop-runs").iterdir()  # one folder: the ranks agreed on it
    assert sorted(p.name for p in job.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    norms = []
    for rank in (0, 1):
        log = job / f"rank{rank}.jsonl"
        (meta,) = records(log, "meta")
        assert (meta["rank"], meta["world_size"]) == (rank, 2)
        assert meta["run_id"] == f"{job.name}.rank{rank}"
        ref = json.loads((tmp_path / f"ref{rank}.json").read_text())
        got = [s["grad_norm"] for s in records(log, "step")]
        assert got == pytest.approx(ref, rel=1e-5) and len(got) == 4
        norms.append(got)
    assert norms[0] == pytest.approx(norms[1], rel=1e-6)  # the all-reduced gradient
    assert check(job)["status"] == "finished"


def test_a_failure_of_the_adapter_never_stops_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, loss: Any, batch: Any = None) -> None:
        raise RuntimeError("adapter bug")

    monkeypatch.setattr("dltop.probe.adapter.StepState.add", broken)
    log = tmp_path / "run.jsonl"
    trainer = _trainer([DltopCallback(path=log, socket=False, system=False)], max_steps=6)
    trainer.fit(Tiny(), DataLoader(_data(80), batch_size=8))
    assert trainer.global_step == 6  # the training went on
    warnings = [w["message"] for w in events(log, "warning")]
    assert len(warnings) == 1 and "adapter bug" in warnings[0]  # said once, on record
    assert events(log, "exit")[0]["status"] == "ok"
