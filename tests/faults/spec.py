"""What a fault-suite scenario is: the recipe, its labels, and the names of measured onsets.

Kept apart from the catalogue (``scenarios.py`` for the faults, ``healthy.py`` for the
healthy runs) so that both lists read as plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.faults.data import DataFault

# Onsets measured during the training (see train.py); ints are fixed steps.
FIRST_NONFINITE = "first_nonfinite"  # first step whose loss is NaN/Inf
BEST_EVAL = "best_eval"  # step of the lowest held-out loss
CRASH_STEP = "crash_step"  # the step that raised
RSS_256MIB = "rss_256mib"  # first step at which process RSS grew 256 MiB over its start

HEALTHY_SEEDS = (0, 1, 2)
FAULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Scenario:
    """One training recipe; ``train.py`` turns it plus a seed into a log."""

    name: str
    doc: str
    task: str
    model: str
    optimizer: str  # "sgd" | "adam" | "adamw"
    lr: float
    steps: int
    expected: frozenset[str] = frozenset()  # empty: healthy
    onset: int | str = 0
    budget: int = 50
    inject: int = 0  # first step the fault acts: an alert before it is a false alarm
    pattern: str | None = None  # crash-pattern id the oom/crash alert must name
    model_opts: dict[str, object] = field(default_factory=dict)
    batch_size: int = 32
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "constant"  # constant | step | cosine | warmup_cosine | jump | sgdr | cyclic
    schedule_opts: dict[str, float] = field(default_factory=dict)
    clip: float | None = None  # max norm for clip_grad_norm_
    eval_every: int = 0
    n_train: int = 4096
    label_noise: float = 0.0  # share of random labels (1.0: no signal at all)
    label_smoothing: float = 0.0  # nn.CrossEntropyLoss(label_smoothing=...)
    objective: str = "supervised"  # supervised | reinforce (a REINFORCE bandit loss)
    pretrain_steps: int = 0  # unlogged Adam steps before the probe starts (a fine-tune)
    shift_at: int = 0  # from this step on, the batches come from the shifted data mix
    shift: float = 0.0  # how far that mix's inputs are moved (``data.make_task``)
    data_fault: DataFault | None = None
    loop_fault: str | None = None  # no_zero_grad | keep_graph | grow_batch
    mem_cap_mib: int = 0  # RLIMIT_AS headroom over the address space at start
    seeds: tuple[int, ...] = FAULT_SEEDS
    quick: bool = False  # part of the fast test subset and of --quick
    timeout_s: float = 120.0
    check_set: dict[str, str] = field(default_factory=dict)  # `dltop check --set k=v`

    @property
    def healthy(self) -> bool:
        return not self.expected
