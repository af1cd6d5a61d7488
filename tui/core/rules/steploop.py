"""The engine's per-step path: one step at a time (``on_step``, what ``feed`` calls), and
runs of plain steps with the engine's state in locals (``feed_steps``, what ``feed_many``
uses). Side by side, so the two can be read against each other.

Why two: ``on_step`` reads and writes some thirty engine attributes per step, about
1.3 us, more than msgspec takes to decode the record (0.9 us this way). Most steps of a
long run are plain: every field a finite float of the usual type, the learning rate
unchanged, no inline threshold crossed, no watch open; for those the only work is to
append the step to the block. ``feed_steps`` does that work for consecutive plain steps with
the engine's per-step state held in local variables, written back to the engine before
anything can read it: a block end (the rules' hooks), a record that is not a plain step
(fed the engine's own way), the end of the batch.

The answers are the engine's: a step goes the fast way only when ``on_step`` would change
exactly what that loop changes (see the conditions in :func:`feed_steps`), so the
record-by-record path (``feed``) and this one give the same alerts, facts and status
(``tests/rules/test_step_loop.py`` holds them to the same state after every batch: synthetic
faults, runs with odd steps of sixteen kinds, the fault suite's quick logs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....probe.schema import MAX_STEP, Record, Records, as_float, as_step
from .nonfinite import grad_before

if TYPE_CHECKING:
    from .ruleset import RuleSet


def on_step(e: RuleSet, rec: Record, t: float | None) -> None:
    """The per-step hot path: parse, judge the on-the-step conditions inline, buffer the rest.

    NaN/Inf, spikes and explosions must be flagged on their step, so they are compared
    here against thresholds refreshed at each block end. Everything windowed runs once
    per block (``block_size`` steps, or one second of record time when steps are slow).
    """
    # what the store makes of it too (schema.as_step): a whole float counts, an int of 400
    # digits is no step (the rules turn steps into floats: it would overflow)
    step = as_step(rec.get("step"))
    if step is None:
        step = 0 if e.last_step is None else e.last_step + 1
    if e.last_step is not None:
        went_back = step < e.last_step
        seg = e.segments
        if seg.watching:  # a second run announced itself: back or repeated, two writers?
            if seg.on_step(step <= e.last_step):
                _mixed(e, step)
        elif step == e.last_step and seg.on_repeat(e.steps):  # lockstep without a 2nd meta
            _mixed(e, step, repeated=True)
        if seg.mixed is not None:  # two writers: count, judge nothing
            e.steps += 1
            e.last_step = step
            if t is not None:
                e.last_step_t = t
            return
        if went_back:  # a rewind to a checkpoint: judge the new part on its own
            e._new_segment(step, "the steps went back (a checkpoint was reloaded)")
    e.steps += 1
    e.step = step
    if e.first_step is None:
        e.first_step = step
        e.first_step_t = t
    e.rec = rec
    e.t = t
    loss: Any = rec.get("loss")  # JSON: anything, until as_float says
    if type(loss) is not float:
        loss = as_float(loss)
    e.loss = loss
    gn: Any = rec.get("grad_norm")
    if type(gn) is not float:
        gn = as_float(gn)
    e.gn = gn
    lr: Any = rec.get("lr")
    if type(lr) is not float:
        lr = as_float(lr)
    prev = e.lr
    if lr is not None and lr != prev:
        if e.lr_initial is None:
            e.lr_initial = lr
        new_max = e.lr_max is None or lr > e.lr_max
        if new_max:
            e.lr_max = lr
        if prev is not None:
            r = e.lr_jump_ratio
            if (prev <= 0.0 < lr) or (lr > 0 and prev > 0 and (lr >= prev * r or lr * r <= prev)):
                e.lr_jump_step = step
                e.in_grace = True
                e.grace_critical = not new_max
    e.lr_prev = prev
    e.lr = lr
    jumped = e.lr_jump_step
    if e.in_grace and jumped is not None and step - jumped >= e.lr_grace_steps:
        e.in_grace = False

    lf = loss is not None and loss - loss == 0.0
    gf = gn is not None and gn - gn == 0.0
    e.loss_finite, e.gn_finite = lf, gf
    if (loss is not None and not lf) or (gn is not None and not gf):
        _nonfinite(e, step, loss, gn, lf, gf)
    if lf and loss is not None:
        if loss >= e.loss_hi and not e.in_grace:
            e.spike_rule.spike(e)
        if e.divergence_rule.early_open:
            e.divergence_rule.early(e, step, loss)
    if gf and gn is not None:
        if gn >= e.gn_warn and (not e.in_grace or (gn >= e.gn_hi and not e.grace_critical)):
            e.explosion_rule.above(e)
        e.last_finite_gn = gn
    elif gn is not None:
        e.nonfinite_rule.on_grad_nonfinite(e)
    if e.nonfinite_rule.watching and (lf or gf):
        e.nonfinite_rule.finite(e, lf, gf)

    b = e.blk
    if not b.steps:
        b.t0 = t
    b.steps.append(step)
    b.t.append(t)
    b.loss.append(loss if lf else None)
    b.gn.append(gn if gf else None)
    b.recs.append(rec)
    b.timing.append(e.phase is None and not e.phase_ended)
    e.phase_ended = False
    e.last_step = step
    if t is not None:
        e.last_step_t = t
    # a block is block_size steps (not records: a log written every 50 steps closes one
    # per record), or one second of record time when steps are slow
    if (
        len(b.steps) >= e.block_size
        or step - b.steps[0] >= e.block_size
        or (t is not None and b.t0 is not None and t - b.t0 >= 1.0)
    ):
        e._close_block()


def _mixed(e: RuleSet, step: int, repeated: bool = False) -> None:
    """Two writers: the warning, and the rules stop here (the early watch and its list of
    losses close with them)."""
    e.segments.raise_mixed(e.sink, e.t, step, repeated)
    e.divergence_rule.close_early()


def _nonfinite(
    e: RuleSet, step: int, loss: float | None, gn: float | None, lf: bool, gf: bool
) -> None:
    if e.first_nonfinite_step is None:
        e.first_nonfinite_step = step
        e.lr_at_first_nonfinite = e.lr
        e.gn_before_nonfinite, e.gn_before_nonfinite_ratio = grad_before(e)
    if loss is not None and not lf:
        e.nonfinite_rule.on_loss_nonfinite(e)


def _plain_ok(e: RuleSet) -> bool:
    """No per-step watch open: the schedule grace, the early blow-up watch, a NaN episode,
    a second writer; and a first step seen (its segment bookkeeping is ``on_step``'s)."""
    return not (
        e.last_step is None
        or e.first_step is None
        or e.in_grace
        or e.segments.watching
        or e.segments.mixed is not None
        or e.divergence_rule.early_open
        or e.nonfinite_rule.watching
    )


def feed_steps(
    e: RuleSet,
    recs: Records,
    i: int,
    n: int,
    feed: Callable[[Record], None],
) -> int:
    """Feed the step records from ``recs[i]`` on; return the index of the first record not
    taken (a record of another kind, or ``n``). A step that is not plain is fed through
    ``feed`` (the engine's) in its turn, so the order of everything is the log's."""
    r = recs[i]
    if (
        type(r.get("t")) is not float  # other tools' logs have no times: never plain
        or type(r.get("loss")) is not float
        or not _plain_ok(e)
    ):
        feed(r)  # before loading thirty locals for nothing
        return i + 1
    # the engine's per-step state, in locals (written back by `sync` below)
    records, steps, first_t, last_t = e.records, e.steps, e.first_t, e.last_t
    step: Any = e.step
    rec, t, loss, gn = e.rec, e.t, e.loss, e.gn
    lr_prev, loss_finite, gn_finite = e.lr_prev, e.loss_finite, e.gn_finite
    last_finite_gn, last_step_t = e.last_finite_gn, e.last_step_t
    last_step: int = e.last_step if e.last_step is not None else 0  # not None: _plain_ok
    phase_ended = e.phase_ended
    lr = e.lr
    # a NaN lr changes on every step (NaN != NaN); a zero one could come back as -0.0
    lr_float = type(lr) is float and lr == lr and lr != 0.0
    loss_hi, gn_warn, size = e.loss_hi, e.gn_warn, e.block_size
    timing_ok = e.phase is None
    b = e.blk
    bsteps, bt, bloss, bgn, brecs, btiming = b.steps, b.t, b.loss, b.gn, b.recs, b.timing
    taken = False  # any step taken since the last write-back

    def sync() -> None:
        e.records, e.steps, e.first_t, e.last_t = records, steps, first_t, last_t
        e.step, e.rec, e.t, e.loss, e.gn = step, rec, t, loss, gn
        e.lr_prev, e.loss_finite, e.gn_finite = lr_prev, loss_finite, gn_finite
        e.last_finite_gn, e.last_step, e.last_step_t = last_finite_gn, last_step, last_step_t
        e.phase_ended = phase_ended

    while i < n:
        r = recs[i]
        if r.get("kind") != "step":
            break
        s = r.get("step")
        tt = r.get("t")
        x = r.get("loss")
        g = r.get("grad_norm")
        rate = r.get("lr")
        if (
            type(s) is not int
            or s <= last_step  # back (a rewind) or repeated (two writers?): on_step's
            or s >= MAX_STEP  # no step (schema.as_step): on_step's
            or type(tt) is not float
            or tt - tt != 0.0
            or type(x) is not float
            or x - x != 0.0
            or x >= loss_hi
            or not (g is None or (type(g) is float and g - g == 0.0 and g < gn_warn))
            or not (
                (rate is None and lr is None) or (lr_float and type(rate) is float and rate == lr)
            )
        ):
            # not plain: the engine's own way, then carry on from its state
            if taken:
                sync()
                taken = False
            feed(r)
            return i + 1
        # feed(): the record's count and the file's clock
        records += 1
        if first_t is None:
            first_t = tt
        if last_t is None or tt > last_t:
            last_t = tt
        # on_step() for a plain step: the lr did not change, no threshold was crossed
        steps += 1
        step, rec, t, loss, gn = s, r, tt, x, g
        lr_prev = lr
        loss_finite, gn_finite = True, g is not None
        if g is not None:
            last_finite_gn = g
        if not bsteps:
            b.t0 = tt
        bsteps.append(s)
        bt.append(tt)
        bloss.append(x)
        bgn.append(g)
        brecs.append(r)
        btiming.append(timing_ok and not phase_ended)
        phase_ended = False
        last_step, last_step_t = s, tt
        taken = True
        i += 1
        t0 = b.t0
        if len(bsteps) >= size or s - bsteps[0] >= size or (t0 is not None and tt - t0 >= 1.0):
            sync()
            taken = False
            e._close_block()
            # the block's lists are new, the thresholds refreshed; no watch opens at a
            # block end (only per-step conditions open them), but look again all the same
            if not _plain_ok(e):
                return i
            loss_hi, gn_warn = e.loss_hi, e.gn_warn
            bsteps, bt, bloss, bgn, brecs, btiming = b.steps, b.t, b.loss, b.gn, b.recs, b.timing
    if taken:
        sync()
    return i
