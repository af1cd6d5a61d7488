"""The rules engine: records in, alerts and facts out, in the log's order.

The engine parses each step once into plain attributes (``loss``, ``gn``, ``lr``...),
lets each rule look at them, then pushes them into shared rolling windows. ``feed`` takes
one record; ``feed_many`` takes a batch (a live tick, a replay chunk) and sends its runs
of plain steps through ``steploop`` with the per-step state in locals: the same answers.
Everything a rule decides depends only on the records and their order, never on when
``alerts()`` or ``facts()`` is called, so a log replayed in one batch gives the same
alerts as the same log followed live. The run's status (``diagnosis.status.run_state``)
is judged from this state and the wall clock, one wing up.

Layers: ``state.EngineState`` (what the rules read), ``ruleset.RuleSet`` (the rules, a
block's end, a new segment), this module (records routed by kind).
"""

from __future__ import annotations

from collections.abc import Iterable

from ....probe.schema import Record, as_float, step_or
from .alerts import Alert
from .evals import eval_losses
from .facts import Fact
from .ruleset import RuleSet
from .steploop import feed_steps, on_step


class RuleEngine(RuleSet):
    """Incremental diagnosis of one run (one rank's log)."""

    # ------------------------------------------------------------------ feeding

    def feed_many(self, records: Iterable[Record]) -> None:
        """Take records in order; runs of plain steps go through ``steploop`` (the same
        answers as ``feed`` one record at a time, at about two thirds of its cost per step)."""
        recs = records if isinstance(records, list) else list(records)
        feed = self.feed
        i, n = 0, len(recs)
        while i < n:
            rec = recs[i]
            if rec.get("kind") == "step":
                i = feed_steps(self, recs, i, n, feed)
            else:
                feed(rec)
                i += 1

    def feed(self, record: Record) -> None:
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
            self.fig.evals.push(step_or(record, self.last_step), eval_losses(record))
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
            elif typ in ("exit", "exception", "oom", "signal") and self.blk.steps:
                # the run is ending: judge its last steps now (and a signal's steps before
                # it are not read as steps after it, a run that went on)
                self._close_block()
            for h in self._event_hooks:
                h(self, record)
        elif kind == "meta" and self.segments.on_meta(record):
            if self.meta is not None:  # another run took over the file: a new segment
                self._new_segment(None, "a new run (meta record) in the same file")
            self.meta = record
            devs = record.get("devices")
            if isinstance(devs, list) and devs and isinstance(devs[0], dict):
                self.device = str(devs[0].get("type") or "") or None

    def _on_phase(self, rec: Record, t: float | None) -> None:
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

    # ------------------------------------------------------------------ reading

    def alerts(self) -> list[Alert]:
        """Every alert raised so far, active or not, in the order they were raised."""
        return self.sink.alerts

    def facts(self) -> dict[str, Fact]:
        from .run_facts import collect_facts  # noqa: PLC0415

        return collect_facts(self)
