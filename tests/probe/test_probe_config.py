"""The ``config`` event (optimizer, loader, AMP, clipping) and the step's ``loss_scale``.

Real tiny CPU trainings: what the event says is read back from the log and compared with
the objects the training used. It is written when a value is first learnt and again only
when one changes, never for the lr a schedule moves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from dltop.probe import Probe
from dltop.probe import probe as probe_module
from dltop.probe.decoding import read_records
from dltop.probe.runconfig import RunConfig, loader_section, optimizer_section
from dltop.probe.schema import EVENT_TYPES, STEP_FIELDS
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
QUIET = {"system": False, "socket": False, "heartbeat_every": 3600.0}  # no heartbeat path


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))


def _data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randn(n, 2, generator=g))


def _records(log: Path) -> list[dict[str, Any]]:
    recs, dec = read_records(str(log))
    assert dec.malformed == 0
    return recs


def _configs(log: Path) -> list[dict[str, Any]]:
    return [r for r in _records(log) if r["kind"] == "event" and r["type"] == "config"]


def _epoch(probe: Probe, net: torch.nn.Module, opt: Any, loader: Any, sched: Any = None) -> None:
    for x, y in probe.loader(loader):
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        probe.step(loss=loss)


def test_the_type_is_in_the_schema() -> None:
    assert "config" in EVENT_TYPES and "loss_scale" in STEP_FIELDS


def test_sgd_with_momentum_a_dataloader_and_the_clip_norm(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    train = DataLoader(_data(), batch_size=8, num_workers=0, pin_memory=False)
    with Probe(path=log, model=net, optimizer=opt, clip_norm=1.0, **QUIET) as probe:
        _epoch(probe, net, opt, train)
    (config,) = _configs(log)
    recs = _records(log)
    first_step = next(i for i, r in enumerate(recs) if r["kind"] == "step")
    assert recs.index(config) < first_step and config.get("step") is None  # before step 0
    assert config["optimizer"]["class"] == "SGD"
    (group,) = config["optimizer"]["groups"]
    assert group["momentum"] == 0.9 and group["weight_decay"] == 1e-4 and group["lr"] == 0.05
    assert group["nesterov"] is False and "params" not in group
    assert config["loader"] == {
        "class": "DataLoader",
        "num_workers": 0,
        "pin_memory": False,
        "batch_size": 8,
        "persistent_workers": False,
        "prefetch_factor": None,
        "drop_last": False,
    }
    assert config["clip"] == {"max_norm": 1.0, "norm_type": 2.0}
    assert config["amp"] == {"dtype": None, "scaler": False}  # fp32, seen in the forward


def test_one_event_when_nothing_changes_and_lr_schedules_are_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 steps over 5 epochs (the loader wrapped again each epoch), the optimizer read
    again every 16 steps while a schedule moves its lr: still one config event."""
    monkeypatch.setattr(probe_module, "CONFIG_EVERY", 16)
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.9)
    train = DataLoader(_data(480), batch_size=8)
    with Probe(path=log, model=net, optimizer=opt, **QUIET) as probe:
        for _ in range(5):
            _epoch(probe, net, opt, train, sched)
    assert probe.steps == 300
    (config,) = _configs(log)
    assert config["optimizer"]["groups"][0]["lr"] == 0.05  # the initial lr, once
    steps = [r for r in _records(log) if r["kind"] == "step"]
    assert steps[-1]["lr"] < 0.05 * 0.9**40  # the schedule moved it, in the step records


def test_a_new_loader_or_param_group_is_a_new_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe_module, "CONFIG_EVERY", 4)
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net[0].parameters(), lr=0.05)
    with Probe(path=log, model=net, optimizer=opt, **QUIET) as probe:
        _epoch(probe, net, opt, DataLoader(_data(16), batch_size=8))  # steps 0, 1
        _epoch(probe, net, opt, DataLoader(_data(16), batch_size=8))  # the same settings
        _epoch(probe, net, opt, DataLoader(_data(16), batch_size=4, num_workers=1))  # 4-7
        opt.add_param_group({"params": net[2].parameters(), "lr": 0.01})  # unfreezing
        _epoch(probe, net, opt, DataLoader(_data(16), batch_size=4, num_workers=1))  # 8-11
    first, second, third = _configs(log)
    assert first["loader"]["batch_size"] == 8 and len(first["optimizer"]["groups"]) == 1
    assert second["step"] == 3  # written before step 4's record: the last step before it
    assert second["loader"]["batch_size"] == 4 and second["loader"]["num_workers"] == 1
    assert second["loader"]["prefetch_factor"] == 2
    assert second["optimizer"] == first["optimizer"]  # every known section, each time
    assert [g["lr"] for g in third["optimizer"]["groups"]] == [0.05, 0.01]
    assert 8 <= third["step"] <= 11  # read again every 4 steps


def test_at_most_one_event_per_step(tmp_path: Path) -> None:
    """Two changes between two steps make one event; a change after a heartbeat wrote one
    in the same step interval waits for the next interval."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, clip_norm=0.5, system=False, socket=False, heartbeat_every=0.05) as p:
        p.step(loss=1.0)  # step 0, after the config event of the clip
        p.loader(DataLoader(_data(8), batch_size=8))  # two changes in one step interval
        p.loader(DataLoader(_data(8), batch_size=2))
        deadline = time.monotonic() + 10
        while len(_configs(log)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the loop is slow: the next heartbeat writes them
        p.loader(DataLoader(_data(8), batch_size=3))  # in the same interval: must wait
        p.step(loss=1.0)  # step 1: not before it
        p.step(loss=1.0)  # step 2: before it
    recs = _records(log)
    configs = _configs(log)
    assert [c.get("step") for c in configs] == [None, 0, 1]
    assert [c.get("loader", {}).get("batch_size") for c in configs] == [None, 2, 3]
    order = [
        r.get("step") if r["kind"] == "step" else "config"
        for r in recs
        if r["kind"] == "step" or r in configs
    ]
    assert order == ["config", 0, "config", 1, "config", 2]


def test_a_loop_stuck_before_its_first_step_says_its_config_at_a_heartbeat(
    tmp_path: Path,
) -> None:
    """The first batch never comes (a dead worker, a hung file system): the loader's
    settings are what the user needs to see, and no step will write them."""
    log = tmp_path / "run.jsonl"
    release = threading.Event()

    def stuck() -> Iterator[int]:
        release.wait(10)
        yield 1

    with Probe(path=log, system=False, socket=False, heartbeat_every=0.05) as probe:
        it = iter(probe.loader(stuck()))
        waiter = threading.Thread(target=next, args=(it,))  # the loop, blocked in next()
        waiter.start()
        deadline = time.monotonic() + 10
        while not _configs(log) and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        waiter.join()
    (config,) = _configs(log)
    assert config["loader"] == {"class": "generator"} and config.get("step") is None


def test_a_change_not_written_yet_is_written_before_the_exit(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with Probe(path=log, **QUIET) as probe:
        probe.step(loss=1.0)
        probe.loader([[1.0]])  # learnt in the interval of the step's config event
    kinds = [r.get("type", r["kind"]) for r in _records(log)]
    assert kinds[-2:] == ["config", "exit"]
    assert _configs(log)[-1]["loader"] == {"class": "list"}


def test_amp_autocast_dtype_scaler_and_loss_scale_on_the_cpu(tmp_path: Path) -> None:
    """A real CPU GradScaler under bf16 autocast: the config says so, and each step has
    the scaler's scale, halved after the step whose gradient overflowed."""
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scales = []
    with Probe(path=log, model=net, optimizer=opt, scaler=scaler, **QUIET) as probe:
        for i, (x, y) in enumerate(probe.loader(DataLoader(_data(40), batch_size=8))):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            if i == 3:
                loss = loss * float("inf")  # an overflow: the step is skipped, the scale halved
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())  # the test's own reference may sync
            probe.step(loss=loss.detach())
    (config,) = _configs(log)
    assert config["amp"] == {"dtype": "bfloat16", "scaler": True}
    steps = [r for r in _records(log) if r["kind"] == "step"]
    assert [s["loss_scale"] for s in steps] == scales == [1024.0] * 3 + [512.0] * 2


def test_param_dtype_and_an_autocast_seen_in_evaluation_only(tmp_path: Path) -> None:
    """bf16 parameters are said; autocast in a no-grad evaluation says nothing about the
    training's, which runs without (dtype null)."""
    log = tmp_path / "run.jsonl"
    net = _model().to(torch.bfloat16)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(4, 6, dtype=torch.bfloat16)
    with Probe(path=log, model=net, optimizer=opt, **QUIET) as probe:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            net(x)
        net(x).float().pow(2).mean().backward()
        opt.step()
        probe.step()
    (config,) = _configs(log)
    assert config["amp"] == {"dtype": None, "scaler": False, "param_dtype": "bfloat16"}


def test_without_a_model_the_amp_section_has_no_dtype(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.8, 0.99))
    scaler = torch.amp.GradScaler("cpu")
    with Probe(path=log, optimizer=opt, scaler=scaler, **QUIET) as probe:
        probe.step(loss=1.0)
    (config,) = _configs(log)
    assert config["amp"] == {"scaler": True}  # no forward to look into
    (group,) = config["optimizer"]["groups"]
    assert config["optimizer"]["class"] == "Adam" and group["betas"] == [0.8, 0.99]


def test_a_bare_probe_writes_no_config(tmp_path: Path) -> None:
    """No optimizer, no model, no loader, no scaler: nothing known, no event."""
    log = tmp_path / "run.jsonl"
    with Probe(path=log, **QUIET) as probe:
        probe.step(loss=1.0)
    assert _configs(log) == []


def test_only_json_scalars_and_short_lists_of_numbers_from_the_param_groups() -> None:
    params = [torch.nn.Parameter(torch.ones(1)) for _ in range(10)]
    opt = torch.optim.Adam(
        [{"params": [p], "lr": torch.tensor(0.01), "name": f"g{i}"} for i, p in enumerate(params)]
    )
    opt.param_groups[0]["schedule"] = [0.1] * 20  # too long
    opt.param_groups[0]["note"] = {"a": 1}  # not a scalar
    section = optimizer_section(opt)
    assert len(section["groups"]) == 8 and section["groups_omitted"] == 2
    g = section["groups"][0]
    assert "lr" not in g  # a tensor lr is never read here (a CUDA one would sync)
    assert g["name"] == "g0" and g["betas"] == [0.9, 0.999]
    assert "schedule" not in g and "note" not in g and "params" not in g


def test_a_wrapped_optimizer_is_named_by_its_class() -> None:
    class Wrapper:  # Accelerate's AcceleratedOptimizer keeps the torch one as .optimizer
        def __init__(self, inner: Any) -> None:
            self.optimizer = inner

        @property
        def param_groups(self) -> Any:
            return self.optimizer.param_groups

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))])
    assert optimizer_section(Wrapper(opt))["class"] == "AdamW"


def test_loader_sections_are_duck_typed() -> None:
    assert loader_section(x for x in range(3)) == {"class": "generator"}
    assert loader_section([1, 2]) == {"class": "list"}

    class Custom:
        num_workers = 4
        pin_memory = True
        batch_size = None  # a batch sampler
        persistent_workers = "yes"  # kept: a JSON scalar

    assert loader_section(Custom()) == {
        "class": "Custom",
        "num_workers": 4,
        "pin_memory": True,
        "batch_size": None,
        "persistent_workers": "yes",
        "prefetch_factor": None,
        "drop_last": None,
    }


def test_a_change_and_back_within_one_interval_writes_nothing() -> None:
    cfg = RunConfig()
    cfg.learn("loader", {"class": "list"})
    assert cfg.take(0, None) is not None
    cfg.learn("loader", {"class": "generator"})
    cfg.learn("loader", {"class": "list"})
    assert cfg.take(1, 0) is None and not cfg.pending


def test_a_broken_loader_attribute_costs_only_the_config(tmp_path: Path) -> None:
    class Hostile(list):
        @property
        def num_workers(self) -> int:
            raise RuntimeError("no workers here")

    log = tmp_path / "run.jsonl"
    with Probe(path=log, **QUIET) as probe:
        for v in probe.loader(Hostile([1.0, 2.0])):
            probe.step(loss=v)
    assert len([r for r in _records(log) if r["kind"] == "step"]) == 2
    (warning,) = [r for r in _records(log) if r.get("type") == "warning"]
    assert "config (loader)" in warning["message"]


def test_every_field_of_the_new_records_is_documented(tmp_path: Path) -> None:
    """The config event's sections and their fields, the heartbeat's and the step's
    loss_scale are in docs/log-format.md's tables (param groups keep their own names)."""
    from test_probe_meta import _documented_fields

    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    with Probe(
        path=log, model=net, optimizer=opt, scaler=scaler, clip_norm=1.0, system=False,
        socket=False, heartbeat_every=0.01,
    ) as probe:  # fmt: skip
        for x, y in probe.loader(DataLoader(_data(16), batch_size=8)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            time.sleep(0.05)  # heartbeats
            probe.step(loss=loss.detach())
        probe._learn("precision", "bf16")  # an adapter's
    documented = _documented_fields()
    recs = _records(log)
    config = _configs(log)[-1]  # the precision came last: written at close
    written = set(config) - {"kind", "type"}
    for name in ("optimizer", "loader", "amp", "clip"):
        written |= set(config[name])
    beat = next(r for r in recs if r["kind"] == "heartbeat")
    step = next(r for r in recs if r["kind"] == "step")
    written |= set(beat) | set(step)
    assert "where" in beat and "loss_scale" in step and "precision" in config
    assert not written - documented - {"kind"}


def test_autocast_turned_on_later_is_seen_at_the_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first forward runs without autocast (dtype null); the look is armed again every
    CONFIG_EVERY steps until a dtype is seen, then never again."""
    monkeypatch.setattr(probe_module, "CONFIG_EVERY", 4)
    log = tmp_path / "run.jsonl"
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    with Probe(path=log, model=net, optimizer=opt, **QUIET) as probe:
        for i in range(12):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=i >= 2):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss.detach())
        assert probe._loop is not None and probe._loop.amp_seen
        assert len(net[0]._forward_pre_hooks) == 0  # seen: no more looks, no hook left
    first, second = _configs(log)
    assert first["amp"]["dtype"] is None and second["amp"]["dtype"] == "bfloat16"
    # armed again at step 3 (4 steps recorded), seen in step 4's forward, written before
    # step 4's record: after step 3
    assert second["step"] == 3
