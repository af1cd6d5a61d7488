"""What ``dltop export`` tells Prometheus: per-rank gauges and counters, alerts, the verdict.

Kept in the core, free of ``prometheus_client`` (and of Textual): the numbers are read
from the same ``RunModel``s the viewer follows, and worked out at scrape time only (never
per record), so a scrape costs O(ranks) whatever the logs' rate. The exporter
(``tui/export_cmd.py``) turns these families into the exposition format; tests read them
without an HTTP server.

Everything that becomes a label here comes from a log (a run id, a rank known only by its
file name, a verdict quoting evidence), so it is untrusted: every value goes through
:class:`Labels`, which escapes what a terminal or a parser could act on, keeps it valid
UTF-8 and cuts it to ``MAX_LABEL`` characters; and the number of label sets is bounded
(ranks, alert ids), so that no log can make the exporter's series count grow without
limit. What was cut or left out is counted and exported too (``dltop_exporter_*``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record
from ..diagnosis.status import STATUSES
from ..rules.alerts import SEVERITY_RANK, Alert
from ..text.safetext import visible

if TYPE_CHECKING:
    from ..ranks.jobs import RankLog
    from ..store.runstore import Store
    from .rankjob import JobView

MAX_LABEL = 128  # characters of a label value taken from a log
MAX_VERDICT = 240  # the verdict's label: one line, longer than the others
MAX_RANKS = 256  # rank label sets per exporter (a node has 8; several jobs at most a few 10s)
MAX_ALERT_IDS = 32  # distinct alert ids per rank (the contract has ~20, crash patterns add)
VERDICT_EVERY = 2.0  # seconds a job's verdict is kept when nothing changed (status ages)

# (metric, help, where the value comes from: a series name of the store)
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("dltop_loss", "The latest training loss (NaN when it is NaN).", "loss"),
    ("dltop_grad_norm", "The latest global gradient norm, before clipping.", "grad_norm"),
    ("dltop_learning_rate", "The latest learning rate (first param group).", "lr"),
    ("dltop_step_time_seconds", "The latest step's wall time.", "step_time"),
    ("dltop_data_wait_seconds", "Time the latest step waited for its batch.", "data_time"),
    ("dltop_samples_per_second", "Throughput of the latest step.", "samples_per_s"),
    ("dltop_memory_allocated_bytes", "Device memory allocated (CUDA).", "mem_allocated"),
    ("dltop_memory_reserved_bytes", "Device memory reserved by the allocator (CUDA).", "mem_reserved"),
    ("dltop_rss_bytes", "Resident memory of the training process.", "sys.rss"),
)  # fmt: skip


@dataclass
class Family:
    """One metric family: its kind (gauge, counter, info, stateset), help and samples."""

    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], Any]] = field(default_factory=list)

    def add(self, labels: dict[str, str], value: Any) -> None:
        self.samples.append((labels, value))


class Labels:
    """Label values from a log made safe and bounded; counts what it cut."""

    def __init__(self) -> None:
        self.truncated = 0

    def value(self, text: object, limit: int = MAX_LABEL) -> str:
        raw = text if isinstance(text, str) else str(text)
        # a lone surrogate (JSON "\\ud800") cannot be encoded: it would fail the whole scrape
        raw = raw.encode("utf-8", "backslashreplace").decode("utf-8")
        safe = visible(raw)
        if len(safe) > limit:
            self.truncated += 1
            safe = safe[: limit - 1] + "…"
        return safe


@dataclass
class Watched:
    """One SOURCE as exported: its job label and the ranks its reader follows."""

    source: str
    view: JobView  # the viewer's own job logic: cross-rank alerts, the verdict
    model: Any  # the RunModel its reader feeds first (rank 0, or the only run)
    job: str = ""  # set by ``--job``; else found again at each scrape (``job_label``)
    _verdict: tuple[Any, float, tuple[str, str]] | None = None

    def ranks(self) -> Sequence[RankLog]:
        return self.view.ranks()

    def job_name(self) -> str:
        if self.job:
            return self.job
        with self.model.lock:
            meta = self.model.store.meta
        return job_label(self.source, meta)

    def verdict(self, now: float) -> tuple[str, str]:
        """(line, severity) as the viewer's header says it, made again when the ranks
        changed or ``VERDICT_EVERY`` passed (a stall is a matter of time, not of records)."""
        key = self.view.version()
        mono = time.monotonic()
        kept = self._verdict
        if kept is None or kept[0] != key or mono - kept[1] >= VERDICT_EVERY:
            kept = self._verdict = (key, mono, self.view.verdict(self.model, now))
        return kept[2]


@dataclass
class _Job:
    """One job label's figures in a scrape, summed over the sources that carry it."""

    ranks: int = 0
    errors: int = 0
    run_id: str = ""
    verdict: tuple[str, str] | None = None
    first: int | None = None


@dataclass
class Refused:
    """Label sets left out of one scrape, by what they would have been."""

    ranks: int = 0
    alerts: int = 0


def job_label(source: str, meta: Record | None) -> str:
    """The default ``job`` label: a rank folder's name, a rank file's folder, else the run id."""
    path = source.rstrip("/")
    if os.path.isdir(path):
        return os.path.basename(path) or path
    from ..ranks.jobs import is_rank_file

    if is_rank_file(path):
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    run_id = (meta or {}).get("run_id")
    if isinstance(run_id, str) and run_id:
        return run_id
    base = os.path.basename(path)
    return base[: -len(".jsonl")] if base.endswith(".jsonl") else base


def _alert_value(alerts: list[Alert]) -> tuple[str, int]:
    """One id's alerts on one rank: the worst severity, and 1 while any still holds."""
    worst = max(alerts, key=lambda a: SEVERITY_RANK.get(a.severity, 0)).severity
    return worst, int(any(a.active for a in alerts))


def collect(watched: Sequence[Watched], now: float | None = None) -> list[Family]:
    """Every family of one scrape, from the models as they are now."""
    now = time.time() if now is None else now
    labels = Labels()
    refused = Refused()
    fams = {name: Family(name, "gauge", text) for name, text, _ in GAUGES}
    step = Family("dltop_step", "gauge", "The latest step number.")
    steps = Family("dltop_steps", "counter", "Step records read (a resumed run may go back).")
    dropped = Family("dltop_dropped_records", "counter", "Records lost: by the probe (scope log) or by this reader's live socket (scope viewer).")  # fmt: skip
    last_step = Family("dltop_last_step_timestamp_seconds", "gauge", "Unix time of the latest step (time() minus it: how long without a step).")  # fmt: skip
    status = Family("dltop_run_status", "stateset", "Where the run stands, as the viewer's header says.")  # fmt: skip
    alert = Family("dltop_alert", "gauge", "1 while dltop's alert of this id holds on this rank, 0 once it cleared.")  # fmt: skip
    verdict = Family("dltop_verdict", "info", "The job's one-line verdict, as dltop check says it.")  # fmt: skip
    first = Family("dltop_first_failure_rank", "gauge", "The rank that failed first, when ranks failed.")  # fmt: skip
    ranks_n = Family("dltop_ranks", "gauge", "Ranks this exporter follows for the job.")
    errors = Family("dltop_read_errors", "gauge", "Ranks whose log cannot be read now.")
    seen = 0
    taken: set[tuple[str, str]] = set()  # (job, rank): two rank files saying one rank
    jobs: dict[str, _Job] = {}  # several SOURCEs may carry one job label (--job): one each
    for w in watched:
        job = labels.value(w.job_name())
        ranks = list(w.ranks())
        j = jobs.setdefault(job, _Job())
        j.ranks += len(ranks)
        for r in ranks:
            if seen >= MAX_RANKS:
                refused.ranks += 1
                continue
            seen += 1
            with r.model.lock:
                store = r.model.store
                meta = store.meta or {}
                run_id = labels.value(meta.get("run_id") or "")
                rank = labels.value(_rank_of(r, meta))
                if (job, rank) in taken:  # a copied file, a rank said twice: by its file
                    rank = labels.value(os.path.basename(r.path))
                n = 1
                while (job, rank) in taken:
                    n += 1
                    rank = labels.value(f"{os.path.basename(r.path)}#{n}")
                taken.add((job, rank))
                base = {"job": job, "rank": rank, "run_id": run_id}
                _rank_values(store, base, fams)
                if store.last_step is not None:
                    step.add(base, store.last_step)
                steps.add(base, store.steps)
                dropped.add({**base, "scope": "log"}, store.lost)
                dropped.add({**base, "scope": "viewer"}, store.dropped)
                state = r.model.status(now)
                j.errors += bool(r.model.source_error)
            j.run_id = j.run_id or run_id
            if state is not None and state.last_step_age is not None:
                last_step.add(base, now - state.last_step_age)
            shown = state.status if state is not None else "unknown"
            status.add(base, {s: s == shown for s in STATUSES})
            by_id: dict[str, list[Alert]] = {}
            for a in w.view.rank_alerts(r):
                by_id.setdefault(a.id, []).append(a)
            for n, (alert_id, group) in enumerate(sorted(by_id.items())):
                if n >= MAX_ALERT_IDS:
                    refused.alerts += 1
                    continue
                severity, value = _alert_value(group)
                alert.add({**base, "id": labels.value(alert_id), "severity": severity}, value)
        line, severity = w.verdict(now)
        if j.verdict is None or SEVERITY_RANK.get(severity, -1) > SEVERITY_RANK.get(
            j.verdict[1], -1
        ):
            j.verdict = (line, severity)  # the worst of the job's sources
        if j.first is None:
            j.first = w.view.cross.first_rank
    for job, j in jobs.items():
        ranks_n.add({"job": job}, j.ranks)
        errors.add({"job": job}, j.errors)
        if j.verdict is not None:
            info = {
                "verdict": labels.value(j.verdict[0], MAX_VERDICT),
                "severity": j.verdict[1] or "none",
            }
            verdict.add({"job": job, "run_id": j.run_id, **info}, 1)
        if j.first is not None:
            first.add({"job": job, "run_id": j.run_id}, j.first)
    own = _exporter_families(labels, refused)
    return [*fams.values(), step, steps, dropped, last_step, status, alert, verdict, first,
            ranks_n, errors, *own]  # fmt: skip


def _rank_of(r: RankLog, meta: Record) -> object:
    """A rank folder's number for the file; a single log's from its meta; else its name."""
    if r.rank is not None:
        return r.rank
    said = meta.get("rank")
    if isinstance(said, int) and not isinstance(said, bool):
        return said
    return os.path.basename(r.path)


def _rank_values(store: Store, base: dict[str, str], fams: dict[str, Family]) -> None:
    for name, _, series in GAUGES:
        value = store.latest(series)
        if value is not None:
            fams[name].add(base, value)


def _exporter_families(labels: Labels, refused: Refused) -> list[Family]:
    out = Family("dltop_exporter_refused_series", "gauge", "Label sets left out of this scrape by the exporter's caps (a log cannot grow the series count without bound).")  # fmt: skip
    out.add({"what": "rank"}, refused.ranks)
    out.add({"what": "alert"}, refused.alerts)
    cut = Family("dltop_exporter_truncated_labels", "gauge", f"Label values from the logs cut to {MAX_LABEL} characters in this scrape.")  # fmt: skip
    cut.add({}, labels.truncated)
    return [out, cut]
