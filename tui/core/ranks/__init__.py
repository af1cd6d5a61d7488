"""One job of several ranks: the cross-rank rules (``compare``, ``crossrank``), which files
form a job and one rank (or overlaid run) as held (``jobs``), the sharded grad-norm join
(``shardnorm``). How the viewer draws a job is ``present.rankjob`` and ``present.jobview``.
"""
