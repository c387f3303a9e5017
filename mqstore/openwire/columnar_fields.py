"""Reads the fields of one OpenWire Message frame in place for :mod:`.columnar`.

Only the common shapes are handled; anything unusual or malformed raises
:class:`SlowPathError`, which sends the frame to the full decoder.
"""

from __future__ import annotations

import struct

from .kinds import DestinationKind
from .mutf8 import decode_mutf8, replace_lone_surrogates

__all__ = ["SlowPathError", "read_head", "read_middle", "read_tail", "read_text", "utf8_text"]

_U16 = struct.Struct(">H").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I64 = struct.Struct(">q").unpack_from
_QQ = struct.Struct(">qq").unpack_from
_BQB = struct.Struct(">Bqb").unpack_from  # persistent, expiration, priority
_BI = struct.Struct(">Bi").unpack_from  # compressed, redeliveryCounter
_QQB = struct.Struct(">qqB").unpack_from  # brokerInTime, brokerOutTime, xGroupFirst
_SCHEMES = {k.value: k.scheme for k in DestinationKind}


class SlowPathError(Exception):
    """The frame needs the full decoder (unusual or malformed)."""


def read_text(data: bytes, pos: int, end: int) -> str:
    """Modified UTF-8 ``data[pos:end]``; ASCII without NUL is decoded in place."""
    if end > len(data):
        raise SlowPathError
    raw = data[pos:end]
    if raw.isascii() and b"\x00" not in raw:
        return raw.decode("ascii")
    return utf8_text(raw)


def utf8_text(raw: bytes, lenient: bool = False) -> str:
    """Decode ``raw``; a lone surrogate (only possible with an ED byte) becomes ``?``."""
    text = decode_mutf8(raw, lenient=lenient)
    return replace_lone_surrogates(text) if b"\xed" in raw else text


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A loose-encoded nullable string at ``pos`` (present flag, uint16 length, bytes)."""
    flag = data[pos]
    if not flag:
        return None, pos + 1
    if flag != 1:
        raise SlowPathError
    end = pos + 3 + _U16(data, pos + 1)[0]
    return read_text(data, pos + 3, end), end


def _destination(data: bytes, pos: int) -> tuple[str | None, int]:
    """A nullable destination at ``pos``; returns its qualified name."""
    flag = data[pos]
    if not flag:
        return None, pos + 1
    scheme = _SCHEMES.get(data[pos + 1])
    if flag != 1 or scheme is None:
        raise SlowPathError
    name, pos = _string(data, pos + 2)
    if name is None:
        name = "null"
    return (name if "," in name else f"{scheme}://{name}"), pos


def _producer(data: bytes, pos: int) -> tuple[str, int]:
    """A nullable ProducerId at ``pos`` as Java prints it (``null`` when absent)."""
    flag = data[pos]
    if not flag:
        return "null", pos + 1
    if flag != 1 or data[pos + 1] != 123:
        raise SlowPathError
    conn, pos = _string(data, pos + 2)
    value, session = _QQ(data, pos)
    return f"{'null' if conn is None else conn}:{session}:{value}", pos + 16


def _skip_transaction(data: bytes, pos: int) -> int:
    """Skip a present (local) transaction id at ``pos``; XA ids go the slow way."""
    if data[pos] != 1 or data[pos + 1] != 111:
        raise SlowPathError
    pos += 10
    flag = data[pos]
    if not flag:
        return pos + 1
    if flag != 1 or data[pos + 1] != 120:
        raise SlowPathError
    return _string(data, pos + 2)[1]


def _skip_broker_ids(data: bytes, pos: int) -> int:
    """Skip a present BrokerId array at ``pos``."""
    if data[pos] != 1:
        raise SlowPathError
    count = _I16(data, pos + 1)[0]
    if count < 0:
        raise SlowPathError
    pos += 3
    for _ in range(count):
        flag = data[pos]
        if flag:
            if flag != 1 or data[pos + 1] != 124:
                raise SlowPathError
            pos = _string(data, pos + 2)[1]
        else:
            pos += 1
    return pos


def _skip_destination(data: bytes, pos: int) -> int:
    """Position after a nullable ActiveMQDestination (a plain queue/topic name only)."""
    flag = data[pos]
    if not flag:
        return pos + 1
    if flag != 1 or data[pos + 1] not in _SCHEMES:
        raise SlowPathError
    return _string(data, pos + 2)[1]


def read_head(data: bytes) -> tuple[int, str | None, int, str | None, str | None, str | None]:
    """Parse producerId .. messageId's producerId (the part shared by one producer's frames).

    Returns the position of the message id's sequence numbers (or after its null flag),
    the original destination, how the JMSMessageID is made (mode 0 none, 1 ``text`` plus
    the producer sequence id, 2 ``text`` as is), the destination's qualified name
    (``Message.container``) and the message id's producer id as text
    (``Message.msgid_prod``: None without a message id).
    """
    pos = _producer(data, 10)[1]
    container, pos = _destination(data, pos)
    pos = _skip_transaction(data, pos) if data[pos] else pos + 1
    orig, pos = _destination(data, pos)
    flag = data[pos]  # messageId
    if not flag:
        return pos + 1, orig, 0, None, container, None
    if flag != 1 or data[pos + 1] != 110:
        raise SlowPathError
    text_view, pos = _string(data, pos + 2)
    producer, pos = _producer(data, pos)
    if text_view is None:
        return pos, orig, 1, producer + ":", container, producer
    text = text_view if text_view.startswith("ID:") else "ID:" + text_view
    return pos, orig, 2, text, container, producer


def read_middle(data: bytes, pos: int) -> tuple[int, str | None, bool, int, int, str | None]:
    """originalTransactionId .. type: position after, correlationId, persistent,
    priority, timestamp and type."""
    pos = _skip_transaction(data, pos) if data[pos] else pos + 1
    pos = _string(data, pos)[1] if data[pos] else pos + 1  # groupID
    corr, pos = _string(data, pos + 4)  # after groupSequence
    persistent, _, priority = _BQB(data, pos)
    if persistent > 1:
        raise SlowPathError
    pos += 10
    pos = _skip_destination(data, pos)  # replyTo
    timestamp = _I64(data, pos)[0]
    jms_type, pos = _string(data, pos + 8)
    return pos, corr, persistent == 1, priority, timestamp, jms_type


def read_tail(data: bytes, pos: int) -> int:
    """dataStructure .. the end: the redeliveryCounter (compressed frames go the slow way)."""
    if data[pos]:  # dataStructure
        raise SlowPathError
    pos += 1
    flag = data[pos]  # targetConsumerId
    if flag:
        if flag != 1 or data[pos + 1] != 122:
            raise SlowPathError
        pos = _string(data, pos + 2)[1] + 16
    else:
        pos += 1
    compressed, redelivery = _BI(data, pos)
    if compressed:
        raise SlowPathError
    pos += 5
    pos = _skip_broker_ids(data, pos) if data[pos] else pos + 1
    pos += 8  # arrival
    pos = _string(data, pos)[1] if data[pos] else pos + 1  # userID
    if data[pos] > 1 or data[pos + 1] > 1:
        raise SlowPathError
    pos += 2
    pos = _skip_broker_ids(data, pos) if data[pos] else pos + 1
    if _QQB(data, pos)[2] > 1 or pos + 17 != len(data):
        raise SlowPathError
    return int(redelivery)
