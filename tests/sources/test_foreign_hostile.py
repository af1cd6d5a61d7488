"""Other tools' logs made hostile: bytes that are no UTF-8, numbers out of range, "NaN" as
text, a file without newlines, one wild step, odd TFRecord framing. Each case once ended
in a traceback, a refusal, unbounded memory or silently lost values."""

from __future__ import annotations

import math
import os
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.sources import foreign
from dltop.tui.core.sources.foreign import common, hf
from foreignkit import check_json


def _state(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _steps(path: Path) -> list[dict[str, Any]]:
    return [r for r in foreign.load(str(path)).records if r["kind"] == "step"]


@pytest.mark.parametrize(
    "text",
    [
        b'{"log_history": [{"loss": 1.0, "step": 1, "note": "\xff"}, {"loss": 2.0, "step": 2}]}',
        b'{"global_step": "\xff", "log_history": [{"loss": 1.0, "step": 1}]}',
        b'{"stateful_callbacks": {"\xfe": "\xff"}, "log_history": [{"loss": 1.0, "step": 1}]}',
    ],
)
def test_bytes_that_are_no_utf8_are_no_traceback(
    tmp_path: Path, capsys: Any, monkeypatch: Any, text: bytes
) -> None:
    path = _state(tmp_path, text)
    assert [r["loss"] for r in _steps(path)][:1] == [1.0]
    code, out = check_json(capsys, path)  # UnicodeDecodeError went up to the command line
    assert code == 0 and out["steps"] >= 1
    # over the whole-file fallback's limit (64 MiB), the streaming read says it in one line
    monkeypatch.setattr(common, "MAX_FILE_BYTES", 0)
    try:
        steps = _steps(path)
    except foreign.SourceError as exc:
        assert "trainer_state.json" in str(exc)
    else:
        assert steps[0]["loss"] == 1.0


def test_numbers_out_of_range_are_infinities_not_lost_entries(tmp_path: Path) -> None:
    """docs/foreign-logs.md: a JSON integer of thousands of digits is ±infinity, and 1e999
    is what Python's json reads as infinity; msgspec called them out of range and the
    entry (its step, its other values) was dropped."""
    big = "1" + "0" * 5000
    path = _state(
        tmp_path,
        '{"log_history": [{"loss": 1e999, "grad_norm": 2.0, "step": 1}, '
        f'{{"loss": -1e999, "step": 2}}, {{"loss": {big}, "step": 3}}, '
        f'{{"loss": -{big}, "step": 4}}, {{"loss": 0.5, "step": 5}}]}}',
    )
    steps = _steps(path)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in steps] == [math.inf, -math.inf, math.inf, -math.inf, 0.5]
    assert steps[0]["grad_norm"] == 2.0


@pytest.mark.parametrize("key", ["global_step", "max_steps", "logging_steps", "eval_steps"])
def test_a_state_count_of_hundreds_of_digits_is_left_out(
    tmp_path: Path, capsys: Any, key: str
) -> None:
    """The state's own counts go into the meta when they are finite numbers; an integer
    past the float range made ``math.isfinite`` raise (a traceback in ``dltop check``)."""
    big = "9" * 400
    path = _state(
        tmp_path,
        f'{{"{key}": {big}, "log_history": [{{"loss": 1.0, "step": 1}}, {{"loss": 0.9, "step": 2}}]}}',
    )
    code, got = check_json(capsys, path)
    assert code in (0, 1), got
    meta = foreign.load(str(path)).records[0]
    assert key not in (meta.get("trainer_state") or {})


@pytest.mark.parametrize(
    "text",
    [
        '{"log_history": [{"loss": NaN, "step": 1, "note": "a: NaN, b"}, {"loss": 1, "step": 2}]}',
        '{"log_history": [{"loss": NaN, "step": 1, "x, NaN": 3}, {"loss": 1, "step": 2}]}',
        '{"log_history": [{"loss": NaN, "step": 1}, {"loss": 1, "step": 2, "s": "[Infinity]"}]}',
    ],
)
def test_nan_as_text_does_not_make_a_big_state_corrupt(
    tmp_path: Path, monkeypatch: Any, text: str
) -> None:
    """A bare NaN is quoted before msgspec parses the file; the quoting also hit "NaN" in a
    string, and the broken JSON fell back to the whole-file read, which a file over 64 MiB
    does not have: such a file was refused as corrupt."""
    monkeypatch.setattr(common, "MAX_FILE_BYTES", 0)  # as for a file over 64 MiB
    steps = _steps(_state(tmp_path, text))
    assert [r["step"] for r in steps] == [1, 2]
    assert math.isnan(steps[0]["loss"]) and steps[1]["loss"] == 1.0


def test_a_state_without_log_history_is_not_parsed_whole(tmp_path: Path) -> None:
    """To say "no log_history list", the whole file was decoded into Python objects: 1.5 GB
    for a 150 MB JSON object."""
    path = _state(
        tmp_path, '{"history": [' + ",".join(['{"loss": 1.5, "step": 3}'] * 200_000) + "]}"
    )
    tracemalloc.start()
    try:
        with pytest.raises(foreign.SourceError, match="no log_history list"):
            foreign.load(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * path.stat().st_size, peak  # its bytes, not its objects (~60 MB)


def test_a_bom_before_the_state_is_read(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark (a state saved by an editor) was "corrupt ... cut while being
    written?"; the Lightning reader already skips one."""
    path = _state(tmp_path, b'\xef\xbb\xbf{"log_history": [{"loss": 1.0, "step": 1}]}')
    assert [r["loss"] for r in _steps(path)] == [1.0]


def _peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_metrics_csv_without_newlines_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """Lines were read whole: a 1 GiB metrics.csv of NULs (a sparse or zeroed file) took
    2.1 GB and 14 s to be called binary data; one long line cost its length twice."""
    path = tmp_path / "metrics.csv"
    with path.open("wb") as f:
        f.truncate(64 << 20)

    def read() -> None:
        with pytest.raises(foreign.SourceError, match="binary data"):
            foreign.load(str(path))

    assert _peak(read) < 16 << 20

    path.write_bytes(b"step,train_loss\n1,1.0\n" + b"9" * (32 << 20) + b"\n2,0.5\n")
    log = foreign.load(str(path))
    got: list[dict[str, Any]] = []
    assert _peak(lambda: got.extend(log.records)) < 16 << 20
    assert [(r["step"], r["loss"]) for r in got if r["kind"] == "step"] == [(1, 1.0), (2, 0.5)]
    assert log.skipped == 1  # the long line, counted

    path.write_bytes(b"step,train_loss" + b",x" * (16 << 20) + b"\n1,1.0\n")
    with pytest.raises(foreign.SourceError, match="line 1"):
        foreign.load(str(path))


@pytest.mark.parametrize("wild", [999_999_999, -5])
def test_one_wild_step_does_not_drop_the_rest(tmp_path: Path, wild: int) -> None:
    """The merge window hands records on oldest first and counted any later value for a
    step at or below the highest step handed on as a repeat: one row with a wild step
    (999999999) in a 20 000-step metrics.csv dropped the 11 808 rows after the window."""
    rows = ["step,train_loss"]
    for s in range(20_000):
        rows.append(f"{s},1.0")
        if s == 10:
            rows.append(f"{wild},2.0")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(rows) + "\n")
    log = foreign.load(str(path))
    steps = [r["step"] for r in log.records if r["kind"] == "step"]
    assert sorted(steps) == sorted([*range(20_000), wild])
    assert not any("left out" in n for n in log.notes), log.notes


def test_a_value_later_than_the_window_is_still_a_repeat() -> None:
    """What the window promises (docs/foreign-logs.md) holds: a value for a step handed on
    long before is left out and counted, in order or not."""
    from dltop.tui.core.sources.foreign.common import Merger  # noqa: PLC0415

    m = Merger(window=64)
    out = []
    for s in [*range(500), 10**9, *range(500, 1000)]:
        m.put("step", s, "loss", 1.0)
        out += m.take()
    for s in (3, 499, 600):
        m.put("step", s, "grad_norm", 2.0)
    out += m.take(final=True)
    assert len(out) == 1001 and m.repeated == 3


def _record(data: bytes) -> bytes:
    from dltop.tui.core.sources.foreign.tfrecord import frame  # noqa: PLC0415

    return frame(data)


def _events(steps: range) -> list[bytes]:
    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    out = [
        _record(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
    ]
    for s in steps:
        e = event_pb2.Event(step=s, wall_time=1.7e9 + s)
        e.summary.value.add(tag="train/loss", simple_value=1.0)
        out.append(_record(e.SerializeToString()))
    return out


def test_a_zero_length_record_is_read_through(tmp_path: Path) -> None:
    """A record of length 0 is valid TFRecord framing (an empty Event: no summary); the walk
    stopped there, calling it "a record header with a bad checksum"."""
    events = _events(range(20))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join([*events[:11], _record(b""), *events[11:]]))
    log = foreign.load(str(path))
    assert [r["step"] for r in log.records if r["kind"] == "step"] == list(range(20))
    assert not any("stopped" in n for n in log.notes), log.notes


def test_a_record_too_long_is_said_as_such(tmp_path: Path) -> None:
    """A header whose checksum holds around a length of 2**60 was "a bad checksum"."""
    from dltop.tui.core.sources.foreign.tfrecord import masked_crc32c  # noqa: PLC0415

    head = struct.pack("<Q", 1 << 60)
    events = _events(range(5))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join([*events, head + struct.pack("<I", masked_crc32c(head)), b"x" * 8]))
    log = foreign.load(str(path))
    assert len([r for r in log.records if r["kind"] == "step"]) == 5
    (note,) = [n for n in log.notes if "stopped" in n]
    assert "checksum" not in note and str(1 << 60) in note, note


def test_tags_first_seen_after_the_preview_are_counted_and_said(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Roles are chosen from the first PREVIEW values and a tag first seen after them is
    left out (tboard.py) and was to be counted: it was neither counted nor said (an eval
    loss first logged after 200 000 values vanished without a word), and every such tag
    was kept in the counts to the end (memory grew with the tags, not the batch)."""
    from dltop.tui.core.sources.foreign import tboard  # noqa: PLC0415

    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    monkeypatch.setattr(tboard, "PREVIEW", 50)
    events = _events(range(60))
    for s in range(60, 70):
        e = event_pb2.Event(step=s, wall_time=1.7e9 + s)
        e.summary.value.add(tag="eval/loss", simple_value=2.0)
        e.summary.value.add(tag=f"late{s}", simple_value=3.0)
        events.append(_record(e.SerializeToString()))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(events))
    log = foreign.load(str(path))
    assert len([r for r in log.records if r["kind"] == "step"]) == 60
    (note,) = [n for n in log.notes if "first seen after" in n]
    assert note.startswith("warning: 20 values left out"), note


def test_the_end_of_training_after_the_preview_still_ends_the_run(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """train/train_runtime is logged once, at the very end: in a run of more than PREVIEW
    values it was first seen after the preview, had no role, and the run never read as
    finished."""
    from dltop.tui.core.sources.foreign import tboard  # noqa: PLC0415

    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    monkeypatch.setattr(tboard, "PREVIEW", 50)
    events = _events(range(60))
    e = event_pb2.Event(step=60, wall_time=1.7e9 + 60)
    e.summary.value.add(tag="train/train_runtime", simple_value=100.0)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join([*events, _record(e.SerializeToString())]))
    log = foreign.load(str(path))
    assert [r for r in log.records if r["kind"] == "event"] == [
        {"kind": "event", "type": "exit", "status": "ok", "step": 60, "t": 1.7e9 + 60}
    ]
    assert not any("first seen after" in n for n in log.notes), log.notes


def test_eval_metrics_named_like_the_records_own_fields(tmp_path: Path) -> None:
    """An eval metric's name without its prefix became a field of the eval record as it
    was: a Trainer's "eval_kind" overwrote the record's kind (the evaluation vanished),
    "eval_step" its step (a float), "eval_t" its time; a CSV's "val_t" became the time."""
    path = _state(
        tmp_path,
        '{"log_history": [{"loss": 1.0, "step": 1}, {"eval_kind": 1.0, "eval_step": 99, '
        '"eval_t": 5, "eval_": 3, "eval_loss": 2.0, "step": 1}]}',
    )
    (ev,) = [r for r in foreign.load(str(path)).records if r.get("kind") == "eval"]
    assert ev == {
        "kind": "eval", "step": 1, "loss": 2.0, "x/kind": 1.0, "x/step": 99, "x/t": 5, "x/": 3
    }  # fmt: skip

    csv = tmp_path / "metrics.csv"
    csv.write_text("step,train_loss,val_loss,val_t,val_kind\n1,1.0,,,\n1,,2.0,7.0,8.0\n")
    log = foreign.load(str(csv))
    (ev,) = [r for r in log.records if r.get("kind") == "eval"]
    assert ev == {"kind": "eval", "step": 1, "loss": 2.0, "x/t": 7.0, "x/kind": 8.0}
    assert log.skipped == 0 and not any("left out" in n for n in log.notes), log.notes


def test_half_precision_tensor_scalars_are_read(tmp_path: Path) -> None:
    """A 0-d float16 tensor (its bits in half_val, or its bytes in tensor_content), which
    TensorBoard reads, was counted as a value that could not be read."""
    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    tensor_pb2 = pytest.importorskip("tensorboard.compat.proto.tensor_pb2")
    events = _events(range(0))
    for s, tensor in enumerate(
        [
            tensor_pb2.TensorProto(dtype=19, half_val=[0x3C00]),  # 1.0
            tensor_pb2.TensorProto(dtype=19, tensor_content=struct.pack("<e", 0.5)),
            tensor_pb2.TensorProto(dtype=19, half_val=[0x7E00]),  # NaN: kept
        ]
    ):
        e = event_pb2.Event(step=s, wall_time=1.7e9 + s)
        v = e.summary.value.add(tag="train/loss")
        v.tensor.CopyFrom(tensor)
        v.metadata.plugin_data.plugin_name = "scalars"
        events.append(_record(e.SerializeToString()))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(events))
    log = foreign.load(str(path))
    losses = [r["loss"] for r in log.records if r["kind"] == "step"]
    assert losses[:2] == [1.0, 0.5] and math.isnan(losses[2]) and log.skipped == 0


def test_quoting_nan_stays_linear_on_hostile_quotes() -> None:
    """The string-aware quoting must not backtrack: a quote followed only by escaped
    quotes made a backtracking string pattern rescan the rest of the file from each one."""
    import time  # noqa: PLC0415

    for tail in (b'"' + b'\\"' * 200_000, b'"\\' * 200_000, b'"' * 200_001, b"N" * 400_000):
        data = b'{"log_history": [NaN, ' + tail
        start = time.perf_counter()
        out = hf._quoted(data)
        assert time.perf_counter() - start < 2.0
        assert out.startswith(b'{"log_history": ["NaN", ')


def test_a_state_cut_short_while_read_is_no_crash(tmp_path: Path) -> None:
    """The state was memory-mapped: cut short while its entries were being read (rewritten
    in place by the Trainer's save_state, or copied over), the next page read killed the
    process with SIGBUS, without a word. A state up to 64 MiB is now read into memory."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    path = _state(
        tmp_path,
        '{"log_history": ['
        + ",".join(f'{{"loss": 1.0, "step": {i}}}' for i in range(50_000))
        + "]}",
    )
    code = (
        "import os, sys\nfrom dltop.tui.core.sources import foreign\n"
        "log = foreign.load(sys.argv[1])\nos.truncate(sys.argv[1], 10)\n"
        "print(sum(len(b) for b in log.batches()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert done.stdout.strip() == "50001"


def test_a_known_header_length_with_a_wrong_sum_is_still_damage(tmp_path: Path) -> None:
    """The walk checks a header it has seen before only once (tfrecord.record_lists): a header
    of a length seen 30 times, with its checksum off by one, must still stop the walk."""
    from dltop.tui.core.sources.foreign import tfrecord  # noqa: PLC0415

    events = _events(range(40))
    bad = bytearray(events[31])
    bad[8] ^= 1  # the header's checksum, one bit off
    assert len(bad) == len(events[30])  # the same length as the records read before it
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join([*events[:31], bytes(bad), *events[32:]]))
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = tfrecord.Walk()
        read = [d for batch in tfrecord.record_lists(fd, walk, 1000) for d in batch]
    finally:
        os.close(fd)
    assert len(read) == walk.records == 31
    assert walk.damage == "a record header with a bad checksum"


def test_more_record_sizes_than_the_walk_remembers(tmp_path: Path) -> None:
    """Records of more distinct lengths than HEADERS_KEPT are all read, each checked."""
    from dltop.tui.core.sources.foreign import tfrecord  # noqa: PLC0415

    datas = [b"x" * n for n in range(tfrecord.HEADERS_KEPT + 50)]
    path = tmp_path / "records"
    path.write_bytes(b"".join(map(tfrecord.frame, datas)))
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = tfrecord.Walk()
        read = [d for batch in tfrecord.record_lists(fd, walk, len(datas) + 1) for d in batch]
    finally:
        os.close(fd)
    assert read == datas and walk.records == len(datas) and walk.damage is None
