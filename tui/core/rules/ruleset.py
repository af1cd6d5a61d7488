"""Every rule of the engine, by name, and the routing of a block of steps to them.

Why apart from ``engine.py``: the per-step path (``steploop``), the run status and the
facts read the rules by their typed attributes (``crash_rule``, ``stall_rule``...); they
are typed against this class, which the engine extends with the routing of records, so
none of them imports the engine and the engine imports each of them without a cycle.
A rule that needs another rule's finding is handed it here, at construction
(``Plateau`` gets the divergence tracker and the crash rule's ending), never through
the engine.
"""

from __future__ import annotations

from . import (
    collapse,
    crashes,
    data_bound,
    divergence,
    dropped,
    gradients,
    memory,
    metric_mismatch,
    nonfinite,
    nonfinite_metrics,
    oscillation,
    overfitting,
    plateau,
    spikes,
    stall,
)
from .alerts import CRITICAL, WARNING
from .base import Rule
from .config import Config
from .state import EngineState
from .window import present

_HOOKS = ("on_block", "on_eval", "on_layers", "on_event", "on_sys", "on_time", "on_finish")
_HOOK_TABLES: dict[tuple[type, ...], tuple[tuple[str, tuple[int, ...]], ...]] = {}


def _hook_table(rules: list[Rule]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Per hook, the positions of the rules that define it: a property of the rules'
    classes, worked out once (a log rewinding at every step builds an engine per step)."""
    kinds = tuple(type(r) for r in rules)
    table = _HOOK_TABLES.get(kinds)
    if table is None:
        table = _HOOK_TABLES[kinds] = tuple(
            (
                name,
                tuple(
                    i for i, k in enumerate(kinds) if getattr(k, name) is not getattr(Rule, name)
                ),
            )
            for name in _HOOKS
        )
    return table


class RuleSet(EngineState):
    """The run's state with every rule on it, and what happens at a block's end and at
    a new segment of the log."""

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        # Every rule, by a typed attribute: the per-step path, the run status and the facts
        # read them as such (a renamed class is a type error, never a KeyError at run time).
        self.nonfinite_rule = nonfinite.NonFinite(self)
        self.spike_rule = spikes.LossSpike(self)
        self.explosion_rule = spikes.GradExplosion(self)
        self.divergence_rule = divergence.Divergence(self)
        self.layers_rule = gradients.LayerGradients(self)
        self.crash_rule = crashes.Crashes(self)  # before the plateau, which reads its ending
        self.plateau_rule = plateau.Plateau(
            self, self.divergence_rule.tr.current, self.crash_rule.run_ending
        )
        self.collapse_rule = collapse.LossCollapse(self)
        self.oscillation_rule = oscillation.Oscillation(self)
        self.overfitting_rule = overfitting.Overfitting(self)
        self.metric_rule = metric_mismatch.MetricMismatch(self)
        self.nan_metric_rule = nonfinite_metrics.NonFiniteMetrics(self)
        self.data_rule = data_bound.DataBound(self)
        self.memory_rule = memory.MemoryGrowth(self)
        self.stall_rule = stall.Stall(self)
        self.dropped_rule = dropped.RecordsDropped(self)
        self.rules: list[Rule] = [
            self.nonfinite_rule,
            self.spike_rule,
            self.explosion_rule,
            self.divergence_rule,
            self.layers_rule,
            self.plateau_rule,
            self.collapse_rule,
            self.oscillation_rule,
            self.overfitting_rule,
            self.metric_rule,
            self.nan_metric_rule,
            self.data_rule,
            self.memory_rule,
            self.stall_rule,
            self.crash_rule,
            self.dropped_rule,
        ]
        rules = self.rules
        hooks = {name: [getattr(rules[i], name) for i in at] for name, at in _hook_table(rules)}
        self._block_hooks = hooks["on_block"]
        self._eval_hooks = hooks["on_eval"]
        self._layers_hooks = hooks["on_layers"]
        self._event_hooks = hooks["on_event"]
        self._sys_hooks = hooks["on_sys"]
        self._time_hooks = hooks["on_time"]
        self._finish_hooks = hooks["on_finish"]
        self.finished = False  # finish() ran: the log is all there is

    # what a new segment keeps: counts, identity, the file's clock, alerts already raised,
    # and the facts of the first NaN (its checklist must still read them after a restart)
    _KEPT_ACROSS_SEGMENTS = (
        "sink", "segments", "steps", "records", "meta", "device", "first_t", "last_t",
        "last_step_t", "first_nonfinite_step", "lr_at_first_nonfinite", "gn_before_nonfinite",
        "gn_before_nonfinite_ratio", "gn_max_seen", "loss_max_jump_ratio", "lr_max",
        "segment_mark", "setup", "batch_size_first", "batch_size_max",
    )  # fmt: skip

    def _new_segment(self, step: int | None, why: str) -> None:
        """Judge what is buffered, then start the rules afresh, keeping what the file as a
        whole is known by (see ``_KEPT_ACROSS_SEGMENTS``)."""
        if self.blk.steps:
            self._close_block()
        for r in self.rules:  # an episode still up belongs to the part that ended
            for tr in r.alert_trackers():
                if tr.active:
                    tr.clear(self.last_step)
        # a crash of an earlier part that the job came back from (an elastic restart, a
        # rerun onto the same log) is history, not a run wasting its compute now. Only the
        # alerts raised since the last segment began: earlier parts' alerts were looked at
        # then and no rule can touch them since (a log restarting 20 k times must not cost
        # 20 k² looks)
        for slot, a in self.sink.since(self.segment_mark):
            if (
                a.id in ("crash", "oom")
                and a.severity == CRITICAL
                and not a.evidence.get("restarted")
            ):
                self.sink.revise(
                    slot,
                    {"restarted": True},
                    severity=WARNING,
                    message=a.message + "; the run started again after it",
                )
        self.segment_mark = len(self.sink)
        kept = {name: getattr(self, name) for name in self._KEPT_ACROSS_SEGMENTS}
        self.__init__(self.config)  # type: ignore[misc]
        for name, value in kept.items():
            setattr(self, name, value)
        self.segments.started(step, why)

    def _close_block(self) -> None:
        b = self.blk
        self.warm = self.steps > self.warmup_steps
        for h in self._block_hooks:
            h(self, b)
        losses = present(b.loss)
        gns = present(b.gn)
        fig = self.fig
        med = fig.loss_med  # the largest jump of this block against the window before it
        if losses and med and med > 0 and self.warm:
            jr = max(losses) / med
            if self.loss_max_jump_ratio is None or jr > self.loss_max_jump_ratio:
                self.loss_max_jump_ratio = jr
        first = self.first_step if self.first_step is not None else b.steps[0]
        fig.push(losses, gns, b.steps[-1] - first + 1 if b.steps else 0)
        hi = fig.gn_wmax
        if gns and hi is not None and (self.gn_max_seen is None or hi > self.gn_max_seen):
            self.gn_max_seen = hi
        bs = b.recs[-1].get("batch_size")
        if bs is not None:
            self.batch_size = bs
            if type(bs) is int and bs > 0:
                if self.batch_size_first is None:
                    self.batch_size_first = bs
                if self.batch_size_max is None or bs > self.batch_size_max:
                    self.batch_size_max = bs
        self.loss_hi = self.spike_rule.threshold(self)
        self.gn_hi, self.gn_warn = self.explosion_rule.thresholds(self)
        b.clear()
