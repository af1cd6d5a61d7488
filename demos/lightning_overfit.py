"""lightning_overfit: the ``overfit`` demo written for PyTorch Lightning.

A ``LightningModule`` with ~280 k parameters trains on 128 samples, a quarter of them
with wrong labels, and validates on 2048 held-out samples after every epoch (4 steps, 80 epochs).
Training loss falls towards zero as the network memorizes the noise; the validation
loss bottoms out early and climbs.

The run uses the Lightning adapter, one line in the Trainer's callbacks:
``callbacks=[DltopCallback(path=...)]``. It records every optimizer step (loss, grad norm
before clipping, lr), the ``val_loss`` the module logs as ``eval`` records, and each
validation as a phase. dltop raises ``overfitting``; its checklist suggests early stopping
at the best eval step, more data, weight decay or a smaller model.

    python -m dltop.demos.lightning_overfit [--out PATH] [--device cpu|cuda] [--fast]
"""

from typing import Any

import torch
from dltop.demos._common import noisy_teacher_data, pacer, parse_args, setup
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 80  # 4 steps each: 320 steps


def main() -> None:
    args = parse_args("lightning_overfit")
    setup(args)
    print(
        "lightning_overfit: a 280k-parameter LightningModule on 128 noisy samples memorizes them, "
        "so validation loss climbs."
    )
    import lightning.pytorch as pl
    from dltop.probe.lightning import DltopCallback

    x_train, y_train, x_val, y_val = noisy_teacher_data()  # the overfit demo's data
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(x_val, y_val), batch_size=2048)
    pace = pacer(args)

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            xb, yb = batch
            return nn.functional.cross_entropy(self.net(xb), yb)

        def on_train_batch_end(self, *a: Any) -> None:
            pace()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            xb, yb = batch
            logits = self.net(xb)
            self.log("val_loss", nn.functional.cross_entropy(logits, yb))
            self.log("val_acc", (logits.argmax(dim=1) == yb).float().mean())

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=3e-4)  # no weight decay

    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[DltopCallback(path=args.out)],  # the one line
    )
    trainer.fit(Classifier(), train, val)
    print(f"lightning_overfit: done, log in {args.out}")


if __name__ == "__main__":
    main()
