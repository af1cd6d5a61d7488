"""The smoothed copy of a series (``loss.ema``), extended as its source grows.

Why a stored series and not a chart-time filter: the smoothed loss must not change when
the chart's window or zoom does, and a million-step replay must not smooth from the start
at every redraw. NaN/Inf are marked on the raw series, not smoothed: the EMA holds its
last finite value through them.
"""

from __future__ import annotations

from array import array

from dltop.tui.core.series import Series


def update_ema(
    series: dict[str, Series], alphas: dict[str, float], acc_by_name: dict[str, float], v: int
) -> None:
    """Extend ``<name>.ema`` for each ``name`` in ``alphas`` to the length of its source
    (``acc_by_name``: each EMA's running value, carried from one call to the next)."""
    for name, alpha in alphas.items():
        src = series.get(name)
        if src is None:
            continue
        ema_name = name + ".ema"
        e = series.get(ema_name)
        if e is None:
            e = Series(ema_name, "derived", version=v)
            e.follow_x(src)
            series[ema_name] = e
        if len(e) == len(src):
            continue
        acc = acc_by_name.get(name)
        out = array("d")
        append = out.append
        for x in src.ys[len(e) :]:
            if x - x == 0:  # finite; NaN/Inf are marked on the raw series, not smoothed
                acc = x if acc is None else acc + alpha * (x - acc)
            append(acc if acc is not None else float("nan"))
        if acc is not None:
            acc_by_name[name] = acc
        e.extend(out, None, v)
        e.summarize()
