"""``dltop.probe.hf.DltopCallback`` on real ``transformers.Trainer`` runs of tiny local models.

No hub download: a 2-layer GPT-2 with a 64-token vocabulary is built from a config in
the test. References come from the same training: the pre-clip norm with
``torch.nn.utils.get_total_norm`` in an override of ``Trainer._clip_grad_norm`` (called
before clipping), and the Trainer's own logs at ``logging_steps=1``, whose ``loss`` is the
step's loss and whose ``learning_rate`` is the lr the step used.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402
from adapterkit import (  # noqa: E402
    alert_ids,
    assert_phases_are_never_stalls,
    blocked_import,
    check,
    events,
    records,
)
from dltop.probe import Probe  # noqa: E402
from dltop.probe.hf import DltopCallback  # noqa: E402
from torch import nn  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
transformers.logging.set_verbosity_error()
torch.set_num_threads(1)
CLIP = 0.01


def _tokens(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 64, (16,), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def _gpt2() -> Any:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    return transformers.GPT2LMHeadModel(cfg)


class Logs(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        self.logs.append(dict(logs or {}))


class RefTrainer(transformers.Trainer):
    """Keeps the norm of the gradient as it stands when the Trainer is about to clip it."""

    def __init__(self, *a: Any, save_sleep: float = 0.0, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.ref_norms: list[float] = []
        self.save_sleep = save_sleep

    def _clip_grad_norm(self, model: Any) -> Any:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        self.ref_norms.append(float(torch.nn.utils.get_total_norm(grads)))
        return super()._clip_grad_norm(model)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        time.sleep(self.save_sleep)
        super()._save_checkpoint(model, trial)


def _args(tmp_path: Path, **kw: Any) -> Any:
    base: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 4,
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
        "save_strategy": "no",
        "dataloader_num_workers": 0,
        "learning_rate": 1e-3,
    }
    return transformers.TrainingArguments(**(base | kw))


@pytest.mark.parametrize(("accum", "bf16"), [(1, False), (4, False), (4, True)])
def test_each_step_has_its_loss_pre_clip_norm_and_lr(
    tmp_path: Path, accum: int, bf16: bool
) -> None:
    log, logs = tmp_path / "run.jsonl", Logs()
    args = _args(
        tmp_path,
        max_steps=5,
        gradient_accumulation_steps=accum,
        max_grad_norm=CLIP,
        bf16=bf16,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        lr_scheduler_type="linear",
    )
    trainer = RefTrainer(
        model=_gpt2(),
        args=args,
        train_dataset=_tokens(96),
        eval_dataset=_tokens(8, seed=1),
        callbacks=[logs, DltopCallback(path=log, socket=False, system=False)],
    )
    trainer.train()

    steps = records(log, "step")
    assert [s["step"] for s in steps] == list(range(5))
    assert [s["grad_norm"] for s in steps] == pytest.approx(trainer.ref_norms, rel=1e-5)
    assert min(trainer.ref_norms) > 2 * CLIP  # clipped after the probe's reading
    train_logs = [entry for entry in logs.logs if "loss" in entry]
    assert [s["loss"] for s in steps] == pytest.approx([e["loss"] for e in train_logs], rel=1e-5)
    assert [s["lr"] for s in steps] == pytest.approx([e["learning_rate"] for e in train_logs])
    assert [s["batch_size"] for s in steps] == [4 * accum] * 5
    assert all(0 <= s["data_time"] < s["step_time"] for s in steps)
    # the step split from the last micro-batch's start (the adapter marks it) to its gradients
    assert all(0 <= s["forward_time"] < s["compute_time"] for s in steps)
    assert all(0 <= s["backward_time"] < s["compute_time"] for s in steps)

    eval_logs = [entry for entry in logs.logs if "eval_loss" in entry]
    evals = records(log, "eval")
    assert [e["loss"] for e in evals] == pytest.approx([e["eval_loss"] for e in eval_logs])
    assert all("runtime" not in e and "epoch" not in e for e in evals)
    phases = [(p["name"], p["state"]) for p in events(log, "phase")]
    assert phases == [("eval", "begin"), ("eval", "end")] * len(evals)
    (note,) = events(log, "note")
    assert note["framework"] == "transformers" and note["loss"] == "training_step"
    assert events(log, "exit")[0]["status"] == "ok"
    assert "training_step" not in vars(trainer)  # the Trainer is left as it was found
    # the Trainer's settings: its optimizer (behind Accelerate's wrapper), clip, precision
    config = events(log, "config")[-1]  # all of it by the first step (a slow start: two)
    assert len(events(log, "config")) <= 2
    assert config["optimizer"]["class"] == "AdamW"
    assert config["optimizer"]["groups"][0]["betas"] == [0.9, 0.999]
    assert config["clip"] == {"max_norm": CLIP, "norm_type": 2.0}
    assert config["precision"] == ("bf16" if bf16 else "fp32")
    assert config["amp"] == {"dtype": "bfloat16" if bf16 else None, "scaler": False}
    assert not events(log, "warning")  # the optimizer inside Accelerate's wrapper is hooked


class SlowStep(RefTrainer):
    """Step 2's training_step blocks (its forward) between two marks."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.marks: list[float] = []

    def compute_loss(self, *a: Any, **kw: Any) -> Any:
        if self.state.global_step == 2 and not self.marks:
            self.marks.append(time.time())
            time.sleep(0.6)
            self.marks.append(time.time())
        return super().compute_loss(*a, **kw)


def test_heartbeats_say_where_the_trainer_is(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    cb = DltopCallback(path=log, socket=False, system=False, heartbeat_every=0.05)
    args = _args(tmp_path, max_steps=4, max_grad_norm=CLIP)
    trainer = SlowStep(model=_gpt2(), args=args, train_dataset=_tokens(32), callbacks=[cb])
    trainer.train()
    begin, end = trainer.marks
    during = [b for b in records(log, "heartbeat") if begin < b["t"] < end - 0.05]
    assert len(during) >= 3 and {b["where"] for b in during} == {"forward"}
    assert begin - 0.3 < during[0]["where_since"] <= begin
    assert {b["step"] for b in during} == {1}


class SlowEval(RefTrainer):
    def prediction_step(self, *a: Any, **kw: Any) -> Any:
        time.sleep(0.3)
        return super().prediction_step(*a, **kw)


def _slow_eval_and_save(log: Path, tmp_path: Path) -> None:
    """110 quick steps (the stall line is a multiple of their p95), two 0.6 s evaluations
    and one 0.6 s checkpoint save."""
    model = nn.Sequential(nn.Linear(4, 1))
    args = _args(
        tmp_path,
        max_steps=110,
        per_device_eval_batch_size=4,
        eval_strategy="steps",
        eval_steps=50,
        save_strategy="steps",
        save_steps=75,
        output_dir=str(tmp_path / log.stem),
    )
    trainer = SlowEval(
        model=_Regressor(model),
        args=args,
        train_dataset=_points(64),
        eval_dataset=_points(8),
        callbacks=[DltopCallback(path=log, socket=False, system=False)],
        save_sleep=0.6,
    )
    trainer.train()


class _Regressor(nn.Module):
    """A model the Trainer can drive: returns ``{"loss": ...}`` from ``x`` and ``labels``."""

    def __init__(self, net: nn.Module, fail_at: int | None = None) -> None:
        super().__init__()
        self.net, self.fail_at, self.calls = net, fail_at, 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.training:
            self.calls += 1
            if self.calls == self.fail_at:
                raise ValueError("shapes do not match: (4, 3) vs (4, 1)")
        return {"loss": nn.functional.mse_loss(self.net(x), labels)}


def _points(n: int, seed: int = 0, features: int = 4) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = x @ torch.randn(features, 1, generator=g) + 0.1
    return [{"x": x[i], "labels": y[i]} for i in range(n)]


@pytest.mark.slow
def test_evaluation_and_checkpointing_are_phases_never_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_phases_are_never_stalls(_slow_eval_and_save, tmp_path, monkeypatch)


def test_an_exception_in_the_training_step_is_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    torch.manual_seed(0)
    trainer = transformers.Trainer(
        model=_Regressor(nn.Linear(4, 1), fail_at=4),
        args=_args(tmp_path, max_steps=10),
        train_dataset=_points(64),
        callbacks=[DltopCallback(path=log, socket=False, system=False)],
    )
    with pytest.raises(ValueError, match="shapes do not match"):
        trainer.train()
    (exc,) = events(log, "exception")
    assert exc["exc_type"] == "ValueError" and exc["step"] == 2
    assert events(log, "exit")[0]["status"] == "exception"
    report = check(log)
    assert report["status"] == "crashed" and "crash" in alert_ids(report)


class _RaisesAtStep(transformers.TrainerCallback):
    """Another callback of the user's that raises: outside the adapter's four methods."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 3:
            raise RuntimeError("a user callback broke")


def test_an_exception_in_another_callback_caught_by_the_caller_is_a_crash(
    tmp_path: Path,
) -> None:
    """A sweep loop or a notebook catches what train() raised and goes on: the log used
    to say "exit ok" and `check` "finished normally"."""
    log = tmp_path / "run.jsonl"
    trainer = transformers.Trainer(
        model=_Regressor(nn.Linear(4, 1)),
        args=_args(tmp_path, max_steps=10),
        train_dataset=_points(64),
        callbacks=[DltopCallback(path=log, socket=False, system=False), _RaisesAtStep()],
    )
    try:
        trainer.train()
    except RuntimeError:
        pass  # the caller goes on: a sweep's next configuration, the next notebook cell
    (exc,) = events(log, "exception")
    assert exc["exc_type"] == "RuntimeError" and "user callback" in exc["message"]
    assert events(log, "exit")[0]["status"] == "exception"
    report = check(log)
    assert report["status"] == "crashed" and report["verdict"].startswith("crashed at step")


class _BrokenSGD(torch.optim.SGD):
    """An optimizer whose step raises at its 4th call: inside train(), outside any
    method the adapter wraps and outside every callback."""

    calls = 0

    def step(self, closure: Any = None) -> Any:
        type(self).calls += 1
        if type(self).calls == 4:
            raise RuntimeError("optimizer state is corrupt")
        return super().step(closure)


def test_an_exception_nothing_wrapped_sees_closes_the_log_as_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    model = _Regressor(nn.Linear(4, 1))
    opt = _BrokenSGD(model.parameters(), lr=1e-3)
    trainer = transformers.Trainer(
        model=model,
        args=_args(tmp_path, max_steps=10),
        train_dataset=_points(64),
        optimizers=(opt, None),
        callbacks=[DltopCallback(path=log, socket=False, system=False)],
    )
    with pytest.raises(RuntimeError, match="corrupt"):
        trainer.train()
    deadline = time.monotonic() + 10  # the watch looks once a second
    while not events(log, "exit") and time.monotonic() < deadline:
        time.sleep(0.2)
    (done,) = events(log, "exit")
    assert done["status"] == "exception"
    assert any("without on_train_end" in n.get("text", "") for n in events(log, "note"))
    report = check(log)
    assert report["status"] == "crashed", report["reason"]


class _InOrder(transformers.Trainer):
    def _get_train_sampler(self, *a: Any, **kw: Any) -> Any:
        return torch.utils.data.SequentialSampler(self.train_dataset)


def test_a_too_high_lr_raises_the_alerts_the_plain_loop_raises(tmp_path: Path) -> None:
    lr, steps = 0.8, 120
    data = _points(64)
    plain, ours = tmp_path / "plain.jsonl", tmp_path / "hf.jsonl"

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    batches = [
        (
            torch.stack([d["x"] for d in data[i : i + 4]]),
            torch.stack([d["labels"] for d in data[i : i + 4]]),
        )
        for i in range(0, len(data), 4)
    ]
    with Probe(path=plain, model=model, optimizer=opt, socket=False, system=False) as probe:
        for i in range(steps):
            x, y = batches[i % len(batches)]
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)

    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    trainer = _InOrder(
        model=_Regressor(net),
        args=_args(tmp_path, max_steps=steps, max_grad_norm=0.0, lr_scheduler_type="constant"),
        train_dataset=data,
        optimizers=(torch.optim.SGD(net.parameters(), lr=lr), None),
        callbacks=[DltopCallback(path=ours, socket=False, system=False)],
    )
    trainer.train()
    want, got = check(plain), check(ours)
    assert alert_ids(want), "the lr is meant to be too high: the plain loop must raise alerts"
    assert alert_ids(got) == alert_ids(want)
    assert {a["id"]: a["step"] for a in got["alerts"]} == {
        a["id"]: a["step"] for a in want["alerts"]
    }


def test_keyword_arguments_are_the_probes_and_bad_ones_say_so() -> None:
    with pytest.raises(TypeError, match="layer_every.*layers_every"):
        DltopCallback(layer_every=5)
    with pytest.raises(TypeError, match="takes the model and optimizer from the trainer"):
        DltopCallback(optimizer=None)


@pytest.mark.slow
def test_without_transformers_the_import_error_names_the_extra() -> None:
    out = blocked_import("dltop.probe.hf", "transformers").stdout.splitlines()
    assert out[0].startswith("ImportError ") and "pip install 'dltop-monitor[hf]'" in out[0]
    assert out[1] == "cause None True"


def test_without_a_trainer_in_sight_steps_still_get_norm_and_lr(tmp_path: Path) -> None:
    """A custom loop calling the callbacks itself: no Trainer to wrap, so no loss; said."""
    from types import SimpleNamespace

    log = tmp_path / "run.jsonl"
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.25)
    cb = DltopCallback(path=log, socket=False, system=False)
    args = _args(tmp_path)
    cb.on_train_begin(args, None, None, model=model, optimizer=opt)
    refs = []
    for i in range(3):
        x = torch.randn(4, 4, generator=torch.Generator().manual_seed(i))
        model(x).pow(2).mean().backward()
        refs.append(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        opt.step()
        cb.on_optimizer_step(args, None, None, optimizer=opt)
        opt.zero_grad()
        cb.on_step_end(args, SimpleNamespace(global_step=i + 1), None)
    cb.on_train_end(args, None, None)
    steps = records(log, "step")
    assert [s["grad_norm"] for s in steps] == pytest.approx(refs, rel=1e-6)
    assert [s["lr"] for s in steps] == [0.25] * 3 and all("loss" not in s for s in steps)
    assert any("Trainer not found" in n["text"] for n in events(log, "note"))
