"""dltop.demos: small trainings that really hit each failure, so you can watch dltop catch it.

Each module is a plain PyTorch loop using the probe the way a user would; run one
with ``dltop demo NAME`` (viewer attached) or ``python -m dltop.demos.NAME``. They
need torch; the viewer itself does not.
"""
