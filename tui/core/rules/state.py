"""What the engine knows of the run as it reads it: what every rule may read.

Why a class of its own: the rules are typed against this, not against the engine, so no
rule imports the engine (nor the engine's list of rules), and the import graph has no
cycle through them (``tests/project/test_static_imports.py``). The step being judged, parsed
once (``loss``, ``gn``, ``lr``, ``t``...); the derived figures every rule reads
(``fig``); the inline thresholds; the facts kept along the way; the sink every alert goes
to. The engine (``ruleset.RuleSet``, ``engine.RuleEngine``) builds on it and adds the
rules and the routing.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ....probe.schema import Record
from .alerts import AlertSink
from .config import Config
from .figures import Figures
from .segments import Segments
from .setup import Setup
from .window import Block


class EngineState:
    """One run's state as read so far (one rank's log)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self.segments = Segments(
            self.config.section("mixed_runs")
        )  # kept across segment resets (see _new_segment)
        g = self.config.section("general")
        self.warmup_steps = int(g["warmup_steps"])
        self.lr_jump_ratio = float(g["lr_jump_ratio"])
        self.lr_grace_steps = int(g["lr_grace_steps"])
        self.progress_block = max(2, int(g["progress_block"]))
        self.progress_min_gain = float(g["progress_min_gain"])
        self.progress_total_gain = float(g["progress_total_gain"])
        self.sink = AlertSink()  # every rule reports here (kept across segments)
        self.segment_mark = 0  # alerts in sink slots before this belong to earlier segments

        # counters and identity
        self.steps = 0
        self.last_step: int | None = None
        self.meta: Record | None = None
        self.first_t: float | None = None
        self.last_t: float | None = None  # latest timestamp of any record
        self.last_step_t: float | None = None
        self.records = 0

        # the current step, parsed (valid during on_step hooks)
        self.step = 0
        self.first_step: int | None = None  # this segment's first step
        self.first_step_t: float | None = None  # ... and its time
        self.t: float | None = None
        self.loss: float | None = None
        self.loss_finite = False
        self.gn: float | None = None
        self.gn_finite = False
        self.lr: float | None = None
        self.lr_prev: float | None = None
        self.lr_jump_step: int | None = None  # step of the latest schedule jump
        self.in_grace = False  # within lr_grace_steps of a jump: spike/explosion warnings wait
        # ... and critical explosions too, unless the jump took lr to a new maximum: a
        # schedule going back to a level the run already trained at (a restart, a decay)
        # explains a burst, an lr 50x above anything seen before does not
        self.grace_critical = False
        self.warm = False  # past warmup_steps
        self.timing_ok = True  # step timings are not distorted by a phase / pause
        self.rec: Record = {}

        # phases (eval, checkpoint...) declared by the user
        # (the one record of them: the stall rule and the run status read these)
        self.phase: str | None = None  # the phase in progress
        self.phase_name: str | None = None  # the latest phase's name, kept after it ends
        self.phase_since: float | None = None  # when the latest phase began (record time)
        self.phase_ended = False

        # shared windows (sized by the spike/explosion sections), refreshed per block
        ls = self.config.section("loss_spike")
        gs = self.config.section("grad_explosion")
        self.block_size = max(1, int(g["block_steps"]))
        self.blk = Block()
        # the derived figures every rule reads (medians, maxima, spreads, the progress gate)
        self.fig = Figures(
            int(ls["window"]),
            int(gs["window"]),
            self.progress_block,
            self.progress_min_gain,
            self.progress_total_gain,
        )
        self.loss_hi = math.inf  # inline thresholds, returned by the spike rules at block ends
        self.gn_hi = math.inf
        self.gn_warn = math.inf

        # facts kept along the way
        self.lr_initial: float | None = None
        self.lr_max: float | None = None
        self.first_nonfinite_step: int | None = None  # loss or grad norm, whichever came first
        self.lr_at_first_nonfinite: float | None = None
        self.gn_before_nonfinite: float | None = None
        self.gn_before_nonfinite_ratio: float | None = None
        self.last_finite_gn: float | None = None
        self.gn_max_seen: float | None = None
        self.loss_max_jump_ratio: float | None = None
        self.batch_size: Any = None
        self.gpu_util: deque[float] = deque(maxlen=120)
        self.device: str | None = None
        # where the training loop was at the latest heartbeat (the probe says: data_wait,
        # forward, backward, optimizer, after_step, compute, outside_loop) and since when:
        # what names the rank a hung job waits for (``ranks.hung_rank``)
        self.where: str | None = None
        self.where_since: float | None = None
        # the run's set-up as the probe recorded it (``config`` events): the data loader,
        # clipping, AMP, the optimizer; what checklists ask and the log can now answer
        self.setup = Setup()
        self.batch_size_first: Any = None
        self.batch_size_max: Any = None
