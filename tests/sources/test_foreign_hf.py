"""Hugging Face Trainer logs: a REAL tiny ``transformers.Trainer`` run writes
``trainer_state.json`` (and checkpoint folders holding one); ``dltop check`` and the viewer
read it by content. Hostile and corrupt states end in one line or counted skips."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.sources import foreign
from foreignkit import check_json, check_text, dltop, one_line_error

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer GPT-2 with a 32-token vocabulary, 20 steps on random tokens, CPU, logged
    every 2 steps, evaluated and checkpointed every 10: the output folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = tmp_path_factory.mktemp("hf") / "out"
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=32,
        n_positions=16,
        n_embd=16,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = transformers.GPT2LMHeadModel(cfg)

    class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, n: int) -> None:
            self.x = torch.randint(0, 32, (n, 16))

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.x[i], "labels": self.x[i]}

    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=20, logging_steps=2, save_steps=10,
        eval_strategy="steps", eval_steps=10, per_device_train_batch_size=4,
        per_device_eval_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True,
        learning_rate=1e-3, dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    transformers.Trainer(
        model=model, args=args, train_dataset=Tokens(64), eval_dataset=Tokens(8)
    ).train()
    return out


def _history(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["log_history"]  # type: ignore[no-any-return]


def test_check_reads_the_trainers_state_file_and_its_checkpoint_folder(
    hf_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = hf_run / "checkpoint-20"
    state = ckpt / "trainer_state.json"
    history = _history(state)
    train = [e for e in history if "loss" in e]
    evals = [e for e in history if "eval_loss" in e]
    assert len(train) == 10 and len(evals) == 2
    for source in (state, ckpt):
        assert foreign.detect(str(source)) == foreign.HF
        code, out = check_json(capsys, source)
        assert code in (0, 1, 2), out
        assert out["steps"] == len(train)
        assert out["status"] in ("finished", "unknown", "stalled", "running")
        assert set(out) >= {"source", "status", "reason", "steps", "alerts", "skipped_lines"}
        log = foreign.load(str(source))
        steps = [r for r in log.records if r["kind"] == "step"]
        assert [r["step"] for r in steps] == [e["step"] for e in train]  # real, sparse steps
        assert [r["loss"] for r in steps] == [e["loss"] for e in train]
        assert [r["grad_norm"] for r in steps] == [e["grad_norm"] for e in train]
        assert [r["lr"] for r in steps] == [e["learning_rate"] for e in train]
        ev = [r for r in log.records if r["kind"] == "eval"]
        assert [(r["step"], r["loss"]) for r in ev] == [(e["step"], e["eval_loss"]) for e in evals]
        meta = log.records[0]
        assert meta["kind"] == "meta" and "pid" not in meta
        assert meta["run_id"] == "checkpoint-20" if source == ckpt else "trainer_state.json"
        assert "Hugging Face" in meta["source"]
    code, text, _ = check_text(capsys, ckpt)
    assert "steps:   10" in text and "note:" in text


def test_an_output_folder_without_a_state_is_not_taken_for_one(hf_run: Path) -> None:
    # the Trainer's output folder holds checkpoint folders, not a state: the usual answer
    done = dltop("check", str(hf_run))
    assert "no .jsonl log" in one_line_error(done) or "holds no" in done.stderr


def test_a_finished_trainer_state_ends_the_run(tmp_path: Path, capsys: Any) -> None:
    state = {
        "global_step": 4,
        "log_history": [
            {"step": 2, "loss": 2.0, "learning_rate": 1e-3, "epoch": 0.5},
            {"step": 4, "loss": 1.9, "learning_rate": 1e-3, "epoch": 1.0},
            {"step": 4, "train_runtime": 1.0, "train_loss": 1.95, "total_flos": 1.0},
        ],
    }
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps(state))
    code, out = check_json(capsys, p)
    assert out["status"] == "finished" and out["steps"] == 2


HOSTILE: list[tuple[str, bytes, str | None]] = [
    ("truncated", b'{"log_history": [{"step": 1, "loss": 2.0}, {"step": 2, "lo', "corrupt"),
    ("not_a_list", b'{"log_history": {"step": 1, "loss": 2.0}}', "no log_history list"),
    ("not_an_object", b'{"log_history": 5', "corrupt"),
    ("deep", b'{"log_history": ' + b"[" * 100000 + b"]" * 100000 + b"}", None),
    ("array.json", b"[1, 2, 3]", "not a dltop log"),
    ("list", b"[1, 2, 3]", "not a trainer_state.json (not a JSON object)"),  # by its name
    ("garbage", b"garbage{{", "corrupt trainer_state.json"),
    ("empty", b"", "corrupt trainer_state.json"),
    # 3 M entries that are no Trainer's log: read in bounded memory, every one skipped
    ("objects", b'{"log_history": [' + b"{}," * 3_000_000 + b"{}]}", None),
]


@pytest.mark.parametrize(("name", "blob", "needle"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_corrupt_states_are_one_line(
    tmp_path: Path, name: str, blob: bytes, needle: str | None
) -> None:
    p = tmp_path / (name if name.endswith(".json") else "trainer_state.json")
    p.write_bytes(blob)
    done = dltop("check", str(p), "--json")
    assert done.returncode in (0, 1, 2, 3) and "Traceback" not in done.stderr
    if needle is not None:
        assert needle in one_line_error(done)


@pytest.mark.parametrize(
    ("name", "blob", "needle"),
    [
        ("trainer_state.json", b"garbage{{", "corrupt trainer_state.json"),
        ("trainer_state.json", b"", "corrupt trainer_state.json"),
        ("trainer_state.json", b"[1]", "not a JSON object"),
        ("metrics.csv", b"a;b;c\n1;2;3\n", "no 'step' column"),  # Lightning's, damaged
    ],
)
def test_a_checkpoint_folder_with_a_damaged_log_says_so(
    tmp_path: Path, name: str, blob: bytes, needle: str
) -> None:
    """It said "directory X holds no .jsonl log" of a checkpoint folder whose state is
    damaged; a folder of our logs beside such a file is still read as ours."""
    ckpt = tmp_path / "checkpoint-500"
    ckpt.mkdir()
    (ckpt / name).write_bytes(blob)
    done = dltop("check", str(ckpt))
    assert needle in one_line_error(done) and "no .jsonl" not in done.stderr
    (ckpt / "run.jsonl").write_bytes(b'{"kind": "step", "step": 1, "loss": 1.0}\n')
    done = dltop("check", str(ckpt))
    assert done.returncode == 0 and "steps:   1" in done.stdout, done.stdout + done.stderr


def test_bad_values_are_dropped_and_counted(tmp_path: Path, capsys: Any) -> None:
    history: list[Any] = [
        {"step": s, "loss": 2.0 - s / 100, "grad_norm": 1.0} for s in range(0, 200, 2)
    ]
    history += [
        {"step": 300, "loss": "high"},  # text
        {"step": 302, "loss": None, "grad_norm": [1]},  # wrong types
        {"step": "x", "loss": 1.0},  # no step
        {"step": 10**400, "loss": 1.0},  # a step beyond any run
        "an entry that is a string",
        {"step": 304, "loss": 1.0, "grad_norm": 10**400},  # huge int: +inf, kept as a value
        {"step": 306, "loss": 1e308 * 10},
    ]
    p = tmp_path / "trainer_state.json"
    text = json.dumps({"log_history": history}).replace("1e+309", "1e999")
    p.write_text(text)
    log = foreign.load(str(p))
    assert log.records and log.skipped >= 5  # counted as the entries are read
    assert any("skipped" in n for n in log.notes)
    last = [r for r in log.records if r["kind"] == "step"][-1]
    assert last["step"] == 306 and math.isinf(last["loss"])
    code, out = check_json(capsys, p)
    assert code in (1, 2) and out["skipped_lines"] == log.skipped
    assert any(a["severity"] == "critical" for a in out["alerts"]), "an infinite loss is news"


def test_too_many_entries_are_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    from dltop.tui.core.sources.foreign import hf

    monkeypatch.setattr(hf, "MAX_ENTRIES", 10)
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps({"log_history": [{"step": s, "loss": 1.0} for s in range(50)]}))
    log = foreign.load(str(p))
    assert log.steps == 10 and log.skipped == 40


def test_the_viewer_shows_a_trainer_state(hf_run: Path) -> None:
    from dltop.tui.app.app import DltopApp
    from dltop.tui.app.chart import Chart
    from test_app_support import screen_text

    state = hf_run / "checkpoint-20" / "trainer_state.json"

    async def go() -> None:
        app = DltopApp(str(state), follow=False, poll_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                if app.model.records >= 13 and "step 20" in screen_text(app):
                    break
                await pilot.pause(0.1)
            text = screen_text(app)
            assert "step 20" in text, text
            assert app.source_error is None
            with app.model.lock:
                assert app.model.engine.steps == 10
                assert app.model.store.series("loss") is not None
            assert app.query_one("#panel-loss", Chart) is not None

    asyncio.run(go())


def test_the_viewer_resolves_a_state_and_says_a_corrupt_one_in_a_line(tmp_path: Path) -> None:
    from dltop.tui import view_cmd
    from dltop.tui.app.app import DltopApp

    p = tmp_path / "trainer_state.json"
    p.write_text('{"log_history": [{"step": 2, "loss": 1.0}, {"st')
    # the command line reads it before any screen: one line, as `dltop check` says it
    for source in (p, tmp_path):  # the file, and its checkpoint-like folder
        with pytest.raises(view_cmd.SourceError, match="corrupt trainer_state.json"):
            view_cmd.resolve_source(str(source))
    # a good one is read there once, and the source shows that read
    good = tmp_path / "good" / "trainer_state.json"
    good.parent.mkdir()
    good.write_text('{"log_history": [{"step": 2, "loss": 1.0}, {"step": 4, "loss": 0.5}]}')
    assert view_cmd.resolve_source(str(good)) == good
    loads: list[str] = []
    real_load = foreign.load

    def counting(path: str, fmt: str | None = None) -> Any:
        loads.append(path)
        return real_load(path, fmt)

    async def shown() -> None:
        app = DltopApp(str(good), follow=False, poll_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                if app.model.store.steps == 2:
                    break
                await pilot.pause(0.05)
            assert app.model.store.steps == 2 and app.source_error is None

    foreign.load = counting  # type: ignore[assignment]
    try:
        asyncio.run(shown())
    finally:
        foreign.load = real_load  # type: ignore[assignment]
    assert loads == []  # the source took the command line's read
    assert foreign.take_preloaded(str(good), foreign.HF) is None  # handed over once
    # and from the command line: exit 3, one line, no screen (TERM=dumb, no tty)
    line = one_line_error(dltop(str(p)))
    assert line.startswith("dltop: ") and "corrupt trainer_state.json" in line

    async def go() -> None:
        app = DltopApp(str(p), follow=False, poll_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                if app.source_error:
                    break
                await pilot.pause(0.1)
            assert app.source_error is not None and "corrupt trainer_state.json" in app.source_error
            assert "\n" not in app.source_error

    asyncio.run(go())


def test_an_entry_named_like_our_own_fields_is_kept_apart(tmp_path: Path) -> None:
    """One list of our step fields for every reader (names.STEP_OWN): a Trainer entry's
    ``mem_allocated`` or ``compute_time`` is not our measurement of them."""
    import json as _json

    from dltop.tui.core.sources import foreign

    hist = [
        {"step": i, "loss": 1.0, "mem_allocated": 5.0, "compute_time": 0.5, "acc": 0.9}
        for i in range(1, 4)
    ]
    path = tmp_path / "trainer_state.json"
    path.write_text(_json.dumps({"log_history": hist}))
    (step, *_) = [r for r in foreign.load(str(path)).records if r["kind"] == "step"]
    assert step["x/mem_allocated"] == 5.0 and step["x/compute_time"] == 0.5
    assert "mem_allocated" not in step and "compute_time" not in step and step["acc"] == 0.9
