"""The common TensorBoard event read from its bytes, without building a protobuf message.

Why: a 1 M-step run of six scalars is 6 M events, and going through TensorBoard's
``Event`` message cost ~15 µs a value (parse, then a Python wrapper per field read),
which made checking the event file 4-5x slower than checking the same run as our JSONL
(issue 31 asks for 3x). Nearly every event a training writes has one shape: a wall time,
a step and a summary of ``simple_value`` scalars (``SummaryWriter.add_scalar``,
``tf.summary.scalar`` in TF1, Keras), serialized in field order as protobuf always does.

:func:`scalar_event` reads exactly that shape and nothing else; any other byte (a field
in another order, a tensor scalar, metadata, a negative step, text that is not UTF-8, a
length that does not add up) returns None, and the caller parses the event with protobuf
as before. So a file gives the same values either way (``tests/sources/test_tbwire.py``
compares the two on written, mutated and random events).
"""

from __future__ import annotations

import struct

DOUBLE = struct.Struct("<d").unpack_from
FLOAT = struct.Struct("<f").unpack_from
# field keys (field number << 3 | wire type) of the shape read here
_WALL_TIME = 0x09  # Event.wall_time = 1, double
_STEP = 0x10  # Event.step = 2, varint
_SUMMARY = 0x2A  # Event.summary = 5, length-delimited
_VALUE = 0x0A  # Summary.value = 1, length-delimited (repeated)
_TAG = 0x0A  # Summary.Value.tag = 1, length-delimited
_SIMPLE = 0x15  # Summary.Value.simple_value = 2, 32-bit float

Scalars = tuple[float, int, list[tuple[str, float]]]


def _varint(data: bytes, i: int, n: int) -> tuple[int, int] | None:
    """The varint at ``data[i]`` of at most 9 bytes (63 bits) and the index after it."""
    value = shift = 0
    while True:
        if i >= n or shift > 56:
            return None
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def scalar_event(data: bytes) -> Scalars | None:
    """``(wall_time, step, [(tag, value), ...])`` of an event of the common shape (see the
    module's docstring), or None: protobuf must read it. Absent fields are protobuf's
    defaults (a wall time or step of 0 is not written); the step is never negative here:
    a negative int64 is a varint of 10 bytes. Byte by byte in Python, the usual event (one
    value, a step under 2**21) in straight lines: a regular expression finding the same
    fields, then checking the lengths, was slower (docs/dev/foreign-logs.md)."""
    n = len(data)
    i = 0
    wall = 0.0
    step = 0
    if n > 9 and data[0] == _WALL_TIME:
        wall = DOUBLE(data, 1)[0]
        i = 9
    if i < n and data[i] == _STEP:
        i += 1
        # a step below 2**21 in one to three bytes, straight; a longer one in the loop
        if i < n and data[i] < 0x80:
            step = data[i]
            i += 1
        elif i + 1 < n and data[i + 1] < 0x80:
            step = (data[i] & 0x7F) | data[i + 1] << 7
            i += 2
        elif i + 2 < n and data[i + 2] < 0x80:
            step = (data[i] & 0x7F) | (data[i + 1] & 0x7F) << 7 | data[i + 2] << 14
            i += 3
        else:
            got = _varint(data, i, n)
            if got is None:
                return None
            step, i = got
    if i + 1 >= n or data[i] != _SUMMARY:
        return None
    size = data[i + 1]
    i += 2
    if size >= 0x80 or i + size != n:  # a one-byte length, and the summary ends the event
        return None
    if (  # one value (the usual: TensorBoard's add_scalar writes an event a value), straight
        size >= 9
        and data[i] == _VALUE
        and data[i + 1] == size - 2
        and data[i + 2] == _TAG
        and data[i + 3] == size - 9
        and data[n - 5] == _SIMPLE
    ):
        try:
            return wall, step, [(data[i + 4 : n - 5].decode(), FLOAT(data, n - 4)[0])]
        except UnicodeDecodeError:
            return None
    values: list[tuple[str, float]] = []
    while i < n:
        # one Value: its key and length, then the tag (key, length, text), then the float.
        # Both lengths are single bytes: a longer varint would point past the summary's
        # end (under 128 bytes), which the test below refuses
        if i + 3 >= n or data[i] != _VALUE or data[i + 2] != _TAG:
            return None
        end = i + 2 + data[i + 1]
        tag_len = data[i + 3]
        start = i + 4
        stop = start + tag_len
        if stop + 5 != end or end > n or data[stop] != _SIMPLE:
            return None
        try:
            tag = data[start:stop].decode()
        except UnicodeDecodeError:
            return None
        values.append((tag, FLOAT(data, stop + 1)[0]))
        i = end
    return wall, step, values
