"""Java modified UTF-8 (``DataOutput.writeUTF``), i.e. CESU-8 with U+0000 as ``C0 80``.

Decoding is strict: it accepts exactly what Java's encoder can produce, so that
bytes -> str -> bytes is the identity. Lone surrogates (legal in Java strings) are
kept as lone surrogate code points; valid surrogate pairs become one code point.

TextMessage bodies are decoded leniently (``lenient=True``): ActiveMQ's STOMP transport
stores them as raw UTF-8, and its reader (``MarshallingSupport.readUTF8``) also takes a
raw NUL and overlong 2- and 3-byte forms. Such text is kept as stored bytes (``content``),
never re-encoded, so the identity holds for the frame.
"""

from __future__ import annotations

import re

from .errors import DecodeError, EncodeError

# Bytes that never occur in modified UTF-8 that is also plain UTF-8: NUL, C0 (NUL's
# lead byte), ED (surrogates) and F0+ (4-byte forms, which Java never writes).
_SLOW_BYTES = re.compile(rb"[\x00\xc0\xed\xf0-\xff]")
_FORBIDDEN = re.compile(rb"\x00|[\xf0-\xff]|\xc0(?!\x80)")
_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")
# Overlong forms readUTF8 accepts: C0/C1 + continuation, E0 + 80..9F + continuation.
_OVERLONG = re.compile(rb"[\xc0\xc1][\x80-\xbf]|\xe0[\x80-\x9f][\x80-\xbf]")
_OVERLONG_LEADS = re.compile(rb"[\xc0\xc1\xe0]")
# What lenient decoding accepts: readUTF8's 1-3 byte forms plus well-formed 4-byte UTF-8.
_LENIENT_RUN = re.compile(
    rb"(?:[\x00-\x7f]|[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})*"
)


def _split_pair(m: re.Match[str]) -> str:
    cp = ord(m.group()) - 0x10000
    return chr(0xD800 + (cp >> 10)) + chr(0xDC00 + (cp & 0x3FF))


def decode_mutf8(data: bytes, base: int = 0, *, lenient: bool = False) -> str:
    """Decode modified UTF-8 bytes; errors raise DecodeError at ``base`` + position.

    ``lenient`` (TextMessage bodies) also accepts what ActiveMQ's ``readUTF8`` accepts (raw
    NUL, overlong 2- and 3-byte forms) and standard 4-byte UTF-8 (STOMP-stored text).
    """
    if lenient:
        return _decode_lenient(data, base)
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
    return _join_pairs(text) if b"\xed" in data else text


def _decode_lenient(data: bytes, base: int) -> str:
    if data.isascii():
        return data.decode("ascii")
    try:
        return data.decode("utf-8")  # also right for raw NUL and 4-byte forms
    except UnicodeDecodeError:
        pass
    fixed = data
    if _OVERLONG_LEADS.search(data) is not None:
        fixed = _OVERLONG.sub(_shortest_form, data)
    try:
        text = fixed.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        match = _LENIENT_RUN.match(data)
        pos = match.end() if match is not None else 0
        got = f"byte {data[pos]:#04x}" if pos < len(data) else "truncated sequence"
        raise DecodeError(base + pos, "UTF-8 text", got) from None
    return _join_pairs(text) if b"\xed" in data else text


def _shortest_form(m: re.Match[bytes]) -> bytes:
    """An overlong 2- or 3-byte sequence re-encoded in its shortest (standard) form."""
    b = m.group()
    if len(b) == 2:
        return chr((b[0] & 0x1F) << 6 | b[1] & 0x3F).encode()
    return chr((b[1] & 0x3F) << 6 | b[2] & 0x3F).encode()


def _join_pairs(text: str) -> str:
    """Join high+low surrogate pairs the way Java's String would show them."""
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def encode_utf8_java(text: str) -> bytes:
    """``text`` as Java's ``String.getBytes(UTF_8)``: an unpaired surrogate becomes ``?``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _join_pairs(text).encode("utf-8", "replace")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each unpaired surrogate as ``?`` (so it has a UTF-8 form), as Java's
    UTF-8 encoder writes it; ``text`` itself when it has none (the common, cheap case)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return encode_utf8_java(text).decode("utf-8")
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
