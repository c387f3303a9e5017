"""Consumers (one STOMP SUBSCRIBE) and their in-flight deliveries."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from mqstore.broker.frames import encode_frame
from mqstore.broker.messages import BrokerMessage, body_of, message_headers, sized
from mqstore.broker.writer import Op
from mqstore.openwire import ProducerId
from mqstore.store.model import Outcome

if TYPE_CHECKING:
    from mqstore.broker.durable import DurableSub

ACK_MODES = ("auto", "client", "client-individual")

#: Bytes a waiting topic message is counted for beyond its body (headers, objects), so a
#: backlog of empty messages is bounded too.
MESSAGE_OVERHEAD = 256


class Outbound(Protocol):
    """What a consumer needs of its connection."""

    version: str
    peer: str
    #: The store refused one of its frames for its own trouble (see ``HandlerState``).
    store_refused: bool

    def room(self) -> int:
        """How many more MESSAGE frames may be queued for writing."""

    def unwritten(self) -> int:
        """Bytes of frames queued or buffered for the socket and not yet sent."""

    def send_message(self, data: bytes) -> None:
        """Queue one MESSAGE frame."""

    def next_ack_token(self) -> str:
        """A fresh value for the 1.2 ``ack`` header."""

    def register(self, token: str, delivery: Delivery) -> None:
        """Remember ``token`` -> delivery for ACK/NACK lookups."""

    def forget(self, token: str) -> None:
        """Drop an ack token."""


class Dispatcher(Protocol):
    """A destination (queue, topic, durable subscription) as seen by its consumers."""

    container: str

    def kick(self) -> None:
        """Schedule a dispatch pass."""

    def settle_work(
        self, msgs: list[BrokerMessage], outcome: Outcome = ...
    ) -> tuple[Op, Callable[[], None]]:
        """Store work that consumes ``msgs`` and what to do once it is durable."""

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Unacknowledged deliveries return for redelivery."""

    def unsettled(self, msgs: list[BrokerMessage], *, delivered: bool) -> None:
        """The store work of :meth:`settle_work` for ``msgs`` failed (the database was away):
        they are still stored, so they come back for delivery. ``delivered``: they were
        sent to a consumer (its ACK, NACK, auto-ack or COMMIT failed), so they come back
        marked redelivered, their redelivery counter unchanged (see
        :meth:`BrokerMessage.marked_redelivered`); expired or dead-lettered ones not."""

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unsettled deliveries go back."""

    def removed(self, msgs: list[BrokerMessage]) -> None:
        """Messages left for good."""


@dataclass(slots=True, eq=False)
class Delivery:
    """A message sent to a consumer and not yet settled."""

    msg: BrokerMessage
    consumer: Consumer
    token: str
    tx: str | None = None  # acked inside this transaction, awaiting COMMIT/ABORT
    order: int = 0  # its place among the consumer's deliveries (1, 2, ...)


def delivery_order(delivery: Delivery) -> int:
    """Sort key: the order a consumer's deliveries were sent in (a transaction's acks may
    name them in any order; an ABORT gives them back in this one)."""
    return delivery.order


@dataclass(eq=False)
class Consumer:
    """One subscription of one connection to one destination."""

    conn: Outbound
    sub_id: str
    container: str
    ack_mode: str
    prefetch: int
    exclusive: bool = False
    browser: bool = False
    #: ``activemq.noLocal``: the producer of its own connection, whose messages it skips
    no_local: ProducerId | None = None
    durable: DurableSub | None = None
    dest: Dispatcher | None = None
    in_flight: dict[str, Delivery] = field(default_factory=dict)  # by JMS message id
    outstanding: int = 0
    pending: deque[BrokerMessage] = field(default_factory=deque)  # topic copies
    pending_bytes: int = 0  # what ``pending`` is counted for (body + MESSAGE_OVERHEAD each)
    closed: bool = False
    delivered: int = 0
    dropped: int = 0

    def credit(self) -> int:
        """How many more messages this consumer may be sent now."""
        if self.closed:
            return 0
        room = self.conn.room()
        if self.ack_mode == "auto":
            return room
        return min(room, self.prefetch - self.outstanding)

    def deliver(self, msg: BrokerMessage) -> Delivery | None:
        """Send a MESSAGE frame; returns the delivery to track (None in auto mode)."""
        conn = self.conn
        headers = [*message_headers(msg), ("subscription", self.sub_id)]
        headers.append(("redelivered", "true" if msg.redelivered else "false"))
        token = ""
        if self.ack_mode != "auto":
            token = conn.next_ack_token()
            if conn.version == "1.2":
                headers.append(("ack", token))
        body = body_of(msg.ow)
        frame = encode_frame(
            "MESSAGE", headers, body, conn.version, content_length=sized(msg.ow, body)
        )
        conn.send_message(frame)
        self.delivered += 1
        if self.ack_mode == "auto":
            return None
        delivery = Delivery(msg, self, token, order=self.delivered)
        mid = headers[0][1]
        self.in_flight[mid] = delivery
        conn.register(token, delivery)
        self.outstanding += 1
        return delivery

    def settle(self, delivery: Delivery) -> None:
        """Forget a delivery (acked, nacked or returned)."""
        mid = delivery.msg.ow.jms_message_id or ""
        if self.in_flight.get(mid) is delivery:
            del self.in_flight[mid]
            if delivery.tx is None:
                self.outstanding -= 1
        self.conn.forget(delivery.token)

    def mark_tx(self, delivery: Delivery, tx: str) -> None:
        """An ACK inside a transaction frees prefetch credit at once, as in ActiveMQ (its
        prefetch extension): a transaction may ack more messages than the prefetch. Its
        message stays in memory until COMMIT or ABORT, counted against its queue's memory
        window (as ActiveMQ's memory usage), which bounds what such a consumer is sent."""
        if delivery.tx is None:
            delivery.tx = tx
            self.outstanding -= 1

    def unmark_tx(self, delivery: Delivery) -> None:
        """An aborted ACK: the delivery counts against prefetch again."""
        if delivery.tx is not None:
            delivery.tx = None
            self.outstanding += 1

    def up_to(self, delivery: Delivery) -> list[Delivery]:
        """Cumulative ack (``client`` mode): every unsettled delivery up to this one."""
        out: list[Delivery] = []
        for d in self.in_flight.values():
            if d.tx is None:
                out.append(d)
            if d is delivery:
                return out
        return [delivery]

    # -- topic copies waiting for this consumer -------------------------------------------
    def push(self, msg: BrokerMessage) -> None:
        """Queue a topic copy for this consumer."""
        self.pending.append(msg)
        self.pending_bytes += msg.size + MESSAGE_OVERHEAD

    def put_back(self, msg: BrokerMessage) -> None:
        """Queue a topic copy to go first (a redelivery)."""
        self.pending.appendleft(msg)
        self.pending_bytes += msg.size + MESSAGE_OVERHEAD

    def take(self) -> BrokerMessage:
        """The next topic copy to send."""
        msg = self.pending.popleft()
        self.pending_bytes -= msg.size + MESSAGE_OVERHEAD
        return msg

    def clear_pending(self) -> None:
        self.pending.clear()
        self.pending_bytes = 0

    def held(self) -> int:
        """Bytes the broker holds for this consumer: waiting copies and unwritten frames."""
        return self.pending_bytes + self.conn.unwritten()

    def trim(self, limit: int, max_bytes: int) -> int:
        """Drop the oldest copies past ``limit`` messages or ``max_bytes`` held (never the
        newest for its bytes: a message larger than ``max_bytes`` still goes); how many."""
        dropped = 0
        while len(self.pending) > limit or (len(self.pending) > 1 and self.held() > max_bytes):
            self.take()
            dropped += 1
        self.dropped += dropped
        return dropped
