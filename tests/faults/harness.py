"""Run fault-suite trainings as subprocesses and score ``dltop check --json`` against the labels.

Each run is two real processes: the training (``tests.faults.train``, one thread,
its own timeout; forked from a forkserver that has imported torch once, or a fresh
``python -m tests.faults.train``) and the diagnosis (``python -m dltop.tui check LOG
--json`` with the scenario's ``--set`` overrides; ``api=True`` uses the RuleEngine in
process instead). Scoring reads only the labels that ``train.py`` wrote next to the
log and the alerts ``dltop check`` printed, so the same function serves the fast
test subset and the benchmark. A replay of the log through the engine, record by
record, adds when each alert was raised.

A fault run is *detected* when it has any warning or critical alert, *correct* when
one of them has an expected id (and, for crashes, the expected crash pattern), and
*timely* when that alert held no earlier than the injection and was raised (replaying
the log record by record, as a live viewer would) by onset + budget steps. Info
alerts are reported but count neither as detection nor as false alarms.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.scenarios import SCENARIOS, Scenario

ROOT = Path(__file__).resolve().parents[2]
LOUD = ("warning", "critical")


@dataclass
class RunResult:
    """One training + diagnosis, scored."""

    scenario: str
    seed: int
    log: str
    returncode: int | None = None
    timed_out: bool = False
    wall_s: float = 0.0
    label: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] | None = None
    check_code: int | None = None
    error: str | None = None
    rerun: bool = False  # the forkserver lost its exit status: trained again, fresh
    # scoring
    healthy: bool = False
    detected: bool = False
    correct: bool = False
    timely: bool = False
    latency: int | None = None  # raised - onset: steps a live monitor took to say it
    held_latency: int | None = None  # the alert's own "first step it held" - onset
    matched: str | None = None  # the expected alert that was found (first by step)
    loud: list[str] = field(default_factory=list)  # every loud alert as "id(sev)@step"
    any_warning: bool = False
    any_critical: bool = False
    raised: dict[str, int | None] = field(default_factory=dict)  # alert id -> last step fed
    early: list[str] = field(default_factory=list)  # loud alerts holding before the injection
    waited: dict[str, float] = field(default_factory=dict)  # alert id -> s since last step

    after_injection: bool = False  # a right alert held at or after the injection
    strict: bool = False  # budget 0 (NaN, crash, OOM): on its step or it is wrong
    evidence_ok: bool = False  # the right alert carries numbers and a checklist

    @property
    def ok(self) -> bool:
        """What the fast test asserts: healthy runs silent; faults named right, with
        evidence, not before the injection, and on their step where the budget is 0.
        Delays within a budget > 0 are the benchmark's business (see its table)."""
        if self.error:
            return False
        if self.healthy:
            return not self.any_warning and not self.any_critical
        timing = self.timely if self.strict else self.after_injection
        return self.correct and self.evidence_ok and timing


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env


# what ``multiprocessing``'s forkserver reports as the exit code of a child whose status it
# lost (``popen_forkserver.Popen.poll``); no training here exits with it
STATUS_LOST = 255

_FORK_CTX: Any = None
_FORK_LOCK = threading.Lock()
PRELOAD = ["torch", "torch._dynamo", "tests.faults.train", "dltop.probe.probe"]


def _fork_context() -> Any:
    """A forkserver that has imported torch (and torch._dynamo, which every optimizer
    pulls in on first use) once: each training is still its own process (own pid, RSS,
    rlimits, crash hooks), but it starts in milliseconds instead of the 2-3 s of CPU an
    import costs, which dominates a suite of few-second trainings on 2 shared cores."""
    global _FORK_CTX
    with _FORK_LOCK:
        if _FORK_CTX is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _FORK_CTX = ctx
    return _FORK_CTX


def _child(argv: list[str], output: str) -> None:
    """Forked training: stdout/stderr to ``output``, exit status as a real process's."""
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["OMP_NUM_THREADS"] = "1"
    from tests.faults.train import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_training(
    sc: Scenario, seed: int, log: str, timeout: float | None = None, fresh: bool = False
) -> RunResult:
    """Train ``sc`` with ``seed`` into ``log``; a crash is an outcome here, not an error.

    ``fresh=True`` starts a new interpreter (``python -m tests.faults.train``) instead of
    forking the warm forkserver: slower, the same training.
    """
    res = RunResult(sc.name, seed, log, healthy=sc.healthy)
    argv = [sc.name, "--seed", str(seed), "--out", log]
    limit = timeout or sc.timeout_s
    output = log + ".out.txt"
    t0 = time.perf_counter()
    if fresh:
        cmd = [sys.executable, "-m", "tests.faults.train", *argv]
        try:
            with open(output, "w") as out:
                proc = subprocess.run(
                    cmd, cwd=ROOT, env=_env(), stdout=out, stderr=out, timeout=limit
                )
            res.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            res.timed_out = True
    else:
        proc = _fork_context().Process(target=_child, args=(argv, output), daemon=True)
        proc.start()
        proc.join(limit)
        if proc.is_alive():
            proc.kill()
            proc.join()
            res.timed_out = True
        res.returncode = proc.exitcode
        if res.returncode == STATUS_LOST:
            # the forkserver lost the child's exit status (its status pipe gave EOF: a CI
            # run, once, on a training whose log ended with a clean exit record): not the
            # training's answer. Once more, as a real process; its log starts afresh
            for path in (log, log + ".label.json", output):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            again = run_training(sc, seed, log, timeout, fresh=True)
            again.rerun = True
            return again
    res.wall_s = time.perf_counter() - t0
    text = Path(output).read_text(errors="replace").strip() if os.path.exists(output) else ""
    tail = text.splitlines()[-1] if text else ""
    label_path = Path(log + ".label.json")
    if label_path.exists():
        res.label = json.loads(label_path.read_text())
    crash_expected = bool(sc.expected & {"crash", "oom"})
    if res.timed_out:
        res.error = f"training timed out after {limit:.0f} s"
    elif not res.label:
        res.error = f"training wrote no label (exit {res.returncode}): {tail[:200]}"
    elif res.returncode != 0 and not crash_expected:
        res.error = f"training failed (exit {res.returncode}): {tail[:200]}"
    elif crash_expected and res.returncode == 0:
        res.error = "the fault was meant to crash the training, but it finished"
    return res


def run_check(sc: Scenario, log: str) -> tuple[int, dict[str, Any] | None, str]:
    """``dltop check LOG --json`` with the scenario's overrides: exit code, JSON, stderr."""
    cmd = [sys.executable, "-m", "dltop.tui", "check", log, "--json"]
    for key, value in sc.check_set.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except json.JSONDecodeError:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return proc.returncode, None, lines[-1] if lines else ""


def _engine(sc: Scenario) -> Any:
    from dltop.tui.core.rules import Config, RuleEngine

    return RuleEngine(Config.load(None, dict(sc.check_set)))


def run_engine(sc: Scenario, log: str) -> tuple[int, dict[str, Any] | None, str]:
    """The same diagnosis through the engine API in this process (``--engine-api``).

    For when ``dltop check`` itself is broken or being changed: the alerts are the
    engine's, the exit code is derived the contract's way.
    """
    from dltop.probe.decoding import read_records
    from dltop.tui.core.diagnosis.status import run_state
    from dltop.tui.core.rules.alerts import SEVERITY_RANK

    try:
        engine = _engine(sc)
        engine.feed_many(read_records(log)[0])
        alerts = [a.to_json() for a in engine.alerts()]
        status = run_state(engine, pid_alive=False).status
    except Exception as exc:
        return 3, None, f"engine: {exc!r}"
    worst = max((SEVERITY_RANK[a["severity"]] for a in alerts), default=0)
    return worst, {"status": status, "steps": engine.steps, "alerts": alerts}, ""


def raise_points(sc: Scenario, log: str) -> tuple[dict[str, int | None], dict[str, float]]:
    """Replay the log record by record, as a live viewer sees it: for each alert id, the
    last step the engine had been fed when it first raised that alert, and how many
    seconds (record time) had passed since that step ended.

    An alert's own ``step`` is where its condition started to hold, which a rule may
    date back (a plateau's first flat window); this is when it was *said*: what
    "steps from onset to alert" means for someone watching the run.
    """
    from dltop.probe.decoding import read_records

    engine = _engine(sc)
    steps: dict[str, int | None] = {}
    waited: dict[str, float] = {}
    count = 0
    step_t: float | None = None
    for rec in read_records(log)[0]:
        engine.feed(rec)
        if rec.get("kind") == "step" and isinstance(rec.get("t"), float):
            step_t = rec["t"]
        alerts = engine.alerts()
        if len(alerts) != count:
            for a in alerts[count:]:
                if a.id not in steps:
                    steps[a.id] = engine.last_step
                    t = rec.get("t")
                    if isinstance(t, float) and step_t is not None:
                        waited[a.id] = t - step_t
            count = len(alerts)
    return steps, waited


def score(sc: Scenario, res: RunResult) -> RunResult:
    """Fill the scoring fields of ``res`` from its label and its ``dltop check`` output."""
    alerts = [a for a in (res.check or {}).get("alerts", []) if a.get("severity") in LOUD]
    alerts.sort(key=lambda a: (a.get("step") is None, a.get("step") or 0))
    res.loud = [f"{a['id']}({a['severity'][0]})@{a.get('step')}" for a in alerts]
    res.any_warning = any(a["severity"] == "warning" for a in alerts)
    res.any_critical = any(a["severity"] == "critical" for a in alerts)
    if sc.healthy:
        return res
    res.strict = sc.budget == 0
    res.detected = bool(alerts)
    res.early = [f"{a['id']}@{a['step']}" for a in alerts if (a.get("step") or 0) < sc.inject]
    right = [a for a in alerts if a["id"] in sc.expected and _pattern_ok(sc, a)]
    res.correct = bool(right)
    onset = res.label.get("onset")
    if not right or onset is None:
        return res
    # the first right alert raised after the injection; an earlier one is a false alarm
    after = [a for a in right if a.get("step") is not None and a["step"] >= sc.inject]
    best = min(after, key=lambda a: _said(res, a)) if after else right[0]
    res.matched = best["id"]
    res.after_injection = bool(after)
    res.evidence_ok = bool(best.get("evidence")) and bool(best.get("checklist", best["id"]))
    if best.get("step") is not None:
        res.held_latency = int(best["step"]) - int(onset)
    said = _said(res, best) if best.get("step") is not None else None
    if said is not None:
        res.latency = int(said) - int(onset)
        res.timely = bool(after) and res.latency <= sc.budget and _nan_on_its_step(res, alerts)
    return res


def _said(res: RunResult, alert: dict[str, Any]) -> int:
    """The step an alert was raised at in the replay; its held step when unknown."""
    raised = res.raised.get(alert["id"])
    return int(raised if raised is not None else alert["step"])


def _nan_on_its_step(res: RunResult, alerts: list[dict[str, Any]]) -> bool:
    """A ``nan_loss`` alert, when there is one, must hold on the first non-finite loss
    (measured by the training) and be raised on that step, whatever came before it."""
    first = (res.label.get("measured") or {}).get("first_nonfinite")
    nan = [a for a in alerts if a["id"] == "nan_loss"]
    if first is None or not nan:
        return True
    raised = res.raised.get("nan_loss", nan[0].get("step"))
    return nan[0].get("step") == first and raised == first


def _pattern_ok(sc: Scenario, alert: dict[str, Any]) -> bool:
    if sc.pattern is None:
        return True
    return (alert.get("evidence") or {}).get("pattern") == sc.pattern


def run_one(
    sc: Scenario,
    seed: int,
    log_dir: str,
    timeout: float | None = None,
    api: bool = False,
    fresh: bool = False,
) -> RunResult:
    """Train, diagnose (``dltop check``, or the engine API), score. Failures go to ``error``."""
    log = os.path.join(log_dir, f"{sc.name}-s{seed}.jsonl")
    for stale in (log, log + ".label.json", log + ".out.txt"):
        if os.path.exists(stale):
            os.remove(stale)
    res = run_training(sc, seed, log, timeout, fresh=fresh)
    if res.error:
        return res
    if not os.path.exists(log):
        res.error = "the training wrote no log"
        return res
    res.check_code, res.check, err = (run_engine if api else run_check)(sc, log)
    if res.check is None:
        res.error = f"dltop check gave no JSON (exit {res.check_code}): {err.strip()[:200]}"
        return res
    worst = {a.get("severity") for a in res.check.get("alerts", [])}
    want = 2 if "critical" in worst else 1 if "warning" in worst else 0
    if res.check_code != want:
        res.error = f"dltop check exited {res.check_code}, its alerts say {want}"
        return res
    try:
        res.raised, res.waited = raise_points(sc, log)
    except Exception as exc:
        res.error = f"engine replay failed: {exc!r}"
        return res
    return score(sc, res)


def plan(
    names: Iterable[str] | None = None, quick: bool = False, seeds: int | None = None
) -> list[tuple[Scenario, int]]:
    """(scenario, seed) pairs: all, the named ones, or the quick subset (first seed each)."""
    chosen = [SCENARIOS[n] for n in names] if names else list(SCENARIOS.values())
    if quick and not names:
        chosen = [s for s in chosen if s.quick]
    out = []
    for sc in chosen:
        use = sc.seeds[:1] if quick else sc.seeds
        if seeds is not None:
            use = sc.seeds[:seeds]
        out += [(sc, seed) for seed in use]
    return out


def _estimate_s(sc: Scenario) -> float:
    """Rough wall time of one run (start-up, steps, injected waits, the slow faults)."""
    est = 4.0 + 0.004 * sc.steps
    if sc.data_fault:
        est += sc.data_fault.sleep_s * sc.steps + sc.data_fault.hang_s
    if sc.loop_fault == "keep_graph":
        est += 15.0
    if sc.loop_fault == "grow_batch":
        est += 5.0
    return est


def run_suite(
    pairs: list[tuple[Scenario, int]],
    jobs: int = 2,
    log_dir: str | None = None,
    progress: Callable[[RunResult], None] | None = None,
    api: bool = False,
    fresh: bool = False,
) -> list[RunResult]:
    """Run every pair, at most ``jobs`` trainings at once; results in plan order.

    The longest runs go first so that the pool ends together. Logs go to
    ``log_dir`` (kept) or to a temporary folder (removed).
    """
    tmp = None if log_dir else tempfile.TemporaryDirectory(prefix="dltop-faults-")
    folder = log_dir or tmp.name  # type: ignore[union-attr]
    os.makedirs(folder, exist_ok=True)
    order = sorted(range(len(pairs)), key=lambda i: -_estimate_s(pairs[i][0]))

    def work(i: int) -> RunResult:
        sc, seed = pairs[i]
        try:
            res = run_one(sc, seed, folder, api=api, fresh=fresh)
        except Exception as exc:  # the harness must report, not die, on one bad run
            res = RunResult(sc.name, seed, "", healthy=sc.healthy, error=f"harness: {exc!r}")
        if progress:
            progress(res)
        return res

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            done = dict(zip(order, pool.map(work, order), strict=True))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return [done[i] for i in range(len(pairs))]
