"""The probe used in ways its authors did not plan for: every one recorded, or said once.

Found by using the probe as users do (a metric named ``t``, a helper that opens its own
``with probe:``, a second run through a closed probe, CUDA-only extras): each of these
lost data without a word.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from dltop.probe import Probe
from dltop.probe.decoding import read_records
from dltop.probe.records import GRAD_NORM, LOSS, StepRecords


def _records(path: Path, kind: str) -> list[dict[str, Any]]:
    recs, dec = read_records(str(path))
    assert dec.malformed == 0
    return [r for r in recs if r["kind"] == kind]


def _warnings(path: Path) -> list[str]:
    recs, _ = read_records(str(path))
    return [r["message"] for r in recs if r["kind"] == "event" and r.get("type") == "warning"]


def test_metrics_named_like_the_records_own_fields_are_said_not_swallowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sampling temperature logged as ``t`` vanished; ``eval(t=0.7)`` overwrote the
    record's time and ``eval(kind=2)`` made a line every reader skips."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, socket=False, system=False) as probe:
        for _ in range(3):
            probe.step(loss=1.0, t=0.7, kind="x", step_time=9.0, temperature=0.7, **{"": 2.0})
        probe.eval(t=0.7, kind=2, val_loss=0.5)
    steps = _records(log, "step")
    assert len(steps) == 3 and all(s["t"] > 1e9 and s["step_time"] < 9.0 for s in steps)
    assert steps[0]["temperature"] == 0.7 and steps[0][""] == 2.0  # an odd name is a name
    (ev,) = _records(log, "eval")
    assert ev["val_loss"] == 0.5 and ev["t"] > 1e9
    said = _warnings(log)
    for name, times in (("'t'", 2), ("'kind'", 2), ("'step_time'", 1)):  # step (and eval)
        assert sum(f"metric {name}" in m and "not logged" in m for m in said) == times
    assert "'temperature'" not in capsys.readouterr().err


def test_a_nested_with_block_does_not_close_the_probe(tmp_path: Path) -> None:
    """A helper that opens its own ``with probe:`` closed it on the way out: the outer
    loop's later steps were dropped without a word."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, socket=False, system=False) as probe:
        probe.step(loss=1.0)
        with probe:
            probe.step(loss=2.0)
        probe.step(loss=3.0)
    assert [s["loss"] for s in _records(log, "step")] == [1.0, 2.0, 3.0]
    (end,) = [r for r in read_records(str(log))[0] if r.get("type") == "exit"]
    assert end["status"] == "ok" and end["steps"] == 3


def test_a_closed_probe_says_it_records_nothing_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    probe = Probe(path=log, socket=False, system=False)
    with probe:
        probe.step(loss=1.0)
    with probe:  # a second run through the same probe
        for _ in range(5):
            probe.step(loss=2.0)
    err = capsys.readouterr().err
    assert err.count("this Probe is closed") == 2  # once for the block, once for its steps
    assert [s["loss"] for s in _records(log, "step")] == [1.0]


class _ReadBack:
    """Stands in for a CUDA read-back (``readback.DeviceBatch``): the CPU machine has none;
    the real one is checked on a GPU (``tests/probe/test_probe_cuda.py``)."""

    timing_event = None

    def __init__(self, values: list[float]) -> None:
        self._values = values

    def values(self, force: object) -> list[float]:
        return self._values


def test_a_step_whose_every_extra_is_a_device_value_is_recorded() -> None:
    """``probe.step(loss=loss, acc=acc)`` with CUDA tensors: no host extra left a dict for
    the read-back's values, and the writer dropped the whole step, loss included."""
    keys = [LOSS, "acc", GRAD_NORM]
    item = (0, 7, 1.7e9, None, None, 0.1, None, None, 0.05, None, None, None,
            (_ReadBack([0.5, 0.9, 3.0]), keys), None)  # fmt: skip
    rec = StepRecords().build(item, True)
    assert rec is not None
    assert (rec["step"], rec["loss"], rec["acc"], rec["grad_norm"]) == (7, 0.5, 0.9, 3.0)


def test_a_file_name_that_is_not_utf8_loses_no_record(tmp_path: Path) -> None:
    """Python holds an undecodable file-name byte as a lone surrogate; such a name in an
    exception message, a note or a metric's name made the line unencodable, and the crash
    went unrecorded (`dltop check` then exited 0 on a crashed run)."""
    import subprocess
    import sys

    name = os.fsdecode(b"caf\xe9.jpg")
    log = tmp_path / "run.jsonl"
    with pytest.raises(OSError), Probe(path=log, socket=False, system=False) as probe:
        probe.step(loss=1.0, **{f"acc_{name}": 0.5})
        probe.note(f"skipped {name}")
        raise OSError(f"corrupt image {name}")
    recs, dec = read_records(str(log))
    assert dec.malformed == 0
    (exc,) = [r for r in recs if r.get("type") == "exception"]
    assert exc["message"] == "corrupt image caf\\udce9.jpg"  # the byte, still told
    assert [r["text"] for r in recs if r.get("type") == "note"] == ["skipped caf\\udce9.jpg"]
    assert _records(log, "step")[0]["acc_caf\\udce9.jpg"] == 0.5
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "CRITICAL crash" in done.stdout


def test_odd_paths_and_run_ids_cost_only_their_own_part(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    """A NUL byte in `path=` raised ValueError out of `with Probe(...)`; a run id with a
    `/` ("exp/seed1") silently had no live socket ("No such file or directory")."""
    from dltop.probe import rendezvous

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    with Probe(path=str(tmp_path / "a\0b.jsonl"), socket=True, system=False) as probe:
        probe.step(loss=1.0)  # no log, the socket still serves
    assert "cannot open" in capfd.readouterr().err
    log = tmp_path / "run.jsonl"
    with Probe(path=log, run_id="exp/seed1", system=False) as probe:
        key = f"exp/seed1.{os.getpid()}"
        assert rendezvous.socket_path(key).exists()  # served while the run is on
        probe.step(loss=1.0)
    assert "no live socket" not in capfd.readouterr().err
    assert _records(log, "meta")[0]["run_id"] == "exp/seed1"


def test_the_probes_own_errors_are_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A torch dispatch error runs to 80 lines; it reached stderr and the log whole."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, socket=False, system=False) as probe:
        probe._error("one", RuntimeError("first line\n" + "dispatch table\n" * 80))
        probe._error("two", RuntimeError(""))
        probe._error("three", RuntimeError("x" * 5000))
    err = [line for line in capfd.readouterr().err.splitlines() if "probe error" in line]
    assert len(err) == 3 and all(len(line) < 450 for line in err)
    assert "first line ..." in err[0] and "dispatch" not in err[0]
    said = _warnings(log)
    assert len(said) == 3 and all("\n" not in m for m in said)


@pytest.mark.parametrize(
    ("given", "kept"),
    [("32", None), ([32], None), (True, None), (2.5, None), (float("nan"), None), (10**400, None),
     (-1, None), (32.0, 32)],
)  # fmt: skip
def test_a_batch_size_that_is_no_count_costs_the_step_nothing(
    tmp_path: Path, given: object, kept: int | None
) -> None:
    """``batch_size="32"`` made the writer's record builder raise (``bs / step_time``):
    every step's loss was lost, said only as "could not build a record"."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, socket=False, system=False) as probe:
        for i in range(3):
            probe.step(loss=1.0 + i, batch_size=given)  # type: ignore[arg-type]
    steps = _records(log, "step")
    assert [s["loss"] for s in steps] == [1.0, 2.0, 3.0]
    assert [s.get("batch_size") for s in steps] == [kept] * 3
    said = [m for m in _warnings(log) if "batch_size=" in m]
    assert len(said) == (0 if kept is not None else 1)  # once, not per step


@pytest.mark.parametrize(
    ("given", "kept"),
    [("7", [0, 1, 2]), ([7], [0, 1, 2]), (None, [0, 1, 2]), (7.0, [7, 8, 9]), (7.5, [0, 1, 2])],
)
def test_a_step_that_is_no_whole_number_keeps_the_probes_count(
    tmp_path: Path, given: object, kept: list[int]
) -> None:
    """``step="7"`` raised in ``step()`` (``step + 1``): the step was not recorded."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, socket=False, system=False) as probe:
        probe.step(loss=1.0, step=given)  # type: ignore[arg-type]
        probe.step(loss=2.0)
        probe.step(loss=3.0)
    steps = _records(log, "step")
    assert [s["step"] for s in steps] == kept
    assert [s["loss"] for s in steps] == [1.0, 2.0, 3.0]
