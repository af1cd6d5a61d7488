"""The viewer's words in the person's language (``--lang zh``): one lookup, English fallback.

Why a lookup keyed by the English text: the English is what the code writes, so a word
nobody translated yet shows in English, never as a key or a blank. The translations are
data (``tui/data/i18n/<lang>.json``, like the checklists), so a translator edits no code.

Alert titles are worded by the rules in English, with numbers and names inside ("Loss is
NaN", "Rank 3 is a straggler (data loading)"); they are translated where they are shown,
never in the rules (``dltop check --json`` keeps the contract's English): each English
template of ``titles`` is matched against the title, its ``{parts}`` kept (and looked up
themselves: "data loading", a nested title), and a job's or an overlay's prefix ("r0,2 ",
"B ") kept in front. A title no template matches gets its alert id's own translation in
front of the English, so it is never left untranslated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

BASE = "en"
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Words:
    """One language's words: plain text, alert-title templates, a title per alert id."""

    text: dict[str, str]
    titles: tuple[tuple[re.Pattern[str], str], ...]
    alerts: dict[str, str]


def _pattern(template: str) -> re.Pattern[str]:
    """An English title template as a pattern: its fields as groups, any prefix before."""
    parts = _FIELD.split(template)
    body = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(rf"(?P<_prefix>(?:.*? )??){body}", re.S)  # no prefix, if it can


@lru_cache(maxsize=8)
def words(lang: str) -> Words | None:
    """The words of ``lang`` (``None`` for English, or a language without a file)."""
    if lang == BASE or not re.fullmatch(r"[a-z]{2,3}(?:[-_][A-Za-z]{2,4})?", lang):
        return None
    try:
        path = resources.files("dltop.tui") / "data" / "i18n" / f"{lang}.json"
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    titles = data.get("titles") or {}
    # the longest English first: "Loss is diverging" before "Loss is {what}"
    ordered = sorted(titles, key=lambda t: -len(_FIELD.sub("", t)))
    return Words(
        text=dict(data.get("text") or {}),
        titles=tuple((_pattern(t), str(titles[t])) for t in ordered),
        alerts=dict(data.get("alerts") or {}),
    )


def tr(text: str, lang: str, **values: Any) -> str:
    """``text`` in ``lang`` (itself when untranslated), its ``{fields}`` filled."""
    found = words(lang)
    said = found.text.get(text, text) if found is not None else text
    return said.format(**values) if values else said


def tr_title(alert_id: str, title: str, lang: str) -> str:
    """An alert's title as shown in ``lang`` (see the module's docstring)."""
    found = words(lang)
    if found is None:
        return title
    for pattern, translated in found.titles:
        m = pattern.fullmatch(title)
        if m is None:
            continue
        parts = {
            k: tr_title(alert_id, v, lang) if k == "title" else tr(v, lang)
            for k, v in m.groupdict().items()
            if k != "_prefix"
        }
        return m.group("_prefix") + translated.format(**parts)
    generic = found.alerts.get(alert_id)
    return f"{generic}：{title}" if generic else title
