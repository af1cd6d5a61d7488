"""What the rules' alerts mean to a person: how the run ended, its status and
verdict, the checklists and their ticks, the crash catalogue and crash diagnosis.
"""
