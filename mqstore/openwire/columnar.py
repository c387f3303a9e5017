"""Column-wise summaries of many ``MSG`` frames for analytics, without ``Message`` objects.

:func:`summarize` walks each frame once and appends the JMS header fields, the properties
as text and the text body straight into per-column lists. It accepts exactly what
:func:`~mqstore.openwire.decode` accepts; a frame it does not handle itself (compressed,
a BlobMessage, a MapMessage/StreamMessage body, rare property types, anything malformed)
is handed to the caller's ``slow`` function, so the columns equal a full decode row for row.

Strings are given a UTF-8 form, as the columns go to Arrow: a lone UTF-16 surrogate
(legal in a Java String) becomes ``?``, as Java's UTF-8 encoder writes it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import DecodeError
from .jformat import java_double, value_of
from .kinds import DestinationKind, MessageKind
from .mutf8 import decode_mutf8, replace_lone_surrogates

#: The summary columns, in order (``properties`` is kept apart as a flat key/value map).
SUMMARY_FIELDS: tuple[str, ...] = (
    "kind",
    "jms_message_id",
    "timestamp",
    "priority",
    "persistent",
    "correlation_id",
    "type",
    "redelivery_counter",
    "original_destination",
    "properties",
    "text",
    "body_size",
    "decode_error",
)

_HEAD = struct.Struct(">iBiB").unpack_from  # frame size, type, commandId, responseRequired
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
_QQ = struct.Struct(">qq").unpack_from
_BQB = struct.Struct(">Bqb").unpack_from  # persistent, expiration, priority
_BI = struct.Struct(">Bi").unpack_from  # compressed, redeliveryCounter
_QQB = struct.Struct(">qqB").unpack_from  # brokerInTime, brokerOutTime, xGroupFirst
#: Kinds the fast path reads; a BlobMessage (its own fields follow the others) goes slow.
_KIND_NAMES = {k.value: k.name.lower() for k in MessageKind if k is not MessageKind.BLOB}
_SCHEMES = {k.value: k.scheme for k in DestinationKind}
#: Kinds whose (uncompressed) body needs no decoding beyond what is done here.
_PLAIN_BODY = frozenset(
    k.value for k in (MessageKind.MESSAGE, MessageKind.BYTES, MessageKind.OBJECT, MessageKind.BLOB)
)
_TEXT = MessageKind.TEXT.value


class _SlowError(Exception):
    """The frame needs the full decoder (unusual or malformed)."""


def property_text(value: Any) -> str | None:
    """A property value as Java's ``String.valueOf`` prints it (None stays None, a byte[]
    is shown as hex): ``1.1`` for the float 1.1f, ``1.0E-5``, ``{a=1, b=[x, true]}``."""
    if type(value) is str:
        return value
    if value is None:
        return None
    return value_of(value)


def _text(data: bytes, pos: int, end: int) -> str:
    """Modified UTF-8 ``data[pos:end]``; ASCII without NUL is decoded in place."""
    if end > len(data):
        raise _SlowError
    raw = data[pos:end]
    if raw.isascii() and b"\x00" not in raw:
        return raw.decode("ascii")
    return _utf8_text(raw)


def _utf8_text(raw: bytes, lenient: bool = False) -> str:
    """Decode ``raw``; a lone surrogate (only possible with an ED byte) becomes ``?``."""
    text = decode_mutf8(raw, lenient=lenient)
    return replace_lone_surrogates(text) if b"\xed" in raw else text


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A loose-encoded nullable string at ``pos`` (present flag, uint16 length, bytes)."""
    flag = data[pos]
    if not flag:
        return None, pos + 1
    if flag != 1:
        raise _SlowError
    end = pos + 3 + _U16(data, pos + 1)[0]
    return _text(data, pos + 3, end), end


def _destination(data: bytes, pos: int) -> tuple[str | None, int]:
    """A nullable destination at ``pos``; returns its qualified name."""
    flag = data[pos]
    if not flag:
        return None, pos + 1
    scheme = _SCHEMES.get(data[pos + 1])
    if flag != 1 or scheme is None:
        raise _SlowError
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
        raise _SlowError
    conn, pos = _string(data, pos + 2)
    value, session = _QQ(data, pos)
    return f"{'null' if conn is None else conn}:{session}:{value}", pos + 16


def _skip_transaction(data: bytes, pos: int) -> int:
    """Skip a present (local) transaction id at ``pos``; XA ids go the slow way."""
    if data[pos] != 1 or data[pos + 1] != 111:
        raise _SlowError
    pos += 10
    flag = data[pos]
    if not flag:
        return pos + 1
    if flag != 1 or data[pos + 1] != 120:
        raise _SlowError
    return _string(data, pos + 2)[1]


def _skip_broker_ids(data: bytes, pos: int) -> int:
    """Skip a present BrokerId array at ``pos``."""
    if data[pos] != 1:
        raise _SlowError
    count = _I16(data, pos + 1)[0]
    if count < 0:
        raise _SlowError
    pos += 3
    for _ in range(count):
        flag = data[pos]
        if flag:
            if flag != 1 or data[pos + 1] != 124:
                raise _SlowError
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
        raise _SlowError
    return _string(data, pos + 2)[1]


def _head(data: bytes) -> tuple[int, str | None, int, str | None]:
    """Parse producerId .. messageId's producerId (the part shared by one producer's frames).

    Returns the position of the message id's sequence numbers (or after its null flag),
    the original destination, and how the JMSMessageID is made: mode 0 none, 1 ``text``
    plus the producer sequence id, 2 ``text`` as is.
    """
    pos = _producer(data, 10)[1]
    pos = _skip_destination(data, pos)  # destination
    pos = _skip_transaction(data, pos) if data[pos] else pos + 1
    orig, pos = _destination(data, pos)
    flag = data[pos]  # messageId
    if not flag:
        return pos + 1, orig, 0, None
    if flag != 1 or data[pos + 1] != 110:
        raise _SlowError
    text_view, pos = _string(data, pos + 2)
    producer, pos = _producer(data, pos)
    if text_view is None:
        return pos, orig, 1, producer + ":"
    return pos, orig, 2, (text_view if text_view.startswith("ID:") else "ID:" + text_view)


def _middle(data: bytes, pos: int) -> tuple[int, str | None, bool, int, int, str | None]:
    """originalTransactionId .. type: position after, correlationId, persistent,
    priority, timestamp and type."""
    pos = _skip_transaction(data, pos) if data[pos] else pos + 1
    pos = _string(data, pos)[1] if data[pos] else pos + 1  # groupID
    corr, pos = _string(data, pos + 4)  # after groupSequence
    persistent, _, priority = _BQB(data, pos)
    if persistent > 1:
        raise _SlowError
    pos += 10
    pos = _skip_destination(data, pos)  # replyTo
    timestamp = _I64(data, pos)[0]
    jms_type, pos = _string(data, pos + 8)
    return pos, corr, persistent == 1, priority, timestamp, jms_type


def _tail(data: bytes, pos: int) -> int:
    """dataStructure .. the end: the redeliveryCounter (compressed frames go the slow way)."""
    if data[pos]:  # dataStructure
        raise _SlowError
    pos += 1
    flag = data[pos]  # targetConsumerId
    if flag:
        if flag != 1 or data[pos + 1] != 122:
            raise _SlowError
        pos = _string(data, pos + 2)[1] + 16
    else:
        pos += 1
    compressed, redelivery = _BI(data, pos)
    if compressed:
        raise _SlowError
    pos += 5
    pos = _skip_broker_ids(data, pos) if data[pos] else pos + 1
    pos += 8  # arrival
    pos = _string(data, pos)[1] if data[pos] else pos + 1  # userID
    if data[pos] > 1 or data[pos + 1] > 1:
        raise _SlowError
    pos += 2
    pos = _skip_broker_ids(data, pos) if data[pos] else pos + 1
    if _QQB(data, pos)[2] > 1 or pos + 17 != len(data):
        raise _SlowError
    return int(redelivery)


def _properties(
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
        raise _SlowError
    count: int = _I32(data, pos)[0]
    pos += 4
    if count < 0:
        if count != -1 or pos != end:
            raise _SlowError
        return 0
    if count * 3 > end - pos:
        raise _SlowError
    start = len(keys)
    for _ in range(count):
        kend = pos + 2 + _U16(data, pos)[0]
        if kend >= end:
            raise _SlowError
        raw = data[pos + 2 : kend]
        key = names.get(raw)
        if key is None:
            key = names[raw] = _text(data, pos + 2, kend)
        tag = data[kend]
        pos = kend + 1
        if tag == 9:  # string
            stop = pos + 2 + _U16(data, pos)[0]
            if stop > end:
                raise _SlowError
            raw = data[pos + 2 : stop]
            value: str | None = (
                raw.decode("ascii") if raw.isascii() and b"\x00" not in raw else _utf8_text(raw)
            )
            pos = stop
        elif (number := _NUMBERS.get(tag)) is not None:  # int, long, double, byte, short
            value = number[2](number[0](data, pos)[0])
            pos += number[1]
        elif tag == 1:  # boolean
            b = data[pos]
            if b > 1:
                raise _SlowError
            value = "true" if b else "false"
            pos += 1
        elif tag == 0:  # null
            value = None
        elif tag == 13:  # big string
            n = _I32(data, pos)[0]
            stop = pos + 4 + n
            if n < 0 or stop > end:
                raise _SlowError
            value = _text(data, pos + 4, stop)
            pos = stop
        else:  # char, float, byte[], map, list: the full decoder's typed values
            raise _SlowError
        keys.append(key)
        values.append(value)
    if pos != end or (count > 1 and len(set(keys[start:])) != count):
        raise _SlowError  # overrun, trailing bytes or a duplicate key
    return count


#: Fixed layouts of the common all-null runs: originalTransactionId .. type, and
#: dataStructure .. the end (checked by their flag bytes before use).
_MID = struct.Struct(">BBiBBqbBqB").unpack_from
_MID_SIZE = 27
_TAIL = struct.Struct(">BBBiBqBBBBqqB").unpack_from
_TAIL_SIZE = 37
_MEMO = 8


def summarize(
    frames: Iterable[bytes | None],
    slow: Callable[[bytes], Mapping[str, Any]],
    *,
    text_spans: bool = False,
) -> dict[str, list[Any]]:
    """Summary columns of ``frames`` (see :data:`SUMMARY_FIELDS`), one entry per frame.

    ``properties`` is returned flat as ``prop_offsets`` (one more than frames),
    ``prop_keys``, ``prop_values`` and ``prop_null`` (the map is null). A ``None`` frame
    gives nulls everywhere. ``slow(frame)`` must return a mapping with every field for
    the frames the fast path declines (its ``properties``: a dict of text or None).

    With ``text_spans`` a TextMessage body is not decoded: ``text`` stays None and
    ``text_at``/``text_len`` give where its bytes are in the frame (``text_at`` is -1
    where ``text`` holds the value). Those bytes are not checked: they decode to the
    same string (text bodies are decoded leniently, see ``decode_mutf8``) only if they
    are valid UTF-8; if not, the caller must summarize those frames again without.
    """
    kinds: list[str | None] = []
    ids: list[str | None] = []
    stamps: list[int | None] = []
    prios: list[int | None] = []
    persist: list[bool | None] = []
    corrs: list[str | None] = []
    types: list[str | None] = []
    redeliv: list[int | None] = []
    origs: list[str | None] = []
    texts: list[str | None] = []
    text_at: list[int] = []
    text_len: list[int] = []
    sizes: list[int | None] = []
    errors: list[str | None] = []
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    nulls: list[bool] = []
    nprops = 0
    columns: tuple[list[Any], ...] = (kinds, ids, stamps, prios, persist, corrs, types, redeliv)
    columns += (origs,)
    tail: tuple[list[Any], ...] = (texts, sizes, errors)
    # The frames of one producer to one destination share their bytes from offset 10 up
    # to the message id's sequence number: remember a few such heads and their parse.
    memo: list[tuple[bytes, int, str | None, int, str | None]] = []
    names: dict[bytes, str] = {}
    head, middle, parse_tail, properties = _head, _middle, _tail, _properties
    for frame in frames:
        if frame is None:
            for col in columns + tail:
                col.append(None)
            nulls.append(True)
            offsets.append(nprops)
            text_at.append(-1)
            text_len.append(0)
            continue
        data = frame if type(frame) is bytes else bytes(frame)
        at = -1
        try:
            n = len(data)
            size, type_byte, _, rr = _HEAD(data, 0)
            kind = _KIND_NAMES.get(type_byte)
            if size != n - 4 or kind is None or rr > 1:
                raise _SlowError
            for known in memo:
                if data.startswith(known[0], 10):
                    _, pos, orig, id_mode, id_text = known
                    break
            else:
                pos, orig, id_mode, id_text = head(data)
                memo.insert(0, (data[10:pos], pos, orig, id_mode, id_text))
                del memo[_MEMO:]
            if id_mode == 1:
                jms_id: str | None = f"{id_text}{_QQ(data, pos)[0]}"
                pos += 16
            elif id_mode:
                jms_id = id_text
                pos += 16
            else:
                jms_id = None
            otx, gid, _, corr_flag, persistent, _, priority, reply, timestamp, type_flag = _MID(
                data, pos
            )
            if otx or gid or corr_flag or reply or type_flag or persistent > 1:
                pos, corr, persist_flag, priority, timestamp, jms_type = middle(data, pos)
            else:
                pos += _MID_SIZE
                corr = jms_type = None
                persist_flag = persistent == 1
            flag = data[pos]  # content
            if flag:
                if flag != 1:
                    raise _SlowError
                clen = _I32(data, pos + 1)[0]
                content = pos + 5
                pos = content + clen
                if clen < 0 or pos > n:
                    raise _SlowError
            else:
                clen = -1
                pos += 1
            flag = data[pos]  # marshalledProperties
            if flag:
                if flag != 1:
                    raise _SlowError
                plen = _I32(data, pos + 1)[0]
                props = pos + 5
                pos = pend = props + plen
                if plen < 0 or pos > n:
                    raise _SlowError
            else:
                props = pend = -1
                pos += 1
            if pos + _TAIL_SIZE == n:
                ds, tc, compressed, redelivery, bp, _, uid, dfb, drop, cl, _, _, xg = _TAIL(
                    data, pos
                )
                if ds or tc or compressed or bp or uid or cl or dfb > 1 or drop > 1 or xg > 1:
                    redelivery = parse_tail(data, pos)
            else:
                redelivery = parse_tail(data, pos)
            if type_byte == _TEXT:
                if clen < 0:
                    text = None
                else:
                    if clen < 4:
                        raise _SlowError
                    tlen = _I32(data, content)[0]
                    if tlen == -1:
                        text = None
                    elif tlen < 0 or tlen > clen - 4:
                        raise _SlowError
                    elif text_spans:
                        text = None
                        at = content + 4
                    else:
                        raw = data[content + 4 : content + 4 + tlen]
                        text = (
                            raw.decode("ascii") if raw.isascii() else _utf8_text(raw, lenient=True)
                        )
            elif clen >= 0 and type_byte not in _PLAIN_BODY:
                raise _SlowError
            else:
                text = None
            count = properties(data, props, pend, keys, values, names) if props >= 0 else 0
        except (_SlowError, DecodeError, struct.error, IndexError, ValueError, OverflowError):
            del keys[nprops:], values[nprops:]
            row = slow(data)
            for col, name in zip(columns, SUMMARY_FIELDS, strict=False):
                col.append(row[name])
            texts.append(row["text"])
            text_at.append(-1)
            text_len.append(0)
            sizes.append(row["body_size"])
            errors.append(row["decode_error"])
            found = row["properties"]
            nulls.append(found is None)
            if found:
                keys.extend(found)
                values.extend(found.values())
                nprops += len(found)
            offsets.append(nprops)
            continue
        kinds.append(kind)
        ids.append(jms_id)
        stamps.append(timestamp)
        prios.append(priority)
        persist.append(persist_flag)
        corrs.append(corr)
        types.append(jms_type)
        redeliv.append(redelivery)
        origs.append(orig)
        texts.append(text)
        text_at.append(at)
        text_len.append(tlen if at >= 0 else 0)
        sizes.append(clen if clen >= 0 else 0)
        errors.append(None)
        nulls.append(False)
        nprops += count
        offsets.append(nprops)
    result: dict[str, list[Any]] = dict(zip(SUMMARY_FIELDS[:9], columns, strict=True))
    result.update(text=texts, body_size=sizes, decode_error=errors)
    result.update(text_at=text_at, text_len=text_len)
    result.update(prop_offsets=offsets, prop_keys=keys, prop_values=values, prop_null=nulls)
    return result


__all__ = ["SUMMARY_FIELDS", "property_text", "summarize"]
