"""Crash diagnosis does bounded work on any message: no pattern backtracks super-linearly.

A log may be crafted, and one exception message used to hang `dltop check` and the viewer
for minutes (``(?P<what>[\\w ]+) must have the same dtype`` retried the whole run of
words at every start: quadratic). The claim has two halves: the catalogue's shape (every
repetition bounded, no pattern that starts with a repetition unless a lookbehind pins
where it may start) and a run of every pattern over hostile text, in a subprocess whose
timeout is only a safety net (no timed assertion: the speed claim lives in
``benchmarks/crash_match.py``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest
from dltop.tui.core.rules import crashcatalogue
from dltop.tui.core.rules.crashcatalogue import load_catalogue
from dltop.tui.core.rules.crashdiag import TEXT_HEAD, TEXT_TAIL, diagnose

_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT)


@pytest.fixture(autouse=True)
def _fresh_cache():
    crashcatalogue.clear_cache()
    yield
    crashcatalogue.clear_cache()


def _all_regexes() -> list[tuple[str, re.Pattern[str]]]:
    cat = load_catalogue()
    out = []
    for p in (*cat.patterns, cat.fallback):
        out += [(f"{p.id} match", m.regex) for m in p.match]
        out += [(f"{p.id} extract", r) for r in p.extract]
        out += [(f"{p.id} exc_type", r) for r in p.exc_type]
    return out


def _unbounded(items: Any) -> list[str]:
    """Every ``+``/``*``/``{n,}`` in a parsed pattern, nested ones included."""
    found = []
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            if hi == sre_c.MAXREPEAT:
                found.append(f"{{{lo},}}")
            found += _unbounded(sub)
        elif op == sre_c.SUBPATTERN:
            found += _unbounded(av[-1])
        elif op == sre_c.BRANCH:
            for alt in av[1]:
                found += _unbounded(alt)
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            found += _unbounded(av[1])
    return found


def _starts_with_repeat(items: Any) -> bool:
    """True when the first thing the pattern matches is a repetition (through groups)."""
    for op, av in items:
        if op in _REPEATS:
            return True
        if op == sre_c.SUBPATTERN:
            return _starts_with_repeat(av[-1])
        if op == sre_c.BRANCH:
            return any(_starts_with_repeat(alt) for alt in av[1])
        return False  # a literal, a class, an anchor or a lookbehind comes first
    return False


def test_every_repetition_in_the_catalogue_is_bounded():
    bad = {
        f"{where}: {rx.pattern}": u
        for where, rx in _all_regexes()
        if (u := _unbounded(sre_parse.parse(rx.pattern)))
    }
    assert bad == {}


def test_no_pattern_starts_with_a_repetition():
    """A leading repetition is retried from every character of a long run; a pattern
    must start with a literal, an anchor or a lookbehind that pins where the run starts."""
    bad = [
        f"{where}: {rx.pattern}"
        for where, rx in _all_regexes()
        if _starts_with_repeat(sre_parse.parse(rx.pattern))
    ]
    assert bad == []


def test_the_shape_checks_catch_the_old_quadratic_pattern():
    old = sre_parse.parse(r"(?P<what>[\w ]+) must have the same dtype, but got (?P<found>\w+)")
    assert _unbounded(old) and _starts_with_repeat(old)
    new = sre_parse.parse(r"(?<![\w ])(?P<what>[\w ]{1,80}) must have the same dtype")
    assert not _unbounded(new) and not _starts_with_repeat(new)


# The hostile run. The child prints one line per input; the parent's timeout is a safety
# net far above the few seconds it takes (the old catalogue ran for minutes on the first).
_CHILD = r"""
import base64, random, sys
from re import _constants as C, _parser as P
from dltop.tui.core.rules.crashcatalogue import load_catalogue
from dltop.tui.core.rules.crashdiag import diagnose, last_user_frame

def prefix(rx):
    # the literal text a pattern starts with: repeated, it is a near miss for that pattern
    out = []
    for op, av in P.parse(rx.pattern):
        if op is not C.LITERAL:
            break
        out.append(chr(av))
    return "".join(out)

cat = load_catalogue()
regexes = [m.regex for p in cat.patterns for m in p.match]
regexes += [r for p in cat.patterns for r in (*p.extract, *p.exc_type)]
r = random.Random(0)
KB = 1024
near = "".join(prefix(rx) + "1 " for rx in regexes)
inputs = {
    "one word": "a" * (256 * KB),
    "digits": "1" * (256 * KB),
    "words and spaces": ("ab " * (100 * KB))[: 256 * KB],
    "hex": r.randbytes(128 * KB).hex(),
    "base64": base64.b64encode(r.randbytes(192 * KB)).decode(),
    "near misses": (near * (256 * KB // len(near) + 1))[: 256 * KB],
}
for name, text in inputs.items():
    for rx in regexes:
        rx.search(text)  # the full text, not the window diagnose() cuts: the pattern itself
    for t in (text, text[: 8 * KB]):  # a short one too: all of it is searched
        ev = {"kind": "event", "type": "exception", "exc_type": text[:4 * KB], "message": t,
              "traceback": text, "cause": {"exc_type": "E", "message": t}}
        diagnose(ev)
    print(name, flush=True)
big = ("lorem ipsum dolor " * (8 * KB * KB // 18))[: 8 * KB * KB]
diagnose({"kind": "event", "type": "exception", "message": big, "traceback": [big] * 4})
last_user_frame(['File "x.py", line 1, in f\n'] * 1_000_000)
# the rule and the run status take a crash's first line: never by splitting all 8 MB
from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.diagnosis.status import run_state
e = RuleEngine()
e.feed_many([{"kind": "meta", "v": 1, "pid": 1, "t": 0.0},
             {"kind": "step", "step": 0, "t": 0.0, "loss": 1.0},
             {"kind": "event", "type": "exception", "exc_type": "E", "t": 0.0,
              "message": "\n" * (8 * KB * KB - 2) + "x"}])
assert run_state(e, now=0.0).status == "crashed"
print("8 MB", flush=True)
"""


def test_every_pattern_finishes_on_hostile_text():
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n") == [
        "one word",
        "digits",
        "words and spaces",
        "hex",
        "base64",
        "near misses",
        "8 MB",
        "",
    ]


# --------------------------------------------------------- what the cap keeps and cuts


def _ev(message: str) -> dict:
    return {"kind": "event", "type": "exception", "exc_type": "RuntimeError", "message": message}


SHAPES = "mat1 and mat2 shapes cannot be multiplied (32x8 and 32x64)"


def test_a_known_crash_at_either_end_of_a_huge_message_is_still_found():
    filler = "x" * (4 * TEXT_HEAD)
    for message in (SHAPES + filler, filler + SHAPES):
        d = diagnose(_ev(message))
        assert d is not None and d.pattern == "shape_mismatch"
        assert (d.details["a_cols"], d.details["b_rows"]) == (8, 32)


def test_text_in_the_middle_of_a_huge_message_is_not_searched():
    """The documented cut: only the first TEXT_HEAD and last TEXT_TAIL characters."""
    half = "x" * (TEXT_HEAD + TEXT_TAIL)
    d = diagnose(_ev(half + SHAPES + half))
    assert d is not None and d.pattern == "unknown"


def test_a_match_never_spans_the_cut():
    text = "y" * (TEXT_HEAD - 10) + "mat1 and mat2 shapes cannot be multiplied" + "y" * TEXT_HEAD
    d = diagnose(_ev(text))
    assert d is not None and d.pattern == "unknown"


def test_a_long_subject_before_a_dtype_mismatch_is_still_a_dtype_mismatch():
    subject = "the input and the weights of layer seven " * 4  # > 80 characters of words
    d = diagnose(_ev(f"{subject}must have the same dtype, but got Double and Float"))
    assert d is not None and d.pattern == "dtype_mismatch"
    assert (d.details["found"], d.details["expected"]) == ("float64", "float32")
    short = diagnose(_ev("self and mat2 must have the same dtype, but got Double and Float"))
    assert short is not None and short.details["what"] == "self and mat2"


def test_a_message_that_is_not_text_is_ignored_not_raised():
    for message in (10**5000, ["a"] * 10, {"a": 1}):
        d = diagnose(_ev(message))  # type: ignore[arg-type]
        assert d is not None and d.pattern == "unknown"
