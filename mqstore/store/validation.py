"""Checks on what a broker hands the store, before anything is written."""

from __future__ import annotations

from collections.abc import Sequence

from mqstore.errors import DuplicateMessageError, InvalidMessageError
from mqstore.schema import NAME_LENGTH
from mqstore.store.model import (
    CONTAINER_PREFIXES,
    Ack,
    Batch,
    NewMessage,
    Removal,
    SubscriptionKey,
)

#: The range of a Java ``long``, and of ActiveMQ's BIGINT columns.
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def check_text(what: str, value: str) -> None:
    """PostgreSQL text cannot hold NUL characters (its driver raises a DataError)."""
    if "\x00" in value:
        raise InvalidMessageError(
            f"{what} {value[:40]!r} contains a NUL character, which PostgreSQL cannot store"
        )


def check_container(container: str) -> None:
    """A qualified ActiveMQ destination name (``queue://NAME`` ...) of at most 250 chars."""
    if not isinstance(container, str) or not container.startswith(CONTAINER_PREFIXES):
        raise InvalidMessageError(
            f"destination {container!r} must start with one of {', '.join(CONTAINER_PREFIXES)}"
        )
    check_text("destination", container)
    name = container.split("://", 1)[1]
    if not name:
        raise InvalidMessageError(f"destination {container!r} has an empty name")
    if len(container) > NAME_LENGTH:
        raise InvalidMessageError(
            f"destination {container[:40]!r}... is {len(container)} characters; ActiveMQ's "
            f"CONTAINER column holds at most {NAME_LENGTH}: use a shorter name"
        )


def check_topic(container: str) -> None:
    """Durable subscriptions live on topics only."""
    check_container(container)
    if not container.startswith("topic://"):
        raise InvalidMessageError(f"durable subscriptions need a topic, not {container!r}")


def check_subscription(key: SubscriptionKey, selector: str | None, sub_dest: str | None) -> None:
    """A durable subscription whose values fit ActiveMQ's ACKS columns."""
    check_topic(key.container)
    if sub_dest is not None:
        check_container(sub_dest)
    for what, value in (("client id", key.client_id), ("subscription name", key.sub_name)):
        if not value or len(value) > NAME_LENGTH:
            raise InvalidMessageError(
                f"durable subscription {what} must be 1..{NAME_LENGTH} characters, got "
                f"{len(value or '')} ({key.container})"
            )
        check_text(f"durable subscription {what}", value)
    if selector is not None:
        check_text("selector", selector)
    if selector is not None and len(selector) > NAME_LENGTH:
        raise InvalidMessageError(
            f"selector of {len(selector)} characters is too long: ActiveMQ's SELECTOR column "
            f"holds at most {NAME_LENGTH}; use a shorter one ({key.container}, "
            f"{key.client_id}/{key.sub_name})"
        )


def check_messages(messages: Sequence[NewMessage], max_bytes: int) -> int:
    """Validate a batch of new messages; raises before anything is written. Returns the
    bytes of their bodies."""
    seen: set[tuple[str, str, int]] = set()
    total = 0
    for m in messages:
        check_container(m.container)
        # Types first: a comparison of None or a string with a number is a bare TypeError.
        if not isinstance(m.priority, int) or not 0 <= m.priority <= 9:
            raise InvalidMessageError(f"priority {m.priority!r} is outside 0..9 ({m.container})")
        for what, value in (("expiration", m.expiration), ("producer sequence", m.msgid_seq)):
            if not isinstance(value, int) or not LONG_MIN <= value <= LONG_MAX:
                raise InvalidMessageError(
                    f"{what} {value!r} is not an integer that fits a Java long (ActiveMQ's "
                    "BIGINT column)"
                )
        if m.expiration < 0:
            raise InvalidMessageError(
                f"expiration {m.expiration} is negative: use 0 for never, else epoch ms"
            )
        if not m.msgid_prod or len(m.msgid_prod) > NAME_LENGTH:
            raise InvalidMessageError(
                f"producer id must be 1..{NAME_LENGTH} characters, got {len(m.msgid_prod or '')}"
            )
        check_text("producer id", m.msgid_prod)
        check_body(m.msg, max_bytes)
        total += len(m.msg)
        key = (m.container, m.msgid_prod, m.msgid_seq)
        if key in seen:
            raise DuplicateMessageError(
                f"message {m.msgid_prod}:{m.msgid_seq} appears twice for {m.container}"
            )
        seen.add(key)
    return total


def check_body(msg: object, max_bytes: int) -> None:
    """A message body (an OpenWire frame) of at most ``max_bytes``."""
    if not isinstance(msg, (bytes, bytearray, memoryview)):
        raise InvalidMessageError("message body must be bytes (an OpenWire frame)")
    if len(msg) > max_bytes:
        raise InvalidMessageError(
            f"message of {len(msg)} bytes exceeds the limit of {max_bytes} bytes "
            "(max_message_bytes)"
        )


def check_acks(acks: Sequence[Ack]) -> None:
    """Durable acks that name a row ActiveMQ could hold: an ack at a priority outside 0..9
    would match no ACKS row, and be lost without a word."""
    for ack in acks:
        where = f"({ack.key.container}, {ack.key.client_id}/{ack.key.sub_name})"
        if not isinstance(ack.priority, int) or not 0 <= ack.priority <= 9:
            raise InvalidMessageError(f"ack priority {ack.priority!r} is outside 0..9 {where}")
        if not isinstance(ack.message_id, int) or not LONG_MIN <= ack.message_id <= LONG_MAX:
            raise InvalidMessageError(
                f"acked message id {ack.message_id!r} is not an integer that fits a Java long "
                f"(ActiveMQ's LAST_ACKED_ID column) {where}"
            )


def check_work(
    adds: Sequence[NewMessage], removes: Sequence[Removal], acks: Sequence[Ack], max_bytes: int
) -> int:
    """Validate everything one write stores; raises before anything is written. Returns
    the bytes of the new messages' bodies."""
    body_bytes = check_messages(adds, max_bytes)
    for removal in removes:
        check_container(removal.container)
    check_acks(acks)
    return body_bytes


def check_batch(batch: Batch, max_bytes: int) -> int:
    """:func:`check_work` for a :class:`Batch`."""
    return check_work(batch.adds, batch.removes, batch.acks, max_bytes)
