"""A log's bytes, read safely: opening a path that may be a FIFO, a device or a folder of
runs (``sourcefiles``), and a byte range decoded into records in bounded pieces
(``logbytes``). Below every wing that reads a log (sources, ranks, diagnosis), above only
``text``.
"""
