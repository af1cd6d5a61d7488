"""``dltop [SOURCE]``: wrong sources end in one line and exit 3 before any UI starts;
no SOURCE picks the newest log under ./dltop-runs; the options parse as documented."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dltop.tui import view_cmd
from test_app_support import write_log


def _dltop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # a private rendezvous dir: live runs of other tests must not be picked up
    env = {**os.environ, "TERM": "dumb", "XDG_RUNTIME_DIR": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("missing.jsonl",), "no such file"),
        (("missing.jsonl",), "hint: `dltop ls`"),
        (("",), "an empty SOURCE"),  # `dltop "$LOG"` with LOG unset, not the current folder
        ((" ",), "an empty SOURCE"),
        (("nolog",), "no such file"),
        ((), "no SOURCE given"),
        (("unix:/tmp/nothing.sock",), "no such socket"),
        (("tcp://localhost",), "bad address"),
        (("tcp://[::1",), "bad address"),  # a broken IPv6 literal: urlsplit raises
    ],
)
def test_bad_source_is_one_line_and_exit_3(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    done = _dltop(*args, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert needle in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    first = done.stderr.splitlines()[0]
    assert first.startswith("dltop: ")


def test_the_start_hint_reads_as_lines(tmp_path: Path) -> None:
    """The first thing a new user sees: the probe snippet on lines of its own, not
    escaped into one line of literal backslash-n."""
    done = _dltop(cwd=tmp_path)
    assert "\\n" not in done.stderr
    assert "  from dltop.probe import Probe" in done.stderr.splitlines()


def test_unreadable_and_non_log_files(tmp_path: Path) -> None:
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b"\0\1\2\n")
    done = _dltop(str(bad), cwd=tmp_path)
    assert done.returncode == 3 and "not a dltop log" in done.stderr
    if os.geteuid() != 0:  # root reads anything
        locked = write_log(tmp_path / "locked.jsonl", "healthy", 3)
        locked.chmod(0)
        done = _dltop(str(locked), cwd=tmp_path)
        assert done.returncode == 3 and "permission" in done.stderr.lower()
    empty_dir = tmp_path / "ranks"
    empty_dir.mkdir()
    done = _dltop(str(empty_dir), cwd=tmp_path)
    assert done.returncode == 3 and "no *.jsonl" in done.stderr


def test_no_source_opens_the_newest_log_under_dltop_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no live run of another test
    runs = tmp_path / "dltop-runs" / "sub"
    runs.mkdir(parents=True)
    old = write_log(runs / "old.jsonl", "healthy", 3)
    new = write_log(tmp_path / "dltop-runs" / "new.jsonl", "healthy", 3)
    os.utime(old, (time.time() - 100, time.time() - 100))
    assert view_cmd.resolve_source(None, cwd=tmp_path) == new
    assert view_cmd.resolve_source("dltop-runs/sub/old.jsonl", cwd=tmp_path) == old
    with pytest.raises(view_cmd.SourceError, match="newest log here is dltop-runs/new.jsonl"):
        view_cmd.resolve_source("typo.jsonl", cwd=tmp_path)


def test_options() -> None:
    parser = argparse.ArgumentParser()
    view_cmd.configure(parser)
    args = parser.parse_args(
        ["run.jsonl", "--no-mouse", "--refresh", "4", "--replay", "--lang", "zh"]
    )
    assert (args.source, args.no_mouse, args.refresh, args.replay, args.lang) == (
        ["run.jsonl"], True, 4.0, True, "zh"
    )  # fmt: skip
    defaults = parser.parse_args([])
    assert defaults.source == [] and defaults.refresh == 3.0 and not defaults.replay
    assert parser.parse_args(["a.jsonl", "b.jsonl"]).source == ["a.jsonl", "b.jsonl"]  # overlay
    with pytest.raises(SystemExit):
        parser.parse_args(["--refresh", "10"])  # outside 2-4 Hz
    picked = parser.parse_args(["--smooth", "0.9", "--panel", "acc", "--panel", "eval.f1,lr2"])
    assert picked.smooth == 0.9 and picked.panel == ["acc", "eval.f1,lr2"]
    from dltop.tui.core.present.extra_panels import parse_panels

    assert parse_panels(picked.panel) == ("+acc", "+eval.f1", "+lr2")
    assert defaults.smooth is None and defaults.panel == []
    for bad in ("1", "-1", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--smooth", bad])


def test_piped_into_another_command_the_viewer_says_so_instead_of_escape_codes(
    tmp_path: Path,
) -> None:
    """``dltop | less`` or ``dltop > out``: one line on stderr, exit 3, nothing on stdout
    (the viewer wrote its escape codes into the pipe)."""
    log = write_log(tmp_path / "run.jsonl", "healthy", 50)
    (tmp_path / "dltop-runs").mkdir()
    (tmp_path / "dltop-runs" / "run.jsonl").write_bytes(log.read_bytes())
    for args in ((), (str(log),)):
        done = _dltop(*args, cwd=tmp_path)
        assert done.returncode == 3 and done.stdout == "", done
        assert len(done.stderr.splitlines()) == 1
        assert "stdout is not" in done.stderr and "dltop check" in done.stderr


def test_help_is_instant_and_lists_the_options(tmp_path: Path) -> None:
    done = _dltop("--help", cwd=tmp_path)
    assert done.returncode == 0
    for flag in ("--no-mouse", "--refresh", "--replay", "--lang", "source"):
        assert flag in done.stdout


def test_thresholds_flags_reach_the_viewer_and_bad_ones_stop_it(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    view_cmd.configure(parser)
    toml = tmp_path / "alerts.toml"
    toml.write_text("[data_bound]\nwarn = 0.3\n")
    args = parser.parse_args(
        ["run.jsonl", "--config", str(toml), "--set", "data_bound.critical=0.6"]
    )
    config = view_cmd._thresholds(args)
    assert config.section("data_bound")["warn"] == 0.3
    assert config.section("data_bound")["critical"] == 0.6
    log = write_log(tmp_path / "run.jsonl", "healthy", 3)
    for bad in (["--set", "data_bound.warn=oops"], ["--set", "nokey"], ["--config", "nope.toml"]):
        done = _dltop(str(log), *bad, cwd=tmp_path)
        assert done.returncode == 3, (bad, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert done.stderr.startswith("dltop: ")
