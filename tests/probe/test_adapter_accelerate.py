"""The README's Accelerate recipe, executed as printed, on a tiny CPU model.

The code block after the ``accelerate-recipe`` marker runs in a fresh interpreter (an
``Accelerator`` is process-wide state) after a prelude that defines what the recipe
takes as given (``model``, ``optimizer``, ``loader``, ``scheduler``, ``loss_fn``) and
records references: every raw micro-batch loss, and the gradient's total norm when the
recipe calls ``accelerator.clip_grad_norm_``, before it clips.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")
from adapterkit import ROOT, check, records  # noqa: E402

MARKER = "<!-- accelerate-recipe: executed by tests/probe/test_adapter_accelerate.py -->"

PRELUDE = """
import json
import accelerate
import torch
from torch.utils.data import DataLoader

torch.set_num_threads(1)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(96, 8, generator=g)
y = 10 * (x @ torch.randn(8, 1, generator=g))  # large enough that max_norm=1.0 clips
loader = DataLoader([{"x": x[i], "y": y[i]} for i in range(96)], batch_size=4)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
REF = {"norms": [], "raw": [], "lrs": []}
_clip = accelerate.Accelerator.clip_grad_norm_


def _clip_and_keep(self, parameters, *args, **kwargs):
    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    REF["norms"].append(float(torch.nn.utils.get_total_norm(grads)))
    REF["lrs"].append(optimizer.param_groups[0]["lr"])
    return _clip(self, parameters, *args, **kwargs)


accelerate.Accelerator.clip_grad_norm_ = _clip_and_keep


def loss_fn(pred, target):
    loss = torch.nn.functional.mse_loss(pred, target)
    REF["raw"].append(float(loss.detach()))
    return loss
"""

EPILOGUE = """
with open("ref.json", "w") as f:
    json.dump(REF, f)
"""


def recipe() -> str:
    readme = (ROOT / "README.md").read_text()
    assert MARKER in readme, "the README lost its Accelerate recipe"
    block = readme.split(MARKER, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "accelerator.sync_gradients" in block and "probe.step(" in block
    return block


@pytest.mark.timeout(120)
def test_the_readme_recipe_records_each_optimizer_step(tmp_path: Path) -> None:
    script = tmp_path / "recipe.py"
    script.write_text(PRELUDE + recipe() + EPILOGUE)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (log,) = (tmp_path / "dltop-runs").glob("*.jsonl")  # the probe's default path
    ref = json.loads((tmp_path / "ref.json").read_text())
    steps = records(log, "step")
    assert len(steps) == 96 // 4 // 4 == len(ref["norms"])  # 6 optimizer steps of 4 micro-batches
    assert [s["step"] for s in steps] == list(range(6))
    assert [s["grad_norm"] for s in steps] == pytest.approx(ref["norms"], rel=1e-5)
    assert min(ref["norms"]) > 2.0  # max_norm=1.0 clipped, after the probe's reading
    raw = ref["raw"]
    per_step = [sum(raw[i : i + 4]) / 4 for i in range(0, 24, 4)]
    assert [s["loss"] for s in steps] == pytest.approx(per_step, rel=1e-5)
    assert [s["lr"] for s in steps] == pytest.approx(ref["lrs"])  # the lr each step used
    assert ref["lrs"][1] < ref["lrs"][0]  # the schedule moved it
    assert [s["batch_size"] for s in steps] == [16] * 6
    assert check(log)["status"] == "finished"
