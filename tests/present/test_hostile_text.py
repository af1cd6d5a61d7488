"""One hostile log, every way dltop shows it: no terminal control reaches the terminal.

Every text field of the log (run id, host, argv, cwd, metric names, exception type,
message and traceback, notes, event messages) and the file name itself carry an OSC 52
clipboard write, an OSC 0 title change, a screen clear, a C1 CSI, a bidi override and
Rich markup. ``dltop check`` (text), ``dltop ls`` and the viewer must show them as
visible escapes; ``check --json`` must keep the exact text, JSON-escaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.core.text.safetext import is_safe, visible, visible_lines
from test_app_support import screen_text

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
C1 = "\x9b31m"
BIDI = "\u202egnp.exe"
MARKUP = "[bold red]X[/]"
EVIL = f"{OSC52}{TITLE}{CLEAR}{C1}{BIDI}{MARKUP}"
T0 = 1_700_000_000.0
# what must never reach a terminal raw (newline allowed)
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _hostile_log(directory: Path) -> Path:
    path = directory / f"run{CLEAR}\x1b]0;t\x07.jsonl"
    recs: list[dict] = [
        {
            "kind": "meta", "v": 1, "run_id": f"run-{EVIL}", "t": T0, "host": f"h{EVIL}",
            "pid": 2**22 + 7, "argv": ["train.py", EVIL], "cwd": f"/w/{EVIL}", "notes": [f"GPU {EVIL}"],
        }
    ]  # fmt: skip
    for i in range(60):
        recs.append(
            {"kind": "step", "step": i, "t": T0 + 1 + i, "loss": 1.0 / (i + 1),
             "step_time": 1.0, f"acc{EVIL}": 0.5}
        )  # fmt: skip
    recs.append({"kind": "event", "type": "note", "t": T0 + 61, "text": EVIL, "message": EVIL})
    recs.append(
        {
            "kind": "event", "type": "exception", "t": T0 + 62, "step": 59,
            "exc_type": f"ValueError{EVIL}", "message": f"bad value {EVIL}\nsecond line {EVIL}",
            "traceback": [f'File "x.py", line 3, in f {EVIL}'],
        }
    )  # fmt: skip
    recs.append({"kind": "event", "type": "exit", "t": T0 + 63, "status": "exception"})
    path.write_bytes(b"".join(encode_record(r) for r in recs))
    return path


def _assert_safe(text: str, where: str) -> None:
    for c in RAW:
        assert c not in text, f"{where}: raw {c!r} reached the terminal"


def _dltop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(cwd), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_safetext_escapes_every_control_and_invisible_reordering() -> None:
    assert visible(EVIL) == (
        "\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202egnp.exe[bold red]X[/]"
    )
    assert visible("a\nb\tc\x7f") == "a\\nb\\tc\\x7f"
    assert visible_lines("a\nb\x1b") == "a\nb\\x1b"
    assert visible("héllo — ✓ 日本") == "héllo — ✓ 日本", "ordinary text is untouched"
    assert visible("x" * 50, limit=10) == "x" * 10 + "…"
    assert is_safe(visible_lines(EVIL + "\n" + EVIL)) and not is_safe(EVIL)
    assert visible(12) == "12"


def test_check_shows_escapes_and_json_keeps_the_exact_text(tmp_path: Path) -> None:
    log = _hostile_log(tmp_path)
    text = _dltop("check", str(log), cwd=tmp_path)
    assert text.returncode == 2, text.stderr
    _assert_safe(text.stdout + text.stderr, "check")
    assert "\\x1b]52;c;" in text.stdout and "\\u202e" in text.stdout
    assert MARKUP in text.stdout, "markup stays literal"
    js = _dltop("check", str(log), "--json", cwd=tmp_path)
    _assert_safe(js.stdout + js.stderr, "check --json")
    out = json.loads(js.stdout)
    assert out["source"] == str(log), "the exact file name round-trips"
    (crash,) = [a for a in out["alerts"] if a["id"] == "crash"]
    assert EVIL in crash["evidence"]["message"], "the exact exception text is kept"


def test_errors_quoting_a_crafted_file_name_are_escaped(tmp_path: Path) -> None:
    name = str(tmp_path / f"missing{OSC52}.jsonl")
    for args in (("check", name), (name,)):
        done = _dltop(*args, cwd=tmp_path)
        assert done.returncode == 3
        _assert_safe(done.stdout + done.stderr, f"dltop {args[0]}")
        assert "\\x1b]52" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_ls_lists_a_hostile_run_escaped(tmp_path: Path) -> None:
    runs = tmp_path / "dltop-runs"
    runs.mkdir()
    _hostile_log(runs)
    done = _dltop("ls", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_safe(done.stdout + done.stderr, "ls")
    assert "\\x1b" in done.stdout
    js = _dltop("ls", "--json", cwd=tmp_path)
    _assert_safe(js.stdout, "ls --json")
    assert EVIL in json.loads(js.stdout.splitlines()[0])["run_id"]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_the_viewer_shows_visible_escapes_and_keeps_its_header(tmp_path: Path, size) -> None:
    from dltop.tui.app.app import DltopApp
    from test_app_live import wait_for

    log = _hostile_log(tmp_path)
    seen: list[str] = []

    async def go() -> None:
        app = DltopApp(str(log), follow=False, now=T0 + 100, poll_interval=0.05)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: "step 59" in screen_text(app), "step 59")
            await pilot.pause(0.3)  # the checklist of the crash opens by itself at 120x40
            seen.append(screen_text(app))
            await pilot.press("a")
            await pilot.pause(0.3)
            seen.append(screen_text(app))

    asyncio.run(go())
    for screen in seen:
        _assert_safe(screen, "viewer")
        assert "step 59" in screen.splitlines()[0] or "step 59" in "".join(screen.splitlines()[:2])
    assert any("\\x1b" in s for s in seen), "the escapes are shown, not dropped"
    assert socket.gethostname()  # (host of the machine is irrelevant: the log's is shown)


# -- a token typed in an address (issue 29, 5): `dltop check "tcp://h:p?token=S"` printed
# the token in its error line, and error lines end up in CI logs

SECRET = "Zq7Xk9Pw3Lm5Rt8Vy2Nb"


def _no_piece_of_the_token(text: str, where: str) -> None:
    """At most 2 characters of the token: none of its 3-character pieces is there."""
    pieces = [SECRET[i : i + 3] for i in range(len(SECRET) - 2)]
    shown = [p for p in pieces if p in text]
    assert not shown, f"{where} shows the token ({shown}): {text!r}"


@pytest.mark.parametrize(
    "args",
    [
        ("check", f"tcp://127.0.0.1:9?token={SECRET}"),
        ("check", "--json", f"tcp://127.0.0.1:9?token={SECRET}"),
        ("report", f"tcp://127.0.0.1:9?token={SECRET}"),
        ("check", "run.jsonl", f"tcp://127.0.0.1:9?token={SECRET}"),  # argparse's own error
        ("check", f"tcp:/127.0.0.1:9?token={SECRET}"),  # a typo: read as a path
        ("check", f"tcp://127.0.0.1:9?a=1&tok%65n={SECRET}"),  # as urllib reads it
        (f"tcp://127.0.0.1:9?token={SECRET}",),  # the viewer: nothing listens there
    ],
    ids=["check", "check-json", "report", "usage", "typo", "encoded", "viewer"],
)
def test_a_token_in_an_address_never_reaches_what_we_print(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = _dltop(*args, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    _no_piece_of_the_token(done.stdout + done.stderr, " ".join(args[:1]))


def test_a_masked_token_shows_at_most_two_characters() -> None:
    from dltop.tui.core.sources.socket_source import redact

    masked = redact(f"tcp://gpu-box:7007?token={SECRET}")
    assert masked == f"tcp://gpu-box:7007?token={SECRET[:2]}…({len(SECRET)} chars)"
    assert redact("tcp://h:1?token=abcdefgh") == "tcp://h:1?token=…(8 chars)"  # short: none
    assert redact("tcp://h:1?x=1") == "tcp://h:1?x=1"
