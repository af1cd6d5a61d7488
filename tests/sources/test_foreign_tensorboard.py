"""TensorBoard event files: REAL ones written by ``torch.utils.tensorboard.SummaryWriter``
are read by ``dltop check`` (a file or its folder), with wall time as ``t``; without the
tensorboard package the answer is one line naming the extra; damaged files are counted."""

from __future__ import annotations

import math
import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.sources import foreign
from dltop.tui.core.sources.foreign import tboard, tfrecord
from foreignkit import check_json, dltop, one_line_error

pytest.importorskip("tensorboard")
SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter


def _write(folder: Path, tags: dict[str, Any], steps: range) -> Path:
    w = SummaryWriter(log_dir=str(folder))
    for s in steps:
        for tag, fn in tags.items():
            v = fn(s)
            if v is not None:
                w.add_scalar(tag, v, s)
    w.add_text("note", "text is not a scalar", 0)
    w.close()
    (f,) = folder.glob("events.out.tfevents.*")
    return f


@pytest.fixture
def hf_style(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "runs" / "exp1",
        {
            "train/loss": lambda s: 3.0 - s / 100,
            "train/grad_norm": lambda s: 1.0 + (s % 3) / 10,
            "train/learning_rate": lambda s: 1e-3,
            "eval/loss": lambda s: 2.5 if s % 20 == 0 else None,
            "eval/accuracy": lambda s: 0.5 if s % 20 == 0 else None,
        },
        range(0, 100, 2),
    )


def test_check_reads_summary_writer_events(hf_style: Path, capsys: Any) -> None:
    before = time.time() - 60
    for source in (hf_style, hf_style.parent, hf_style.parent.parent):
        assert foreign.detect(str(source)) == foreign.TENSORBOARD
        code, out = check_json(capsys, source)
        assert code in (0, 1, 2) and out["steps"] == 50
        log = foreign.load(str(source))
        steps = [r for r in log.records if r["kind"] == "step"]
        assert [r["step"] for r in steps] == list(range(0, 100, 2))
        assert steps[1]["loss"] == pytest.approx(2.98) and steps[1]["lr"] == pytest.approx(1e-3)
        assert all(before < r["t"] < time.time() + 1 for r in steps), "wall time as t"
        evals = [r for r in log.records if r["kind"] == "eval"]
        assert [(r["step"], r["loss"], r["accuracy"]) for r in evals] == [
            (s, 2.5, 0.5) for s in range(0, 100, 20)
        ]


def test_lightning_and_keras_style_tags(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "pl",
        {
            "train_loss_step": lambda s: 1.0,
            "train_loss_epoch": lambda s: 0.9 if s % 10 == 9 else None,
            "lr-Adam": lambda s: 0.01,
            "val_loss": lambda s: 0.8 if s % 10 == 9 else None,
        },
        range(30),
    )
    log = foreign.load(str(f))
    assert sum(1 for r in log.records if r["kind"] == "step" and "loss" in r) == 30
    assert [r["step"] for r in log.records if r["kind"] == "eval"] == [9, 19, 29]
    # Keras: train/ and validation/ folders, the same tag
    _write(tmp_path / "keras" / "train", {"epoch_loss": lambda s: 1.0}, range(5))
    _write(tmp_path / "keras" / "validation", {"epoch_loss": lambda s: 2.0}, range(5))
    log = foreign.load(str(tmp_path / "keras"))
    assert [r["loss"] for r in log.records if r["kind"] == "eval"] == [2.0] * 5
    assert [r["loss"] for r in log.records if r["kind"] == "step"] == [1.0] * 5


def test_without_tensorboard_one_line_names_the_extra(hf_style: Path) -> None:
    hide = "sys.modules['tensorboard'] = None"
    for args in (
        ("check", str(hf_style)),
        ("check", str(hf_style.parent), "--json"),
        (str(hf_style),),
    ):
        line = one_line_error(dltop(*args, pre=hide))
        assert line == f"dltop: {tboard.MISSING}"


def test_damaged_event_files(hf_style: Path, tmp_path: Path, capsys: Any) -> None:
    data = hf_style.read_bytes()
    # a flipped byte inside a late record's data: its checksum fails, the loader stops there
    bad = tmp_path / "bad" / hf_style.name
    bad.parent.mkdir()
    off = n = 0
    while off < len(data) * 3 // 4:  # the start of a record three quarters in
        off += 12 + struct.unpack("<Q", data[off : off + 8])[0] + 4
        n += 1
    cut = off + 14  # inside its data
    bad.write_bytes(data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1 :])
    log = foreign.load(str(bad))
    assert (
        log.records and log.skipped > 0 and any("damaged record after" in n for n in log.notes)
    ), log.notes
    code, out = check_json(capsys, bad)
    assert code in (0, 1, 2) and 0 < out["steps"] < 50
    # cut in the middle of a record: what came before is read, the cut is said
    half = tmp_path / "half" / hf_style.name
    half.parent.mkdir()
    half.write_bytes(data[: len(data) // 2])
    log = foreign.load(str(half))
    assert 0 < log.steps < 50 and any("cut" in n for n in log.notes)
    # a bad header checksum on the first record: not recognised, the usual one-line answer
    junk = tmp_path / "junk" / hf_style.name
    junk.parent.mkdir()
    junk.write_bytes(data[:8] + b"\0\0\0\0" + data[12:])
    assert foreign.detect(str(junk)) is None
    assert "not a dltop log" in one_line_error(dltop("check", str(junk)))
    # framing that holds around garbage data: no scalars, one line
    payload = b"\x08" * 40
    rec = struct.pack("<Q", len(payload))
    rec += struct.pack("<I", tfrecord.masked_crc32c(rec)) + payload
    rec += struct.pack("<I", tfrecord.masked_crc32c(payload))
    garbage = tmp_path / "garbage.tfevents"
    garbage.write_bytes(rec * 3)
    assert foreign.detect(str(garbage)) == foreign.TENSORBOARD
    assert "no scalars" in one_line_error(dltop("check", str(garbage)))
    # found by a folder's search, deep below it: the error says which file was read
    deep = tmp_path / "project" / "runs" / "old"
    deep.mkdir(parents=True)
    (deep / "garbage.tfevents").write_bytes(rec * 3)
    line = one_line_error(dltop("check", str(tmp_path / "project")))
    assert "no scalars" in line and os.path.join("runs", "old", "garbage.tfevents") in line


def test_crc32c_matches_tensorboard() -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    for blob in (b"", b"12345678", bytes(range(256)), b"\xff" * 8):
        assert tfrecord.masked_crc32c(blob) == masked_crc32c(blob)


def test_folder_search_is_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    deep = tmp_path
    for i in range(8):
        deep = deep / f"d{i}"
    f = _write(deep, {"loss": lambda s: 1.0}, range(3))
    assert foreign.detect(str(tmp_path)) is None  # deeper than the search goes
    assert foreign.detect(str(f.parent.parent)) == foreign.TENSORBOARD
    monkeypatch.setattr(tboard, "MAX_EVENT_FILES", 2)
    for i in range(4):
        _write(tmp_path / "many" / f"r{i}", {"loss": lambda s, i=i: float(i)}, range(3))
    log = foreign.load(str(tmp_path / "many"))
    assert log.records and len(log.files) == 2 and any("searched only part" in n for n in log.notes)
    assert not math.isnan(log.records[1]["loss"])


def test_event_and_value_budget(tmp_path: Path, monkeypatch: Any) -> None:
    """Events and values are both bounded (one event may hold many values), and a cut at
    the budget is a note, not reported as damage."""
    from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: PLC0415

    monkeypatch.setattr(tboard, "MAX_ENTRIES", 10)
    f = _write(tmp_path / "many_events", {"loss": lambda s: 1.0}, range(30))
    log = foreign.load(str(f))
    assert sum(r["kind"] == "step" for r in log.records) < 10
    assert any("only the first 10 events or values" in n for n in log.notes)
    assert not any("damaged" in n for n in log.notes), log.notes
    w = SummaryWriter(log_dir=str(tmp_path / "wide"))
    values = [Summary.Value(tag=f"loss_{i}", simple_value=1.0) for i in range(50)]
    w._get_file_writer().add_summary(Summary(value=values), 0)
    w.close()
    log = foreign.load(str(tmp_path / "wide"))
    assert log.records and any("only the first 10 events or values" in n for n in log.notes)


def test_scalars_with_no_usable_step_are_said_to_be_left_out(tmp_path: Path) -> None:
    """Steps past dltop's range: "no scalars in the event file" sent the user looking for
    a file without scalars; the line now says they were there and left out, and why."""
    w = SummaryWriter(log_dir=str(tmp_path))
    for i in range(5):
        w.add_scalar("train/loss", 1.0 + i, global_step=2**62 + i)
    w.close()
    line = one_line_error(dltop("check", str(tmp_path)))
    assert "no scalars" in line and "5 scalar values left out: no step in range" in line
