"""The dashboard on a live socket: a REAL training subprocess runs the probe (socket on,
as by default); bare ``dltop`` discovery finds it; the app streams its steps; when the
training ends the viewer falls back to the log file and shows the whole run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dltop.tui import view_cmd
from dltop.tui.app.app import DltopApp
from test_app_live import WAIT, wait_for
from test_app_support import screen_text

TRAINING = textwrap.dedent(
    """
    import sys, time
    from dltop.probe import Probe

    with Probe(path=sys.argv[1], system=False) as probe:
        print("started", flush=True)
        for i in range(int(sys.argv[2])):
            time.sleep(0.02)
            probe.step(loss=1.0 / (i + 1))
            if i == 40:
                sys.stdin.readline()  # wait for the test: the viewer must see a live run
    """
)


async def _attach_and_follow(tmp_path: Path) -> None:
    log = tmp_path / "live.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINING, str(log), "120"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)},
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        source = view_cmd.resolve_source(None, cwd=tmp_path)
        assert isinstance(source, str) and source.startswith("unix:"), source
        app = DltopApp(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: "step 40" in screen_text(app), "the live steps")
            assert "running" in screen_text(app)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            await wait_for(pilot, lambda: "step 119" in screen_text(app), "the last step")
            proc.wait(WAIT)
            # the socket is gone: the viewer now reads the log, which holds the whole run
            await wait_for(pilot, lambda: "finished" in screen_text(app), "finished status")
            assert app.reader is not None and app.reader.file_source is not None
            assert app.model.store.series("loss").x_range()[0] == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.slow
def test_bare_dltop_attaches_to_a_live_training_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if len(str(tmp_path)) > 80:
        pytest.skip("tmp path too long for an AF_UNIX socket path")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    asyncio.run(_attach_and_follow(tmp_path))
