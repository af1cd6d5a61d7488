"""The log format's one module: what goes in comes back, and bad input never raises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from dltop.probe.decoding import LineDecoder, decode_line, read_records
from dltop.probe.encoding import encode_record
from dltop.probe.schema import KINDS, as_float, step_or


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


# lines msgspec's own multi-line reader would read differently from a line-by-line decoder
# (two values on one line, a value across two lines), or that only the line path skips
# quietly (a line of spaces): the decoder's one-map path must give way to the line path
ODD_BLOCKS = (
    b'{"kind": "step", "step": 1} {"kind": "step", "step": 2}\n',  # two records, one line
    b'{"kind": "step",\n "step": 3}\n',  # one record across two lines
    b"   \n",  # a line of spaces: skipped, not counted
    b"\r\n",  # a blank CRLF line
    b'{"kind": ["step"]}\n',  # an unhashable kind
    b'{"kind": "event", "type": "exit", "pid": "12"}\n',  # normalized: pid dropped
    b'{"kind": "step", "step": 5, "loss": "NaN"}\n',  # a marker to restore
    b'{"kind": "event", "type": "note", "message": "No Infinity here"}\n',  # gate letters only
    b'{"kind": "step", "step": 6, "loss": 1.5}\r\n',  # a CRLF record
    b'{"kind": "step", "step": 7, "loss": NaN, "grad_norm": -Infinity}\n',  # json.dumps's tokens
    b'{"kind": "event", "type": "note", "text": "a:NaN,"}\n',  # a token's look in a text
    b'{"kind": "event", "type": "note", "text": "a:NaN," , "x": NaN }\n',  # ... and a real one
    b'{"kind": "step", "step": 8, "loss": NaNa}\n',  # no token: stays malformed
)


@pytest.mark.parametrize("odd", ODD_BLOCKS)
def test_a_block_decodes_as_its_lines_do(odd: bytes) -> None:
    good = encode_record({"kind": "step", "step": 0, "loss": 2.0})
    data = good + odd + good
    dec = LineDecoder()
    got = dec.feed(data)
    want = [r for r in map(decode_line, data.split(b"\n")) if r is not None]
    assert _same(got, want)
    non_blank = [ln for ln in data.split(b"\n") if ln.strip()]
    assert dec.records == len(want) and dec.malformed == len(non_blank) - len(want)


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


def test_decode_line_never_raises() -> None:
    assert decode_line(b"") is None and decode_line("   ") is None
    assert decode_line("{broken") is None and decode_line('"string"') is None
    assert decode_line('{"kind": "meta", "v": 1}') == {"kind": "meta", "v": 1}
    lines = ["junk", '{"kind": "eval", "loss": "NaN"}', b'{"kind": "sys"}', "{"]
    recs = [r for r in map(decode_line, lines) if r is not None]
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


def _deep(depth: int, leaf: bytes = b'"NaN"') -> bytes:
    """A note whose ``x`` is ``leaf`` nested ``depth`` lists deep."""
    return b'{"kind":"event","type":"note","x":' + b"[" * depth + leaf + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [600, 800, 5000])
def test_deeply_nested_non_finite_values_never_raise(depth: int) -> None:
    """Restoring "NaN" used to recurse twice per level: ~500 levels blew the stack."""
    good = encode_record({"kind": "step", "step": 1, "loss": math.nan})
    dec = LineDecoder()
    recs = dec.feed(_deep(depth) + b"\n" + good)
    out = decode_line(_deep(depth))
    if depth < 1000:  # within the JSON decoder's depth limit (~1000 frames): decoded, restored
        assert out is not None and len(recs) == 2 and dec.malformed == 0
        leaf = recs[0]["x"]
        for _ in range(depth):
            (leaf,) = leaf
        assert math.isnan(leaf)
    else:  # beyond it: one malformed line, the next one still read
        assert out is None and len(recs) == 1 and dec.malformed == 1
    assert recs[-1]["step"] == 1 and math.isnan(recs[-1]["loss"])


def test_dltop_check_reads_a_log_with_a_deeply_nested_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    log = tmp_path / "run.jsonl"
    steps = b"".join(encode_record({"kind": "step", "step": i, "loss": 1.0}) for i in range(5))
    log.write_bytes(encode_record({"kind": "meta", "v": 1}) + _deep(800) + b"\n" + steps)
    out = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in out.stderr and out.returncode in (0, 1, 2), out.stderr
    assert json.loads(out.stdout)["steps"] == 5


def test_an_over_long_line_is_skipped_counted_and_the_decoder_resyncs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dltop.probe import decoding

    monkeypatch.setattr(decoding, "MAX_LINE", 1000)  # the real cap is 8 MiB: same logic, less data
    before = encode_record({"kind": "step", "step": 0})
    after = encode_record({"kind": "step", "step": 1})
    long_piece = b'{"kind":"note","text":"' + b"x" * 300
    dec = LineDecoder()
    got = dec.feed(before)
    for _ in range(20):  # 6000 bytes without a newline, in pieces: never all held
        got += dec.feed(long_piece)
        assert dec.pending <= 1000 or dec._parts == []
    assert dec.malformed == 1 and dec.pending == 20 * len(long_piece)
    got += dec.feed(b'"}\n' + after[:5])
    assert dec.pending == 5  # back in step after the long line's newline
    got += dec.feed(after[5:])
    assert [r["step"] for r in got] == [0, 1] and dec.malformed == 1 and dec.pending == 0
    # a complete over-long line inside one chunk, and via decode_line
    dec = LineDecoder()
    assert dec.feed(b"[" + b" " * 2000 + b"]\n" + after) == [decode_line(after)]
    assert dec.malformed == 1
    assert decode_line(b'{"kind":"note","text":"' + b"y" * 2000 + b'"}') is None
    assert dec.finish() == []


def test_a_file_without_newlines_is_read_in_bounded_memory(tmp_path: Path) -> None:
    from dltop.probe.schema import MAX_LINE

    path = tmp_path / "blob.jsonl"
    with open(path, "wb") as f:
        for _ in range(3):
            f.write(b"z" * (MAX_LINE // 2 + 1))  # 1.5 caps, no newline anywhere
        f.write(b"\n" + encode_record({"kind": "step", "step": 7}))
    recs, dec = read_records(str(path), chunk_size=1 << 20)
    assert [r["step"] for r in recs] == [7] and dec.malformed == 1


def test_bare_non_finite_tokens_are_read_as_numbers() -> None:
    """Python's json.dumps writes a NaN loss as a bare ``NaN``: strict JSON rejects the
    line, and with it the one step that mattered. Such lines are read, the tokens as the
    floats they stand for; a token's look inside a string is left alone."""
    data = (
        json.dumps({"kind": "step", "step": 1, "loss": math.nan, "grad_norm": math.inf}).encode()
        + b"\n"
        + b'{"kind":"step","step":2,"loss":[NaN, -Infinity],"lr":0.1}\n'
        + b'{"kind":"event","type":"note","text":"loss: NaN, then more","v":NaN}\n'
        + b'{"kind":"step","step":3,"loss":"NaN"}\n'
    )
    dec = LineDecoder()
    recs = dec.feed(data)
    assert dec.malformed == 0 and len(recs) == 4
    assert math.isnan(recs[0]["loss"]) and recs[0]["grad_norm"] == math.inf
    assert math.isnan(recs[1]["loss"][0]) and recs[1]["loss"][1] == -math.inf
    assert recs[2]["text"] == "loss: NaN, then more" and math.isnan(recs[2]["v"])
    assert math.isnan(recs[3]["loss"])
    one = decode_line(b'{"kind":"step","step":1,"loss":NaN}')
    assert one is not None and math.isnan(one["loss"])


def test_a_byte_order_mark_costs_no_line() -> None:
    """Saved by a Windows editor or PowerShell, a log starts with a UTF-8 byte-order mark:
    strict JSON rejects that line, and with it the run's meta. The mark is dropped, at the
    file's start and where `cat` joined two such files; a bad line after it stays bad."""
    bom = b"\xef\xbb\xbf"
    data = (
        bom
        + b'{"kind":"meta","v":1,"run_id":"r"}\n'
        + b'{"kind":"step","step":1,"loss":NaN}\n'
        + bom
        + b'{"kind":"step","step":2,"loss":1.5}\n'
        + bom
        + b"not json\n"
    )
    dec = LineDecoder()
    recs = dec.feed(data)
    assert [r["kind"] for r in recs] == ["meta", "step", "step"] and dec.malformed == 1
    assert recs[0]["run_id"] == "r" and math.isnan(recs[1]["loss"]) and recs[2]["loss"] == 1.5
    one = decode_line(bom + b'{"kind":"step","step":1,"loss":NaN}')
    assert one is not None and math.isnan(one["loss"])
    assert decode_line(bom) is None


def test_lone_surrogate_escapes_cost_no_line() -> None:
    """Python's json.dumps writes an undecodable file-name byte as ``\\udce9``, which strict
    JSON rejects: every such line was skipped. It is read, the escape kept as text (as the
    probe writes it); escaped backslashes and real surrogate pairs are left alone."""
    lines = [
        json.dumps({"kind": "event", "type": "note", "text": "caf\udce9.jpg"}),
        json.dumps({"kind": "event", "type": "note", "text": "\U0001f600 and \ud800"}),
        '{"kind":"event","type":"note","text":"a\\\\udce9"}',  # backslash, then "udce9"
        '{"kind":"step","step":1,"loss":NaN,"tag":"\\udfff"}',
    ]
    dec = LineDecoder()
    recs = dec.feed(("\n".join(lines) + "\n").encode())
    assert dec.malformed == 0
    assert [r.get("text") for r in recs[:3]] == [
        "caf\\udce9.jpg",
        "\U0001f600 and \\ud800",
        "a\\udce9",
    ]
    assert math.isnan(recs[3]["loss"]) and recs[3]["tag"] == "\\udfff"


def test_text_fields_keep_their_nan_strings() -> None:
    """Markers are numbers only where a number can stand: not in argv, notes or messages."""
    meta = {"kind": "meta", "v": 1, "argv": ["train.py", "NaN", "Infinity"], "notes": ["NaN"]}
    assert decode_line(encode_record(meta)) == meta
    note = {"kind": "event", "type": "note", "text": "NaN", "loss": math.nan, "by": "NaN"}
    out = decode_line(encode_record(note))
    assert out["text"] == "NaN" and math.isnan(out["loss"]) and math.isnan(out["by"])
    exc = {
        "kind": "event",
        "type": "exception",
        "exc_type": "ValueError",
        "message": "Infinity",
        "traceback": [{"file": "a.py", "line": 3, "func": "f", "code": "NaN"}],
        "cause": {"exc_type": "KeyError", "message": "-Infinity"},
    }
    dec = LineDecoder()
    assert dec.feed(encode_record(exc)) == [exc]
    layers = {"kind": "layers", "names": ["NaN"], "grad_norm": [math.inf], "no_grad": ["NaN"]}
    out = decode_line(encode_record(layers))
    assert out["names"] == ["NaN"] and out["grad_norm"] == [math.inf] and out["no_grad"] == ["NaN"]


def test_a_records_own_step_only_when_it_is_an_int() -> None:
    """Events, evals and layers records carry the probe's int step; anything else in its
    place (a float, a bool, text, nothing, no record) falls back to the default."""
    assert step_or({"kind": "eval", "step": 7}, 3) == 7
    assert step_or({"kind": "eval", "step": 0}, 3) == 0
    for odd in (7.0, True, "7", None, [7]):
        assert step_or({"kind": "eval", "step": odd}, 3) == 3
    assert step_or({"kind": "eval"}, None) is None
    assert step_or(None, 5) == 5
