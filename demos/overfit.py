"""overfit: a big network memorizes a tiny, noisy training set.

The training set has only 128 samples, a quarter of them with wrong labels, and the
model has ~280 k parameters. Training loss keeps falling towards zero as the network
memorizes every sample, label noise included; the loss on held-out data, evaluated
every 20 steps, bottoms out early and then climbs. This is what an evaluation set is for:
the training curve alone looks perfect.

dltop raises ``overfitting`` when the eval loss has stopped improving for several
evaluations while the training loss still falls and the gap widens; its checklist
suggests early stopping at the best eval step, more data or augmentation, weight
decay/dropout, or a smaller model.

    python -m dltop.demos.overfit [--out PATH] [--device cpu|cuda]
"""

import torch
from dltop.demos._common import noisy_teacher_data, pacer, parse_args, setup
from dltop.probe import Probe
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = parse_args("overfit")
    device = setup(args)
    pace = pacer(args)  # --fast: full speed
    print(
        "overfit: a 280k-parameter net on 128 noisy samples memorizes them, so held-out loss climbs."
    )

    x_train, y_train, x_val, y_val = noisy_teacher_data()  # 25 % of the labels are noise
    x_val, y_val = x_val.to(device), y_val.to(device)  # held-out: never trained on
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)

    model = nn.Sequential(
        nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)  # no weight decay, no early stopping
    criterion = nn.CrossEntropyLoss()

    with Probe(path=args.out, model=model, optimizer=opt) as probe:
        step = 0
        for _epoch in range(200):
            for xb, yb in probe.loader(loader):
                xb, yb = xb.to(device), yb.to(device)
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss=loss)
                pace()

                step += 1
                if step % 20 == 0:  # evaluate on the held-out set
                    with torch.no_grad():
                        val_logits = model(x_val)
                        val_loss = criterion(val_logits, y_val)
                        val_acc = (val_logits.argmax(dim=1) == y_val).float().mean()
                    probe.eval(loss=val_loss, acc=val_acc)
    print(f"overfit: done, log in {args.out}")


if __name__ == "__main__":
    main()
