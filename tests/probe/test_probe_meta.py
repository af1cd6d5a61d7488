"""The meta record (dltop.probe.meta): complete, never raising, never importing torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dltop.probe.decoding import decode_line
from dltop.probe.encoding import encode_record
from dltop.probe.meta import build_meta
from dltop.probe.nvml import Nvml
from dltop.probe.schema import META, SCHEMA_VERSION

REAL_GPU = Nvml().init()
FIELDS = {
    "kind", "v", "run_id", "t", "host", "pid", "argv", "cwd", "python", "platform", "dltop",
    "torch", "cuda", "devices", "rank", "world_size", "local_rank", "log_path", "notes",
}  # fmt: skip
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def _meta_in_fresh_process(code: str = "", env: dict[str, str] | None = None) -> dict:
    script = f"""
import json, sys
{code}
from dltop.probe.meta import build_meta
from dltop.probe.encoding import encode_record
m = build_meta("run-7", "logs/x.jsonl")
sys.stdout.write(json.dumps({{"meta": encode_record(m).decode(), "torch": "torch" in sys.modules}}))
"""
    res = subprocess.run(
        [sys.executable, "-c", script, "--lr", "3e-4"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or CLEAN_ENV,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    meta = decode_line(out["meta"])
    assert meta is not None
    meta["_torch_loaded"] = out["torch"]
    return meta


def test_meta_without_torch_does_not_import_it() -> None:
    meta = _meta_in_fresh_process()
    assert meta.pop("_torch_loaded") is False
    assert set(meta) == FIELDS
    assert meta["kind"] == META and meta["v"] == SCHEMA_VERSION and meta["run_id"] == "run-7"
    assert meta["torch"] is None and meta["cuda"] is None
    assert meta["argv"] == ["-c", "--lr", "3e-4"]
    assert meta["pid"] > 0 and meta["pid"] != os.getpid()
    assert meta["python"] == ".".join(map(str, sys.version_info[:3]))
    assert meta["log_path"] == os.path.abspath("logs/x.jsonl")
    assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (0, 1, 0)
    if REAL_GPU:
        assert meta["devices"][0]["type"] == "cuda" and meta["notes"] == []
    else:
        assert meta["devices"] == [{"type": "cpu", "cpus": os.cpu_count()}]
        (note,) = meta["notes"]  # exactly one note saying why GPU metrics are N/A
        assert note.startswith("no NVIDIA GPU: NVML unavailable (") and "N/A" in note


def test_meta_reports_the_torch_the_script_imported() -> None:
    meta = _meta_in_fresh_process("import torch")
    assert meta.pop("_torch_loaded") is True
    import torch

    assert meta["torch"] == torch.__version__
    assert meta["cuda"] == torch.version.cuda  # None on a CPU build


def test_ranks_come_from_the_torchrun_environment() -> None:
    env = dict(CLEAN_ENV, RANK="3", WORLD_SIZE="8", LOCAL_RANK="1")
    meta = _meta_in_fresh_process(env=env)
    assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (3, 8, 1)
    env = dict(CLEAN_ENV, RANK="5", WORLD_SIZE="8")
    meta = _meta_in_fresh_process(env=env)
    assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (5, 8, None)


def test_an_initialised_process_group_wins_over_the_environment(tmp_path: Path) -> None:
    init = f"""
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
"""
    env = dict(CLEAN_ENV, RANK="5", WORLD_SIZE="8", LOCAL_RANK="2")
    meta = _meta_in_fresh_process(init, env=env)
    assert (meta["rank"], meta["world_size"], meta["local_rank"]) == (0, 1, 2)


def test_meta_survives_a_deleted_working_directory(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    here = os.getcwd()
    os.chdir(gone)
    try:
        gone.rmdir()
        meta = build_meta("r", None)
    finally:
        os.chdir(here)
    assert meta["cwd"] is None and meta["log_path"] is None
    assert meta["host"] and meta["run_id"] == "r"


def test_meta_round_trips_through_the_log_format() -> None:
    meta = build_meta("round-trip", "x.jsonl")
    assert decode_line(encode_record(meta)) == meta


@pytest.mark.skipif(REAL_GPU, reason="checks the no-GPU path")
def test_meta_note_is_written_once_per_record_not_accumulated() -> None:
    first = build_meta("a", None)
    second = build_meta("b", None)
    assert len(first["notes"]) == len(second["notes"]) == 1
    assert first["notes"] == second["notes"]


def _documented_fields() -> set[str]:
    """Field names in the first column of the tables of docs/log-format.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "log-format.md").read_text()
    names: set[str] = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([a-z_]+)`", first))
    return names


def test_every_field_this_code_writes_is_documented() -> None:
    from dltop.probe.crash import CrashRecorder
    from dltop.probe.memory import memory_state
    from dltop.probe.system import SystemSampler

    documented = _documented_fields()
    meta = build_meta("doc", "x.jsonl")
    missing = set(meta) - documented - {"kind"}
    for dev in meta["devices"]:
        missing |= set(dev) - documented
    sampler = SystemSampler(lambda r: None)
    sampler._setup()
    missing |= set(sampler.sample() or {}) - documented - {"kind"}
    events: list[dict] = []
    rec = CrashRecorder(events.append, lambda fsync: None, lambda: 1)
    try:
        try:
            raise OSError("inner")
        except OSError as e:
            raise KeyboardInterrupt from e
    except KeyboardInterrupt as e:
        rec.record(e)
    for ev in events:
        missing |= set(ev) - documented - {"kind", "type"}
        for frame in ev["traceback"]:
            missing |= set(frame) - documented
    oom = memory_state(MemoryError(), "you tried to allocate 10 bytes")
    missing |= set(oom) - documented
    assert not missing, f"fields missing from docs/log-format.md: {sorted(missing)}"
