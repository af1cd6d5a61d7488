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

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- the GPU-only logic, fed what a GPU would give ---------------------------------------------
MIB = 1 << 20


def _moment(label: str, used_mib: float, smi_used: float, reserved_mib: float) -> dict[str, Any]:
    return {
        "moment": label,
        "panel": {"mem_used": int(used_mib * MIB), "mem_total": 81559 * MIB, "util": 40.0,
                  "temp": 40.0, "power_w": 120.0},
        "panel_v2_used": None,
        "torch_reserved": int(reserved_mib * MIB),
        "torch_allocated": 0,
        "smi": {"mem_used": smi_used, "mem_total": 81559.0, "util": 38.0, "temp": 41.0,
                "power_w": 118.0, "process_used": reserved_mib + 500},
    }  # fmt: skip


def test_the_nvml_comparison_passes_agreeing_readings_and_fails_a_gap() -> None:
    from scripts.gpu_check.nvml_check import compare

    rows = [
        _moment("idle", 1000, 1000, 400),
        _moment("+1 GiB", 2024, 2025, 1424),
        _moment("+4 GiB", 6120, 6121, 5520),
        _moment("training", 6300, 6300, 5700),
        _moment("freed", 900, 899, 300),
    ]
    fails, soft, table = compare(rows)
    assert fails == [] and soft == []
    assert table[2]["used_moved_mib"] == 4096 and table[2]["reserved_moved_mib"] == 4096
    # v1's used counting 500 MiB of reserved memory nvidia-smi leaves out: a failure
    rows[1]["smi"]["mem_used"] = 1525
    # and the panel not seeing the allocator's 4 GiB
    rows[2]["panel"]["mem_used"] = 2100 * MIB
    rows[2]["smi"]["mem_used"] = 2100
    fails, _, _ = compare(rows)
    assert any(f.startswith("+1 GiB: used 2024 MiB, nvidia-smi 1525") for f in fails), fails
    assert any(f.startswith("+4 GiB: used moved +76 MiB, reserved +4096 MiB") for f in fails), fails


def test_nvidia_smi_output_is_read_field_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scripts.gpu_check.nvml_check import smi

    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=*) echo '0, GPU-abc, 1234, 81559, 37, 41, 119.52, NVIDIA H100 80GB HBM3' ;;\n"
        f"  --query-compute-apps=*) echo '{os.getpid()}, GPU-abc, 1100'; echo '1, GPU-abc, 5' ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    r = smi(0)
    assert r == {
        "index": 0, "uuid": "GPU-abc", "mem_used": 1234.0, "mem_total": 81559.0, "util": 37.0,
        "temp": 41.0, "power_w": 119.52, "name": "NVIDIA H100 80GB HBM3", "process_used": 1100.0,
    }  # fmt: skip


def test_the_markdown_tabulates_gpu_shaped_results() -> None:
    from scripts.gpu_check.nvml_check import compare

    rows = [_moment("idle", 1000, 1000, 400), _moment("+1 GiB", 2024, 2025, 1424)]
    fails, soft, table = compare(rows)
    cost = {
        "precision": "fp16", "rounds": 5, "steps_per_block": 50,
        "ms_per_step": {"none": 5.0, "dltop": 5.1, "tensorboard": 6.0, "item": 5.6},
        "overhead_pct": {"dltop": 2.0, "tensorboard": 20.0, "item": 12.0}, "none_spread_pct": 1.5,
    }  # fmt: skip
    parts = {
        "nvml": {"status": "pass", "summary": "ok", "details": {"comparison": table,
                 "failures": fails, "soft_differences": ["training: util 0 %"]}},
        "cost": {"status": "pass", "summary": "ok", "details": {
            "variants": ["none", "dltop", "tensorboard", "item"], "results": [cost]}},
        "adapters": {"status": "pass", "summary": "ok", "details": {
            "lightning": {"ok": True, "precision": "16-mixed", "steps_logged": 30,
                          "grad_norm_max_rel_err": 1e-7, "overflow_steps": 2,
                          "config_amp": {"dtype": "float16", "scaler": True}},
            "hf": {"skipped": "transformers not importable"}}},
    }  # fmt: skip
    doc = {"ok": True, "device": "cuda", "counts": {"pass": 3, "fail": 0, "skip": 0},
           "env": {"device": "NVIDIA H100 80GB HBM3", "driver": "550.54", "cuda": "12.4"},
           "setup": [], "parts": parts}  # fmt: skip
    md = report.markdown(report.clean(doc))
    assert "not tabulated" not in md
    assert "| NVIDIA H100 80GB HBM3 | 550.54 | 12.4 |" in md
    assert "| fp16 | tensorboard | 6 | +20.0 % | 1.5 |" in md
    assert "| idle | 1000 |" in md and "Soft differences: training: util 0 %" in md
    assert "| hf | – | – | – | – | – | skipped: transformers not importable |" in md


def test_the_gpu_watch_counts_torch_sync_warnings_and_tells_whose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the watch reads torch's sync debug mode warnings. The same warnings, raised
    here by hand (what ``PyErr_WarnEx`` does for torch: the caller's frame is the site)."""
    import threading
    import warnings

    from dltop.probe import gradnorm

    modes: list[Any] = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    msg = "called a synchronizing CUDA operation (Triggered internally at Sync.cpp:1.)"
    ns: dict[str, Any] = {"warnings": warnings, "MSG": msg}
    # as if in probe/gradnorm.py (line 3: its docstring), as a backward hook would be
    exec(compile("\n\ndef hook():\n    warnings.warn(MSG)\n", gradnorm.__file__, "exec"), ns)
    with SyncWatch("cuda") as watch:
        assert modes == ["warn"]
        for _ in range(3):  # every one counted: the filter is "always"
            warnings.warn(msg, stacklevel=1)
        ns["hook"]()
        other = threading.Thread(target=ns["hook"], name="autograd-like")
        other.start()
        other.join()
        with pytest.warns(UserWarning, match="not a sync"):
            warnings.warn("not a sync", stacklevel=1)  # passed on, not counted
        # torch.cuda.synchronize(), which the debug mode does not see: intercepted
        with pytest.raises((RuntimeError, AssertionError)):  # no CUDA here to wait for
            torch.cuda.synchronize()
    assert modes == ["warn", 0]  # the mode found is put back
    assert torch.cuda.synchronize.__module__ == "torch.cuda"  # and the wrapper taken off
    assert [e.what for e in watch.user_syncs()] == ["cuda sync"] * 3 + ["torch.cuda.synchronize"]
    assert {e.site.split(" in ")[1] for e in watch.user_syncs()} == {
        "test_the_gpu_watch_counts_torch_sync_warnings_and_tells_whose"
    }
    probe = watch.probe_syncs()
    assert [(e.site, e.thread) for e in probe] == [
        ("gradnorm.py:4 in hook", "MainThread"),
        ("gradnorm.py:4 in hook", "autograd-like"),
    ]
    assert watch.cpu_branch_reads() == []
