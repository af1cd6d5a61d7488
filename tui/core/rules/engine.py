"""The rules engine: records in, alerts and facts out, in the log's order.

The engine parses each step once into plain attributes (``loss``, ``gn``, ``lr``...),
lets each rule look at them, then pushes them into shared rolling windows. ``feed`` takes
one record; ``feed_many`` takes a batch (a live tick, a replay chunk) and sends its runs
of plain steps through ``steploop`` with the per-step state in locals: the same answers.
Everything a rule decides depends only on the records and their order, never on when
``alerts()`` or ``facts()`` is called, so a log replayed in one batch gives the same
alerts as the same log followed live. Only :meth:`RuleEngine.status` looks at the wall clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ....probe.schema import as_float
from ..alerts import CRITICAL, WARNING, Alert, AlertSink
from ..facts import Fact
from .base import Rule
from .config import Config
from .evals import eval_losses, eval_step
from .figures import Figures
from .segments import Segments
from .setup import Setup
from .steploop import feed_steps, on_step
from .window import Block, present

if TYPE_CHECKING:
    from ..status import RunState

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


class RuleEngine:
    """Incremental diagnosis of one run (one rank's log)."""

    def __init__(self, config: Config | None = None) -> None:
        from . import (  # noqa: PLC0415 - rule modules import this one
            collapse,
            crashes,
            data_bound,
            divergence,
            dropped,
            gradients,
            memory,
            metrics,
            nan_metrics,
            numeric,
            overfitting,
            plateau,
            progress,
            spikes,
            stall,
        )

        self.config = config or Config()
        self.segments = Segments(
            self.config.section("mixed_runs")
        )  # kept across segment resets (see _new_segment)
        g = self.config.section("general")
        self.warmup_steps = int(g["warmup_steps"])
        self.lr_jump_ratio = float(g["lr_jump_ratio"])
        self.lr_grace_steps = int(g["lr_grace_steps"])
        self.progress_block = max(2, int(g["progress_block"]))
        self.progress_min_gain = float(g["progress_min_gain"])
        self.progress_total_gain = float(g["progress_total_gain"])
        self.sink = AlertSink()  # every rule reports here (kept across segments)
        self.segment_mark = 0  # alerts in sink slots before this belong to earlier segments

        # counters and identity
        self.steps = 0
        self.last_step: int | None = None
        self.meta: dict[str, Any] | None = None
        self.first_t: float | None = None
        self.last_t: float | None = None  # latest timestamp of any record
        self.last_step_t: float | None = None
        self.records = 0

        # the current step, parsed (valid during on_step hooks)
        self.step = 0
        self.first_step: int | None = None  # this segment's first step
        self.first_step_t: float | None = None  # ... and its time
        self.t: float | None = None
        self.loss: float | None = None
        self.loss_finite = False
        self.gn: float | None = None
        self.gn_finite = False
        self.lr: float | None = None
        self.lr_prev: float | None = None
        self.lr_jump_step: int | None = None  # step of the latest schedule jump
        self.in_grace = False  # within lr_grace_steps of a jump: spike/explosion warnings wait
        # ... and critical explosions too, unless the jump took lr to a new maximum: a
        # schedule going back to a level the run already trained at (a restart, a decay)
        # explains a burst, an lr 50x above anything seen before does not
        self.grace_critical = False
        self.warm = False  # past warmup_steps
        self.timing_ok = True  # step timings are not distorted by a phase / pause
        self.rec: dict[str, Any] = {}

        # phases (eval, checkpoint...) declared by the user
        # (the one record of them: the stall rule and the run status read these)
        self.phase: str | None = None  # the phase in progress
        self.phase_name: str | None = None  # the latest phase's name, kept after it ends
        self.phase_since: float | None = None  # when the latest phase began (record time)
        self.phase_ended = False

        # shared windows (sized by the spike/explosion sections), refreshed per block
        ls = self.config.section("loss_spike")
        gs = self.config.section("grad_explosion")
        self.block_size = max(1, int(g["block_steps"]))
        self.blk = Block()
        # the derived figures every rule reads (medians, maxima, spreads, the progress gate)
        self.fig = Figures(
            int(ls["window"]),
            int(gs["window"]),
            self.progress_block,
            self.progress_min_gain,
            self.progress_total_gain,
        )
        self.loss_hi = math.inf  # inline thresholds, returned by the spike rules at block ends
        self.gn_hi = math.inf
        self.gn_warn = math.inf

        # facts kept along the way
        self.lr_initial: float | None = None
        self.lr_max: float | None = None
        self.first_nonfinite_step: int | None = None  # loss or grad norm, whichever came first
        self.lr_at_first_nonfinite: float | None = None
        self.gn_before_nonfinite: float | None = None
        self.gn_before_nonfinite_ratio: float | None = None
        self.last_finite_gn: float | None = None
        self.gn_max_seen: float | None = None
        self.loss_max_jump_ratio: float | None = None
        self.batch_size: Any = None
        self.gpu_util: deque[float] = deque(maxlen=120)
        self.device: str | None = None
        # where the training loop was at the latest heartbeat (the probe says: data_wait,
        # forward, backward, optimizer, after_step, compute, outside_loop) and since when:
        # what names the rank a hung job waits for (``ranks.hung_rank``)
        self.where: str | None = None
        self.where_since: float | None = None
        # the run's set-up as the probe recorded it (``config`` events): the data loader,
        # clipping, AMP, the optimizer; what checklists ask and the log can now answer
        self.setup = Setup()
        self.batch_size_first: Any = None
        self.batch_size_max: Any = None

        # Every rule, by a typed attribute: the per-step path, the run status and the facts
        # read them as such (a renamed class is a type error, never a KeyError at run time).
        self.nonfinite_rule = numeric.NonFinite(self)
        self.spike_rule = spikes.LossSpike(self)
        self.explosion_rule = spikes.GradExplosion(self)
        self.divergence_rule = divergence.Divergence(self)
        self.layers_rule = gradients.LayerGradients(self)
        self.plateau_rule = plateau.Plateau(self)
        self.collapse_rule = collapse.LossCollapse(self)
        self.oscillation_rule = progress.Oscillation(self)
        self.overfitting_rule = overfitting.Overfitting(self)
        self.metric_rule = metrics.MetricMismatch(self)
        self.nan_metric_rule = nan_metrics.NonFiniteMetrics(self)
        self.data_rule = data_bound.DataBound(self)
        self.memory_rule = memory.MemoryGrowth(self)
        self.stall_rule = stall.Stall(self)
        self.crash_rule = crashes.Crashes(self)
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

    # ------------------------------------------------------------------ feeding

    def feed_many(self, records: Iterable[dict[str, Any]]) -> None:
        """Take records in order; runs of plain steps go through ``steploop`` (the same
        answers as ``feed`` one record at a time, at about two thirds of its cost per step)."""
        recs = records if isinstance(records, list) else list(records)
        feed = self.feed
        i, n = 0, len(recs)
        while i < n:
            rec = recs[i]
            if rec.get("kind") == "step":
                i = feed_steps(self, recs, i, n)
            else:
                feed(rec)
                i += 1

    def feed(self, record: dict[str, Any]) -> None:
        """Take one record; unknown kinds and malformed fields are ignored."""
        kind = record.get("kind")
        self.records += 1
        t = record.get("t")
        if type(t) is not float:
            t = as_float(t)
        if t is not None and t - t == 0.0:
            if self.first_t is None:
                self.first_t = t
            if self.last_t is None or t > self.last_t:
                self.last_t = t
        else:
            t = None
        if kind == "step":
            on_step(self, record, t)
        elif kind == "heartbeat":
            where = record.get("where")
            if isinstance(where, str) and where:
                self.where = where[:32]
                self.where_since = as_float(record.get("where_since"))
            if t is not None:
                for h in self._time_hooks:
                    h(self, t)
        elif kind == "sys":
            gpus = record.get("gpus")
            if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
                u = as_float(gpus[0].get("util"))
                if u is not None:
                    self.gpu_util.append(u)
            for h in self._sys_hooks:
                h(self, record)
            if t is not None:
                for h in self._time_hooks:
                    h(self, t)
        elif kind == "eval":
            self.fig.evals.push(eval_step(record, self.last_step), eval_losses(record))
            for h in self._eval_hooks:
                h(self, record)
        elif kind == "layers":
            if self.blk.steps:
                self._close_block()  # the gradient rules read the progress gate up to here
            for h in self._layers_hooks:
                h(self, record)
        elif kind == "event":
            typ = record.get("type")
            if typ == "phase":
                self._on_phase(record, t)
            elif typ == "config":
                self.setup.take(record)
            elif typ in ("exit", "exception", "oom") and self.blk.steps:
                self._close_block()  # the run is ending: judge its last steps now
            for h in self._event_hooks:
                h(self, record)
        elif kind == "meta" and self.segments.on_meta(record):
            if self.meta is not None:  # another run took over the file: a new segment
                self._new_segment(None, "a new run (meta record) in the same file")
            self.meta = record
            devs = record.get("devices")
            if isinstance(devs, list) and devs and isinstance(devs[0], dict):
                self.device = str(devs[0].get("type") or "") or None

    def _on_phase(self, rec: dict[str, Any], t: float | None) -> None:
        state = rec.get("state")
        if state == "begin":
            self.phase = self.phase_name = str(rec.get("name") or "phase")
            self.phase_since = t
        elif state == "end":
            self.phase = None
            self.phase_ended = True

    def finish(self) -> None:
        """Judge the steps still buffered: call once no more steps will come.

        ``dltop check`` calls it at the end of the file. An exit, exception or OOM record
        already closes the block, but a run killed by SIGKILL (or the kernel's OOM killer)
        writes none, and up to ``block_steps`` final steps would otherwise never be judged.
        A live viewer calls it when the run is known to be over without an exit record
        (its process is gone), and after replaying another tool's log; alerts never depend
        on when ``alerts()`` is read. The rules' ``on_finish`` hooks run once: judgements
        that need the whole run (a short run that never learned, a spike near the end).
        """
        if self.blk.steps:
            self._close_block()
        if not self.finished:
            self.finished = True
            for h in self._finish_hooks:
                h(self)

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

    # ------------------------------------------------------------------ reading

    def alerts(self) -> list[Alert]:
        """Every alert raised so far, active or not, in the order they were raised."""
        return self.sink.alerts

    def active_alerts(self) -> list[Alert]:
        return [a for a in self.sink.alerts if a.active]

    def facts(self) -> dict[str, Fact]:
        from .facts import collect_facts  # noqa: PLC0415

        return collect_facts(self)

    def status(self, now: float | None = None, pid_alive: bool | None = None) -> RunState:
        from ..status import run_state  # noqa: PLC0415

        return run_state(self, now=now, pid_alive=pid_alive)
