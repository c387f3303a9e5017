"""A queue's non-persistent messages, which only memory holds: their bytes against the
queue's ``queue_high_water`` and, with every queue's, against the broker's
``memory_limit`` (ActiveMQ's memoryUsage). Past either, producers of non-persistent
messages to the queue wait at its gate until consumers take them below the mark."""

from __future__ import annotations

import logging
import time

from mqstore.broker.config import BrokerConfig
from mqstore.broker.flow import ProducerGate

log = logging.getLogger(__name__)

#: Seconds between two warnings about one queue holding back its producers.
FULL_WARNING_INTERVAL = 30.0


class NonPersistentMemory:
    """The bytes of the non-persistent messages all queues of one broker hold, against its
    ``memory_limit``: once they reach it, the gate of a queue that takes one more closes,
    and the queues so held back open again as soon as consumers take them below it."""

    __slots__ = ("held_back", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.held_back: set[VolatileHold] = set()

    @property
    def full(self) -> bool:
        return self.used >= self.limit


class VolatileHold:
    """One queue's non-persistent bytes and the gate its producers of them wait at."""

    def __init__(self, container: str, config: BrokerConfig, every: NonPersistentMemory) -> None:
        self.container, self.config, self.every = container, config, every
        #: bytes held (body + MESSAGE_OVERHEAD each): waiting, in flight, or on their way out
        self.bytes = 0
        #: past ``queue_high_water``, not yet below ``queue_low_water``
        self.over_high_water = False
        self.gate = ProducerGate()
        self._warned_at = float("-inf")

    def hold(self, cost: int) -> None:
        """Count a message's ``cost``; past the high-water mark, or past the broker's memory
        limit for all queues' non-persistent messages, producers wait."""
        self.bytes += cost
        every = self.every
        every.used += cost
        high = self.config.queue_high_water
        if self.bytes > high:
            self.over_high_water = True
        if every.full:
            every.held_back.add(self)
        if not self.gate.closed and (self.over_high_water or every.full):
            self.gate.closed = True
            now = time.monotonic()
            if now - self._warned_at >= FULL_WARNING_INTERVAL:
                self._warned_at = now
                log.warning(
                    "%s holds %d bytes of non-persistent messages (queue_high_water %d; all "
                    "queues hold %d, memory_limit %d): producers of non-persistent messages to "
                    "it wait until consumers take them",
                    self.container, self.bytes, high, every.used, every.limit,
                )  # fmt: skip

    def release(self, freed: int) -> None:
        """Non-persistent messages left: open the gates they held closed."""
        self.bytes = max(0, self.bytes - freed)
        every = self.every
        every.used = max(0, every.used - freed)
        if self.over_high_water and self.bytes < self.config.queue_low_water:
            self.over_high_water = False
        if every.held_back and not every.full:
            held_back, every.held_back = every.held_back, set()
            for hold in held_back:
                hold._open_gate()
        self._open_gate()

    def _open_gate(self) -> None:
        if not self.gate.closed or self.over_high_water:
            return
        if self.every.full:
            self.every.held_back.add(self)  # opens once the broker has room
        else:
            self.gate.open()

    def refusal(self) -> str:
        """What a producer refused at the gate is told (see :class:`~.flow.Limited`)."""
        cfg, every = self.config, self.every
        if not self.over_high_water and every.full:
            return (
                f"the broker is full: its queues hold {every.used} bytes of non-persistent "
                f"messages, its memory_limit ({every.limit} bytes, MQSTORE_MEMORY_LIMIT_MB); "
                f"{self.container} takes no more until they are below it: consume from "
                "the queues, or raise the limit"
            )
        return (
            f"{self.container} is full: it holds {self.bytes} bytes of non-persistent "
            f"messages; past queue_high_water ({cfg.queue_high_water} bytes, "
            f"MQSTORE_QUEUE_HIGH_WATER_MB) it takes no more until below {cfg.queue_low_water}: "
            "consume from it, or raise the limit"
        )
