"""The ticks sidecar (``<log>.dltop-ticks.json``) is untrusted input: hostile ones, as real files.

It used to be read whole with ``json.loads(read_text())``: deep nesting crashed the
viewer at start (RecursionError), a symlink to /dev/zero read until memory ran out, a
FIFO blocked the start forever. Now each of these is ignored with one warning, the viewer
starts (Pilot) and shows the run, and saving never writes through a planted symlink.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.core.diagnosis.ticks import (
    MAX_BYTES,
    MAX_DEPTH,
    Ticks,
    nested_too_deep,
    sidecar_path,
)
from dltop.tui.core.text.fmt import nbytes
from test_app_live import wait_for
from test_app_support import end_time, screen_text, write_log

STEPS = 30
OTHER_UID = 54321  # a user that owns nothing here
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _log(tmp_path: Path) -> Path:
    return write_log(tmp_path / "run.jsonl", "healthy", STEPS)


def _deep(side: Path) -> None:
    side.write_text('{"v": 1, "ticks": ' + "[" * 100_000 + "]" * 100_000 + "}")


def _deep_unclosed(side: Path) -> None:
    side.write_text("[" * 200_000)


def _dev_zero(side: Path) -> None:
    side.symlink_to("/dev/zero")


def _fifo(side: Path) -> None:
    os.mkfifo(side)


def _huge(side: Path) -> None:
    with open(side, "wb") as f:  # 50 MB of real (sparse) file
        f.truncate(50 << 20)


def _a_list(side: Path) -> None:
    side.write_text('[{"ticks": {}}]')


def _ticks_a_list(side: Path) -> None:
    side.write_text('{"v": 1, "ticks": ["loss@1", "a"]}')


def _loop(side: Path) -> None:
    side.symlink_to(side)


def _not_utf8(side: Path) -> None:
    side.write_bytes(b'{"ticks": {"\xff": []}}')


def _to_another_users_file(side: Path) -> None:
    """A symlink (ours) to a well-formed sidecar outside the run's folder owned by
    another user: we follow our own link, but do not trust what it leads to."""
    target = side.parent.parent / f"{side.parent.name}-elsewhere.json"
    target.write_text('{"v": 1, "ticks": {"loss_nan@5": ["lr"]}}')
    os.chown(target, OTHER_UID, OTHER_UID)
    side.symlink_to(target)


def _someone_elses_link(side: Path) -> None:
    target = side.parent / "mine.json"
    target.write_text('{"v": 1, "ticks": {"loss_nan@5": ["lr"]}}')
    side.symlink_to(target)
    os.lchown(side, OTHER_UID, OTHER_UID)


def _someone_elses_file(side: Path) -> None:
    side.write_text('{"v": 1, "ticks": {"loss_nan@5": ["lr"]}}')
    os.chown(side, OTHER_UID, OTHER_UID)


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deep nesting": (_deep, f"nested deeper than {MAX_DEPTH}"),
    "deep unclosed": (_deep_unclosed, f"nested deeper than {MAX_DEPTH}"),
    "symlink to /dev/zero": (_dev_zero, "character device"),
    "FIFO": (_fifo, "FIFO"),
    "50 MB": (_huge, f"over the {nbytes(MAX_BYTES)}"),  # in units: "over the 1 MiB"
    "a list": (_a_list, "a JSON list, not an object"),
    "ticks a list": (_ticks_a_list, '"ticks" is a JSON list'),
    "symlink loop": (_loop, "leads nowhere"),
    "not UTF-8": (_not_utf8, "not JSON"),
}
ROOT_ONLY: dict[str, tuple[Callable[[Path], None], str]] = {
    "symlink to another user's file": (_to_another_users_file, "owned by another user"),
    "another user's symlink": (_someone_elses_link, "symlink owned by another user"),
    "another user's file": (_someone_elses_file, "owned by another user"),
}


def _cases() -> list[object]:
    return [pytest.param(*v, id=k) for k, v in HOSTILE.items()] + [
        pytest.param(*v, id=k, marks=as_root) for k, v in ROOT_ONLY.items()
    ]


@pytest.mark.parametrize(("plant", "needle"), _cases())
def test_a_hostile_sidecar_is_ignored_with_one_warning(
    tmp_path: Path, plant: Callable[[Path], None], needle: str
) -> None:
    log = _log(tmp_path)
    plant(sidecar_path(log))
    ticks = Ticks(log)
    assert ticks.error is not None and needle in ticks.error, ticks.error
    assert "\n" not in ticks.error and ticks.ticked("loss_nan@5") == set()


def test_wrong_shapes_inside_are_dropped_and_counted(tmp_path: Path) -> None:
    log = _log(tmp_path)
    sidecar_path(log).write_text(
        json.dumps({"v": 1, "ticks": {"a@1": ["lr", 3, None, "x" * 999], "b@2": 7, "c@3": ["s"]}})
    )
    ticks = Ticks(log)
    assert ticks.ticked("a@1") == {"lr"} and ticks.ticked("c@3") == {"s"}
    assert ticks.ticked("b@2") == set()
    assert ticks.error is not None and "4 malformed entries ignored" in ticks.error


@as_root
def test_the_log_owners_sidecar_is_trusted(tmp_path: Path) -> None:
    """A colleague's log with the colleague's own ticks next to it reads fine."""
    log = _log(tmp_path)
    side = sidecar_path(log)
    side.write_text('{"v": 1, "ticks": {"loss_nan@5": ["lr"]}}')
    os.chown(side, OTHER_UID, OTHER_UID)
    os.chown(log, OTHER_UID, OTHER_UID)
    ticks = Ticks(log)
    assert ticks.error is None and ticks.ticked("loss_nan@5") == {"lr"}


def test_our_own_symlink_to_our_own_sidecar_is_followed(tmp_path: Path) -> None:
    log = _log(tmp_path)
    real = tmp_path / "kept.json"
    real.write_text('{"v": 1, "ticks": {"loss_nan@5": ["lr"]}}')
    sidecar_path(log).symlink_to(real)
    ticks = Ticks(log)
    assert ticks.error is None and ticks.ticked("loss_nan@5") == {"lr"}


def test_saving_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    log = _log(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    side = sidecar_path(log)
    side.symlink_to(victim)
    ticks = Ticks(log)  # not JSON: ignored with a warning
    assert ticks.error is not None
    ticks.toggle("loss_nan@5", "lr")
    assert victim.read_text() == "precious\n"
    assert not side.is_symlink() and json.loads(side.read_text())["ticks"] == {"loss_nan@5": ["lr"]}
    assert ticks.error is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run.jsonl", "victim.txt", side.name]
    ), "no temporary file left behind"


def test_the_depth_check() -> None:
    assert not nested_too_deep(b'{"v": 1, "ticks": {"a@1": ["s1", "s2"]}}')
    assert not nested_too_deep(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert nested_too_deep(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert nested_too_deep(b"[{]")  # unbalanced: json.loads would refuse it anyway
    assert nested_too_deep(b"[" * 10**6)


# ---------------------------------------------------------------- the viewer and check


async def _viewer_starts(tmp_path: Path, plants: dict[str, Callable[[Path], None]]) -> None:
    for name, plant in plants.items():
        d = tmp_path / name.replace(" ", "_").replace("/", "_").replace("'", "")
        d.mkdir()
        log = _log(d)
        plant(sidecar_path(log))
        app = DltopApp(str(log), follow=False, now=end_time(STEPS) + 3, poll_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda a=app: f"step {STEPS - 1}" in screen_text(a), name)
            notes = [n.message for n in app._notifications if "ticks file" in n.message]
            assert len(notes) == 1, (name, notes)
            await pilot.pause(0.3)
            notes = [n.message for n in app._notifications if "ticks file" in n.message]
            assert len(notes) == 1, (name, "said once", notes)
            await pilot.press("q")
            await pilot.pause()
        assert app.return_code == 0, name


@pytest.mark.slow
def test_the_viewer_starts_with_a_hostile_sidecar_and_warns_once(tmp_path: Path) -> None:
    plants = {k: v[0] for k, v in HOSTILE.items()}
    if os.geteuid() == 0:
        plants.update({k: v[0] for k, v in ROOT_ONLY.items()})
    asyncio.run(_viewer_starts(tmp_path, plants))


def test_check_is_unaffected_by_a_hostile_sidecar(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fifo(sidecar_path(log))
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode in (0, 1) and f"steps:   {STEPS}" in done.stdout, done.stderr
