"""End to end: every demo, run the way a newcomer runs it, ends with its own alert.

Each demo runs headless through the real command (``dltop demo NAME --no-ui``) in a
real subprocess with real torch, and its log goes through the real ``dltop check
--json``. The expected alert and its step budget come from the demo catalogue
(``dltop.demos._common.DEMOS``), the same table ``dltop demo --list`` prints. Most demos
take 10-80 s, so they are marked slow (``make test-all``); ``healthy``, ``nan`` and
``crash`` stay in the default run. One more test drives ``dltop demo`` with its viewer
inside tmux and quits it with ``q``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dltop.demos._common import DEMOS
from dltop.probe.decoding import read_records

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
ENV = {**os.environ, "DLTOP_DEMO_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _dltop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "dltop.tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=ENV,
    )


def run_demo(name: str, tmp_path: Path) -> tuple[Path, str]:
    """``dltop demo NAME --no-ui``: returns the log and the demo's stdout."""
    log = tmp_path / f"demo-{name}.jsonl"
    proc = _dltop("demo", name, "--no-ui", "--fast", "--out", str(log), timeout=540)
    assert proc.returncode == 0, (
        f"dltop demo {name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    )
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1] == str(log), (
        f"--no-ui must print the log path last, got {lines[-1:]}"
    )
    assert f"dltop check {log}" in proc.stderr, "the hint to run dltop check is missing"
    return log, proc.stdout


def check(log: Path) -> dict:
    proc = _dltop("check", str(log), "--json")
    assert proc.returncode in (0, 1, 2), (
        f"dltop check failed ({proc.returncode}): {proc.stderr[-2000:]}"
    )
    return json.loads(proc.stdout)


def _params() -> list:
    return [
        pytest.param(name, marks=[pytest.mark.slow] if demo.slow else [], id=name)
        for name, demo in DEMOS.items()
    ]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", _params())
def test_demo_ends_with_its_alert(name: str, tmp_path: Path) -> None:
    demo = DEMOS[name]
    log, out = run_demo(name, tmp_path)

    first = out.splitlines()[0]
    assert first.startswith(f"{name}: ") and first.endswith("."), (
        f"the demo must announce itself first: {first!r}"
    )

    report = check(log)
    if demo.steps:  # the pace spreads this many steps over PACE_SECONDS: it must stay true
        n = report["steps"]
        assert 0.7 * demo.steps <= n <= 1.3 * demo.steps, (
            f"{name}: {n} steps, paced for {demo.steps}"
        )
    verdict = report["verdict"]  # the one line every surface starts with (the contract)
    assert verdict and len(verdict) <= 400 and "\n" not in verdict, verdict
    assert "normally" not in report["reason"], report["reason"]
    if demo.alert is None:
        assert report["alerts"] == [], f"{name} must stay quiet, got {report['alerts']}"
        assert report["status"] == "finished"
        assert verdict.endswith("; no problem found"), verdict
        return
    loud = [a for a in report["alerts"] if a["severity"] in ("warning", "critical")]
    crashed = ("crashed at step", "out of GPU memory", "out of host memory")
    assert any(a["title"] in verdict for a in loud) or verdict.startswith(crashed), (
        f"{name}: the verdict names none of its faults: {verdict!r}"
    )
    assert " — " in verdict, f"{name}: the verdict says what to do first: {verdict!r}"
    ours = [a for a in report["alerts"] if a["id"] == demo.alert]  # an alert may come back later
    assert ours, f"{name}: expected '{demo.alert}', dltop check said {report}"
    steps = [a["step"] for a in ours]
    assert None not in steps, f"{name}: a '{demo.alert}' alert without a step: {ours}"
    step = min(steps)  # the budget is checked for every demo: no alert is exempt
    assert step <= demo.budget, (
        f"{name}: '{demo.alert}' first held at step {step}, after its budget of {demo.budget}"
    )
    if demo.alert in ("oom", "crash"):
        assert report["status"] == "crashed"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_oom_is_a_real_allocator_failure_with_memory_state(tmp_path: Path) -> None:
    log, _ = run_demo("oom", tmp_path)
    records, _ = read_records(str(log))
    ooms = [r for r in records if r.get("kind") == "event" and r.get("type") == "oom"]
    assert len(ooms) == 1, "the probe must record exactly one OOM"
    event = ooms[0]
    assert (
        "can't allocate memory" in event["message"] or "out of memory" in event["message"].lower()
    )
    assert event["memory"]["requested"] > 0, "the allocator's failed request must be on record"
    # the cap the demo set on itself held: the process never came near the machine's memory
    rss = max(r["rss"] for r in records if r.get("kind") == "sys")
    assert rss < 2 * 2**30


@pytest.mark.slow
def test_a_paced_demo_waits_in_compute_never_in_data(tmp_path: Path) -> None:
    """The pace a person watches at must not make a healthy demo look data-bound: the
    wait lands after ``probe.step()``, in the step's compute time."""
    code = f"""
import time, torch
from dltop.demos._common import Pacer
from dltop.probe import Probe
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
pace = Pacer(0.05)
t0 = time.monotonic()
with Probe(path={str(tmp_path / "p.jsonl")!r}, model=model, optimizer=opt, system=False) as probe:
    for x in probe.loader([torch.randn(8, 4) for _ in range(20)]):
        loss = model(x).pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
        probe.step(loss=loss)
        pace()
print(time.monotonic() - t0)
"""
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) >= 0.9, "20 steps at 50 ms apart"
    records, _ = read_records(str(tmp_path / "p.jsonl"))
    steps = [r for r in records if r.get("kind") == "step"][1:]  # the first has no interval
    assert steps and all(r["data_time"] < 0.02 for r in steps), steps
    assert sum(r["compute_time"] for r in steps) / len(steps) > 0.03


def test_fast_and_unpaced_demos_never_sleep() -> None:
    from dltop.demos._common import DEMOS, pacer, parse_args

    assert pacer(parse_args("nan", ["--fast", "--out", "/dev/null"])).delay == 0.0
    assert pacer(parse_args("stall", ["--out", "/dev/null"])).delay == 0.0  # paced by its own fault
    paced = pacer(parse_args("nan", ["--out", "/dev/null"]))
    assert paced.delay * DEMOS["nan"].steps == pytest.approx(30.0)


def test_list_shows_every_demo_on_one_line() -> None:
    proc = _dltop("demo", "--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 15 == len(DEMOS)
    assert [line.split()[0] for line in lines] == list(DEMOS)
    assert all(" — " in line and len(line) <= 100 for line in lines)


def test_unknown_demo_is_one_line_naming_the_valid_ones() -> None:
    proc = _dltop("demo", "no_such_demo", "--no-ui")
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "unknown demo 'no_such_demo'" in err[0]
    assert all(name in err[0] for name in DEMOS)


def test_a_demo_name_is_shown_escaped() -> None:
    proc = _dltop("demo", "n\x1b[31m", "--no-ui")
    assert proc.returncode == 2 and "\x1b" not in proc.stderr
    assert "unknown demo 'n\\x1b[31m'" in proc.stderr


def test_an_out_that_cannot_be_written_stops_before_training(tmp_path: Path) -> None:
    """`--out` naming a folder used to train a whole demo with no log, then say "done"."""
    started = time.monotonic()
    proc = _dltop("demo", "healthy", "--no-ui", "--fast", "--out", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "is a directory" in err[0] and "hint:" in err[0], err
    assert time.monotonic() - started < 30  # no training ran
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _dltop("demo", "healthy", "--no-ui", "--fast", "--out", str(blocker / "x.jsonl"))
    assert proc.returncode == 2 and "cannot create the folder" in proc.stderr


def test_missing_torch_is_one_line_with_the_install_hint(tmp_path: Path) -> None:
    # sys.modules["torch"] = None makes importlib report torch as absent, as on a viewer-only install
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from dltop.tui.cli import main\n"
        f"sys.exit(main(['demo', 'nan', '--no-ui', '--out', {str(tmp_path / 'x.jsonl')!r}]))"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "pip install torch==2.13.0" in err[0], proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_demo_command_and_catalogue_never_load_torch() -> None:
    code = "import dltop.tui.demo_cmd, dltop.demos._common, sys; print('torch' in sys.modules)"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------------------------ how a demo ends, for real


@pytest.mark.parametrize(("sig", "with_log"), [("SIGTERM", True), ("SIGKILL", False)])
def test_a_demo_killed_by_a_signal_exits_128_plus_the_signal(
    sig: str, with_log: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dltop.tui import demo_cmd

    log = tmp_path / "demo.jsonl"
    write = f"open({str(log)!r}, 'w').write('x\\n'); " if with_log else ""
    code = f"import os, signal; {write}os.kill(os.getpid(), signal.{sig})"
    status = demo_cmd._run_headless("nan", [PY, "-c", code], log)
    assert status == 128 + getattr(signal, sig), "as a shell reports a death by signal"
    assert f"was killed by {sig}" in capsys.readouterr().err


DEMO_WITH_WORKERS = """
import subprocess, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
from dltop.probe import Probe

stubborn = subprocess.Popen(  # a child that ignores SIGTERM: only SIGKILL ends it
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
     " print('ok', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
assert stubborn.stdout.readline().strip() == "ok"
data = TensorDataset(torch.randn(4096, 4), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with Probe(path=sys.argv[1], model=model, optimizer=opt, system=False) as probe:
    for epoch in range(1000):
        for i, (x, y) in enumerate(probe.loader(loader)):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)
            if epoch == 0 and i == 5:
                workers = [w.pid for w in loader._iterator._workers]
                print(" ".join(map(str, [stubborn.pid, *workers])), flush=True)
            time.sleep(0.01)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see them go")
def test_stopping_a_demo_stops_its_workers_and_children_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What quitting the viewer does (``_stop(proc, group=True)``) to a real training with
    DataLoader workers and a child that ignores SIGTERM: nothing of it is left."""
    from dltop.tui import demo_cmd

    # the product's own grace period: on a loaded machine the demo's signal handler (record,
    # flush, fsync, remove the live entry) can take more than a second or two
    monkeypatch.setattr(demo_cmd, "STOP_WAIT_S", 5.0)
    log = tmp_path / "workers.jsonl"
    runtime = Path("/tmp") / f"dltop-dw-{os.getpid()}-{time.monotonic_ns()}"
    runtime.mkdir(mode=0o700)
    env = {**ENV, "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(
        [PY, "-c", DEMO_WITH_WORKERS, str(log)],
        stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,  # as the viewer does
    )  # fmt: skip
    others: list[int] = []
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 3, "the demo did not start its workers"
        others = [int(p) for p in line]
        assert all(_pid_alive(p) for p in others)
        demo_cmd._stop(proc, group=True)
        assert proc.returncode == -signal.SIGTERM, "the demo died by the SIGTERM it was sent"
        deadline = time.monotonic() + 20  # the workers' ends are reaped by init: a moment
        while any(_pid_alive(p) for p in others) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in others if _pid_alive(p)], "workers and children are gone"
        assert [e.get("signal") for e in _signals_on_record(log)] == ["SIGTERM"]
        assert list((runtime / "dltop").iterdir()) == [], "no live socket left behind"
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in others:  # what a failed stop left behind: this test started them
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(runtime, ignore_errors=True)


# ------------------------------------------------------------------ the viewer, for real


def _tmux(sock: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
    except FileNotFoundError:
        return False


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _start_in_tmux(sock: str, log: Path, name: str = "data_bound") -> None:
    """``dltop demo NAME`` with its viewer, in a detached 120x40 tmux session."""
    cmd = f"cd {ROOT} && {PY} -m dltop.tui demo {name} --out {log}"
    env = ["-e", "DLTOP_DEMO_THREADS=1"]
    started = _tmux(sock, "new-session", "-d", "-x", "120", "-y", "40", *env, cmd)
    assert started.returncode == 0, started.stderr


def _signals_on_record(log: Path) -> list[dict]:
    records, _ = read_records(str(log))
    return [r for r in records if r.get("kind") == "event" and r.get("type") == "signal"]


def _demo_pid(log: Path) -> int | None:
    records, _ = read_records(str(log))
    return next((r["pid"] for r in records if r.get("kind") == "meta"), None)


def _wait_for_badge(sock: str, log: Path, alert_id: str, timeout: float) -> tuple[str | None, str]:
    """Wait until the engine raises ``alert_id`` on the log and its badge title is on screen."""
    from dltop.tui.core.rules import RuleEngine

    screen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if not log.exists():
            continue
        engine = RuleEngine()
        engine.feed_many(read_records(str(log))[0])
        alert = next((a for a in engine.alerts() if a.id == alert_id), None)
        screen = _tmux(sock, "capture-pane", "-p").stdout
        if alert is not None and alert.title in screen:
            return alert.title, screen
    return None, screen


needs_tmux = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux to drive the viewer"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads /proc to see the demo go"
    ),
    pytest.mark.timeout(240),
]


@needs_tmux[0]
@needs_tmux[1]
@needs_tmux[2]
def test_demo_with_viewer_shows_the_badge_and_quitting_stops_the_demo(tmp_path: Path) -> None:
    log = tmp_path / "demo-data_bound.jsonl"
    sock = f"dltop-test-{os.getpid()}-q"
    _start_in_tmux(sock, log)
    try:
        title, screen = _wait_for_badge(sock, log, "data_bound", timeout=150)
        assert title is not None, f"the data_bound badge never appeared; screen:\n{screen}"
        pid = _demo_pid(log)
        assert pid is not None and _pid_alive(pid), "the demo should still be training"

        _tmux(sock, "send-keys", "q")
        deadline = time.monotonic() + 20
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _pid_alive(pid), "quitting the viewer must stop the demo"
    finally:
        _tmux(sock, "kill-server")
    # stopped by the viewer, not finished on its own: the probe recorded the SIGTERM
    assert [e.get("signal") for e in _signals_on_record(log)] == ["SIGTERM"]


@pytest.mark.slow
@needs_tmux[0]
@needs_tmux[1]
@needs_tmux[2]
def test_killing_the_demo_command_still_stops_the_demo(tmp_path: Path) -> None:
    log = tmp_path / "demo-data_bound.jsonl"
    sock = f"dltop-test-{os.getpid()}-kill"
    _start_in_tmux(sock, log)
    try:
        pid = None
        deadline = time.monotonic() + 120
        while pid is None and time.monotonic() < deadline:
            time.sleep(0.3)
            if log.exists():
                records, _ = read_records(str(log))
                pid = next((r["pid"] for r in records if r.get("kind") == "meta"), None)
        assert pid is not None and _pid_alive(pid), "the demo never started"
        os.kill(_ppid(pid), 9)  # the `dltop demo` process: no chance to clean up
        deadline = time.monotonic() + 20
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _pid_alive(pid), "the demo must not train on after `dltop demo` died"
    finally:
        _tmux(sock, "kill-server")
    assert [e.get("signal") for e in _signals_on_record(log)] == ["SIGTERM"]


@pytest.mark.slow
@needs_tmux[0]
@needs_tmux[1]
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", [n for n, d in DEMOS.items() if d.alert is not None])
def test_every_demo_shows_its_badge_in_the_viewer(name: str, tmp_path: Path) -> None:
    demo = DEMOS[name]
    log = tmp_path / f"demo-{name}.jsonl"
    sock = f"dltop-test-{os.getpid()}-{name}"
    _start_in_tmux(sock, log, name)
    try:
        title, screen = _wait_for_badge(sock, log, demo.alert, timeout=3 * demo.seconds + 90)
        assert title is not None, f"no '{demo.alert}' badge on screen for {name}:\n{screen}"
    finally:
        _tmux(sock, "send-keys", "q")
        time.sleep(1)
        _tmux(sock, "kill-server")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_leak_demo_is_named_beside_two_busy_processes(tmp_path: Path) -> None:
    """On a loaded machine the demo makes a third of its steps in its 30 s (RSS 384 ->
    429 MiB over 44 steps once); its memory climbs as steadily and must still be named:
    the rule judges in seconds as well as steps, against the readings' scatter."""
    busy = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(2)]
    try:
        log, _ = run_demo("leak", tmp_path)
    finally:
        for p in busy:
            p.kill()
            p.wait(10)
    report = check(log)
    grew = [a for a in report["alerts"] if a["id"] == "memory_growth"]
    assert grew and grew[0]["severity"] in ("warning", "critical"), report["alerts"]
    assert report["verdict"].startswith("Memory keeps growing"), report["verdict"]
