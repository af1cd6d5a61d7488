"""One job of several ranks: the cross-rank rules (``compare``), which files form
a job, the sharded grad-norm join, and the job as the viewer follows and draws it.
"""
