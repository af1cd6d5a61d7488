"""healthy: a sensible run, so you know what quiet looks like.

A small MLP learns a synthetic classification task with Adam, a cosine learning-rate
schedule and a held-out set evaluated every 50 steps. Nothing is wrong here: dltop must
raise no alert at all. Compare its panels with the broken demos.

    python -m dltop.demos.healthy [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("healthy")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "healthy: a well-tuned run (Adam, cosine schedule, held-out eval), so dltop should stay quiet."
    )

    # Synthetic data: a random "teacher" network labels Gaussian inputs into 4 classes.
    teacher = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4))
    with torch.no_grad():
        x = torch.randn(10_240, 20)
        y = teacher(x).argmax(dim=1)
    train = TensorDataset(x[:8192], y[:8192])
    x_val, y_val = x[8192:].to(device), y[8192:].to(device)
    loader = DataLoader(train, batch_size=64, shuffle=True, drop_last=True)

    model = nn.Sequential(
        nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4)
    )
    model.to(device)
    epochs = 5
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        step = 0
        for _epoch in range(epochs):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                logits = model(xb)
                loss = criterion(logits, yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                sched.step()
                acc = (logits.argmax(dim=1) == yb).float().mean()
                probe.step(loss=loss, acc=acc)
                pace()

                step += 1
                if step % 64 == 0:  # evaluate on held-out data every 64 steps
                    with torch.no_grad():
                        val_logits = model(x_val)
                        val_loss = criterion(val_logits, y_val)
                        val_acc = (val_logits.argmax(dim=1) == y_val).float().mean()
                    probe.eval(loss=val_loss, acc=val_acc)
    print(f"healthy: done, log in {args.out}")


if __name__ == "__main__":
    main()
