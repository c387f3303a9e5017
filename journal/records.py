"""Journal operations (one per store change) and their compact binary encoding.

A journal *record* holds one atomic batch of operations: ``encode_batch(ops)`` gives its
payload, ``decode_batch(payload)`` the operations back. A local transaction commit is one
record holding all its operations, so it is replayed entirely or not at all.

Payload layout (little endian)::

    batch  := u32 op_count, op*
    op     := u8 tag, fields of that op in declaration order
    str    := u16 byte_length, UTF-8 bytes          (container, ids, names, xid, selector)
    blob   := u32 byte_length, bytes                 (message bodies)
    opt(T) := u8 presence (0 or 1), T if present
    int    := i64, priority := i8, bool := u8

Tags: 1 AddMessage, 2 RemoveMessages, 3 UpdateMessage, 4 AddSubscription,
5 DeleteSubscription, 6 AckSubscription, 7 XaPrepare, 8 XaCommit, 9 XaRollback,
10 PurgeDestination, 11 CheckpointMark. New operations get new tags; tags are never reused.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from journal.errors import JournalDecodeError

__all__ = [
    "AckSubscription",
    "AddMessage",
    "AddSubscription",
    "CheckpointMark",
    "DeleteSubscription",
    "Op",
    "PurgeDestination",
    "RemoveMessages",
    "UpdateMessage",
    "XaCommit",
    "XaPrepare",
    "XaRollback",
    "decode_batch",
    "encode_batch",
]


@dataclass(frozen=True, slots=True)
class AddMessage:
    """A new ACTIVEMQ_MSGS row (``xid`` set when added inside an XA transaction)."""

    id: int
    container: str
    msgid_prod: str | None
    msgid_seq: int | None
    expiration: int
    priority: int
    msg: bytes
    xid: str | None = None


@dataclass(frozen=True, slots=True)
class RemoveMessages:
    """Messages of ``container`` removed (consumed, expired, moved) by ID."""

    container: str
    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    """The MSG column of a message rewritten (e.g. redelivery counter)."""

    container: str
    id: int
    msg: bytes


@dataclass(frozen=True, slots=True)
class AddSubscription:
    """A durable subscription (an ACTIVEMQ_ACKS row) created."""

    container: str
    client_id: str
    sub_name: str
    selector: str | None
    sub_dest: str | None
    last_acked_id: int
    prioritized: bool


@dataclass(frozen=True, slots=True)
class DeleteSubscription:
    """A durable subscription removed."""

    container: str
    client_id: str
    sub_name: str


@dataclass(frozen=True, slots=True)
class AckSubscription:
    """A durable subscription acknowledged up to ``last_acked_id`` (per priority if set)."""

    container: str
    client_id: str
    sub_name: str
    last_acked_id: int
    priority: int | None


@dataclass(frozen=True, slots=True)
class XaPrepare:
    """An XA transaction prepared with its operations (``xid``: ActiveMQ's XID text)."""

    xid: str
    ops: tuple[Op, ...]


@dataclass(frozen=True, slots=True)
class XaCommit:
    """A prepared XA transaction committed."""

    xid: str


@dataclass(frozen=True, slots=True)
class XaRollback:
    """A prepared XA transaction rolled back."""

    xid: str


@dataclass(frozen=True, slots=True)
class PurgeDestination:
    """Every message of ``container`` removed."""

    container: str


@dataclass(frozen=True, slots=True)
class CheckpointMark:
    """A checkpoint covering the log up to ``Position(segment, offset)`` committed."""

    segment: int
    offset: int


Op: TypeAlias = (
    AddMessage
    | RemoveMessages
    | UpdateMessage
    | AddSubscription
    | DeleteSubscription
    | AckSubscription
    | XaPrepare
    | XaCommit
    | XaRollback
    | PurgeDestination
    | CheckpointMark
)

# Operations that may not appear inside an XaPrepare.
_NOT_IN_XA = (XaPrepare, XaCommit, XaRollback, CheckpointMark)

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_ADD_FIXED = struct.Struct("<BqqbB")  # tag, id, expiration, priority, presence bits
_ID_TAG = struct.Struct("<Bq")
_SUB_FIXED = struct.Struct("<BqB")  # tag, last_acked_id, flags
_ACK_FIXED = struct.Struct("<BqBb")  # tag, last_acked_id, has_priority, priority
_MARK = struct.Struct("<BQQ")

_HAS_PROD, _HAS_SEQ, _HAS_XID = 1, 2, 4
_PRIORITIZED, _HAS_SELECTOR, _HAS_SUB_DEST = 1, 2, 4
_MAX_STR = 0xFFFF

_Parts: TypeAlias = list[bytes]


def _str(parts: _Parts, value: str) -> None:
    data = value.encode()
    if len(data) > _MAX_STR:
        raise ValueError(f"string of {len(data)} UTF-8 bytes exceeds the {_MAX_STR} limit")
    parts.append(_U16.pack(len(data)))
    parts.append(data)


def _blob(parts: _Parts, value: bytes) -> None:
    parts.append(_U32.pack(len(value)))
    parts.append(bytes(value))


def _encode_op(parts: _Parts, op: Op) -> None:
    """Append the encoding of one operation to ``parts``."""
    if type(op) is AddMessage:
        flags = (
            (_HAS_PROD if op.msgid_prod is not None else 0)
            | (_HAS_SEQ if op.msgid_seq is not None else 0)
            | (_HAS_XID if op.xid is not None else 0)
        )
        parts.append(_ADD_FIXED.pack(1, op.id, op.expiration, op.priority, flags))
        _str(parts, op.container)
        if op.msgid_prod is not None:
            _str(parts, op.msgid_prod)
        if op.msgid_seq is not None:
            parts.append(_I64.pack(op.msgid_seq))
        if op.xid is not None:
            _str(parts, op.xid)
        _blob(parts, op.msg)
    elif type(op) is RemoveMessages:
        parts.append(_U8.pack(2))
        _str(parts, op.container)
        parts.append(struct.pack(f"<I{len(op.ids)}q", len(op.ids), *op.ids))
    elif type(op) is UpdateMessage:
        parts.append(_ID_TAG.pack(3, op.id))
        _str(parts, op.container)
        _blob(parts, op.msg)
    elif type(op) is AddSubscription:
        flags = (
            (_PRIORITIZED if op.prioritized else 0)
            | (_HAS_SELECTOR if op.selector is not None else 0)
            | (_HAS_SUB_DEST if op.sub_dest is not None else 0)
        )
        parts.append(_SUB_FIXED.pack(4, op.last_acked_id, flags))
        for text in (op.container, op.client_id, op.sub_name):
            _str(parts, text)
        if op.selector is not None:
            _str(parts, op.selector)
        if op.sub_dest is not None:
            _str(parts, op.sub_dest)
    elif type(op) is DeleteSubscription:
        parts.append(_U8.pack(5))
        for text in (op.container, op.client_id, op.sub_name):
            _str(parts, text)
    elif type(op) is AckSubscription:
        has_priority = op.priority is not None
        parts.append(_ACK_FIXED.pack(6, op.last_acked_id, has_priority, op.priority or 0))
        for text in (op.container, op.client_id, op.sub_name):
            _str(parts, text)
    elif type(op) is XaPrepare:
        parts.append(_U8.pack(7))
        _str(parts, op.xid)
        parts.append(_U32.pack(len(op.ops)))
        for inner in op.ops:
            if isinstance(inner, _NOT_IN_XA):
                raise ValueError(f"{type(inner).__name__} cannot be part of an XaPrepare")
            _encode_op(parts, inner)
    elif type(op) is XaCommit or type(op) is XaRollback:
        parts.append(_U8.pack(8 if type(op) is XaCommit else 9))
        _str(parts, op.xid)
    elif type(op) is PurgeDestination:
        parts.append(_U8.pack(10))
        _str(parts, op.container)
    elif type(op) is CheckpointMark:
        parts.append(_MARK.pack(11, op.segment, op.offset))
    else:
        raise TypeError(f"not a journal operation: {type(op).__name__}")


def encode_batch(ops: Iterable[Op]) -> bytes:
    """Encode an atomic batch of operations as one record payload.

    Raises ``ValueError`` when a field is out of range (e.g. a string over 65535 UTF-8 bytes,
    an integer outside i64, a priority outside i8) and ``TypeError`` for a non-operation.
    """
    ops = list(ops)
    parts: _Parts = [_U32.pack(len(ops))]
    for op in ops:
        try:
            _encode_op(parts, op)
        except struct.error as exc:
            raise ValueError(f"cannot encode {type(op).__name__}: {exc}") from None
    return b"".join(parts)


class _Cursor:
    """Sequential reader over a payload; every read is bounds-checked."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple[int, ...]:
        if self.pos + st.size > len(self.buf):
            raise JournalDecodeError(f"payload truncated at byte {self.pos}")
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def raw(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise JournalDecodeError(f"payload truncated at byte {self.pos}")
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def text(self) -> str:
        (n,) = self.take(_U16)
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise JournalDecodeError(f"invalid UTF-8 near byte {self.pos}: {exc}") from None

    def blob(self) -> bytes:
        (n,) = self.take(_U32)
        return bytes(self.raw(n))

    def i64(self) -> int:
        return self.take(_I64)[0]


def _dec_add(c: _Cursor) -> Op:
    c.pos -= 1
    _, id_, expiration, priority, flags = c.take(_ADD_FIXED)
    container = c.text()
    prod = c.text() if flags & _HAS_PROD else None
    seq = c.i64() if flags & _HAS_SEQ else None
    xid = c.text() if flags & _HAS_XID else None
    return AddMessage(id_, container, prod, seq, expiration, priority, c.blob(), xid)


def _dec_remove(c: _Cursor) -> Op:
    container = c.text()
    (n,) = c.take(_U32)
    ids = struct.unpack(f"<{n}q", c.raw(8 * n))
    return RemoveMessages(container, ids)


def _dec_update(c: _Cursor) -> Op:
    id_ = c.i64()
    return UpdateMessage(c.text(), id_, c.blob())


def _dec_add_sub(c: _Cursor) -> Op:
    last, flags = c.take(_SUB_TAIL)
    container, client_id, sub_name = c.text(), c.text(), c.text()
    selector = c.text() if flags & _HAS_SELECTOR else None
    sub_dest = c.text() if flags & _HAS_SUB_DEST else None
    return AddSubscription(
        container, client_id, sub_name, selector, sub_dest, last, bool(flags & _PRIORITIZED)
    )


def _dec_delete_sub(c: _Cursor) -> Op:
    return DeleteSubscription(c.text(), c.text(), c.text())


def _dec_ack(c: _Cursor) -> Op:
    last, has_priority, priority = c.take(_ACK_TAIL)
    container, client_id, sub_name = c.text(), c.text(), c.text()
    return AckSubscription(container, client_id, sub_name, last, priority if has_priority else None)


def _dec_prepare(c: _Cursor) -> Op:
    xid = c.text()
    (n,) = c.take(_U32)
    ops = tuple(_decode_op(c, nested=True) for _ in range(n))
    return XaPrepare(xid, ops)


def _dec_mark(c: _Cursor) -> Op:
    segment, offset = c.take(_MARK_TAIL)
    return CheckpointMark(segment, offset)


_ACK_TAIL = struct.Struct("<qBb")
_SUB_TAIL = struct.Struct("<qB")
_MARK_TAIL = struct.Struct("<QQ")

_DECODERS: dict[int, Callable[[_Cursor], Op]] = {
    1: _dec_add,
    2: _dec_remove,
    3: _dec_update,
    4: _dec_add_sub,
    5: _dec_delete_sub,
    6: _dec_ack,
    7: _dec_prepare,
    8: lambda c: XaCommit(c.text()),
    9: lambda c: XaRollback(c.text()),
    10: lambda c: PurgeDestination(c.text()),
    11: _dec_mark,
}
_NESTED_FORBIDDEN = frozenset({7, 8, 9, 11})


def _decode_op(c: _Cursor, *, nested: bool = False) -> Op:
    (tag,) = c.take(_U8)
    decoder = _DECODERS.get(tag)
    if decoder is None or (nested and tag in _NESTED_FORBIDDEN):
        raise JournalDecodeError(f"unknown operation tag {tag} at byte {c.pos - 1}")
    return decoder(c)


def decode_batch(payload: bytes | bytearray | memoryview) -> list[Op]:
    """Decode a record payload produced by :func:`encode_batch`.

    Raises :class:`~journal.errors.JournalDecodeError` if the payload is malformed.
    """
    c = _Cursor(memoryview(payload).cast("B"))
    (count,) = c.take(_U32)
    ops = [_decode_op(c) for _ in range(count)]
    if c.pos != len(c.buf):
        raise JournalDecodeError(f"{len(c.buf) - c.pos} unexpected bytes after the last op")
    return ops


def op_name(op: Op) -> str:
    """Name used for per-type counts in reports (the class name)."""
    return type(op).__name__


def flatten(ops: Sequence[Op]) -> Iterable[Op]:
    """Yield ops, descending into XaPrepare (for counting by type)."""
    for op in ops:
        yield op
        if isinstance(op, XaPrepare):
            yield from op.ops
