"""`dltop check` end to end, in a subprocess: report, --json shape, exit codes, bad sources.

Includes two real (tiny, CPU) torch trainings logged by the probe: a healthy MLP must
pass clean, the same MLP with lr=50 must be diagnosed as a numeric blow-up.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from rulekit import Run

ROOT = Path(__file__).resolve().parents[2]


def check(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def write_log(path: Path, run: Run, garbage: int = 0) -> Path:
    with open(path, "wb") as f:
        for rec in run.records():
            f.write(encode_record(rec))
        f.write(b"not json at all\n" * garbage)
    return path


def test_healthy_log_exits_0(tmp_path: Path) -> None:
    p = check(str(write_log(tmp_path / "ok.jsonl", Run())))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "status:  finished" in p.stdout and "alerts:  none" in p.stdout
    assert p.stderr == ""


def test_warning_exits_1_with_evidence_and_checklist(tmp_path: Path) -> None:
    p = check(str(write_log(tmp_path / "w.jsonl", Run(data_share=0.15))))
    assert p.returncode == 1, p.stdout
    assert "WARNING  data_bound" in p.stdout
    assert "evidence: data_wait_share=" in p.stdout
    assert "checklist:" in p.stdout  # the checklist helper's data files


def test_critical_json_shape(tmp_path: Path) -> None:
    run = Run(loss_at=lambda i, x: math.nan if i >= 300 else x)
    p = check(str(write_log(tmp_path / "nan.jsonl", run, garbage=2)), "--json")
    assert p.returncode == 2, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"status", "steps", "alerts", "skipped_lines", "source"}
    assert out["status"] == "finished" and out["steps"] == 1000 and out["skipped_lines"] == 2
    (a,) = [a for a in out["alerts"] if a["id"] == "nan_loss"]
    assert a["severity"] == "critical" and a["step"] == 300
    assert a["evidence"]["loss"] == "NaN"  # non-finite numbers as the log format writes them
    assert {
        "id",
        "severity",
        "step",
        "title",
        "evidence",
        "message",
        "active",
        "checklist",
        "checklist_id",
    } <= set(a)
    assert a["checklist_id"] == "nan_loss"
    steps: list[dict[str, Any]] = a["checklist"]  # the contract's list of steps
    assert steps and all(set(s) == {"id", "text", "mark", "evidence", "why", "how"} for s in steps)
    assert any(s["mark"] in ("yes", "no") for s in steps)  # the log answers some of them
    lr = next(s for s in steps if s["id"] == "lr_high")
    assert lr["why"].startswith("Too large a step") and "lr=1e-4" in lr["how"]


def test_an_unknown_checklist_language_is_a_usage_error(tmp_path: Path) -> None:
    """`--lang fr` gave English checklists and exit 0 as if all was well."""
    p = check(str(write_log(tmp_path / "ok.jsonl", Run())), "--lang", "fr")
    assert p.returncode == 3 and p.stdout == ""
    assert "no checklists in 'fr'" in p.stderr and "en, zh" in p.stderr
    assert len(p.stderr.splitlines()) == 1


def test_info_alerts_do_not_fail_the_check(tmp_path: Path) -> None:
    p = check(str(write_log(tmp_path / "conv.jsonl", Run(steps=1500, tau=60))), "--json")
    out = json.loads(p.stdout)
    assert [a["severity"] for a in out["alerts"]] and {a["severity"] for a in out["alerts"]} == {
        "info"
    }
    assert p.returncode == 0


def test_set_and_config_change_the_verdict(tmp_path: Path) -> None:
    log = str(write_log(tmp_path / "w.jsonl", Run(data_share=0.15)))
    assert check(log, "--set", "data_bound.warn=0.2").returncode == 0
    cfg = tmp_path / "t.toml"
    cfg.write_text("[data_bound]\nwarn = 0.2\n")
    assert check(log, "--config", str(cfg)).returncode == 0
    dump = check("--print-config")
    assert (
        dump.returncode == 0 and "[data_bound]" in dump.stdout and "floor_s = 60.0" in dump.stdout
    )


def test_directory_of_rank_files(tmp_path: Path) -> None:
    write_log(tmp_path / "rank0.jsonl", Run())
    write_log(tmp_path / "rank1.jsonl", Run(loss_at=lambda i, x: math.inf if i == 500 else x))
    p = check(str(tmp_path), "--json")
    assert p.returncode == 2
    out = json.loads(p.stdout)
    assert [f["path"].rsplit("/", 1)[-1] for f in out["files"]] == ["rank0.jsonl", "rank1.jsonl"]
    assert [(a["id"], a["file"].rsplit("/", 1)[-1]) for a in out["alerts"]] == [
        ("nan_loss", "rank1.jsonl")
    ]
    (tmp_path / "rank2.jsonl").write_text("")  # a rank that died before writing anything
    p = check(str(tmp_path))
    assert p.returncode == 2 and "rank2.jsonl is empty" in p.stdout


def _file(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text)
    return d / name


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d / "missing.jsonl", "no such file"),
        (lambda d: d, "holds no .jsonl log"),
        (lambda d: _file(d, "e.jsonl", ""), "is empty"),
        (lambda d: _file(d, "t.jsonl", "hello\nworld\n"), "not a dltop log"),
    ],
)
def test_unreadable_sources_exit_3_with_one_line(tmp_path: Path, make: Any, needle: str) -> None:
    p = check(str(make(tmp_path)))
    assert p.returncode == 3
    assert needle in p.stderr and "hint:" in p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert p.stdout == ""
    # a script reading `--json` gets its one object, with the error, not an empty stdout
    js = check(str(make(tmp_path)), "--json")
    assert js.returncode == 3 and js.stderr == p.stderr
    out = json.loads(js.stdout)
    assert out["status"] == "unknown" and out["steps"] == 0 and out["alerts"] == []
    assert needle in out["error"] and out["hint"] and out["source"] == str(make(tmp_path))


def test_a_bad_setting_under_json_is_an_object_too(tmp_path: Path) -> None:
    log = str(write_log(tmp_path / "ok.jsonl", Run(steps=10)))
    p = check(log, "--json", "--set", "data_bound.wran=1")
    assert p.returncode == 3 and "unknown threshold" in json.loads(p.stdout)["error"]
    assert (
        check("--json").returncode == 3
        and "no SOURCE" in json.loads(check("--json").stdout)["error"]
    )


def test_report_prints_how_to_fix_under_each_step(tmp_path: Path) -> None:
    p = check(
        str(
            write_log(tmp_path / "nan.jsonl", Run(loss_at=lambda i, x: math.nan if i >= 300 else x))
        )
    )
    lines = p.stdout.splitlines()
    i = next(n for n, line in enumerate(lines) if "learning rate high when the loss" in line)
    assert lines[i + 1].strip().startswith("fix: optimizer = torch.optim.AdamW")
    assert lines[i + 1].startswith(" " * 10)  # indented under the step's text


def test_steps_after_the_last_block_are_judged_without_an_exit_record(tmp_path: Path) -> None:
    """A run killed by SIGKILL writes no exit record: its last, unfinished block of steps
    must be judged all the same (here the loss diverges over the last 13 steps)."""

    def climb(i: int, x: float) -> float:
        return x * 2.0 ** (i - 990) if i >= 990 else x

    killed = check(str(write_log(tmp_path / "k.jsonl", Run(steps=1003, end=None, loss_at=climb))))
    exited = check(str(write_log(tmp_path / "e.jsonl", Run(steps=1003, loss_at=climb))))
    assert exited.returncode == 2 and "CRITICAL divergence" in exited.stdout
    assert killed.returncode == 2, killed.stdout
    assert "CRITICAL divergence" in killed.stdout


@pytest.mark.parametrize(
    "args", [["--bogus"], ["a.jsonl", "b.jsonl"], ["--set"], ["x.jsonl", "--lang"]]
)
def test_usage_errors_exit_3_not_2(args: list[str]) -> None:
    """2 means "a critical alert" to a CI script; a typo in the command line is "could not
    check" (3), in one line with a hint."""
    p = check(*args)
    assert p.returncode == 3, p.stderr
    assert p.stderr.startswith("dltop check: error:") and "hint:" in p.stderr
    assert p.stderr.count("\n") == 1 and p.stdout == ""
    assert check("--help").returncode == 0


def test_bad_setting_exits_3(tmp_path: Path) -> None:
    p = check(str(write_log(tmp_path / "ok.jsonl", Run(steps=10))), "--set", "data_bound.wran=1")
    assert p.returncode == 3 and "unknown threshold 'data_bound.wran'" in p.stderr


TRAIN = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from dltop.probe import Probe
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lr, path = float(sys.argv[1]), sys.argv[2]
    x = torch.randn(2048, 16)
    y = (x[:, :4].sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 2048, 32)] * 5
    with Probe(path=path, model=model, optimizer=opt, system=False) as probe:
        for xb, yb in probe.loader(batches[:300]):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            probe.step(loss=loss)
    """
)


def train(tmp_path: Path, lr: float) -> Path:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    log = tmp_path / f"lr{lr}.jsonl"
    subprocess.run(
        [sys.executable, str(script), str(lr), str(log)], check=True, timeout=240, cwd=ROOT
    )
    return log


@pytest.mark.slow
def test_real_healthy_training_passes_clean(tmp_path: Path) -> None:
    p = check(str(train(tmp_path, 0.05)), "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0, out["alerts"]
    assert out["status"] == "finished" and out["steps"] == 300


@pytest.mark.slow
def test_real_training_with_lr_50_blows_up(tmp_path: Path) -> None:
    p = check(str(train(tmp_path, 50.0)), "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 2
    ids = {a["id"] for a in out["alerts"] if a["severity"] == "critical"}
    assert ids & {"nan_loss", "nan_grad", "divergence", "grad_explosion"}, out["alerts"]


def test_the_same_checklist_is_printed_once_for_a_run_that_met_the_same_nan_again(
    tmp_path: Path,
) -> None:
    """A run resumed after each NaN has one alert per NaN: their checklists, the same
    marks and all, are printed in full once, then named (a 2 MB log made a 26 MB report)."""
    log = tmp_path / "resumed.jsonl"
    lines = [json.dumps({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})]
    t = 0.0
    for _ in range(3):
        for s in range(40):
            t += 0.1
            rec = {"kind": "step", "step": s, "t": t, "loss": "NaN" if s == 30 else 2 * 0.97**s}
            lines.append(json.dumps(rec))
    log.write_text("\n".join(lines) + "\n")
    out = check(str(log)).stdout
    assert out.count("CRITICAL nan_loss  step 30") == 3
    assert out.count("  checklist:\n") == 1
    assert out.count("  checklist: as for nan_loss at step 30 above") == 2
    full = json.loads(check(str(log), "--json").stdout)
    steps = [a["checklist"] for a in full["alerts"] if a["id"] == "nan_loss"]
    assert len(steps) == 3 and steps[0] and steps[0] == steps[1] == steps[2]  # JSON: whole


# a `dltop check` whose reading is stopped by Ctrl-C: each check of a file says "ready",
# then blocks (in worker processes too: forked, they have the same check_file). SIGINT
# as a terminal's foreground command has it: a test suite started in the background
# (`cmd &`) passes it on ignored, and Python then keeps it ignored (no KeyboardInterrupt)
_INTERRUPTED = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from dltop.tui import check_cmd, cli

def slow(*args, **kwargs):
    os.write(1, b"ready\\n")  # one write: the job's workers say it at once on one pipe
    time.sleep(60)

check_cmd.check_file = slow
check_cmd.PARALLEL_MIN_BYTES = 0  # a job's ranks in workers, however small
sys.exit(cli.main([sys.argv[1], sys.argv[2]]))
"""


def ctrl_c(command: str, source: Path) -> tuple[int, str, float]:
    """Run ``dltop COMMAND SOURCE`` in its own process group, press Ctrl-C once it reads
    (SIGINT to the whole group, as a terminal sends it: workers included); its exit
    status, its stderr and how long it took to end."""
    import signal
    import time

    p = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED, command, str(source)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        t = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    return p.returncode, err, took


@pytest.mark.parametrize("command", ["check", "report"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path, command: str) -> None:
    log = write_log(tmp_path / "ok.jsonl", Run())
    code, err, _ = ctrl_c(command, log)
    assert code == 130, err
    assert err == f"dltop {command}: interrupted\n" and "Traceback" not in err
    assert not list(tmp_path.glob("*.report*"))  # an interrupted report writes nothing


_PROGRESS = """
import sys
from dltop.tui import check_progress, cli

check_progress.AFTER_S = 0.0  # show it at once (a real check shows it after 1 s)
check_progress.EVERY_S = 0.0
sys.exit(cli.main(["check", sys.argv[1]]))
"""


def test_a_terminal_sees_how_far_the_check_got_and_a_clean_line_after(tmp_path: Path) -> None:
    """On a terminal's stderr: "dltop check: N % of X" redrawn in place, erased before the
    report; stdout (the report) is untouched. A pipe gets nothing (the other tests: an
    empty stderr)."""
    import pty

    log = write_log(tmp_path / "ok.jsonl", Run(steps=3000))
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(
            [sys.executable, "-c", _PROGRESS, str(log)],
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        os.close(slave)
        out, _ = p.communicate(timeout=60)
        seen = b""
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not data:
                break
            seen += data
    finally:
        os.close(master)
    assert p.returncode == 0 and out.splitlines()[1].startswith("dltop check: ")  # 1st: verdict
    text = seen.decode()
    assert "\rdltop check: " in text and " % of " in text
    assert text.endswith("\r\x1b[K")  # the report starts on a clean line
