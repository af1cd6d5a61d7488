"""The log format's one module: what goes in comes back, and bad input never raises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from dltop.probe.schema import (
    KINDS,
    LineDecoder,
    as_float,
    decode_line,
    encode_record,
    iter_records,
    read_records,
)


def _same(a: object, b: object) -> bool:
    """Equality where NaN equals NaN, through nested dicts and lists."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


NESTED = {
    "kind": "step",
    "step": 3,
    "loss": math.nan,
    "grad_norm": math.inf,
    "lrs": [0.1, -math.inf, 0.3],
    "deep": {"a": [{"b": math.nan}, 1, "text"], "c": {"d": -math.inf}},
    "ok": 1.5,
    "flag": True,
    "none": None,
}


def test_non_finite_values_round_trip_in_nested_fields() -> None:
    line = encode_record(NESTED)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    # strict JSON: no bare NaN/Infinity tokens for other parsers to reject
    strict = json.loads(line, parse_constant=lambda tok: pytest.fail(f"bare token {tok}"))
    assert strict["loss"] == "NaN" and strict["deep"]["c"]["d"] == "-Infinity"
    assert _same(decode_line(line), NESTED)


def test_encoding_does_not_modify_the_callers_record() -> None:
    rec = {"kind": "step", "xs": [math.nan], "m": {"v": math.inf}}
    encode_record(rec)
    assert math.isnan(rec["xs"][0]) and rec["m"]["v"] == math.inf


def test_unknown_fields_and_kinds_are_kept() -> None:
    recs = [
        {"kind": "step", "step": 1, "my_metric": 0.25, "nested_extra": {"x": [1, 2]}},
        {"kind": "from_the_future", "payload": {"anything": "goes"}},
    ]
    data = b"".join(encode_record(r) for r in recs)
    dec = LineDecoder()
    assert dec.feed(data) == recs
    assert "from_the_future" not in KINDS and dec.malformed == 0


def test_garbage_and_partial_lines_are_skipped_and_counted() -> None:
    good = [encode_record({"kind": "step", "step": i, "loss": 1.0 / (i + 1)}) for i in range(3)]
    data = (
        good[0]
        + b"not json at all\n"
        + b'{"kind": "step", "step": 9, "loss": 1.\n'  # cut by a crash, then a newline
        + b"[1, 2, 3]\n"  # JSON, but not an object
        + b'{"step": 4}\n'  # an object without a kind
        + b'{"kind": 5}\n'  # kind not a string
        + b"\n   \n"  # blank lines are not errors
        + good[1]
        + b"\xff\xfe garbage bytes\n"
        + good[2]
        + b'{"kind": "step", "st'  # the partial last line of a live file
    )
    dec = LineDecoder()
    recs = dec.feed(data)
    assert [r["step"] for r in recs] == [0, 1, 2]
    assert dec.malformed == 6 and dec.records == 3
    assert dec.pending == len(b'{"kind": "step", "st')
    assert dec.finish() == [] and dec.malformed == 7  # at the end of input it is a cut line


def test_finish_keeps_a_complete_last_record_without_newline() -> None:
    dec = LineDecoder()
    assert dec.feed(b'{"kind": "event", "type": "exit"}') == []
    assert dec.finish() == [{"kind": "event", "type": "exit"}]
    assert dec.malformed == 0


def test_line_decoder_across_every_chunk_boundary() -> None:
    data = b"".join(
        encode_record(
            {"kind": "step", "step": i, "loss": math.nan if i == 2 else i * 0.5, "s": "é"}
        )
        for i in range(5)
    )
    whole = LineDecoder().feed(data)
    assert len(whole) == 5
    for cut in range(len(data) + 1):
        dec = LineDecoder()
        got = dec.feed(data[:cut]) + dec.feed(data[cut:])
        assert _same(got, whole), cut
        assert dec.malformed == 0 and dec.pending == 0
    dec = LineDecoder()  # one byte at a time
    got = [r for i in range(len(data)) for r in dec.feed(data[i : i + 1])]
    assert _same(got, whole) and dec.bytes == len(data)


class _MyFloat(float):
    """What numpy.float64 is to the encoder: a float subclass."""


def test_plain_float_subclasses() -> None:
    rec = {"kind": "step", "a": _MyFloat("nan"), "b": _MyFloat(2.5), "c": [_MyFloat("-inf")]}
    out = decode_line(encode_record(rec))
    assert math.isnan(out["a"]) and out["c"] == [-math.inf]
    assert out["b"] == 2.5


def test_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    rec = {
        "kind": "step",
        "f64": np.float64("nan"),  # a float subclass
        "f64ok": np.float64(2.5),
        "f32": np.float32(0.5),  # not a float subclass: goes through .item()
        "f32inf": np.float32("inf"),
        "i64": np.int64(7),
        "nested": [{"x": np.float64("-inf")}],
    }
    out = decode_line(encode_record(rec))
    assert math.isnan(out["f64"]) and out["f64ok"] == 2.5 and out["f32"] == 0.5
    assert out["f32inf"] == math.inf and out["i64"] == 7 and out["nested"] == [{"x": -math.inf}]


def test_decode_line_and_iter_records_never_raise() -> None:
    assert decode_line(b"") is None and decode_line("   ") is None
    assert decode_line("{broken") is None and decode_line('"string"') is None
    assert decode_line('{"kind": "meta", "v": 1}') == {"kind": "meta", "v": 1}
    lines = ["junk", '{"kind": "eval", "loss": "NaN"}', b'{"kind": "sys"}', "{"]
    recs = list(iter_records(lines))
    assert [r["kind"] for r in recs] == ["eval", "sys"] and math.isnan(recs[0]["loss"])


def test_read_records(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(
        encode_record({"kind": "meta", "v": 1})
        + b"oops\n"
        + encode_record({"kind": "step", "step": 0})
    )
    recs, dec = read_records(str(path), chunk_size=7)  # tiny chunks: lines span reads
    assert [r["kind"] for r in recs] == ["meta", "step"] and dec.malformed == 1
    with pytest.raises(OSError):
        read_records(str(tmp_path / "missing.jsonl"))


def test_as_float() -> None:
    assert as_float(1.5) == 1.5 and as_float(3) == 3.0 and as_float("Infinity") == math.inf
    assert math.isnan(as_float("NaN"))
    assert as_float(True) is None and as_float(None) is None and as_float("1.5") is None
