"""A record as one line of the log: what the probe writes, and how.

Why a module of its own: the writer thread needs only this side of the format. It uses
only the standard library at import time (it runs in the training process); ``msgspec``
is picked up lazily when it is installed (a runtime dependency of the distribution) and
the stdlib ``json`` is the fallback, producing the same bytes. Non-finite floats become
the string markers of :mod:`dltop.probe.schema`; integers beyond int64 become floats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

_NONFINITE_OUT = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _finite_or_marker(x: float) -> float | str:
    if x != x:
        return "NaN"
    return _NONFINITE_OUT.get(x, x)


def sanitize(value: Any) -> Any:
    """Return ``value`` with every non-finite float replaced by its string marker.

    Containers are copied only when they hold something to replace, so the common
    all-finite record costs one pass and no allocation.
    """
    if isinstance(value, float):  # float subclasses too: numpy.float64 NaN must not become null
        return value if math.isfinite(value) else _finite_or_marker(value)
    if type(value) is int:
        return value if _INT_MIN <= value <= _INT_MAX else _big_int(value)
    if isinstance(value, dict):
        for v in value.values():
            if _needs_sanitizing(v):
                return {k2: sanitize(v2) for k2, v2 in value.items()}
        return value
    if isinstance(value, (list, tuple)):
        if any(_needs_sanitizing(v) for v in value):
            return [sanitize(v) for v in value]
        return value
    return value


# Integers a reader's int64 and float columns hold; a user value beyond them (a loss of
# 10**400 from integer arithmetic, say) is written as the float it stands for, and as
# "Infinity"/"-Infinity" beyond the float range: the contract's encoding, not 400 digits.
_INT_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 63)


def _big_int(value: int) -> float | str:
    try:
        return float(value)
    except OverflowError:
        return "Infinity" if value > 0 else "-Infinity"


def _needs_sanitizing(v: Any) -> bool:
    if isinstance(v, float):
        return not math.isfinite(v)
    if type(v) is int:
        return not _INT_MIN <= v <= _INT_MAX
    if isinstance(v, (dict, list, tuple)):
        return sanitize(v) is not v
    return False


def _json_default(obj: Any) -> Any:
    """Last resort for values json cannot encode (numpy scalars, tensors, paths)."""
    if isinstance(obj, float):  # float subclasses msgspec does not take as floats
        return sanitize(float(obj))
    if isinstance(obj, int):
        return int(obj)
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return sanitize(item())
        except Exception:  # a multi-element tensor, say
            pass
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        try:
            return sanitize(tolist())
        except Exception:
            pass
    return str(obj)


_encoder: Callable[[Any], bytes] | None = None


def _get_encoder() -> Callable[[Any], bytes]:
    global _encoder
    if _encoder is None:
        try:
            import msgspec  # lazy: only the writer thread and the viewer ever get here

            enc = msgspec.json.Encoder(enc_hook=_json_default)
            _encoder = enc.encode
        except ImportError:  # pragma: no cover - msgspec is a declared dependency

            def _stdlib(obj: Any) -> bytes:
                return json.dumps(
                    obj, separators=(",", ":"), allow_nan=False, default=_json_default
                ).encode()

            _encoder = _stdlib
    return _encoder


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one line of bytes, newline included, non-finite floats as strings."""
    try:
        return _get_encoder()(sanitize(record)) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (below): rare, so paid only here
        return _get_encoder()(sanitize(_encodable(record))) + b"\n"


def _encodable(v: Any) -> Any:
    """``v`` with every text made valid UTF-8. Python holds an undecodable file-name byte
    as a lone surrogate (``os.fsdecode(b"caf\\xe9.jpg")``), which UTF-8 cannot carry: an
    exception message naming such a file lost the crash's record. It is written as the
    text ``\\udce9``, so the byte can still be told."""
    if isinstance(v, str):
        return v.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(v, dict):
        return {_encodable(k): _encodable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encodable(x) for x in v]
    return v
