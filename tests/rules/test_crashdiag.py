"""Crash diagnosis against the catalogue, with messages from real torch errors.

Where the CPU build can raise the error, the test raises it with tiny tensors and
matches the real text, so a change in torch's wording fails here first. Errors only a
GPU or a cluster produces (CUDA OOM, device mismatch, NCCL) use messages copied from
torch's sources and real logs.
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from dltop.tui.core.diagnosis.checklists import load_checklist
from dltop.tui.core.rules import crashcatalogue
from dltop.tui.core.rules.crashcatalogue import CatalogueError, load_catalogue
from dltop.tui.core.rules.crashdiag import diagnose, last_user_frame, parse_bytes

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _fresh_cache():
    crashcatalogue.clear_cache()
    yield
    crashcatalogue.clear_cache()


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _event_from(exc: BaseException) -> dict:
    """The event record the probe writes for an exception that ended the run."""
    oom = isinstance(exc, (MemoryError, torch.OutOfMemoryError))
    return {
        "kind": "event",
        "type": "oom" if oom else "exception",
        "exc_type": _type_name(exc),
        "message": str(exc),
        "traceback": traceback.format_exception(exc),
    }


def _raise(fn: Callable[[], object]) -> dict:
    with pytest.raises(BaseException) as info:
        fn()
    event = _event_from(info.value)
    # the traceback's frames hold what raised (a DataLoader's iterator, whose queue feeder
    # thread would outlive the test): a process with threads left may not fork workers
    traceback.clear_frames(info.value.__traceback__)
    return event


def _msg(
    message: str, exc_type: str = "RuntimeError", ev_type: str = "exception", **more: object
) -> dict:
    return {"kind": "event", "type": ev_type, "exc_type": exc_type, "message": message, **more}


# ------------------------------------------------------------- the catalogue itself


def test_every_pattern_names_an_existing_checklist():
    catalogue = load_catalogue()
    for pattern in (*catalogue.patterns, catalogue.fallback):
        assert load_checklist(pattern.checklist) is not None, f"{pattern.id} -> {pattern.checklist}"
        assert pattern.alert in ("oom", "crash")


def test_catalogue_covers_the_issues_families():
    ids = {p.id for p in load_catalogue().patterns}
    wanted = {
        "cuda_oom", "cpu_oom", "shape_mismatch", "device_mismatch", "dtype_mismatch",
        "no_grad_fn", "inplace_modified", "index_error", "distributed_timeout",
        "dataloader_killed", "anomaly_nan",
    }  # fmt: skip
    assert wanted <= ids


# ------------------------------------------------------ real errors on the CPU


def test_real_matmul_shape_mismatch_with_both_shapes():
    d = diagnose(_raise(lambda: nn.Linear(128, 10)(torch.randn(32, 64))))
    assert d.pattern == "shape_mismatch" and d.alert_id == "crash" and d.checklist == "crash_shape"
    assert (d.details["a_rows"], d.details["a_cols"], d.details["b_rows"], d.details["b_cols"]) == (
        32,
        64,
        128,
        10,
    )
    assert "64 features" in d.summary and "expects 128" in d.summary


def test_real_batch_size_mismatch():
    d = diagnose(_raise(lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 2]))))
    assert d.pattern == "shape_mismatch"
    assert d.details["input_batch"] == 4 and d.details["target_batch"] == 3


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.randn(2, 3) + torch.randn(4, 3),
        lambda: torch.randn(4, 6).view(5, -1),
        lambda: nn.Conv2d(3, 8, 3)(torch.randn(2, 1, 8, 8)),
        lambda: torch.cat([torch.randn(2, 3), torch.randn(2, 4)]),
        lambda: torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 5, 6)),
        lambda: F.binary_cross_entropy_with_logits(torch.randn(4, 1), torch.rand(4)),
    ],
    ids=["broadcast", "view", "conv_channels", "cat", "bmm", "bce_target_size"],
)
def test_real_other_shape_errors(fn):
    assert diagnose(_raise(fn)).pattern == "shape_mismatch"


def test_real_state_dict_size_mismatch_is_its_own_pattern():
    d = diagnose(_raise(lambda: nn.Linear(3, 2).load_state_dict(nn.Linear(4, 2).state_dict())))
    assert d.pattern == "state_dict_mismatch" and d.details["parameter"] == "weight"
    assert d.details["checkpoint_shape"] == "torch.Size([2, 4])"


@pytest.mark.parametrize(
    ("fn", "found"),
    [
        (lambda: nn.Linear(3, 2)(torch.randn(4, 3, dtype=torch.float64)), "float64"),
        (lambda: nn.Linear(3, 2)(torch.tensor([[1, 2, 3]])), "int64"),
        (lambda: torch.randn(2, 3) @ torch.randn(3, 2, dtype=torch.float64), "float32"),
        (
            lambda: torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 6, dtype=torch.float64)),
            "float64",
        ),
        (lambda: F.binary_cross_entropy(torch.rand(4), torch.tensor([0, 1, 1, 0])), "int64"),
        (
            lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 0.0])),
            "float32",
        ),
        (
            lambda: F.cross_entropy(torch.randn(4, 3), torch.zeros(4, 3, dtype=torch.long)),
            "int64",
        ),
        (lambda: nn.Conv2d(1, 2, 3)(torch.randn(1, 1, 5, 5, dtype=torch.float64)), "float64"),
        (lambda: nn.Conv2d(1, 2, 3)(torch.randn(1, 1, 5, 5, dtype=torch.float16)), "float16"),
        (lambda: nn.LSTM(3, 4)(torch.randn(2, 1, 3, dtype=torch.float64)), "float64"),
        (lambda: nn.Embedding(10, 4)(torch.tensor([1.0, 2.0])), "float32"),
        (
            lambda: F.binary_cross_entropy_with_logits(torch.randn(4), torch.tensor([0, 1, 1, 0])),
            "float32",
        ),
    ],
    ids=[
        "linear_double",
        "linear_long",
        "matmul",
        "bmm",
        "bce_long",
        "ce_float",
        "ce_probs_long",
        "conv",
        "conv_half",
        "lstm",
        "embedding",
        "bce_logits_long",
    ],
)
def test_real_dtype_mismatches(fn, found):
    """Every spelling torch uses ("Double", "double", "torch.float64", "c10::Half",
    "torch.FloatTensor") comes out as one dtype name, so checklists can compare it."""
    d = diagnose(_raise(fn))
    assert d.pattern == "dtype_mismatch" and d.checklist == "crash_dtype"
    assert d.details["found"] == found


@pytest.mark.parametrize(
    ("message", "found", "expected"),
    [
        (
            "Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be "
            "the same",
            "float16",
            "float32",
        ),
        (
            "Input type (torch.DoubleTensor) and weight type (torch.FloatTensor) should be the same "
            "or input should be a MKLDNN tensor and weight is a dense tensor",
            "float64",
            "float32",
        ),
        (
            "Input type (torch.cuda.DoubleTensor) and weight type (torch.cuda.FloatTensor) should "
            "be the same",
            "float64",
            "float32",
        ),
    ],
)
def test_conv_tensor_types_on_one_device_are_a_dtype_mismatch(message, found, expected):
    # the wording of torch's conv check (a half input from autocast into a float32 layer;
    # float64 NumPy data): both tensors on the same device, so not a device problem
    d = diagnose(_msg(message))
    assert d.pattern == "dtype_mismatch" and d.checklist == "crash_dtype"
    assert (d.details["found"], d.details["expected"]) == (found, expected)


@pytest.mark.parametrize(
    ("message", "sides"),
    [
        (
            "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
            ("torch.cuda.FloatTensor", "torch.FloatTensor"),
        ),
        (
            "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the "
            "same or input should be a MKLDNN tensor and weight is a dense tensor",
            ("torch.FloatTensor", "torch.cuda.FloatTensor"),
        ),
        (
            "Input type (CUDAFloatType) and weight type (CPUFloatType) should be the same",
            ("CUDAFloatType", "CPUFloatType"),
        ),
    ],
)
def test_conv_tensor_types_with_exactly_one_cuda_side_are_a_device_mismatch(message, sides):
    d = diagnose(_msg(message))
    assert d.pattern == "device_mismatch"
    assert (d.details["input_type"], d.details["weight_type"]) == sides


def test_dtype_names_are_canonical():
    from dltop.tui.core.rules.crashdiag import canonical_dtype

    spellings = ["Double", "double", "torch.float64", "torch.DoubleTensor", "c10::Double"]
    assert {canonical_dtype(x) for x in spellings + ["torch.cuda.DoubleTensor"]} == {"float64"}
    assert canonical_dtype("CUDAHalfType") == "float16"
    assert canonical_dtype("Long, Int") == "Long, Int"  # not one dtype: the text as it was


def test_real_expected_scalar_type_wording():
    event = _raise(
        lambda: torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 6, dtype=torch.float64))
    )
    assert event["message"] == "expected scalar type Float but found Double"
    assert diagnose(event).details == {
        **diagnose(event).details,
        "expected": "float32",
        "found": "float64",
    }


def test_real_backward_without_grad_fn():
    d = diagnose(_raise(lambda: (torch.randn(3) * 2).sum().backward()))
    assert (
        d.pattern == "no_grad_fn"
        and d.checklist == "crash_no_grad_fn"
        and d.details["element"] == 0
    )


def _inplace():
    a = torch.randn(3, requires_grad=True)
    b = a.sigmoid()
    b.mul_(2)
    b.sum().backward()


def test_real_inplace_modification():
    d = diagnose(_raise(_inplace))
    assert d.pattern == "inplace_modified" and d.checklist == "crash_inplace"
    assert (
        d.details["op"] == "Sigmoid"
        and d.details["version"] == 1
        and d.details["expected_version"] == 0
    )


def test_real_inplace_on_a_leaf():
    d = diagnose(_raise(lambda: torch.randn(3, requires_grad=True).add_(1)))
    assert d.pattern == "inplace_modified"


def _twice():
    a = torch.randn(3, requires_grad=True)
    b = (a * a).sum()
    b.backward()
    b.backward()


def test_real_backward_twice():
    assert diagnose(_raise(_twice)).pattern == "backward_twice"


@pytest.mark.parametrize(
    ("fn", "index_detail"),
    [
        (lambda: nn.Embedding(10, 4)(torch.tensor([3, 12])), {}),
        (lambda: torch.randn(3)[5], {"index": 5, "dim": 0, "size": 3}),
        (lambda: torch.zeros(3).gather(0, torch.tensor([5])), {"index": 5}),
        (lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 2, 5])), {"target": 5}),
        (lambda: F.nll_loss(torch.randn(4, 3), torch.tensor([0, 1, 2, -5])), {"target": -5}),
        (lambda: F.one_hot(torch.tensor([5]), 3), {}),
    ],
    ids=["embedding", "getitem", "gather", "cross_entropy_target", "nll_target", "one_hot"],
)
def test_real_index_errors(fn, index_detail):
    d = diagnose(_raise(fn))
    assert d.pattern == "index_error" and d.checklist == "crash_index"
    assert index_detail.items() <= d.details.items()


def test_real_embedding_message_is_explained():
    d = diagnose(_raise(lambda: nn.Embedding(10, 4)(torch.tensor([3, 12]))))
    assert "num_embeddings" in d.summary


def _anomaly():
    with torch.autograd.detect_anomaly():
        a = torch.tensor([-1.0], requires_grad=True)
        a.sqrt().sum().backward()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_real_anomaly_mode_nan():
    d = diagnose(_raise(_anomaly))
    assert d.pattern == "anomaly_nan" and d.checklist == "crash_anomaly_nan"
    assert d.details["function"] == "SqrtBackward0" and d.details["output"] == 0


def test_real_cpu_allocator_failure():
    d = diagnose(_raise(lambda: torch.empty(2**62, dtype=torch.uint8)))
    assert d.pattern == "cpu_oom" and d.alert_id == "oom" and d.checklist == "oom_cpu"
    assert d.details["requested_bytes"] == 2**62


def test_python_memory_error():
    d = diagnose(_event_from(MemoryError()))
    assert d.pattern == "cpu_oom" and d.alert_id == "oom"


class _DiesAtSample(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before it sends anything
        return i


class _RaisesAtSample(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        raise IndexError("list index out of range")


def _as_list(batch: list) -> list:
    return batch  # no tensors cross the process boundary: the failure is the worker's death alone


def _drain(dataset) -> None:
    for _ in torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=1, collate_fn=_as_list):
        pass


def test_real_dataloader_worker_killed():
    d = diagnose(_raise(lambda: _drain(_DiesAtSample())))
    assert d.pattern == "dataloader_killed" and d.checklist == "crash_dataloader_killed"
    assert d.details["pids"]


def test_real_exception_in_a_dataloader_worker_is_not_an_index_pattern():
    d = diagnose(_raise(lambda: _drain(_RaisesAtSample())))
    assert d.pattern == "dataloader_worker_error" and d.details["inner_type"] == "IndexError"


def test_where_names_the_users_frame_not_torchs():
    d = diagnose(_raise(lambda: nn.Linear(128, 10)(torch.randn(32, 64))))
    assert d.details["where"].startswith("test_crashdiag.py:")


# ---------------------------------------------- messages a CPU cannot produce

CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
    "1.19 GiB is free. Including non-PyTorch memory, this process has 77.91 GiB memory in use. Of the "
    "allocated memory 76.50 GiB is allocated by PyTorch, and 107.49 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
CUDA_OOM_1X = (
    "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already "
    "allocated; 3.06 MiB free; 14.71 GiB reserved in total by PyTorch)"
)


def test_cuda_oom_with_the_allocators_numbers():
    event = _msg(CUDA_OOM, "torch.OutOfMemoryError", "oom")
    event["memory"] = {"allocated": 82141249536, "reserved": 82254000000}
    d = diagnose(event)
    assert d.pattern == "cuda_oom" and d.alert_id == "oom" and d.checklist == "oom"
    assert d.details["requested_bytes"] == 2 * 2**30
    assert d.details["free_bytes"] == int(1.19 * 2**30) and d.details["device"] == 0
    assert d.details["memory"]["allocated"] == 82141249536
    assert "2 GiB" in d.summary


def test_cuda_oom_old_wording_and_type_only():
    d = diagnose(_msg(CUDA_OOM_1X))
    assert d.pattern == "cuda_oom" and d.details["requested_bytes"] == 20 * 2**20
    assert d.details["total_bytes"] == int(15.78 * 2**30)
    assert diagnose(_msg("out of memory", "torch.cuda.OutOfMemoryError")).pattern == "cuda_oom"


@pytest.mark.parametrize(
    ("message", "devices"),
    [
        (
            "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
            ("cuda:0", "cpu"),
        ),
        (
            "Expected all tensors to be on the same device, but got mat2 is on cuda:0, different from other "
            "tensors on cpu (when checking argument in method wrapper_CUDA_mm)",
            ("cuda:0", "cpu"),
        ),
    ],
)
def test_device_mismatch(message, devices):
    d = diagnose(_msg(message))
    assert d.pattern == "device_mismatch" and d.checklist == "crash_device"
    assert (d.details["device_a"], d.details["device_b"]) == devices


def test_device_mismatch_conv_wording_is_not_a_dtype_error():
    d = diagnose(
        _msg(
            "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same"
        )
    )
    assert d.pattern == "device_mismatch"


def test_meta_device_mismatch():
    # torch.randn(2) + torch.randn(2, device="meta") on torch 2.13 (8 s to raise: text only here)
    d = diagnose(_msg("Tensor on device meta is not on the expected device cpu!"))
    assert d.pattern == "device_mismatch" and (d.details["device_a"], d.details["device_b"]) == (
        "meta",
        "cpu",
    )


def test_device_side_assert():
    message = (
        "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some "
        "other API call, so the stacktrace below might be incorrect."
    )
    d = diagnose(_msg(message, "torch.AcceleratorError"))
    assert d.pattern == "index_error" and "CUDA_LAUNCH_BLOCKING" in d.summary
    d = diagnose(
        _msg(
            "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed."
        )
    )
    assert d.pattern == "index_error" and d.details["assertion"] == "t >= 0 && t < n_classes"


def test_nccl_watchdog_timeout():
    message = (
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1742, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600046 milliseconds before timing out."
    )
    d = diagnose(_msg(message, "torch.distributed.DistBackendError"))
    assert d.pattern == "distributed_timeout" and d.checklist == "crash_distributed"
    assert d.details["op"] == "ALLREDUCE" and d.details["timeout_ms"] == 600000
    assert d.details["rank"] == 3 and d.details["seq"] == 1742


@pytest.mark.parametrize(
    "message",
    [
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:29500",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
    ],
)
def test_other_distributed_failures(message):
    assert diagnose(_msg(message)).pattern == "distributed_timeout"


def test_dataloader_killed_by_signal_wording():
    message = (
        "DataLoader worker (pid 4242) is killed by signal: Killed. It is possible that dataloader's workers "
        "are out of shared memory. Please try to raise your shared memory limit."
    )
    d = diagnose(_msg(message))
    assert (
        d.pattern == "dataloader_killed"
        and d.details["pid"] == 4242
        and d.details["signal"] == "Killed"
    )


# -------------------------------------------------------------- not diagnosed


def test_keyboard_interrupt_is_not_a_crash():
    assert (
        diagnose(
            {
                "type": "exception",
                "exc_type": "KeyboardInterrupt",
                "message": "",
                "interrupted": True,
            }
        )
        is None
    )
    assert diagnose({"type": "exception", "exc_type": "KeyboardInterrupt", "message": ""}) is None
    assert (
        diagnose(
            {"type": "exception", "exc_type": "RuntimeError", "message": "x", "interrupted": True}
        )
        is None
    )


def test_other_events_are_not_crashes():
    assert diagnose({"type": "signal", "signal": "SIGTERM"}) is None
    assert diagnose({"type": "exit", "status": "ok"}) is None
    assert diagnose("not a record") is None  # type: ignore[arg-type]


def test_unknown_exception_falls_back_to_the_crash_checklist():
    d = diagnose(_raise(lambda: {}["missing"]))
    assert d.pattern == "unknown" and d.alert_id == "crash" and d.checklist == "crash"
    assert d.details["exc_type"] == "KeyError"


def test_an_unrecognised_oom_event_is_still_an_oom():
    d = diagnose(_msg("Some accelerator ran dry", "SomeError", "oom"))
    assert d.pattern == "oom_other" and d.alert_id == "oom"


def test_a_strange_event_does_not_raise():
    d = diagnose(
        {"type": "exception", "exc_type": None, "message": None, "traceback": [{"file": "a.py"}, 3]}
    )
    assert d.pattern == "unknown"


def test_first_match_wins_in_catalogue_order():
    # "size mismatch" (shape) inside a load_state_dict error: the specific pattern first.
    d = diagnose(
        _msg("Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: ...")
    )
    assert d.pattern == "state_dict_mismatch"


# -------------------------------------------------------- helpers and bad data


def test_parse_bytes():
    assert parse_bytes("2.00 GiB") == 2 * 2**30
    assert parse_bytes("512 KiB") == 512 * 1024
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes("17592186044416") == 2**44
    with pytest.raises(ValueError):
        parse_bytes("lots")


def test_last_user_frame_accepts_text_lines_and_frame_dicts():
    text = 'Traceback:\n  File "/home/u/train.py", line 42, in main\n  File "/x/site-packages/torch/nn/modules/linear.py", line 125, in forward\n'
    assert last_user_frame(text) == "train.py:42 in main"
    assert last_user_frame(text.splitlines()) == "train.py:42 in main"
    assert (
        last_user_frame([{"filename": "/a/model.py", "lineno": 7, "name": "forward"}])
        == "model.py:7 in forward"
    )
    probe_frames = [  # the probe's format: outermost first
        {"file": "/home/u/train.py", "line": 42, "func": "main", "code": "out = model(x)"},
        {"file": "/home/u/model.py", "line": 7, "func": "forward", "code": "return self.fc(x)"},
        {
            "file": "/v/lib/python3.11/site-packages/torch/nn/linear.py",
            "line": 125,
            "func": "forward",
        },
    ]
    assert last_user_frame(probe_frames) == "model.py:7 in forward"
    assert last_user_frame(None) is None and last_user_frame("no frames") is None


def _catalogue_at(tmp_path: Path, text: str) -> Path:
    (tmp_path / "crash_patterns.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_a_garbled_catalogue_is_a_one_line_error_and_diagnose_survives(tmp_path):
    root = _catalogue_at(tmp_path, "[[pattern]\nid = ")
    with pytest.raises(CatalogueError) as info:
        load_catalogue(root)
    assert "crash_patterns.toml is not valid TOML" in str(info.value) and "\n" not in str(
        info.value
    )
    d = diagnose(_msg(CUDA_OOM, "torch.OutOfMemoryError", "oom"), root=root)
    assert d.pattern == "unknown" and d.alert_id == "oom" and "catalogue_error" in d.details


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "non-empty"),
        (
            '[[pattern]]\nid = "a"\nalert = "boom"\nchecklist = "crash"\ntitle = "t"\nsummary = "s"\nmatch = ["x"]\n',
            "alert must be",
        ),
        (
            '[[pattern]]\nid = "a"\nalert = "crash"\nchecklist = "crash"\ntitle = "t"\nsummary = "s"\nmatch = ["(unclosed"]\n',
            "bad regex",
        ),
        (
            '[[pattern]]\nid = "a"\nalert = "crash"\nchecklist = "crash"\ntitle = "t"\nsummary = "s"\n',
            "needs exc_type",
        ),
    ],
)
def test_invalid_catalogues_are_rejected(tmp_path, text, complaint):
    with pytest.raises(CatalogueError, match=complaint):
        load_catalogue(_catalogue_at(tmp_path, text))


def test_a_missing_catalogue_is_reported(tmp_path):
    with pytest.raises(CatalogueError, match="missing"):
        load_catalogue(tmp_path)


# ------------------------------------------------ one example per catalogue regex
# Real torch 2.13 CPU output where the tests above raise it; otherwise copied from
# torch's sources (the strings in libtorch / torch/utils/data) and real logs.

EXAMPLES: list[tuple[str, str]] = [
    (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 4611686018427387904 bytes. Error code 12 (Cannot allocate memory)",
        "cpu_oom",
    ),
    (CUDA_OOM, "cuda_oom"),
    (CUDA_OOM_1X, "cuda_oom"),
    (
        "MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.02 GB, max allowed: "
        "18.13 GB). Tried to allocate 256.00 MB on private pool.",
        "cuda_oom",
    ),
    (
        "CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "cuda_oom",
    ),
    ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda_oom"),
    (
        "DataLoader worker (pid 4242) is killed by signal: Killed. It is possible that dataloader's "
        "workers are out of shared memory. Please try to raise your shared memory limit.",
        "dataloader_killed",
    ),
    ("DataLoader worker (pid(s) 6535) exited unexpectedly", "dataloader_killed"),
    (
        "DataLoader worker (pid 77) exited unexpectedly with exit code 1. Details are lost due to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
        "dataloader_killed",
    ),
    (
        "unable to write to file </torch_18692_1954506624>: No space left on device (28)",
        "dataloader_killed",
    ),
    (
        "Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "/data.py", line 9, in __getitem__\nValueError: bad sample',
        "dataloader_worker_error",
    ),
    (
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1742, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.",
        "distributed_timeout",
    ),
    (
        "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
        "1800000ms for recv operation to complete",
        "distributed_timeout",
    ),
    (
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO)",
        "distributed_timeout",
    ),
    ("Socket Timeout", "distributed_timeout"),
    ("Connection reset by peer", "distributed_timeout"),
    ("Function 'SqrtBackward0' returned nan values in its 0th output.", "anomaly_nan"),
    (
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation: [torch.FloatTensor [3]], which is output 0 of SigmoidBackward0, is at version 1; "
        "expected version 0 instead.",
        "inplace_modified",
    ),
    (
        "a leaf Variable that requires grad is being used in an in-place operation.",
        "inplace_modified",
    ),
    (
        "Trying to backward through the graph a second time (or directly access saved tensors after "
        "they have already been freed).",
        "backward_twice",
    ),
    ("element 0 of tensors does not require grad and does not have a grad_fn", "no_grad_fn"),
    (
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
        "device_mismatch",
    ),
    (
        "Expected all tensors to be on the same device, but got mat2 is on cuda:0, different from "
        "other tensors on cpu (when checking argument in method wrapper_CUDA_mm)",
        "device_mismatch",
    ),
    (
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
        "device_mismatch",
    ),
    (
        "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same",
        "device_mismatch",
    ),
    ("Tensor on device meta is not on the expected device cpu!", "device_mismatch"),
    ("expected scalar type Float but found Double", "dtype_mismatch"),
    ("Found dtype Long but expected Float", "dtype_mismatch"),
    ("mat1 and mat2 must have the same dtype, but got Double and Float", "dtype_mismatch"),
    ("expected m1 and m2 to have the same dtype, but got: float != double", "dtype_mismatch"),
    ("expected target dtype to be Long or Byte, but got Float", "dtype_mismatch"),
    (
        "Expected floating point type for target with class probabilities, got Long",
        "dtype_mismatch",
    ),
    ("Input type (double) and bias type (float) should be the same", "dtype_mismatch"),
    (
        "RNN input dtype (torch.float64) does not match weight dtype (torch.float32). Convert input: "
        "input.to(torch.float32), or convert model: model.to(torch.float64)",
        "dtype_mismatch",
    ),
    (
        "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, "
        "Int; but got torch.FloatTensor instead (while checking arguments for embedding)",
        "dtype_mismatch",
    ),
    ("mixed dtype (CPU): all inputs must share same datatype.", "dtype_mismatch"),
    ("result type Float can't be cast to the desired output type Long", "dtype_mismatch"),
    (
        "Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a param with "
        "shape torch.Size([2, 4]) from checkpoint, the shape in current model is torch.Size([2, 3]).",
        "state_dict_mismatch",
    ),
    ("mat1 and mat2 shapes cannot be multiplied (32x64 and 128x10)", "shape_mismatch"),
    ("Expected input batch_size (4) to match target batch_size (3).", "shape_mismatch"),
    (
        "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0",
        "shape_mismatch",
    ),
    ("shape '[5, -1]' is invalid for input of size 24", "shape_mismatch"),
    (
        "Given groups=1, weight of size [8, 3, 3, 3], expected input[2, 1, 8, 8] to have 3 channels, "
        "but got 1 channels instead",
        "shape_mismatch",
    ),
    (
        "Target size (torch.Size([4])) must be the same as input size (torch.Size([4, 1]))",
        "shape_mismatch",
    ),
    (
        "Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor "
        "number 1 in the list.",
        "shape_mismatch",
    ),
    (
        "size mismatch, m1: [32 x 64], m2: [128 x 10] at /pytorch/aten/src/TH/generic/THTensorMath.cpp:41",
        "shape_mismatch",
    ),
    (
        "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 5].",
        "shape_mismatch",
    ),
    ("CUDA error: device-side assert triggered", "index_error"),
    (
        "Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion "
        "`srcIndex < srcSelectDimSize` failed.",
        "index_error",
    ),
    ("index out of range in self", "index_error"),
    ("Target 5 is out of bounds.", "index_error"),
    ("index 5 is out of bounds for dimension 0 with size 3", "index_error"),
    ("Class values must be smaller than num_classes.", "index_error"),
]


@pytest.mark.parametrize(("message", "pattern"), EXAMPLES, ids=lambda v: str(v)[:40])
def test_each_example_is_diagnosed_as_its_pattern(message, pattern):
    assert diagnose(_msg(message)).pattern == pattern


def test_every_catalogue_regex_has_an_example():
    for p in load_catalogue().patterns:
        mine = [m for m, pattern in EXAMPLES if pattern == p.id]
        for regex in [m.regex for m in p.match] + list(p.extract):
            assert any(regex.search(m) for m in mine), f"{p.id}: no example for {regex.pattern!r}"


# ------------------------------------------------------ causes ("raise ... from")


def _probe_event(exc: BaseException) -> dict:
    """The event the real probe writes for ``exc``, cause included."""
    from dltop.probe.crash import CrashRecorder

    return CrashRecorder(lambda rec: None, lambda sync: None, lambda: 7).describe(exc)


def _wrapped(fn: Callable[[], object], depth: int = 1) -> BaseException:
    """Raise what fn raises, wrapped ``depth`` times the way trainers do (raise X from exc)."""
    try:
        fn()
    except Exception as inner:  # noqa: BLE001 - the test wants whatever torch raised
        exc: BaseException = inner
        for n in range(depth):
            try:
                raise RuntimeError(f"training step failed (wrapper {n})") from exc
            except RuntimeError as outer:
                exc = outer
        return exc
    raise AssertionError("fn did not raise")


def test_a_wrapped_error_is_named_by_its_cause():
    event = _probe_event(_wrapped(lambda: nn.Linear(128, 10)(torch.randn(32, 64))))
    assert event["cause"]["message"].startswith("mat1 and mat2 shapes")  # what the probe keeps
    d = diagnose(event)
    assert d.pattern == "shape_mismatch" and d.checklist == "crash_shape"
    assert (d.details["a_cols"], d.details["b_rows"]) == (64, 128)
    assert d.details["exc_type"] == "RuntimeError" and d.details["cause_depth"] == 1


def test_a_chain_of_causes_is_followed_and_the_top_message_wins_when_it_matches():
    shape = "mat1 and mat2 shapes cannot be multiplied (32x64 and 128x10)"
    chained = _msg(
        "epoch 3 failed",
        cause={"exc_type": "RuntimeError", "message": "step 7 failed", "cause": {
            "exc_type": "RuntimeError", "message": shape}},
    )  # fmt: skip
    d = diagnose(chained)
    assert d.pattern == "shape_mismatch" and d.details["cause_depth"] == 2
    # a known top message is not overridden by its cause
    top = _msg("index 5 is out of bounds for dimension 0 with size 3", cause={"message": shape})
    assert diagnose(top).pattern == "index_error"
    # an OOM hidden behind a wrapper is still an out-of-memory alert
    oom = _msg("step failed", cause={"exc_type": "torch.OutOfMemoryError", "message": "CUDA out "
               "of memory. Tried to allocate 2.00 GiB"})  # fmt: skip
    d = diagnose(oom)
    assert (d.pattern, d.alert_id, d.details["requested_bytes"]) == ("cuda_oom", "oom", 2 * 2**30)
    # nothing known anywhere: the fallback, and a malformed cause changes nothing
    assert diagnose(_msg("odd", cause={"message": "also odd"})).pattern == "unknown"
    assert diagnose(_msg("odd", cause="not a dict")).pattern == "unknown"


# ------------------------------------- crash checklists answered from the details


def _marks(event: dict, steps: int = 5) -> dict[str, str | None]:
    """Feed a run of ``steps`` steps and the crash event through the real engine; the
    crash alert's checklist steps, marked from its evidence and the run's facts."""
    from dltop.tui.core.diagnosis.checklist_eval import evaluate
    from dltop.tui.core.diagnosis.checklists import checklist_for
    from dltop.tui.core.rules import RuleEngine

    eng = RuleEngine()
    eng.feed({"kind": "meta", "v": 1, "t": 1.0})
    for i in range(steps):
        eng.feed({"kind": "step", "step": i, "t": 2.0 + i, "loss": 1.0})
    eng.feed(event | {"step": steps})
    (alert,) = [a for a in eng.alerts() if a.id in ("crash", "oom")]
    return {c.step.id: c.mark for c in evaluate(checklist_for(alert), eng.facts(), alert)}


def test_index_checklist_reads_target_index_and_size():
    too_big = _marks(_raise(lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 5, 1, 2]))))
    assert too_big["label_too_large"] == "yes"
    negative = _marks(
        _raise(lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, -3, 1, 2])))
    )
    assert negative["label_too_large"] == "no"
    past_end = _marks(_raise(lambda: torch.randn(3)[5]))
    assert (past_end["index_past_end"], past_end["negative"]) == ("yes", "no")
    below = _marks(_raise(lambda: torch.randn(3)[-5]))
    assert (below["index_past_end"], below["negative"]) == ("no", "yes")


def test_dataloader_killed_checklist_reads_the_signal():
    killed = _marks(_msg("DataLoader worker (pid 4242) is killed by signal: Killed. "))
    assert (killed["oom_killer"], killed["shared_memory"]) == ("yes", "no")
    bus = _marks(
        _msg(
            "DataLoader worker (pid 20) is killed by signal: Bus error. It is possible that "
            "dataloader's workers are out of shared memory. Please try to raise your shared "
            "memory limit."
        )
    )
    assert (bus["oom_killer"], bus["shared_memory"]) == ("no", "yes")


def test_shape_checklist_compares_the_input_features_with_the_layer():
    fewer = _marks(_raise(lambda: nn.Linear(128, 10)(torch.randn(32, 64))))
    assert fewer["fewer_features"] == "yes" and fewer["first_batch"] == "no"
    more = _marks(_raise(lambda: nn.Linear(16, 2)(torch.randn(4, 32))), steps=0)
    assert more["fewer_features"] == "no" and more["first_batch"] == "yes"


def test_dtype_checklist_names_float64_targets_and_indices():
    double = _marks(_raise(lambda: nn.Linear(3, 2)(torch.randn(4, 3, dtype=torch.float64))))
    assert double["numpy_float64"] == "yes" and double["targets"] is None
    target = _marks(
        _raise(lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 0.0])))
    )
    assert target["targets"] == "yes" and target["numpy_float64"] == "no"
    index = _marks(_raise(lambda: nn.Embedding(10, 4)(torch.tensor([1.0, 2.0]))))
    assert index["indices"] == "yes"


def test_distributed_checklist_reads_the_timeout_and_the_progress():
    def nccl(timeout_ms: int) -> dict:
        return _msg(
            f"[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
            f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) ran for "
            f"{timeout_ms + 46} milliseconds before timing out.",
            "torch.distributed.DistBackendError",
        )

    default = _marks(nccl(600000))
    assert default["default_timeout"] == "yes" and default["before_first_step"] == "no"
    long = _marks(nccl(3600000), steps=0)
    assert long["default_timeout"] == "no" and long["before_first_step"] == "yes"
