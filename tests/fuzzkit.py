"""A seeded generator of hostile-but-decodable logs, and one pass of every reader over them.

Why: the viewer, ``dltop check`` and ``dltop ls`` read logs written by anyone. Every field
of every record kind may hold a value of the wrong type or out of range (an int of 400
digits, a step of 2**64, a list where a number belongs, an object where text belongs);
none of it may raise. The generator starts from a plausible run and mutates fields, so the
readers get past their early "is this a log" checks and reach the rules and the panels.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

# Values that broke something once, or could: overflowing ints, int64 edges, non-finite
# floats and their string markers, wrong types, nesting, odd text.
HOSTILE: tuple[Any, ...] = (
    10**400,
    -(10**400),
    2**63,
    2**64,
    -(2**63) - 1,
    2**53 + 1,
    -1,
    0,
    1e308,
    -1e308,
    5e-324,
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "",
    "12",
    "\x1b[2J",
    "x" * 300,
    True,
    False,
    None,
    [],
    [1, 2],
    ["a", None, 10**400],
    {},
    {"a": {"b": [10**400]}},
    [[[[[[[[["deep"]]]]]]]]],
    [{"file": 10**400, "line": "x", "func": [], "code": {"a": 1}}, {"file": "a.py", "line": 2**64}],
    3.5,
    -0.0,
)

META_FIELDS = (
    "v", "run_id", "t", "host", "pid", "argv", "cwd", "python", "platform", "dltop",
    "torch", "cuda", "devices", "rank", "local_rank", "world_size", "notes", "started",
    "restart", "job", "socket", "config", "extra_field",
)  # fmt: skip
STEP_FIELDS = (
    "step", "t", "loss", "grad_norm", "lr", "lrs", "data_time", "step_time",
    "compute_time", "device_time", "batch_size", "samples_per_s", "mem_allocated",
    "mem_reserved", "mem_max_allocated", "mem_limit", "acc", "phase",
)  # fmt: skip
EVAL_FIELDS = ("step", "t", "loss", "acc", "split")
SYS_FIELDS = ("t", "rss", "cpu", "children_rss", "sys_mem_used", "sys_mem_total", "gpus", "step")
EVENT_FIELDS = (
    "type", "t", "step", "message", "exc_type", "traceback", "cause", "memory", "signal",
    "status", "name", "state", "text", "dropped", "requested",
)  # fmt: skip
EVENT_TYPES = ("exception", "oom", "signal", "exit", "phase", "note", "warning", "bogus", 7)
HEARTBEAT_FIELDS = ("t", "step", "pid")
LAYERS_FIELDS = ("step", "t", "names", "norms", "zero", "no_grad")


def _base_run(rng: random.Random, steps: int) -> list[dict[str, Any]]:
    t0 = 1_700_000_000.0
    out: list[dict[str, Any]] = [
        {
            "kind": "meta", "v": 1, "run_id": "fuzz", "t": t0, "host": "h", "pid": 1,
            "argv": ["train.py"], "rank": 0, "world_size": 1, "devices": [], "notes": [],
        }
    ]  # fmt: skip
    loss = 2.0
    for s in range(steps):
        loss *= 0.99 + rng.random() * 0.015
        t = t0 + 0.1 * (s + 1)
        out.append(
            {
                "kind": "step", "step": s, "t": t, "loss": loss, "grad_norm": 1.0 + rng.random(),
                "lr": 1e-3, "data_time": 0.01, "step_time": 0.1, "compute_time": 0.09,
                "batch_size": 32, "samples_per_s": 320.0, "mem_allocated": 1 << 20,
            }
        )  # fmt: skip
        if s % 10 == 9:
            out.append({"kind": "eval", "step": s, "t": t, "loss": loss * 1.1})
            out.append({"kind": "sys", "t": t, "rss": 1 << 28, "cpu": 50.0, "gpus": []})
            out.append({"kind": "heartbeat", "t": t, "step": s})
        if s % 25 == 24:
            out.append(
                {"kind": "layers", "step": s, "t": t, "names": ["a", "b"], "norms": [1.0, 0.5]}
            )
    t_end = t0 + 0.1 * (steps + 1)
    out.append({"kind": "event", "type": "phase", "t": t_end, "name": "eval", "state": "begin"})
    out.append(
        {
            "kind": "event", "type": "exception", "t": t_end, "step": steps - 1,
            "exc_type": "RuntimeError", "message": "CUDA out of memory. Tried to allocate 2 GiB",
            "traceback": ["File x", "line 1"], "memory": {"rss": 1},
        }
    )  # fmt: skip
    out.append({"kind": "event", "type": "exit", "t": t_end, "status": "exception"})
    return out


_FIELDS = {
    "meta": META_FIELDS,
    "step": STEP_FIELDS,
    "eval": EVAL_FIELDS,
    "sys": SYS_FIELDS,
    "event": EVENT_FIELDS,
    "heartbeat": HEARTBEAT_FIELDS,
    "layers": LAYERS_FIELDS,
}


def _hostile(rng: random.Random) -> Any:
    v = rng.choice(HOSTILE)
    if rng.random() < 0.1:
        v = {"nested": v, "list": [v, v]}
    return v


def hostile_run(seed: int, steps: int = 60, mutations: int = 40) -> list[dict[str, Any]]:
    """A plausible run with ``mutations`` fields of random records set to hostile values,
    plus a few records of unknown or odd kinds."""
    rng = random.Random(seed)
    recs = _base_run(rng, steps)
    for _ in range(mutations):
        rec = rng.choice(recs)
        kind = rec["kind"]
        field = rng.choice(_FIELDS.get(kind, ("x",)))
        if kind == "event" and field == "type":
            rec[field] = rng.choice(EVENT_TYPES)
        elif rng.random() < 0.1:
            rec.pop(field, None)
        else:
            rec[field] = _hostile(rng)
    for _ in range(3):  # whole hostile records of every kind, wherever they fall
        kind = rng.choice(list(_FIELDS))
        rec = {"kind": kind}
        for field in rng.sample(_FIELDS[kind], k=min(4, len(_FIELDS[kind]))):
            rec[field] = _hostile(rng) if field != "type" else rng.choice(EVENT_TYPES)
        recs.insert(rng.randrange(len(recs) + 1), rec)
    return recs


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    """Write records the way any tool might: plain json, big ints verbatim."""
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def exercise_viewer_core(path: Path) -> None:
    """Every reader the viewer uses, over one log: store, rules, status, facts,
    checklists, header, every panel, crash banner, badges."""
    from dltop.probe.decoding import read_records
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for
    from dltop.tui.core.present import view_model as vm
    from dltop.tui.core.present.chartdata import y_range
    from dltop.tui.core.present.panels import PANELS, panel_chart

    records, dec = read_records(str(path))
    model = vm.new_model(str(path))
    model.ingest(records, dec.malformed)
    assert model.engine_error is None, model.engine_error
    now = 1_700_000_100.0
    state = vm.ViewState()
    with vm.locked(model):
        st = model.status(now)
        vm.header_info(model, now, state, follow=False)
        for spec in PANELS:
            for view in (state, vm.ViewState(cursor=5), vm.ViewState(log_loss=True)):
                data = panel_chart(model, spec.key, view, 40)
                rng = y_range(data)  # what the chart widget scales its dots by
                if rng is not None:
                    assert all(map(math.isfinite, rng)), (spec.key, rng)
        vm.crash_info(model, st)
        alerts = model.alerts()
        facts = model.facts()
        for a in alerts:
            vm.badge_label(a)
            evaluate(checklist_for(a), facts, a)
