"""A tiny sharded job for tests/ranks/test_fsdp_norm.py, run under torchrun on gloo (CPU).

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/fsdp_job.py OUT

Two trainings one after the other, each logging ``OUT/<mode>/rank<R>.jsonl``:

- ``fsdp``: FSDP2 (``fully_shard``) on a 1-D mesh, gradients ``Shard(0)`` DTensors. The
  last layer has one output, so rank 1's shard of it is empty.
- ``hsdp``: the same model on a 2-D (replicate=2, shard=1) mesh: every rank holds the
  whole gradient as a ``(Replicate(), Shard(0))`` DTensor, which must not count twice.

Each step also logs ``true_grad_norm``: what ``clip_grad_norm_`` returns (the whole
model's norm before clipping, found with a collective: fine in a test, never in the
probe), so the test can compare the ranks' combined figure with it; and
``dtensor_collectives``: the DTensor collectives (functional all-reduce, all-gather,
reduce-scatter: what a DTensor norm's ``float()`` or read-back runs) during the step's
``backward()``, where the probe measures, and ``dtensor_collectives_total`` since the
start (the clipping's all-reduce shows there, so the count is known to see them).
"""

import datetime
import sys

import torch
import torch.distributed as dist
from dltop.probe import Probe
from torch import nn
from torch.distributed import _functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

out = sys.argv[1]
calls = [0]


def counted(fn):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        return fn(*args, **kwargs)

    return wrapper


for name in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor"):
    setattr(funcol, name, counted(getattr(funcol, name)))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


def train(mode: str, mesh: object) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    with Probe(
        path=f"{out}/{mode}/rank{rank}.jsonl",
        model=model,
        optimizer=opt,
        socket=False,
        system=False,
        layers_every=10,
    ) as probe:
        for _ in range(20):
            x = torch.randn(16, 8, generator=g) * 3
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            before = calls[0]
            loss.backward()
            during = calls[0] - before
            true = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            true = true.full_tensor() if hasattr(true, "full_tensor") else true
            opt.step()
            opt.zero_grad()
            probe.step(
                loss=loss,
                true_grad_norm=float(true),
                dtensor_collectives=during,
                dtensor_collectives_total=calls[0],
            )


train("fsdp", init_device_mesh("cpu", (world,)))
train("hsdp", init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard")))
dist.destroy_process_group()
