"""Incremental diagnosis: ``RuleEngine`` turns records into alerts, facts and a run status.

One module per rule family (numeric, spikes, gradients, plateau, progress, overfitting,
data_bound, memory, stall, crashes);
thresholds in :class:`Config` (defaults, TOML file, ``--set`` overrides), documented with
their reasoning in ``docs/alerts.md``.
"""

from .config import DEFAULTS, Config, ConfigError, parse_override
from .engine import RuleEngine

__all__ = ["DEFAULTS", "Config", "ConfigError", "RuleEngine", "parse_override"]
