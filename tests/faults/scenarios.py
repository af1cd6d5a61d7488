"""The labelled catalogue: every training of the fault suite, with what it must be diagnosed as.

Labels come from the injected fault, written before looking at what the rules engine
says. ``expected`` is the set of alert ids that honestly describe the fault's symptom
(narrow: a NaN run may first show ``nan_loss`` or the gradient blow-up that precedes
it, nothing else); an empty set marks a healthy run, which must stay free of warnings.

``onset`` is where the fault starts to act, in steps. Some onsets are only known
while training (the first non-finite loss, the best held-out loss, the step that
crashed, the step the leak passed 256 MiB); ``train.py`` measures those from the
training's own numbers and writes them next to the log, and ``onset`` names them.
``budget`` is the longest acceptable delay from onset to alert, in steps: 0 for
NaN and crashes, 50 ("one check window") otherwise, except where the symptom needs a
longer window by definition, which the scenario's ``doc`` says.
"""

from __future__ import annotations

from tests.faults.data import DataFault
from tests.faults.healthy import HEALTHY
from tests.faults.spec import (
    BEST_EVAL,
    CRASH_STEP,
    FIRST_NONFINITE,
    RSS_256MIB,
    Scenario,
)

__all__ = ["BEST_EVAL", "CRASH_STEP", "FAULTS", "FIRST_NONFINITE", "HEALTHY", "RSS_256MIB"]
__all__ += ["SCENARIOS", "Scenario", "get"]


def _f(*ids: str) -> frozenset[str]:
    return frozenset(ids)


FAULTS: list[Scenario] = [
    Scenario(
        name="lr_too_high",
        doc="SGD (momentum 0.9) with lr=1.0 on an MLP regressor, ten times a sane value. "
        "The loss swings for a few steps, then the weights blow up and the loss turns "
        "Inf/NaN within ~20 steps. The NaN alert must sit on the first non-finite step; "
        "an explosion flagged before it is also right.",
        task="regression",
        model="mlp",
        optimizer="sgd",
        lr=1.0,
        steps=200,
        expected=_f("nan_loss", "nan_grad", "grad_explosion", "divergence", "loss_spike"),
        onset=FIRST_NONFINITE,
        budget=0,
        quick=True,
    ),
    Scenario(
        name="adam_lr_too_high",
        doc="Adam with lr=1.0 on a tiny transformer (an SGD-style lr given to Adam). Within "
        "10 steps the loss goes from 2.1 to ~1e5 and stays there, finite: the run has "
        "diverged from the start, so there is no healthy history to compare with.",
        task="tokens",
        model="transformer",
        optimizer="adam",
        lr=1.0,
        steps=200,
        expected=_f("divergence", "grad_explosion", "loss_spike"),
        onset=0,
    ),
    Scenario(
        name="lr_jump",
        doc="A StepLR typo: gamma=50 instead of 0.5 multiplies a working lr of 0.05 by 50 "
        "at step 150 on a CNN. Measured (seed 0): at step 151 the loss jumps 0.6 -> 5.4 and "
        "the grad norm 1.5 -> 20; then the network is wrecked (loss ~1.5, chance level, "
        "for the rest of the run) rather than NaN.",
        task="images",
        model="cnn",
        optimizer="sgd",
        lr=0.05,
        steps=300,
        schedule="jump",
        schedule_opts={"at": 150, "gamma": 50.0},
        expected=_f("grad_explosion", "loss_spike", "divergence", "nan_loss", "nan_grad"),
        onset=150,
        inject=150,
    ),
    Scenario(
        name="corrupt_record_nan",
        doc="One corrupt record (a NaN feature) in the batch of step 200 of a healthy Adam "
        "run on the CNN: the loss of that step is NaN, and so is every weight after the "
        "update. The NaN alert must sit on step 200.",
        task="images",
        model="cnn",
        optimizer="adam",
        lr=1e-3,
        steps=260,
        data_fault=DataFault(nan_at_fetch=200),
        expected=_f("nan_loss", "nan_grad"),
        onset=200,
        inject=200,
        budget=0,
    ),
    Scenario(
        name="unnormalized_inputs",
        doc="Four of 32 features left in raw units (x*1000+1000, e.g. prices next to "
        "z-scores) from the start, SGD lr=0.05. The first layer sees inputs ~1000x "
        "larger than it was initialised for: the loss explodes at once.",
        task="vectors",
        model="mlp",
        optimizer="sgd",
        lr=0.05,
        steps=200,
        data_fault=DataFault(raw_columns=4, raw_scale=1000.0),
        expected=_f("nan_loss", "nan_grad", "grad_explosion", "divergence", "loss_spike"),
        onset=0,
    ),
    Scenario(
        name="unnormalized_shard",
        doc="A second data shard read from step 150 skipped its normalisation (4 features "
        "x*100+100); every 3rd batch comes from it. Adam keeps the run alive, but each "
        "raw batch gives a loss (~50 vs ~1) and grad norm (~150 vs ~1.5) far above the "
        "run's history. (On an LSTM the same fault barely shows: its gates saturate.)",
        task="vectors",
        model="mlp",
        optimizer="adam",
        lr=1e-3,
        steps=300,
        data_fault=DataFault(raw_columns=4, raw_scale=100.0, raw_from_fetch=150, raw_every=3),
        expected=_f("grad_explosion", "loss_spike"),
        onset=150,
        inject=150,
        quick=True,
    ),
    Scenario(
        name="deep_sigmoid",
        doc="A 10-layer sigmoid MLP with default init and SGD: each sigmoid scales the "
        "backward signal by <= 1/4. Measured (seed 0): first-layer weight grad norm "
        "3e-9 against 0.86 for the last layer (ratio ~4e-9), steady over the run; the "
        "loss stays at 2.3 (chance for 10 classes).",
        task="vectors",
        model="mlp",
        model_opts={"depth": 10, "width": 64, "act": "sigmoid"},
        optimizer="sgd",
        lr=0.05,
        steps=300,
        expected=_f("vanishing_grad"),
        quick=True,
    ),
    Scenario(
        name="dead_relu",
        doc="Every hidden ReLU layer's bias initialised to -3 (a bad init): the "
        "pre-activations are negative for every input, so the hidden units output 0 "
        "and their gradients are exactly 0 (measured: 100 % zero gradient elements in "
        "every hidden weight); only the output bias learns, the loss stays ~2.30.",
        task="vectors",
        model="mlp",
        model_opts={"depth": 3, "relu_bias": -3.0},
        optimizer="adam",
        lr=1e-3,
        steps=300,
        expected=_f("dead_units"),
        quick=True,
    ),
    Scenario(
        name="tiny_lr",
        doc="SGD with lr=1e-5 (1e-1 with a lost digit): the loss is flat from step 0. "
        "A plateau is a lack of progress over windows (3 windows of >= 50 steps), so "
        "its budget is 200 steps from the start, not 50.",
        task="images",
        model="cnn",
        optimizer="sgd",
        lr=1e-5,
        steps=400,
        expected=_f("plateau"),
        budget=200,
    ),
    Scenario(
        name="no_zero_grad",
        doc="optimizer.zero_grad() forgotten: .grad accumulates the sum of every step's "
        "gradient, so the (pre-clipping) grad norm grows step after step and the "
        "updates overshoot. Measured (--raw, seed 0): grad norm 0.57 -> 7 (step 20) -> "
        "38 (step 40) -> 64; loss 2.3 -> 5.7 (step 40) -> 120 (step 200): a steady "
        "climb, not NaN and not a periodic swing.",
        task="vectors",
        model="mlp",
        optimizer="sgd",
        lr=0.05,
        steps=300,
        loop_fault="no_zero_grad",
        expected=_f("grad_explosion", "divergence"),
        onset=0,
    ),
    Scenario(
        name="graph_leak",
        doc="losses.append(loss) instead of loss.item(), in a loop that also calls "
        "backward(retain_graph=True) (the usual 'fix' for 'Trying to backward through the "
        "graph a second time'). Each kept loss keeps its whole graph and saved "
        "activations alive (measured: ~0.9 MiB per step, RSS 345 -> 891 MiB over 600 "
        "steps and ~10 s; the RSS rule needs several 1 Hz samples after warm-up, hence "
        "the long run). Without retain_graph, backward frees the saved tensors and the "
        "kept graphs cost only KiBs: no measurable leak in a few hundred steps. Onset: "
        "the step at which RSS had grown 256 MiB (~210).",
        task="vectors",
        model="wide_act_mlp",
        model_opts={"width": 1024, "blocks": 2, "mix": True},
        optimizer="sgd",
        lr=0.01,
        steps=600,
        batch_size=32,
        loop_fault="keep_graph",
        expected=_f("memory_growth"),
        onset=RSS_256MIB,
        seeds=(0, 1),
        timeout_s=240.0,
    ),
    Scenario(
        name="slow_loader",
        doc="A 20 ms sleep in __getitem__ (a slow decode) on a CNN whose step computes "
        "in a few ms: most of each step is spent waiting for data.",
        task="images",
        model="cnn",
        optimizer="adam",
        lr=1e-3,
        steps=200,
        data_fault=DataFault(sleep_s=0.02),
        expected=_f("data_bound"),
        quick=True,
    ),
    Scenario(
        name="loader_hang",
        doc="The loader blocks for 10 s at batch 120 (a network filesystem hiccup), then "
        "goes on: no step ends for 10 s after step 119 (the onset). The suite sets "
        "the stall floor to 5 s (`dltop check --set stall.floor_s=5`): the default 60 s "
        "floor is meant for real trainings, not a 3-second run.",
        task="vectors",
        model="mlp",
        optimizer="adam",
        lr=1e-3,
        steps=250,
        data_fault=DataFault(hang_at_fetch=120, hang_s=10.0),
        expected=_f("stall"),
        onset=119,
        inject=119,
        budget=1,
        check_set={"stall.floor_s": "5"},
    ),
    Scenario(
        name="oom_batch",
        doc="A batch-size ramp (doubling every 2 steps from 1024) under an address-space "
        "cap 256 MiB above the start: the CPU allocator fails with 'can't allocate "
        "memory' at batch 4096, step 4 (~80 KiB of activations per sample).",
        task="vectors",
        model="wide_act_mlp",
        optimizer="adam",
        lr=1e-3,
        steps=400,
        batch_size=1024,
        loop_fault="grow_batch",
        mem_cap_mib=256,
        expected=_f("oom"),
        pattern="cpu_oom",
        onset=CRASH_STEP,
        budget=0,
    ),
    Scenario(
        name="overfit_tiny",
        doc="A 256-wide MLP trained on 256 samples (20 % label noise) with Adam, evaluated "
        "every 10 steps on 1024 held-out samples: it memorises the training set; the "
        "held-out loss falls for ~60 steps (2.23 -> 1.89, seed 0), then climbs steadily "
        "(3.4 at step 400) while the training loss keeps falling. Onset: the best "
        "held-out loss.",
        task="vectors",
        model="mlp",
        model_opts={"width": 256},
        optimizer="adam",
        lr=1e-3,
        steps=400,
        batch_size=32,
        n_train=256,
        label_noise=0.2,
        eval_every=10,
        expected=_f("overfitting"),
        onset=BEST_EVAL,
        quick=True,
    ),
    Scenario(
        name="shape_bug",
        doc="x.view(32, -1) with a hard-coded batch size: 1000 samples give a last batch of "
        "8, which the view regroups into a (32, 8) matrix, and fc1 fails with 'mat1 and "
        "mat2 shapes cannot be multiplied' on the first such batch.",
        task="vectors",
        model="flat_mlp",
        model_opts={"batch_size": 32},
        optimizer="sgd",
        lr=0.05,
        steps=300,
        n_train=1000,
        expected=_f("crash"),
        pattern="shape_mismatch",
        onset=CRASH_STEP,
        budget=0,
        quick=True,
    ),
    Scenario(
        name="momentum_oscillation",
        doc="Heavy-ball SGD with momentum 0.995 on a least-squares problem: the iterate "
        "overshoots the minimum and swings back, so the loss rises and falls 2-4x in "
        "waves of ~20 steps while its trend decays slowly (too much momentum). Its "
        "healthy twin (momentum 0.9, lr 0.05) converges smoothly to the noise floor.",
        task="regression",
        model="mlp",
        model_opts={"depth": 0},
        optimizer="sgd",
        lr=0.02,
        momentum=0.995,
        batch_size=256,
        steps=400,
        expected=_f("oscillation"),
    ),
]

FAULTS += [
    Scenario(
        name="early_blowup",
        doc="Adam with lr=1.0 on a tanh MLP classifier from step 0: within a few steps the "
        "output weights grow by ~1 per step and the loss goes from 2.3 to ~35, "
        "where it stays (finite: tanh saturates instead of overflowing). No healthy "
        "history precedes it, so the alert must come from the first few steps.",
        task="vectors",
        model="mlp",
        model_opts={"act": "tanh"},
        optimizer="adam",
        lr=1.0,
        steps=200,
        expected=_f("divergence"),
        onset=0,
        budget=5,
    ),
    Scenario(
        name="dead_network",
        doc="Adam at lr=0.1 on a 3-layer ReLU MLP: the first updates push the hidden "
        "pre-activations below 0 for every input. Measured (seeds 0-2): the loss spikes "
        "to 40-60 at step 1; by step 3 ~98 % of the gradient elements of hidden layers "
        "2-3 are exactly 0, by step 50 100 % of every hidden weight's; the loss sits at "
        "chance (ln 10 = 2.30) from step ~3 (seed 1: the first layer is 80 % dead at "
        "step 50, all of it by 100). The spike before the units die may be flagged as a "
        "divergence: also right. Budget 100: the probe writes per-layer zero-gradient "
        "fractions every 50 steps (layers_every) and a dead layer needs 2 consecutive "
        "such records, so units that die after step 0 cannot be named before step 100.",
        task="vectors",
        model="mlp",
        model_opts={"depth": 3},
        optimizer="adam",
        lr=0.1,
        steps=300,
        expected=_f("dead_units", "divergence"),
        onset=0,
        budget=100,
    ),
    Scenario(
        name="stuck_at_chance",
        doc="Every label random (label_noise=1.0): there is nothing to learn, and with "
        "16384 samples the 300 steps see each one at most once, so nothing can be "
        "memorised either: the loss sits at chance (ln 10 = 2.30) from start to end. "
        "A plateau needs 3 windows of >= 50 steps, hence a budget of 200 steps.",
        task="vectors",
        model="mlp",
        optimizer="adam",
        lr=1e-3,
        steps=300,
        n_train=16384,
        label_noise=1.0,
        expected=_f("plateau"),
        budget=200,
    ),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in FAULTS + HEALTHY}


def get(name: str) -> Scenario:
    """The scenario called ``name``; a clear error listing the known names otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
