"""Message body (``content``) encodings per message kind, with bounded inflation."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from .errors import DecodeError, EncodeError
from .kinds import MessageKind
from .mutf8 import decode_mutf8, encode_mutf8
from .primitives import decode_map, decode_stream, encode_map, encode_stream

_I32 = struct.Struct(">i")


_IN_CHUNK = 64 * 1024  # compressed bytes handed to zlib at a time
_OUT_CHUNK = 1024 * 1024  # inflated bytes asked of zlib at a time


class _Inflater:
    """A zlib stream read a bounded piece at a time, so output never outgrows what is asked."""

    def __init__(self, data: bytes | memoryview) -> None:
        self._zlib = zlib.decompressobj()
        self._view = memoryview(data)
        self._pos = 0
        self._tail: bytes | memoryview = b""

    @property
    def eof(self) -> bool:
        """Whether the end of the zlib stream was reached (later bytes are ignored)."""
        return self._zlib.eof

    def step(self, n: int) -> bytes:
        """1 to ``n`` more inflated bytes; b"" at the end of the stream or of the input."""
        z = self._zlib
        while not z.eof:
            if not self._tail and self._pos < len(self._view):
                self._tail = self._view[self._pos : self._pos + _IN_CHUNK]
                self._pos += len(self._tail)
            fed = self._tail
            try:
                piece = z.decompress(fed, n)
            except zlib.error as exc:
                raise DecodeError(0, "zlib stream", str(exc)) from None
            self._tail = z.unconsumed_tail
            if piece:
                return piece
            if not fed or len(self._tail) == len(fed):
                break  # input used up (or no progress): nothing more inside zlib
        return b""

    def read(self, n: int) -> list[bytes]:
        """Up to ``n`` inflated bytes, as pieces (fewer only where the stream or input ends)."""
        parts: list[bytes] = []
        left = n
        while left > 0 and (piece := self.step(min(left, _OUT_CHUNK))):
            parts.append(piece)
            left -= len(piece)
        return parts


def inflate(data: bytes, limit: int) -> bytes:
    """Inflate a whole zlib stream; DecodeError if corrupt, truncated or larger than ``limit``."""
    z = _Inflater(data)
    parts = z.read(limit + 1)  # the pieces are joined only once known to fit
    if sum(map(len, parts)) > limit:
        raise DecodeError(
            0, f"at most {limit} inflated bytes", "the compressed body inflates to more"
        )
    if not z.eof:
        raise DecodeError(len(data), "end of zlib stream", "compressed body is truncated")
    return b"".join(parts)


def _inflate_exactly(z: _Inflater, size: int, what: str) -> bytes:
    """The next ``size`` inflated bytes; what follows them in the stream is not read."""
    out = _inflate_at_most(z, size)
    if len(out) < size:
        raise DecodeError(0, f"{size} inflated bytes ({what})", f"got {len(out)}")
    return out


def _inflate_at_most(z: _Inflater, size: int) -> bytes:
    """The next ``size`` inflated bytes, fewer where the stream ends first (ActiveMQ's
    reader returns those too); what follows them in the stream is not read."""
    out = b"".join(z.read(size))
    if len(out) < size and not z.eof:
        raise DecodeError(0, "end of zlib stream", "compressed body is truncated")
    return out


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data)


def decode_body(kind: MessageKind, content: bytes | None, compressed: bool, limit: int) -> Any:
    """Decode ``content`` for ``kind``; offsets in errors are relative to ``content``."""
    if kind is MessageKind.TEXT:
        return decode_text(content, compressed, limit)
    if content is None:
        return _EMPTY.get(kind, lambda: None)()
    if kind is MessageKind.BYTES:
        return _inflated_bytes(content, limit) if compressed else content
    if kind is MessageKind.MAP:
        if compressed:
            return _inflated(_map_or_empty, inflate(content, limit))
        return _map_or_empty(content)
    if kind is MessageKind.STREAM:
        if compressed:
            return _inflated(decode_stream, inflate(content, limit))
        return decode_stream(content)
    if kind is MessageKind.OBJECT and compressed:
        return inflate(content, limit)
    return content


_EMPTY: dict[MessageKind, Any] = {
    MessageKind.BYTES: bytes,
    MessageKind.MAP: dict,
    MessageKind.STREAM: list,
}


def _map_or_empty(data: bytes) -> dict[str, Any]:
    return decode_map(data) or {}


def _inflated(decoder: Callable[[bytes], Any], data: bytes) -> Any:
    """Errors inside inflated data have no frame offset: report them at the content start."""
    try:
        return decoder(data)
    except DecodeError as exc:
        raise DecodeError(0, "well-formed inflated body", f"inflated data {exc}") from None


def _inflated_bytes(content: bytes, limit: int) -> bytes:
    """Compressed BytesMessage: int32 length, then zlib; only ``length`` bytes are inflated.

    As ActiveMQ's reader does: ActiveMQ 5.17's ``compress()`` deflates the whole backing
    buffer, so the stream may hold more; a stream that ends before ``length`` bytes gives
    the bytes it holds (``readBytes`` returns them); an empty content is an empty body.
    """
    if not content:
        return b""
    if len(content) < 4:
        raise DecodeError(0, "int32 uncompressed length of a compressed BytesMessage")
    size = _I32.unpack_from(content)[0]
    if size < 0 or size > limit:
        raise DecodeError(0, f"uncompressed length between 0 and {limit}", f"got {size}")
    z = _Inflater(memoryview(content)[4:])
    try:
        if size == 0:
            z.step(1)  # Java's Inflater still checks the stream header
            return b""
        return _inflate_at_most(z, size)
    except DecodeError as exc:
        raise exc.shifted(4) from None


def decode_text(content: bytes | None, compressed: bool, limit: int) -> str | None:
    """TextMessage body: optional zlib, then int32 length (-1 = null) + text bytes.

    The text is modified UTF-8 as Java writes it, or raw UTF-8 as ActiveMQ's STOMP
    transport stores it (decoded leniently, see :func:`decode_mutf8`).
    """
    if content is None:
        return None
    if compressed:
        return _inflated_text(content, limit)
    return _text_block(content)


def _inflated_text(content: bytes, limit: int) -> str | None:
    """Inflate the length first, then only that many bytes (as ``readUTF8`` reads a stream)."""
    z = _Inflater(content)
    head = b"".join(z.read(4))
    if len(head) < 4:
        if not z.eof:
            raise DecodeError(len(content), "end of zlib stream", "compressed body is truncated")
        raise DecodeError(0, "int32 text length", f"{len(head)} inflated bytes")
    n = _I32.unpack(head)[0]
    if n == -1:
        return None
    if n < 0:
        raise DecodeError(0, "text length >= -1", f"got {n}")
    if n > limit - 4:
        raise DecodeError(0, f"at most {limit} inflated bytes", f"the text length says {n + 4}")
    raw = _inflate_exactly(z, n, "the text length")
    return _inflated(lambda data: decode_mutf8(data, 4, lenient=True), raw)  # type: ignore[no-any-return]


def _text_block(data: bytes) -> str | None:
    if len(data) < 4:
        raise DecodeError(0, "int32 text length", f"{len(data)} bytes of content")
    n = _I32.unpack_from(data)[0]
    if n == -1:
        return None
    if n < 0 or n > len(data) - 4:
        raise DecodeError(0, "text length that fits the content", f"got {n}")
    return decode_mutf8(data[4 : 4 + n], 4, lenient=True)


def encode_body(kind: MessageKind, body: Any, compress: bool) -> bytes | None:
    """Build ``content`` for ``kind`` the way ActiveMQ's client message classes store it."""
    if kind is MessageKind.TEXT:
        if body is None:
            return None
        if not isinstance(body, str):
            raise EncodeError(f"text body must be str, got {type(body).__name__}")
        raw = encode_mutf8(body)
        block = _I32.pack(len(raw)) + raw
        return _deflate(block) if compress else block
    if kind is MessageKind.BYTES:
        if body is None:
            return None
        raw = bytes(body)
        return _I32.pack(len(raw)) + _deflate(raw) if compress else raw
    if kind is MessageKind.MAP:
        if not body:
            return None  # ActiveMQMapMessage stores no content for an empty map
        if not isinstance(body, Mapping):
            raise EncodeError(f"map body must be a mapping, got {type(body).__name__}")
        raw = encode_map(body)
        return _deflate(raw) if compress else raw
    if kind is MessageKind.STREAM:
        if body is None:
            return None
        raw = encode_stream(list(body))
        return _deflate(raw) if compress else raw
    if body is None:
        return None
    raw = bytes(body)
    return _deflate(raw) if compress and kind is MessageKind.OBJECT else raw
