"""A topic: every subscriber gets a copy; durable subscriptions keep theirs in the store.

A topic message is stored (once) only while the topic has a durable subscription.
Non-durable subscribers get in-memory copies, bounded per subscriber in bytes: producers to
the topic wait while a subscriber holds too much (ActiveMQ's producer flow control), or,
when ``topic_pending_limit`` opts in, the subscriber's oldest copies are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from mqstore.broker.durable import DurableSub
from mqstore.broker.flow import ProducerGate
from mqstore.broker.messages import BrokerMessage
from mqstore.broker.subscriptions import Consumer, Delivery, delivery_order
from mqstore.broker.writer import Op
from mqstore.store.model import Outcome, SubscriptionKey

if TYPE_CHECKING:
    from mqstore.broker.server import Broker

log = logging.getLogger(__name__)

#: Seconds between two warnings about slow subscribers of one topic.
SLOW_WARNING_INTERVAL = 30.0


class Topic:
    """One topic destination (``topic://NAME``)."""

    def __init__(self, broker: Broker, container: str) -> None:
        self.broker = broker
        self.container = container
        self.consumers: list[Consumer] = []
        self.durables: dict[SubscriptionKey, DurableSub] = {}
        #: (id, PRIORITY column, size) of stored messages counted in the store usage
        self.stored: deque[tuple[int, int, int]] = deque()
        self.enqueued = 0
        self.dequeued = 0
        self.dropped = 0  # copies dropped for slow subscribers (topic_pending_limit only)
        self.gate = ProducerGate()
        self._scheduled = False
        self._warned_at = float("-inf")

    def idle(self) -> bool:
        """Nothing to keep: no subscriber (durable ones included), stored message or
        waiting producer; a new use makes the topic again."""
        return (
            not self.consumers
            and not self.durables
            and not self.stored
            and not self._scheduled
            and not self.gate.closed
            and not self.gate.waiting
        )

    @property
    def needs_store(self) -> bool:
        """Persistent messages are stored only while a durable subscription exists."""
        return bool(self.durables)

    def publish(self, msg: BrokerMessage) -> None:
        """Fan a message out (already stored when it must be)."""
        self.enqueued += 1
        if msg.store_id is not None and self.broker.counts_in_usage(msg):
            self.stored.append((msg.store_id, msg.store_priority, msg.size))
            if not self.durables:  # the last one was deleted while it was being stored
                self.release_usage()
        cfg = self.broker.config
        for c in self.consumers:
            if c.no_local is not None and c.no_local == msg.ow.producer_id:
                continue  # activemq.noLocal: not its own connection's messages
            c.push(msg)
            if cfg.topic_pending_limit > 0:
                self._drop_oldest(c, cfg.topic_pending_limit)
            elif not self.gate.closed and c.held() > cfg.topic_high_water:
                self.gate.closed = True
                self._warn_slow(c, "producers to the topic wait until it catches up")
        for sub in self.durables.values():
            sub.offer(msg)
            if not self.gate.closed and sub.volatile_bytes > cfg.topic_high_water:
                self.gate.closed = True
                log.warning(
                    "durable subscription %s of %s holds %d bytes of non-persistent messages: "
                    "producers to the topic wait until it catches up",
                    sub.key.sub_name, self.container, sub.volatile_bytes,
                )  # fmt: skip
        if self.consumers:
            self.kick()

    # -- non-durable consumers --------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        consumer.dest = self

    def remove_consumer(self, consumer: Consumer) -> None:
        """Non-durable: whatever it had not acknowledged is gone with it."""
        consumer.closed = True
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for d in list(consumer.in_flight.values()):
            consumer.settle(d)
        consumer.clear_pending()
        self._maybe_open()

    def kick(self) -> None:
        """Schedule a dispatch pass (coalesced)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._scheduled = False
        now = int(time.time() * 1000)
        for c in self.consumers:
            while c.pending and c.credit() > 0:
                msg = c.take()
                if msg.expired(now):
                    continue
                if c.deliver(msg) is None:
                    self.dequeued += 1  # auto ack: consumed once sent
        self._maybe_open()

    # -- slow subscribers -----------------------------------------------------------------
    def _maybe_open(self) -> None:
        """Let producers go on once every subscriber holds less than the low-water mark."""
        if self.gate.closed:
            low = self.broker.config.topic_low_water
            if all(c.held() < low for c in self.consumers) and all(
                s.volatile_bytes < low for s in self.durables.values()
            ):
                self.gate.open()

    def refusal(self) -> str:
        """What a producer refused at the gate is told (see :class:`~.flow.Limited`)."""
        cfg = self.broker.config
        held = [c.held() for c in self.consumers]
        held += [s.volatile_bytes for s in self.durables.values()]
        return (
            f"{self.container} is full: a subscriber of it holds {max(held, default=0)} bytes "
            f"not yet sent to it; past topic_high_water ({cfg.topic_high_water} bytes, "
            f"MQSTORE_TOPIC_HIGH_WATER_MB) the topic takes no more until every one holds less "
            f"than {cfg.topic_low_water}: let its slow subscribers catch up, or raise the limit"
        )

    def subscriber_drained(self) -> None:
        """A durable subscription sent or dropped what it held: producers may go on."""
        self._maybe_open()

    def _drop_oldest(self, consumer: Consumer, limit: int) -> None:
        """``topic_pending_limit`` mode: the oldest copies go past the limit (ActiveMQ's
        pending message limit strategy), or past the high-water mark in bytes."""
        dropped = consumer.trim(limit, self.broker.config.topic_high_water)
        if dropped:
            self.dropped += dropped
            self._warn_slow(consumer, f"dropped its {consumer.dropped} oldest message(s) so far")

    def _warn_slow(self, consumer: Consumer, what: str) -> None:
        now = time.monotonic()
        if now - self._warned_at < SLOW_WARNING_INTERVAL:
            return
        self._warned_at = now
        log.warning(
            "subscriber %r of %s on connection %s appears to be slow (%d bytes held): %s",
            consumer.sub_id, self.container, consumer.conn.peer, consumer.held(), what,
        )  # fmt: skip

    def settle_work(
        self, msgs: list[BrokerMessage], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> tuple[Op, Callable[[], None]]:
        """Non-durable acks touch no store; they only free prefetch credit."""

        def finish() -> None:
            self.dequeued += len(msgs)
            self.kick()

        return Op(), finish

    def unsettled(self, msgs: list[BrokerMessage], *, delivered: bool) -> None:
        """Nothing to take back: non-durable subscribers' acks do no store work."""

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Aborted acks of a live subscriber: redeliver to it, in the order they were first
        delivered whatever the order of the acks (DLQ past the limit)."""
        policy = self.broker.config.redelivery
        poison: list[BrokerMessage] = []
        for d in sorted(deliveries, key=delivery_order, reverse=True):
            d.consumer.settle(d)
            if d.consumer.closed or d.consumer.conn.store_refused:
                continue  # a closing subscriber's messages go with it
            copy = d.msg.with_redelivery()
            if policy.exceeded(copy.redelivery_counter):
                poison.append(copy)
            else:
                d.consumer.put_back(copy)
        if poison:
            self.broker.dead_letter(self, poison, Outcome.DEAD_LETTERED)
        self.kick()

    def removed(self, msgs: list[BrokerMessage]) -> None:
        """Nothing to account: non-durable copies are not stored."""

    # -- store usage ------------------------------------------------------------------------
    def release_usage(self) -> None:
        """Release the bytes of stored messages every durable subscription acknowledged,
        oldest first (LAST_ACKED_ID is kept per priority)."""
        subs = list(self.durables.values())
        while self.stored:
            ident, priority, size = self.stored[0]
            if not all(ident <= sub.acked_upto(priority) for sub in subs):
                return
            self.stored.popleft()
            self.broker.usage.release(size)

    def expired(self, ids: set[int]) -> None:
        """The expiry sweep removed these stored messages: their bytes leave the store usage
        (no subscriber's ack may ever pass them, e.g. while it is offline), and no durable
        subscription keeps their redelivery counters."""
        left: deque[tuple[int, int, int]] = deque()
        for entry in self.stored:
            if entry[0] in ids:
                self.broker.usage.release(entry[2])
            else:
                left.append(entry)
        self.stored = left
        for sub in self.durables.values():
            sub.forget(ids)

    def stats(self) -> dict[str, int]:
        return {
            "consumers": len(self.consumers) + sum(1 for d in self.durables.values() if d.active),
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "durable_subscriptions": len(self.durables),
            "durable_backlog": sum(d.backlog for d in self.durables.values()),
            "pending_messages": sum(len(c.pending) for c in self.consumers),
            "pending_bytes": sum(c.held() for c in self.consumers),
            "dropped": self.dropped,
            "blocked_producers": self.gate.waiting,
            "refused_sends": self.gate.refused,
        }
