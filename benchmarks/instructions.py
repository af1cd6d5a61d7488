"""`dltop check`'s cost in CPU instructions, as a ratio to a msgspec decode of the same log.

    python benchmarks/instructions.py [--steps 20000] [--log PATH] [--code DIR ...]
    python benchmarks/instructions.py --tensorboard [--steps 20000] [--code DIR ...]

Why instructions: on a shared 2-CPU machine the same run's wall and CPU times move by
±15 % from one minute to the next, more than most speed-ups are worth, so an A/B of two
versions in seconds needs many alternating runs and still misleads. The instructions a
process executes do not depend on the machine's load: counted by valgrind's cachegrind
(``apt-get install valgrind``), with ``PYTHONHASHSEED=0`` (string hashes decide set and
dict layouts, so otherwise the count moves by a few parts in a thousand), the same code on
the same log gives the same count to within 0.1 %.

Each variant runs in its own interpreter under cachegrind; the imports and reading the
file are counted once in a variant that does nothing else (``none``) and taken off:

- ``msgspec``  the anchor: ``msgspec.json.Decoder().decode`` of each line (as replay.py)
- ``decoder``  the schema's ``LineDecoder`` over the file in chunks (every reader's floor)
- ``check``    ``check_file``: decoding, the rules, the run's status (``dltop check``)

Printed: instructions per step of each, and ``check`` and ``decoder`` as ratios to
``msgspec``. Instructions are not time (a C call and a Python call differ in cycles per
instruction), so replay.py stays the measure of seconds; this one says whether a change
made the work smaller, and by how much, in one run. ``--code DIR`` (repeatable) counts the
same log with another checkout's code (``git worktree add /tmp/old HEAD~1``): an A/B on
one log. The default log is replay.py's probe-written run. No assertion.

``--tensorboard``: one run written twice by ``foreign_speed.py``'s writers, as our JSONL
and as a TensorBoard event file, and ``check`` counted on each (TensorBoard's protobuf
imported in every variant, so it is taken off with the imports): the event file's cost
as a ratio to the JSONL's, issue 31's "<= 3x" in instructions. Under valgrind the
``crc32c`` extension runs its software path (~1.8 k instructions a record), so the native
ratio is lower.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("none", "msgspec", "decoder", "check")


def child(variant: str, path: str) -> None:
    """The measured work; every variant imports the same modules first."""
    import msgspec
    from dltop.probe.decoding import LineDecoder
    from dltop.tui.check_file import check_file
    from dltop.tui.core.rules.config import Config

    if "tfevents" in os.path.basename(path):  # the event file's reader, imported for all
        from dltop.tui.core.sources.foreign import tboard

        tboard.require()
        if variant == "check":
            check_file(path, Config())
        return
    with open(path, "rb") as f:
        data = f.read()
    if variant == "msgspec":
        decode = msgspec.json.Decoder().decode
        for line in data.splitlines():
            decode(line)
    elif variant == "decoder":
        dec = LineDecoder()
        for i in range(0, len(data), 1 << 20):
            dec.feed(data[i : i + (1 << 20)])
        dec.finish()
    elif variant == "check":
        check_file(path, Config())


def count(code: str, variant: str, path: str) -> int:
    """Instructions of one child run under cachegrind."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": code}
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, str(Path(__file__).resolve()),
        "--child", variant, "--log", path, "--code", code,
    ]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        said = [x for x in out.stderr.splitlines() if x.strip() and not x.startswith("==")]
        raise SystemExit(f"{variant} on {code} failed: {' / '.join(said[-3:])[-400:]}")
    for line in out.stderr.splitlines():
        if "I" in line and "refs:" in line:
            return int(line.split("refs:")[1].replace(",", "").strip())
    raise SystemExit(f"cachegrind gave no count for {variant}: {out.stderr[-400:]}")


def _steps(path: str) -> int:
    """Step records in a given log (the per-step figures' denominator)."""
    import msgspec

    decode, n = msgspec.json.Decoder().decode, 0
    with open(path, "rb") as f:
        for line in f:
            try:
                rec = decode(line)
            except msgspec.DecodeError:
                continue
            n += isinstance(rec, dict) and rec.get("kind") == "step"
    return max(1, n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--log", default="", help="a log to count on (default: generated)")
    ap.add_argument("--code", action="append", default=[], help="a checkout to count")
    ap.add_argument(
        "--tensorboard", action="store_true", help="check of an event file against its JSONL"
    )
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        sys.path.insert(0, a.code[0])
        import dltop.tui

        if not str(dltop.tui.__file__).startswith(a.code[0]):
            raise SystemExit(f"--code {a.code[0]} is not the code imported: {dltop.tui.__file__}")
        child(a.child, a.log)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing counted")
        return 1
    codes = [os.path.abspath(c) for c in a.code] or [str(HERE.parent)]
    for code in codes:
        if not os.path.isdir(os.path.join(code, "dltop", "tui")):
            print(f"--code {code}: not a dltop checkout (no dltop/tui in it)")
            return 2
    if a.log and not os.path.isfile(a.log):
        print(f"--log {a.log}: no such file")
        return 2
    if a.tensorboard:
        return _tensorboard(codes, a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        path = a.log
        if not path:
            sys.path.insert(0, str(HERE))
            from replay import generate_log

            path = os.path.join(tmp, "run.jsonl")
            generate_log(path, a.steps)
        steps = _steps(path) if a.log else a.steps
        for code in codes:
            n = {v: count(code, v, path) for v in VARIANTS}
            per = {v: (n[v] - n["none"]) / steps for v in VARIANTS[1:]}
            print(
                f"{code}: per step msgspec {per['msgspec']:,.0f}, decoder {per['decoder']:,.0f}, "
                f"check {per['check']:,.0f} instructions; decoder / msgspec "
                f"{per['decoder'] / per['msgspec']:.2f}x, check / msgspec "
                f"{per['check'] / per['msgspec']:.1f}x"
            )
    return 0


def _tensorboard(codes: list[str], steps: int) -> int:
    """``check`` of one run as an event file and as our JSONL, per step, and the ratio."""
    sys.path.insert(0, str(HERE))
    from foreign_speed import write_jsonl, write_tensorboard

    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "run.jsonl"
        write_jsonl(jsonl, steps)
        write_tensorboard(Path(tmp) / "tb", steps)
        (event_file,) = (Path(tmp) / "tb").iterdir()
        for code in codes:
            per = {}
            for name, path in (("jsonl", str(jsonl)), ("tensorboard", str(event_file))):
                none = count(code, "none", path)
                per[name] = (count(code, "check", path) - none) / steps
            print(
                f"{code}: per step check of the JSONL {per['jsonl']:,.0f}, of the event file "
                f"{per['tensorboard']:,.0f} instructions; event file / JSONL "
                f"{per['tensorboard'] / per['jsonl']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
