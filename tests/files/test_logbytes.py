"""The one place the viewer turns a log's bytes into records (tui/core/files/logbytes.py): no
other module builds a decoder, and what it reads is what the file holds."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from dltop.tui.core.files import logbytes

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "probe", ROOT / "tui", ROOT / "demos"]
# the decoder's own module (the probe's ``read_records``) and the viewer's one place
HOMES = {"probe/decoding.py", "tui/core/files/logbytes.py"}


def _decoder_builders(folders: list[Path], root: Path) -> set[str]:
    found = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                    if name == "LineDecoder":
                        found.add(path.relative_to(root).as_posix())
    return found


def test_no_module_but_the_one_place_builds_a_decoder() -> None:
    assert _decoder_builders(PRODUCT, ROOT) == HOMES


def test_the_check_sees_a_second_place(tmp_path: Path) -> None:
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "stray.py").write_text(
        "from dltop.probe import decoding\ndec = decoding.LineDecoder()\n"
    )
    assert _decoder_builders([tmp_path / "tui"], tmp_path) == {"tui/stray.py"}


def _log(path: Path, lines: list[bytes]) -> int:
    path.write_bytes(b"".join(lines))
    return os.open(path, os.O_RDONLY)


def _rec(step: int) -> bytes:
    return json.dumps({"kind": "step", "step": step, "t": 1.0}).encode() + b"\n"


META = json.dumps({"kind": "meta", "run_id": "r", "t": 0.0}).encode() + b"\n"


def test_the_first_record_and_a_first_line_not_complete_yet(tmp_path: Path) -> None:
    fd = _log(tmp_path / "a.jsonl", [META, _rec(0)])
    try:
        assert logbytes.first_record(fd) == {"kind": "meta", "run_id": "r", "t": 0.0}
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # pread: the position is left alone
    finally:
        os.close(fd)
    fd = _log(tmp_path / "b.jsonl", [META[:-5]])  # the writer is still on its first line
    try:
        assert logbytes.first_line(fd) is None
        assert logbytes.first_record(fd) is None
    finally:
        os.close(fd)
    fd = _log(tmp_path / "c.jsonl", [b"not json\n", _rec(0)])
    try:
        assert logbytes.first_line(fd) == b"not json"
        assert logbytes.first_record(fd) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_range_read_in_any_chunk_gives_the_same_records(tmp_path: Path, chunk: int) -> None:
    lines = [META] + [_rec(i) for i in range(50)]
    fd = _log(tmp_path / "log.jsonl", lines)
    upto = sum(len(x) for x in lines[:31])  # the meta and steps 0..29
    try:
        got, ends = [], []
        for end, recs in logbytes.read_range(fd, 0, upto, block=64, chunk=chunk):
            got += recs
            ends.append(end)
    finally:
        os.close(fd)
    assert ends[-1] == upto and ends == sorted(ends)
    assert [r.get("step") for r in got] == [None, *range(30)]


def test_a_range_past_the_end_stops_where_the_file_does(tmp_path: Path) -> None:
    lines = [_rec(i) for i in range(3)]
    fd = _log(tmp_path / "log.jsonl", lines)
    try:
        out = list(logbytes.pieces(fd, 0, 10_000, block=8, chunk=5))
    finally:
        os.close(fd)
    assert out[-1][0] == sum(len(x) for x in lines)
    assert b"".join(p for _, p in out) == b"".join(lines)


def test_a_blob_keeps_its_unterminated_last_record_and_counts_a_broken_line() -> None:
    recs, dec = logbytes.decode_blob(_rec(0) + b"{broken\n" + _rec(1).rstrip(b"\n"))
    assert [r["step"] for r in recs] == [0, 1]
    assert dec.malformed == 1
