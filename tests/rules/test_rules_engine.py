"""The engine as a whole: determinism, facts, configuration, robustness to odd records."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.rules import DEFAULTS, Config, ConfigError, RuleEngine, parse_override
from dltop.tui.core.rules.alerts import ALERT_IDS
from dltop.tui.core.rules.facts import FACT_NAMES
from rulekit import Run, alerts_of, run_engine


def faulty() -> Run:
    """A run that trips several rules: spike, explosion, data wait, stall, NaN at the end."""

    def loss(i: int, x: float) -> float:
        return math.nan if i >= 1400 else x * 30 if i == 500 else x

    return Run(
        steps=1500,
        loss_at=loss,
        gn_at=lambda i, g: g * 80 if i == 700 else g,
        share_at=lambda i: 0.4 if 900 <= i < 1100 else 0.02,
        pause_at={1200: 100.0},
        eval_every=100,
    )


def test_same_alerts_fed_in_one_batch_or_record_by_record() -> None:
    records = list(faulty().records())
    batch = RuleEngine()
    batch.feed_many(records)
    one = RuleEngine()
    for rec in records:
        one.feed(rec)
        (
            one.alerts(),
            one.facts(),
            run_state(one, now=rec.get("t")),
        )  # a viewer polling must change nothing
    batch.finish()
    one.finish()
    got = [a.to_json() for a in one.alerts()]
    assert got == [a.to_json() for a in batch.alerts()]
    assert {a["id"] for a in got} >= {
        "loss_spike",
        "grad_explosion",
        "data_bound",
        "stall",
        "nan_loss",
    }


def test_facts_cover_the_whole_vocabulary() -> None:
    facts = run_engine(faulty()).facts()
    assert set(facts) == set(FACT_NAMES)
    assert facts["steps"].value == 1500
    assert facts["first_nonfinite_step"].value == 1400
    assert facts["evals"].value == 15
    assert facts["device"].value == "cuda"
    empty = RuleEngine().facts()
    assert set(empty) == set(FACT_NAMES) and empty["loss_last"].value is None


def test_every_alert_id_has_a_config_section() -> None:
    assert set(ALERT_IDS) - set(DEFAULTS) == {"straggler"}  # waits for multi-rank support


def test_config_file_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "alerts.toml"
    f.write_text("[data_bound]\nwarn = 0.3\n\n[stall]\nfloor_s = 5\n")
    cfg = Config.load(str(f), {"data_bound.critical": "0.6", "plateau.enabled": "false"})
    assert cfg.section("data_bound")["warn"] == 0.3 and cfg.section("data_bound")["critical"] == 0.6
    assert cfg.section("stall")["floor_s"] == 5.0 and isinstance(
        cfg.section("stall")["floor_s"], float
    )
    assert cfg.enabled("plateau") is False
    assert (
        Config.load(None, dict([parse_override("loss_spike.window=200")])).section("loss_spike")[
            "window"
        ]
        == 200
    )
    again = tmp_path / "dump.toml"
    again.write_text(cfg.to_toml())
    assert Config.load(str(again)).values == cfg.values


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"data_bound.wran": "0.1"}, "unknown threshold 'data_bound.wran'"),
        ({"databound.warn": "0.1"}, "unknown alert section 'databound'"),
        ({"data_bound.warn": "lots"}, "cannot read value"),
        ({"loss_spike.window": "1.5"}, "must be an integer"),
        ({"plateau.enabled": "1"}, "must be true or false"),
    ],
)
def test_config_errors_are_one_clear_line(overrides: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(None, overrides)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_bad_config_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("[stall\nfloor_s = 5")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Config.load(str(f))
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError):
        parse_override("data_bound.warn")


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes("# seuil modifié\n[data_bound]\nwarn = 0.3\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="is not UTF-8 text") as info:
        Config.load(str(f))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[data_bound]\nwarn = "0.15"\n', "data_bound.warn must be a number, got the text '0.15'"),
        ('[loss_spike]\nwindow = "200"\n', "loss_spike.window must be an integer"),
        ('[plateau]\nenabled = "false"\n', "plateau.enabled must be true or false"),
    ],
)
def test_a_quoted_number_in_a_config_file_is_rejected(
    tmp_path: Path, text: str, needle: str
) -> None:
    f = tmp_path / "quoted.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        Config.load(str(f))
    assert needle in str(info.value) and str(f) in str(info.value)
    assert "without quotes" in str(info.value)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"data_bound.warn": "nan"}, "must be a finite number"),  # NaN: every compare false
        ({"data_bound.warn": "1e400"}, "must be a finite number"),
        ({"loss_spike.window": "-5"}, "it must be 0 or more"),
    ],
)
def test_a_threshold_no_rule_can_use_is_refused(override: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Config.load(None, override)
    cfg = Config.load(None, {"oscillation.autocorr": "-0.7"})  # a negative float may be meant
    assert cfg.section("oscillation")["autocorr"] == -0.7


def test_set_flags_are_still_parsed_from_text() -> None:
    cfg = Config.load(None, {"data_bound.warn": "0.15", "plateau.enabled": "false"})
    assert cfg.section("data_bound")["warn"] == 0.15 and cfg.enabled("plateau") is False
    with pytest.raises(ConfigError, match="without quotes"):
        Config.load(None, {"data_bound.warn": '"0.15"'})  # --set data_bound.warn='"0.15"'


def test_a_disabled_rule_stays_silent() -> None:
    run = Run(loss_at=lambda i, x: math.nan if i >= 300 else x)
    assert alerts_of(run_engine(run, {"nan_loss.enabled": "false"}), "nan_loss") == []


@pytest.mark.parametrize(
    "section",
    ["data_bound", "divergence", "memory_growth", "metric_mismatch", "overfitting", "plateau",
     "oscillation", "loss_spike", "grad_explosion", "stall"],
)  # fmt: skip
def test_each_section_turns_off_its_own_rule_only(section: str) -> None:
    """``enabled = false`` in a section reaches exactly the rule that reads it."""
    from dltop.tui.core.rules.base import Rule

    eng = RuleEngine(Config({section: {"enabled": False}}))
    rules = [r for r in vars(eng).values() if isinstance(r, Rule) and hasattr(r, "on")]
    off = [type(r).__name__ for r in rules if not r.on]
    assert len(off) == 1 and len(rules) >= 10, (off, len(rules))
    assert all(
        r.on for r in vars(RuleEngine()).values() if isinstance(r, Rule) and hasattr(r, "on")
    )


def test_odd_records_never_raise() -> None:
    eng = RuleEngine()
    odd = [
        {"kind": "step"},
        {"kind": "step", "step": "7", "loss": "NaN", "grad_norm": [1], "lr": None, "t": "soon"},
        {
            "kind": "step",
            "step": 3,
            "loss": True,
            "data_time": "x",
            "step_time": 0,
            "mem_allocated": "lots",
        },
        {"kind": "layers", "names": "x"},
        {
            "kind": "layers",
            "names": ["a.weight", "b.weight"],
            "grad_norm": [None, "NaN"],
            "zero_frac": [1],
        },
        {"kind": "eval", "loss": "Infinity"},
        {"kind": "event", "type": "phase"},
        {"kind": "event", "type": "exception"},
        {"kind": "event", "type": "exit", "status": 3},
        {"kind": "sys", "t": 5.0, "rss": "big", "gpus": [None]},
        {"kind": "heartbeat"},
        {"kind": "meta", "devices": "gpu"},
        {"kind": "future_kind", "t": math.inf},
    ]
    for rec in odd * 30:
        eng.feed(rec)
    eng.finish()
    assert eng.steps == 90
    eng.facts()
    run_state(eng, now=1e10, pid_alive=True)


def test_an_episode_that_returns_soon_is_the_same_alert() -> None:
    def loss(i: int, x: float) -> float:
        return x * 40 if i in (500, 620, 1500) else x

    spikes = alerts_of(run_engine(Run(steps=2000, loss_at=loss)), "loss_spike")
    assert [a.step for a in spikes] == [500, 1500]
    assert spikes[0].last_step == 620 and spikes[0].evidence["spikes"] == 2
