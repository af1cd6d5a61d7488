"""The GPU check (issue 34), one part per module, each with a CPU fallback.

``bash scripts/gpu_check.sh`` runs them all, each under its own timeout, and
``report.py`` gathers their results into ``$OUT/gpu_check.json`` and ``gpu_check.md``.
Each part also runs on its own::

    python -m scripts.gpu_check.<part> --device cuda|cpu --out DIR

and writes ``DIR/<part>.json``: ``{"part", "status": "pass"|"fail"|"skip", "summary",
"device", "seconds", "details"}``, then prints one line, ``gpu_check <part>: STATUS —
summary``. See docs/gpu.md.
"""
