"""A topic: every subscriber gets a copy; durable subscriptions keep theirs in the store.

A topic message is stored (once) only while the topic has a durable subscription.
Non-durable subscribers get in-memory copies, bounded per subscriber.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from mqstore.broker.durable import DurableSub
from mqstore.broker.messages import BrokerMessage
from mqstore.broker.subscriptions import Consumer, Delivery
from mqstore.broker.writer import Op
from mqstore.store.model import Outcome, SubscriptionKey

if TYPE_CHECKING:
    from mqstore.broker.server import Broker


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
        self._scheduled = False

    @property
    def needs_store(self) -> bool:
        """Persistent messages are stored only while a durable subscription exists."""
        return bool(self.durables)

    def publish(self, msg: BrokerMessage) -> None:
        """Fan a message out (already stored when it must be)."""
        self.enqueued += 1
        if msg.store_id is not None and self.broker.counts_in_usage(msg):
            self.stored.append((msg.store_id, msg.store_priority, msg.size))
        limit = self.broker.config.topic_pending_limit
        for c in self.consumers:
            c.push(msg, limit)
        for sub in self.durables.values():
            sub.offer(msg)
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
        consumer.pending.clear()

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
                msg = c.pending.popleft()
                if msg.expired(now):
                    continue
                c.deliver(msg)

    def settle_work(
        self, msgs: list[BrokerMessage], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> tuple[Op, Callable[[], None]]:
        """Non-durable acks touch no store; they only free prefetch credit."""

        def finish() -> None:
            self.dequeued += len(msgs)
            self.kick()

        return Op(), finish

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Aborted acks of a live subscriber: redeliver to it (DLQ past the limit)."""
        policy = self.broker.config.redelivery
        poison: list[BrokerMessage] = []
        for d in reversed(deliveries):
            d.consumer.settle(d)
            if d.consumer.closed:
                continue
            copy = d.msg.with_redelivery()
            if policy.exceeded(copy.redelivery_counter):
                poison.append(copy)
            else:
                d.consumer.pending.appendleft(copy)
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

    def stats(self) -> dict[str, int]:
        return {
            "consumers": len(self.consumers) + sum(1 for d in self.durables.values() if d.active),
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "durable_subscriptions": len(self.durables),
            "durable_backlog": sum(d.backlog for d in self.durables.values()),
        }
