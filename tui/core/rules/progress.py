"""Is the run still learning? Plateau, oscillation and overfitting.

All three judge windows (block medians), never single steps, because per-step losses of
small batches are too noisy to say anything about progress. A plateau after the loss has
already fallen a long way is usually convergence, not a fault: it is reported as
information; only a run stuck near its starting loss gets a warning.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from dltop.probe.schema import as_float
from dltop.tui.core.alerts import INFO, WARNING, Severity
from dltop.tui.core.fmt import number as fmt
from dltop.tui.core.rules.base import Rule, Tracker
from dltop.tui.core.rules.window import linear_fit, median_of

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine
    from dltop.tui.core.rules.window import Block


def _finite(blk: Block) -> tuple[list[int], list[float]]:
    """The block's steps and losses without the non-finite ones (kept as None)."""
    if None not in blk.loss:
        return blk.steps, blk.loss  # type: ignore[return-value]
    pairs = [(s, x) for s, x in zip(blk.steps, blk.loss, strict=True) if x is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


MIN_WINDOW_LOSSES = 5  # losses a plateau window needs, however many steps it spans


class Plateau(Rule):
    def __init__(self, engine: RuleEngine) -> None:
        super().__init__(engine)
        c = self.cfg.section("plateau")
        self.on = bool(c["enabled"])
        self.window = max(2, int(c["window"]))
        self.frac = float(c["window_frac"])
        self.windows = max(1, int(c["windows"]))
        self.min_imp = float(c["min_improvement"])
        self.stuck = float(c["stuck_progress"])
        self.max_rise = float(c["max_rise"])
        self.span = 0
        self.tr = Tracker(engine, "plateau")
        self.cur: list[float] = []
        self.cur_len = self.window
        self.cur_start = 0  # the current window's first step (set when it opens)
        # closed windows: (median, lr at start, lr at end, first step)
        self.blocks: deque[tuple[float, float | None, float | None, int]] = deque(
            maxlen=self.windows + 1
        )
        self.cur_lr0: float | None = None
        self.seen_jump: int | None = None
        self.first_step: int | None = None

    def on_block(self, e: RuleEngine, blk: Block) -> None:
        if not self.on:
            return
        if e.lr_jump_step is not None and e.lr_jump_step != self.seen_jump:
            self.seen_jump = e.lr_jump_step  # a schedule jump: judge the new regime afresh
            self.blocks.clear()
            self.cur = []
        steps, losses = _finite(blk)
        if not steps:
            return
        if self.first_step is None:
            self.first_step = steps[0]
        first = self.first_step
        # windows in steps, not records: a window closes once it spans cur_len steps and
        # holds a few losses (a log written every 50 steps fills a 50-step window with one)
        for step, loss in zip(steps, losses, strict=True):
            if not self.cur:
                self.cur_start = step
                self.cur_lr0 = e.lr
                span = min(max(e.steps, step - first + 1), 1 << 62)
                self.cur_len = max(self.window, int(self.frac * span))
            self.cur.append(loss)
            n = len(self.cur)
            if n >= self.cur_len or (
                n >= MIN_WINDOW_LOSSES and step - self.cur_start + 1 >= self.cur_len
            ):
                m = median_of(self.cur) or 0.0
                self.blocks.append((m, self.cur_lr0, e.lr, self.cur_start))
                self.cur = []
                self._judge(e, step)

    def _judge(self, e: RuleEngine, step: int) -> None:
        b = self.blocks
        if len(b) <= self.windows:
            return
        lr0, lr1 = b[0][1], b[-1][2]
        if lr1 is not None and lr1 <= 0:
            return  # lr 0: nothing is supposed to move
        if lr0 is not None and lr1 is not None and lr1 > 1.2 * lr0:
            return  # lr still rising: a warm-up, the loss may wait for it
        meds = [x[0] for x in b]
        base = meds[0]
        # the best of the later windows against the first: a run whose windows went 0.250,
        # 0.238, 0.226, 0.258 is still learning, with one noisy window at the end (a
        # fine-tune from a low loss); a flat run has no later window 1 % better
        gain = (base - min(meds[1:])) / abs(base) if base else 0.0
        now = (base - meds[-1]) / abs(base) if base else 0.0
        # flat: less than min_improvement better over the span, and not rising either
        # (a rising loss is divergence's business, not a plateau)
        first = e.fig.loss_first if e.fig.loss_first is not None else meds[0]
        total = (first - meds[-1]) / abs(first) if first else 0.0
        if -self.max_rise < now and gain < self.min_imp and total > -self.max_rise:
            sev: Severity = WARNING if total < self.stuck else INFO
            title = "Loss plateau (not learning)" if sev == WARNING else "Loss plateau"
            span = len(meds) * self.cur_len
            ev = {
                "window": self.cur_len,
                "window_medians": meds,
                "improvement": gain,
                "total_improvement": total,
                "loss_first": first,
                "lr": e.lr,
            }
            msg = (
                f"median loss {fmt(meds[0])} -> {fmt(meds[-1])} over {len(meds)} windows of "
                f"{self.cur_len} steps ({fmt(100 * gain)} % better, < {fmt(100 * self.min_imp)} %); "
                f"{fmt(100 * total)} % below the starting loss"
            )
            a = self.tr.fire(b[0][3], sev, title, msg, ev, t=e.t, refresh=True)
            # the verdict of now: a run that was stuck at its start and has learned since is
            # a plateau after learning (info), not "not learning" any more
            a.severity = sev
            self.tr.hold(step)
            self.span = span
        elif self.tr.active and gain >= self.min_imp:
            self.tr.clear(step)


class Oscillation(Rule):
    """The smoothed loss swings up and down by a large factor, repeatedly.

    Two signatures: slow waves (the median of ``block``-step blocks reverses direction
    ``min_swings`` times, each swing at least ``amplitude`` of the lower level and
    ``noise_factor`` times the block-median noise), and a step-to-step two-cycle (strongly
    negative lag-1 autocorrelation around the block means). A monotone descent, however
    noisy, has no reversals that clear both bars.
    """

    def __init__(self, engine: RuleEngine) -> None:
        super().__init__(engine)
        c = self.cfg.section("oscillation")
        self.on = bool(c["enabled"])
        self.block = max(3, int(c["block"]))
        self.nblocks = max(6, int(c["blocks"]))
        self.min_blocks = max(4, int(c["min_blocks"]))
        self.amp = float(c["amplitude"])
        self.noise_k = float(c["noise_factor"])
        self.min_swings = int(c["min_swings"])
        self.autocorr = float(c["autocorr"])
        self.checks = max(1, int(c["checks"]))
        self.tr = Tracker(engine, "oscillation")
        self.cur: list[float] = []
        n = self.nblocks
        self.meds: deque[float] = deque(maxlen=n)
        self.noise: deque[float] = deque(maxlen=n)  # per-block noise of a single step
        self.ac: deque[tuple[float, float]] = deque(
            maxlen=n
        )  # per block: lag-1 sum, sum of squares
        self.ac_num = 0.0  # their running totals over the window
        self.ac_den = 0.0
        self.start: deque[int] = deque(maxlen=n)
        self.hits = 0
        self.hit_start = 0  # step of the first judgement in the current run of hits
        self.closed = 0

    def on_block(self, e: RuleEngine, blk: Block) -> None:
        if not self.on:
            return
        steps, losses = _finite(blk)
        pos, n = 0, len(losses)
        while pos < n:
            if not self.cur:
                self.start.append(steps[pos])
            chunk = losses[pos : pos + self.block - len(self.cur)]
            self.cur.extend(chunk)
            pos += len(chunk)
            if len(self.cur) >= self.block:
                self._close(e, steps[pos - 1])

    def _close(self, e: RuleEngine, step: int) -> None:
        c = self.cur
        self.cur = []
        s = sorted(c)
        self.meds.append(s[len(s) // 2])
        diffs = sorted([abs(b - a) for a, b in zip(c, c[1:], strict=False)])
        self.noise.append(1.4826 * diffs[len(diffs) // 2] / 1.4142)
        m = sum(c) / len(c)
        d = [x - m for x in c]
        lag = sum([a * b for a, b in zip(d, d[1:], strict=False)])
        sq = sum([x * x for x in d])
        if len(self.ac) == self.ac.maxlen:
            old_lag, old_sq = self.ac[0]
            self.ac_num -= old_lag
            self.ac_den -= old_sq
        self.ac.append((lag, sq))
        self.ac_num += lag
        self.ac_den += sq
        self.closed += 1
        if len(self.meds) >= self.min_blocks and self.closed % 4 == 0:
            self._judge(e, step)

    def _judge(self, e: RuleEngine, step: int) -> None:
        meds = list(self.meds)
        noise = sorted(self.noise)[len(self.noise) // 2] * 1.2533 / self.block**0.5
        swings = _swings(meds, self.amp, self.noise_k * noise)
        num, den = self.ac_num, self.ac_den
        level = sorted(meds)[len(meds) // 2]
        ac = num / den if den > 0 else None
        rms = (den / (len(self.ac) * self.block)) ** 0.5
        slow = swings >= self.min_swings
        fast = ac is not None and ac <= self.autocorr and level > 0 and rms >= self.amp / 3 * level
        if (slow or fast) and not e.in_grace:
            if self.hits == 0:
                self.hit_start = step
            self.hits += 1
        else:
            self.hits = 0
            if self.tr.active:
                self.tr.clear(step)
            return
        if self.hits >= self.checks:
            span = len(meds) * self.block
            ev = {
                "swings": swings,
                "amplitude": self.amp,
                "block_noise": noise,
                "level": level,
                "lag1_autocorr": ac,
                "window": span,
                "lr": e.lr,
            }
            if slow:
                lo, hi = min(meds), max(meds)
                msg = (
                    f"{swings} swings of the smoothed loss in {span} steps, each >= {fmt(100 * self.amp)} % "
                    f"(range {fmt(lo)} .. {fmt(hi)})"
                )
            else:
                msg = f"the loss alternates up/down step to step (lag-1 autocorrelation {fmt(ac)}) over {span} steps"
            ev["window_start"] = self.start[0]
            self.tr.fire(self.hit_start, WARNING, "Loss oscillates", msg, ev, t=e.t, refresh=True)
            self.tr.hold(step)


def _swings(xs: list[float], rel: float, floor: float) -> int:
    """Reversals of direction (a zigzag with hysteresis); a move counts when it is at least
    ``rel`` of the lower of its two ends and at least ``floor``."""
    if len(xs) < 3:
        return 0
    count, direction = 0, 0
    hi = lo = extreme = xs[0]
    # a move clears both bars and is a move at all (m > 0): a loss that is exactly
    # constant (0, or any value, noise 0) makes both bars 0 and must not count every
    # step as a swing. Inlined: this runs every few steps over the whole window.
    for x in xs[1:]:
        if direction == 0:
            if x > hi:
                hi = x
            elif x < lo:
                lo = x
            m = hi - lo
            if m > 0 and m >= floor and m >= rel * abs(lo):
                direction, extreme = (1, x) if x == hi else (-1, x)
        elif direction == 1:
            if x > extreme:
                extreme = x
            else:
                m = extreme - x
                if m > 0 and m >= floor and m >= rel * abs(x):
                    count, direction, extreme = count + 1, -1, x
        elif x < extreme:
            extreme = x
        else:
            m = x - extreme
            if m > 0 and m >= floor and m >= rel * abs(extreme):
                count, direction, extreme = count + 1, 1, x
    return count


MAX_EVAL_SETS = 8  # evaluation sets followed (the first seen); a record's others are ignored


def eval_losses(rec: dict[str, Any]) -> list[tuple[str, float]]:
    """The eval losses of a record, by evaluation set: ``loss``; or, without one, every
    ``<set>_loss`` (a Hugging Face Trainer with several eval datasets logs
    ``eval_<set>_loss``, a probe user may call ``probe.eval(val_loss=..., test_loss=...)``).

    With a ``loss`` the ``*_loss`` fields are its parts (a VAE's ``kl_loss`` rises by
    design), never sets of their own."""
    loss = rec.get("loss")
    if loss is not None:
        f = as_float(loss)
        return [("loss", f)] if f is not None and f - f == 0.0 else []
    out: list[tuple[str, float]] = []
    for k, v in rec.items():
        if isinstance(k, str) and k.endswith("_loss") and k != "kind":
            f = as_float(v)
            if f is not None and f - f == 0.0:
                out.append((k, f))
                if len(out) >= MAX_EVAL_SETS:
                    break
    return out


class _EvalSet:
    """One evaluation set's history: (step, eval loss, train loss at that step)."""

    __slots__ = ("name", "evals", "best", "count", "last")

    def __init__(self, name: str) -> None:
        self.name = name
        self.evals: list[tuple[int | None, float, float | None]] = []
        self.best: int | None = None  # index into evals
        self.count = 0
        self.last: tuple[int | None, float, float | None] | None = None

    def add(self, item: tuple[int | None, float, float | None]) -> None:
        self.count += 1
        self.evals.append(item)
        if len(self.evals) > 512:
            keep = self.evals[self.best] if self.best is not None else None
            self.evals = self.evals[-256:]
            if keep is not None and keep not in self.evals:
                self.evals.insert(0, keep)
            self.best = None
        self.last = self.evals[-1]
        if self.best is None:
            self.best = min(range(len(self.evals)), key=lambda i: self.evals[i][1])
        elif item[1] < self.evals[self.best][1]:
            self.best = len(self.evals) - 1


class Overfitting(Rule):
    """Eval loss stops improving while the train loss keeps falling: never from one
    evaluation. Each evaluation set is judged on its own (one alert per set that
    overfits): interleaved sets at different levels would read as a noisy mess."""

    def __init__(self, engine: RuleEngine) -> None:
        super().__init__(engine)
        c = self.cfg.section("overfitting")
        self.on = bool(c["enabled"])
        self.patience = max(1, int(c["patience"]))
        self.tol = float(c["tolerance"])
        self.noise_k = float(c["noise_factor"])
        self.sets: dict[str, _EvalSet] = {}
        self.trackers: dict[str, Tracker] = {}  # per set (the engine clears them on a new segment)
        self.count = 0  # eval records

    @property
    def primary(self) -> _EvalSet | None:
        """The set the facts describe: ``loss``, else the first set seen."""
        return self.sets.get("loss") or next(iter(self.sets.values()), None)

    @property
    def evals(self) -> list[tuple[int | None, float, float | None]]:
        p = self.primary
        return p.evals if p is not None else []

    @property
    def best(self) -> int | None:
        p = self.primary
        return p.best if p is not None else None

    @property
    def last(self) -> tuple[int | None, float, float | None] | None:
        p = self.primary
        return p.last if p is not None else None

    def on_eval(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        self.count += 1
        losses = eval_losses(rec)
        if not losses:
            return
        step = rec.get("step") if type(rec.get("step")) is int else e.last_step
        train = e.fig.loss_med
        if train is None:  # no block closed yet: the losses logged so far
            train = median_of(x for x in e.blk.loss if x is not None)
        for name, loss in losses:
            es = self.sets.get(name)
            if es is None:
                if len(self.sets) >= MAX_EVAL_SETS:
                    continue
                es = self.sets[name] = _EvalSet(name)
                self.trackers[name] = Tracker(e, "overfitting")
            es.add((step, loss, train))
            if self.on:
                self._judge(e, es, self.trackers[name])

    def _judge(self, e: RuleEngine, es: _EvalSet, tr: Tracker) -> None:
        ev_all = es.evals[-64:]
        n = len(ev_all)
        if n < self.patience + 2:
            return
        # evaluations on a small held-out set are noisy: judge the median of 3 consecutive
        # ones, and demand a rise well above the eval-to-eval noise (from second differences,
        # which a steady trend does not inflate)
        raw = [x[1] for x in ev_all]
        # the best level: the median of each evaluation and its two neighbours (centred, so
        # the best sits where the evaluations were best, not one or two evaluations later)
        sm = [median_of(raw[max(0, i - 1) : i + 2]) or 0.0 for i in range(n)]
        d2 = sorted(abs(raw[i + 1] - 2 * raw[i] + raw[i - 1]) for i in range(1, n - 1))
        noise = 1.4826 * d2[len(d2) // 2] / 6**0.5 if d2 else 0.0
        b = min(range(n), key=lambda i: (sm[i], -i))  # the latest of equal bests
        bstep, _, btrain = ev_all[b]
        bloss = sm[b]
        later = ev_all[b + 1 :]
        if len(later) < self.patience:
            if tr.active:
                tr.clear(ev_all[-1][0])
            return
        # the level now: the median of the last `patience` evaluations, whose noise is about
        # 1.25 / sqrt(patience) of one evaluation's
        level = median_of(raw[-self.patience :]) or 0.0
        margin = max(self.tol * abs(bloss), self.noise_k * noise * 1.2533 / self.patience**0.5)
        step, loss, train = ev_all[-1]
        worse = level > bloss + margin and raw[-1] > bloss
        if not worse or train is None or btrain is None:
            return
        # ... and a real upward trend since the best, not one lucky low evaluation
        pts = raw[b:]
        slope, r2 = linear_fit([float(i) for i in range(len(pts))], pts)
        tstat = (r2 * (len(pts) - 2) / (1 - r2)) ** 0.5 if r2 < 1 else math.inf
        if slope <= 0 or tstat < 2.0:
            return
        train_falls = train < btrain * (1 - self.tol)
        gap, bgap = level - train, bloss - btrain
        if train_falls and gap > bgap:
            ev: dict[str, Any] = {
                "eval_loss": loss,
                "eval_loss_smoothed": level,
                "eval_loss_best": bloss,
                "eval_noise": noise,
                "best_step": bstep,
                "evals_since_best": len(later),
                "train_loss": train,
                "train_loss_at_best": btrain,
                "gap": gap,
                "gap_at_best": bgap,
            }
            which = "eval loss"
            if es.name != "loss":  # one of several evaluation sets: say which
                ev["eval_set"] = es.name
                which = f"eval {es.name}"
            msg = (
                f"{which} {fmt(loss)} vs best {fmt(bloss)} at step {bstep} ({len(later)} evaluations "
                f"without improvement) while train loss fell {fmt(btrain)} -> {fmt(train)}; "
                f"gap {fmt(bgap)} -> {fmt(gap)}"
            )
            tr.fire(later[0][0], WARNING, "Overfitting", msg, ev, t=e.last_t, refresh=True)
            tr.hold(step)
