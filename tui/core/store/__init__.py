"""One run held in memory: its columns (``runstore``), series, smoothing and
decimation, its events, and ``RunModel`` (store + rules engine) that a source feeds
and the UI reads; ``pipeline`` is the one path from decoded records to the rules and the
store.
"""
