"""Troubleshooting checklists: loaded from data files and checked (``checklist_eval.py``
marks them from what the log shows).

Checklists are data, not code (``tui/data/checklists/``), so that the knowledge can
be reviewed, corrected and translated without touching the rules. English files hold
the structure (step order, ids, evidence checks) and the English text; a translation
(``zh/<id>.toml``) holds only text keyed by step id, so the checks exist once and a
missing translated string falls back to English. See ``docs/checklists.md``.

A step whose question the log can answer carries a ``check`` (a fact or a key of the
alert's evidence, an operator, a threshold), validated here when the file is read: a
check that names an unknown fact or operator is a damaged file, not a silent "no".
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..files.datafiles import Root, data_root, unreadable
from ..rules.alerts import Alert
from ..rules.facts import FACT_NAMES

BASE_LANG = "en"
GENERIC_ID = "generic"
OPS = (">", ">=", "<", "<=", "==", "!=", "is_true", "is_false")
UNARY_OPS = ("is_true", "is_false")
FORMATS = ("number", "percent", "bytes", "seconds", "ratio")
_CHECK_KEYS = {"fact", "evidence", "op", "value", "ref", "ref_evidence", "scale", "format"}
_STEP_KEYS = {"id", "text", "why", "how", "check", "cause", "action"}
_TEXT_KEYS = ("text", "why", "how", "cause", "action")
_TOP_KEYS = {"id", "title", "summary", "steps", "verdict", "action"}
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


class ChecklistDataError(ValueError):
    """A checklist data file is missing a field, garbled, or names an unknown fact.

    The message is one line naming the file, fit to show to a user as is.
    """


@dataclass(frozen=True)
class ChecklistStep:
    """One thing to check: what (``text``), why it matters, how to look (often code)."""

    id: str
    text: str
    why: str
    how: str | None = None
    check: dict[str, Any] | None = None
    # the verdict line's words when the log answers this step "yes": the likely cause
    # ("after the lr reached {value}") and the first thing to do ("lower the peak lr 10x")
    cause: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class Checklist:
    """Ordered steps for one alert id or crash pattern, in one language.

    ``error`` is set only on the fallback returned by :func:`checklist_for` when the
    wanted file exists but could not be read, so a UI can say so instead of crashing.
    """

    id: str
    title: str
    summary: str
    steps: tuple[ChecklistStep, ...]
    lang: str = BASE_LANG
    error: str | None = field(default=None, compare=False)
    # the verdict line: what went wrong, as templates over the alert's evidence, the first
    # whose every field the alert has ("NaN since step {step} ({nonfinite_steps} of
    # {steps} steps)"), and the first thing to do when no step names one (see
    # ``dltop.tui.core.diagnosis.verdict``)
    verdict: tuple[str, ...] = ()
    action: str | None = None


# ----------------------------------------------------------------------------- loading


def load_checklist(
    checklist_id: str, lang: str = BASE_LANG, *, root: Root | None = None
) -> Checklist | None:
    """The checklist ``checklist_id`` in ``lang`` (English text where untranslated).

    Returns None when no English file exists for the id; raises
    :class:`ChecklistDataError` when a file exists but is unreadable or invalid.
    """
    base = data_root() if root is None else root
    return _load_cached(str(base), checklist_id, lang, base)


_CACHE: dict[tuple[str, str, str], Checklist | None] = {}


def _load_cached(key: str, checklist_id: str, lang: str, base: Root) -> Checklist | None:
    cache_key = (key, checklist_id, lang)
    if cache_key not in _CACHE:
        _CACHE[cache_key] = _load(checklist_id, lang, base)
    return _CACHE[cache_key]


def clear_cache() -> None:
    """Forget loaded files (tests that write data files; a reload after editing them)."""
    _CACHE.clear()


def languages(*, root: Root | None = None) -> list[str]:
    """The languages checklists ship in (one folder each under ``checklists/``), sorted."""
    folder = (data_root() if root is None else root) / "checklists"
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and _ID_RE.match(p.name))
    except OSError:
        return [BASE_LANG]


def _load(checklist_id: str, lang: str, base: Root) -> Checklist | None:
    if not _ID_RE.match(checklist_id):
        return None  # never let an id from a log file walk the filesystem
    en_path = base / "checklists" / BASE_LANG / f"{checklist_id}.toml"
    en = _read_toml(en_path)
    if en is None:
        return None
    checklist = _parse_structure(checklist_id, en, _display(en_path))
    if lang == BASE_LANG:
        return checklist
    tr_path = base / "checklists" / lang / f"{checklist_id}.toml"
    tr = _read_toml(tr_path) if _ID_RE.match(lang) else None
    if tr is None:
        return checklist
    return _apply_translation(checklist, tr, lang, _display(tr_path))


def _display(path: Root) -> str:
    """A short path for messages: from the data folder down."""
    parts = str(path).replace("\\", "/").split("/")
    return "/".join(parts[-4:])


def _read_toml(path: Root) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, OSError) as exc:
        raise ChecklistDataError(f"checklist file {_display(path)} {unreadable(exc)}") from None


def _text(data: dict[str, Any], key: str, where: str, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ChecklistDataError(f"{where}: '{key}' must be non-empty text")
    return value.strip()


def _templates(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    """One template or a list of them, tried in order (``verdict``)."""
    value = data.get(key)
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ChecklistDataError(f"{where}: '{key}' must be text or a list of texts")
    return tuple(_text({key: v}, key, where) or "" for v in items)


def _parse_structure(checklist_id: str, data: dict[str, Any], where: str) -> Checklist:
    unknown_top = set(data) - _TOP_KEYS
    if unknown_top:
        raise ChecklistDataError(f"{where}: unknown keys {sorted(unknown_top)}")
    if data.get("id", checklist_id) != checklist_id:
        raise ChecklistDataError(f"{where}: id '{data.get('id')}' does not match the file name")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ChecklistDataError(f"{where}: needs a non-empty [[steps]] list")
    steps: list[ChecklistStep] = []
    seen: set[str] = set()
    for n, raw in enumerate(raw_steps, 1):
        at = f"{where} step {n}"
        if not isinstance(raw, dict):
            raise ChecklistDataError(f"{at}: must be a table")
        unknown = set(raw) - _STEP_KEYS
        if unknown:
            raise ChecklistDataError(f"{at}: unknown keys {sorted(unknown)}")
        step_id = _text(raw, "id", at) or ""
        if not _ID_RE.match(step_id) or step_id in seen:
            raise ChecklistDataError(
                f"{at}: id '{step_id}' must be unique, lower_case_with_underscores"
            )
        seen.add(step_id)
        check = raw.get("check")
        if check is not None:
            validate_check(check, f"{at} ({step_id})")
        steps.append(
            ChecklistStep(
                id=step_id,
                text=_text(raw, "text", at) or "",
                why=_text(raw, "why", at) or "",
                how=_text(raw, "how", at, required=False),
                check=dict(check) if check is not None else None,
                cause=_text(raw, "cause", at, required=False),
                action=_text(raw, "action", at, required=False),
            )
        )
    return Checklist(
        id=checklist_id,
        title=_text(data, "title", where) or "",
        summary=_text(data, "summary", where) or "",
        steps=tuple(steps),
        verdict=_templates(data, "verdict", where),
        action=_text(data, "action", where, required=False),
    )


def validate_check(check: Any, where: str) -> None:
    """Raise :class:`ChecklistDataError` unless ``check`` is a well-formed evidence check."""
    if not isinstance(check, dict):
        raise ChecklistDataError(f"{where}: check must be a table")
    unknown = set(check) - _CHECK_KEYS
    if unknown:
        raise ChecklistDataError(f"{where}: unknown check keys {sorted(unknown)}")
    if ("fact" in check) == ("evidence" in check):
        raise ChecklistDataError(f"{where}: a check names exactly one of 'fact' or 'evidence'")
    if "fact" in check and check["fact"] not in FACT_NAMES:
        raise ChecklistDataError(f"{where}: unknown fact '{check['fact']}'")
    if "evidence" in check and not (isinstance(check["evidence"], str) and check["evidence"]):
        raise ChecklistDataError(f"{where}: 'evidence' must name a key of the alert's evidence")
    op = check.get("op")
    if op not in OPS:
        raise ChecklistDataError(f"{where}: operator {op!r} is not one of {', '.join(OPS)}")
    if "ref" in check and "ref_evidence" in check:
        raise ChecklistDataError(f"{where}: give 'ref' (a fact) or 'ref_evidence', not both")
    if "ref_evidence" in check and not (
        isinstance(check["ref_evidence"], str) and check["ref_evidence"]
    ):
        raise ChecklistDataError(f"{where}: 'ref_evidence' must name a key of the alert's evidence")
    has_value, has_ref = "value" in check, "ref" in check or "ref_evidence" in check
    if op in UNARY_OPS:
        if has_value or has_ref:
            raise ChecklistDataError(f"{where}: '{op}' takes no value")
    elif has_value == has_ref:
        raise ChecklistDataError(
            f"{where}: '{op}' needs exactly one of 'value', 'ref' or 'ref_evidence'"
        )
    if has_value and not isinstance(check["value"], (int, float, str, bool)):
        raise ChecklistDataError(f"{where}: value must be a number, text or boolean")
    if "ref" in check and check["ref"] not in FACT_NAMES:
        raise ChecklistDataError(f"{where}: unknown reference fact '{check['ref']}'")
    scale = check.get("scale", 1)
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or (not has_ref and "scale" in check)
    ):
        raise ChecklistDataError(f"{where}: 'scale' is a number and goes with 'ref'")
    if check.get("format", "number") not in FORMATS:
        raise ChecklistDataError(
            f"{where}: format {check.get('format')!r} is not one of {', '.join(FORMATS)}"
        )


def _apply_translation(
    checklist: Checklist, data: dict[str, Any], lang: str, where: str
) -> Checklist:
    """Overlay translated text on the English structure; untranslated fields stay English."""
    unknown = set(data) - {"title", "summary", "steps", "verdict", "action"}
    if unknown:
        raise ChecklistDataError(
            f"{where}: a translation holds only title, summary, verdict, action and steps "
            f"text; found {sorted(unknown)}"
        )
    texts = data.get("steps", {})
    if not isinstance(texts, dict):
        raise ChecklistDataError(f"{where}: steps must be tables keyed by step id ([steps.<id>])")
    known = {s.id for s in checklist.steps}
    for step_id, entry in texts.items():
        if step_id not in known:
            raise ChecklistDataError(f"{where}: step '{step_id}' is not in the English checklist")
        if not isinstance(entry, dict) or set(entry) - set(_TEXT_KEYS):
            raise ChecklistDataError(
                f"{where}: step '{step_id}' may hold only {', '.join(_TEXT_KEYS)}"
            )
    steps = []
    for step in checklist.steps:
        entry = texts.get(step.id, {})
        steps.append(
            ChecklistStep(
                id=step.id,
                text=_text(entry, "text", where, required=False) or step.text,
                why=_text(entry, "why", where, required=False) or step.why,
                how=_text(entry, "how", where, required=False) or step.how,
                check=step.check,
                cause=_text(entry, "cause", where, required=False) or step.cause,
                action=_text(entry, "action", where, required=False) or step.action,
            )
        )
    return Checklist(
        id=checklist.id,
        title=_text(data, "title", where, required=False) or checklist.title,
        summary=_text(data, "summary", where, required=False) or checklist.summary,
        steps=tuple(steps),
        lang=lang,
        verdict=_templates(data, "verdict", where) or checklist.verdict,
        action=_text(data, "action", where, required=False) or checklist.action,
    )


def checklist_for(alert: Alert, lang: str = BASE_LANG, *, root: Root | None = None) -> Checklist:
    """The checklist that explains ``alert``: by ``alert.checklist``, else by ``alert.id``.

    Never raises: an id without a file gets the generic checklist, and a damaged file
    gets the generic checklist with ``error`` saying which file and what is wrong.
    """
    error: str | None = None
    for wanted in (alert.checklist, alert.id, GENERIC_ID):
        if not wanted:
            continue
        try:
            found = load_checklist(wanted, lang, root=root)
        except ChecklistDataError as exc:
            error = error or str(exc)
            continue
        if found is not None:
            return found if error is None else _with_error(found, error)
    return _builtin_generic(error)


def _with_error(checklist: Checklist, error: str) -> Checklist:
    return Checklist(
        checklist.id,
        checklist.title,
        checklist.summary,
        checklist.steps,
        checklist.lang,
        error,
        checklist.verdict,
        checklist.action,
    )


_BUILTIN_STEPS = (
    ("read_evidence", "Read the alert's evidence and the step it names.", "The numbers say what tripped the rule and since when."),
    ("plot_around", "Look at loss, grad norm and learning rate around that step.", "Most training problems show first in these three curves."),
    ("reproduce_small", "Reproduce on a small batch or a short run.", "A fast reproduction makes every later check cheap."),
)  # fmt: skip


def _builtin_generic(error: str | None) -> Checklist:
    """Last resort when even the generic data file is missing or damaged."""
    steps = tuple(ChecklistStep(i, text, why) for i, text, why in _BUILTIN_STEPS)
    title, summary = (
        "Investigate the alert",
        "No specific checklist could be loaded for this alert.",
    )
    return Checklist(GENERIC_ID, title, summary, steps, BASE_LANG, error)
