"""Healthy runs stay quiet: no warning or critical through warm-up, LR jumps and eval phases.

This is where published detectors fail (see the notes on detection). Every healthy
variant runs with several seeds; info alerts (a converged plateau) are allowed.
"""

from __future__ import annotations

import pytest
from dltop.tui.core.diagnosis.status import run_state
from rulekit import Run, lr_constant, lr_step, lr_warmup_cosine, noisy, run_engine

VARIANTS = {
    "constant": Run(),
    "step_schedule": Run(lr=lr_step(0.1, every=300, gamma=0.1)),
    "step_schedule_up": Run(lr=lr_step(0.01, every=400, gamma=3.0)),
    "warmup_cosine": Run(lr=lr_warmup_cosine(0.1, warmup=100, total=1000)),
    "long_warmup_flat_start": Run(
        lr=lr_warmup_cosine(0.1, warmup=400, total=1500), steps=1500, tau=500
    ),
    "eval_phases": Run(eval_every=100, eval_seconds=30.0),
    "eval_without_phases": Run(eval_every=100, eval_phase=False, eval_seconds=5.0),
    "small_noisy_batches": Run(noise=0.6, gn_noise=0.8),
    "long_converged": Run(steps=6000, tau=300),
    "no_memory_no_layers": Run(mem=None, layers_every=0),
    "float_only_user": Run(layers_every=0, mem=None, gn0=None, lr=None),
    "lr_zero_frozen": Run(lr=lr_constant(0.0), tau=1e9),
    "fast_steps": Run(dt=0.001, data_share=0.3),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_healthy_run_raises_no_warning(name: str, seed: int) -> None:
    run = VARIANTS[name]
    run.seed = seed
    eng = run_engine(run)
    assert noisy(eng) == []
    assert run_state(eng).status == "finished"
