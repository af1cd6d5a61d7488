"""vanishing: twenty sigmoid layers stacked without normalization or skip connections.

Backpropagation multiplies the gradient by each layer's weights and by the sigmoid's
slope, which is at most 0.25. Through twenty layers the signal that reaches the first
layers is many orders of magnitude smaller than at the last: the early layers barely
move, and the loss stalls near chance level.

dltop raises ``vanishing_grad`` from the per-layer gradient norms (first/last ratio far
below 1e-3 while the loss is not improving); its checklist suggests ReLU-family
activations, normalization layers, residual connections, or a shallower net.

    python -m dltop.demos.vanishing [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("vanishing")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "vanishing: 20 stacked sigmoid layers shrink the gradient at every layer, so the first ones never learn."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 10 classes.
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
    with torch.no_grad():
        x = torch.randn(8192, 32)
        y = teacher(x).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)

    layers: list[nn.Module] = []
    for _ in range(20):  # BUG: deep sigmoid stack, no normalization, no residuals
        layers += [nn.Linear(64 if layers else 32, 64), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        for _epoch in range(4):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                pace()
    print(f"vanishing: done, log in {args.out}")


if __name__ == "__main__":
    main()
