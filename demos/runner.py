"""The one training loop the plain-PyTorch demos share, and their command line.

``python -m dltop.demos.NAME`` runs ``main_for(NAME)``: the loop below with what the
scenario ``NAME`` (``scenarios.py``) changes: data, model, optimizer and schedule, loss,
how long, and the fault it plants. The loop is an ordinary PyTorch training with the
probe's three lines (``Probe(...)``, ``probe.loader(...)``, ``probe.step(...)``). It
never reads a value back (no ``.item()``, no ``float(loss)``): the probe takes the
tensors and reads them later, so the loop never waits for a GPU.

Three demos keep their own file, because their loop is not this one:

- ``quickstart``: the copy-paste example the README starts with; it is documentation.
- ``hf_lr_blowup``: the training loop is Hugging Face's ``Trainer``, watched through
  dltop's callback (the HF adapter).
- ``lightning_overfit``: the loop is Lightning's ``Trainer`` (the Lightning adapter).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from dltop.demos._common import Pacer, pacer, parse_args, setup
from dltop.demos.scenarios import SCENARIOS, Scenario
from dltop.probe import Probe
from torch import Tensor


def main_for(name: str, argv: list[str] | None = None) -> None:
    """``python -m dltop.demos.NAME [--out PATH] [--device cpu|cuda] [--fast]``."""
    args = parse_args(name, argv)
    device = setup(args)  # seeded: every run of a demo is the same run
    pace = pacer(args)  # spreads the steps over ~30 s; --fast: full speed
    print(f"{name}: {SCENARIOS[name].intro}")
    train(SCENARIOS[name], args.out, device, pace)
    print(f"{name}: done, log in {args.out}")  # oom and crash never get here


def accuracy(logits: Tensor, y: Tensor) -> Tensor:
    return (logits.argmax(dim=1) == y).float().mean()


def train(s: Scenario, out: str, device: torch.device, pace: Pacer) -> None:
    """Train scenario ``s`` on ``device``, the probe writing its log to ``out``."""
    data = s.data()  # before the model, as the demos always drew their random numbers
    model = s.model().to(device)
    opt = s.optimizer(model.parameters())
    sched = s.schedule(opt) if s.schedule else None
    x_val, y_val = (t.to(device) for t in data.held_out)
    deadline = time.monotonic() + s.seconds

    with Probe(path=out, model=model, optimizer=opt) as probe:
        if s.on_start:
            s.on_start(device)
        step = 0
        for _epoch in range(s.epochs):
            for xb, yb in probe.loader(data.train):
                xb, yb = xb.to(device), yb.to(device)
                logits = model(xb)
                loss = s.loss(logits, yb)
                loss.backward()
                if s.clip:  # the probe records the grad norm before clipping
                    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=s.clip)
                opt.step()
                opt.zero_grad()
                if sched is not None:
                    sched.step()
                more: dict[str, Any] = {"acc": accuracy(logits, yb)} if s.log_acc else {}
                if s.after_step:
                    more |= s.after_step(model, x_val, y_val)
                probe.step(loss=loss, **more)
                pace()  # a wait after the step: it counts as compute, never as data wait

                step += 1
                if s.eval_every and step % s.eval_every == 0:  # the held-out set
                    with torch.no_grad():
                        val_logits = model(x_val)
                        val_loss, val_acc = s.loss(val_logits, y_val), accuracy(val_logits, y_val)
                    probe.eval(loss=val_loss, acc=val_acc)
                if step == s.max_steps or time.monotonic() > deadline:
                    return
