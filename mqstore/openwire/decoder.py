"""Decode a size-prefixed, loose-encoded OpenWire message frame (the ``MSG`` column)."""

from __future__ import annotations

import dataclasses
import struct

from .errors import DecodeError
from .kinds import DestinationKind, MessageKind
from .model import (
    DEFAULT_MAX_DECOMPRESSED,
    ConnectionId,
    ConsumerId,
    Destination,
    LocalTransactionId,
    Message,
    MessageId,
    ProducerId,
    TransactionId,
    XATransactionId,
)
from .mutf8 import decode_mutf8

_HEAD = struct.Struct(">iBiB")  # frame size, type, commandId, responseRequired
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_BQB = struct.Struct(">Bqb")  # persistent, expiration, priority
_BI = struct.Struct(">Bi")  # compressed, redeliveryCounter
_QQB = struct.Struct(">qqB")  # brokerInTime, brokerOutTime, jmsXGroupFirstForConsumer
#: BlobMessage's own fields: other messages leave them at their (class attribute) defaults.
_BLOB_FIELDS = ("remote_blob_url", "mime_type", "deleted_by_broker")
_FIELDS = tuple(f.name for f in dataclasses.fields(Message) if f.name not in _BLOB_FIELDS)
_BLOB = MessageKind.BLOB
_KINDS = {k.value: k for k in MessageKind}
_DEST_KINDS = {k.value: k for k in DestinationKind}
_MESSAGE_ID, _LOCAL_TX, _XA_TX, _CONNECTION_ID, _CONSUMER_ID, _PRODUCER_ID, _BROKER_ID = (
    110, 111, 112, 120, 122, 123, 124,
)  # fmt: skip


def _flag(data: bytes, pos: int, what: str) -> bool:
    b = data[pos]
    if b > 1:
        raise DecodeError(pos, f"boolean 0 or 1 ({what})", f"got {b}")
    return b == 1


def _nested(data: bytes, pos: int, what: str, types: tuple[int, ...]) -> int:
    """Read a nested object's present flag and type; 0 if absent, else the type byte."""
    if not _flag(data, pos, f"{what} present flag"):
        return 0
    t = data[pos + 1]
    if t not in types:
        raise DecodeError(pos + 1, f"{what} type in {types}", f"got {t}")
    return t


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    flag = data[pos]
    if flag == 0:
        return None, pos + 1
    if flag != 1:
        raise DecodeError(pos, "boolean 0 or 1 (string present flag)", f"got {flag}")
    end = pos + 3 + _U16.unpack_from(data, pos + 1)[0]
    if end > len(data):
        raise DecodeError(pos + 3, f"{end - pos - 3} string bytes", "frame is truncated")
    return decode_mutf8(data[pos + 3 : end], pos + 3), end


def _byte_seq(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    if not _flag(data, pos, f"{what} present flag"):
        return None, pos + 1
    n = _I32.unpack_from(data, pos + 1)[0]
    pos += 5
    if n < 0 or pos + n > len(data):
        raise DecodeError(pos - 4, f"{what} length within the frame", f"got {n}")
    return data[pos : pos + n], pos + n


def _producer_id(data: bytes, pos: int, what: str) -> tuple[ProducerId | None, int]:
    if not _nested(data, pos, what, (_PRODUCER_ID,)):
        return None, pos + 1
    conn, pos = _string(data, pos + 2)
    value, session = _QQ.unpack_from(data, pos)
    return ProducerId(conn, value, session), pos + 16


def _destination(data: bytes, pos: int, what: str) -> tuple[Destination | None, int]:
    t = _nested(data, pos, what, (100, 101, 102, 103))
    if not t:
        return None, pos + 1
    name, pos = _string(data, pos + 2)
    return Destination(_DEST_KINDS[t], name), pos


def _transaction_id(data: bytes, pos: int, what: str) -> tuple[TransactionId | None, int]:
    t = _nested(data, pos, what, (_LOCAL_TX, _XA_TX))
    if not t:
        return None, pos + 1
    pos += 2
    if t == _LOCAL_TX:
        value = _I64.unpack_from(data, pos)[0]
        pos += 8
        conn: ConnectionId | None = None
        if _nested(data, pos, "connectionId", (_CONNECTION_ID,)):
            name, pos = _string(data, pos + 2)
            conn = ConnectionId(name)
        else:
            pos += 1
        return LocalTransactionId(value, conn), pos
    format_id = _I32.unpack_from(data, pos)[0]
    gtrid, pos = _byte_seq(data, pos + 4, "globalTransactionId")
    bqual, pos = _byte_seq(data, pos, "branchQualifier")
    return XATransactionId(format_id, gtrid, bqual), pos


def _message_id(data: bytes, pos: int) -> tuple[MessageId | None, int]:
    if not _nested(data, pos, "messageId", (_MESSAGE_ID,)):
        return None, pos + 1
    text_view, pos = _string(data, pos + 2)
    producer, pos = _producer_id(data, pos, "messageId.producerId")
    seq, broker_seq = _QQ.unpack_from(data, pos)
    return MessageId(text_view, producer, seq, broker_seq), pos + 16


def _consumer_id(data: bytes, pos: int) -> tuple[ConsumerId | None, int]:
    if not _nested(data, pos, "targetConsumerId", (_CONSUMER_ID,)):
        return None, pos + 1
    conn, pos = _string(data, pos + 2)
    session, value = _QQ.unpack_from(data, pos)
    return ConsumerId(conn, session, value), pos + 16


def _broker_ids(data: bytes, pos: int, what: str) -> tuple[tuple[str | None, ...] | None, int]:
    if not _flag(data, pos, f"{what} present flag"):
        return None, pos + 1
    count = _I16.unpack_from(data, pos + 1)[0]
    if count < 0:
        raise DecodeError(pos + 1, f"{what} count >= 0", f"got {count}")
    pos += 3
    ids: list[str | None] = []
    for _ in range(count):
        if _nested(data, pos, f"{what} BrokerId", (_BROKER_ID,)):
            value, pos = _string(data, pos + 2)
            ids.append(value)
        else:
            ids.append(None)
            pos += 1
    return tuple(ids), pos


def _blob_fields(data: bytes, pos: int) -> tuple[dict[str, str | bool | None], int]:
    """``ActiveMQBlobMessage``'s own fields: remoteBlobUrl, mimeType, deletedByBroker."""
    url, pos = _string(data, pos)
    mime, pos = _string(data, pos)
    deleted = _flag(data, pos, "deletedByBroker")
    return dict(zip(_BLOB_FIELDS, (url, mime, deleted), strict=True)), pos + 1


def decode(
    data: bytes | bytearray | memoryview,
    *,
    lazy: bool = False,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> Message:
    """Decode one ``MSG`` value (int32 size, type byte 23..29, loose-encoded fields).

    Unless ``lazy``, the properties and body are decoded too, so any malformed part
    raises here. ``max_decompressed`` caps the inflated size of a compressed body.
    Raises :class:`DecodeError` (with ``.offset``) for anything malformed.
    """
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    if n < 10:
        heads = ("int32 frame size", "message type byte", "int32 commandId", "responseRequired")
        raise DecodeError(n, heads[0 if n < 4 else 1 if n < 5 else 2 if n < 9 else 3], "truncated")
    size, type_byte, command_id, response_required = _HEAD.unpack_from(data)
    if size != n - 4:
        raise DecodeError(0, f"frame size {n - 4}", f"size field says {size}")
    kind = _KINDS.get(type_byte)
    if kind is None:
        raise DecodeError(4, "message type 23..29", f"got {type_byte}")
    if response_required > 1:
        raise DecodeError(9, "boolean 0 or 1 (responseRequired)", f"got {response_required}")
    pos = 10
    what = "producerId"
    # Absent optional fields (a single 0 byte) are the common case: test them inline.
    try:
        producer_id, pos = _producer_id(data, pos, what)
        what = "destination"
        destination, pos = _destination(data, pos, what)
        what = "transactionId"
        if data[pos]:
            transaction_id, pos = _transaction_id(data, pos, what)
        else:
            transaction_id = None
            pos += 1
        what = "originalDestination"
        if data[pos]:
            original_destination, pos = _destination(data, pos, what)
        else:
            original_destination = None
            pos += 1
        what = "messageId"
        message_id, pos = _message_id(data, pos)
        what = "originalTransactionId"
        if data[pos]:
            original_transaction_id, pos = _transaction_id(data, pos, what)
        else:
            original_transaction_id = None
            pos += 1
        what = "groupID"
        if data[pos]:
            group_id, pos = _string(data, pos)
        else:
            group_id = None
            pos += 1
        what = "int32 groupSequence"
        group_sequence = _I32.unpack_from(data, pos)[0]
        pos += 4
        what = "correlationId"
        if data[pos]:
            correlation_id, pos = _string(data, pos)
        else:
            correlation_id = None
            pos += 1
        what = "persistent, expiration, priority"
        persistent, expiration, priority = _BQB.unpack_from(data, pos)
        if persistent > 1:
            raise DecodeError(pos, "boolean 0 or 1 (persistent)", f"got {persistent}")
        pos += 10
        what = "replyTo"
        if data[pos]:
            reply_to, pos = _destination(data, pos, what)
        else:
            reply_to = None
            pos += 1
        what = "int64 timestamp"
        timestamp = _I64.unpack_from(data, pos)[0]
        pos += 8
        what = "type"
        if data[pos]:
            jms_type, pos = _string(data, pos)
        else:
            jms_type = None
            pos += 1
        what = "content"
        content_at = pos + 5
        content, pos = _byte_seq(data, pos, what)
        what = "marshalledProperties"
        props_at = pos + 5
        properties, pos = _byte_seq(data, pos, what)
        what = "dataStructure"
        if _flag(data, pos, "dataStructure present flag"):
            raise DecodeError(pos + 1, "no dataStructure", f"unsupported type {data[pos + 1]}")
        pos += 1
        what = "targetConsumerId"
        if data[pos]:
            target_consumer_id, pos = _consumer_id(data, pos)
        else:
            target_consumer_id = None
            pos += 1
        what = "compressed, redeliveryCounter"
        compressed, redelivery_counter = _BI.unpack_from(data, pos)
        if compressed > 1:
            raise DecodeError(pos, "boolean 0 or 1 (compressed)", f"got {compressed}")
        pos += 5
        what = "brokerPath"
        if data[pos]:
            broker_path, pos = _broker_ids(data, pos, what)
        else:
            broker_path = None
            pos += 1
        what = "int64 arrival"
        arrival = _I64.unpack_from(data, pos)[0]
        pos += 8
        what = "userID"
        if data[pos]:
            user_id, pos = _string(data, pos)
        else:
            user_id = None
            pos += 1
        what = "recievedByDFBridge, droppable"
        dfbridge = _flag(data, pos, "recievedByDFBridge")
        droppable = _flag(data, pos + 1, "droppable")
        pos += 2
        what = "cluster"
        if data[pos]:
            cluster, pos = _broker_ids(data, pos, what)
        else:
            cluster = None
            pos += 1
        what = "brokerInTime, brokerOutTime, jmsXGroupFirstForConsumer"
        broker_in, broker_out, xgroup_first = _QQB.unpack_from(data, pos)
        if xgroup_first > 1:
            raise DecodeError(pos + 16, "boolean 0 or 1 (jmsXGroupFirstForConsumer)")
        pos += 17
        blob = None
        if kind is _BLOB:
            what = "remoteBlobUrl, mimeType, deletedByBroker"
            blob, pos = _blob_fields(data, pos)
    except (struct.error, IndexError):
        raise DecodeError(pos, what, "frame is truncated") from None
    if pos != n:
        raise DecodeError(pos, "end of frame", f"{n - pos} trailing bytes")
    # Bypass the frozen dataclass __init__ (one object.__setattr__ per field) for speed.
    msg = object.__new__(Message)
    msg.__dict__.update(
        zip(
            _FIELDS,
            (
                kind, command_id, response_required == 1, producer_id, destination,
                transaction_id, original_destination, message_id, original_transaction_id,
                group_id, group_sequence, correlation_id, persistent == 1, expiration, priority,
                reply_to, timestamp, jms_type, content, properties, None, target_consumer_id,
                compressed == 1, redelivery_counter, broker_path, arrival, user_id, dfbridge,
                droppable, cluster, broker_in, broker_out, xgroup_first == 1, max_decompressed,
            ),
            strict=True,
        )
    )  # fmt: skip
    if blob is not None:
        msg.__dict__.update(blob)
    if not lazy:
        _check_views(msg, content_at, props_at)
    return msg


def _check_views(msg: Message, content_at: int, props_at: int) -> None:
    """Decode properties and body now, reporting errors at frame offsets."""
    if msg.marshalled_properties is not None:
        try:
            msg.properties  # noqa: B018 - cached_property: decodes and caches
        except DecodeError as exc:
            raise exc.shifted(props_at, "in marshalledProperties") from None
    try:
        msg._body  # noqa: B018
    except DecodeError as exc:
        raise exc.shifted(content_at, "in content") from None
