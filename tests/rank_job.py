"""A tiny data-parallel job for tests/ranks/test_ranks.py, run under torchrun on gloo (CPU).

    python -m torch.distributed.run --standalone --nproc_per_node=3 tests/rank_job.py OUT MODE

MODE: ``healthy``; ``slow_data`` (rank 1's loader sleeps 30 ms per batch);
``slow_forward`` (rank 1's forward takes 30 ms longer: a model hook sleeps); ``raise``
(rank 2 raises at step 30, the others then fail in the all-reduce or are stopped);
``hang [RANK [STEP]]`` (rank RANK, 1 by default, blocks forever in its loader before the
forward of step STEP, 100 by default; the other ranks block in that step's gradient
all-reduce. Heartbeats every 0.5 s say where each rank is; the job never ends by itself,
``tests/hangkit.py`` starts it and kills it).
"""

import datetime
import sys
import time

import torch
import torch.distributed as dist
from dltop.probe import Probe
from torch import nn

out, mode = sys.argv[1], sys.argv[2]
hung_rank = int(sys.argv[3]) if mode == "hang" and len(sys.argv) > 3 else 1
hang_step = int(sys.argv[4]) if mode == "hang" and len(sys.argv) > 4 else 100
# a hung job waits in the all-reduce far longer than a test looks at it
timeout = datetime.timedelta(seconds=3600 if mode == "hang" else 30)
dist.init_process_group("gloo", timeout=timeout)
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Linear(16, 1)
if mode == "slow_forward" and rank == 1:  # a slower GPU, another process on it...
    net.register_forward_hook(lambda *_: time.sleep(0.03))
model = nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def batches(n: int = 200):
    g = torch.Generator().manual_seed(rank)
    for i in range(n):
        if mode == "slow_data" and rank == 1:
            time.sleep(0.03)
        if mode == "hang" and rank == hung_rank and i == hang_step:
            while True:  # a stuck file system, a dead worker...
                time.sleep(60)
        x = torch.randn(32, 16, generator=g)
        yield x, x.sum(1, keepdim=True)


with Probe(
    path=f"{out}/rank{rank}.jsonl",
    model=model,
    optimizer=opt,
    socket=False,
    system=False,
    heartbeat_every=0.5 if mode == "hang" else 2.0,
) as probe:
    for i, (x, y) in enumerate(probe.loader(batches(max(200, hang_step + 1)))):
        if mode == "raise" and rank == 2 and i == 30:
            raise RuntimeError("rank 2 broke on purpose")
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step(loss=loss)
dist.destroy_process_group()
