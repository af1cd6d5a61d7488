"""Every number a person reads, formatted in one place: prose and compact chart labels.

Two registers, each decided once:

- **prose** (alert messages, facts, checklist evidence, `check`'s report, the crash
  banner): a space before units ("1.19 GiB", "350 ms", "64 %", "12×") and numbers to
  three or four significant digits (3.1e+04, 0.0012);
- **compact** (chart axes and legends, where every column counts): no space
  ("1.5GiB", "12.0ms", "64%"), "—" for a missing value.

Non-finite values read "NaN", "Inf", "-Inf" in both.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from ....probe.schema import as_float

Style = Literal["number", "percent", "bytes", "ratio", "seconds"]  # checklist `format =` values


def _nonfinite(value: float) -> str | None:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Inf" if value > 0 else "-Inf"
    return None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ prose


def number(value: Any) -> str:
    """Numbers the way a person reads them in a terminal: 3.1e+04, 0.0012, 64; anything
    that is not a number as its ``str``."""
    if not is_number(value):
        return str(value)
    if isinstance(value, int):
        return str(value)
    bad = _nonfinite(value)
    if bad is not None:
        return bad
    a = abs(value)
    if a != 0 and (a >= 1e4 or a < 1e-3):
        return f"{value:.2g}" if a < 1e-3 else f"{value:.3g}"
    return f"{value:.4g}"


def nbytes(n: float) -> str:
    """Binary units, the way allocators report them: 512 B, 20 MiB, 1.19 GiB. An int past
    the float range (a log's 400 digits) is the infinity it stands for (``as_float``):
    ``float()`` raises on it."""
    size = as_float(n)
    if size is None:
        return str(n)
    bad = _nonfinite(size)
    if bad is not None:
        return bad
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.3g} TiB"


def mib(value: float | None) -> str:
    """A byte count in MiB (memory growth rates and totals); "unknown" for None."""
    f = as_float(value)
    return "unknown" if f is None else f"{number(f / 2**20)} MiB"


def seconds(value: float) -> str:
    """A duration: "350 ms" under a second, "1.5 s" above."""
    f = as_float(value)
    if f is None:
        return str(value)
    return f"{f * 1000:.0f} ms" if abs(f) < 1 else f"{number(f)} s"


def duration(seconds: float | None) -> str:
    """A run's elapsed time: "2.6s", "1:05", "1:02:05", "3d 2h" ("" when unknown).

    Under 10 s with a decimal: a demo that ran 0.4 s read "0:00", as if nothing had run."""
    if seconds is None or seconds != seconds:
        return ""
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    s = int(max(0, min(seconds, 1e15)))
    if s >= 86400:  # an old log: days and hours say enough
        d, rem = divmod(s, 86400)
        return f"{d}d {rem // 3600}h"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def rate(per_second: float) -> str:
    """A speed: "0.52", "38.4", "10", "1420" (never "1.42e+03")."""
    return f"{per_second:.3g}" if abs(per_second) < 1000 else f"{per_second:.0f}"


def age(seconds: float | None) -> str:
    """How long ago: "2s ago", "1:02:05 ago" ("" when unknown)."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    return f"{duration(seconds)} ago"


def percent(share: float) -> str:
    """A share (0..1) as "64 %"."""
    return f"{share * 100:.0f} %"


def ratio(value: float) -> str:
    return f"{number(value)}×"


def styled(value: Any, style: str = "number") -> str:
    """A checklist value in its declared ``format`` (see :data:`Style`)."""
    if not is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
        return number(value)
    if style == "percent":
        return percent(value)
    if style == "bytes":
        return nbytes(value)
    if style == "ratio":
        return ratio(value)
    if style == "seconds":
        return seconds(value)
    return number(value)


# ---------------------------------------------------------------------------- compact


def compact(value: float | None, unit: str = "") -> str:
    """Short axis/legend text: 3.1e4, 0.0012, 1.5GiB, 12.0ms, 64%."""
    if value is None:
        return "—"
    bad = _nonfinite(value)
    if bad is not None:
        return bad
    if unit == "B":
        return compact_bytes(value)
    if unit == "s":
        return compact_seconds(value)
    if unit == "%":
        return f"{value:.0f}%"
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1e5 or a < 1e-3:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def compact_bytes(value: float) -> str:
    a = abs(value)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if a >= size:
            scaled = value / size
            return f"{scaled:.0f}{unit}" if abs(scaled) >= 100 else f"{scaled:.1f}{unit}"
    return f"{value:.0f}B"


def compact_seconds(value: float) -> str:
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1:
        return f"{value:.2f}s"
    if a >= 1e-3:
        return f"{value * 1e3:.1f}ms"
    return f"{value * 1e6:.0f}µs"
