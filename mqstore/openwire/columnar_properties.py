"""Message properties as text for :mod:`.columnar`: a marshalled primitive map read straight
into key/value columns, and a decoded property value printed as Java prints it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .columnar_fields import SlowPathError, read_text, utf8_text
from .jformat import java_double, value_of

__all__ = ["property_text", "read_properties"]

_U16 = struct.Struct(">H").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_I8 = struct.Struct(">b").unpack_from
_F64 = struct.Struct(">d").unpack_from
#: Property tags of fixed-size numbers: (unpacker, size, Java's toString).
_NUMBERS: dict[int, tuple[Callable[[bytes, int], tuple[Any, ...]], int, Callable[[Any], str]]] = {
    5: (_I32, 4, str),
    6: (_I64, 8, str),
    7: (_F64, 8, java_double),
    2: (_I8, 1, str),
    4: (_I16, 2, str),
}


def property_text(value: Any) -> str | None:
    """A property value as Java's ``String.valueOf`` prints it (None stays None, a byte[]
    is shown as hex): ``1.1`` for the float 1.1f, ``1.0E-5``, ``{a=1, b=[x, true]}``."""
    if type(value) is str:
        return value
    if value is None:
        return None
    return value_of(value)


def read_properties(
    data: bytes,
    pos: int,
    end: int,
    keys: list[str],
    values: list[str | None],
    names: dict[bytes, str],
) -> int:
    """Append a primitive map at ``data[pos:end]`` as text; returns the entry count.

    ``names`` caches decoded keys (a batch has few distinct property names).
    """
    if pos + 4 > end:
        raise SlowPathError
    count: int = _I32(data, pos)[0]
    pos += 4
    if count < 0:
        if count != -1 or pos != end:
            raise SlowPathError
        return 0
    if count * 3 > end - pos:
        raise SlowPathError
    start = len(keys)
    for _ in range(count):
        kend = pos + 2 + _U16(data, pos)[0]
        if kend >= end:
            raise SlowPathError
        raw = data[pos + 2 : kend]
        key = names.get(raw)
        if key is None:
            key = names[raw] = read_text(data, pos + 2, kend)
        tag = data[kend]
        pos = kend + 1
        if tag == 9:  # string
            stop = pos + 2 + _U16(data, pos)[0]
            if stop > end:
                raise SlowPathError
            raw = data[pos + 2 : stop]
            value: str | None = (
                raw.decode("ascii") if raw.isascii() and b"\x00" not in raw else utf8_text(raw)
            )
            pos = stop
        elif (number := _NUMBERS.get(tag)) is not None:  # int, long, double, byte, short
            value = number[2](number[0](data, pos)[0])
            pos += number[1]
        elif tag == 1:  # boolean
            b = data[pos]
            if b > 1:
                raise SlowPathError
            value = "true" if b else "false"
            pos += 1
        elif tag == 0:  # null
            value = None
        elif tag == 13:  # big string
            n = _I32(data, pos)[0]
            stop = pos + 4 + n
            if n < 0 or stop > end:
                raise SlowPathError
            value = read_text(data, pos + 4, stop)
            pos = stop
        else:  # char, float, byte[], map, list: the full decoder's typed values
            raise SlowPathError
        keys.append(key)
        values.append(value)
    if pos != end or (count > 1 and len(set(keys[start:])) != count):
        raise SlowPathError  # overrun, trailing bytes or a duplicate key
    return count
