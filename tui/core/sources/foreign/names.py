"""Which column (Lightning) or tag (TensorBoard) holds which of our fields: a data table.

Names vary by author (``train/loss``, ``loss``, ``Loss/train``, ``train_loss_step``,
``val/rmse_loss``, ``lr-Adam``...). Each name gets a *role* and a *preference* (lower is
better) from the tables below, looked up in order: exact names, then name prefixes, then a
fallback on the word "loss"; the reader then keeps, per role, the name with the best
preference and, among equals, the most values. No format-specific branches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .....probe.schema import EVAL, STEP

TRAIN_LOSS, EVAL_LOSS, GRAD_NORM, LR, EPOCH = "loss", "eval_loss", "grad_norm", "lr", "epoch"
STEP_TIME, DATA_TIME, SAMPLES = "step_time", "data_time", "samples_per_s"
EVAL_EXTRA = "eval_extra"  # another eval metric, kept under its name without the prefix
# any other scalar logged per step (accuracy, reward, perplexity...): kept under its own
# name, as the probe keeps a user's extras, so a panel can chart it (the viewer's `m`)
STEP_EXTRA = "step_extra"
# our own step fields: a tool's scalar of that name that is not what we mean by it is kept
# as an extra under "x/<name>", never over our field
STEP_OWN = frozenset(
    ("kind", "step", "t", "loss", "grad_norm", "lr", "epoch", "step_time", "data_time",
     "compute_time", "samples_per_s", "batch_size", "mem_allocated", "mem_reserved")
)  # fmt: skip
END = "end"  # the tool's end-of-training summary: the run finished
# an eval record's own fields: an eval metric of that name (a Trainer's "eval_step", a
# "val_t" column) is kept as "x/<name>", never over them
EVAL_OWN = frozenset(("kind", "step", "t", ""))
IGNORE = "ignore"

# exact names (lower case): role, preference
EXACT: dict[str, tuple[str, int]] = {
    # training loss: per-step columns first, epoch means last
    "train/loss": (TRAIN_LOSS, 0), "loss": (TRAIN_LOSS, 0), "train_loss_step": (TRAIN_LOSS, 0),
    "train/loss_step": (TRAIN_LOSS, 0), "train_loss": (TRAIN_LOSS, 1), "loss/train": (TRAIN_LOSS, 1),
    "training_loss": (TRAIN_LOSS, 1), "train/train_loss_step": (TRAIN_LOSS, 1),
    "loss_step": (TRAIN_LOSS, 1), "losses/train": (TRAIN_LOSS, 2),
    "train_loss_epoch": (TRAIN_LOSS, 8), "train/loss_epoch": (TRAIN_LOSS, 8),
    "loss_epoch": (TRAIN_LOSS, 8), "epoch_loss": (TRAIN_LOSS, 9),  # Keras: one value an epoch
    # validation loss: the epoch value before per-batch values
    "eval/loss": (EVAL_LOSS, 0), "eval_loss": (EVAL_LOSS, 0), "val_loss": (EVAL_LOSS, 0),
    "val/loss": (EVAL_LOSS, 0), "valid_loss": (EVAL_LOSS, 0), "validation_loss": (EVAL_LOSS, 0),
    "loss/val": (EVAL_LOSS, 0), "loss/valid": (EVAL_LOSS, 0), "loss/validation": (EVAL_LOSS, 0),
    "val_loss_epoch": (EVAL_LOSS, 1), "validation/loss": (EVAL_LOSS, 1),
    "val_loss_step": (EVAL_LOSS, 6),
    # gradient norm, learning rate, epoch
    "train/grad_norm": (GRAD_NORM, 0), "grad_norm": (GRAD_NORM, 0),
    "grad_2.0_norm_total": (GRAD_NORM, 1), "gradient_norm": (GRAD_NORM, 1),
    "train/learning_rate": (LR, 0), "learning_rate": (LR, 0), "lr": (LR, 0), "train/lr": (LR, 1),
    "epoch_learning_rate": (LR, 2),
    "epoch": (EPOCH, 0), "train/epoch": (EPOCH, 0),
    # step timings and throughput, as timing callbacks and our own probe name them
    "step_time": (STEP_TIME, 0), "time/step": (STEP_TIME, 1), "train/step_time": (STEP_TIME, 1),
    "perf/step_time": (STEP_TIME, 1), "time/step_time": (STEP_TIME, 1),
    "data_time": (DATA_TIME, 0), "time/data": (DATA_TIME, 1), "train/data_time": (DATA_TIME, 1),
    "perf/data_time": (DATA_TIME, 1), "time/data_time": (DATA_TIME, 1),
    "samples_per_s": (SAMPLES, 0), "samples_per_second": (SAMPLES, 1),
    "train/samples_per_second": (SAMPLES, 1), "perf/samples_per_s": (SAMPLES, 1),
    # Trainer's summaries: not a step's value
    "train/train_loss": (IGNORE, 0), "train_loss_mean": (IGNORE, 0),
    "train/train_runtime": (END, 0), "train_runtime": (END, 0),
    "hp_metric": (IGNORE, 0), "step": (IGNORE, 0), "global_step": (IGNORE, 0),
}  # fmt: skip

# name prefixes (lower case), tried in order after the exact names
PREFIX: tuple[tuple[str, str, int], ...] = (
    ("lr-", LR, 1),  # Lightning's LearningRateMonitor: lr-Adam, lr-AdamW, lr-SGD
    ("lr_", LR, 3),
    ("grad_norm", GRAD_NORM, 3),
    ("eval/", EVAL_EXTRA, 0),
    ("eval_", EVAL_EXTRA, 0),
    ("val/", EVAL_EXTRA, 0),
    ("val_", EVAL_EXTRA, 0),
    ("valid_", EVAL_EXTRA, 0),
    ("validation/", EVAL_EXTRA, 0),
    ("validation_", EVAL_EXTRA, 0),
)

# an eval metric that is about speed, not the model
IGNORED_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "_flos")

# fallback for any other name with "loss" in it: its words say train or validation
EVAL_WORDS = frozenset(("val", "valid", "validation", "eval", "evaluation", "dev"))
TEST_WORDS = frozenset(("test", "testing"))
FALLBACK_TRAIN, FALLBACK_EVAL, EPOCH_PENALTY = 5, 5, 3

_WORDS = re.compile(r"[^a-z0-9]+")


def classify(name: str) -> tuple[str, int] | None:
    """(role, preference) for a column or tag name; None when we have no use for it."""
    low = name.strip().lower()
    if low in EXACT:
        return EXACT[low]
    if low.endswith(IGNORED_SUFFIXES):
        return None
    found = _named(low)
    if found is not None:
        return found
    if not low or len(low) > 200:
        return None
    if set(_WORDS.split(low)) & TEST_WORDS:
        return None  # a test loop's metric, on the test loop's own step count
    return STEP_EXTRA, 9  # any other scalar: an extra of the step, by its own name


def _named(low: str) -> tuple[str, int] | None:
    words = set(_WORDS.split(low))
    if "loss" in low:
        if words & TEST_WORDS:
            return None
        epoch = EPOCH_PENALTY if low.endswith("epoch") else 0
        if words & EVAL_WORDS:
            return EVAL_LOSS, FALLBACK_EVAL + epoch
        return TRAIN_LOSS, FALLBACK_TRAIN + epoch
    for prefix, role, pref in PREFIX:
        if low.startswith(prefix):
            return role, pref
    return None


def extra_name(name: str) -> str:
    """An eval metric's field name: the prefix (``eval/``, ``val_``...) taken off."""
    low = name.strip()
    for prefix, role, _ in PREFIX:
        if role == EVAL_EXTRA and low.lower().startswith(prefix):
            return low[len(prefix) :] or low
    return low


def choose(counts: Mapping[str, int], max_extras: int = 16) -> dict[str, str]:
    """Map each name worth reading to the field it fills: per role, the name with the best
    preference, then the most values; eval extras by their own name (at most ``max_extras``),
    and the other scalars as extras of the step (the ``max_extras`` with most values)."""
    best: dict[str, tuple[int, int, str]] = {}
    out: dict[str, str] = {}
    extras = 0
    step_extras: list[tuple[int, str]] = []
    for name, count in counts.items():
        found = classify(name)
        if found is None or count <= 0:
            continue
        role, pref = found
        if role == IGNORE:
            continue
        if role == EVAL_EXTRA:
            if extras < max_extras:
                field = extra_name(name)
                out[name] = f"{EVAL_EXTRA}:{'x/' + field if field in EVAL_OWN else field}"
                extras += 1
            continue
        if role == STEP_EXTRA:
            step_extras.append((-count, name))
            continue
        key = (pref, -count, name)
        if role not in best or key < best[role]:
            best[role] = key
    for role, (_, _, name) in best.items():
        out[name] = role
    taken = {target(r)[1] for r in out.values() if r != END}
    for _, name in sorted(step_extras)[:max_extras]:
        if name in out:
            continue
        field = name.strip()
        if field.lower() in STEP_OWN or field in taken:
            field = f"x/{field}"
        out[name] = f"{STEP_EXTRA}:{field}"
        taken.add(field)
    return out


def target(role: str) -> tuple[str, str]:
    """(record kind, field) that a chosen name's role fills."""
    if role == EVAL_LOSS:
        return EVAL, "loss"
    if role.startswith(EVAL_EXTRA + ":"):
        return EVAL, role.split(":", 1)[1]
    if role.startswith(STEP_EXTRA + ":"):
        return STEP, role.split(":", 1)[1]
    return STEP, role


def lacking(roles: Iterable[str], wall_time: bool) -> str:
    """What the log cannot tell, for its note: "no wall time, step time, data time,
    memory or GPU readings", less the timings it has columns or tags for."""
    have = set(roles)
    missing = [] if wall_time else ["wall time"]
    missing += [w for r, w in ((STEP_TIME, "step time"), (DATA_TIME, "data time")) if r not in have]
    missing.append("memory or GPU readings")
    return ("wall time per value; " if wall_time else "") + "no " + ", ".join(missing)
