"""Typed Java primitive values and ActiveMQ's primitive map / list / stream encoding.

Python ``int`` cannot tell a Java ``int`` from a ``long``, so decoded numbers come back
as small ``int``/``float``/``str`` subclasses naming their Java type (``JInt(42) == 42``).
Plain Python values are accepted when encoding: ``bool``, ``str``, ``bytes``, ``None``,
``float`` (double), ``int`` (int if it fits 32 bits, else long), ``dict`` and ``list``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any, TypeAlias

from .errors import DecodeError, EncodeError
from .mutf8 import decode_mutf8, encode_mutf8, utf16_length

NULL, BOOLEAN, BYTE, CHAR, SHORT, INT, LONG, DOUBLE, FLOAT = range(9)
STRING, BYTE_ARRAY, MAP, LIST, BIG_STRING = range(9, 14)
#: ``MarshallingSupport.marshalString`` uses tag 9 below this UTF-16 length, else tag 13.
STRING_TAG_LIMIT = 8191
#: Nesting limit for maps/lists, so hostile input cannot exhaust the Python stack.
MAX_DEPTH = 64


class JByte(int):
    """Java ``byte`` (tag 2)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JByte({int(self)})"


class JShort(int):
    """Java ``short`` (tag 4)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JShort({int(self)})"


class JInt(int):
    """Java ``int`` (tag 5)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JInt({int(self)})"


class JLong(int):
    """Java ``long`` (tag 6)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JLong({int(self)})"


class JFloat(float):
    """Java ``float`` (tag 8); plain ``float`` is a Java ``double`` (tag 7)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JFloat({float(self)!r})"


class JChar(str):
    """Java ``char`` (tag 3): one UTF-16 code unit."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JChar({str(self)!r})"


class JString(str):
    """A string forced to tag 9 whatever its length (only seen when read that way)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JString({str(self)!r})"


class JBigString(str):
    """A string forced to tag 13 whatever its length (only seen when read that way)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JBigString({str(self)!r})"


PropertyValue: TypeAlias = (
    bool | int | float | str | bytes | dict[str, "PropertyValue"] | list["PropertyValue"] | None
)

_U8 = struct.Struct(">B")
_I8 = struct.Struct(">b")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_F32 = struct.Struct(">f")
_FIXED = (0, 1, 1, 2, 2, 4, 8, 8, 4)
_TAG_NAMES = (
    "null", "boolean", "byte", "char", "short", "int", "long", "double", "float",
    "string", "byte[]", "map", "list", "big string",
)  # fmt: skip


def _f32_from_bits(bits: int) -> float:
    if bits & 0x7F800000 == 0x7F800000 and bits & 0x7FFFFF:
        # NaN: widen by hand so the payload (and signalling bit) survives a round trip.
        dbits = ((bits >> 31) << 63) | (0x7FF << 52) | ((bits & 0x7FFFFF) << 29)
        return float(_F64.unpack(_U64.pack(dbits))[0])
    return float(_F32.unpack(_U32.pack(bits))[0])


def _f32_to_bytes(value: float) -> bytes:
    if math.isnan(value):
        dbits = _U64.unpack(_F64.pack(value))[0]
        mant = (dbits >> 29) & 0x7FFFFF or 0x400000
        return _U32.pack(((dbits >> 63) << 31) | 0x7F800000 | mant)
    try:
        return _F32.pack(value)
    except OverflowError:
        raise EncodeError(f"{value!r} is out of range for a Java float") from None


def _need(data: bytes, pos: int, n: int, base: int, what: str) -> None:
    if n < 0:
        raise DecodeError(base + pos, what, f"negative length {n}")
    if pos + n > len(data):
        raise DecodeError(base + pos, what, f"need {n} bytes, {len(data) - pos} remain")


def read_value(data: bytes, pos: int, base: int = 0, depth: int = 0) -> tuple[PropertyValue, int]:
    """Read one tagged value at ``pos``; return it and the position after it."""
    if pos >= len(data):
        raise DecodeError(base + pos, "primitive type tag", "end of data")
    tag = data[pos]
    pos += 1
    if tag in (STRING, BIG_STRING):
        if tag == STRING:
            _need(data, pos, 2, base, "string length (uint16)")
            n = _U16.unpack_from(data, pos)[0]
            pos += 2
        else:
            _need(data, pos, 4, base, "big string length (int32)")
            n = _I32.unpack_from(data, pos)[0]
            pos += 4
        _need(data, pos, n, base, f"{_TAG_NAMES[tag]} bytes")
        s = decode_mutf8(data[pos : pos + n], base + pos)
        pos += n
        # Plain str when the tag is the one marshalString would pick, else a forcing wrapper.
        big = n >= STRING_TAG_LIMIT and utf16_length(s) >= STRING_TAG_LIMIT
        if tag == STRING:
            return (JString(s) if big else s), pos
        return (s if big else JBigString(s)), pos
    if tag <= FLOAT:
        size = _FIXED[tag]
        if pos + size > len(data):
            _need(data, pos, size, base, f"{_TAG_NAMES[tag]} value")
        if tag == INT:
            return JInt(_I32.unpack_from(data, pos)[0]), pos + 4
        if tag == LONG:
            return JLong(_I64.unpack_from(data, pos)[0]), pos + 8
        if tag == BOOLEAN:
            b = data[pos]
            if b > 1:
                raise DecodeError(base + pos, "boolean 0 or 1", f"got {b}")
            return b == 1, pos + 1
        if tag == NULL:
            return None, pos
        if tag == DOUBLE:
            return float(_F64.unpack_from(data, pos)[0]), pos + 8
        if tag == BYTE:
            return JByte(_I8.unpack_from(data, pos)[0]), pos + 1
        if tag == SHORT:
            return JShort(_I16.unpack_from(data, pos)[0]), pos + 2
        if tag == CHAR:
            return JChar(chr(_U16.unpack_from(data, pos)[0])), pos + 2
        return JFloat(_f32_from_bits(_U32.unpack_from(data, pos)[0])), pos + 4
    if tag == BYTE_ARRAY:
        _need(data, pos, 4, base, "byte[] length (int32)")
        n = _I32.unpack_from(data, pos)[0]
        pos += 4
        _need(data, pos, n, base, "byte[] bytes")
        return data[pos : pos + n], pos + n
    if tag in (MAP, LIST):
        if depth >= MAX_DEPTH:
            raise DecodeError(base + pos - 1, f"nesting depth below {MAX_DEPTH}")
        if tag == MAP:
            return read_map(data, pos, base, depth + 1)
        return read_list(data, pos, base, depth + 1)
    raise DecodeError(base + pos - 1, "primitive type tag 0..13", f"got {tag}")


def read_map(
    data: bytes, pos: int, base: int = 0, depth: int = 0
) -> tuple[dict[str, PropertyValue] | None, int]:
    """Read ``marshalPrimitiveMap`` output (int32 count, -1 = null)."""
    _need(data, pos, 4, base, "map entry count (int32)")
    count = _I32.unpack_from(data, pos)[0]
    pos += 4
    if count < 0:
        if count != -1:
            raise DecodeError(base + pos - 4, "map entry count >= -1", f"got {count}")
        return None, pos
    if count * 3 > len(data) - pos:
        raise DecodeError(base + pos - 4, "map entry count that fits the data", f"got {count}")
    result: dict[str, PropertyValue] = {}
    end = len(data)
    for _ in range(count):
        if pos + 2 > end:
            _need(data, pos, 2, base, "map key length (uint16)")
        n = _U16.unpack_from(data, pos)[0]
        pos += 2
        if pos + n > end:
            _need(data, pos, n, base, "map key bytes")
        key_at = pos
        raw = data[pos : pos + n]
        key = decode_mutf8(raw, base + pos)
        pos += n
        if key in result:
            raise DecodeError(base + key_at, "unique map keys", f"duplicate key {key!r}")
        # Inline the common property types; everything else goes through read_value.
        tag = data[pos] if pos < end else -1
        if tag == STRING and pos + 3 <= end:
            n = _U16.unpack_from(data, pos + 1)[0]
            pos += 3
            if n < STRING_TAG_LIMIT and pos + n <= end:
                result[key] = decode_mutf8(data[pos : pos + n], base + pos)
                pos += n
                continue
            pos -= 3
        elif tag == INT and pos + 5 <= end:
            result[key] = JInt(_I32.unpack_from(data, pos + 1)[0])
            pos += 5
            continue
        elif tag == LONG and pos + 9 <= end:
            result[key] = JLong(_I64.unpack_from(data, pos + 1)[0])
            pos += 9
            continue
        result[key], pos = read_value(data, pos, base, depth)
    return result, pos


def read_list(
    data: bytes, pos: int, base: int = 0, depth: int = 0
) -> tuple[list[PropertyValue], int]:
    """Read ``marshalPrimitiveList`` output (int32 count then tagged values)."""
    _need(data, pos, 4, base, "list element count (int32)")
    count = _I32.unpack_from(data, pos)[0]
    if count < 0 or count > len(data) - pos - 4:
        raise DecodeError(base + pos, "list element count that fits the data", f"got {count}")
    pos += 4
    result: list[PropertyValue] = []
    for _ in range(count):
        value, pos = read_value(data, pos, base, depth)
        result.append(value)
    return result, pos


def decode_map(data: bytes, base: int = 0) -> dict[str, PropertyValue] | None:
    """Decode a whole buffer holding one primitive map (trailing bytes are an error)."""
    result, pos = read_map(data, 0, base)
    if pos != len(data):
        raise DecodeError(base + pos, "end of primitive map", f"{len(data) - pos} trailing bytes")
    return result


def decode_stream(data: bytes, base: int = 0) -> list[PropertyValue]:
    """Decode a StreamMessage body: tagged values up to the end of the buffer."""
    result: list[PropertyValue] = []
    pos = 0
    while pos < len(data):
        value, pos = read_value(data, pos, base)
        result.append(value)
    return result


def _int_range(value: int, bits: int, name: str) -> None:
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        raise EncodeError(f"{value} does not fit a Java {name}")


def write_value(out: list[bytes], value: Any, depth: int = 0) -> None:
    """Append the tagged encoding of ``value`` to ``out``."""
    t = type(value)
    if t is str or t is JString or t is JBigString:
        big = t is JBigString or (t is str and utf16_length(value) >= STRING_TAG_LIMIT)
        raw = encode_mutf8(value)
        if big:
            out.append(b"\x0d" + _I32.pack(len(raw)))
        elif len(raw) > 0xFFFF:
            raise EncodeError(f"string of {len(raw)} bytes does not fit tag 9 (writeUTF)")
        else:
            out.append(b"\x09" + _U16.pack(len(raw)))
        out.append(raw)
    elif t is bool:
        out.append(b"\x01\x01" if value else b"\x01\x00")
    elif value is None:
        out.append(b"\x00")
    elif t is JInt or t is int:
        if t is int and not -(1 << 31) <= value < (1 << 31):
            _int_range(value, 64, "long")
            out.append(b"\x06" + _I64.pack(value))
        else:
            _int_range(value, 32, "int")
            out.append(b"\x05" + _I32.pack(value))
    elif t is JLong:
        _int_range(value, 64, "long")
        out.append(b"\x06" + _I64.pack(value))
    elif t is float:
        out.append(b"\x07" + _F64.pack(value))
    elif t is JFloat:
        out.append(b"\x08" + _f32_to_bytes(value))
    elif t is JByte:
        _int_range(value, 8, "byte")
        out.append(b"\x02" + _I8.pack(value))
    elif t is JShort:
        _int_range(value, 16, "short")
        out.append(b"\x04" + _I16.pack(value))
    elif t is JChar:
        if len(value) != 1 or ord(value) > 0xFFFF:
            raise EncodeError(f"JChar must hold one UTF-16 code unit, got {value!r}")
        out.append(b"\x03" + _U16.pack(ord(value)))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out.append(b"\x0a" + _I32.pack(len(raw)))
        out.append(raw)
    elif isinstance(value, Mapping):
        _check_depth(depth)
        out.append(b"\x0b")
        write_map(out, value, depth + 1)
    elif isinstance(value, (list, tuple)):
        _check_depth(depth)
        out.append(b"\x0c" + _I32.pack(len(value)))
        for item in value:
            write_value(out, item, depth + 1)
    else:
        raise EncodeError(f"{t.__name__} is not a Java primitive value: {value!r}")


def _check_depth(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise EncodeError(f"maps/lists nested deeper than {MAX_DEPTH}")


def write_map(out: list[bytes], values: Mapping[str, Any] | None, depth: int = 0) -> None:
    """Append ``marshalPrimitiveMap`` output (``None`` is written as count -1)."""
    if values is None:
        out.append(b"\xff\xff\xff\xff")
        return
    out.append(_I32.pack(len(values)))
    # Keys holding surrogates (ED bytes): a surrogate pair and the character it encodes
    # are distinct str keys but one Java String, so the map could not be read back.
    surrogate_keys: dict[bytes, str] = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise EncodeError(f"map keys must be str, got {type(key).__name__}")
        raw = encode_mutf8(key)
        if len(raw) > 0xFFFF:
            raise EncodeError(f"map key of {len(raw)} bytes exceeds writeUTF's 65535")
        if b"\xed" in raw:
            other = surrogate_keys.setdefault(raw, key)
            if other != key:
                raise EncodeError(
                    f"map keys {other!r} and {key!r} are the same Java string (a surrogate "
                    "pair and the character it encodes): keep one of them"
                )
        out.append(_U16.pack(len(raw)))
        out.append(raw)
        write_value(out, value, depth)


def encode_map(values: Mapping[str, Any] | None) -> bytes:
    """Encode a primitive map (as used for message properties and MapMessage bodies)."""
    out: list[bytes] = []
    write_map(out, values)
    return b"".join(out)


def encode_stream(values: list[Any] | tuple[Any, ...]) -> bytes:
    """Encode StreamMessage body values (tagged values, no count).

    Maps and lists are refused: a JMS StreamMessage holds only primitives, strings and
    byte arrays (ActiveMQ's ``readObject`` fails on them).
    """
    out: list[bytes] = []
    for i, value in enumerate(values):
        if isinstance(value, (Mapping, list, tuple)):
            raise EncodeError(
                f"stream element {i} is a {type(value).__name__}: a StreamMessage holds "
                "primitives, strings and byte arrays only"
            )
        write_value(out, value)
    return b"".join(out)


def to_plain(value: PropertyValue) -> Any:
    """Strip the Java type wrappers: ``JInt(1)`` -> ``1``, ``JChar('a')`` -> ``'a'``."""
    t = type(value)
    if t is dict:
        return {k: to_plain(v) for k, v in value.items()}  # type: ignore[union-attr]
    if t is list:
        return [to_plain(v) for v in value]  # type: ignore[union-attr]
    if isinstance(value, bool) or value is None or t is bytes:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value
