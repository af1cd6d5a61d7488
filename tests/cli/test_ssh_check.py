"""dltop over a real SSH connection: runs ``scripts/ssh_check.sh`` (a private sshd on
127.0.0.1, a real training with the probe; ``ssh -t ... dltop LOG``, ``ssh -t ... dltop``
on the live socket, and the socket forwarded with ``ssh -L`` to a local ``dltop unix:``,
each inside tmux with the pane captured twice and the live step count asserted to grow,
then ``q``).

Skipped, with the script's reason, where sshd or tmux cannot be installed or run (the
script exits 77 then); any other non-zero exit is a failure with the script's output.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ssh_check.sh"
SKIPPED = 77


@pytest.mark.slow
@pytest.mark.timeout(720)
def test_dltop_over_ssh_shows_the_live_step_count() -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash to run scripts/ssh_check.sh")
    out = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=660, check=False
    )
    last = (out.stdout.strip().splitlines() or [""])[-1]
    if out.returncode == SKIPPED:
        pytest.skip(f"ssh check not possible here: {last.removeprefix('SKIP: ')}")
    assert out.returncode == 0, f"{last}\n--- stderr ---\n{out.stderr[-4000:]}"
    assert last.startswith("PASS") and last.count(" then ") == 3, out.stdout
