"""A tiny real training under the real Probe, ended the way a test asks.

usage: python tiny_train.py MODE LOG

MODE
  exception  a ValueError leaves the ``with`` block at step 5
  uncaught   the probe is started without ``with``; a real shape error is never caught
  loop       trains until a signal ends it (the test sends SIGTERM, SIGINT or SIGKILL)
  oom        caps its own address space (RLIMIT_AS = current size + 300 MB), then grows
             tensors until torch's CPU allocator fails; prints the cap it set
  sys        trains for 1.5 s with the system sampler at 0.25 s, then closes normally
"""

from __future__ import annotations

import resource
import sys
import time

import torch
from dltop.probe import Probe

LOOP_DEADLINE_S = 60.0  # a loop nobody stops ends here with exit code 3


def main(mode: str, log: str) -> int:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)

    def train_step(probe: Probe) -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        probe.step(loss=loss)

    if mode == "uncaught":
        probe = Probe(log, model=model, optimizer=opt).start()
        for _ in range(5):
            train_step(probe)
        model(torch.randn(4, 3))  # mat1 and mat2 shapes cannot be multiplied
        return 0

    interval = 0.25 if mode == "sys" else 1.0
    with Probe(log, model=model, optimizer=opt, system_interval=interval) as probe:
        if mode == "exception":
            for i in range(20):
                train_step(probe)
                if i == 5:
                    raise ValueError("injected failure at step 5")
        elif mode == "loop":
            end = time.monotonic() + LOOP_DEADLINE_S
            while time.monotonic() < end:
                train_step(probe)
                time.sleep(0.005)
            return 3
        elif mode == "oom":
            for _ in range(3):
                train_step(probe)
            cap = _vm_size() + (300 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            print(f"cap {cap}", flush=True)
            hog = []
            n = 8 << 20
            while True:  # 8, 16, 32... MB: the allocator fails well before the cap is real memory
                hog.append(torch.ones(n, dtype=torch.uint8))
                n *= 2
        elif mode == "sys":
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                train_step(probe)
                time.sleep(0.01)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    return 0


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
