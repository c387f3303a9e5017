"""Values that cross the store port: rows, new messages, subscriptions, batches, XA ids."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mqstore.openwire.xid_column import decode_xid_column, encode_xid_column, encoded_xid

#: Destination prefixes ActiveMQ writes into CONTAINER.
CONTAINER_PREFIXES = ("queue://", "topic://", "temp-queue://", "temp-topic://")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One ACTIVEMQ_MSGS row. ``priority`` is the PRIORITY column (0 in plain mode)."""

    id: int
    container: str
    msgid_prod: str | None
    msgid_seq: int | None
    expiration: int
    priority: int
    msg: bytes
    xid: str | None = None

    @property
    def cursor(self) -> Cursor:
        """The paging position just after this row."""
        return Cursor(self.priority, self.id)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredMessage:
        """Build from (id, container, msgid_prod, msgid_seq, expiration, priority, msg, xid)."""
        return cls(
            int(row[0]),
            str(row[1]),
            row[2],
            None if row[3] is None else int(row[3]),
            int(row[4] or 0),
            int(row[5] or 0),
            bytes(row[6] or b""),
            row[7],
        )


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message a broker hands to the store; the store assigns its ID.

    ``priority`` is the JMS priority (0-9); the PRIORITY column gets it only in prioritized
    mode, as ActiveMQ does. ``msg`` is opaque here (an OpenWire frame for ActiveMQ interop).
    """

    container: str
    msgid_prod: str
    msgid_seq: int
    msg: bytes
    priority: int = 4
    expiration: int = 0


@dataclass(frozen=True, order=True, slots=True)
class Cursor:
    """A keyset position in delivery order (PRIORITY DESC, ID ASC): page after this row."""

    priority: int
    id: int


#: The cursor before every row: (-10, 0) < (-priority, id) for every priority 0..9.
FIRST = Cursor(10, 0)

#: An ID bound above every ID (no uncommitted adds hold a page back).
NO_BOUND = 2**63 - 1

#: A page byte bound no page reaches (``max_bytes=None``).
NO_BYTE_BOUND = 2**62


def within_bytes(rows: list[StoredMessage], max_bytes: int | None) -> list[StoredMessage]:
    """The leading ``rows`` a page bounded by ``max_bytes`` holds: each row whose
    predecessors' MSG bytes together stay below the bound (so the first row always)."""
    if max_bytes is None:
        return rows
    total = 0
    for i, row in enumerate(rows):
        if total >= max_bytes:
            return rows[:i]
        total += len(row.msg)
    return rows


#: The default bound of one ``expire`` call's MSG bytes (64 MiB).
EXPIRE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SubscriptionKey:
    """Identifies a durable subscription: topic container, client id, subscription name."""

    container: str
    client_id: str
    sub_name: str


@dataclass(frozen=True, slots=True)
class Subscription:
    """A durable subscription as stored in ACTIVEMQ_ACKS (the PRIORITY=0 row's view)."""

    key: SubscriptionKey
    selector: str | None
    sub_dest: str | None
    last_acked_id: int

    @property
    def container(self) -> str:
        return self.key.container


@dataclass(frozen=True, slots=True)
class Ack:
    """A durable subscriber acknowledged everything up to ``message_id`` (at its priority)."""

    key: SubscriptionKey
    message_id: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Removal:
    """Remove stored message ``id`` from ``container`` (a queue ack, DLQ move, expiry...)."""

    container: str
    id: int
    outcome: Outcome | None = None


class Outcome(StrEnum):
    """What became of a removed message, recorded in the history table."""

    ACKNOWLEDGED = "acknowledged"
    EXPIRED = "expired"
    DEAD_LETTERED = "dead-lettered"
    PURGED = "purged"
    XA_ROLLED_BACK = "xa-rolled-back"


@dataclass(slots=True)
class Batch:
    """Work applied atomically by :meth:`Store.commit`: adds, then removes, then acks."""

    adds: list[NewMessage] = field(default_factory=list)
    removes: list[Removal] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.adds or self.removes or self.acks)


@dataclass(frozen=True, slots=True)
class Xid:
    """An XA transaction id (formatId, global transaction id, branch qualifier)."""

    format_id: int
    gtrid: bytes
    bqual: bytes

    def encode(self, marker: str, last_ack: int = 0, priority: int = 0) -> str:
        """ActiveMQ's XID column text: base64 of marker, last-ack, priority, formatId, ids."""
        return encode_xid_column(marker, last_ack, priority, self.format_id, self.gtrid, self.bqual)

    def identity(self) -> bytes:
        """The bytes of the XID column after the marker, last-ack and priority (from
        ``ENCODED_XID_START`` on):
        formatId, gtrid length, gtrid, bqual; the same in every row of the transaction."""
        return encoded_xid(self.format_id, self.gtrid, self.bqual)

    @classmethod
    def decode(cls, column: str) -> tuple[Xid, str, int, int]:
        """Parse an XID column value into (xid, marker '+'/'-', last-ack id, priority);
        ValueError saying what is wrong with a value that is not in this layout."""
        c = decode_xid_column(column)
        return cls(c.format_id, c.gtrid, c.bqual), c.marker, c.last_ack, c.priority


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """An XA transaction found prepared (in doubt) in the database."""

    xid: Xid
    adds: tuple[StoredMessage, ...]
    removes: tuple[StoredMessage, ...]
    acks: tuple[Ack, ...]


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Figures for operators: per-destination depth, subscription backlogs, store counters."""

    destinations: dict[str, int]
    subscriptions: dict[SubscriptionKey, int]
    counters: dict[str, float]
    #: The message selector of each durable subscription (ACKS.SELECTOR; None: every message).
    selectors: dict[SubscriptionKey, str | None] = field(default_factory=dict)
