"""The adapters' framework-neutral rules (``dltop.probe.adapter``), without a framework."""

from __future__ import annotations

import os

import pytest
from dltop.probe.adapter import eval_name, probe_kwargs, rank_path

AUTO = object()


def test_one_log_per_rank_follows_the_multi_rank_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "exp-7")  # no process group: the run id decides
    assert rank_path(AUTO, AUTO, 1, 4) == (
        os.path.join("dltop-runs", "exp-7", "rank1.jsonl"),
        "exp-7.rank1",
    )
    # an explicit file becomes a folder of rank files: one file for several ranks would mix them
    assert rank_path("runs/exp.jsonl", AUTO, 3, 4) == (
        os.path.join("runs/exp", "rank3.jsonl"),
        "exp.rank3",
    )
    assert rank_path("runs/exp/", AUTO, 0, 2)[0] == os.path.join("runs/exp", "rank0.jsonl")
    # one process: the path as given, or the probe's own default
    assert rank_path("runs/exp.jsonl", AUTO, 0, 1) == ("runs/exp.jsonl", None)
    assert rank_path(None, AUTO, 0, 4) == (None, None)
    assert rank_path("", AUTO, 0, 1) == (None, None)


def test_eval_metrics_are_named_as_the_rules_read_them() -> None:
    assert eval_name("val_loss") == "loss" and eval_name("eval_loss") == "loss"
    assert eval_name("val/acc") == "acc" and eval_name("val_loss_epoch") == "loss"
    assert eval_name("eval_squad_f1") == "squad_f1"
    assert eval_name("eval_runtime") is None and eval_name("eval_samples_per_second") is None
    assert eval_name("epoch") is None
    assert eval_name("val_") == "val_"  # a bare prefix is a name, not a prefix


def test_keyword_arguments_are_checked_at_the_users_line() -> None:
    assert probe_kwargs("X", {"path": "a.jsonl", "layers_every": 0}) == {
        "path": "a.jsonl",
        "layers_every": 0,
    }
    with pytest.raises(TypeError, match=r"X\(\) got unknown keyword argument\(s\) 'sockett'"):
        probe_kwargs("X", {"sockett": False})
    with pytest.raises(ValueError, match="nowhere to write"):
        probe_kwargs("X", {"path": "", "socket": False})
    assert probe_kwargs("X", {"path": None, "socket": False, "tcp": "127.0.0.1:0"})
