"""Messages inside the broker: STOMP SEND -> OpenWire, stored row -> MESSAGE headers."""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field, replace

from mqstore import openwire
from mqstore.broker.frames import Frame, FrameError
from mqstore.openwire import Destination, Message, MessageKind, ProducerId
from mqstore.openwire.destnames import JAVA_BLANK
from mqstore.openwire.jformat import value_of
from mqstore.store.model import NewMessage, StoredMessage

#: Names ActiveMQ's ``setProperties`` hands to JMS field setters (``JMS_PROPERTY_SETERS``)
#: instead of storing a property; they win over ``priority``, ``type``, ``persistent``...
_JMS_SETTERS = frozenset(
    {
        "JMSXGroupID", "JMSXGroupSeq", "JMSCorrelationID", "JMSType", "JMSPriority",
        "JMSExpiration", "JMSTimestamp", "JMSDeliveryMode",
    }
)  # fmt: skip
#: SEND headers with a meaning of their own; every other header becomes a String property
#: (``content-type`` and ``amq-msg-type`` too, as ActiveMQ keeps them). ``JMSXUserID`` is
#: dropped, as ActiveMQ's STOMP does (a sender must not name the user a message came from).
_RESERVED = _JMS_SETTERS | {
    "destination", "content-length", "receipt", "transaction", "persistent",
    "priority", "expires", "correlation-id", "reply-to", "type", "message-id", "timestamp",
    "subscription", "ack", "redelivered", "login", "passcode", "JMSXUserID", "transformation",
}  # fmt: skip
#: ``transformation`` header values this broker serves, and whether each is a TextMessage
#: (on SUBSCRIBE they change nothing: each message is delivered in its own kind).
TRANSFORMATIONS = {"jms-text": True, "jms-byte": False}
#: MESSAGE headers the broker sets for each delivery, never taken from a property.
_PER_DELIVERY = frozenset({"content-length", "subscription", "redelivered", "ack"})
#: STOMP destination prefixes a reply-to may name (others stay a String property).
_REPLY_KINDS = ("queue", "topic", "temp-queue", "temp-topic")


#: STOMP prefixes of temporary destinations, which this broker does not serve.
_TEMPORARY = ("/temp-queue/", "/temp-topic/", "/remote-temp-queue/", "/remote-temp-topic/")


def container_of(stomp_dest: str) -> str:
    """``/queue/NAME`` -> ``queue://NAME`` (also ``/topic/``); any other name is a queue.

    As ActiveMQ names the destination (``setPhysicalName``): ``?options`` are cut off (they
    are settings of the consumer, see :func:`destination_options`) and the name trimmed, so
    ``/queue/orders?consumer.prefetchSize=1`` is queue ``orders``, in its CONTAINER column
    too. A name without a ``/queue/`` or ``/topic/`` prefix is the queue of that name, as
    ActiveMQ's STOMP falls back to (``orders`` is ``/queue/orders``); one that starts with
    another ``/prefix/`` (``/temp-queue/``, or a mistyped ``/queues/``) is refused."""
    trimmed = stomp_dest.strip(JAVA_BLANK)
    scheme, name = "queue://", trimmed
    for prefix, kind in (("/queue/", "queue://"), ("/topic/", "topic://")):
        if trimmed.startswith(prefix):
            scheme, name = kind, trimmed[len(prefix) :]
            break
    else:
        if trimmed.startswith("/"):
            note = " (no temporary destinations here)" if trimmed.startswith(_TEMPORARY) else ""
            raise FrameError(
                f"unsupported destination {stomp_dest!r}{note}: use /queue/NAME or "
                "/topic/NAME (a NAME without a leading / is a queue)"
            )
    name = name.partition("?")[0].strip(JAVA_BLANK)
    if not name:
        raise FrameError(f"destination {stomp_dest!r} has an empty name")
    _refuse_pattern(stomp_dest, name)
    return scheme + name


def _refuse_pattern(stomp_dest: str, name: str) -> None:
    """ActiveMQ reads ``a,b`` as a composite destination and ``a.*`` / ``a.>`` as a
    wildcard, never as one destination; this broker serves named destinations only, and
    would otherwise make one that ActiveMQ could never load from the tables."""
    if "," in name:
        raise FrameError(
            f"destination {stomp_dest!r} is composite (a,b): this broker does not fan out; "
            "send to, or subscribe to, each destination"
        )
    if "*" in name or ">" in name:
        raise FrameError(
            f"destination {stomp_dest!r} is a wildcard (* or >): this broker serves named "
            "destinations only; subscribe to each"
        )


def destination_options(stomp_dest: str) -> dict[str, str]:
    """The ``?key=value&...`` options of a destination (``consumer.prefetchSize=10``)."""
    _, question, query = stomp_dest.partition("?")
    return dict(urllib.parse.parse_qsl(query, keep_blank_values=True)) if question else {}


def stomp_name(container: str) -> str:
    """``queue://NAME`` -> ``/queue/NAME``."""
    kind, _, name = container.partition("://")
    return f"/{kind}/{name}"


@dataclass(slots=True, eq=False)
class BrokerMessage:
    """A message the broker holds: its OpenWire value and, when stored, its row id."""

    ow: Message
    container: str
    persistent: bool
    data: bytes | None = None
    store_id: int | None = None
    store_priority: int = 0
    seq: int = 0
    headers: list[tuple[str, str]] | None = field(default=None, repr=False)
    #: sent to a consumer before, though its redelivery counter did not move (its
    #: settlement failed to reach the store): delivered again with ``redelivered:true``
    delivered_before: bool = False
    #: Bytes of the headers (properties) a message without ``data`` holds besides its body:
    #: those of its SEND frame. Part of :attr:`size`, as they are of an encoded one's.
    header_bytes: int = 0

    @property
    def priority(self) -> int:
        return self.ow.priority

    @property
    def expiration(self) -> int:
        return self.ow.expiration

    @property
    def redelivery_counter(self) -> int:
        return self.ow.redelivery_counter

    @property
    def redelivered(self) -> bool:
        """Whether a delivery of it carries ``redelivered:true``."""
        return self.delivered_before or self.ow.redelivery_counter > 0

    @property
    def size(self) -> int:
        """Bytes it holds, as the memory and transaction limits count them: a persistent
        message as encoded (body, headers and properties), a non-persistent one (never
        encoded) as its body and the headers of its SEND."""
        if self.data is not None:
            return len(self.data)
        return len(self.ow.content or b"") + self.header_bytes

    def expired(self, now_ms: int) -> bool:
        """Whether the message's JMSExpiration has passed."""
        return 0 < self.ow.expiration <= now_ms

    def encoded(self) -> bytes:
        """The OpenWire frame (cached)."""
        if self.data is None:
            self.data = openwire.encode(self.ow)
        return self.data

    def new_message(self) -> NewMessage:
        """The row to hand to ``store.add``."""
        return NewMessage(
            container=self.container,
            msgid_prod=self.ow.msgid_prod or "",
            msgid_seq=self.ow.msgid_seq or 0,
            msg=self.encoded(),
            priority=self.ow.priority,
            expiration=self.ow.expiration,
        )

    def with_redelivery(self) -> BrokerMessage:
        """A copy with the redelivery counter incremented (re-encoded if stored)."""
        ow = self.ow.replace(redelivery_counter=self.ow.redelivery_counter + 1)
        copy = BrokerMessage(
            ow, self.container, self.persistent, None, self.store_id, self.store_priority,
            self.seq, header_bytes=self.header_bytes,
        )  # fmt: skip
        if self.persistent:
            copy.encoded()
        return copy

    def marked_redelivered(self) -> BrokerMessage:
        """A copy delivered with ``redelivered:true``, its redelivery counter (and encoding)
        unchanged: the message comes back because its settlement failed to reach the store,
        which counts for no redelivery towards the DLQ."""
        return self if self.redelivered else replace(self, delivered_before=True)

    @classmethod
    def from_row(cls, row: StoredMessage, seq: int) -> BrokerMessage:
        """A stored row (its MSG decoded); :class:`UnrenderableError` naming the row if its
        MSG does not decode."""
        try:
            ow = openwire.decode(row.msg, lazy=True)
        except openwire.DecodeError as exc:
            raise UnrenderableError(
                f"row {row.id} of {row.container} has a malformed MSG: {exc}"
            ) from None
        return cls(ow, row.container, True, row.msg, row.id, row.priority, seq)


def _int_header(frame: Frame, name: str, default: int, bits: int = 64) -> int:
    """An integer header that fits a Java ``long`` (``bits`` 32: an ``int``), as ActiveMQ
    parses it; anything else is a :class:`FrameError`."""
    text = frame.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise FrameError(f"header {name} must be an integer, got {text[:40]!r}") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise FrameError(f"header {name} does not fit a Java {'int' if bits == 32 else 'long'}")
    return value


def _jms_priority(value: int) -> int:
    """A priority as ActiveMQ stores it: cast to a Java ``byte``, then clamped to 0..9
    (``10`` is 9, ``-1`` is 0, ``265`` is 9, ``200`` is 0)."""
    as_byte = (value + 128) % 256 - 128
    return min(max(as_byte, 0), 9)


def _reply_destination(text: str) -> Destination | None:
    """The destination a ``reply-to`` header names (``/queue/``, ``/topic/``, ``/temp-queue/``,
    ``/temp-topic/``), or None for anything else."""
    for kind in _REPLY_KINDS:
        prefix = f"/{kind}/"
        if text.startswith(prefix) and len(text) > len(prefix):
            return Destination.parse(f"{kind}://{text[len(prefix) :]}")
    return None


def unsupported_transformation(value: str, command: str) -> str:
    """The refusal of a ``transformation`` header this broker does not serve."""
    return (
        f"unsupported transformation {value[:40]!r} on {command}: this broker serves "
        f"{' and '.join(TRANSFORMATIONS)} only (no JMS map, object, XML or JSON "
        "conversions); leave the header out for text or bytes as the frame says"
    )


def _is_text(frame: Frame) -> bool:
    """Whether a SEND makes a TextMessage: ``transformation`` (``jms-text``, ``jms-byte``) or
    ``amq-msg-type`` says so, else a body without ``content-length`` is text (ActiveMQ's
    LegacyFrameTranslator)."""
    transformation = frame.get("transformation")
    kind = frame.get("amq-msg-type")
    if kind is not None and kind.lower() not in ("text", "bytes"):
        raise FrameError(f"unsupported amq-msg-type {kind!r}: use text or bytes")
    if transformation is not None:
        text = TRANSFORMATIONS.get(transformation)
        if text is None:
            raise FrameError(unsupported_transformation(transformation, "SEND"))
        if kind is not None and (kind.lower() == "text") != text:
            raise FrameError(f"transformation {transformation} contradicts amq-msg-type {kind}")
        return text
    if kind is None:
        return "content-length" not in frame.headers
    return kind.lower() == "text"


def _persistent(frame: Frame) -> bool:
    """``JMSDeliveryMode`` (2 or PERSISTENT, 1 or NON_PERSISTENT) as ActiveMQ's setter reads
    it, else ``persistent:true``."""
    mode = frame.get("JMSDeliveryMode")
    if mode is None:
        return frame.get("persistent", "false") == "true"
    if mode.upper() in ("PERSISTENT", "NON_PERSISTENT"):
        return mode.upper() == "PERSISTENT"
    try:
        return _int_header(frame, "JMSDeliveryMode", 0, 32) == 2
    except FrameError:
        raise FrameError(
            f"header JMSDeliveryMode must be 1, 2, PERSISTENT or NON_PERSISTENT, got {mode[:40]!r}"
        ) from None


def from_send(frame: Frame, container: str, producer: ProducerId, sequence: int) -> BrokerMessage:
    """Build the OpenWire message of a SEND frame, as ActiveMQ's STOMP transport does."""
    persistent = _persistent(frame)
    priority = _jms_priority(
        _int_header(frame, "JMSPriority", _int_header(frame, "priority", 4), 32)
    )
    expires = _int_header(frame, "JMSExpiration", _int_header(frame, "expires", 0))
    now = int(time.time() * 1000)
    props = {k: v for k, v in frame.headers.items() if k not in _RESERVED}
    length = frame.get("content-length")
    if length is not None and frame.get("amq-msg-type") is not None:
        props["content-length"] = length  # ActiveMQ drops it only when it picks the kind
    reply = frame.get("reply-to")
    reply_to = _reply_destination(reply) if reply else None
    if reply and reply_to is None:
        props["reply-to"] = reply  # not a destination: kept as a String property, as ActiveMQ
    kwargs = dict(
        destination=Destination.parse(container),
        producer_id=producer,
        sequence=sequence,
        priority=priority,
        persistent=persistent,
        expiration=max(expires, 0),
        timestamp=_int_header(frame, "JMSTimestamp", now),
        broker_in_time=now,
        correlation_id=frame.get("JMSCorrelationID", frame.get("correlation-id")),
        type=frame.get("JMSType", frame.get("type")),
        reply_to=reply_to,
        properties=props or None,
        group_id=frame.get("JMSXGroupID"),
        group_sequence=_int_header(frame, "JMSXGroupSeq", 0, 32),
        response_required="receipt" in frame.headers,
    )
    try:
        if not _is_text(frame):
            ow = openwire.bytes_message(frame.body, **kwargs)
        else:
            try:
                text = frame.body.decode("utf-8")
            except UnicodeDecodeError:
                raise FrameError(
                    "text body is not UTF-8; send it as bytes (content-length, no "
                    "amq-msg-type:text)"
                ) from None
            ow = openwire.text_message(text, **kwargs)
        msg = BrokerMessage(ow, container, persistent)
        if persistent:
            msg.encoded()
        else:  # its size counts the headers too, as an encoded message's does
            msg.header_bytes = frame.head_size or sum(
                len(k) + len(v) + 2 for k, v in frame.headers.items()
            )
    except openwire.EncodeError as exc:
        raise FrameError(f"cannot encode message: {exc}") from None
    return msg


class UnrenderableError(ValueError):
    """A message has no STOMP form: its stored MSG, properties or body are malformed."""


def body_of(msg: Message) -> bytes:
    """The STOMP body of a message (text as Java's UTF-8, bytes as they are).

    A lone UTF-16 surrogate in a text (legal in Java) is sent as ``?``, as ActiveMQ's
    ``String.getBytes(UTF_8)`` does. Raises :class:`UnrenderableError` if the body is malformed.
    """
    try:
        if msg.kind is MessageKind.TEXT:
            return openwire.encode_utf8_java(msg.text or "")
        if msg.kind is MessageKind.BYTES:
            return msg.bytes_body or b""
        body = msg.body
    except openwire.DecodeError as exc:
        raise UnrenderableError(
            f"message {msg.jms_message_id} has a malformed body: {exc}"
        ) from None
    if isinstance(body, bytes):
        return body
    return openwire.encode_utf8_java(str(body)) if body else b""


def sized(msg: Message, body: bytes) -> bool | None:
    """Whether a MESSAGE frame carries ``content-length`` (see :func:`encode_frame`): as
    ActiveMQ's STOMP, a BytesMessage always does, even when empty, and a TextMessage does
    not, so clients that read ``content-length`` as "bytes" (ActiveMQ-CPP, NMS) get the kind
    that was sent; a text holding NUL has one too, or its frame would end there. Other kinds
    have one when their body is not empty."""
    if msg.kind is MessageKind.TEXT:
        return b"\x00" in body
    return True if msg.kind is MessageKind.BYTES else None


def message_headers(msg: BrokerMessage) -> list[tuple[str, str]]:
    """The MESSAGE headers that do not depend on the subscription (cached per message).
    Raises :class:`UnrenderableError` if the properties are malformed."""
    if msg.headers is not None:
        return msg.headers
    ow = msg.ow
    dest = ow.destination.qualified_name if ow.destination else msg.container
    headers = [
        ("message-id", ow.jms_message_id or ""),
        ("destination", stomp_name(dest)),
        ("priority", str(ow.priority)),
        ("expires", str(ow.expiration)),
        ("timestamp", str(ow.timestamp)),
        ("persistent", "true" if ow.persistent else "false"),
    ]
    if ow.correlation_id is not None:
        headers.append(("correlation-id", ow.correlation_id))
    if ow.type is not None:
        headers.append(("type", ow.type))
    if ow.reply_to is not None:
        headers.append(("reply-to", stomp_name(ow.reply_to.qualified_name)))
    if ow.original_destination is not None:
        headers.append(("original-destination", stomp_name(ow.original_destination.qualified_name)))
    if ow.group_id is not None:
        headers.append(("JMSXGroupID", ow.group_id))
    try:
        props = dict(ow.properties)  # typed: a JFloat prints as Java prints a float
    except openwire.DecodeError as exc:  # never delivered without them: the DLQ takes it
        raise UnrenderableError(
            f"message {ow.jms_message_id} has malformed properties: {exc}"
        ) from None
    # The frame's own (content-length from its body; subscription, redelivered and ack
    # from the subscription): a property of the same name would come first and win.
    taken = {k for k, _ in headers} | _PER_DELIVERY
    for key, value in props.items():
        if key not in taken:
            headers.append((key, value_of(value)))  # as ActiveMQ's STOMP: "" + value
    if not all(k.isascii() and v.isascii() for k, v in headers):
        # A lone surrogate (legal in a Java String) has no UTF-8 form: '?' as Java writes it.
        utf8 = openwire.replace_lone_surrogates
        headers = [(utf8(k), utf8(v)) for k, v in headers]
    msg.headers = headers
    return headers


def dead_letter(msg: BrokerMessage, dlq: str) -> BrokerMessage:
    """The copy that goes to the DLQ, recording where it came from (expiration cleared)."""
    ow = msg.ow.replace(
        destination=Destination.parse(dlq),
        original_destination=msg.ow.destination,
        expiration=0,
        broker_in_time=int(time.time() * 1000),
    )
    copy = BrokerMessage(ow, dlq, True)
    copy.encoded()
    return copy
