"""hf_lr_blowup: a Hugging Face Trainer fine-tune with a learning rate 1000x too high.

A small GPT-2 (2 layers, built from a config: no download) learns a toy language whose
next token follows from the last one. The learning rate was meant to be ``2e-3`` but a
config typo made it ``2.0``; the Trainer warms it up linearly over 120 steps. The loss
falls for a few steps while the lr is still small, then, as the lr climbs, it rises far
above its best and never comes back. The Trainer's own log would show it only every ``logging_steps``
steps, averaged; the adapter records every step.

The run uses the Hugging Face adapter, one line in the Trainer's callbacks:
``callbacks=[DltopCallback(path=...)]``. dltop raises ``divergence`` (the loss climbs
far above its best) and the gradient alerts that come with it; the checklist points at
the learning rate and its warm-up.

    python -m dltop.demos.hf_lr_blowup [--out PATH] [--device cpu|cuda] [--fast]
"""

import os
import tempfile

import torch
from dltop.demos._common import pacer, parse_args, setup

STEPS = 240


def main() -> None:
    args = parse_args("hf_lr_blowup")
    setup(args)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print("hf_lr_blowup: a GPT-2 fine-tune with lr 2.0 instead of 2e-3, so the loss blows up.")
    import transformers
    from dltop.probe.hf import DltopCallback

    transformers.logging.set_verbosity_error()
    vocab, length = 64, 32
    g = torch.Generator().manual_seed(0)
    step = torch.randint(1, 4, (vocab,), generator=g)  # next token = token + step[token]
    data = []
    for _ in range(512):
        ids = [int(torch.randint(0, vocab, (1,), generator=g))]
        for _ in range(length - 1):
            ids.append((ids[-1] + int(step[ids[-1]])) % vocab)
        t = torch.tensor(ids)
        data.append({"input_ids": t, "labels": t.clone()})
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=vocab, n_positions=length
    )
    model = transformers.GPT2LMHeadModel(config)
    pace = pacer(args)

    class Pace(transformers.TrainerCallback):
        def on_step_end(self, *a: object, **kw: object) -> None:
            pace()

    scratch = tempfile.TemporaryDirectory()  # the Trainer's output_dir: nothing is saved
    training = transformers.TrainingArguments(
        output_dir=scratch.name,
        max_steps=STEPS,
        per_device_train_batch_size=16,
        learning_rate=2.0,  # BUG: meant 2e-3
        warmup_steps=120,
        lr_scheduler_type="constant_with_warmup",
        logging_steps=50,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=args.device == "cpu",
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = transformers.Trainer(
        model=model,
        args=training,
        train_dataset=data,
        callbacks=[DltopCallback(path=args.out), Pace()],
    )
    trainer.train()
    scratch.cleanup()
    print(f"hf_lr_blowup: done, log in {args.out}")


if __name__ == "__main__":
    main()
