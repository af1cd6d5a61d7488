"""PyTorch Lightning logs: a REAL ``CSVLogger`` writes ``metrics.csv`` from a tiny
``LightningModule`` with a validation loop; ``dltop check`` reads training and validation
loss from its sparse rows. Odd headers and corrupt files end in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.present.panels import PANEL_BY_KEY, store_chart
from dltop.tui.core.present.view_model import ViewState
from dltop.tui.core.sources import foreign
from dltop.tui.core.sources.foreign import names
from dltop.tui.core.store.runstore import Store
from foreignkit import check_json, dltop, one_line_error

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two epochs of 10 batches, logged every 2 steps (step and epoch values), validated
    each epoch: the version folder CSVLogger wrote."""
    root = tmp_path_factory.mktemp("pl")
    torch.manual_seed(0)

    class Tiny(L.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, _i: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, _i: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def loader(n: int) -> Any:
        x = torch.randn(n, 8)
        ds = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return torch.utils.data.DataLoader(ds, batch_size=4)

    logger = L.loggers.CSVLogger(str(root), name="lightning_logs")
    trainer = L.Trainer(
        max_epochs=2, log_every_n_steps=2, logger=logger, accelerator="cpu", devices=1,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Tiny(), loader(40), loader(8))
    return Path(logger.log_dir)


def test_check_reads_train_and_val_loss_from_metrics_csv(
    csv_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = csv_run / "metrics.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert {"step", "train_loss_step", "train_loss_epoch", "val_loss"} <= set(rows[0])
    train = [(int(r["step"]), float(r["train_loss_step"])) for r in rows if r["train_loss_step"]]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    assert len(train) >= 8 and len(val) == 2
    for source in (path, csv_run):
        assert foreign.detect(str(source)) == foreign.LIGHTNING
        code, out = check_json(capsys, source)
        assert code in (0, 1, 2) and out["steps"] == len(train)
        log = foreign.load(str(source))
        steps = [(r["step"], r["loss"]) for r in log.records if r["kind"] == "step" and "loss" in r]
        assert steps == train, "the per-step column, not the epoch mean"
        evals = [(r["step"], r["loss"]) for r in log.records if r["kind"] == "eval"]
        assert evals == val
        assert "train_loss_step" in log.notes[0]


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        ({"train_loss_step": 50, "train_loss_epoch": 5, "val_loss": 5}, "train_loss_step"),
        ({"train_loss_epoch": 5, "val_loss": 5}, "train_loss_epoch"),
        ({"loss": 40, "train_loss": 50}, "loss"),
        ({"my_loss": 3, "other_loss": 30, "valid_loss": 3}, "other_loss"),
        ({"Loss/train": 10, "Loss/val": 10}, "Loss/train"),
        ({"val/rmse_loss": 10, "train/rmse_loss": 100}, "train/rmse_loss"),
    ],
)
def test_the_training_loss_column_is_chosen_by_a_table(counts: dict[str, int], want: str) -> None:
    chosen = names.choose(counts)
    assert [n for n, r in chosen.items() if r == names.TRAIN_LOSS] == [want]


def test_sparse_odd_csv(tmp_path: Path, capsys: Any) -> None:
    p = tmp_path / "metrics.csv"
    lines = ["epoch,step,loss,val/acc,lr-Adam,valid_loss"]
    for s in range(0, 40):
        lines.append(f"0,{s},{2.0 - s / 100},,0.01,")
        if s % 10 == 9:
            lines.append(f"0,{s},,0.5,,{1.5}")
    lines += ["0,notastep,1.0,,,", "0,41,abc,,,", "0,42,1.0,,,,extra,cells", "0,43"]
    p.write_text("\n".join(lines) + "\n")
    log = foreign.load(str(p))
    steps = [r for r in log.records if r["kind"] == "step" and "loss" in r]
    assert len(steps) == 41 and steps[0]["lr"] == 0.01
    evals = [r for r in log.records if r["kind"] == "eval"]
    assert len(evals) == 4 and evals[0] == {"kind": "eval", "step": 9, "acc": 0.5, "loss": 1.5}
    assert log.skipped == 2
    code, out = check_json(capsys, p)
    assert code in (0, 1, 2) and out["skipped_lines"] == 2


def test_corrupt_csvs_are_one_line(tmp_path: Path) -> None:
    blob = tmp_path / "metrics.csv"
    blob.write_bytes(b"step,train_loss\n1,2.0\n" + bytes(range(256)) * 4 + b"\n")
    assert "binary" in one_line_error(dltop("check", str(blob)))
    huge = tmp_path / "huge" / "metrics.csv"
    huge.parent.mkdir()
    huge.write_text('step,train_loss\n1,"' + "x" * 200_000 + '"\n')
    assert "corrupt metrics.csv" in one_line_error(dltop("check", str(huge)))
    # among good rows, a damaged line costs itself, counted: not the file, not the rest
    for name, bad in (("long", '1,"' + "x" * 200_000 + '"'), ("quote", '1,"2.0')):
        p = tmp_path / name / "metrics.csv"
        p.parent.mkdir()
        p.write_text("step,train_loss\n" + bad + "\n" + "".join(f"{s},2.0\n" for s in range(2, 51)))
        done = dltop("check", str(p), "--json")
        out = json.loads(done.stdout)
        assert out["steps"] == 49 + (name == "quote"), (name, out)
        assert out["skipped_lines"] == (name == "long"), (name, out)
    noloss = tmp_path / "noloss.csv"
    noloss.write_text("step,acc\n1,0.5\n")
    assert "not a dltop log" in one_line_error(dltop("check", str(noloss)))


def test_hostile_column_names_reach_the_terminal_escaped(tmp_path: Path) -> None:
    p = tmp_path / "metrics.csv"
    evil = "\x1b]0;pwned\x07loss\u202e"
    p.write_text(f"step,{evil}\n" + "".join(f"{s},{1.0 + s % 2}\n" for s in range(20)))
    done = dltop("check", str(p))
    assert done.returncode in (0, 1, 2), done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout and "\x07" not in done.stdout
    assert "note:" in done.stdout and "training loss from column" in done.stdout


def test_panels_of_another_tools_log_say_what_it_lacks(tmp_path: Path) -> None:
    """A metrics.csv never had a grad norm or step timings: its empty panels say so
    rather than give the probe's hints (``pass model=``), which a CSV cannot take; a
    dltop log keeps the hints."""
    p = tmp_path / "metrics.csv"
    p.write_text("epoch,step,train_loss\n" + "".join(f"0,{s},{2.0 - s / 100}\n" for s in range(30)))
    store = Store()
    store.ingest(foreign.load(str(p)).records)
    empty = {k: store_chart(store, k, ViewState(), 40).empty_text for k in PANEL_BY_KEY}
    assert empty["grad_norm"] == "no grad norm in this Lightning log"
    assert empty["step_time"] == "no step timings in this Lightning log"
    assert empty["memory"] == "no memory readings in this Lightning log"
    assert not any("pass " in text for text in empty.values())
    ours = Store()
    ours.ingest([{"kind": "meta", "v": 1, "run_id": "r"}, {"kind": "step", "step": 0, "loss": 1.0}])
    assert store_chart(ours, "grad_norm", ViewState(), 40).empty_text.startswith(
        "no grad norm (pass model="
    )


def test_values_repeating_a_step_are_said_to_be_left_out(tmp_path: Path) -> None:
    """Fifty rows at one step with different losses became one step and no word of the
    other 49; a value repeated unchanged (an `epoch` column on every row) loses nothing."""
    p = tmp_path / "metrics.csv"
    rows = "".join(f"0,5,{2.0 + i / 100}\n" for i in range(50))
    rows += "".join(f"0,{s},1.5\n0,{s},1.5\n" for s in range(6, 30))
    p.write_text("epoch,step,train_loss\n" + rows)
    done = dltop("check", str(p))
    assert "warning: 49 values left out" in done.stdout, done.stdout
