"""The engine's state as named facts (``dltop.tui.core.rules.facts.FACT_NAMES``), for checklists.

Computed on demand from the engine's windows without touching them, so asking for facts
never changes what the rules decide next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..text.fmt import mib
from ..text.fmt import number as fmt
from .facts import FACT_NAMES, Fact
from .window import median_of, quantile_of

if TYPE_CHECKING:
    from .ruleset import RuleSet


def collect_facts(e: RuleSet) -> dict[str, Fact]:
    layers = e.layers_rule
    data = e.data_rule
    mem = e.memory_rule
    stall = e.stall_rule
    over = e.overfitting_rule
    sys_util = e.gpu_util
    last = e.last_step
    vals: dict[str, tuple[Any, int | None, str]] = {}

    def put(name: str, value: Any, step: int | None = None, text: str = "") -> None:
        vals[name] = (value, step, text)

    put("steps", e.steps)
    put("last_step", last)
    put("lr_initial", e.lr_initial)
    put("lr_last", e.lr, last)
    put("lr_max", e.lr_max)
    put("lr_at_first_nonfinite", e.lr_at_first_nonfinite, e.first_nonfinite_step)
    put("first_nonfinite_step", e.first_nonfinite_step, e.first_nonfinite_step)
    gvals = list(e.fig.gn_win)
    put("grad_norm_median", median_of(gvals), last)
    put("grad_norm_max", e.gn_max_seen)
    put("grad_norm_before_nonfinite", e.gn_before_nonfinite, e.first_nonfinite_step)
    r = e.gn_before_nonfinite_ratio
    put(
        "grad_norm_before_nonfinite_ratio",
        r,
        e.first_nonfinite_step,
        f"peak grad norm before it {fmt(r)}x the earlier median" if r is not None else "",
    )
    put("grad_norm_min_recent", min(gvals) if gvals else None, last)
    lvals = list(e.fig.loss_win)
    loss_last = median_of(lvals)
    put(
        "loss_first",
        e.fig.loss_first if e.fig.loss_first is not None else median_of(e.fig.loss_first_vals),
    )
    put("loss_last", loss_last, last)
    put("loss_min", e.fig.loss_min)
    lf = vals["loss_first"][0]
    imp = (lf - loss_last) / abs(lf) if lf and loss_last is not None else None
    put(
        "loss_rel_improvement",
        imp,
        last,
        f"{fmt(100 * imp)} % better than at the start" if imp is not None else "",
    )
    put("loss_max_jump_ratio", e.loss_max_jump_ratio)
    share = median_of(list(data.share)[-50:]) if data.share else None
    put(
        "data_wait_share",
        share,
        last,
        f"data wait {fmt(100 * share)} % of the step" if share is not None else "",
    )
    ivals = list(stall.intervals.values)
    st = list(data.st) or [x for x in ivals]
    put("step_time_median", median_of(st))
    put("step_time_p95", quantile_of(st, 0.95))
    put("gpu_util_median", median_of(sys_util) if sys_util else None)
    put("mem_start", mem.start, None, mib(mem.start) if mem.start is not None else "")
    put("mem_last", mem.last, last, mib(mem.last) if mem.last is not None else "")
    growth = mem.last - mem.start if mem.last is not None and mem.start is not None else None
    put("mem_growth", growth, last, mib(growth) if growth is not None else "")
    put("mem_growth_per_step", mem.slope)
    put("mem_limit", mem.limit, None, mib(mem.limit) if mem.limit is not None else "")
    put("batch_size", e.batch_size)
    ev = over.evals
    best = ev[over.best] if over.best is not None and over.best < len(ev) else None
    put("eval_loss_best", best[1] if best else None, best[0] if best else None)
    put("eval_loss_best_step", best[0] if best else None)
    lastev = over.last
    put("eval_loss_last", lastev[1] if lastev else None, lastev[0] if lastev else None)
    gap = lastev[1] - lastev[2] if lastev and lastev[2] is not None else None
    put("eval_train_gap", gap, lastev[0] if lastev else None)
    put("evals", over.count)
    put(
        "zero_grad_fraction_max",
        layers.zero_frac_max,
        layers.layers_step,
        f"{fmt(100 * layers.zero_frac_max)} % zero in {layers.zero_frac_layer}"
        if layers.zero_frac_max is not None
        else "",
    )
    put("first_last_grad_ratio", layers.first_last_ratio, layers.layers_step)
    wg = layers.without_grad
    put(
        "layers_without_grad",
        len(wg) if layers.layers_step is not None else None,
        layers.layers_step,
        f"{len(wg)} without gradient" + (f": {', '.join(wg[:3])}" if wg else ""),
    )
    since = e.last_t - e.last_step_t if e.last_t is not None and e.last_step_t is not None else None
    put("seconds_since_last_step", since, last)
    put("device", e.device)
    su = e.setup
    put("loader_num_workers", su.num_workers)
    put("loader_pin_memory", su.pin_memory)
    put("batch_size_first", e.batch_size_first)
    put("batch_size_max", e.batch_size_max)
    put("clip_max_norm", su.clip_max_norm)
    put("amp_dtype", su.amp_dtype)
    put("loss_scaler", su.loss_scaler)
    put("optimizer", su.optimizer)
    put("momentum", su.momentum)
    put("weight_decay", su.weight_decay)
    out: dict[str, Fact] = {}
    for name in FACT_NAMES:
        value, step, text = vals.get(name, (None, None, ""))
        out[name] = Fact(name, value, step, text)
    return out
