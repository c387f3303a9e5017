"""Java modified UTF-8 (``DataOutput.writeUTF``), i.e. CESU-8 with U+0000 as ``C0 80``.

Decoding is strict: it accepts exactly what Java's encoder can produce, so that
bytes -> str -> bytes is the identity. Lone surrogates (legal in Java strings) are
kept as lone surrogate code points; valid surrogate pairs become one code point.
"""

from __future__ import annotations

import re

from .errors import DecodeError, EncodeError

# Bytes that never occur in modified UTF-8 that is also plain UTF-8: NUL, C0 (NUL's
# lead byte), ED (surrogates) and F0+ (4-byte forms, which Java never writes).
_SLOW_BYTES = re.compile(rb"[\x00\xc0\xed\xf0-\xff]")
_FORBIDDEN = re.compile(rb"\x00|[\xf0-\xff]|\xc0(?!\x80)")
_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


def _split_pair(m: re.Match[str]) -> str:
    cp = ord(m.group()) - 0x10000
    return chr(0xD800 + (cp >> 10)) + chr(0xDC00 + (cp & 0x3FF))


def decode_mutf8(data: bytes, base: int = 0) -> str:
    """Decode modified UTF-8 bytes; errors raise DecodeError at ``base`` + position."""
    if data.isascii():
        if b"\x00" not in data:
            return data.decode("ascii")
    elif _SLOW_BYTES.search(data) is None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(base + exc.start, "modified UTF-8", exc.reason) from None
    return _decode_slow(data, base)


def _decode_slow(data: bytes, base: int) -> str:
    bad = _FORBIDDEN.search(data)
    if bad is not None:
        raise DecodeError(base + bad.start(), "modified UTF-8", f"byte {data[bad.start()]:#04x}")
    replaced = data.replace(b"\xc0\x80", b"\x00")
    try:
        text = replaced.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        # Each NUL in ``replaced`` stood for two input bytes (raw NULs were rejected above).
        pos = exc.start + replaced.count(b"\x00", 0, exc.start)
        raise DecodeError(base + pos, "modified UTF-8", exc.reason) from None
    if b"\xed" in data:
        # Join high+low surrogate pairs the way Java's String would show them.
        text = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    return text


def encode_mutf8(text: str) -> bytes:
    """Encode ``text`` as Java modified UTF-8 (no length prefix)."""
    if text.isascii():
        raw = text.encode("ascii")
        return raw.replace(b"\x00", b"\xc0\x80") if "\x00" in text else raw
    if max(text) >= "\U00010000":
        text = _SUPPLEMENTARY.sub(_split_pair, text)
    raw = text.encode("utf-8", "surrogatepass")
    return raw.replace(b"\x00", b"\xc0\x80") if "\x00" in text else raw


def utf16_length(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (Java's ``String.length()``)."""
    if text.isascii() or max(text) < "\U00010000":
        return len(text)
    return len(text) + len(_SUPPLEMENTARY.findall(text))


def encode_short_utf(text: str, what: str = "string") -> bytes:
    """``writeUTF`` framing: uint16 byte length + modified UTF-8 (max 65535 bytes)."""
    raw = encode_mutf8(text)
    if len(raw) > 0xFFFF:
        raise EncodeError(f"{what} is {len(raw)} bytes in modified UTF-8; writeUTF allows 65535")
    return len(raw).to_bytes(2, "big") + raw
