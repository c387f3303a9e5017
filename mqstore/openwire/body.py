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


def inflate(data: bytes, limit: int, expected_size: int | None = None) -> bytes:
    """Inflate a zlib stream; DecodeError if corrupt, truncated or larger than ``limit``."""
    cap = limit if expected_size is None else min(limit, expected_size)
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, cap + 1)
    except zlib.error as exc:
        raise DecodeError(0, "zlib stream", str(exc)) from None
    if len(out) > cap:
        what = f"at most {cap} inflated bytes"
        raise DecodeError(0, what, "the compressed body inflates to more")
    if not d.eof:
        raise DecodeError(len(data), "end of zlib stream", "compressed body is truncated")
    if expected_size is not None and len(out) != expected_size:
        raise DecodeError(0, f"{expected_size} inflated bytes", f"got {len(out)}")
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
        if not compressed:
            return content
        if len(content) < 4:
            raise DecodeError(0, "int32 uncompressed length of a compressed BytesMessage")
        size = _I32.unpack_from(content)[0]
        if size < 0 or size > limit:
            raise DecodeError(0, f"uncompressed length between 0 and {limit}", f"got {size}")
        return inflate(content[4:], limit, size)
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


def decode_text(content: bytes | None, compressed: bool, limit: int) -> str | None:
    """TextMessage body: optional zlib, then int32 length (-1 = null) + modified UTF-8."""
    if content is None:
        return None
    if compressed:
        return _inflated(_text_block, inflate(content, limit))  # type: ignore[no-any-return]
    return _text_block(content)


def _text_block(data: bytes) -> str | None:
    if len(data) < 4:
        raise DecodeError(0, "int32 text length", f"{len(data)} bytes of content")
    n = _I32.unpack_from(data)[0]
    if n == -1:
        return None
    if n < 0 or n > len(data) - 4:
        raise DecodeError(0, "text length that fits the content", f"got {n}")
    return decode_mutf8(data[4 : 4 + n], 4)


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
