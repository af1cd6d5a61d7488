"""Other tools' logs are streamed: memory follows the batch, not the file.

Each reader runs in a child process that reports its own peak RSS, so the figure is the
reader's and not this test session's. The old readers parsed a whole trainer_state.json
into dicts (refusing files over 64 MiB) and held every converted record at once.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="peak RSS read from /proc (Linux)"
)

CHILD = """
import json, sys
from dltop.tui.core.sources import foreign
log = foreign.load(sys.argv[1])
kinds = {}
for batch in log.batches():
    for r in batch:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
# VmHWM: this process's own peak (ru_maxrss keeps the parent's across fork and exec)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"kinds": kinds, "rss_mb": int(hwm) / 1024, "notes": log.notes}))
"""


def _read(path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
def test_a_trainer_state_over_64_mib_streams_in_bounded_memory(tmp_path: Path) -> None:
    n = 480_000
    path = tmp_path / "trainer_state.json"
    with path.open("w") as f:
        f.write(f'{{\n  "global_step": {n},\n  "max_steps": {n},\n  "log_history": [\n')
        for i in range(1, n + 1):
            loss = 2.0 * math.exp(-i / 1e5) + 0.1
            entry = {"epoch": i / 1000, "grad_norm": 1.25, "learning_rate": 1e-4}
            entry |= {"loss": loss, "step": i}
            f.write(json.dumps(entry, indent=6)[:-1] + "    }" + ("," if i < n else "") + "\n")
        f.write("  ]\n}\n")
    size_mb = path.stat().st_size / 2**20
    assert size_mb > 64  # the old readers refused this file
    got = _read(path)
    assert got["kinds"] == {"meta": 1, "step": n, "event": 1}
    # the file is mapped (its pages count in RSS as they are read), plus one raw slice
    # per entry; the parsed entries live one batch at a time (parsed whole, they take
    # several hundred MB)
    assert float(got["rss_mb"]) < size_mb + 90, got  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_long_metrics_csv_streams_in_bounded_memory(tmp_path: Path) -> None:
    n = 600_000
    path = tmp_path / "metrics.csv"
    with path.open("w") as f:
        f.write("epoch,step,train_loss_step,lr-AdamW,val_loss,train_acc_step\n")
        for i in range(n):
            val = "0.5" if i % 5000 == 4999 else ""
            f.write(f"{i // 1000},{i},{2.0 * math.exp(-i / 1e5) + 0.1:.5f},0.0001,{val},0.9\n")
    got = _read(path)
    kinds = got["kinds"]
    assert isinstance(kinds, dict) and kinds["step"] == n and kinds["eval"] == n // 5000
    assert float(got["rss_mb"]) < 70, got  # type: ignore[arg-type]


@pytest.mark.slow  # writing 150k events through TensorBoard's writer takes half a minute
def test_a_long_event_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    n = 150_000
    w = EventFileWriter(str(tmp_path))
    for i in range(n):
        v = [
            Summary.Value(tag="train/loss", simple_value=2 * math.exp(-i / 1e5) + 0.1),
            Summary.Value(tag="train/learning_rate", simple_value=1e-4),
            Summary.Value(tag="train/accuracy", simple_value=0.5),
        ]
        w.add_event(Event(wall_time=1.7e9 + i * 0.1, step=i, summary=Summary(value=v)))
    w.close()
    got = _read(tmp_path)
    kinds = got["kinds"]
    assert isinstance(kinds, dict) and kinds["step"] == n
    assert float(got["rss_mb"]) < 110, got  # type: ignore[arg-type]
