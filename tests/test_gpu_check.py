"""``scripts/gpu_check.sh``'s CPU fallbacks, so that the GPU check cannot rot between GPU runs.

The script itself runs here (``GPU_CHECK_DEVICE=cpu``, this interpreter, nothing
installed), with the JSON and Markdown it writes: ``cuda_tests``, ``nosync``, ``cost`` and
``nvml`` in the default run, ``oom`` (a real allocator failure under an address-space cap)
and ``adapters`` (Lightning and HF runs, as tests/test_adapter_*.py do) as ``slow``. Then what must be able to fail does:
a part that overruns its time limit is a failure and the next part still runs; a result
that never came is a failure in the report; and the no-sync watch reports a host read
planted in the probe's step path or in its backward hooks, not only the ones it expects.
On a GPU machine the same script is run by hand (docs/gpu.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.gpu_check, as `python -m` finds it from the root

from scripts.gpu_check import nosync, report  # noqa: E402
from scripts.gpu_check.inject import planted_syncs  # noqa: E402
from scripts.gpu_check.syncwatch import SyncWatch  # noqa: E402

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
FAST_PARTS = "cuda_tests nosync cost nvml"
SLOW_PARTS = "oom adapters"  # a real OOM under a cap; Lightning and HF imports and runs
SHAPE = {"part", "status", "summary", "device", "seconds", "details"}


def _script(out: Path, parts: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
        env=os.environ
        | {
            "OUT": str(out),
            "GPU_CHECK_PY": sys.executable,
            "GPU_CHECK_DEVICE": "cpu",
            "GPU_CHECK_PARTS": parts,
        }
        | env,
    )


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """``part -> its one line`` from the script's output."""
    out = {}
    for row in done.stdout.splitlines():
        if row.startswith("gpu_check ") and ": " in row:
            name = row.split(":", 1)[0].removeprefix("gpu_check ")
            out[name] = row
    return out


@pytest.mark.timeout(420)
def test_the_script_runs_its_cpu_fallbacks_and_writes_json_and_markdown(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _script(out, FAST_PARTS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
    ]
    lines = _lines(done)
    for part in FAST_PARTS.split():
        assert lines[part].startswith(f"gpu_check {part}: PASS") or lines[part].startswith(
            f"gpu_check {part}: SKIP"
        ), lines[part]

    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["schema"] == 1 and doc["device"] == "cpu" and doc["ok"] is True
    assert list(doc["parts"]) == FAST_PARTS.split()
    assert {"torch", "cuda", "driver", "device", "date", "python"} <= set(doc["env"])
    parts = doc["parts"]
    for r in parts.values():
        assert set(r) >= SHAPE and r["exit"] == 0 and r["timed_out"] is False
    statuses = {name: r["status"] for name, r in parts.items()}
    assert statuses == {
        "cuda_tests": "skip",  # every CUDA test skips here; the stand-in ones pass
        "nosync": "pass",
        "cost": "pass",
        "nvml": "skip",  # no NVML: said cleanly, nothing compared
    }

    cuda = parts["cuda_tests"]["details"]["counts"]
    assert cuda["failures"] == cuda["errors"] == 0 and cuda["skipped"] >= 5

    ns = parts["nosync"]["details"]
    assert [r["precision"] for r in ns["runs"]] == ["fp32", "bf16"]
    for r in ns["runs"]:
        assert r["ok"], r["why"]
        assert r["probe_syncs"] == 0 and r["probe_sync_sites"] == {}
        assert r["deliberate_user_syncs"] == r["expected_user_syncs"] == 2
        assert r["steps_logged"] == r["grad_norms_logged"] == 8
        assert r["grad_norm_max_rel_err"] <= 1e-4
        # the CPU branches are seen (and excused) in both places, once per step
        assert r["cpu_branch_reads"] == 16
    assert ns["selftest"]["ok"] and ns["selftest"]["caught_as_probe"] == 10

    cost = parts["cost"]["details"]
    (res,) = cost["results"]
    assert res["precision"] == "fp32"
    assert set(res["ms_per_step"]) == {"none", "dltop", "tensorboard", "item"}
    assert all(v > 0 for v in res["ms_per_step"].values())
    assert set(res["overhead_pct"]) == {"dltop", "tensorboard", "item"}  # printed, not judged

    nv = parts["nvml"]["details"]
    assert nv["gpus"] == [] and "N/A" in nv["meta_note"] and "gpus" not in nv["sys_record_fields"]

    md = (out / "gpu_check.md").read_text()
    assert md.startswith("# dltop GPU check\n\n**PASS**")
    for heading in ("## No sync", "## Cost per step", "## NVML", "## CUDA tests"):
        assert heading in md
    log = (out / "gpu_check.log").read_text()
    assert all(f"==== {part}: exit 0" in log for part in FAST_PARTS.split())


@pytest.mark.timeout(120)
def test_a_part_past_its_limit_fails_and_the_next_one_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _script(out, "nosync nvml", GPU_CHECK_LIMIT_nosync="2")
    assert done.returncode == 1, done.stdout
    lines = _lines(done)
    assert lines["nosync"].startswith(
        "gpu_check nosync: FAIL — no result (exit 124, killed at its 2 s limit)"
    )
    assert lines["nvml"].startswith("gpu_check nvml: SKIP")
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["ok"] is False and doc["counts"] == {"pass": 0, "fail": 1, "skip": 1}
    assert doc["parts"]["nosync"]["timed_out"] is True
    assert "killed at its 2 s limit" in doc["parts"]["nosync"]["summary"]


@pytest.mark.timeout(60)
def test_a_spent_budget_is_a_failure_not_a_pass(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _script(out, "nvml cost", GPU_CHECK_BUDGET_S="1")
    assert done.returncode == 1
    doc = json.loads((out / "gpu_check.json").read_text())
    assert {r["status"] for r in doc["parts"].values()} == {"fail"}
    assert all("budget was spent" in r["summary"] for r in doc["parts"].values())


def test_the_report_fails_a_part_without_a_result(tmp_path: Path) -> None:
    (tmp_path / "status.tsv").write_text("nvml\t0\t3\t90\t\ncost\t137\t160\t150\t\n")
    (tmp_path / "nvml.json").write_text(
        json.dumps({"part": "nvml", "status": "skip", "summary": "no NVML", "details": {}})
    )
    (tmp_path / "setup.txt").write_text("python x as given\n")
    doc = report.gather(tmp_path, "cpu")
    assert list(doc["parts"]) == ["nvml", "cost"]
    assert doc["parts"]["cost"]["status"] == "fail" and doc["parts"]["cost"]["timed_out"]
    assert doc["parts"]["cost"]["summary"] == "no result (exit 137, killed at its 150 s limit)"
    assert doc["ok"] is False
    (tmp_path / "status.tsv").write_text("nvml\t0\t3\t90\t\n")
    assert report.gather(tmp_path, "cpu")["ok"] is True
    (tmp_path / "setup.txt").write_text("FAIL: no CUDA torch could be installed\n")
    assert report.gather(tmp_path, "cpu")["ok"] is False  # a failed set-up fails the check
    md = report.markdown(report.clean(report.gather(tmp_path, "cpu")))
    assert "**FAIL**" in md and "FAIL: no CUDA torch" in md


# --- the no-sync watch can fail ---------------------------------------------------------------
def _train(tmp_path: Path, steps: int = 3) -> SyncWatch:
    torch.set_num_threads(1)
    watch, refs, recs = nosync.train(
        torch.device("cpu"), "fp32", steps, tmp_path / "run.jsonl", user_sync_every=1
    )
    assert len([r for r in recs if r.get("kind") == "step"]) == steps
    return watch


def test_the_watch_passes_the_probe_as_it_is(tmp_path: Path) -> None:
    watch = _train(tmp_path)
    assert watch.probe_syncs() == []
    assert watch.count_at("_users_own_sync") == 3  # the training's own, seen as such
    assert {e.who for e in watch.user_syncs()} == {"user"}
    assert len(watch.cpu_branch_reads()) == 6  # host_scalar and _measure, once a step each


def test_the_watch_reports_an_item_planted_in_the_probes_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake probe step: ``Probe.step`` reads the loss with ``.item()`` before going on."""
    from dltop.probe import probe as probe_module

    convert = probe_module.convert_values

    def careless(loss: Any, *a: Any, **k: Any) -> Any:
        loss.item()  # the sync a careless probe would make
        return convert(loss, *a, **k)

    monkeypatch.setattr(probe_module, "convert_values", careless)
    watch = _train(tmp_path)
    syncs = watch.probe_syncs()
    assert len(syncs) == 3, watch.summary()
    assert {(e.what, e.site.split(":")[0]) for e in syncs} == {("Tensor.item", "test_gpu_check.py")}
    assert watch.count_at("_users_own_sync") == 3  # the user's are still the user's


def test_the_watch_reports_syncs_planted_in_the_backward_hooks(tmp_path: Path) -> None:
    with planted_syncs() as planted:
        watch = _train(tmp_path)
    assert len(planted.hook) == 3 and len(planted.step) == 3
    sites = {e.site for e in watch.probe_syncs()}
    assert len(watch.probe_syncs()) == 6, watch.summary()
    assert any(s.startswith("gradnorm.py:") and "_end_of_backward" in s for s in sites)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_oom_and_adapter_parts_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _script(out, SLOW_PARTS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json", "gpu_check.log", "gpu_check.md", "oom.jsonl",
    ]  # fmt: skip
    parts = json.loads((out / "gpu_check.json").read_text())["parts"]
    assert {n: r["status"] for n, r in parts.items()} == {"oom": "pass", "adapters": "pass"}
    d = parts["oom"]["details"]
    assert d["pattern"] == "cpu_oom" and d["checklist_id"] == "oom_cpu"
    assert d["checklist_marks"]["huge_request"] == "no"
    assert d["banner"]["diagnosis"] == "Out of host memory"
    assert d["oom_memory"]["device"] == "cpu" and d["oom_memory"]["requested"] > 0

    ad = parts["adapters"]["details"]
    for name, precision in (("lightning", "bf16-mixed"), ("hf", "bf16")):
        assert ad[name]["ok"] and ad[name]["precision"] == precision, ad[name]
        assert ad[name]["steps_logged"] == ad[name]["references"] == 8
        assert ad[name]["ref_norm_min"] > 0.1  # clipped after the probe's reading
        assert ad[name]["config_amp"] == {"dtype": "bfloat16", "scaler": False}
    md = (out / "gpu_check.md").read_text()
    assert "## Out of memory (the oom demo)" in md and "## Adapters under AMP" in md
