"""What the rules' alerts mean to a person: the run's status and verdict, the checklists
and their ticks. (How a run ended is decided once, by the rules: ``rules/ending.py``; which
known crash it was, by the crash catalogue beside the crash rule.)
"""
