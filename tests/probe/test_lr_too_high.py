"""The commonest failure of all, an lr far too high from step 0, through the framework
adapters with the real libraries: a Lightning run (SGD at lr 40, clipping on: the loss
jumps 3.5 -> ~90 and bounces high for the rest of the run) and a Hugging Face Trainer
run (lr 5.0 on a 2-class task) end in a warning or critical that names the lr, and so
does the verdict `dltop check` starts with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from adapterkit import check
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _names_the_lr(report: dict[str, Any], lr: float) -> None:
    loud = [a for a in report["alerts"] if a["severity"] in ("warning", "critical")]
    named = [a for a in loud if a["id"] == "divergence" and "lr" in a["message"]]
    assert named, [(a["id"], a["severity"], a["message"]) for a in report["alerts"]]
    assert named[0]["evidence"]["lr"] > 0
    assert "lr" in report["verdict"] and "lower the" in report["verdict"], report["verdict"]


def test_a_lightning_run_at_lr_40_is_named_with_its_lr(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from dltop.probe.lightning import DltopCallback

    torch.manual_seed(0)
    x = torch.randn(2000, 32)
    y = (x @ torch.randn(32, 32)).argmax(1)  # 32 classes: the first loss is ~3.5

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

        def training_step(self, batch: Any, i: int) -> torch.Tensor:
            xb, yb = batch
            return nn.functional.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=40.0)

    log = tmp_path / "lightning.jsonl"
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=120, gradient_clip_val=1.0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[DltopCallback(path=log, socket=False, system=False)],
    )  # fmt: skip
    trainer.fit(Net(), DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    _names_the_lr(check(log), 40.0)


def test_a_hugging_face_trainer_at_lr_5_is_named_with_its_lr(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from dltop.probe.hf import DltopCallback

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=2,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (608, 16), generator=g)
    data = [{"input_ids": row, "labels": (row[0] > 50).long()} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, learning_rate=5.0,
        max_steps=38, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True,
    )  # fmt: skip
    log = tmp_path / "hf.jsonl"
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data,
        callbacks=[DltopCallback(path=log, socket=False, system=False)],
    )  # fmt: skip
    trainer.train()
    _names_the_lr(check(log), 5.0)
