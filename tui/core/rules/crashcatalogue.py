"""The catalogue of known crashes, loaded and checked: data, not code branches.

The catalogue (``tui/data/crash_patterns.toml``) is an ordered list of patterns, each
with regexes for the exception type and the message, the checklist that explains it, and
named regex groups that pull the numbers out of the message. ``docs/checklists.md`` and
``tui/data/README.md`` describe the format. Why a module of its own: reading and
validating a damaged file (one-line :class:`CatalogueError` naming it) is a different job
from matching a crash against it (``crashdiag.py``), and ``ranks/compare.py`` needs only this side.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..files.datafiles import Root, data_root, unreadable

ALERT_IDS = ("oom", "crash")
DETAIL_TYPES = ("int", "float", "bytes", "text", "dtype")
_PATTERN_KEYS = {
    "id",
    "alert",
    "checklist",
    "title",
    "summary",
    "exc_type",
    "event_type",
    "match",
    "extract",
    "types",
    "secondary",
}
_MATCH_KEYS = {"regex", "explain"}


class CatalogueError(ValueError):
    """The crash catalogue is unreadable or invalid; the message is one line naming the file."""


@dataclass(frozen=True)
class PatternMatch:
    """One message regex of a pattern, and the sentence saying what that message means."""

    regex: re.Pattern[str]
    explain: str | None


@dataclass(frozen=True)
class CrashPattern:
    """One catalogue entry. Matches when the event type, exception type or a message regex does."""

    id: str
    alert: str
    checklist: str
    title: str
    summary: str
    exc_type: tuple[re.Pattern[str], ...] = ()
    event_type: tuple[str, ...] = ()
    match: tuple[PatternMatch, ...] = ()
    extract: tuple[re.Pattern[str], ...] = ()
    types: dict[str, str] = field(default_factory=dict)
    # what a rank shows when *another* rank failed first (a collective timeout, a reset
    # connection): in a multi-rank run such a failure is never named the first one
    # while a rank failed within the clock tolerance with something else (tui/core/ranks/compare.py)
    secondary: bool = False


@dataclass(frozen=True)
class Catalogue:
    patterns: tuple[CrashPattern, ...]
    fallback: CrashPattern


_CACHE: dict[str, Catalogue] = {}


def load_catalogue(root: Root | None = None) -> Catalogue:
    """The parsed catalogue (cached); raises :class:`CatalogueError` when it is damaged."""
    base = data_root() if root is None else root
    key = str(base)
    if key not in _CACHE:
        _CACHE[key] = _parse_catalogue(base / "crash_patterns.toml")
    return _CACHE[key]


def clear_cache() -> None:
    _CACHE.clear()


def _parse_catalogue(path: Root) -> Catalogue:
    where = "crash_patterns.toml"
    if not path.is_file():
        raise CatalogueError(f"{where} is missing from the package data")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, OSError) as exc:
        raise CatalogueError(f"{where} {unreadable(exc)}") from None
    raw = data.get("pattern")
    if not isinstance(raw, list) or not raw:
        raise CatalogueError(f"{where}: needs a non-empty [[pattern]] list")
    patterns = [_parse_pattern(p, f"{where} pattern {n}") for n, p in enumerate(raw, 1)]
    ids = [p.id for p in patterns]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CatalogueError(f"{where}: duplicate pattern ids {dupes}")
    fallback = _parse_pattern(data.get("fallback"), f"{where} [fallback]", is_fallback=True)
    return Catalogue(tuple(patterns), fallback)


def _compile(regex: Any, where: str) -> re.Pattern[str]:
    if not isinstance(regex, str) or not regex:
        raise CatalogueError(f"{where}: a regex must be non-empty text")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise CatalogueError(f"{where}: bad regex {regex!r}: {exc}") from None


def _str_list(value: Any, where: str, key: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, dict)):
        return [value]
    if not isinstance(value, list):
        raise CatalogueError(f"{where}: '{key}' must be a list")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CatalogueError(f"{where}: 'secondary' must be true or false")
    return value


def secondary_patterns(root: Root | None = None) -> frozenset[str]:
    """Ids of the patterns marked ``secondary``: failures that follow another rank's."""
    return frozenset(p.id for p in load_catalogue(root).patterns if p.secondary)


def _parse_pattern(raw: Any, where: str, is_fallback: bool = False) -> CrashPattern:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: must be a table")
    unknown = set(raw) - _PATTERN_KEYS
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("id", "alert", "checklist", "title", "summary"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CatalogueError(f"{where}: '{key}' must be non-empty text")
    where = f"{where} ({raw['id']})"
    if raw["alert"] not in ALERT_IDS:
        raise CatalogueError(f"{where}: alert must be one of {ALERT_IDS}")
    matches = []
    for m in _str_list(raw.get("match"), where, "match"):
        if isinstance(m, str):
            m = {"regex": m}
        if not isinstance(m, dict) or set(m) - _MATCH_KEYS:
            raise CatalogueError(f"{where}: a match is a regex or a table with regex and explain")
        explain = m.get("explain")
        if explain is not None and not isinstance(explain, str):
            raise CatalogueError(f"{where}: explain must be text")
        matches.append(PatternMatch(_compile(m.get("regex"), where), explain))
    types = raw.get("types", {})
    if not isinstance(types, dict) or any(t not in DETAIL_TYPES for t in types.values()):
        raise CatalogueError(f"{where}: types map group names to one of {DETAIL_TYPES}")
    pattern = CrashPattern(
        id=raw["id"],
        alert=raw["alert"],
        checklist=raw["checklist"],
        title=raw["title"].strip(),
        summary=raw["summary"].strip(),
        exc_type=tuple(
            _compile(r, where) for r in _str_list(raw.get("exc_type"), where, "exc_type")
        ),
        event_type=tuple(_str_list(raw.get("event_type"), where, "event_type")),
        match=tuple(matches),
        extract=tuple(_compile(r, where) for r in _str_list(raw.get("extract"), where, "extract")),
        types=dict(types),
        secondary=_flag(raw.get("secondary", False), where),
    )
    if not is_fallback and not (pattern.exc_type or pattern.event_type or pattern.match):
        raise CatalogueError(f"{where}: a pattern needs exc_type, event_type or match")
    return pattern
