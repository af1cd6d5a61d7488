"""The labelled fault suite, fast subset: real tiny trainings must get the right diagnosis.

Each scenario marked ``quick`` in ``tests/faults/scenarios.py`` is trained once (first
seed) in its own process with the real probe, then diagnosed by the real ``dltop check
--json``. A fault run passes when a warning or critical alert with an expected id
(and crash pattern) holds no earlier than the injection, carries evidence and a
checklist, and, for NaN and crashes, sits on its step; a healthy run passes when it
has no warning and no critical alert. Detection delays and the false-alarm rates
over every scenario and seed are ``benchmarks/detection.py`` (and the ``slow`` test).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.faults import harness  # noqa: E402
from tests.faults.harness import RunResult, plan, run_suite, score  # noqa: E402
from tests.faults.scenarios import SCENARIOS  # noqa: E402

QUICK = [sc.name for sc, _ in plan(quick=True)]


def _explain(r: RunResult) -> str:
    sc = SCENARIOS[r.scenario]
    if sc.healthy:
        want = "no warning or critical"
    else:
        onset = r.label.get("onset")
        want = f"one of {sorted(sc.expected)} at steps {sc.inject}..{onset}+{sc.budget}"
    return f"{r.scenario} (seed {r.seed}): wanted {want}; got {r.loud or 'no alert'}; error: {r.error}; log: {r.log}"


def test_quick_subset_covers_faults_and_healthy_runs() -> None:
    healthy = [n for n in QUICK if SCENARIOS[n].healthy]
    faults = [n for n in QUICK if not SCENARIOS[n].healthy]
    assert len(healthy) >= 2 and len(faults) >= 5, QUICK


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", QUICK)
def test_scenario_diagnosed(name: str, quick_results: dict[str, RunResult]) -> None:
    r = quick_results[name]
    assert r.error is None, _explain(r)
    assert r.ok, _explain(r)


def _fake(
    sc_name: str, alerts: list[dict[str, object]], onset: int, measured: dict | None = None
) -> RunResult:
    sc = SCENARIOS[sc_name]
    label = {"onset": onset, "measured": measured or {}}
    res = RunResult(sc_name, 0, "x.jsonl", healthy=sc.healthy, label=label)
    res.check = {"status": "finished", "steps": 300, "alerts": alerts}
    return score(sc, res)


def test_scoring_rejects_wrong_late_and_early_alerts() -> None:
    """The scorer itself: a wrong id, a late alert and a pre-injection alert all fail."""
    right = {"id": "grad_explosion", "severity": "critical", "step": 151, "evidence": {"ratio": 40}}
    assert _fake("unnormalized_shard", [right], 150).ok
    wrong = dict(right, id="plateau")
    assert not _fake("unnormalized_shard", [wrong], 150).ok
    late = dict(right, step=260)
    assert not _fake("unnormalized_shard", [late], 150).timely
    assert not _fake("unnormalized_shard", [dict(right, evidence={})], 150).ok
    early = dict(right, step=20)  # before the bad shard is read: a false alarm
    assert not _fake("unnormalized_shard", [early], 150).ok
    info_only = dict(right, severity="info")
    assert not _fake("unnormalized_shard", [info_only], 150).detected
    nan = {"id": "nan_loss", "severity": "critical", "step": 17, "evidence": {"loss": "NaN"}}
    boom = dict(right, step=15)
    ok = _fake("lr_too_high", [boom, nan], 17, measured={"first_nonfinite": 17})
    assert ok.timely
    late_nan = _fake("lr_too_high", [boom, dict(nan, step=18)], 17, {"first_nonfinite": 17})
    assert not late_nan.timely  # the explosion came first, but the NaN must sit on its step
    crash = {"id": "crash", "severity": "critical", "step": 31, "evidence": {"pattern": "unknown"}}
    assert not _fake("shape_bug", [crash], 31).ok
    crash["evidence"] = {"pattern": "shape_mismatch"}
    assert _fake("shape_bug", [crash], 31).ok
    assert not _fake("shape_bug", [dict(crash, step=40)], 31).ok  # budget 0: late is wrong
    noisy = {"id": "oscillation", "severity": "warning", "step": 200, "evidence": {}}
    assert not _fake("healthy_mlp_sgd_step", [noisy], 0).ok


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_full_suite_meets_targets(tmp_path: Path) -> None:
    """Issue 3's bar on every scenario and seed (``make test-all``; minutes)."""
    results = run_suite(plan(), jobs=2, log_dir=str(tmp_path))
    errors = [_explain(r) for r in results if r.error]
    assert not errors, errors
    faults = [r for r in results if not r.healthy]
    healthy = [r for r in results if r.healthy]
    misses = [_explain(r) for r in faults if not r.correct]
    assert sum(r.correct for r in faults) >= 0.95 * len(faults), misses
    noisy = [_explain(r) for r in healthy if r.any_warning or r.any_critical]
    assert len(noisy) <= 0.05 * len(healthy), noisy
    assert sum(r.any_critical for r in healthy) <= 0.02 * len(healthy), noisy


class _LostStatus:
    """A forkserver child whose exit status the forkserver lost: ``exitcode`` 255, as
    ``multiprocessing.popen_forkserver`` reports it; it leaves a half-written log."""

    def __init__(self, target: object, args: tuple[list[str], str], daemon: bool) -> None:
        self.argv = args[0]
        self.exitcode = harness.STATUS_LOST

    def start(self) -> None:
        log = self.argv[self.argv.index("--out") + 1]
        Path(log).write_text('{"kind": "meta", "v": 1}\n{"kind": "step", "st')

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False


@pytest.mark.slow
def test_a_training_whose_status_the_forkserver_lost_runs_again_as_a_real_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 255 from the forkserver is not the training's answer (a CI run lost one on a
    training whose log ended with a clean exit record): the training runs once more in a
    fresh interpreter, into a fresh log, and is judged on that."""
    monkeypatch.setattr(harness, "_fork_context", lambda: SimpleNamespace(Process=_LostStatus))
    sc = SCENARIOS[QUICK[0]]
    log = str(tmp_path / "run.jsonl")
    res = harness.run_training(sc, 0, log)
    assert res.returncode == 0 and res.error is None and res.rerun, res
    assert res.label and res.label["scenario"] == sc.name
    text = Path(log).read_text()
    assert text.startswith('{"kind":"meta"') and '"st\n' not in text  # the fresh run's log
