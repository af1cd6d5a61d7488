"""Where each rank of a framework's job writes, and how the ranks agree on the folder.

Why apart from ``jobpath``: ``jobpath`` names a job without talking (a launcher's ranks
share a parent); a framework's own launcher (Lightning's DDP) does not give them one, so
here rank 0 names the folder and tells the others through the process group's key-value
store, once the framework has started it. Standard library only at import time; torch is
imported by :func:`shared_job` itself, which only an adapter's callback calls.
"""

from __future__ import annotations

import itertools
import os
import sys
from datetime import timedelta
from typing import Any

from . import jobpath

# How long a rank waits for rank 0's job name in ``shared_job``. The ranks come to the
# callback together (the framework's DDP setup synchronised them just before), so rank 0's
# name is normally there within a second; a slow rank 0 must still be waited for (else
# a second folder). Past this, rank 0 is taken not to be coming: a one-off pause of the
# training, which rank 0 then waits out in its next collective.
_AGREE_TIMEOUT_S = 10.0
_calls = itertools.count()  # shared_job's calls in this process: the same on every rank


def shared_job() -> str:
    """The job's folder name, the same on every rank: rank 0's, posted in the process
    group's key-value store.

    ``jobpath.job_name`` lets ranks agree without talking when one launcher starts them
    all (torchrun, ``mp.spawn``), but Lightning's own DDP launcher makes rank 0 the parent
    of the others, so their parents differ. Here the process group is up (the framework
    started it before the first callback), so rank 0 decides and tells the others.
    Rank 0 picks ``TORCHELASTIC_RUN_ID`` when set, else ``<time>-<its pid>``: two runs
    started from one shell must not share a folder.

    Through the store, never a collective: a rank that does not get here (its adapter
    failed, which is swallowed, or it has no probe) would leave a collective to be matched
    with the training's next one (DDP's all-reduce): a hang until the process group's
    timeout, then a dead training; and a collective in a callback joins NCCL's stream
    order. Rank 0 sets a key and goes on at once; the others wait for it at most
    ``_AGREE_TIMEOUT_S``. A timeout or any error is ``jobpath.job_name()`` and a one-line
    warning. The store comes from ``distributed_c10d._get_default_store``, a private API:
    if it is gone or changed, that is the same fallback.

    The key holds a count of this process's calls (two ``fit`` calls, the Trainer's retry
    with a smaller batch): every rank calls in the same order, so the count names the same
    call on every rank, and a second call never reads the first one's name. One key
    overwritten by rank 0 at each call would not do: a rank asking before rank 0 wrote
    again would read the old name; and a key that rank 0 alone made fresh (a uuid) would
    be one the others cannot name. A rank that skipped a call is one call out of step from
    then on: an earlier call's folder of this job, or a wait and its own name, never a
    hang. The restart count keeps an elastic restart from reading the keys of the attempt
    before it, should it find the same store.
    """
    call = next(_calls)
    name = jobpath.job_name() if jobpath.elastic_run_id() is not None else jobpath.stamp()
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            from torch.distributed import distributed_c10d

            store = distributed_c10d._get_default_store()
            key = f"dltop/job/{jobpath.restart_count() or 0}/{call}"
            if dist.get_rank() == 0:
                store.set(key, name)
            else:
                store.wait([key], timedelta(seconds=_AGREE_TIMEOUT_S))
                name = store.get(key).decode("utf-8", "replace")
            return jobpath.safe_name(name)
    except Exception as e:
        sys.stderr.write(f"dltop: warning: ranks could not agree on a log folder ({e})\n")
    return jobpath.job_name()


def rank_path(path: Any, auto: Any, rank: int, world: int) -> tuple[str | None, str | None]:
    """(log path, run id) for this rank; a run id of ``None`` leaves the probe's default.

    One rank alone: ``path`` as given, or the probe's default. Several ranks: one file
    per rank (contract, "Multi-rank runs"), ``dltop-runs/<job>/rank<R>.jsonl`` by
    default, and an explicit ``exp.jsonl`` becomes ``exp/rank<R>.jsonl``, a folder that
    ``dltop exp/`` reads as one run (one file shared by the ranks would mix them).
    """
    if path is not auto and path is not None:
        path = os.fspath(path) or None
    if path is None:
        return None, None
    if world <= 1:
        return (jobpath.default_path() if path is auto else path), None
    if path is auto:
        folder = os.path.join(jobpath.RUNS_DIR, shared_job())
    else:
        folder = path[: -len(".jsonl")] if path.endswith(".jsonl") else path.rstrip("/\\")
    name = os.path.basename(folder) or "run"
    return os.path.join(folder, f"rank{rank}.jsonl"), f"{name}.rank{rank}"
