"""Alerts are frozen: a change is a new version in the sink, and a version once handed out
says the same thing forever (issue 31: "an alert, once raised, is never mutated").

Why it matters: the viewer draws the alerts it pulled while the reader thread diagnoses
on, the cross-rank judgement annotates a rank's alerts, a report keeps the ones it
printed. Before, a spike's warning turned into "(absorbed)" information inside the very
object the UI was drawing.
"""

from __future__ import annotations

import dataclasses

import pytest
from dltop.tui.core.rules import RuleEngine
from dltop.tui.core.rules.alerts import Alert, AlertSink
from rulekit import Run


def _alert(**kw: object) -> Alert:
    fields: dict[str, object] = {
        "id": "loss_spike",
        "severity": "warning",
        "step": 10,
        "title": "Loss spike",
        "message": "loss 9 = 40x the median",
        "evidence": {"ratio": 40.0},
    }
    fields.update(kw)
    return Alert(**fields)  # type: ignore[arg-type]


def test_an_alert_cannot_be_changed_in_place() -> None:
    a = _alert()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.severity = "info"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.active = False  # type: ignore[misc]


def test_a_revision_is_a_new_version_in_the_same_place() -> None:
    sink = AlertSink()
    first = sink.add(_alert(id="nan_loss", step=3))
    slot = sink.add(_alert())
    old = sink.get(slot)
    new = sink.revise(slot, {"absorbed": True}, severity="info", active=False)
    assert old is not None and old.severity == "warning" and old.active
    assert "absorbed" not in old.evidence  # the evidence dict was not shared
    assert (new.severity, new.active, new.evidence) == (
        "info",
        False,
        {"ratio": 40.0, "absorbed": True},
    )
    assert [a.id for a in sink.alerts] == ["nan_loss", "loss_spike"]  # the order raised
    assert sink.alerts[1] is new
    sink.withdraw(first)
    assert sink.alerts == [new] and len(sink) == 2  # the slot stays given
    with pytest.raises(KeyError):
        sink.revise(first, severity="info")


def test_the_sink_numbers_repeats_without_touching_the_alert_it_was_given() -> None:
    sink = AlertSink()
    given = _alert()
    sink.add(given)
    again = sink.get(sink.add(given))
    assert again is not None and again.repeat == 1 and given.repeat == 0


def test_what_the_engine_handed_out_before_a_downgrade_still_says_warning() -> None:
    """A 40x spike the run absorbs: a warning on its step, information once the losses
    after it are in. The warning pulled at the spike stays a warning, active, with its
    first message; the engine's list has the new version in the same place."""
    records = list(Run(loss_at=lambda i, x: x * 40 if i == 500 else x).records())
    at = next(i for i, r in enumerate(records) if r.get("kind") == "step" and r["step"] == 500)
    eng = RuleEngine()
    eng.feed_many(records[: at + 1])
    (pulled,) = [a for a in eng.alerts() if a.id == "loss_spike"]
    said = (pulled.severity, pulled.active, pulled.title, pulled.message, dict(pulled.evidence))
    eng.feed_many(records[at + 1 :])
    eng.finish()
    (now,) = [a for a in eng.alerts() if a.id == "loss_spike"]
    assert now is not pulled
    assert (now.severity, now.active, now.title) == ("info", False, "Loss spike (absorbed)")
    assert (
        pulled.severity,
        pulled.active,
        pulled.title,
        pulled.message,
        dict(pulled.evidence),
    ) == said
    assert said[:3] == ("warning", True, "Loss spike")


def test_the_cross_rank_judgement_revises_the_judged_alert_not_the_ranks() -> None:
    """``ranks.first_failure`` words the later rank's crash as secondary: in ``dltop check``
    the engine's sink gets a new version; the version read before is untouched."""
    from dltop.tui.core.ranks.compare import Rank, first_failure

    def crashed(t: float) -> RuleEngine:
        eng = RuleEngine()
        eng.feed({"kind": "meta", "t": t - 10})
        for s in range(5):
            eng.feed({"kind": "step", "step": s, "t": t - 5 + s, "loss": 1.0})
        eng.feed(
            {"kind": "event", "type": "exception", "t": t, "exc_type": "RuntimeError",
             "message": "boom", "step": 4}
        )  # fmt: skip
        eng.finish()
        return eng

    early, late = crashed(1000.0), crashed(1001.0)
    (before,) = [a for a in late.alerts() if a.id == "crash"]
    first_failure([Rank(0, early), Rank(1, late)])
    (after,) = [a for a in late.alerts() if a.id == "crash"]
    assert after.evidence["secondary"] is True and after.evidence["first_rank"] == 0
    assert after.message.startswith("secondary: rank 0 failed first")
    assert "secondary" not in before.evidence and not before.message.startswith("secondary")
