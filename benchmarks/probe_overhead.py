"""What the probe costs a training loop, against TensorBoard, wandb and a minimal writer.

Run:  .venv/bin/python benchmarks/probe_overhead.py [--quick] [--threads N]

One run measures, on the same machine and in the same process:

(a) ``probe.step()`` on the training thread: one float loss, no grad-norm work, and
    the same with six scalars (loss, lr, four extras);
(b) TensorBoard ``SummaryWriter.add_scalar`` × 6 per step;
(c) ``wandb.log`` (offline) with six scalars, when wandb is installed;
(d) the anchor: a minimal line writer (perf_counter + dict + orjson/msgspec + buffered write);
(e) the probe's overhead on a real CPU training step of a ~25 M-parameter MLP
    (batch 64, AdamW): baseline vs the probe computing the grad norm, a loop that
    clips vs the same loop with the probe taking ``clip_grad_norm_``'s value, and
    gradient accumulation (4 micro-batches per step: the probe's norm runs after each
    backward). The training thread's CPU is measured apart from the probes' background
    threads (writer, sampler, socket), whose CPU is reported on its own;
(f) the cost of the post-accumulate-grad hooks per parameter and backward pass;
(g) the probe under overload (benchmarks/probe_sustained.py): the sustained step rate
    that keeps every record, with and without a live viewer, what is dropped and
    counted above it, the longest ``step()`` call, and the memory of a full queue;
(h) the framework adapters (benchmarks/adapter_overhead.py): the training thread's CPU
    per optimizer step of Lightning's and the HF Trainer's ``DltopCallback``, next to the
    plain ``Probe`` in a plain loop and each framework's own per-step logging (Lightning
    ``self.log``, HF ``logging_steps=1``), on the same tiny model, as ratios.

Variants of (e) are interleaved in rounds, their order rotated each round, and
compared by medians: the machines are shared and noisy. Ratios measured in one run
are what to trust; absolute times vary from box to box.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from adapter_overhead import run as run_adapters  # beside this script
from dltop.probe import Probe
from probe_sustained import run as run_sustained  # beside this script

SCALARS = ("loss", "lr", "acc", "tokens_per_s", "grad_scale", "wd")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _per_call(fn: Callable[[int], None], n: int) -> tuple[float, float]:
    """Median and p90 in µs of ``fn(i)``, each call timed on its own (timer cost included)."""
    pc = time.perf_counter_ns
    ts = [0] * n
    for i in range(n):
        t0 = pc()
        fn(i)
        ts[i] = pc() - t0
    return statistics.median(ts) / 1000, _pct(ts, 0.9) / 1000


# --- (a)–(d): logging cost per step ------------------------------------------------------
def bench_probe(n: int, tmp: str) -> dict[str, tuple[float, float]]:
    out = {}
    with Probe(path=os.path.join(tmp, "probe.jsonl"), system=False) as probe:
        _per_call(lambda i: probe.step(loss=0.5), n // 10)  # warm-up
        out["probe.step(loss)"] = _per_call(lambda i: probe.step(loss=i * 1e-3), n)
        out["probe.step(6 scalars)"] = _per_call(
            lambda i: probe.step(
                loss=i * 1e-3, lr=3e-4, acc=0.5, tokens_per_s=1e5, grad_scale=1024.0, wd=0.01
            ),
            n,
        )
        try:
            import torch

            t = torch.tensor(0.5)
            out["probe.step(loss=CPU tensor)"] = _per_call(lambda i: probe.step(loss=t), n // 4)
        except ImportError:
            pass
    return out


def bench_tensorboard(n: int, tmp: str) -> tuple[float, float] | str:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception as e:  # tensorboard missing or broken
        return f"skipped: tensorboard not importable ({type(e).__name__})"
    w = SummaryWriter(log_dir=os.path.join(tmp, "tb"))

    def step(i: int) -> None:
        for name in SCALARS:
            w.add_scalar(name, i * 1e-3, i)

    _per_call(step, max(10, n // 10))
    r = _per_call(step, n)
    w.close()
    return r


def bench_wandb(n: int, tmp: str) -> tuple[float, float] | str:
    os.environ.setdefault("WANDB_SILENT", "true")  # its run summary would bury our table
    try:
        import wandb
    except ImportError:
        return "skipped: wandb not installed"
    run = wandb.init(mode="offline", dir=tmp, project="dltop-bench")

    def step(i: int) -> None:
        run.log({name: i * 1e-3 for name in SCALARS}, step=i)

    r = _per_call(step, n)
    run.finish()
    return r


def bench_minimal(n: int, tmp: str) -> tuple[tuple[float, float], str]:
    try:
        import orjson

        dumps, lib = orjson.dumps, "orjson"
    except ImportError:
        import msgspec

        dumps, lib = msgspec.json.encode, "msgspec"
    pc = time.perf_counter
    with open(os.path.join(tmp, "minimal.jsonl"), "ab") as f:
        write = f.write

        def step(i: int) -> None:
            t = pc()
            rec = {"step": i, "t": t, "loss": i * 1e-3, "lr": 3e-4, "acc": 0.5, "tokens_per_s": 1e5}
            write(dumps(rec) + b"\n")

        _per_call(step, n // 10)
        return _per_call(step, n), lib


# --- (e): overhead on a real training step -----------------------------------------------
ACCUM = 4  # micro-batches per optimizer step in the gradient-accumulation variants


def _mlp(torch: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024),
    )


class _ThreadClocks:
    """CPU time of a set of threads (the probe's writer, sampler and socket threads).

    ``time.process_time`` counts every thread of the process, so a probe's background
    threads (and those of the other variants' probes, alive during every round) would
    be charged to whatever step is being timed. Per-thread CPU clocks let the training
    thread's CPU be measured alone (process CPU minus the probes' threads, which also
    holds with several torch threads) and the background CPU be reported separately.
    """

    def __init__(self, threads: list[Any]) -> None:
        self.ids: list[int] = []
        for t in threads:
            with contextlib.suppress(Exception):  # no per-thread clocks here: counted as 0
                self.ids.append(time.pthread_getcpuclockid(t.ident))

    def cpu(self) -> float:
        total = 0.0
        for cid in self.ids:
            with contextlib.suppress(OSError):  # the thread ended
                total += time.clock_gettime(cid)
        return total


def _started(probe: Any) -> list[Any]:
    """Start ``probe``; the threads it started."""
    import threading

    before = set(threading.enumerate())
    probe.start()
    return [t for t in threading.enumerate() if t not in before]


def bench_training(rounds: int, tmp: str) -> dict[str, Any]:
    import torch

    x = torch.randn(64, 1024)
    y = torch.randn(64, 1024)
    xs, ys = x.chunk(ACCUM), y.chunk(ACCUM)
    mse = torch.nn.functional.mse_loss
    setups: dict[str, Any] = {}
    clocks: dict[str, _ThreadClocks] = {}
    variants = ("baseline", "probe_norm", "clip", "probe_clip", "accum", "probe_accum")
    for name in variants:
        model = _mlp(torch)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        probe = None
        if name.startswith("probe"):
            probe = Probe(path=os.path.join(tmp, f"{name}.jsonl"), model=model, optimizer=opt)
            clocks[name] = _ThreadClocks(_started(probe))
        setups[name] = (model, opt, probe)
    every_bg = _ThreadClocks([])
    every_bg.ids = [cid for c in clocks.values() for cid in c.ids]
    n_params = sum(p.numel() for p in setups["baseline"][0].parameters())

    def one_step(name: str) -> tuple[float, float]:
        """Wall time and the training thread's CPU time of one optimizer step."""
        model, opt, probe = setups[name]
        w0, c0, b0 = time.perf_counter(), time.process_time(), every_bg.cpu()
        if name in ("accum", "probe_accum"):
            for xm, ym in zip(xs, ys, strict=True):  # the probe measures the norm each time
                loss = mse(model(xm), ym) / ACCUM
                loss.backward()
        else:
            loss = mse(model(x), y)
            loss.backward()
        if name in ("clip", "probe_clip"):
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if name in ("probe_norm", "probe_accum"):
            probe.step(loss=loss)
        elif name == "probe_clip":
            probe.step(loss=loss, grad_norm=norm)
        wall = time.perf_counter() - w0
        return wall, time.process_time() - c0 - (every_bg.cpu() - b0)

    for name in setups:  # warm-up: allocator, AdamW state, the probes' first steps
        for _ in range(2):
            one_step(name)
    wall: dict[str, list[float]] = {name: [] for name in setups}
    cpu: dict[str, list[float]] = {name: [] for name in setups}
    order = list(setups)
    bg0 = {name: c.cpu() for name, c in clocks.items()}
    t0 = time.perf_counter()
    for r in range(rounds):  # one step of each variant per round, order rotated
        for name in order[r % len(order) :] + order[: r % len(order)]:
            w, c = one_step(name)
            wall[name].append(w)
            cpu[name].append(c)
    span = time.perf_counter() - t0
    # CPU seconds per wall second of each probe's own threads over the rounds
    bg_rate = {name: (c.cpu() - bg0[name]) / span for name, c in clocks.items()}
    # The A/B differences above are small next to a shared machine's noise, so the probe's
    # own work is also timed alone, on the same model, and set against the baseline step.
    model, opt, probe = setups["probe_norm"]
    tracker = probe._grad
    mse(model(x), y).backward()

    def timed(fn: Callable[[], Any], reps: int = 15) -> float:
        ts = []
        for _ in range(reps):
            c0 = time.thread_time()
            fn()
            ts.append(time.thread_time() - c0)
        return statistics.median(ts)

    tracker.want_layers = False
    t_norm = timed(tracker._measure)
    tracker.want_layers = True
    t_layers = timed(tracker._measure)
    tracker.want_layers = False
    opt.zero_grad()
    loss_t, norm_t = torch.tensor(0.5), torch.tensor(1.5)
    t_step = _per_call(lambda i: probe.step(loss=loss_t, grad_norm=norm_t), 2000)[0] * 1e-6
    every = probe.layers_every
    for _, _, p in setups.values():
        if p is not None:
            p.close()

    def overhead(series: dict[str, list[float]], variant: str, base: str) -> float:
        """Median over rounds of the paired ratio: robust to the machine's drifts."""
        return statistics.median(
            v / b - 1 for v, b in zip(series[variant], series[base], strict=True)
        )

    pairs = (("probe_norm", "baseline"), ("probe_clip", "clip"), ("probe_accum", "accum"))
    return {
        "n_params": n_params,
        "rounds": rounds,
        "wall": {k: statistics.median(v) for k, v in wall.items()},
        "cpu": {k: statistics.median(v) for k, v in cpu.items()},
        "over_wall": {v: overhead(wall, v, b) for v, b in pairs},
        "over_cpu": {v: overhead(cpu, v, b) for v, b in pairs},
        "bg_rate": bg_rate,
        "per_thread_clocks": bool(every_bg.ids),
        "t_norm": t_norm,
        "t_layers": t_layers,
        "t_step": t_step,
        "layers_every": every,
    }


# --- (f): hook dispatch cost ---------------------------------------------------------------
def bench_hooks(reps: int, tmp: str) -> dict[str, float]:
    """Backward time of a 200-parameter model with no probe, idle hooks and computing hooks."""
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(100)]  # 200 parameters, tiny work each
    model = torch.nn.Sequential(*layers)
    x = torch.randn(8, 16)

    def backward_time() -> float:
        loss = model(x).sum()
        t0 = time.perf_counter()
        loss.backward()
        dt = time.perf_counter() - t0
        model.zero_grad(set_to_none=True)
        return dt

    def measure() -> float:
        for _ in range(5):
            backward_time()
        return statistics.median(backward_time() for _ in range(reps))

    res = {"params": 200.0, "none": measure()}
    probe = Probe(path=os.path.join(tmp, "hooks.jsonl"), model=model, system=False, layers_every=0)
    probe.start()
    res["computing"] = measure()  # hooks + end-of-backward foreach norm
    tracker = probe._grad
    tracker.compute_total = False  # what an explicit grad_norm= does
    res["idle"] = measure()
    probe.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for (e) (default 1)")
    args = ap.parse_args()
    n_calls = 20_000 if args.quick else 200_000
    n_slow = 300 if args.quick else 2000
    rounds = 10 if args.quick else 40

    import torch

    torch.set_num_threads(args.threads)
    print(
        f"dltop probe overhead  (python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"{os.cpu_count()} cpus, torch threads {args.threads}{', quick' if args.quick else ''})\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        probe = bench_probe(n_calls, tmp)
        tb = bench_tensorboard(n_slow, tmp)
        wb = bench_wandb(n_slow, tmp)
        minimal, lib = bench_minimal(n_calls, tmp)
        print("(a-d) logging cost on the training thread, per step, µs (median / p90)")
        rows: list[tuple[str, Any]] = [
            *probe.items(),
            ("TensorBoard add_scalar x6", tb),
            ("wandb.log offline (6 scalars)", wb),
            (f"minimal {lib} line writer (6 scalars)", minimal),
        ]
        for name, r in rows:
            cell = r if isinstance(r, str) else f"{r[0]:9.2f} / {r[1]:9.2f}"
            print(f"  {name:<40} {cell}")
        p1, p6 = probe["probe.step(loss)"][0], probe["probe.step(6 scalars)"][0]
        print()
        if not isinstance(tb, str):
            print(f"  TensorBoard / probe.step(loss)        = {tb[0] / p1:8.0f}x   (target >= 70x)")
            print(f"  TensorBoard / probe.step(6 scalars)   = {tb[0] / p6:8.0f}x")
        if not isinstance(wb, str):
            print(f"  wandb / probe.step(6 scalars)         = {wb[0] / p6:8.0f}x")
        print(f"  probe.step(loss) / minimal writer     = {p1 / minimal[0]:8.2f}x")
        print(f"  probe.step(6 scalars) / minimal writer = {p6 / minimal[0]:7.2f}x")
        print(f"  probe.step(loss) median {p1:.2f} µs   (target <= 5 µs)\n")

        tr = bench_training(rounds, tmp)
        print(
            f"(e) training step of a {tr['n_params'] / 1e6:.1f} M-parameter MLP, batch 64, AdamW "
            f"({tr['rounds']} interleaved rounds; medians; overhead = median of paired ratios)"
        )
        print(
            f"  {'variant':<46} {'wall ms':>8} {'CPU ms':>8} {'over(wall)':>11} {'over(CPU)':>10}"
        )
        lines = [
            ("baseline (no probe)", "baseline"),
            ("probe computes the grad norm (default)", "probe_norm"),
            ("baseline with clip_grad_norm_", "clip"),
            ("probe, grad_norm= from clip_grad_norm_", "probe_clip"),
            (f"baseline, {ACCUM} accumulated micro-batches of 16", "accum"),
            (f"probe computes the norm, {ACCUM} micro-batches", "probe_accum"),
        ]
        for label, key in lines:
            ow = tr["over_wall"].get(key)
            oc = tr["over_cpu"].get(key)
            cells = ("", "") if ow is None else (f"{ow * 100:+10.2f}%", f"{oc * 100:+9.2f}%")
            print(
                f"  {label:<46} {tr['wall'][key] * 1e3:8.1f} {tr['cpu'][key] * 1e3:8.1f}"
                f" {cells[0]:>11} {cells[1]:>10}"
            )
        cpu_base, cpu_clip, cpu_accum = tr["cpu"]["baseline"], tr["cpu"]["clip"], tr["cpu"]["accum"]
        per_layers = tr["t_layers"] / tr["layers_every"]
        est_norm = tr["t_norm"] + per_layers + tr["t_step"]
        est_clip = per_layers + tr["t_step"]
        # with accumulation the norm (and, on a layers step, the per-layer pass) runs after
        # every backward: only the hooks can see the gradient before any clipping, and they
        # cannot know which backward is the last one before optimizer.step()
        est_accum = ACCUM * (tr["t_norm"] + per_layers) + tr["t_step"]
        print(
            f"  the probe's own work timed alone (CPU): grad norm {tr['t_norm'] * 1e3:.2f} ms, "
            f"per-layer pass {tr['t_layers'] * 1e3:.2f} ms every {tr['layers_every']} steps, "
            f"step() {tr['t_step'] * 1e6:.1f} µs"
        )
        print(
            f"  => estimated overhead: probe computes the norm {est_norm / cpu_base * 100:.2f} %, "
            f"norm from clipping {est_clip / cpu_clip * 100:.2f} %, "
            f"{ACCUM} micro-batches (norm per backward) {est_accum / cpu_accum * 100:.2f} % of the step"
        )
        if tr["per_thread_clocks"]:
            for key in ("probe_norm", "probe_clip", "probe_accum"):
                rate = tr["bg_rate"][key]
                print(
                    f"  background threads of {key:<12} (writer, sampler, socket): "
                    f"{rate * 1e3:6.2f} ms CPU per s = {rate * 100:5.2f} % of one core, "
                    f"~{rate * tr['wall'][key] / tr['cpu'][key] * 100:.2f} % of its step"
                )
        else:
            print("  background threads: n/a (no per-thread CPU clocks on this platform)")
        print(
            "  CPU = the training thread's CPU time: process CPU minus the probes' own threads,\n"
            "  which are reported separately above (they run beside the training, on any core).\n"
            "  Steadier than wall time on a shared machine. Targets: <= 1 % with the norm from\n"
            "  clipping; the computed-norm figures are reported as measured.\n"
        )

        hk = bench_hooks(60 if args.quick else 300, tmp)
        print("(f) post-accumulate-grad hooks, backward of 100 tiny Linear layers (200 params)")
        for key, label in (
            ("none", "no probe"),
            ("idle", "hooks idle (grad_norm= given)"),
            ("computing", "hooks + foreach norm"),
        ):
            extra = ""
            if key != "none":
                extra = f"   +{(hk[key] - hk['none']) * 1e6 / hk['params']:.2f} µs per parameter"
            print(f"  {label:<44} {hk[key] * 1e6:9.1f} µs{extra}")
        print()
    run_sustained(args.quick)
    print()
    run_adapters(args.quick, plain_step_us=p1)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
