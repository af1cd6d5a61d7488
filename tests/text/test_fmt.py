"""One module formats every number a person reads (tui/core/text/fmt.py): its two registers,
and a guard that no other module grows its own copy again."""

from __future__ import annotations

import math
import re
from pathlib import Path

from dltop.tui.core.text import fmt

TUI = Path(__file__).resolve().parents[2] / "tui"


def test_prose_numbers_units_and_non_finite() -> None:
    assert (
        fmt.number(31234.5) == "3.12e+04"
        and fmt.number(0.00123) == "0.00123"
        and fmt.number(0.00012) == "0.00012"
    )
    assert fmt.number(0.5) == "0.5" and fmt.number(7) == "7" and fmt.number(True) == "True"
    assert [fmt.number(v) for v in (math.nan, math.inf, -math.inf)] == ["NaN", "Inf", "-Inf"]
    assert fmt.nbytes(512) == "512 B" and fmt.nbytes(1.19 * 2**30) == "1.19 GiB"
    assert fmt.nbytes(3 * 2**40) == "3 TiB"
    assert fmt.mib(3 * 2**20) == "3 MiB" and fmt.mib(None) == "unknown"
    assert fmt.seconds(0.35) == "350 ms" and fmt.seconds(1.5) == "1.5 s"
    assert fmt.percent(0.64) == "64 %" and fmt.ratio(12.0) == "12×"
    assert fmt.styled(0.64, "percent") == "64 %" and fmt.styled(math.nan, "bytes") == "NaN"
    assert fmt.duration(3725) == "1:02:05" and fmt.duration(3 * 86400 + 7205) == "3d 2h"
    assert fmt.duration(1e300) != "" and fmt.age(2.4) == "2s ago" and fmt.age(None) == ""


def test_numbers_past_the_float_range_are_infinities_not_exceptions() -> None:
    """A log's memory state with an int of 400 digits made ``dltop report`` raise in
    ``nbytes`` (``float()`` overflows on it); NaN and infinities are words there too."""
    big = 10**400
    assert fmt.nbytes(big) == "Inf" and fmt.nbytes(-big) == "-Inf"
    assert fmt.nbytes(math.nan) == "NaN" and fmt.nbytes(math.inf) == "Inf"
    assert fmt.mib(big) == "Inf MiB" and fmt.seconds(big) == "Inf s"
    assert fmt.nbytes(2**64) == "1.68e+07 TiB"


def test_compact_chart_labels() -> None:
    assert fmt.compact(None) == "—" and fmt.compact(math.nan) == "NaN"
    assert fmt.compact(3 * 2**30, "B") == "3.0GiB" and fmt.compact(0.012, "s") == "12.0ms"
    assert fmt.compact(64.2, "%") == "64%" and fmt.compact(123456.0) == "1.2e5"
    assert fmt.compact(0.0) == "0" and fmt.compact(12.34) == "12.3"


def test_no_other_module_formats_numbers_on_its_own() -> None:
    own = re.compile(r"^def (format_(number|value|bytes|seconds|age|duration)|_mib)\b", re.M)
    found = [
        str(p.relative_to(TUI))
        for p in TUI.rglob("*.py")
        if p.name != "fmt.py" and own.search(p.read_text())
    ]
    assert found == [], f"format numbers in tui/core/text/fmt.py, not in {found}"


def test_a_short_run_is_not_zero_seconds_and_a_fast_one_not_1e_plus_03() -> None:
    # the NaN demo ran 0.4 s at ~1 000 steps/s: "elapsed 0:00" and "1e+03 steps/s"
    assert fmt.duration(0.4) == "0.4s" and fmt.duration(9.94) == "9.9s"
    assert fmt.duration(10) == "0:10"
    assert fmt.rate(1000.0) == "1000" and fmt.rate(1420.6) == "1421" and fmt.rate(9.94) == "9.94"
