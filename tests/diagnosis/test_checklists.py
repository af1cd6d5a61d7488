"""Checklist data files and their evaluation against facts.

The data files are the product here: every alert id must have an English checklist,
every check must name a fact the rules engine provides and an operator evaluate()
knows, and a damaged file must produce a one-line error, not a traceback.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.diagnosis import checklists as cl
from dltop.tui.core.diagnosis.checklist_eval import evaluate
from dltop.tui.core.diagnosis.checklists import (
    OPS,
    Checklist,
    ChecklistDataError,
    ChecklistStep,
    checklist_for,
    data_root,
    load_checklist,
)
from dltop.tui.core.rules.alerts import ALERT_IDS, Alert
from dltop.tui.core.rules.facts import FACT_NAMES, Fact

DATA = Path(str(data_root()))
EN = DATA / "checklists" / "en"
ZH = DATA / "checklists" / "zh"
EN_IDS = sorted(p.stem for p in EN.glob("*.toml"))
ZH_IDS = sorted(p.stem for p in ZH.glob("*.toml"))


@pytest.fixture(autouse=True)
def _fresh_cache():
    cl.clear_cache()
    yield
    cl.clear_cache()


def _alert(alert_id: str = "nan_loss", checklist: str | None = None, **evidence) -> Alert:
    return Alert(alert_id, "critical", 120, "t", "m", evidence=evidence, checklist=checklist)


def _step(check: dict) -> Checklist:
    return Checklist("x", "t", "s", (ChecklistStep("s1", "text", "why", None, check),))


def _mark(check: dict, facts: dict[str, Fact], **evidence):
    (checked,) = evaluate(_step(check), facts, _alert(**evidence))
    return checked.mark, checked.evidence


# ------------------------------------------------------------------ shipped data


def test_data_is_found_through_the_installed_package():
    assert (EN / "nan_loss.toml").is_file()
    assert len(EN_IDS) >= len(ALERT_IDS)


@pytest.mark.parametrize("alert_id", ALERT_IDS)
def test_every_alert_id_has_an_english_checklist(alert_id):
    checklist = load_checklist(alert_id)
    assert checklist is not None, f"no checklists/en/{alert_id}.toml"
    assert checklist.id == alert_id and checklist.lang == "en"


@pytest.mark.parametrize("checklist_id", EN_IDS)
def test_every_checklist_parses_with_ordered_explained_steps(checklist_id):
    checklist = load_checklist(checklist_id)
    assert checklist is not None
    assert checklist.title and checklist.summary
    assert len(checklist.steps) >= 3
    ids = [s.id for s in checklist.steps]
    assert len(ids) == len(set(ids))
    raw = tomllib.loads((EN / f"{checklist_id}.toml").read_text("utf-8"))
    assert ids == [s["id"] for s in raw["steps"]], "steps must keep the file's order"
    for step in checklist.steps:
        assert len(step.text) > 10 and len(step.why) > 10, step.id
        assert step.text != step.why


@pytest.mark.parametrize("checklist_id", EN_IDS)
def test_every_check_names_a_known_fact_and_a_valid_operator(checklist_id):
    # Read the raw file, so this holds even if the loader's own validation changes.
    raw = tomllib.loads((EN / f"{checklist_id}.toml").read_text("utf-8"))
    for step in raw["steps"]:
        check = step.get("check")
        if check is None:
            continue
        assert ("fact" in check) != ("evidence" in check), step["id"]
        if "fact" in check:
            assert check["fact"] in FACT_NAMES, f"{checklist_id}/{step['id']}: {check['fact']}"
        if "ref" in check:
            assert check["ref"] in FACT_NAMES, f"{checklist_id}/{step['id']}: {check['ref']}"
        assert check["op"] in OPS, f"{checklist_id}/{step['id']}: {check['op']}"


def test_checklists_carry_evidence_checks_where_the_log_can_answer():
    for alert_id in (
        "nan_loss",
        "nan_grad",
        "grad_explosion",
        "data_bound",
        "memory_growth",
        "plateau",
        "oom",
    ):
        checklist = load_checklist(alert_id)
        assert checklist is not None
        assert any(s.check for s in checklist.steps), alert_id


def test_non_convergence_follows_the_guides_order():
    # learning rate -> data -> init -> gradients
    ids = [s.id for s in load_checklist("plateau").steps]
    assert ids.index("lr_tiny") < ids.index("data_normalised") < ids.index("gradients_flow")


# --------------------------------------------------------------------- evaluate


def test_high_lr_at_the_nan_is_marked_yes_from_the_alerts_own_lr():
    # the run's first non-finite value (an AMP overflow at step 3, lr 0.5) is not this NaN
    facts = {"lr_at_first_nonfinite": Fact("lr_at_first_nonfinite", 0.5, 3, "lr = 0.5 at step 3")}
    checked = evaluate(load_checklist("nan_loss"), facts, _alert(lr=3.0))
    lr = next(c for c in checked if c.step.id == "lr_high")
    assert lr.mark == "yes" and lr.evidence == "lr = 3 at step 120"
    assert all(c.mark is None for c in checked if c.step.id != "lr_high")
    assert (
        lr.line()
        == "Was the learning rate high when the loss went non-finite? lr = 3 at step 120 — yes"
    )
    open_step = next(c for c in checked if c.step.id == "data_finite")
    assert open_step.line() == open_step.step.text


def test_operators_mark_yes_and_no():
    fact = {"lr_last": Fact("lr_last", 1e-4, 7)}
    assert _mark({"fact": "lr_last", "op": ">", "value": 0.01}, fact)[0] == "no"
    assert _mark({"fact": "lr_last", "op": "<", "value": 0.01}, fact)[0] == "yes"
    assert _mark({"fact": "lr_last", "op": "<=", "value": 1e-4}, fact)[0] == "yes"
    assert _mark({"fact": "lr_last", "op": ">=", "value": 1e-3}, fact)[0] == "no"
    assert _mark({"fact": "lr_last", "op": "==", "value": 1e-4}, fact)[0] == "yes"
    assert _mark({"fact": "lr_last", "op": "!=", "value": 1e-4}, fact)[0] == "no"
    dev = {"device": Fact("device", "cuda")}
    assert _mark({"fact": "device", "op": "==", "value": "cuda"}, dev)[0] == "yes"
    assert (
        _mark({"fact": "device", "op": ">", "value": "cpu"}, dev)[0] is None
    )  # no ordering of text


def test_unknown_facts_leave_the_step_for_the_user():
    check = {"fact": "data_wait_share", "op": ">=", "value": 0.2}
    assert _mark(check, {}) == (None, None)
    assert _mark(check, {"data_wait_share": Fact("data_wait_share", None)}) == (None, None)
    assert _mark(check, {"data_wait_share": Fact("data_wait_share", math.nan, 3)})[0] is None
    assert _mark(check, {"data_wait_share": Fact("data_wait_share", "n/a", 3)})[0] is None


def test_percent_and_bytes_formats_in_the_evidence():
    mark, said = _mark(
        {"fact": "data_wait_share", "op": ">=", "value": 0.2, "format": "percent"},
        {"data_wait_share": Fact("data_wait_share", 0.64, 300)},
    )
    assert mark == "yes" and said == "data_wait_share = 64 % at step 300"
    mark, said = _mark(
        {"fact": "mem_growth", "op": ">=", "value": 268435456, "format": "bytes"},
        {"mem_growth": Fact("mem_growth", 3 * 2**30)},
    )
    assert mark == "yes" and said == "mem_growth = 3 GiB"


def test_check_against_another_fact():
    facts = {
        "grad_norm_max": Fact("grad_norm_max", 2.1e5, 118),
        "grad_norm_median": Fact("grad_norm_median", 1.5),
    }
    check = {"fact": "grad_norm_max", "op": ">=", "ref": "grad_norm_median", "scale": 10}
    mark, said = _mark(check, facts)
    assert mark == "yes"
    assert "2.1e+05" in said and "10 × grad_norm_median = 15" in said
    facts["grad_norm_median"] = Fact("grad_norm_median", 1e5)
    assert _mark(check, facts)[0] == "no"
    del facts["grad_norm_median"]
    assert _mark(check, facts) == (None, None)


def test_check_on_the_alerts_evidence():
    check = {"evidence": "requested_bytes", "op": ">=", "value": 2**30, "format": "bytes"}
    assert _mark(check, {}, requested_bytes=2 * 2**30) == (
        "yes",
        "requested_bytes = 2 GiB at step 120",
    )
    assert _mark(check, {}, requested_bytes=20 * 2**20)[0] == "no"
    assert _mark(check, {}) == (None, None)
    ratio = {"evidence": "grad_norm_before_ratio", "op": ">=", "value": 10, "format": "ratio"}
    assert _mark(ratio, {}, grad_norm_before_ratio=212.0) == (
        "yes",
        "grad_norm_before_ratio = 212× at step 120",
    )


def test_is_true_and_is_false():
    facts = {"layers_without_grad": Fact("layers_without_grad", ["fc2.weight"], 50)}
    assert _mark({"fact": "layers_without_grad", "op": "is_true"}, facts)[0] == "yes"
    assert _mark({"fact": "layers_without_grad", "op": "is_false"}, facts)[0] == "no"
    facts = {"layers_without_grad": Fact("layers_without_grad", [], 50)}
    assert _mark({"fact": "layers_without_grad", "op": "is_true"}, facts)[0] == "no"


def test_evaluate_on_a_shipped_checklist_uses_the_facts_the_engine_provides():
    facts = {name: Fact(name, None) for name in FACT_NAMES}
    facts["data_wait_share"] = Fact("data_wait_share", 0.64, 200)
    facts["gpu_util_median"] = Fact("gpu_util_median", 85.0, 200)
    checked = {
        c.step.id: c for c in evaluate(load_checklist("data_bound"), facts, _alert("data_bound"))
    }
    assert checked["wait_share"].mark == "yes" and "64 %" in checked["wait_share"].evidence
    assert checked["gpu_idle"].mark == "no"
    assert checked["workers"].mark is None and checked["uneven_steps"].mark is None


# ------------------------------------------------------------------ checklist_for


def test_checklist_for_prefers_the_alerts_checklist_then_its_id():
    assert checklist_for(_alert("crash", checklist="crash_shape")).id == "crash_shape"
    assert checklist_for(_alert("plateau")).id == "plateau"
    assert checklist_for(_alert("crash", checklist="no_such_pattern")).id == "crash"


def test_an_unknown_alert_gets_the_generic_checklist():
    checklist = checklist_for(_alert("some_future_alert"))
    assert checklist.id == "generic" and checklist.error is None and len(checklist.steps) >= 3


def test_ids_cannot_walk_the_filesystem():
    assert load_checklist("../crash_patterns") is None
    assert load_checklist("en/nan_loss") is None
    assert checklist_for(_alert("../../x")).id == "generic"


def test_loaded_checklists_are_cached():
    assert load_checklist("oom") is load_checklist("oom")


# ------------------------------------------------------------------ damaged data


def _write(root: Path, lang: str, name: str, text: str) -> None:
    folder = root / "checklists" / lang
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(text, encoding="utf-8")


GOOD = """
title = "T"
summary = "S"
[[steps]]
id = "a"
text = "check a"
why = "because a"
check = { fact = "lr_last", op = ">", value = 0.1 }
[[steps]]
id = "b"
text = "check b"
why = "because b"
"""


def test_a_garbled_file_gives_a_one_line_error_naming_it(tmp_path):
    _write(tmp_path, "en", "broken", 'title = "unterminated\n[[steps]]\n')
    with pytest.raises(ChecklistDataError) as info:
        load_checklist("broken", root=tmp_path)
    message = str(info.value)
    assert "checklists/en/broken.toml" in message and "not valid TOML" in message
    assert "\n" not in message and info.value.__cause__ is None


def test_checklist_for_survives_a_damaged_file_and_reports_it(tmp_path):
    _write(tmp_path, "en", "nan_loss", "\x00\xff garbage = = =")
    checklist = checklist_for(_alert("nan_loss"), root=tmp_path)
    assert checklist.id == "generic" and len(checklist.steps) >= 3
    assert checklist.error and "nan_loss.toml" in checklist.error
    _write(tmp_path, "en", "generic", GOOD)
    cl.clear_cache()  # files changed under a root already read
    checklist = checklist_for(_alert("nan_loss"), root=tmp_path)
    assert checklist.title == "T" and "nan_loss.toml" in checklist.error


def test_a_missing_file_is_none(tmp_path):
    assert load_checklist("nan_loss", root=tmp_path) is None
    (tmp_path / "checklists" / "en").mkdir(parents=True)
    assert load_checklist("plateau", root=tmp_path) is None  # a folder without the file


@pytest.mark.parametrize(
    ("bad", "complaint"),
    [
        ('{ fact = "no_such_fact", op = ">", value = 1 }', "unknown fact"),
        ('{ fact = "lr_last", op = "=~", value = 1 }', "operator"),
        ('{ fact = "lr_last", op = "__import__", value = 1 }', "operator"),
        ('{ fact = "lr_last", op = ">" }', "needs exactly one of 'value', 'ref'"),
        ('{ fact = "lr_last", op = "is_true", value = 1 }', "takes no value"),
        ('{ fact = "lr_last", evidence = "ratio", op = ">", value = 1 }', "exactly one of"),
        ('{ fact = "lr_last", op = ">", ref = "nope" }', "unknown reference fact"),
        ('{ fact = "lr_last", op = ">", value = 1, format = "hex" }', "format"),
        ('{ fact = "lr_last", op = ">", value = 1, eval = "1" }', "unknown check keys"),
    ],
)
def test_invalid_checks_are_rejected_at_load(tmp_path, bad, complaint):
    _write(tmp_path, "en", "x", GOOD.replace('{ fact = "lr_last", op = ">", value = 0.1 }', bad))
    with pytest.raises(ChecklistDataError, match=complaint):
        load_checklist("x", root=tmp_path)


def test_structural_mistakes_are_rejected(tmp_path):
    _write(tmp_path, "en", "nosteps", 'title = "T"\nsummary = "S"\n')
    _write(tmp_path, "en", "dupe", GOOD.replace('id = "b"', 'id = "a"'))
    _write(tmp_path, "en", "nowhy", GOOD.replace('why = "because b"', ""))
    for name, complaint in (("nosteps", "steps"), ("dupe", "unique"), ("nowhy", "'why'")):
        with pytest.raises(ChecklistDataError, match=complaint):
            load_checklist(name, root=tmp_path)


# --------------------------------------------------------------- translations


def test_a_translation_overlays_text_and_falls_back_to_english(tmp_path):
    _write(tmp_path, "en", "x", GOOD)
    _write(tmp_path, "zh", "x", 'title = "标题"\n[steps.a]\ntext = "检查 a"\n')
    zh = load_checklist("x", "zh", root=tmp_path)
    en = load_checklist("x", root=tmp_path)
    assert zh.lang == "zh" and zh.title == "标题" and zh.summary == "S"
    assert zh.steps[0].text == "检查 a" and zh.steps[0].why == "because a"
    assert zh.steps[1] == en.steps[1]
    assert zh.steps[0].check == en.steps[0].check
    # a language without a file, or an unknown language, is English
    assert load_checklist("x", "fr", root=tmp_path) == en


def test_a_translation_may_not_carry_structure(tmp_path):
    _write(tmp_path, "en", "x", GOOD)
    _write(tmp_path, "zh", "x", '[steps.a]\ncheck = { fact = "lr_last", op = ">", value = 1 }\n')
    with pytest.raises(ChecklistDataError, match="may hold only"):
        load_checklist("x", "zh", root=tmp_path)
    _write(tmp_path, "zh", "x", '[steps.zzz]\ntext = "?"\n')
    with pytest.raises(ChecklistDataError, match="not in the English checklist"):
        load_checklist("x", "zh", root=tmp_path)


def test_the_chinese_set_matches_the_english_structure():
    assert ZH_IDS, "no Chinese checklists shipped"
    assert set(ZH_IDS) <= set(EN_IDS)
    for checklist_id in ZH_IDS:
        raw = tomllib.loads((ZH / f"{checklist_id}.toml").read_text("utf-8"))
        en = load_checklist(checklist_id)
        assert set(raw.get("steps", {})) == {s.id for s in en.steps}, checklist_id
        zh = load_checklist(checklist_id, "zh")
        assert zh.lang == "zh" and zh.title != en.title
        assert [s.check for s in zh.steps] == [s.check for s in en.steps]
        assert all(z.text != e.text for z, e in zip(zh.steps, en.steps, strict=True)), checklist_id


def test_every_alert_id_has_a_chinese_checklist():
    missing = [a for a in ALERT_IDS if a not in ZH_IDS]
    assert not missing, missing


SHELL_COMMAND = re.compile(
    r"^([A-Z_]+=\S*\s)*(nvidia-smi|dmesg|df|free|cat|py-spy|python|torchrun|docker|tmux|sacct)\b|^[A-Z_]+=\S+"
)


@pytest.mark.parametrize("checklist_id", EN_IDS)
def test_every_code_line_is_python_or_a_shell_command(checklist_id):
    for step in load_checklist(checklist_id).steps:
        if step.how is None:
            continue
        try:
            compile(step.how, f"{checklist_id}/{step.id}", "exec")
        except SyntaxError:
            assert SHELL_COMMAND.match(step.how), f"{checklist_id}/{step.id}: {step.how!r}"


def test_stall_checklist_judges_the_stall_itself_not_the_end_of_the_log() -> None:
    """After a hang that resumed, the end-of-log gap is short; the step must still say yes
    from the alert's own evidence (the gap it saw against its threshold)."""
    from dataclasses import replace

    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for
    from dltop.tui.core.rules.alerts import Alert
    from dltop.tui.core.rules.facts import Fact

    alert = Alert(
        "stall", "critical", 120, "Training stalled", "no step for 375 s",
        evidence={"seconds_without_step": 375.0, "warn_s": 60.0, "critical_s": 300.0},
    )  # fmt: skip
    facts = {"seconds_since_last_step": Fact("seconds_since_last_step", 0.1)}
    first = evaluate(checklist_for(alert), facts, alert)[0]
    assert first.step.id == "how_long"
    assert first.mark == "yes" and "375" in (first.evidence or "")
    # a stall alert always has its gap past warn_s; the step can still answer "no": a
    # warning-level gap short of the critical line
    shorter = replace(alert, evidence={**alert.evidence, "seconds_without_step": 75.0})
    assert evaluate(checklist_for(shorter), facts, shorter)[0].mark == "no"


@pytest.mark.parametrize("checklist_id", EN_IDS)
def test_high_lr_steps_read_the_lr_at_the_alert_not_at_the_end_of_the_log(checklist_id):
    """The question "was the lr high?" is about the moment the problem happened; by the end
    of the log a schedule may have decayed it 1000x. The alerts record their lr as evidence
    ("lr"); "at some point" questions may use lr_max."""
    for step in load_checklist(checklist_id).steps:
        if step.id == "lr_high" and step.check is not None:
            assert step.check.get("fact") != "lr_last", f"{checklist_id}: {step.check}"


# ------------------------------------------------------------------ the probe's set-up answers


def _marks(records: list[dict[str, Any]], alert_id: str) -> dict[str, str | None]:
    """Each step of the first ``alert_id`` alert's checklist: its automatic mark."""
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for
    from dltop.tui.core.rules import RuleEngine

    eng = RuleEngine()
    eng.feed_many(records)
    eng.finish()
    (a,) = [x for x in eng.alerts() if x.id == alert_id][:1]
    return {c.step.id: c.mark for c in evaluate(checklist_for(a), eng.facts(), a)}


def _config(**sections: Any) -> dict[str, Any]:
    return {"kind": "event", "type": "config", "t": 1.0, **sections}


def test_the_probes_set_up_answers_what_was_a_question_mark() -> None:
    """ "Does the DataLoader use workers?" was "?" although probe.loader() wrapped it; the
    batch size that grew 1024 -> 8192 before an OOM was in the log and unused."""
    from rulekit import Run

    loader = {"class": "DataLoader", "num_workers": 0, "pin_memory": False, "batch_size": 32}
    slow = list(Run(share_at=lambda i: 0.5).records())
    slow.insert(1, _config(loader=loader, amp={"dtype": None, "scaler": False}))
    marks = _marks(slow, "data_bound")
    assert marks["workers"] == "yes" and marks["pin_memory"] == "yes"

    recs: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "t": 0.0, "pid": 1}]
    for i in range(40):
        bs = 1024 * 2 ** (i // 10)  # 1024 -> 8192
        recs.append(
            {"kind": "step", "step": i, "t": float(i), "loss": 1.0 / (i + 1), "batch_size": bs}
        )
    recs.append({"kind": "event", "type": "oom", "exc_type": "torch.OutOfMemoryError",
                 "message": "CUDA out of memory. Tried to allocate 2.00 GiB", "step": 40, "t": 41.0})  # fmt: skip
    marks = _marks(recs, "oom")
    assert marks["batch_grew"] == "yes"

    nan = list(Run(loss_at=lambda i, x: math.nan if i >= 500 else x).records())
    nan.insert(1, _config(amp={"dtype": None, "scaler": False}))
    assert _marks(nan, "nan_loss")["mixed_precision"] == "no"
