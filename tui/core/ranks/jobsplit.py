"""Which logs of a folder are read as one run: one job's ranks, never several jobs merged.

Why: ``dltop DIR`` and ``dltop check DIR`` read every ``*.jsonl`` of a folder as the ranks
of one job. A folder holding the rank files of three jobs (world sizes 2, 4 and 8) was
shown as "all 4 ranks" with two rank 0s, its alerts and first failure judged across
jobs that never ran together (issue 29). A rank file says which job it belongs to: its
meta's world size, and its family: its run id with the rank number taken out
(``exp.rank#``), else its file name so (``a-rank#.jsonl``; ``sourcefiles.RankFile``), so
that two copies of one rank's log stay one job. The files that say so are grouped by
(world size, family); when that makes more than one job, the newest job (the one with
the newest file) is read and a note says which files belong to which job. A file that
cannot tell yet (no meta: a rank that has just opened its file) joins the newest job
when its name is one of that job's (or holds no rank number). A folder of one job, or
of separate runs of one process (``separate_runs``), reads as before. The restart count
is no part of a job's identity: an elastic restart appends to the same rank files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..sources.sourcefiles import RankFile, pick_rank_file, separate_note, separate_runs

NAMED_JOBS = 4  # jobs named in the note; the rest are counted
NAMED_FILES = 4  # files named per job

Key = tuple[int, str | None]  # world size, the family's pattern (run id's, else name's)


@dataclass(frozen=True)
class Job:
    """A job's identity: its key, and the file name patterns its files have (what a file
    with no meta yet is recognised by)."""

    key: Key
    names: frozenset[str | None]


@dataclass(frozen=True)
class Choice:
    """The files to read as one run, the note on what was left out (``""``: nothing),
    and the job, by which files that appear later are admitted (``None``: no file says
    which job it is, every file is)."""

    files: list[RankFile]
    note: str = ""
    job: Job | None = None


def job_key(f: RankFile) -> Key | None:
    """What a rank file says of its job: its world size and its family, by its run id
    when that holds a rank number (two copies of one rank's log are one job), else by its
    file name; ``None`` when it cannot say (no meta yet)."""
    if f.world is None:
        return None
    name, run = f.family
    return f.world, run if run is not None else name


def in_job(f: RankFile, job: Job) -> bool:
    """Whether ``f`` belongs to ``job``: it says so, or cannot tell yet and its name is
    one of the job's (or holds no rank number)."""
    own = job_key(f)
    if own is not None:
        return own == job.key
    return f.family[0] is None or f.family[0] in job.names


def choose(directory: str, files: list[RankFile]) -> Choice:
    """The files of ``directory`` to read as one run (see the module docstring)."""
    if separate_runs(files):  # not a job: the newest run, as before
        newest = pick_rank_file(files)
        return Choice([newest], separate_note(directory, files, newest))
    groups: dict[Key, list[RankFile]] = {}
    for f in files:
        key = job_key(f)
        if key is not None and f.job:
            groups.setdefault(key, []).append(f)
    jobs = {k: Job(k, frozenset(f.family[0] for f in fs)) for k, fs in groups.items()}
    if len(groups) < 2:  # one job (or none that says so): every file, as before
        return Choice(files, job=next(iter(jobs.values()), None))
    order = sorted(groups, key=lambda k: -max(f.mtime for f in groups[k]))
    chosen = jobs[order[0]]
    picked = [f for f in files if f.job is not False and in_job(f, chosen)]
    left = [f for f in files if f not in picked]
    return Choice(picked, _note(directory, groups, order, left), chosen)


def _note(
    directory: str,
    groups: dict[Key, list[RankFile]],
    order: list[Key],
    left: list[RankFile],
) -> str:
    """One line: how many jobs, which files are each's, which one is read."""

    def names(fs: list[RankFile]) -> str:
        shown = ", ".join(os.path.basename(f.path) for f in fs[:NAMED_FILES])
        more = len(fs) - NAMED_FILES
        return shown + (f" and {more} more" if more > 0 else "")

    parts = []
    for i, key in enumerate(order[:NAMED_JOBS]):
        world = key[0]
        what = "read" if i == 0 else "left out"
        parts.append(f"world size {world}: {names(groups[key])} ({what})")
    more = len(order) - NAMED_JOBS
    if more > 0:
        parts.append(f"{more} more jobs left out")
    single = [f for f in left if f.job is False]
    if single:
        parts.append(f"runs of one process: {names(single)} (left out)")
    return (
        f"{len(order)} jobs in {directory}, read as the newest alone: "
        + "; ".join(parts)
        + " (hint: give each job its own folder, or pass one rank file)"
    )
