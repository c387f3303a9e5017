"""Immutable value types for a stored ActiveMQ message (``ActiveMQMessage`` and its ids)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .body import decode_body
from .kinds import DestinationKind, MessageKind
from .primitives import PropertyValue, decode_map, encode_map, to_plain

_PROPS = "_cached_properties"
_BODY = "_cached_body"
#: Default cap on the size of an inflated (compressed) body.
DEFAULT_MAX_DECOMPRESSED = 100 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Destination:
    """An ``ActiveMQDestination``: kind plus physical name."""

    kind: DestinationKind
    physical_name: str | None

    @property
    def qualified_name(self) -> str:
        """``getQualifiedName()``: ``queue://NAME``; composites (``a,b``) have no prefix."""
        name = "null" if self.physical_name is None else self.physical_name
        if "," in name:
            return name
        return f"{self.kind.scheme}://{name}"

    @classmethod
    def queue(cls, name: str) -> Destination:
        """A queue destination."""
        return cls(DestinationKind.QUEUE, name)

    @classmethod
    def topic(cls, name: str) -> Destination:
        """A topic destination."""
        return cls(DestinationKind.TOPIC, name)

    @classmethod
    def parse(cls, qualified: str) -> Destination:
        """Inverse of :attr:`qualified_name` for ``scheme://name`` strings."""
        scheme, sep, name = qualified.partition("://")
        for kind in DestinationKind:
            if sep and scheme == kind.scheme:
                return cls(kind, name)
        raise ValueError(f"not a qualified destination name: {qualified!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerId:
    """``ProducerId``; ``str()`` gives ``connectionId:sessionId:value`` like Java."""

    connection_id: str | None
    value: int
    session_id: int

    def __str__(self) -> str:
        return f"{_jstr(self.connection_id)}:{self.session_id}:{self.value}"

    @classmethod
    def parse(cls, text: str) -> ProducerId:
        """Parse ``connectionId:sessionId:value`` (the ``MSGID_PROD`` column), like Java."""
        conn, _, rest = text.rpartition(":")
        conn, _, session = conn.rpartition(":")
        try:
            return cls(conn, int(rest), int(session))
        except ValueError:
            raise ValueError(f"not a producer id: {text!r}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerId:
    """``ConsumerId`` (the message's ``targetConsumerId``)."""

    connection_id: str | None
    session_id: int
    value: int

    def __str__(self) -> str:
        return f"{_jstr(self.connection_id)}:{self.session_id}:{self.value}"


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionId:
    """``ConnectionId`` (nested in a local transaction id)."""

    value: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class LocalTransactionId:
    """``LocalTransactionId``; ``str()`` gives ``TX:connectionId:value``."""

    value: int
    connection_id: ConnectionId | None

    def __str__(self) -> str:
        conn = None if self.connection_id is None else self.connection_id.value
        return f"TX:{_jstr(conn)}:{self.value}"


@dataclasses.dataclass(frozen=True, slots=True)
class XATransactionId:
    """``XATransactionId``: format id, global transaction id and branch qualifier."""

    format_id: int
    gtrid: bytes | None
    bqual: bytes | None


TransactionId = LocalTransactionId | XATransactionId


@dataclasses.dataclass(frozen=True, slots=True)
class MessageId:
    """``MessageId``; ``str()`` is the JMSMessageID as Java prints it."""

    text_view: str | None
    producer_id: ProducerId | None
    producer_sequence_id: int
    broker_sequence_id: int

    def __str__(self) -> str:
        if self.text_view is not None:
            return self.text_view if self.text_view.startswith("ID:") else "ID:" + self.text_view
        return f"{_jstr(self.producer_id)}:{self.producer_sequence_id}"


def _jstr(value: object) -> str:
    """Java string concatenation of a possibly null value."""
    return "null" if value is None else str(value)


@dataclasses.dataclass(frozen=True)
class Message:
    """One stored OpenWire message (fields in wire order, section 10.4 of the reference).

    ``content`` and ``marshalled_properties`` hold the bytes exactly as stored, so
    :func:`~mqstore.openwire.encode` reproduces the original frame. The typed views
    (``properties``, ``text``, ``bytes_body``, ``map_body``, ``stream_body``,
    ``object_body``) are decoded from them on first use and raise ``DecodeError`` if
    those bytes are malformed (``decode()`` checks them up front unless ``lazy=True``).
    """

    kind: MessageKind
    command_id: int = 0
    response_required: bool = False
    producer_id: ProducerId | None = None
    destination: Destination | None = None
    transaction_id: TransactionId | None = None
    original_destination: Destination | None = None
    message_id: MessageId | None = None
    original_transaction_id: TransactionId | None = None
    group_id: str | None = None
    group_sequence: int = 0
    correlation_id: str | None = None
    persistent: bool = False
    expiration: int = 0
    priority: int = 0
    reply_to: Destination | None = None
    timestamp: int = 0
    type: str | None = None
    content: bytes | None = None
    marshalled_properties: bytes | None = None
    data_structure: None = None
    target_consumer_id: ConsumerId | None = None
    compressed: bool = False
    redelivery_counter: int = 0
    broker_path: tuple[str | None, ...] | None = None
    arrival: int = 0
    user_id: str | None = None
    received_by_dfbridge: bool = False
    droppable: bool = False
    cluster: tuple[str | None, ...] | None = None
    broker_in_time: int = 0
    broker_out_time: int = 0
    jms_xgroup_first_for_consumer: bool = False
    #: BlobMessage (type 29) only: ``ActiveMQBlobMessage``'s fields, after all the others.
    remote_blob_url: str | None = None
    mime_type: str | None = None
    deleted_by_broker: bool = False
    max_decompressed: int = dataclasses.field(
        default=DEFAULT_MAX_DECOMPRESSED, repr=False, compare=False
    )

    # -- derived JMS / JDBC columns -------------------------------------------------

    @property
    def jms_message_id(self) -> str | None:
        """JMSMessageID (``MessageId.toString()``), or None without a message id."""
        return None if self.message_id is None else str(self.message_id)

    @property
    def msgid_prod(self) -> str | None:
        """``ACTIVEMQ_MSGS.MSGID_PROD``: the message id's producer id as a string."""
        if self.message_id is None:
            return None
        return _jstr(self.message_id.producer_id)

    @property
    def msgid_seq(self) -> int | None:
        """``ACTIVEMQ_MSGS.MSGID_SEQ``: the message id's producer sequence id."""
        return None if self.message_id is None else self.message_id.producer_sequence_id

    @property
    def container(self) -> str | None:
        """``ACTIVEMQ_MSGS.CONTAINER``: the destination's qualified name."""
        return None if self.destination is None else self.destination.qualified_name

    # -- decoded views -----------------------------------------------------------------

    # Views are cached in the instance __dict__ by hand: functools.cached_property takes a
    # lock on Python 3.11, which costs more than decoding a small property map.

    @property
    def properties(self) -> Mapping[str, PropertyValue]:
        """Typed message properties (read-only; empty when none are stored)."""
        cache = self.__dict__
        try:
            return cache[_PROPS]  # type: ignore[no-any-return]
        except KeyError:
            raw = self.marshalled_properties
            props = MappingProxyType((decode_map(raw) if raw is not None else None) or {})
            cache[_PROPS] = props
            return props

    def plain_properties(self) -> dict[str, Any]:
        """Properties as plain Python values (``JInt(1)`` -> ``1``)."""
        return {k: to_plain(v) for k, v in self.properties.items()}

    @property
    def _body(self) -> Any:
        cache = self.__dict__
        try:
            return cache[_BODY]
        except KeyError:
            body = decode_body(self.kind, self.content, self.compressed, self.max_decompressed)
            cache[_BODY] = body
            return body

    @property
    def body(self) -> Any:
        """The decoded body in its natural type (str, bytes, dict, list or None)."""
        return self._body

    @property
    def text(self) -> str | None:
        """TextMessage text (None for a null text or another kind of message)."""
        return self._body if self.kind is MessageKind.TEXT else None

    @property
    def bytes_body(self) -> bytes | None:
        """BytesMessage body, inflated (None for other kinds)."""
        return self._body if self.kind is MessageKind.BYTES else None

    @property
    def map_body(self) -> dict[str, PropertyValue] | None:
        """MapMessage entries with Java types (None for other kinds)."""
        return self._body if self.kind is MessageKind.MAP else None

    @property
    def stream_body(self) -> list[PropertyValue] | None:
        """StreamMessage values with Java types (None for other kinds)."""
        return self._body if self.kind is MessageKind.STREAM else None

    @property
    def object_body(self) -> bytes | None:
        """ObjectMessage Java-serialized bytes, inflated (None for other kinds)."""
        return self._body if self.kind is MessageKind.OBJECT else None

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def with_properties(self, properties: Mapping[str, Any] | None) -> Message:
        """A copy whose ``marshalled_properties`` encode ``properties`` (None = no map)."""

        return self.replace(
            marshalled_properties=None if properties is None else encode_map(properties)
        )
