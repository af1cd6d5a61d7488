"""The TFRecord walk and the event reader's short cuts against plain references.

Why: ``tfrecord.record_lists`` reads a file in chunks and checks each record where the
chunk holds it whole, and ``tbpoints.points_of`` reads an event whose bytes after the step
are those of one already read by a dict lookup (issue 31: a 1 M-step event file is 6 M
records). A record cut by a chunk's end, a damaged byte anywhere, a read limit, or an
event that differs from a known one in one byte must read exactly as the plain way does.
"""

from __future__ import annotations

import math
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.sources.foreign import tfrecord


def _reference(blob: bytes, limit: int) -> tuple[list[bytes], str | None]:
    """The walk as the format describes it, the whole file in memory."""
    out: list[bytes] = []
    at = 0
    while len(out) < limit:
        if len(blob) - at < 12:
            return out, ("cut inside a record header" if len(blob) > at else None)
        length, sum_ = struct.unpack_from("<QI", blob, at)
        if tfrecord.masked_crc32c(blob[at : at + 8]) != sum_:
            return out, "a record header with a bad checksum"
        if length >= tfrecord.MAX_RECORD:
            return (
                out,
                f"a record of {length} bytes (over the {tfrecord.MAX_RECORD >> 20} MiB limit)",
            )
        end = at + 16 + length
        if end > len(blob):
            return out, "cut inside a record"
        data = blob[at + 12 : end - 4]
        if tfrecord.masked_crc32c(data) != struct.unpack_from("<I", blob, end - 4)[0]:
            return out, "a damaged record"
        out.append(data)
        at = end
    return out, None


def _walk(path: Path, limit: int) -> tuple[list[bytes], str | None, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = tfrecord.Walk()
        got = [d for batch in tfrecord.record_lists(fd, walk, limit) for d in batch]
    finally:
        os.close(fd)
    return got, walk.damage, walk.records


@pytest.mark.parametrize("chunk", [1, 5, 12, 13, 16, 29, 64, 4096])
def test_the_walk_reads_as_the_reference_across_chunk_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(tfrecord, "CHUNK", chunk)
    monkeypatch.setattr(tfrecord, "LIST_RECORDS", 1 + chunk % 5)  # lists of 1-5 records
    rng = random.Random(chunk)
    datas = [
        bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 30, 70]))) for _ in range(60)
    ]
    clean = b"".join(map(tfrecord.frame, datas))
    path = tmp_path / "records"
    cases: list[tuple[bytes, int]] = [(clean, 1000), (clean, 0), (clean, 1), (clean, 37)]
    cases += [(clean[:cut], 1000) for cut in rng.sample(range(len(clean)), 40)]
    for _ in range(60):  # a byte changed anywhere: a length, a sum, the data
        bad = bytearray(clean)
        bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        cases.append((bytes(bad), rng.choice([1000, 20])))
    huge = struct.pack("<Q", tfrecord.MAX_RECORD)
    cases.append((clean[:40] + huge + struct.pack("<I", tfrecord.masked_crc32c(huge)), 1000))
    for blob, limit in cases:
        path.write_bytes(blob)
        want, damage = _reference(blob, limit)
        got, got_damage, counted = _walk(path, limit)
        assert (got, got_damage, counted) == (want, damage, len(want))


def test_a_record_longer_than_a_chunk_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tfrecord, "CHUNK", 64)
    datas = [b"a" * 10, bytes(range(256)) * 40, b"b" * 3]
    path = tmp_path / "records"
    path.write_bytes(b"".join(map(tfrecord.frame, datas)))
    assert _walk(path, 10) == (datas, None, 3)


# -- events ------------------------------------------------------------------------------
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")


def _event(wall: float, step: int, values: list[tuple[str, float]]) -> bytes:
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values]
    )
    return event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString()


def _read(path: Path) -> tuple[list[dict[str, Any]], list[str], int]:
    from dltop.tui.core.sources.foreign import tboard  # noqa: PLC0415

    log = tboard.load(str(path))
    return [r for b in log.batches() for r in b], log.notes, log.skipped


def test_events_near_a_known_one_read_as_protobuf_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events of known tails mixed with the same events one byte off (in the tail, the
    step, the wall time), steps of 1, 2, 3 and more bytes: the file reads the same with
    the short cuts as with protobuf alone."""
    from dltop.tui.core.sources.foreign import tbpoints  # noqa: PLC0415

    rng = random.Random(5)
    tags = ["loss", "train/grad_norm", "lr", "é/ü", "x" * 100]
    steps = [1, 5, 127, 128, 300, 16_383, 16_384, 2_000_000, 2_097_151, 2_097_152, 1 << 40]
    events = []
    read_somehow = 0
    for k in range(4000):
        step = steps[k % len(steps)] + k // len(steps)
        value = rng.choice([rng.random(), -1e30, math.inf, math.nan, 0.0])
        data = _event(1.7e9 + k, step, [(rng.choice(tags), value)])
        if k % 3 == 0:  # one byte changed: often still an event, of another shape or tag
            bad = bytearray(data)
            bad[rng.randrange(len(bad))] = rng.randrange(256)
            data = bytes(bad)
        read_somehow += tbpoints.scalar_event(data) is not None
        events.append(data)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(map(tfrecord.frame, events)))
    fast = _read(path)
    monkeypatch.setattr(tbpoints, "scalar_event", lambda data: None)
    slow = _read(path)
    assert repr(fast) == repr(slow)  # repr: NaN values compare equal as text
    assert read_somehow > 3000 and len(fast[0]) > 1000


def test_the_preview_ends_inside_a_chunk_as_it_ended_value_by_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tags are counted for the first PREVIEW values; one first seen at value PREVIEW + 1
    is left out and said, one seen at value PREVIEW is kept, though both are in the
    chunk the preview ended in."""
    from dltop.tui.core.sources.foreign import tboard  # noqa: PLC0415

    monkeypatch.setattr(tboard, "PREVIEW", 40)
    events = [_event(1.7e9 + s, s, [("loss", 1.0)]) for s in range(1, 40)]
    events.append(_event(1.7e9 + 40, 40, [("grad_norm", 2.0)]))  # value 40: in the preview
    events.append(_event(1.7e9 + 41, 41, [("lr", 0.1)]))  # value 41: after it
    events += [_event(1.7e9 + s, s, [("loss", 1.0), ("lr", 0.1)]) for s in range(42, 50)]
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(map(tfrecord.frame, events)))
    recs, notes, _ = _read(path)
    assert [r.get("grad_norm") for r in recs if r.get("step") == 40] == [2.0]
    assert not any("lr" in r for r in recs if r.get("kind") == "step")
    assert any(n.startswith("warning: 9 values left out") for n in notes), notes


def test_records_merge_the_same_when_points_come_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader hands the merger a chunk's points at once and asks for its window only
    when a put can have filled it; values of one step logged far apart, steps out of
    order and repeats (against a small window) give the records and notes of one point
    at a time, when the merger was asked after every put."""
    from dltop.tui.core.sources.foreign import tboard  # noqa: PLC0415

    whole = tboard.points_of

    def one_by_one(*args: Any) -> Any:
        for batch in whole(*args):
            for point in batch:
                yield [point]

    rng = random.Random(9)
    tags = ["loss", "grad_norm", "lr", "eval/loss", "data_time", "odd", "train/train_runtime"]
    compared = 0
    for case in range(60):
        monkeypatch.setattr(tboard, "WINDOW", rng.choice([2, 4, 7, 16]))
        monkeypatch.setattr(tboard, "PREVIEW", rng.choice([5, 50, 200_000]))
        events = []
        for k in range(rng.randint(1, 300)):
            step = rng.choice([k, k, k, rng.randint(0, 350), k // 3])
            values = [(rng.choice(tags), rng.random()) for _ in range(rng.choice([1, 1, 2, 3]))]
            events.append(_event(1.7e9 + k, step, values))
        path = tmp_path / f"{case}" / "events.out.tfevents.1.host"
        path.parent.mkdir()
        path.write_bytes(b"".join(map(tfrecord.frame, events)))
        monkeypatch.setattr(tboard, "points_of", whole)
        batched = _read(path)
        monkeypatch.setattr(tboard, "points_of", one_by_one)
        single = _read(path)
        assert repr(batched) == repr(single)
        compared += any("left out" in n for n in batched[1])
    assert compared > 10  # values came too late for their step's record: the window acted
