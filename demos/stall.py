"""stall: one sample sits on a network mount that stops answering; training hangs.

The dataset reads its samples from "remote storage". Sample 6400 (the first of batch
100) is on a server that has stopped replying: the read blocks until the storage
client's 70-second timeout, then succeeds on retry. Nothing crashes, nothing is logged,
the process is alive and uses no CPU: the training loop simply waits in the data
loader's ``next()``. In a real run the wait is often endless (a dead NFS mount, a
deadlocked worker, a collective waiting for a rank that died).

The probe's writer thread keeps sending heartbeats while the training thread is stuck,
so dltop can tell "alive but not stepping" from "finished" or "dead": it raises
``stall`` once no step has come for max(10 x the usual step time, 60 s); its checklist
points at the data pipeline, I/O and distributed peers (``py-spy dump --pid PID``).
This demo takes about 80 s: the hang itself lasts 70 s, just past the 60 s default.

    python -m dltop.demos.stall [--out PATH] [--device cpu|cuda] [--fast]

The training is the loop all these demos share (``runner.py``); what this one
changes, the fault included (marked ``# BUG``), is its entry in ``scenarios.py``.
"""

from dltop.demos.runner import main_for

if __name__ == "__main__":
    main_for("stall")
