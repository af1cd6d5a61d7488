"""Where records come from: a log file (growing or finished), a folder of rank logs, a
live socket, another tool's log, several runs overlaid; one module each. The bytes they
read become records in ``files.logbytes``; the records reach the rules and the store
through ``store.pipeline``.
"""
