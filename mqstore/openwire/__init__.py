"""OpenWire codec for ActiveMQ's ``ACTIVEMQ_MSGS.MSG`` column (store format v11, loose).

Pure Python, no I/O. :func:`decode` turns a stored frame into a :class:`Message`,
:func:`encode` turns it back into identical bytes, and the builders create new
messages the way ActiveMQ's broker stores a STOMP SEND. :mod:`.xid_column` reads and writes
ActiveMQ's text in the XID column of an XA-prepared row (OpenWire's encoded XID inside it).
"""

from __future__ import annotations

from .body import decode_body, encode_body
from .builders import bytes_message, map_message, stream_message, text_message
from .decoder import decode
from .encoder import encode
from .errors import DecodeError, EncodeError
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
from .mutf8 import decode_mutf8, encode_mutf8, encode_utf8_java, replace_lone_surrogates
from .primitives import (
    JBigString,
    JByte,
    JChar,
    JFloat,
    JInt,
    JLong,
    JShort,
    JString,
    PropertyValue,
    decode_map,
    decode_stream,
    encode_map,
    encode_stream,
    to_plain,
)

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED",
    "ConnectionId",
    "ConsumerId",
    "DecodeError",
    "Destination",
    "DestinationKind",
    "EncodeError",
    "JBigString",
    "JByte",
    "JChar",
    "JFloat",
    "JInt",
    "JLong",
    "JShort",
    "JString",
    "LocalTransactionId",
    "Message",
    "MessageId",
    "MessageKind",
    "ProducerId",
    "PropertyValue",
    "TransactionId",
    "XATransactionId",
    "bytes_message",
    "decode",
    "decode_body",
    "decode_map",
    "decode_mutf8",
    "decode_stream",
    "encode",
    "encode_body",
    "encode_map",
    "encode_mutf8",
    "encode_stream",
    "encode_utf8_java",
    "map_message",
    "replace_lone_surrogates",
    "stream_message",
    "text_message",
    "to_plain",
]
