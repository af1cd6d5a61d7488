"""Where records come from: a log file (growing or finished), a folder of rank
logs, a live socket, another tool's log; the one place bytes become records
(``logbytes``) and the one path from records to the rules (``pipeline``).
"""
