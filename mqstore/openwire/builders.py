"""Build new messages the way ActiveMQ's broker stores a persistent STOMP SEND.

Fixture rows written by ActiveMQ 5.17 for STOMP sends show: ``responseRequired``
true when the SEND asked for a receipt, the same ProducerId in ``producerId`` and
``messageId``, no text view, ``brokerInTime`` set at arrival, ``brokerOutTime`` and
``arrival`` 0. The caller supplies the ids and the broker sequence id (the store knows
them).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from .body import encode_body
from .destnames import name_problem
from .errors import EncodeError
from .kinds import MessageKind
from .model import Destination, Message, MessageId, ProducerId
from .primitives import encode_map


def _destination(value: Destination | str | None, what: str) -> Destination | None:
    """``value`` as a Destination; EncodeError if ActiveMQ could not read its name back."""
    if value is None:
        return None
    try:
        dest = value if isinstance(value, Destination) else Destination.parse(value)
    except ValueError as exc:
        raise EncodeError(str(exc)) from None
    problem = name_problem(dest.physical_name)
    if problem is not None:
        name = dest.qualified_name
        raise EncodeError(f"{what} {name!r}: {problem}; ActiveMQ could not read the message")
    return dest


def _producer(value: ProducerId | str) -> ProducerId:
    if isinstance(value, ProducerId):
        return value
    try:
        return ProducerId.parse(value)
    except ValueError as exc:
        raise EncodeError(str(exc)) from None


def build_message(
    kind: MessageKind,
    body: Any,
    *,
    destination: Destination | str,
    producer_id: ProducerId | str,
    sequence: int,
    broker_sequence_id: int = 0,
    timestamp: int | None = None,
    broker_in_time: int | None = None,
    priority: int = 4,
    persistent: bool = True,
    expiration: int = 0,
    correlation_id: str | None = None,
    type: str | None = None,
    reply_to: Destination | str | None = None,
    properties: Mapping[str, Any] | None = None,
    compress: bool = False,
    command_id: int = 1,
    group_id: str | None = None,
    group_sequence: int = 0,
    user_id: str | None = None,
    response_required: bool = True,
) -> Message:
    """Build a message of any kind; see :func:`text_message` for the arguments."""
    if not 0 <= priority <= 9:
        raise EncodeError(f"JMS priority must be 0..9, got {priority}")
    dest = _destination(destination, "destination")
    if dest is None:
        raise EncodeError("a destination is required")
    producer = _producer(producer_id)
    now = int(time.time() * 1000) if timestamp is None else timestamp
    content = encode_body(kind, body, compress)
    return Message(
        kind=kind,
        command_id=command_id,
        response_required=response_required,
        producer_id=producer,
        destination=dest,
        message_id=MessageId(None, producer, sequence, broker_sequence_id),
        group_id=group_id,
        group_sequence=group_sequence,
        correlation_id=correlation_id,
        persistent=persistent,
        expiration=expiration,
        priority=priority,
        reply_to=_destination(reply_to, "reply-to"),
        timestamp=now,
        type=type,
        content=content,
        marshalled_properties=encode_map(properties) if properties else None,
        compressed=compress and content is not None,
        user_id=user_id,
        broker_in_time=now if broker_in_time is None else broker_in_time,
    )


def text_message(text: str | None, **kwargs: Any) -> Message:
    """A TextMessage (``text`` None means a null body).

    Keyword arguments: ``destination`` (a :class:`Destination` or ``"queue://NAME"``; like
    ``reply_to``, EncodeError for a name ActiveMQ could not read back, e.g. a blank one),
    ``producer_id`` (a :class:`ProducerId` or ``"connId:session:value"``), ``sequence``
    (producer sequence id), and optionally ``broker_sequence_id``, ``timestamp`` and
    ``broker_in_time`` (epoch ms, default now), ``priority`` (0..9, default 4),
    ``persistent`` (default True), ``expiration`` (epoch ms, 0 = never),
    ``correlation_id``, ``type``, ``reply_to``, ``properties`` (a mapping of
    :data:`PropertyValue`), ``compress`` (zlib the body), ``command_id``, ``group_id``,
    ``group_sequence``, ``user_id`` and ``response_required`` (default True; ActiveMQ's
    STOMP sets it only for a SEND with a ``receipt``).
    """
    return build_message(MessageKind.TEXT, text, **kwargs)


def bytes_message(body: bytes | None, **kwargs: Any) -> Message:
    """A BytesMessage; arguments as for :func:`text_message`."""
    return build_message(MessageKind.BYTES, body, **kwargs)


def map_message(entries: Mapping[str, Any] | None, **kwargs: Any) -> Message:
    """A MapMessage (values typed as for properties); arguments as for :func:`text_message`."""
    return build_message(MessageKind.MAP, entries, **kwargs)


def stream_message(values: Iterable[Any] | None, **kwargs: Any) -> Message:
    """A StreamMessage of typed values; arguments as for :func:`text_message`."""
    return build_message(MessageKind.STREAM, None if values is None else list(values), **kwargs)
