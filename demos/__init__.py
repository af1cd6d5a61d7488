"""dltop.demos: small trainings that really hit each failure, so you can watch dltop catch it.

Each demo is a module, ``NAME.py``: run it with ``dltop demo NAME`` (viewer attached) or
``python -m dltop.demos.NAME``. The plain-PyTorch ones share one training loop
(``runner.py``) and differ by their entry in ``scenarios.py``; the framework demos and
``quickstart`` keep their own loop. They need torch; the viewer itself does not.
"""
