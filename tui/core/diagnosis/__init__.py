"""What the rules' alerts mean to a person: the run's status and verdict, the
checklists and their ticks, the crash catalogue and crash diagnosis. (How a run ended is
decided once, by the rules: ``rules/ending.py``.)
"""
