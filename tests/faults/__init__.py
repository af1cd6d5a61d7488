"""The labelled fault suite: tiny real trainings with one injected fault each.

``scenarios`` is the catalogue (labels written from the injected fault), ``train``
the one training entry point, ``harness`` runs trainings as subprocesses and scores
``dltop check``'s diagnosis against the labels. ``tests/rules/test_fault_suite.py`` runs a
fast subset; ``benchmarks/detection.py`` runs everything.
"""
