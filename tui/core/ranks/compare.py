"""One job, several ranks: what only a comparison of the ranks can tell.

Each rank's log is diagnosed by its own :class:`RuleEngine` (NaN, OOM, memory growth and
crashes are per process). Two questions need the ranks side by side:

- **Which failure came first?** When one rank of a job dies, the others die seconds
  later of collective timeouts or reset connections, and the log a user opens first is
  usually one of those. The earliest exception by record time names ``first_rank`` on
  every rank's crash/oom alert; failures that the crash catalogue marks ``secondary``
  (collective timeouts, peers gone) lose the race to a non-secondary one within the
  clock tolerance between hosts; the others carry ``secondary: true`` and the first's
  checklist.
- **Is one rank holding the others back?** In data-parallel training every step waits
  for the slowest rank. A rank whose loader is slow waits for data, one whose forward
  is slow takes longer from batch to first gradient (the probe's ``forward_time``),
  while the others wait in the all-reduce; so its phase stands out against the other
  ranks' median, block after block (``straggler``, on the slow rank's sink, naming it
  and the phase). A rank slow in *backward* cannot be told apart this way: the fast
  ranks' wait for it is inside their own backward, so every rank's backward is long.
The sharded grad-norm join (the third thing only the ranks together give) is
``shardnorm.py``.

No Textual, no torch: read by ``dltop check`` on a folder of rank files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ....probe.schema import MAX_STEP, Record, as_float, as_step
from ..rules.alerts import CRITICAL, WARNING, Alert
from ..rules.crashcatalogue import CatalogueError, secondary_patterns
from ..rules.engine import RuleEngine
from ..rules.window import median_of
from ..text.fmt import number as fmt

SKEW_S = 2.0  # clock difference tolerated between hosts when ordering failures
BUCKET_STEPS = 50  # steps per block compared across ranks
BUCKET_RECORDS = 4 * BUCKET_STEPS  # records a block keeps (more only if steps repeat)
MAX_BUCKETS = 20_000  # blocks kept per rank (a million steps at 50 per block)
PERSIST = 3  # consecutive blocks the same rank must stand out in
MIN_EXCESS_S = 0.005  # extra data wait below this is noise at any step time
EXCESS_SHARE = 0.2  # ... and it must be this share of the step time
CRITICAL_SHARE = 0.5  # the job runs at half speed or worse because of it: critical
FAILURES = ("crash", "oom")


@dataclass
class RankTimes:
    """Per block of ``BUCKET_STEPS`` steps: the median data wait and step time of a rank.

    Fed the same records as the rank's engine; bounded (``MAX_BUCKETS`` blocks)."""

    data: dict[int, float] = field(default_factory=dict)
    forward: dict[int, float] = field(default_factory=dict)
    step: dict[int, float] = field(default_factory=dict)
    _cur: int | None = None
    _d: list[float] = field(default_factory=list)
    _f: list[float] = field(default_factory=list)
    _s: list[float] = field(default_factory=list)

    def phase(self, name: str) -> dict[int, float]:
        return self.data if name == "data" else self.forward

    def feed(self, records: Iterable[Record]) -> None:
        # every rank's every step passes here: the usual values (an int step, float
        # times) are taken as they are, anything else goes through as_step / as_float
        # (the same values: both return an int or a float unchanged)
        get = dict.get
        for rec in records:
            if get(rec, "kind") != "step":
                continue
            step = get(rec, "step")
            if type(step) is not int or not -MAX_STEP < step < MAX_STEP:
                step = as_step(step)
            st = get(rec, "step_time")
            if type(st) is not float:
                st = as_float(st)
            if step is None or st is None or not 0 < st < 1e6:
                continue
            b = step // BUCKET_STEPS
            if b != self._cur:
                self._close()
                self._cur = b
            if len(self._s) >= BUCKET_RECORDS:
                continue  # a step number that never advances: the block has its sample
            dt = get(rec, "data_time")
            if type(dt) is not float:
                dt = as_float(dt)
            self._s.append(st)
            self._d.append(dt if dt is not None and 0 <= dt < 1e6 else 0.0)
            ft = get(rec, "forward_time")
            if type(ft) is not float:
                ft = as_float(ft)
            if ft is not None and 0 <= ft < 1e6:
                self._f.append(ft)

    def finish(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._cur is not None and self._s and len(self.step) < MAX_BUCKETS:
            self.step[self._cur] = median_of(self._s) or 0.0
            self.data[self._cur] = median_of(self._d) or 0.0
            if self._f:
                self.forward[self._cur] = median_of(self._f) or 0.0
        self._d, self._f, self._s = [], [], []


@dataclass
class Rank:
    """One rank of the job: its number, its engine and its step timings."""

    rank: int | None
    engine: RuleEngine
    times: RankTimes | None = None


def judge(ranks: Sequence[Rank]) -> None:
    """The cross-rank diagnosis, written into the ranks' alerts (a no-op for one rank)."""
    if len(ranks) < 2:
        return
    first_failure(ranks)
    straggler(ranks)
    hung_rank(ranks)


# ------------------------------------------------------------------ the rank a hung job waits for

# where a rank can be between completing step L and completing step L + 1, in the order it
# passes through them (the probe's heartbeat ``where``): in a hung data-parallel job the
# rank the others wait for is the one that got least far (its own code after the step, its
# loader, its forward), while the others wait in the backward all-reduce
LOOP_ORDER = {
    "after_step": 0, "data_wait": 1, "compute": 2, "forward": 2, "backward": 3, "optimizer": 4,
}  # fmt: skip


def _stall(r: Rank) -> Alert | None:
    return next((a for a in reversed(r.engine.alerts()) if a.id == "stall" and a.active), None)


def hung_rank(ranks: Sequence[Rank]) -> None:
    """A stalled job: name the rank the others wait for, and where it is.

    From each rank's latest heartbeat (``where``: the probe marks data wait, forward,
    backward, optimizer step) and its last completed step: the one rank that got least
    far is the one holding the job (a hung loader, a deadlock in its own code), the
    others wait for it in a collective. Only when some rank's stall alert is up and one
    rank alone is behind; its stall alert names itself (``evidence.rank``, ``phase``),
    the others' are ``secondary`` and say whom they wait for."""
    stalled = [r for r in ranks if _stall(r) is not None]
    if not stalled:
        return
    pos: dict[int, tuple[int, int]] = {}
    for r in ranks:
        e = r.engine
        where, step = getattr(e, "where", None), getattr(e, "last_step", None)
        if where in LOOP_ORDER and type(step) is int:
            pos[id(r)] = (step, LOOP_ORDER[where])
    if len(pos) < 2:
        return
    behind = min(pos.values())
    culprits = [r for r in ranks if pos.get(id(r)) == behind]
    if len(culprits) != 1 or len(pos) == len(culprits):
        return  # no one rank stands out: every rank waits alike (the whole job is stuck)
    hung = culprits[0]
    phase = str(getattr(hung.engine, "where", ""))
    waiting = sorted(
        (r for r in ranks if id(r) in pos and r is not hung),
        key=lambda r: r.rank if r.rank is not None else -1,
    )
    others = ", ".join(str(r.rank) for r in waiting)
    where_others = sorted({str(getattr(r.engine, "where", "")) for r in waiting})
    own = _stall(hung)
    if own is None:  # its heartbeats went on, its rule has not fired yet: the job's has
        model = _stall(stalled[0])
        assert model is not None
        own = Alert(
            id="stall",
            severity=model.severity,
            step=hung.engine.last_step,
            title="Training stalled",
            message=f"no new step after step {hung.engine.last_step}",
            evidence={"last_step": hung.engine.last_step, "raised_at_step": hung.engine.last_step},
            last_step=hung.engine.last_step,
            t=hung.engine.last_t,
        )
        own = hung.engine.sink.get(hung.engine.sink.add(own)) or own
    if own.evidence.get("rank") != hung.rank:
        hung.engine.sink.revise_alert(
            own,
            {"rank": hung.rank, "phase": phase, "secondary": False, "waiting_ranks": others},
            title=f"Rank {hung.rank} hung in {phase}",
            message=(
                f"rank {hung.rank} is stuck in {phase} after step {hung.engine.last_step}: ranks "
                f"{others} wait for it (in {', '.join(where_others)}); " + own.message
            ),
        )
    for r in waiting:
        a = _stall(r)
        if a is None or a.evidence.get("rank") == hung.rank:
            continue
        r.engine.sink.revise_alert(
            a,
            {"rank": hung.rank, "phase": phase, "secondary": True},
            message=f"secondary: waiting for rank {hung.rank} (stuck in {phase}); " + a.message,
        )


# ------------------------------------------------------------------ first failure


def _first_alert(r: Rank) -> Alert | None:
    failed = [a for a in r.engine.alerts() if a.id in FAILURES and a.t is not None]
    return min(failed, key=lambda a: a.t or 0.0, default=None)


def first_failure(ranks: Sequence[Rank]) -> None:
    """Name the rank whose failure came first on every failed rank's alert."""
    failed = [(r, a) for r in ranks if (a := _first_alert(r)) is not None]
    if len(failed) < 2:
        return
    try:
        secondary = secondary_patterns()
    except CatalogueError:
        secondary = frozenset()

    def is_secondary(a: Alert) -> bool:
        # a signal death is the launcher stopping the job after a rank failed
        return str(a.evidence.get("pattern")) in secondary | {"signal"}

    failed.sort(key=lambda ra: ra[1].t or 0.0)
    t0 = failed[0][1].t or 0.0
    close = [ra for ra in failed if (ra[1].t or 0.0) - t0 <= SKEW_S]
    primary = [ra for ra in close if not is_secondary(ra[1])]
    first_rank, first = (primary or close)[0]
    for r, a in failed:
        if a is first:
            r.engine.sink.revise_alert(a, {"first_rank": first_rank.rank, "secondary": False})
            continue
        r.engine.sink.revise_alert(
            a,
            {"first_rank": first_rank.rank, "secondary": True},
            checklist=first.checklist or first.id,  # the first failure's steps are the ones to take
            message=f"secondary: rank {first_rank.rank} failed first ({first.title}); " + a.message,
        )


# ------------------------------------------------------------------ straggler


PHASES = ("data", "forward")  # where a slow rank's time can be told apart from the others'


def _slowest(here: list[Rank], b: int, phase: str) -> tuple[Rank, float, float] | None:
    """(the rank with the longest phase in block b, its excess over the others' median,
    that median); None when fewer than two ranks logged the phase."""
    have = [r for r in here if r.times is not None and b in r.times.phase(phase)]
    if len(have) < 2:
        return None
    slow = max(have, key=lambda r: r.times.phase(phase)[b] if r.times else 0.0)
    others = [r.times.phase(phase)[b] for r in have if r is not slow and r.times]
    ref = median_of(others) or 0.0
    assert slow.times is not None
    return slow, slow.times.phase(phase)[b] - ref, ref


def straggler(ranks: Sequence[Rank]) -> None:
    """A rank whose data wait or forward time stands out against the other ranks' median,
    block after block. (Backward cannot be told apart: the fast ranks wait for the slow
    one inside their own backward, in the all-reduce.)"""
    timed = [r for r in ranks if r.times is not None and r.times.step]
    if len(timed) < 2:
        return
    buckets = sorted(set().union(*(r.times.step for r in timed if r.times)))
    run_key: tuple[int, str] | None = None
    run: list[tuple[int, float, float, float]] = []  # (bucket, excess, others' median, step)
    owner: tuple[Rank, str] | None = None  # the slow rank and phase of ``run``
    fired: set[tuple[int, str]] = set()

    def close() -> None:
        """The run of blocks ended (or the log did): its alert gets the run's final figures."""
        if owner is not None and len(run) > PERSIST:
            _refresh(owner[0], run, owner[1])

    for b in buckets:
        here = [r for r in timed if r.times and b in r.times.step]
        if len(here) < 2:
            close()
            run_key, run, owner = None, [], None
            continue
        step_t = median_of([r.times.step[b] for r in here if r.times]) or 0.0
        bar = max(MIN_EXCESS_S, EXCESS_SHARE * step_t)
        found = [(p, x) for p in PHASES if (x := _slowest(here, b, p)) is not None]
        found = [(p, x) for p, x in found if x[1] >= bar]
        if not found:
            close()
            run_key, run, owner = None, [], None
            continue
        phase, (slow, excess, ref) = max(found, key=lambda px: px[1][1])
        key = (id(slow), phase)
        if key != run_key:
            close()
            run_key, run, owner = key, [], (slow, phase)
        run.append((b, excess, ref, step_t))
        n = len(run)
        if n >= PERSIST and key not in fired:
            fired.add(key)
            _raise(slow, run, phase)
        elif n > PERSIST and n & (n - 1) == 0:
            # the figures are medians over the whole run: refreshed at doubling lengths
            # (and when the run ends), so a straggler over a long run costs O(n log n),
            # not a pass over the run at every block
            _refresh(slow, run, phase)
    close()


def _straggler_alert(r: Rank) -> Alert | None:
    return next((a for a in r.engine.alerts() if a.id == "straggler"), None)


def _evidence(r: Rank, run: list[tuple[int, float, float, float]], phase: str) -> dict[str, Any]:
    excess = median_of([x[1] for x in run]) or 0.0
    step_t = median_of([x[3] for x in run]) or 0.0
    return {
        "rank": r.rank,
        "phase": phase,
        "extra_s": excess,
        "others_s": median_of([x[2] for x in run]),
        "step_time_s": step_t,
        "share_of_step": excess / step_t if step_t else None,
        "blocks": len(run),
        "block_steps": BUCKET_STEPS,
        "last_step": (run[-1][0] + 1) * BUCKET_STEPS - 1,
    }


_WHAT = {"data": "waits {x} ms more for data", "forward": "takes {x} ms longer in forward"}


def _message(r: Rank, ev: dict[str, Any]) -> str:
    share = ev["share_of_step"]
    what = _WHAT[ev["phase"]].format(x=fmt(1000 * ev["extra_s"]))
    return (
        f"rank {r.rank} {what} per step "
        f"than the other ranks' median ({fmt(1000 * (ev['others_s'] or 0.0))} ms), "
        f"{fmt(100 * share) if share is not None else '?'} % of the job's step time, over "
        f"{ev['blocks'] * BUCKET_STEPS} steps: every rank waits for it in the all-reduce"
    )


def _raise(r: Rank, run: list[tuple[int, float, float, float]], phase: str) -> None:
    ev = _evidence(r, run, phase)
    share = ev["share_of_step"] or 0.0
    alert = Alert(
        id="straggler",
        severity=CRITICAL if share >= CRITICAL_SHARE else WARNING,
        step=run[0][0] * BUCKET_STEPS,
        title=f"Rank {r.rank} is a straggler ({'data loading' if phase == 'data' else phase})",
        message=_message(r, ev),
        evidence={**ev, "raised_at_step": ev["last_step"]},
        last_step=ev["last_step"],
        t=r.engine.last_t,
    )
    r.engine.sink.add(alert)


def _refresh(r: Rank, run: list[tuple[int, float, float, float]], phase: str) -> None:
    a = _straggler_alert(r)
    if a is None or a.evidence.get("phase") != phase:
        return
    ev = _evidence(r, run, phase) | {"raised_at_step": a.evidence.get("raised_at_step")}
    r.engine.sink.revise_alert(
        a,
        evidence=ev,
        message=_message(r, ev),
        last_step=ev["last_step"],
        severity=CRITICAL if (ev["share_of_step"] or 0.0) >= CRITICAL_SHARE else a.severity,
    )
