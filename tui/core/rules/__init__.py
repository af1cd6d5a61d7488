"""Incremental diagnosis: ``RuleEngine`` turns records into alerts and facts (the run's
status is judged from them one wing up, ``diagnosis.status.run_state``).

One module per rule family (numeric, spikes, gradients, plateau, progress, overfitting,
data_bound, memory, stall, crashes, and the crash catalogue they are named from:
``crashcatalogue``, ``crashdiag``);
thresholds in :class:`Config` (defaults, TOML file, ``--set`` overrides), documented with
their reasoning in ``docs/alerts.md``.
"""

from .config import DEFAULTS, Config, ConfigError, parse_override
from .engine import RuleEngine

__all__ = ["DEFAULTS", "Config", "ConfigError", "RuleEngine", "parse_override"]
