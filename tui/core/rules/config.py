"""Thresholds of the alert rules: defaults, a TOML file, and ``--set KEY=VALUE`` overrides.

The defaults live here, in one table, with the reasoning in ``docs/alerts.md`` (the calibration behind it: ``docs/dev/alerts.md``). A user
file or flag may only change keys that exist, with a value of the same type: a typo in
a threshold name must fail loudly, since a silently ignored ``data_bound.wran`` would
leave the user believing they had tuned the rule.
"""

from __future__ import annotations

import copy
import math
import tomllib
from typing import Any

# section -> key -> default. Sections are alert ids, plus "general" (shared warm-up and
# LR-schedule handling). Every rule also accepts "enabled".
DEFAULTS: dict[str, dict[str, Any]] = {
    "general": {
        "block_steps": 10,  # windowed rules run every this many steps (or each second)
        "warmup_steps": 50,  # relative rules (spike, explosion) stay quiet this long
        "lr_jump_ratio": 2.0,  # an lr change by this factor between steps is a schedule jump
        "lr_grace_steps": 30,  # after a jump, spike/explosion warnings wait this long
        "rearm_steps": 200,  # a cleared alert comes back as a new episode after this many steps
        "progress_block": 25,  # steps per block for the "is the loss still improving?" gate
        "progress_min_gain": 0.01,  # < 1 % better over two blocks = not improving
        "progress_total_gain": 0.1,  # ... and < 10 % better than at the start
    },
    "nan_loss": {"enabled": True, "clear_after": 20},
    # a finite loss with non-finite grad norms is what AMP loss scaling does on purpose (it
    # skips the step and halves the scale, several steps in a row at start-up): critical
    # only when it persists this many steps in a row, or the loss goes non-finite too
    "nan_grad": {"enabled": True, "persist": 20, "clear_after": 20},
    # NaN/Inf in an eval record or any other logged metric (a step's extras, the lr)
    "nan_metric": {"enabled": True},
    # the loss at exactly 0, or at one value within rel_tol, on at least min_records
    # losses and for more steps than the run took to get there (rules/collapse.py)
    "loss_collapsed": {"enabled": True, "min_records": 8, "rel_tol": 1e-4, "floor_ratio": 1e-3},
    "loss_spike": {
        "enabled": True,
        "ratio": 10.0,
        "window": 100,
        "over_max": 1.5,
        "log_sigmas": 5.0,
        "min_samples": 30,
    },
    "grad_explosion": {
        "enabled": True,
        "critical_ratio": 10.0,
        "warn_ratio": 5.0,
        "warn_k": 3,
        "warn_n": 5,
        "warn_p90_ratio": 2.0,
        "warn_log_sigmas": 3.0,
        "over_max": 1.5,
        "log_sigmas": 5.0,
        "early_ratio": 100.0,
        "window": 100,
        "min_samples": 30,
        # a one-step jump is critical only against a full baseline (Megatron-Core calibrates
        # on 100 samples); before that it is a warning (it still turns critical later)
        "critical_after": 100,
        # over the critical line on this many of the last warn_n steps: critical (one step
        # over it is a warning: a spike the run usually absorbs)
        "critical_k": 2,
    },
    "divergence": {
        "enabled": True,
        "span": 10,
        "ratio": 2.0,
        "critical_ratio": 5.0,
        "noise_sigmas": 6.0,
        "persist": 10,
        "progress_lost": 0.1,
        "warmup_steps": 20,
        # losses in the window before its median may set the baseline (at most the window)
        "baseline_samples": 20,
        # a blow-up in the first steps: two finite losses in a row at early_ratio x the
        # first one, within the first early_steps finite losses (critical, on its step)
        "early_steps": 50,
        "early_ratio": 5.0,
    },
    "vanishing_grad": {"enabled": True, "ratio": 1e-3, "first_norm": 1e-4, "checks": 2},
    "dead_units": {
        "enabled": True,
        "zero_frac": 0.7,
        "checks": 2,
        "no_grad_checks": 3,
        # the global grad norm exactly 0 on this many records in a row spanning this many
        # steps: critical (a few zeros among normal norms are some trainers' logging quirk)
        "zero_grad_records": 10,
        "zero_grad_steps": 50,
    },
    "plateau": {
        "enabled": True,
        "window": 50,
        "window_frac": 0.02,
        "windows": 3,
        "min_improvement": 0.01,
        "max_rise": 0.1,
        "stuck_progress": 0.05,
    },
    "oscillation": {
        "enabled": True,
        "block": 5,
        "blocks": 40,
        "min_blocks": 10,
        "amplitude": 0.3,
        "noise_factor": 4.0,
        "min_swings": 6,
        "autocorr": -0.6,
        "checks": 2,
    },
    # large_rise: every evaluation since the best this far above it is a warning even with
    # few evaluations (beyond noise_factor x the measured noise when it can be measured)
    "overfitting": {
        "enabled": True,
        "patience": 3,
        "tolerance": 0.01,
        "noise_factor": 3.0,
        "large_rise": 0.1,
    },
    # the eval loss >= loss_drop below its first value over >= min_evals evaluations while no
    # eval metric of known direction ever beat its first value (rules/metric_mismatch.py)
    "metric_mismatch": {"enabled": True, "loss_drop": 0.5, "min_evals": 3},
    # two writers in one file: >= `jumps` backward steps within `window` step records
    "mixed_runs": {"enabled": True, "window": 64, "jumps": 3},
    "records_dropped": {"enabled": True},  # `dropped` events of scope "log" (rules/dropped.py)
    "data_bound": {
        "enabled": True,
        "warn": 0.10,
        "critical": 0.20,
        "window": 50,
        "min_steps": 20,
        "min_data_time": 0.005,
        "checks": 1,
    },
    "memory_growth": {
        "enabled": True,
        "min_growth_mib": 64.0,
        "limit_fraction": 0.02,
        "min_steps": 100,
        "r2": 0.8,
        "horizon_s": 600.0,
        "pullback": 0.05,
    },
    "stall": {
        "enabled": True,
        "warn_factor": 10.0,
        "critical_factor": 30.0,
        "floor_s": 60.0,
        "critical_floor_s": 300.0,
        "startup_s": 300.0,
        "silent_s": 15.0,
        # a declared phase (eval, checkpoint) pauses the watch, but only this long at least:
        # max(critical_factor x p95 step time, phase_floor_s) is a stall (a hang in eval)
        "phase_floor_s": 300.0,
    },
    "oom": {"enabled": True},
    "crash": {"enabled": True},
}


class ConfigError(ValueError):
    """A bad threshold file or flag; its message is the one line the user sees."""


class Config:
    """Rule thresholds: ``config.section("plateau")["window"]``."""

    def __init__(self, values: dict[str, dict[str, Any]] | None = None) -> None:
        self.values: dict[str, dict[str, Any]] = copy.deepcopy(DEFAULTS)
        if values:
            for section, keys in values.items():
                for key, value in keys.items():
                    self.set(f"{section}.{key}", value)

    def section(self, name: str) -> dict[str, Any]:
        return self.values[name]

    def enabled(self, name: str) -> bool:
        return bool(self.values.get(name, {}).get("enabled", True))

    def set(self, dotted: str, value: Any, *, text: bool = False) -> None:
        """Set ``section.key`` to a value of the default's type.

        ``text=True`` (a ``--set`` flag) parses a string as TOML (``0.15``, ``true``).
        Otherwise (a TOML file, a dict in code) the value must already have the right
        type: ``warn = "0.15"`` in a file is a mistake worth a clear error, not a guess.
        """
        section, _, key = dotted.partition(".")
        if section not in self.values:
            known = ", ".join(sorted(self.values))
            raise ConfigError(f"unknown alert section '{section}' (known: {known})")
        if not key or key not in self.values[section]:
            known = ", ".join(sorted(self.values[section]))
            raise ConfigError(f"unknown threshold '{dotted}' (keys of {section}: {known})")
        default = DEFAULTS[section][key]
        if text and isinstance(value, str) and not isinstance(default, str):
            value = _parse_value(dotted, value)
        self.values[section][key] = _coerce(dotted, value, default)

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
        """Defaults, then the TOML file at ``path``, then ``overrides`` ({"section.key": value}).

        Override values given as strings (``--set`` flags) are parsed as TOML; file values
        must be typed (``warn = 0.15``, not ``warn = "0.15"``).
        """
        cfg = cls()
        if path is not None:
            try:
                with open(path, "rb") as f:
                    data = tomllib.load(f)
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(f"config file {path} is not UTF-8 text: {exc.reason}") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
            for section, keys in data.items():
                if not isinstance(keys, dict):
                    raise ConfigError(
                        f"{path}: '{section}' must be a table like [{section}], not a value"
                    )
                for key, value in keys.items():
                    try:
                        cfg.set(f"{section}.{key}", value)
                    except ConfigError as exc:
                        raise ConfigError(f"{path}: {exc}") from None
        for dotted, value in (overrides or {}).items():
            cfg.set(dotted, value, text=isinstance(value, str))
        return cfg

    def to_toml(self) -> str:
        """The current thresholds as a TOML file a user can edit and pass to ``--config``."""
        lines: list[str] = []
        for section, keys in self.values.items():
            lines.append(f"[{section}]")
            for key, value in keys.items():
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
        return "\n".join(lines)


def parse_override(text: str) -> tuple[str, str]:
    """``"data_bound.warn=0.15"`` -> ``("data_bound.warn", "0.15")``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or "." not in key:
        raise ConfigError(
            f"--set expects SECTION.KEY=VALUE (e.g. data_bound.warn=0.15), got '{text}'"
        )
    return key.strip(), value.strip()


def _parse_value(dotted: str, text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"{dotted}: cannot read value '{text}'") from None


def _coerce(dotted: str, value: Any, default: Any) -> Any:
    if isinstance(value, str) and not isinstance(default, str):
        want = (
            "true or false"
            if isinstance(default, bool)
            else "an integer"
            if isinstance(default, int)
            else "a number"
        )
        raise ConfigError(
            f"{dotted} must be {want}, got the text {value!r} (write it without quotes)"
        )
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{dotted} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{dotted} must be an integer, got {value!r}")
        if value < 0:  # every integer threshold is a count: of steps, values, evaluations
            raise ConfigError(f"{dotted} is a count: it must be 0 or more, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{dotted} must be a number, got {value!r}")
        if not math.isfinite(value):  # NaN compares false with everything: a rule gone silent
            raise ConfigError(f"{dotted} must be a finite number, got {value!r}")
        return float(value)
    return value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
