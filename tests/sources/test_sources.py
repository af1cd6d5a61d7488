"""Sources on real files: a real writer subprocess, truncation, replacement, rotation."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from dltop.probe.decoding import LineDecoder
from dltop.probe.encoding import encode_record
from dltop.tui.core.sources import backfill
from dltop.tui.core.sources import filesource as sources
from dltop.tui.core.sources.dirsource import DirectorySource
from dltop.tui.core.sources.filesource import (
    FileSource,
    SourceError,
    list_rank_files,
)
from dltop.tui.core.sources.source_open import open_source
from dltop.tui.core.store.run import RunModel
from waiting import wait_for

POLL = 0.02


def meta(run: str = "a", **kw: object) -> dict:
    return {"kind": "meta", "v": 1, "run_id": run, "host": "elsewhere", "pid": 1, "t": 1.0, **kw}


def step(i: int, **kw: object) -> dict:
    return {"kind": "step", "step": i, "t": 1000.0 + i, "loss": 1.0 / (i + 1), **kw}


def write(path: Path, records: list[dict], mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(b"".join(encode_record(r) for r in records))


def steps_of(model: RunModel) -> list[int]:
    with model.lock:
        return list(model.store.step_x)


@pytest.fixture
def follow(tmp_path: Path):
    """Start a FileSource on a path; stop every source at the end of the test."""
    started: list[FileSource] = []

    def start(path: Path, **kw: object) -> tuple[FileSource, RunModel, list[int]]:
        model = RunModel(path.name)
        updates: list[int] = []
        kw.setdefault("poll_interval", POLL)
        src = open_source(path, model, updates.append, **kw).start()
        started.append(src)
        return src, model, updates

    yield start
    for src in started:
        src.stop()
        assert not src.alive


WRITER = textwrap.dedent(
    """
    import sys, time
    from dltop.probe.encoding import encode_record
    path, n = sys.argv[1], int(sys.argv[2])
    with open(path, "ab", buffering=0) as f:
        f.write(encode_record({"kind": "meta", "v": 1, "run_id": "w", "host": "x", "pid": 1}))
        for i in range(n):
            line = encode_record({"kind": "step", "step": i, "t": time.time(), "loss": 1.0 / (i + 1)})
            cut = len(line) // 2
            f.write(line[:cut])          # half a line...
            time.sleep(0.003)            # ...the reader polls in between...
            f.write(line[cut:])          # ...then the rest
            if i % 50 == 0:
                time.sleep(0.05)
    """
)


def test_follows_a_real_writer_with_partial_lines_exactly_once(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    path.touch()
    src, model, updates = follow(path)
    n = 400
    proc = subprocess.run([sys.executable, "-c", WRITER, str(path), str(n)], timeout=60)
    assert proc.returncode == 0
    assert wait_for(lambda: model.store.steps >= n)
    time.sleep(5 * POLL)
    assert steps_of(model) == list(range(n))  # every record once, in order
    assert model.records == n + 1 and model.malformed == 0 and model.resets == 0
    assert sum(updates) == n + 1 and len(updates) > 1  # live: many chunks, one call each
    assert model.store.meta["run_id"] == "w"


def test_truncation_restarts_as_a_new_run(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta("a")] + [step(i) for i in range(50)])
    src, model, _ = follow(path)
    assert wait_for(lambda: model.store.steps == 50)
    v = model.version
    write(path, [meta("b")] + [step(i) for i in range(7)], mode="wb")  # truncate + rewrite
    assert wait_for(lambda: model.resets == 1 and model.store.steps == 7)
    assert model.restarted and "truncated" in model.reset_reason
    assert model.store.meta["run_id"] == "b" and model.version > v
    model.acknowledge_restart()
    assert not model.restarted


def test_rewrite_in_place_without_shrinking_restarts(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta("a")] + [step(i) for i in range(5)])
    src, model, _ = follow(path)
    assert wait_for(lambda: model.store.steps == 5)
    src.poll_interval = 1.0  # let the rewrite land between two polls
    with open(path, "r+b") as f:  # same inode, overwritten from byte 0, longer than before
        f.write(b"".join(encode_record(r) for r in [meta("b")] + [step(i) for i in range(30)]))
    src.poll_interval = POLL
    assert wait_for(lambda: model.resets == 1 and model.store.steps == 30)
    assert model.store.meta["run_id"] == "b"


def test_rewrite_keeping_the_first_line_restarts(tmp_path: Path, follow) -> None:
    """A hand-written log without a meta, written again from the start ("w" mode) with the
    same first line, grown past our offset between two polls: its new lines were read on
    from the old offset, two runs merged into one."""
    path = tmp_path / "run.jsonl"
    write(path, [step(i) for i in range(100)])
    src, model, _ = follow(path)
    assert wait_for(lambda: model.store.steps == 100)
    src.poll_interval = 1.0  # let the rewrite land between two polls
    time.sleep(2 * POLL)
    write(path, [step(0)] + [step(i, loss=5.0) for i in range(1, 300)], mode="wb")
    src.poll_interval = POLL
    assert wait_for(lambda: model.resets == 1 and model.store.steps == 300)
    assert "rewritten" in model.reset_reason and model.malformed == 0
    assert set(model.store.series("loss").ys[1:]) == {5.0}


def test_replacement_with_os_replace_restarts(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta("a")] + [step(i) for i in range(20)])
    src, model, _ = follow(path)
    assert wait_for(lambda: model.store.steps == 20)
    tmp = tmp_path / "new.tmp"
    write(tmp, [step(i) for i in range(100, 103)])  # no meta at all: still a new file
    os.replace(tmp, path)
    assert wait_for(lambda: model.resets == 1 and model.store.steps == 3)
    assert steps_of(model) == [100, 101, 102]
    assert "replaced" in model.reset_reason


def test_rotation_continues_the_same_run(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta("a")] + [step(i) for i in range(10)])
    src, model, _ = follow(path)
    assert wait_for(lambda: model.store.steps == 10)
    rotated = tmp_path / "run.jsonl.1"
    os.rename(path, rotated)
    write(rotated, [step(10), step(11)])  # the writer still had the old file open
    assert wait_for(lambda: model.store.steps == 12)
    # the source reads what the open file still gets and notices the name gone, in
    # either order (a busy machine showed the other one): wait for both
    assert wait_for(lambda: src.missing)
    write(path, [step(i) for i in range(12, 20)], mode="wb")  # then it reopened the path
    assert wait_for(lambda: model.store.steps == 20)
    assert steps_of(model) == list(range(20)) and model.resets == 0
    # a rotation whose new file starts with another run's meta is a new run
    os.rename(path, tmp_path / "run.jsonl.2")
    write(path, [meta("b"), step(0)], mode="wb")
    # (the store is new at the reset and holds no meta until the new file's is read)
    assert wait_for(lambda: model.resets == 1 and (model.store.meta or {}).get("run_id") == "b")
    assert steps_of(model) == [0]


def test_corrupt_line_is_skipped_and_counted(tmp_path: Path, follow) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta(), step(0)])
    with open(path, "ab") as f:
        f.write(b'{"kind": "step", "step": 1, "loss": \n')  # cut by a crash
        f.write(b"\x00\xff not json\n")
    write(path, [step(2)])
    src, model, updates = follow(path)
    assert wait_for(lambda: model.store.steps == 2)
    assert model.malformed == 2 and steps_of(model) == [0, 2]


def test_replay_stops_at_the_end_and_keeps_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "done.jsonl"
    write(path, [meta(), step(0), step(1)])
    with open(path, "ab") as f:
        f.write(encode_record(step(2)).rstrip(b"\n"))
    model = RunModel("done")
    FileSource(path, model, follow=False).run()  # inline, returns at end of file
    assert steps_of(model) == [0, 1, 2] and model.malformed == 0


def test_huge_log_shows_its_tail_first_then_the_whole_run(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    n = 3000
    write(path, [meta()] + [step(i) for i in range(n)])
    model = RunModel("big")
    seen: list[tuple[float | None, int | None, int]] = []

    def on_update(_: int) -> None:
        with model.lock:
            seen.append((model.loading, model.store.first_step, model.store.steps))

    FileSource(path, model, on_update, follow=False, tail_first=10_000, tail_bytes=8_000).run()
    loading, first, steps = seen[0]
    assert loading == 0.0 and first > 0 and steps < n  # the preview: the last steps only
    assert model.store.meta is not None  # the meta line is shown with the tail
    assert model.loading is None
    assert steps_of(model) == list(range(n)) and model.records == n + 1
    if model.engine is not None:
        assert model.engine.steps == n  # the rules saw the whole run, in order


def test_tail_first_ends_identical_to_a_plain_replay(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    recs = [meta()] + [step(i, grad_norm=1.0 + (i % 7)) for i in range(3000)]
    recs[1500]["loss"] = 80.0  # a spike
    recs[2500]["grad_norm"] = float("nan")
    recs.insert(2000, {"kind": "sys", "t": 5.0, "rss": 1e9})
    recs.append({"kind": "event", "type": "exit", "status": "ok"})
    write(path, recs)
    models = []
    for tail_first in (None, 20_000):
        model = RunModel("x")
        FileSource(path, model, follow=False, tail_first=tail_first, tail_bytes=9_000).run()
        models.append(model)
    plain, tailed = models
    assert plain.store.names() and set(plain.store.names()) == set(tailed.store.names())
    for name in plain.store.names():
        a, b = plain.store.series(name), tailed.store.series(name)
        assert list(a.xs()) == list(b.xs()), name
        assert [repr(v) for v in a.ys] == [repr(v) for v in b.ys], name  # NaN == NaN here
    assert plain.records == tailed.records and plain.store.events == tailed.store.events
    if plain.engine is not None:
        assert [(x.id, x.step) for x in plain.alerts()] == [(x.id, x.step) for x in tailed.alerts()]


def test_backfill_reads_in_few_big_blocks_and_parses_in_small_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read releases the GIL and takes it straight back, which starves the UI's event
    loop when reads come every millisecond (CPython's convoy effect): a backfill reads
    ``READ_BLOCK`` bytes per ``os.pread`` and parses them ``chunk_size`` at a time, and
    ends identical to a plain replay read in small chunks."""
    path = tmp_path / "big.jsonl"
    write(path, [meta()] + [step(i, grad_norm=1.0 + (i % 5)) for i in range(6000)])
    size = path.stat().st_size
    block, chunk = 64 << 10, 4096
    monkeypatch.setattr(sources, "READ_BLOCK", block)
    reads: list[int] = []
    fed: list[int] = []
    real_pread, real_feed = os.pread, LineDecoder.feed

    def pread(fd: int, n: int, off: int) -> bytes:
        reads.append(n)
        return real_pread(fd, n, off)

    def feed(self: LineDecoder, data: bytes) -> list[dict]:
        fed.append(len(data))
        return real_feed(self, data)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(LineDecoder, "feed", feed)
    tailed = RunModel("x")
    FileSource(
        path, tailed, follow=False, tail_first=20_000, tail_bytes=9_000, chunk_size=chunk
    ).run()
    passes = 2 if tailed.engine is not None else 1  # the charts, then the rules
    # the backfill's blocks (two passes), the tail, the head lines, the end-of-file reads.
    # Not counted: the follow loop's checks that the file is still the same one, a read of
    # its first line (tens of bytes) every 0.2 s while the backfill runs: how many there are
    # is how long the backfill took (a busy machine made 42), not how it reads
    data_reads = [n for n in reads if n > 1024]
    assert len(data_reads) <= passes * (size // block + 2) + 10, reads
    assert max(fed) <= chunk and len(fed) >= passes * size // chunk
    monkeypatch.setattr(os, "pread", real_pread)
    plain = RunModel("x")
    FileSource(path, plain, follow=False, tail_first=None, chunk_size=1000).run()
    assert steps_of(tailed) == steps_of(plain) == list(range(6000))
    assert list(tailed.store.series("grad_norm").ys) == list(plain.store.series("grad_norm").ys)
    if plain.engine is not None:
        assert tailed.engine.steps == plain.engine.steps == 6000
        assert [(x.id, x.step) for x in plain.alerts()] == [(x.id, x.step) for x in tailed.alerts()]


def test_live_appends_reach_the_preview_during_the_backfill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backfill, "PROGRESS", 0.0)  # a progress tick after every chunk
    path = tmp_path / "live.jsonl"
    n = 2000
    write(path, [meta()] + [step(i) for i in range(n)])
    model = RunModel("live")
    seen: list[tuple[float | None, int | None]] = []

    def on_update(_: int) -> None:
        if not seen:  # the preview is up: the training writes on
            write(path, [step(i) for i in range(n, n + 10)])
        with model.lock:
            seen.append((model.loading, model.store.last_step))

    FileSource(
        path, model, on_update, follow=False, tail_first=10_000, tail_bytes=8_000, chunk_size=4096
    ).run()
    assert any(loading is not None and last == n + 9 for loading, last in seen)
    assert steps_of(model) == list(range(n + 10)) and model.loading is None


def test_rules_catch_up_while_live_records_keep_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the charts are whole, the rules re-read the log; records appended meanwhile
    are charted at once and reach the engine exactly once, after the old ones."""
    monkeypatch.setattr(backfill, "PROGRESS", 0.0)
    path = tmp_path / "live.jsonl"
    n = 2000
    write(path, [meta()] + [step(i) for i in range(n)])
    model = RunModel("live")
    if model.engine is None:
        pytest.skip("rules engine not importable yet")
    seen: list[tuple[float | None, int | None]] = []

    def on_update(_: int) -> None:
        with model.lock:
            diagnosing, last = model.diagnosing, model.store.last_step
        if diagnosing is not None and last == n - 1:
            write(path, [step(i) for i in range(n, n + 5)])
        seen.append((diagnosing, last))

    src = FileSource(
        path, model, on_update, follow=False, tail_first=10_000, tail_bytes=8_000, chunk_size=4096
    )
    src.run()
    assert any(d is not None and last == n + 4 for d, last in seen)  # charted before adoption
    assert model.diagnosing is None and model._backlog is None
    assert model.engine.steps == n + 5 and model.engine.last_step == n + 4
    assert steps_of(model) == list(range(n + 5))


def test_stop_is_prompt_while_idle(tmp_path: Path) -> None:
    path = tmp_path / "idle.jsonl"
    write(path, [meta()])
    model = RunModel("idle")
    src = FileSource(path, model, poll_interval=0.25).start()
    assert src.wait_caught_up(5)
    src.stop(timeout=2.0)
    assert not src.alive and src.error is None


def test_update_callback_failure_stops_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write(path, [meta(), step(0)])

    def broken(_: int) -> None:
        raise RuntimeError("app closed")

    src = FileSource(path, RunModel("x"), broken, poll_interval=POLL).start()
    assert wait_for(lambda: not src.alive)
    assert "app closed" in src.error


def test_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as e:
        open_source(tmp_path / "nope.jsonl", RunModel("x"))
    assert "no such file" in str(e.value) and "\n" not in str(e.value)
    bad = tmp_path / "notes.jsonl"
    bad.write_text("hello\nworld\n")
    with pytest.raises(SourceError, match="not a dltop log"):
        open_source(bad, RunModel("x"))
    binary = tmp_path / "model.jsonl"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(SourceError, match="not a dltop log"):
        open_source(binary, RunModel("x"))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(SourceError, match="no .jsonl logs"):
        open_source(tmp_path / "empty_dir", RunModel("x"))
    starting = tmp_path / "starting.jsonl"
    starting.write_bytes(b'{"kind": "me')  # a run just starting: no complete line yet, fine
    open_source(starting, RunModel("x"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_permission_denied_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "secret.jsonl"
    write(path, [meta()])
    path.chmod(0)
    with pytest.raises(SourceError, match="permission denied"):
        open_source(path, RunModel("x"))


def test_directory_of_rank_files(tmp_path: Path, follow) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write(run / "worker-b.jsonl", [meta(rank=1), step(0)])
    write(run / "worker-a.jsonl", [meta(rank=0), step(0), step(1)])
    write(run / "rank2.jsonl", [step(0)])  # no meta yet: rank from the name
    (run / "run.jsonl.dltop-ticks.json").write_text("{}")
    files = list_rank_files(str(run))
    assert [(Path(f.path).name, f.rank) for f in files] == [
        ("worker-a.jsonl", 0),
        ("worker-b.jsonl", 1),
        ("rank2.jsonl", 2),
    ]
    src, model, _ = follow(run)
    assert isinstance(src, DirectorySource) and Path(src.path).name == "worker-a.jsonl"
    assert wait_for(lambda: model.store.steps == 2)
    write(run / "rank3.jsonl", [meta(rank=3)])
    assert wait_for(lambda: len(src.files) == 4, timeout=DirectorySource.REFRESH * 4)


def test_listing_a_folder_that_is_not_one_is_a_one_line_error(tmp_path: Path) -> None:
    """A job folder replaced by a file while followed: the listing's refresh gets a
    SourceError it keeps the old list on, never an OSError that stops rank 0's reader."""
    path = tmp_path / "job"
    path.write_text("")
    with pytest.raises(SourceError, match=f"cannot list {path}: Not a directory"):
        list_rank_files(str(path))


def test_reader_thread_and_ui_thread_share_the_model(tmp_path: Path, follow) -> None:
    """The UI decimates under the lock while the reader ingests: no torn reads."""
    path = tmp_path / "run.jsonl"
    write(path, [meta()])
    src, model, _ = follow(path)
    stop = threading.Event()
    problems: list[str] = []

    def ui() -> None:
        while not stop.is_set():
            with model.lock:
                s = model.store.series("loss")
                if s is not None:
                    d = model.store.decimate("loss", 0, max(1, model.store.last_step), 120)
                    if d.points != len(s):
                        problems.append(f"{d.points} != {len(s)}")

    t = threading.Thread(target=ui)
    t.start()
    for k in range(20):
        write(path, [step(i) for i in range(k * 100, k * 100 + 100)])
        time.sleep(0.01)
    assert wait_for(lambda: model.store.steps == 2000)
    stop.set()
    t.join()
    assert not problems


def test_a_run_resumed_into_the_same_log_continues_from_its_checkpoint(
    tmp_path: Path, follow
) -> None:
    """A training resumed from a checkpoint appends to its log: its steps go back. The
    later records replace the earlier ones from there, live, in a tail-first replay and in
    a plain one alike, and the steps stay sorted (every read stays a bisect)."""
    path = tmp_path / "run.jsonl"
    write(path, [meta(), *(step(i) for i in range(300))], mode="wb")
    src, model, _ = follow(path)
    assert wait_for(lambda: steps_of(model) == list(range(300)))
    resumed = [meta(pid=2), *(step(i, loss=5.0) for i in range(150, 3000))]
    write(path, resumed)  # the second process, from the checkpoint at step 150
    assert wait_for(lambda: steps_of(model) == list(range(3000)))
    with model.lock:
        assert model.store.resumes == [150] and model.store.series("loss").at_step(149)[1] < 1
        assert model.store.series("loss").at_step(150) == (150, 5.0)
    stores = []
    for tail_first in (None, 20_000):
        m = RunModel("x")
        FileSource(path, m, follow=False, tail_first=tail_first, tail_bytes=9_000).run()
        stores.append(m.store)
        assert list(m.store.step_x) == list(range(3000)), tail_first
        assert list(m.store.series("loss").ys) == list(model.store.series("loss").ys)
    assert stores[0].resumes == [150]
