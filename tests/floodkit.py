"""Real processes against a probe's live socket: a training that measures itself, floods of
connections, viewers that never read.

The training is a child process (``Training``) with a real ``Probe`` serving TCP; it
answers commands on stdin with one JSON line each: ``measure`` (its RSS, its open
descriptors, the server's viewers and refusals), ``fill BYTES`` (steps until the log has
about that many more bytes), ``hold N`` (N files opened and kept until exit: the answer
says they are held), ``load SECONDS HOLD BURST WORK_MS`` (the training's own
file use: ``HOLD`` files kept open, ``BURST`` more opened and closed at every step, a
step of ``WORK_MS`` of pure-Python work; it reports how many of its ``open()`` calls
failed, the most descriptors it held and its step times) and ``exit``. Flooders and
viewers are other processes. Shared by ``tests/probe/test_live_limits.py`` and
``benchmarks/live_limits.py``; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TRAINING = r"""
import json, os, resource, sys, time
args = json.loads(sys.argv[1])
if args.get("nofile"):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (args["nofile"], hard))
from dltop.probe import Probe

def fds():
    return len(os.listdir("/proc/self/fd")) - 1

def thread_cpu(thread):  # CPU seconds a thread of this process used (user + system)
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, IndexError, ValueError):
        return None

def rss():
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

probe = Probe(path=args["log"], tcp=args["tcp"], socket=False, system=False).start()
(live,) = [s for s in probe._writer.sinks if type(s).__name__ == "LiveSink"]
server = live.server
extras = {f"metric_{i}": 0.123456789 * i for i in range(8)}  # a ~300-byte step line
step = 0
kept = []  # files the "hold" command keeps open until exit

def out(**kw):
    print(json.dumps(kw), flush=True)

out(port=server.bound_port, fds=fds(), rss=rss())
for line in sys.stdin:
    cmd, *rest = line.split()
    if cmd == "measure":
        probe.flush()
        refusals = getattr(server, "refusals", None)  # None: a probe older than the limits
        out(rss=rss(), fds=fds(), viewers=server.viewers,
            pending=sum(not c.active for c in list(server._clients.values())),
            refused=dict(refusals.counts) if refusals else None, dropped=server.total_dropped,
            server_cpu_s=thread_cpu(server._thread))
    elif cmd == "fill":
        probe.flush()
        want = os.path.getsize(args["log"]) + int(rest[0])
        while os.path.getsize(args["log"]) < want:
            for _ in range(2000):
                probe.step(loss=1.0 / (step + 1), **extras)
                step += 1
            probe.flush()
        out(steps=step)
    elif cmd == "hold":
        try:
            for _ in range(int(rest[0])):
                kept.append(open(os.devnull, "rb"))
        except OSError:
            pass
        out(held=len(kept), fds=fds())
    elif cmd == "load":
        seconds, hold, burst, work = float(rest[0]), int(rest[1]), int(rest[2]), float(rest[3])
        failures, opened, most, times = 0, 0, 0, []
        held = []
        try:
            held = [open(os.devnull, "rb") for _ in range(hold)]
        except OSError:
            failures += 1
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            batch = []
            try:
                for _ in range(burst):
                    batch.append(open(os.devnull, "rb"))
                    opened += 1
                most = max(most, fds())
            except OSError:
                failures += 1
            for f in batch:
                f.close()
            spin = time.perf_counter() + work / 1000
            while time.perf_counter() < spin:
                pass
            probe.step(loss=1.0 / (step + 1))
            step += 1
            times.append(time.perf_counter() - t0)
        for f in held:
            f.close()
        times.sort()
        out(failures=failures, opened=opened, most_fds=most, steps=len(times),
            median_ms=1000 * times[len(times) // 2] if times else None,
            p99_ms=1000 * times[int(len(times) * 0.99)] if times else None)
    elif cmd == "exit":
        break
probe.close()
out(closed=True)
"""

FLOOD = r"""
import json, resource, socket, sys, time
port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
held, failed = [], 0
end = time.monotonic() + seconds
while len(held) + failed < n and time.monotonic() < end:
    s = socket.socket()
    s.settimeout(0.25)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        failed += 1
        continue
    held.append(s)
print(json.dumps({"connected": len(held), "failed": failed}), flush=True)
sys.stdin.read()  # hold every connection until the parent closes our stdin
"""

SILENT = r"""
import json, socket, sys
port, n, hello = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
held = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes almost nothing
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    if hello:
        s.sendall(hello + b"\n")
    held.append(s)
print(json.dumps({"connected": len(held)}), flush=True)
sys.stdin.read()  # never read a byte; hold until the parent closes our stdin
"""


class Training:
    """The training child: start it, send it commands, read its answers."""

    def __init__(self, log: Path, tcp: str = "127.0.0.1:0", nofile: int | None = None,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        args = {"log": str(log), "tcp": tcp, "nofile": nofile}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINING, json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
        self.started = self.answer()
        self.port: int = self.started["port"]

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the training died: {self.stderr()}")
        return json.loads(line)

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def send(self, command: str) -> None:
        """A command whose answer is read later (``answer``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            return "(still running)"
        return err or ""

    def finish(self) -> str:
        """Close the probe, wait for the exit; the training's stderr."""
        try:
            self.ask("exit")
        except (OSError, RuntimeError, ValueError):
            pass
        try:
            _, err = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return err or ""


class Crowd:
    """Other processes holding connections to the training: flooders or silent viewers."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def flood(self, port: int, n: int, seconds: float) -> None:
        self._start(FLOOD, str(port), str(n), str(seconds))

    def silent(self, port: int, n: int, hello: str = "") -> None:
        self._start(SILENT, str(port), str(n), hello)

    def _start(self, script: str, *args: str) -> None:
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )

    def reports(self) -> list[dict[str, Any]]:
        """Each process's line once it has made its connections (bounded by their own
        time limits and connect timeouts)."""
        out = []
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            out.append(json.loads(line) if line else {})
        return out

    def close(self) -> None:
        for p in self.procs:
            try:
                if p.stdin is not None:
                    p.stdin.close()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
                p.wait()
        self.procs = []


def live_notes(log: Path) -> list[dict[str, Any]]:
    """The live socket's ``warning`` events in a log."""
    from dltop.probe.decoding import read_records

    records, _ = read_records(str(log))
    return [
        r for r in records if r.get("kind") == "event" and r.get("type") == "warning"
        and r.get("source") == "live"
    ]  # fmt: skip
