"""Result transport of :mod:`iclr26.core.sandbox`: a small tagged binary format instead of pickle.

The child (untrusted) encodes, the parent decodes; decoding never imports, calls or constructs anything
the bytes name. Values: None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
frozenset, numpy arrays and numpy scalars of plain numeric dtypes (bool, int*, uint*, float*, complex*;
no structured, object, string or datetime dtypes; arrays travel as C-ordered raw buffers). Anything else
is refused with :class:`WireError` (the sandbox reports it as ``BadResult``).

Decode cost is bounded by the frame size: every length and count is checked against the bytes left before
anything is allocated, nesting is capped at :data:`MAX_DEPTH`, items at :data:`MAX_ITEMS`, an int at
:data:`MAX_INT_BYTES`, and sets / dict keys whose hashes pile up (hash-colliding ints would make building
them quadratic) are refused before the set or dict is built.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from typing import Any

__all__ = ["MAX_DEPTH", "WireError", "decode", "encode"]

MAX_DEPTH = 100  # nesting levels
MAX_ITEMS = 1_000_000  # values in one frame
MAX_INT_BYTES = 1024  # one int: |x| < 2**8191 (~2,470 digits; str() refuses over 4,300 by default)
MAX_NDIM = 32
MAX_SAME_HASH = 8  # elements of one set / keys of one dict sharing a hash value
_DTYPE = re.compile(r"[<>|][biufc](1|2|4|8|16)\Z")
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class WireError(ValueError):
    """A value that cannot be sent, or a frame that is refused."""


# ----------------------------------------------------------------------------------------------- encode
def encode(value: Any) -> bytes:
    """Child side. Raises :class:`WireError` for unsupported types, depth or size."""
    out = bytearray()
    _enc(value, out, 0, [0])
    return bytes(out)


def _np():
    import sys

    return sys.modules.get("numpy")


_SCALARS: list = []


def _scalar_types(np: Any) -> frozenset:
    """numpy's own scalar classes (a subclass could define ``dtype`` as a property running its code)."""
    if not _SCALARS:
        _SCALARS.append(frozenset(t for t in np.sctypeDict.values() if isinstance(t, type)))
    return _SCALARS[0]


def _dtype_ok(dt: Any) -> bool:
    return (
        dt.fields is None
        and dt.subdtype is None
        and not dt.hasobject
        and dt.kind in "biufc"
        and _DTYPE.match(dt.str) is not None
    )


def _enc(v: Any, out: bytearray, depth: int, count: list) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH} levels")
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise WireError(f"value has more than {MAX_ITEMS} items")
    t = type(v)
    if v is None:
        out += b"N"
    elif t is bool:
        out += b"T" if v else b"F"
    elif t is int:
        raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
        if len(raw) > MAX_INT_BYTES:
            raise WireError(f"int with more than {MAX_INT_BYTES} bytes")
        out += b"i" + _U32.pack(len(raw)) + raw
    elif t is float:
        out += b"f" + struct.pack("<d", v)
    elif t is complex:
        out += b"c" + struct.pack("<dd", v.real, v.imag)
    elif t in (str, bytes, bytearray):
        raw = v.encode("utf-8", "surrogatepass") if t is str else bytes(v)
        out += {str: b"s", bytes: b"b", bytearray: b"B"}[t] + _U64.pack(len(raw)) + raw
    elif t in (list, tuple, set, frozenset):
        items = list(v)
        out += {list: b"l", tuple: b"t", set: b"S", frozenset: b"Z"}[t] + _U64.pack(len(items))
        for x in items:
            _enc(x, out, depth + 1, count)
    elif t is dict:
        items = list(v.items())
        out += b"d" + _U64.pack(len(items))
        for k, x in items:
            _enc(k, out, depth + 1, count)
            _enc(x, out, depth + 1, count)
    else:
        np = _np()
        if np is not None and t is np.ndarray and _dtype_ok(v.dtype):
            if v.ndim > MAX_NDIM:
                raise WireError(f"array with more than {MAX_NDIM} dimensions")
            raw = np.ascontiguousarray(v).tobytes()
            dt = v.dtype.str.encode()
            out += b"a" + bytes([len(dt)]) + dt + bytes([v.ndim]) + b"".join(_U64.pack(d) for d in v.shape)
            out += _U64.pack(len(raw)) + raw
        elif np is not None and t in _scalar_types(np) and _dtype_ok(v.dtype):  # exact types: no user property
            dt, raw = v.dtype.str.encode(), v.tobytes()
            out += b"g" + bytes([len(dt)]) + dt + bytes([len(raw)]) + raw
        else:
            what = f"{t.__module__}.{t.__qualname__}" if isinstance(getattr(t, "__module__", None), str) else "?"
            if np is not None and (t is np.ndarray or t in _scalar_types(np)):  # exact: v.dtype runs no user code
                what += f" of dtype {v.dtype}"
            raise WireError(f"cannot send a value of type {what} (send plain data or plain numeric arrays)")


# ----------------------------------------------------------------------------------------------- decode
class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.buf, self.pos, self.items = memoryview(data).cast("B"), 0, 0

    def take(self, n: int) -> memoryview:
        if n < 0 or n > len(self.buf) - self.pos:
            raise WireError("truncated frame or length beyond the frame")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def count(self) -> int:
        n = self.u64()
        if n > len(self.buf) - self.pos:  # every item takes at least one byte
            raise WireError("item count beyond the frame")
        return n


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Parent side: the value encoded in ``data`` (all of it), or :class:`WireError`."""
    r = _Reader(data)
    value = _dec(r, 0)
    if r.pos != len(r.buf):
        raise WireError("trailing bytes after the value")
    return value


def _hash_guard(keys: list) -> None:
    try:
        worst = max(Counter(hash(k) for k in keys).values(), default=0)
    except TypeError as e:
        raise WireError(f"unhashable set element or dict key: {e}") from None
    if worst > MAX_SAME_HASH:
        raise WireError(f"{worst} set elements / dict keys share one hash value (refused: quadratic to build)")


def _dec(r: _Reader, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH} levels")
    r.items += 1
    if r.items > MAX_ITEMS:
        raise WireError(f"more than {MAX_ITEMS} items")
    tag = r.take(1).tobytes()
    if tag == b"N":
        return None
    if tag in (b"T", b"F"):
        return tag == b"T"
    if tag == b"i":
        n = _U32.unpack(r.take(4))[0]
        if n > MAX_INT_BYTES:
            raise WireError("int too large")
        return int.from_bytes(r.take(n), "little", signed=True)
    if tag == b"f":
        return struct.unpack("<d", r.take(8))[0]
    if tag == b"c":
        re_, im = struct.unpack("<dd", r.take(16))
        return complex(re_, im)
    if tag in (b"s", b"b", b"B"):
        raw = r.take(r.u64())
        if tag == b"s":
            try:
                return str(raw, "utf-8", "surrogatepass")
            except UnicodeDecodeError as e:
                raise WireError(f"bad utf-8 in a string: {e}") from None
        return bytes(raw) if tag == b"b" else bytearray(raw)
    if tag in (b"l", b"t", b"S", b"Z"):
        items = [_dec(r, depth + 1) for _ in range(r.count())]
        if tag in (b"S", b"Z"):
            _hash_guard(items)
            return set(items) if tag == b"S" else frozenset(items)
        return items if tag == b"l" else tuple(items)
    if tag == b"d":
        n = r.count()
        pairs = [(_dec(r, depth + 1), _dec(r, depth + 1)) for _ in range(n)]
        _hash_guard([k for k, _ in pairs])
        return dict(pairs)
    if tag in (b"a", b"g"):
        return _dec_numpy(r, tag)
    raise WireError(f"unknown tag {tag!r}")


def _dec_dtype(r: _Reader) -> Any:
    import numpy as np

    text = r.take(r.u8()).tobytes().decode("ascii", "replace")
    if not _DTYPE.match(text):
        raise WireError(f"dtype {text!r} is not a plain numeric dtype")
    try:
        dt = np.dtype(text)
    except TypeError as e:
        raise WireError(f"dtype {text!r}: {e}") from None
    if not _dtype_ok(dt):
        raise WireError(f"dtype {text!r} is not a plain numeric dtype")
    return dt


def _dec_numpy(r: _Reader, tag: bytes) -> Any:
    import numpy as np

    dt = _dec_dtype(r)
    if tag == b"g":
        raw = r.take(r.u8())
        if len(raw) != dt.itemsize:
            raise WireError("numpy scalar of the wrong size")
        return np.frombuffer(raw.tobytes(), dtype=dt)[0]
    ndim = r.u8()
    if ndim > MAX_NDIM:
        raise WireError(f"array with {ndim} dimensions")
    shape = tuple(r.u64() for _ in range(ndim))
    size = 1
    for d in shape:  # Python ints: no overflow
        size *= d
    nbytes = r.u64()
    if size * dt.itemsize != nbytes:
        raise WireError(f"array buffer of {nbytes} bytes does not match shape {shape} x {dt.itemsize} bytes")
    raw = r.take(nbytes)
    return np.frombuffer(bytearray(raw), dtype=dt).reshape(shape)
