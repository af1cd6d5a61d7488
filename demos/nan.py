"""nan: a learning-rate warm-up that climbs far past what the model can take.

Plain SGD with momentum warms its learning rate up linearly to a peak of 4.0, several
times what this network tolerates (it diverges from about 2). For the first steps the loss falls nicely;
once the rate crosses the stability edge every update overshoots further than the last,
the weights grow geometrically, the logits overflow and the loss becomes NaN. From then
on every step is NaN: nothing in the loop stops it.

dltop flags ``nan_loss`` on the very step it happens; its checklist points at the
learning rate at that step (the ``lr`` panel shows the warm-up ramp).

    python -m dltop.demos.nan [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("nan")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "nan: warming the learning rate up to 4.0 (several times too high), so SGD diverges until the loss is NaN."
    )

    # Synthetic regression data: a random "teacher" network maps Gaussian inputs to 4 targets.
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4))
    with torch.no_grad():
        x = torch.randn(8192, 32)
        y = teacher(x)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)

    model = nn.Sequential(
        nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 4)
    )
    model.to(device)
    peak_lr, warmup_steps = 4.0, 200  # BUG: a peak learning rate several times too high
    opt = torch.optim.SGD(model.parameters(), lr=peak_lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup_steps))
    criterion = nn.MSELoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for _epoch in range(3):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                sched.step()
                probe.step(loss=loss)
                pace()
    print(f"nan: done, log in {args.out}")


if __name__ == "__main__":
    main()
