"""explode: half-way through, the data switches units and the gradients explode.

A small network predicts a sensor's next reading from its last 16 readings. The
readings come from two files read in order (a time series, so no shuffling): the first
in metres, the second, written after a firmware update, in millimetres. From the
first batch of the second file the inputs are 1000x larger and the gradient norm jumps
by about a million. The loop clips gradients to norm 1.0, so the weights survive and
the loss curve merely bends: without the grad-norm panel you would not see why.

dltop raises ``grad_explosion`` (grad norm measured before clipping, far above its
rolling median); its checklist points at the data (scale, outliers, units), the
learning rate and clipping.

    python -m dltop.demos.explode [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def sensor_file(n: int, scale: float) -> TensorDataset:
    """n windows of a noisy sine-like signal: 16 past readings -> the next reading."""
    t = torch.arange(n + 16, dtype=torch.float32)
    signal = torch.sin(t / 7) + 0.5 * torch.sin(t / 3.1) + 0.05 * torch.randn(n + 16)
    signal = signal * scale
    windows = signal.unfold(0, 17, 1)[:n]
    return TensorDataset(windows[:, :16], windows[:, 16:])


def main() -> None:
    args = parse_args("explode")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "explode: the second data file is in millimetres, not metres, so input scale and gradients jump ~1000x."
    )

    metres = sensor_file(64 * 150, scale=1.0)
    millimetres = sensor_file(64 * 150, scale=1000.0)  # BUG: same sensor, different unit
    data: torch.utils.data.ConcatDataset[tuple[torch.Tensor, ...]] = torch.utils.data.ConcatDataset(
        [metres, millimetres]
    )
    loader = DataLoader(data, batch_size=64, shuffle=False)  # a time series: read in order

    model = nn.Sequential(
        nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.MSELoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for xb, yb in probe.loader(loader):
            xb, yb = xb.to(device), yb.to(device)
            loss = criterion(model(xb), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(
                model.parameters(), max_norm=1.0
            )  # hides it from the loss
            opt.step()
            opt.zero_grad()
            probe.step(loss=loss)
            pace()
    print(f"explode: done, log in {args.out}")


if __name__ == "__main__":
    main()
