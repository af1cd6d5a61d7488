"""Crash diagnosis: match an exception event against the catalogue of known crashes.

The catalogue (``tui/data/crash_patterns.toml``, loaded by ``crashcatalogue.py``) is
data: an ordered list of patterns, each with regexes for the exception type and the message, the checklist
that explains it, and named regex groups that pull the numbers out of the message
(the two shapes of a bad matmul, the GiB an allocation wanted, the index that was out
of range). The first pattern that matches wins, so specific patterns come before
broad ones. ``docs/checklists.md`` and ``tui/data/README.md`` describe the format.

The rules engine turns the diagnosis into an ``oom`` or ``crash`` alert; this module
never raises on a strange event or a damaged catalogue, since it runs while feeding
records: a damaged catalogue yields the fallback diagnosis with the error in details.

A log may be crafted, so its size must not decide how long diagnosis takes: a regex sees
at most the first ``TEXT_HEAD`` and the last ``TEXT_TAIL`` characters of a message (each
searched on its own, so no match spans the cut), an exception type's last ``TYPE_CHARS``,
a traceback's last ``TRACEBACK_CHARS`` / ``TRACEBACK_ITEMS``; and every repetition in the
catalogue is bounded (see its header). ``benchmarks/crash_match.py`` measures the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ....probe.schema import Record
from ..files.datafiles import Root
from ..text.fmt import nbytes as format_bytes
from .crashcatalogue import CatalogueError, CrashPattern, PatternMatch, load_catalogue
from .ending import is_fatal

MAX_CAUSES = 4  # how deep a chain of causes ("raise X from Y") is followed
# What the regexes see of untrusted text (see the module docstring). The probe keeps 4096
# characters of a message, torch's longest (a state_dict listing every missing key) fit
# in the head, and what a crash says last (the innermost frame, a wrapped error) in the tail.
TEXT_HEAD = 32 << 10
TEXT_TAIL = 8 << 10
TYPE_CHARS = 256  # an exception type is a dotted name; its end is what the patterns test
TRACEBACK_CHARS = 64 << 10  # the innermost frames are at the end
TRACEBACK_ITEMS = 256
_UNITS = {
    "b": 1,
    "bytes": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BYTES_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_FRAME_RE = re.compile(r'File "([^"\n]{1,4096})", line (\d{1,12}), in (\S{1,256})')
_LIBRARY_PARTS = (
    "site-packages",
    "dist-packages",
    "/torch/",
    "\\torch\\",
    "/lib/python",
    "<frozen",
)
# torch spells one dtype many ways: "Double", "double", "torch.float64", "torch.DoubleTensor",
# "torch.cuda.DoubleTensor", "c10::Double", "CUDADoubleType"; checklists compare one name
_DTYPE_PREFIX = re.compile(r"^(torch\.)?(cuda\.)?(c10::)?(CUDA|CPU)?")
_DTYPE_SUFFIX = re.compile(r"(Tensor|Type)$")
_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "long": "int64",
    "int64": "int64",
    "int": "int32",
    "int32": "int32",
    "short": "int16",
    "int16": "int16",
    "char": "int8",
    "int8": "int8",
    "byte": "uint8",
    "uint8": "uint8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complex64": "complex64",
    "complexdouble": "complex128",
    "complex128": "complex128",
}


@dataclass(frozen=True)
class CrashDiagnosis:
    """What a crash was, in the terms of the catalogue; ``details`` holds the numbers."""

    pattern: str
    alert_id: str
    title: str
    summary: str
    checklist: str
    details: dict[str, Any] = field(default_factory=dict)


def diagnose(event: Record, *, root: Root | None = None) -> CrashDiagnosis | None:
    """Diagnose an exception/oom event record; None for an interrupt, ``sys.exit(0)`` or a
    non-crash event (:func:`dltop.tui.core.rules.ending.is_fatal`)."""
    if not isinstance(event, dict) or event.get("type") not in ("exception", "oom"):
        return None
    if not is_fatal(event):  # an interrupt or sys.exit(0): no crash to diagnose
        return None
    ev_type = str(event["type"])  # "exception" or "oom": looked at above
    exc_type = _as_text(event.get("exc_type") or event.get("exception"))
    message = windows(_as_text(event.get("message")))
    try:
        catalogue = load_catalogue(root)
    except CatalogueError as exc:
        return _fallback_for(ev_type, exc_type, event, str(exc))
    for pattern in catalogue.patterns:
        hit = _matches(pattern, ev_type, exc_type, message)
        if hit is not None:
            return _diagnosis(pattern, hit, exc_type, message, event)
    # nothing known at the top: a wrapper ("raise RuntimeError('step failed') from exc")
    # often hides the real error in its cause, which the probe records too
    for depth, (c_type, c_message) in enumerate(_causes(event), 1):
        for pattern in catalogue.patterns:
            hit = _matches(pattern, "", c_type, c_message)
            if hit is not None:
                d = _diagnosis(pattern, hit, c_type, c_message, event)
                d.details["cause_exc_type"] = c_type
                d.details["cause_depth"] = depth
                if exc_type:
                    d.details["exc_type"] = exc_type
                return d
    return _diagnosis(catalogue.fallback, None, exc_type, message, event)


def _causes(event: Record) -> list[tuple[str, tuple[str, ...]]]:
    """(type, message) of each recorded cause, nearest first: ``event["cause"]``, its own
    ``cause``, and so on (bounded; a malformed entry ends the chain)."""
    out: list[tuple[str, str]] = []
    cause = event.get("cause")
    while isinstance(cause, dict) and len(out) < MAX_CAUSES:
        out.append((_as_text(cause.get("exc_type")), _as_text(cause.get("message"))))
        cause = cause.get("cause")
    return [(t, windows(m)) for t, m in out]


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):  # not text, but say what it was; never a container
        try:
            return str(value)
        except ValueError:  # an int past sys.get_int_max_str_digits()
            return ""
    return ""


def windows(text: str) -> tuple[str, ...]:
    """The parts of ``text`` a regex sees: all of it when short, else its first
    ``TEXT_HEAD`` and last ``TEXT_TAIL`` characters, each searched on its own."""
    if len(text) <= TEXT_HEAD + TEXT_TAIL:
        return (text,)
    return (text[:TEXT_HEAD], text[-TEXT_TAIL:])


def _search(regex: re.Pattern[str], texts: tuple[str, ...]) -> re.Match[str] | None:
    for text in texts:
        found = regex.search(text)
        if found:
            return found
    return None


def _matches(
    pattern: CrashPattern, ev_type: str, exc_type: str, message: tuple[str, ...]
) -> tuple[re.Match[str] | None, PatternMatch | None] | None:
    """(the message match and its entry, when there is one) if the pattern applies."""
    for m in pattern.match:
        found = _search(m.regex, message)
        if found:
            return found, m
    tail = exc_type[-TYPE_CHARS:]
    if tail and any(r.search(tail) for r in pattern.exc_type):
        return None, None
    if ev_type in pattern.event_type:
        return None, None
    return None


def _diagnosis(
    pattern: CrashPattern,
    hit: tuple[re.Match[str] | None, PatternMatch | None] | None,
    exc_type: str,
    message: tuple[str, ...],
    event: Record,
) -> CrashDiagnosis:
    details: dict[str, Any] = {}
    if exc_type:
        details["exc_type"] = exc_type
    for regex in pattern.extract:
        found = _search(regex, message)
        if found:
            details.update({k: v for k, v in found.groupdict().items() if v is not None})
    found, entry = hit if hit else (None, None)
    if found is not None:
        details.update({k: v for k, v in found.groupdict().items() if v is not None})
    for name, kind in pattern.types.items():
        if name in details:
            details[name] = _convert(details[name], kind)
    where = last_user_frame(event.get("traceback"))
    if where:
        details["where"] = where
    memory = event.get("memory")
    if isinstance(memory, dict) and memory:
        details["memory"] = dict(memory)
    summary = pattern.summary
    if entry is not None and entry.explain:
        said = _fill(entry.explain, details, pattern.types)
        if said:
            summary = f"{summary} {said}"
    alert = "oom" if event.get("type") == "oom" else pattern.alert
    return CrashDiagnosis(pattern.id, alert, pattern.title, summary, pattern.checklist, details)


def _fallback_for(ev_type: str, exc_type: str, event: Record, error: str) -> CrashDiagnosis:
    alert = "oom" if ev_type == "oom" else "crash"
    details: dict[str, Any] = {"catalogue_error": error}
    if exc_type:
        details["exc_type"] = exc_type
    return CrashDiagnosis(
        "unknown",
        alert,
        "The run crashed",
        f"The crash catalogue could not be read ({error}).",
        alert,
        details,
    )


def _convert(value: Any, kind: str) -> Any:
    """A captured group as the number it stands for; the text itself if it does not parse."""
    if not isinstance(value, str):
        return value
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bytes":
            return parse_bytes(value)
        if kind == "dtype":
            return canonical_dtype(value)
    except ValueError:
        return value
    return value


def canonical_dtype(text: str) -> str:
    """'Double', 'torch.cuda.DoubleTensor', 'c10::Double', 'torch.float64' -> 'float64';
    text that names no dtype comes back unchanged."""
    name = _DTYPE_SUFFIX.sub("", _DTYPE_PREFIX.sub("", text.strip()))
    return _DTYPES.get(name.lower(), text)


def parse_bytes(text: str) -> int:
    """'2.00 GiB' -> 2147483648; '17592186044416' -> 17592186044416 (bytes when unitless)."""
    found = _BYTES_RE.match(text)
    if not found:
        raise ValueError(f"not a size: {text!r}")
    unit = found.group(2).lower() or "b"
    if unit not in _UNITS:
        raise ValueError(f"unknown unit in {text!r}")
    return int(float(found.group(1)) * _UNITS[unit])


def _fill(template: str, details: dict[str, Any], types: dict[str, str]) -> str | None:
    """The template with details filled in (sizes in GiB/MiB); None if a name is missing."""
    shown = {
        k: format_bytes(v) if types.get(k) == "bytes" and isinstance(v, int) else v
        for k, v in details.items()
    }
    try:
        return template.format_map(shown)
    except (KeyError, IndexError, ValueError, AttributeError):
        return None


def last_user_frame(traceback: Any) -> str | None:
    """'train.py:42 in forward': the innermost frame outside torch and site-packages.

    Accepts the traceback as text, a list of text lines, or a list of frame dicts
    (``file``/``filename``, ``line``/``lineno``, ``name``/``func``); None if none found.
    """
    frames: list[tuple[str, str, str]] = []
    if isinstance(traceback, str):
        frames = _FRAME_RE.findall(traceback[-TRACEBACK_CHARS:])
    elif isinstance(traceback, list):
        budget = TRACEBACK_CHARS  # of text read in all, from the innermost item outwards
        for item in reversed(traceback[-TRACEBACK_ITEMS:]):
            if budget <= 0:
                break
            if isinstance(item, str):
                frames[:0] = _FRAME_RE.findall(item[-budget:])
                budget -= len(item)
            elif isinstance(item, dict):
                file = _as_text(item.get("file") or item.get("filename"))[-1024:]
                line = _as_text(item.get("line") or item.get("lineno"))[:24]
                name = _as_text(item.get("name") or item.get("func"))[:256]
                if file:
                    frames.insert(0, (file, line or "?", name or "?"))
                budget -= len(file) + len(line) + len(name)
    if not frames:
        return None
    user = [f for f in frames if not any(part in f[0] for part in _LIBRARY_PARTS)]
    file, line, name = (user or frames)[-1]
    short = file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{short}:{line} in {name}"
