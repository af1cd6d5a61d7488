"""The dashboard's display data, computed without a UI (tui/core/present/view_model.py, panels.py,
ticks.py): what the header, panels, banner and badges would show for a real log."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dltop.probe.decoding import read_records
from dltop.tui.core.diagnosis.ticks import Ticks, sidecar_path
from dltop.tui.core.present import view_model as vm
from dltop.tui.core.rules.alerts import Alert
from dltop.tui.core.store.run import RunModel
from dltop.tui.core.text import fmt
from test_app_support import NAN_STEP, T0, end_time, write_log


def _model(tmp_path: Path, scenario: str, steps: int) -> RunModel:
    log = write_log(tmp_path / f"{scenario}.jsonl", scenario, steps)
    records, dec = read_records(str(log))
    model = RunModel(str(log))
    model.ingest(records, dec.malformed)
    return model


def test_header_is_computed_from_the_log_and_a_fixed_clock(tmp_path: Path) -> None:
    model = _model(tmp_path, "healthy", 100)
    info = vm.header_info(model, end_time(100) + 5, vm.ViewState(), follow=True)
    assert (info.run, info.host, info.pid, info.step) == ("demo-run", "testhost", "4242", "99")
    assert info.age == "last record 5s ago"
    assert info.rate == "10 steps/s"  # step_time is 0.1 s
    assert info.elapsed == "0:10"
    assert info.skipped == 0 and info.mode == ""
    paused = vm.header_info(model, end_time(100), vm.ViewState(paused=True), follow=False)
    assert "paused" in paused.mode and "replay" in paused.mode


def test_panels_decimate_and_keep_nan_marks(tmp_path: Path) -> None:
    model = _model(tmp_path, "nan", NAN_STEP + 10)
    data = vm.panel_chart(model, "loss", vm.ViewState(), 40)
    raw = next(t for t in data.traces if t.name == "loss")
    assert len(raw.hi) == 40 and (data.start, data.end) == (0, NAN_STEP + 9)
    assert raw.bad[-1] and not raw.bad[0], "the NaN tail is marked in the last bucket"
    assert "loss NaN" in data.legend
    names = [t.name for t in data.traces]
    assert names == ["loss", "smooth(0.6)", "eval"]
    smooth_off = vm.panel_chart(model, "loss", vm.ViewState(smoothing=0.0), 40)
    assert [t.name for t in smooth_off.traces] == ["loss", "eval"]
    at = vm.panel_chart(model, "loss", vm.ViewState(cursor=10), 40)
    assert at.legend.startswith("@10 loss ")
    grad = vm.panel_chart(model, "grad_norm", vm.ViewState(), 40)
    assert grad.log and any(grad.traces[0].bad)


def test_panel_signature_changes_only_with_its_data_or_the_view(tmp_path: Path) -> None:
    model = _model(tmp_path, "healthy", 50)
    state = vm.ViewState()
    before = {p.key: vm.panel_signature(model, p.key, state) for p in vm.PANELS}
    model.ingest([{"kind": "eval", "step": 49, "t": T0, "loss": 0.5}])
    after = {p.key: vm.panel_signature(model, p.key, state) for p in vm.PANELS}
    assert [k for k in before if before[k] != after[k]] == ["loss"]
    logged = vm.panel_signature(model, "loss", vm.ViewState(log_loss=True))
    assert (
        logged != after["loss"]
        and vm.panel_signature(model, "lr", vm.ViewState(log_loss=True)) == after["lr"]
    )


def test_cpu_run_memory_is_rss_and_gpu_is_na_with_the_reason(tmp_path: Path) -> None:
    model = _model(tmp_path, "healthy", 30)
    mem = vm.panel_chart(model, "memory", vm.ViewState(), 20)
    assert [t.name for t in mem.traces] == ["rss"] and mem.unit == "B"
    assert "NVML" in (vm.gpu_na_reason(model) or "")
    gpu_model = _model(tmp_path, "gpu", 30)
    assert vm.gpu_na_reason(gpu_model) is None
    gpu = vm.panel_chart(gpu_model, "gpu", vm.ViewState(), 20)
    assert "util 8" in gpu.legend and "mem 19%" in gpu.legend  # 3 GiB of 16 GiB
    cuda = vm.panel_chart(gpu_model, "memory", vm.ViewState(), 20)
    assert [t.name for t in cuda.traces] == ["alloc", "reserved", "limit"]


def test_crash_info_and_alert_windows(tmp_path: Path) -> None:
    model = _model(tmp_path, "crashed", 60)
    info = vm.crash_info(model)
    assert info is not None and info.step == 59
    assert info.exception.startswith("RuntimeError: mat1 and mat2")
    assert "loss" in info.last_values and info.diagnosis
    assert vm.crash_info(_model(tmp_path, "healthy", 10)) is None
    a = Alert("loss_spike", "warning", 500, "Loss spike", "x", last_step=510)
    lo, hi = vm.alert_window(a, 0, 1000)
    assert lo < 500 and hi > 510 and hi - lo < 1000
    b = Alert("nan_loss", "critical", 700, "NaN", "y")
    keys = [vm.next_alert_key([a, b], None), vm.next_alert_key([a, b], vm.alert_key(b))]
    assert keys == ["nan_loss@700", "loss_spike@500"], "newest first, then cycles"
    assert vm.next_alert_key([], None) is None


def test_cursor_moves_one_column_and_stays_in_the_window(tmp_path: Path) -> None:
    model = _model(tmp_path, "healthy", 1000)
    state = vm.ViewState()
    first = vm.move_cursor(model, state, 1, columns=100)
    assert first == 0
    nxt = vm.move_cursor(model, vm.ViewState(cursor=first), 1, columns=100)
    assert nxt == 10  # 1000 steps over 100 columns
    assert vm.move_cursor(model, vm.ViewState(cursor=999), 1, columns=100) == 999
    assert vm.window_around(model, 500) == (401, 599)  # +- a tenth of the run


def test_ticks_live_in_a_sidecar_and_survive_a_restart(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 5)
    content = log.read_bytes()
    ticks = Ticks(str(log))
    assert ticks.toggle("nan_loss@3", "lower_lr") is True
    assert sidecar_path(log).name == "run.jsonl.dltop-ticks.json"
    assert json.loads(sidecar_path(log).read_text())["ticks"] == {"nan_loss@3": ["lower_lr"]}
    assert Ticks(str(log)).ticked("nan_loss@3") == {"lower_lr"}
    assert ticks.toggle("nan_loss@3", "lower_lr") is False
    assert Ticks(str(log)).ticked("nan_loss@3") == set()
    assert log.read_bytes() == content
    sidecar_path(log).write_text("{broken")
    assert Ticks(str(log)).error is not None  # a damaged sidecar is reported, not fatal


def test_formatting() -> None:
    assert fmt.duration(3725) == "1:02:05" and fmt.duration(65) == "1:05"
    assert fmt.duration(3 * 86400 + 7200 + 5) == "3d 2h"
    assert fmt.age(2.4) == "2s ago" and fmt.age(None) == ""


def test_throughput_from_step_time_redraws_when_step_time_changes(tmp_path: Path) -> None:
    model = RunModel("r")
    model.ingest([{"kind": "step", "step": i, "t": T0 + i, "step_time": 0.5} for i in range(10)])
    state = vm.ViewState(window=(0, 100))  # a fixed window: only the data can change it
    before = vm.panel_signature(model, "throughput", state)
    assert "steps/s 2" in vm.panel_chart(model, "throughput", state, 20).legend
    model.ingest([{"kind": "step", "step": 10, "t": T0 + 10, "step_time": 0.25}])
    assert vm.panel_signature(model, "throughput", state) != before
    assert "steps/s 4" in vm.panel_chart(model, "throughput", state, 20).legend


def test_step_time_legend_names_data_wait_first(tmp_path: Path) -> None:
    model = _model(tmp_path, "data_bound", 50)
    legend = vm.panel_chart(model, "step_time", vm.ViewState(), 40).legend
    assert legend.startswith("data wait ") and "compute " in legend and "step " in legend
    names = [t.name for t in vm.panel_chart(model, "step_time", vm.ViewState(), 40).traces]
    assert names[-1] == "data wait", "drawn last: on top of the others"


def test_signal_death_gets_a_banner_with_the_signal_and_last_values(tmp_path: Path) -> None:
    model = _model(tmp_path, "killed", 60)
    info = vm.crash_info(model, model.status(end_time(60) + 5))
    assert info is not None and info.label == "KILLED" and info.step == 59
    assert info.exception == "terminated by SIGTERM" and "scheduler" in info.summary
    assert info.last_values.startswith("loss ")
    # Ctrl-C is the person's choice: no banner; a signal the run survived: no banner
    for sig, steps_after in (("SIGINT", 0), ("SIGTERM", 5)):
        m = RunModel("r")
        m.ingest([{"kind": "step", "step": i, "loss": 1.0} for i in range(10)])
        m.ingest([{"kind": "event", "type": "signal", "signal": sig, "step": 9}])
        m.ingest([{"kind": "step", "step": 10 + i, "loss": 1.0} for i in range(steps_after)])
        assert vm.crash_info(m) is None, sig


def test_a_vanished_process_gets_a_banner_with_the_status_reason(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # a real pid, now dead
    proc.wait()
    model = RunModel("r")
    now = time.time()
    model.ingest(
        [
            {"kind": "meta", "v": 1, "run_id": "r", "host": socket.gethostname(),
             "pid": proc.pid, "t": now - 5},
            *({"kind": "step", "step": i, "t": now - 4 + i * 0.01, "loss": 2.0} for i in range(20)),
        ]
    )  # fmt: skip
    state = model.status(now)
    if state is None:
        pytest.skip("rules engine not importable")
    assert state.status == "crashed"
    info = vm.crash_info(model, state)
    assert info is not None and f"process {proc.pid} is gone" in info.exception
    assert info.step == 19 and info.last_values == "loss 2"
    assert "OOM killer" in info.summary
    header = vm.header_info(model, now, vm.ViewState(), follow=True, run_state=state)
    assert header.status == "crashed" and header.reason == state.reason


def test_header_counts_dropped_records_and_resumes(tmp_path: Path) -> None:
    from dltop.tui.app.header import render_header

    model = _model(tmp_path, "healthy", 30)
    info = vm.header_info(model, end_time(30), vm.ViewState(), follow=True)
    assert info.dropped == 0 and "dropped" not in render_header(info).plain
    for n in (12, 3):  # the live socket's notices that this viewer fell behind
        model.ingest([{"kind": "event", "type": "dropped", "t": T0, "records": n, "total": 15}])
    info = vm.header_info(model, end_time(30), vm.ViewState(), follow=True)
    assert info.dropped == 15 and "15 records dropped" in render_header(info).plain
    model.ingest([{"kind": "step", "step": 20, "t": T0 + 40, "loss": 1.0}])  # resumed at 20
    info = vm.header_info(model, end_time(30), vm.ViewState(), follow=True)
    assert "resumed at 20" in info.mode and model.store.last_step == 20
    assert info.gpu == "GPU n/a"
    assert "GPU n/a" in render_header(info, compact=True).plain
    assert "GPU n/a" not in render_header(info).plain  # the wide layout has the GPU panel


def test_goto_steps_are_clamped_to_the_run(tmp_path: Path) -> None:
    model = _model(tmp_path, "healthy", 300)
    assert vm.clamp_step(model, 150) == (150, None)
    step, note = vm.clamp_step(model, -100)  # type: ignore[misc]
    assert step == 0 and note is not None and "before the run" in note
    step, note = vm.clamp_step(model, 5000)  # type: ignore[misc]
    assert step == 299 and note is not None and "past the run" in note
    assert vm.window_around(model, 5000) == (270, 299)
    assert vm.clamp_step(RunModel("empty"), 3) is None


def test_the_checklist_that_opens_by_itself_is_the_first_critical_alert() -> None:
    from dltop.tui.core.rules.alerts import Alert

    def alert(aid: str, step: int | None, severity: str) -> Alert:
        return Alert(id=aid, severity=severity, step=step, title=aid, message=aid)

    assert vm.alert_to_explain([]) is None
    assert vm.alert_to_explain([alert("loss_spike", 5, "warning")]) is None  # warnings wait
    alerts = [
        alert("nan_loss", 129, "critical"),
        alert("loss_spike", 100, "warning"),
        alert("grad_explosion", 116, "critical"),
        alert("nan_grad", 125, "critical"),
    ]
    assert vm.alert_to_explain(alerts) == "grad_explosion@116"
    assert vm.alert_to_explain(list(reversed(alerts))) == "grad_explosion@116"  # order-free


def test_checklist_title_is_not_said_twice() -> None:
    """A crash alert and its checklist can share a title; the pane says it once."""
    import tempfile

    from dltop.tui.core.store.run import RunModel
    from test_app_support import write_log

    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(Path(tmp) / "crashed.jsonl", "crashed", 60)
        model = RunModel("crashed")
        model.ingest(read_records(str(log))[0])
        (alert,) = [a for a in model.alerts() if a.id == "crash"]
        title, steps = vm.checklist_view(model, alert, "en")
        assert steps and title.count(alert.title) == 1, title


def test_an_ended_run_reports_its_average_speed(tmp_path: Path) -> None:
    # 180 steps (0..179) over 18 s from the meta record to the last step: the whole run's
    # speed, not the median of its last steps
    model = _model(tmp_path, "crashed", 180)
    info = vm.header_info(model, end_time(180) + 5, vm.ViewState(), follow=False)
    assert info.rate == f"{179 / 18.0:.3g} steps/s" and info.elapsed == "0:18"
