"""Column-wise summaries of many ``MSG`` frames for analytics, without ``Message`` objects.

:func:`summarize` walks each frame once and appends the JMS header fields, the properties
as text, the text body and the key ActiveMQ's JDBC store derives from the message
(:data:`IDENTITY_FIELDS`) straight into per-column lists. It accepts exactly what
:func:`~mqstore.openwire.decode` accepts; a frame it does not handle itself (compressed,
a BlobMessage, a MapMessage/StreamMessage body, rare property types, anything malformed)
is handed to the caller's ``slow`` function, so the columns equal a full decode row for row.

Strings are given a UTF-8 form, as the columns go to Arrow: a lone UTF-16 surrogate
(legal in a Java String) becomes ``?``, as Java's UTF-8 encoder writes it.
A frame's fields are read by :mod:`.columnar_fields`, its properties by
:mod:`.columnar_properties`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .columnar_fields import SlowPathError, read_head, read_middle, read_tail, utf8_text
from .columnar_properties import property_text, read_properties
from .errors import DecodeError
from .kinds import MessageKind

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
#: The columns of the key ActiveMQ's JDBC store derives from a message, as ``Message``
#: gives them: ``container`` (the destination's qualified name), ``msgid_prod`` and
#: ``msgid_seq`` (the message id's producer id and sequence).
IDENTITY_FIELDS: tuple[str, ...] = ("container", "msgid_prod", "msgid_seq")

_HEAD = struct.Struct(">iBiB").unpack_from  # frame size, type, commandId, responseRequired
_I32 = struct.Struct(">i").unpack_from
_QQ = struct.Struct(">qq").unpack_from
#: Kinds the fast path reads; a BlobMessage (its own fields follow the others) goes slow.
_KIND_NAMES = {k.value: k.name.lower() for k in MessageKind if k is not MessageKind.BLOB}
#: Kinds whose (uncompressed) body needs no decoding beyond what is done here.
_PLAIN_BODY = frozenset(
    k.value for k in (MessageKind.MESSAGE, MessageKind.BYTES, MessageKind.OBJECT, MessageKind.BLOB)
)
_TEXT = MessageKind.TEXT.value
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
    the frames the fast path declines (its ``properties``: a dict of text or None), the
    :data:`IDENTITY_FIELDS` included.

    ``container``, ``msgid_prod`` and ``msgid_seq`` (:data:`IDENTITY_FIELDS`) are the
    message's ``Message.container``, ``msgid_prod`` and ``msgid_seq``, read from the same
    pass.

    ``body_at``/``body_len`` give where the content of a frame of another kind is (its
    payload: the fast path takes only uncompressed plain bodies), ``body_at`` -1 where it
    has none and -2 where the fast path declined the frame (decode it to find it).

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
    containers: list[str | None] = []
    producers: list[str | None] = []
    sequences: list[int | None] = []
    texts: list[str | None] = []
    text_at: list[int] = []
    text_len: list[int] = []
    body_at: list[int] = []
    body_len: list[int] = []
    sizes: list[int | None] = []
    errors: list[str | None] = []
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    nulls: list[bool] = []
    nprops = 0
    columns: tuple[list[Any], ...] = (kinds, ids, stamps, prios, persist, corrs, types, redeliv)
    columns += (origs,)
    identity: tuple[list[Any], ...] = (containers, producers, sequences)
    tail: tuple[list[Any], ...] = (texts, sizes, errors, *identity)
    # The frames of one producer to one destination share their bytes from offset 10 up
    # to the message id's sequence number: remember a few such heads and their parse.
    memo: list[tuple[bytes, int, str | None, int, str | None, str | None, str | None]] = []
    names: dict[bytes, str] = {}
    head, middle, parse_tail, properties = read_head, read_middle, read_tail, read_properties
    for frame in frames:
        if frame is None:
            for col in columns + tail:
                col.append(None)
            nulls.append(True)
            offsets.append(nprops)
            text_at.append(-1)
            text_len.append(0)
            body_at.append(-1)
            body_len.append(0)
            continue
        data = frame if type(frame) is bytes else bytes(frame)
        at = -1
        try:
            n = len(data)
            size, type_byte, _, rr = _HEAD(data, 0)
            kind = _KIND_NAMES.get(type_byte)
            if size != n - 4 or kind is None or rr > 1:
                raise SlowPathError
            for known in memo:
                if data.startswith(known[0], 10):
                    _, pos, orig, id_mode, id_text, container, producer = known
                    break
            else:
                pos, orig, id_mode, id_text, container, producer = head(data)
                memo.insert(0, (data[10:pos], pos, orig, id_mode, id_text, container, producer))
                del memo[_MEMO:]
            if id_mode:
                sequence: int | None = _QQ(data, pos)[0]
                jms_id: str | None = f"{id_text}{sequence}" if id_mode == 1 else id_text
                pos += 16
            else:
                sequence = jms_id = None
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
                    raise SlowPathError
                clen = _I32(data, pos + 1)[0]
                content = pos + 5
                pos = content + clen
                if clen < 0 or pos > n:
                    raise SlowPathError
            else:
                clen = -1
                pos += 1
            flag = data[pos]  # marshalledProperties
            if flag:
                if flag != 1:
                    raise SlowPathError
                plen = _I32(data, pos + 1)[0]
                props = pos + 5
                pos = pend = props + plen
                if plen < 0 or pos > n:
                    raise SlowPathError
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
                        raise SlowPathError
                    tlen = _I32(data, content)[0]
                    if tlen == -1:
                        text = None
                    elif tlen < 0 or tlen > clen - 4:
                        raise SlowPathError
                    elif text_spans:
                        text = None
                        at = content + 4
                    else:
                        raw = data[content + 4 : content + 4 + tlen]
                        text = (
                            raw.decode("ascii") if raw.isascii() else utf8_text(raw, lenient=True)
                        )
            elif clen >= 0 and type_byte not in _PLAIN_BODY:
                raise SlowPathError
            else:
                text = None
            count = properties(data, props, pend, keys, values, names) if props >= 0 else 0
        except (SlowPathError, DecodeError, struct.error, IndexError, ValueError, OverflowError):
            del keys[nprops:], values[nprops:]
            row = slow(data)
            for col, name in zip(columns, SUMMARY_FIELDS, strict=False):
                col.append(row[name])
            texts.append(row["text"])
            text_at.append(-1)
            text_len.append(0)
            body_at.append(-2)
            body_len.append(0)
            sizes.append(row["body_size"])
            errors.append(row["decode_error"])
            for col, name in zip(identity, IDENTITY_FIELDS, strict=True):
                col.append(row[name])
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
        containers.append(container)
        producers.append(producer)
        sequences.append(sequence)
        texts.append(text)
        text_at.append(at)
        text_len.append(tlen if at >= 0 else 0)
        if type_byte == _TEXT or clen < 0:
            body_at.append(-1)
            body_len.append(0)
        else:
            body_at.append(content)
            body_len.append(clen)
        sizes.append(clen if clen >= 0 else 0)
        errors.append(None)
        nulls.append(False)
        nprops += count
        offsets.append(nprops)
    result: dict[str, list[Any]] = dict(zip(SUMMARY_FIELDS[:9], columns, strict=True))
    result.update(text=texts, body_size=sizes, decode_error=errors)
    result.update(zip(IDENTITY_FIELDS, identity, strict=True))
    result.update(text_at=text_at, text_len=text_len, body_at=body_at, body_len=body_len)
    result.update(prop_offsets=offsets, prop_keys=keys, prop_values=values, prop_null=nulls)
    return result


__all__ = ["IDENTITY_FIELDS", "SUMMARY_FIELDS", "property_text", "summarize"]
