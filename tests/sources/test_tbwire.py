"""The common TensorBoard event read without protobuf (``foreign/tbwire.py``) gives what
protobuf gives, or nothing: on events written by protobuf itself, on those events with
bytes flipped, cut or added, and on random bytes. And a whole file reads the same with the
short cut as without it."""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorboard")

from dltop.tui.core.sources.foreign import tboard, tbpoints  # noqa: E402
from dltop.tui.core.sources.foreign.tbwire import scalar_event  # noqa: E402
from dltop.tui.core.sources.foreign.tfrecord import frame  # noqa: E402
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402

TAGS = ["loss", "train/loss", "", "é/損失", "x" * 100, "y" * 120, "z" * 130]
VALUES = [0.0, -0.0, 1.5, -2.25e-38, 3.0e38, math.inf, -math.inf, math.nan, 1e-45]
STEPS = [
    0,
    1,
    127,
    128,
    300,
    16383,
    16384,
    2**21 - 1,
    2**21,
    2**40,
    2**62 - 1,
    2**62,
    2**63 - 1,
    -1,
    -(2**40),
]
WALLS = [0.0, 1.7e9, 1e-300, -5.0, math.inf, math.nan]


def _event(wall: float, step: int, values: list[tuple[str, float]]) -> bytes:
    s = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values])
    return bytes(Event(wall_time=wall, step=step, summary=s).SerializeToString())


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)  # NaN == NaN, -0.0 != 0.0: the bits are the answer


def _protobuf(data: bytes) -> Any:
    """What protobuf reads of ``data`` in the shape scalar_event returns, or None."""
    try:
        event = Event.FromString(data)
    except Exception:
        return None
    if not event.HasField("summary"):
        return None
    vals = []
    for v in event.summary.value:
        if v.WhichOneof("value") != "simple_value":
            return None
        vals.append((v.tag, _bits(v.simple_value)))
    return _bits(event.wall_time), event.step, vals


def _same(data: bytes) -> bool:
    """scalar_event read nothing, or what protobuf reads; True when it read something."""
    got = scalar_event(data)
    if got is None:
        return False
    wall, step, values = got
    assert (_bits(wall), step, [(t, _bits(x)) for t, x in values]) == _protobuf(data), data.hex()
    return True


def test_written_events_read_as_protobuf_reads_them() -> None:
    read = 0
    for wall in WALLS:
        for step in STEPS:
            for tag in TAGS:
                for value in VALUES[:3]:
                    read += _same(_event(wall, step, [(tag, value)]))
    for value in VALUES:
        assert _same(_event(1.7e9, 5, [("loss", value)]))
    assert _same(_event(1.7e9, 5, [("a", 1.0), ("b", 2.0), ("c", math.nan)]))
    assert _same(_event(1.7e9, 5, []))  # a summary with no value: read, nothing in it
    # the common shape is read without protobuf (not all of them left to the slow path):
    # every combination but negative steps, an empty tag (protobuf does not write it) and
    # tags too long for one-byte lengths
    assert read == len(WALLS) * (len(STEPS) - 2) * (len(TAGS) - 3) * 3


def test_other_shapes_are_left_to_protobuf() -> None:
    negative = _event(1.7e9, -1, [("loss", 1.0)])
    assert scalar_event(negative) is None  # a 10-byte varint: protobuf reads it
    tensor = Summary.Value(tag="loss")
    tensor.metadata.plugin_data.plugin_name = "scalars"
    tensor.tensor.dtype = 1
    tensor.tensor.float_val.append(1.0)
    with_tensor = Event(wall_time=1.0, step=2, summary=Summary(value=[tensor]))
    assert scalar_event(with_tensor.SerializeToString()) is None
    assert (
        scalar_event(Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()) is None
    )
    no_value = Summary(value=[Summary.Value(tag="x")])  # no oneof set: not a scalar
    assert scalar_event(Event(step=3, summary=no_value).SerializeToString()) is None
    bad_text = bytes.fromhex("10052a0a0a080a03ff80fe150000c03f")  # a tag that is no UTF-8
    assert scalar_event(bad_text) is None and _protobuf(bad_text) is None
    overshoot = bytes.fromhex("2a060a070a0015aa")  # a value longer than its summary
    assert scalar_event(overshoot) is None and _protobuf(overshoot) is None
    long_summary = _event(1.0, 1, [(f"t{i}", float(i)) for i in range(12)])  # >= 128 bytes
    assert scalar_event(long_summary) is None and _protobuf(long_summary) is not None


def test_damaged_and_random_bytes_never_read_differently() -> None:
    rng = random.Random(31)
    seeds = [
        _event(rng.choice(WALLS), rng.choice(STEPS), [(rng.choice(TAGS[:5]), rng.random())])
        for _ in range(200)
    ]
    seeds += [_event(1.7e9, 9, [("a", 1.0), ("bb", 2.0)])]
    read = 0
    for _ in range(40_000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(3)
            at = rng.randrange(len(data) + 1)
            if op == 0 and at < len(data):
                data[at] = rng.randrange(256)
            elif op == 1:
                data.insert(at, rng.randrange(256))
            elif data:
                del data[min(at, len(data) - 1)]
        read += _same(bytes(data))
    for _ in range(20_000):
        _same(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
    assert read > 1000, "some mutations keep the shape (a changed value or tag byte)"


def _write(path: Path, events: list[bytes]) -> None:
    path.write_bytes(b"".join(frame(e) for e in events))


def test_a_file_reads_the_same_with_and_without_the_short_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    events = [Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()]
    for step in range(3000):
        for tag in ("train/loss", "train/grad_norm", "train/learning_rate", "data_time"):
            value = rng.choice([rng.random(), math.nan]) if step % 97 == 0 else rng.random()
            events.append(_event(1.7e9 + step, step, [(tag, value)]))
        if step % 500 == 0:  # a tensor scalar, a negative step, several values at once
            tensor = Summary.Value(tag="eval/loss")
            tensor.metadata.plugin_data.plugin_name = "scalars"
            tensor.tensor.dtype = 1
            tensor.tensor.float_val.append(0.5)
            events.append(
                Event(
                    wall_time=1.7e9 + step, step=step, summary=Summary(value=[tensor])
                ).SerializeToString()
            )
            events.append(_event(1.7e9, -step - 1, [("train/loss", 1.0)]))
            events.append(_event(1.7e9 + step, step, [("val/acc", 0.5), ("val/f1", 0.25)]))
    events.append(b"\x2a\x03\x0a\x01\xff")  # framed, but no event protobuf reads
    path = tmp_path / "events.out.tfevents.1.host"
    _write(path, events)

    def read() -> tuple[list[dict[str, Any]], list[str], int]:
        log = tboard.load(str(path))
        recs = [r for b in log.batches() for r in b]
        return recs, log.notes, log.skipped

    fast = read()
    monkeypatch.setattr(tbpoints, "scalar_event", lambda data: None)
    slow = read()
    assert repr(fast) == repr(slow)  # repr: NaN values compare equal as text
    # 3000 steps and the 6 negative ones (a step is any whole number in range)
    assert sum(r.get("kind") == "step" for r in fast[0]) == 3006
