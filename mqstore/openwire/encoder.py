"""Encode a :class:`Message` in ActiveMQ's store layout (size-prefixed, loose, v11)."""

from __future__ import annotations

import dataclasses
import struct

from .errors import EncodeError
from .kinds import DestinationKind, MessageKind
from .model import (
    ConsumerId,
    Destination,
    LocalTransactionId,
    Message,
    MessageId,
    ProducerId,
    TransactionId,
    XATransactionId,
)
from .mutf8 import encode_mutf8

_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_HEAD = struct.Struct(">iBi?")  # frame size, type, commandId, responseRequired
_BQB = struct.Struct(">?qb")
_BI = struct.Struct(">?i")
_QQB = struct.Struct(">qq?")
_FLAGS = struct.Struct(">??")  # recievedByDFBridge, droppable
_ABSENT = b"\x00"
_BLOB = MessageKind.BLOB
#: Present flag and type of each destination kind; the type byte of each message kind
#: (a lookup that refuses any other value).
_DEST_HEADS = {k: bytes((1, k)) for k in DestinationKind}
_KIND_BYTES = {k: k.value for k in MessageKind}


def _string(out: list[bytes], value: str | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    raw = encode_mutf8(value)
    if len(raw) > 0xFFFF:
        raise EncodeError(f"string of {len(raw)} bytes exceeds writeUTF's 65535: {value[:40]!r}...")
    out.append(b"\x01" + _U16.pack(len(raw)))
    out.append(raw)


def _byte_seq(out: list[bytes], value: bytes | None) -> None:
    if value is None:
        out.append(_ABSENT)
    else:
        out.append(b"\x01" + _I32.pack(len(value)))
        out.append(value)


def _producer_id(out: list[bytes], value: ProducerId | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    out.append(b"\x01\x7b")
    _string(out, value.connection_id)
    out.append(_QQ.pack(value.value, value.session_id))


def _destination(out: list[bytes], value: Destination | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    out.append(_DEST_HEADS[value.kind])
    _string(out, value.physical_name)


def _transaction_id(out: list[bytes], value: TransactionId | None) -> None:
    if value is None:
        out.append(_ABSENT)
    elif isinstance(value, LocalTransactionId):
        out.append(b"\x01\x6f" + _I64.pack(value.value))
        if value.connection_id is None:
            out.append(_ABSENT)
        else:
            out.append(b"\x01\x78")
            _string(out, value.connection_id.value)
    elif isinstance(value, XATransactionId):
        out.append(b"\x01\x70" + _I32.pack(value.format_id))
        _byte_seq(out, value.gtrid)
        _byte_seq(out, value.bqual)
    else:
        raise EncodeError(f"not a transaction id: {value!r}")


def _message_id(out: list[bytes], value: MessageId | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    out.append(b"\x01\x6e")
    _string(out, value.text_view)
    _producer_id(out, value.producer_id)
    out.append(_QQ.pack(value.producer_sequence_id, value.broker_sequence_id))


def _consumer_id(out: list[bytes], value: ConsumerId | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    out.append(b"\x01\x7a")
    _string(out, value.connection_id)
    out.append(_QQ.pack(value.session_id, value.value))


def _broker_ids(out: list[bytes], value: tuple[str | None, ...] | None) -> None:
    if value is None:
        out.append(_ABSENT)
        return
    if len(value) > 0x7FFF:
        raise EncodeError(f"{len(value)} broker ids exceed the int16 count")
    out.append(b"\x01" + _I16.pack(len(value)))
    for broker_id in value:
        if broker_id is None:
            out.append(_ABSENT)
        else:
            out.append(b"\x01\x7c")
            _string(out, broker_id)


def _blob_fields(out: list[bytes], msg: Message) -> None:
    """``ActiveMQBlobMessage``'s own fields, after the others (BlobMessage only)."""
    _string(out, msg.remote_blob_url)
    _string(out, msg.mime_type)
    out.append(b"\x01" if msg.deleted_by_broker else _ABSENT)


def encode(msg: Message) -> bytes:
    """Marshal ``msg`` as ActiveMQ's JDBC store does (the ``MSG`` column value).

    ``content`` and ``marshalled_properties`` are written as they are, so a decoded
    message re-encodes to the same bytes. Raises :class:`EncodeError` for values that
    do not fit their Java types (naming the field).
    """
    if msg.data_structure is not None:
        raise EncodeError("dataStructure payloads are not supported")
    try:
        return _marshal(msg)
    except _WRONG_VALUE as exc:
        if isinstance(exc, EncodeError):
            raise
        raise EncodeError(f"cannot encode message field {_bad_field(msg)}: {exc}") from None


#: What a field of the wrong type or range raises while it is marshalled.
_WRONG_VALUE = (struct.error, OverflowError, TypeError, ValueError, AttributeError, KeyError)


def _bad_field(msg: Message) -> str:
    """The name of the first field that cannot be marshalled on its own."""
    blank = Message(kind=MessageKind.BLOB)
    for field in dataclasses.fields(Message):
        if field.name != "kind":
            try:
                _marshal(dataclasses.replace(blank, **{field.name: getattr(msg, field.name)}))
            except _WRONG_VALUE:
                return field.name
    return "kind"


def _marshal(msg: Message) -> bytes:
    """The frame; a field of the wrong type raises whatever its packing raises."""
    out: list[bytes] = [b""]  # the head, once the size is known
    _producer_id(out, msg.producer_id)
    _destination(out, msg.destination)
    _transaction_id(out, msg.transaction_id)
    _destination(out, msg.original_destination)
    _message_id(out, msg.message_id)
    _transaction_id(out, msg.original_transaction_id)
    _string(out, msg.group_id)
    out.append(_I32.pack(msg.group_sequence))
    _string(out, msg.correlation_id)
    out.append(_BQB.pack(msg.persistent, msg.expiration, msg.priority))
    _destination(out, msg.reply_to)
    out.append(_I64.pack(msg.timestamp))
    _string(out, msg.type)
    _byte_seq(out, msg.content)
    _byte_seq(out, msg.marshalled_properties)
    out.append(_ABSENT)  # dataStructure
    _consumer_id(out, msg.target_consumer_id)
    out.append(_BI.pack(msg.compressed, msg.redelivery_counter))
    _broker_ids(out, msg.broker_path)
    out.append(_I64.pack(msg.arrival))
    _string(out, msg.user_id)
    out.append(_FLAGS.pack(msg.received_by_dfbridge, msg.droppable))
    _broker_ids(out, msg.cluster)
    out.append(
        _QQB.pack(msg.broker_in_time, msg.broker_out_time, msg.jms_xgroup_first_for_consumer)
    )
    if msg.kind is _BLOB:
        _blob_fields(out, msg)
    elif msg.remote_blob_url is not None or msg.mime_type is not None or msg.deleted_by_broker:
        raise EncodeError("remote_blob_url, mime_type and deleted_by_broker need a BlobMessage")
    size = sum(map(len, out)) + _HEAD.size - 4
    out[0] = _HEAD.pack(size, _KIND_BYTES[msg.kind], msg.command_id, msg.response_required)
    return b"".join(out)
