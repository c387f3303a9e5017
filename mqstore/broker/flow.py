"""Producer flow control: a limit on the bytes of stored messages (ActiveMQ's storeUsage),
and the gate where producers wait while a limit is reached, for as long as the broker's
policy says (ActiveMQ's ``sendFailIfNoSpace`` / ``sendFailIfNoSpaceAfterTimeout``)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Protocol

from mqstore.errors import ConfigError


class ProducerGate:
    """Where producers wait while what they send to would hold too much (ActiveMQ's producer
    flow control on memory and store usage).

    Whoever counts the bytes closes it (``closed = True``) past a limit and calls
    :meth:`open` once there is room again; a producer checks ``closed`` (a plain attribute:
    the per-SEND cost) and only then waits in :meth:`wait`. ``refused`` counts the SENDs
    turned away with an ERROR instead.
    """

    def __init__(self) -> None:
        self.closed = False
        self.waiting = 0
        self.refused = 0
        self._waiters: dict[asyncio.Future[None], None] = {}  # in arrival order

    async def wait(
        self, stop: Callable[[], bool], poll: float | None = None, timeout: float | None = None
    ) -> bool:
        """Wait while the gate is closed and ``stop()`` is false, looking again when woken:
        by :meth:`open`, :meth:`wake`, or every ``poll`` seconds. False if it was still
        closed after ``timeout`` seconds (None: no end); True otherwise."""
        self.waiting += 1
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while self.closed and not stop():
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return False
                delays = [d for d in (poll or None, left) if d is not None]
                delay = min(delays) if delays else None
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters[fut] = None
                timer = loop.call_later(delay, _wake, fut) if delay is not None else None
                try:
                    await fut
                finally:
                    self._waiters.pop(fut, None)
                    if timer is not None:
                        timer.cancel()
            return True
        finally:
            self.waiting -= 1

    def open(self) -> None:
        """Let every waiting producer go on."""
        self.closed = False
        self.wake()

    def wake(self) -> None:
        """Make every waiting producer look at its ``stop()`` again (the gate stays as it is)."""
        waiters, self._waiters = self._waiters, {}
        for fut in waiters:
            _wake(fut)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Limited(Protocol):
    """Something producers may have to wait for: a queue, a topic, the store usage."""

    gate: ProducerGate

    def refusal(self) -> str:
        """What an ERROR says when a producer is refused: which limit is reached, and what
        to do about it."""
        ...


def check_block_timeout(name: str, value: float | None) -> None:
    """A ConfigError unless ``value`` is a flow-control wait: None (wait as long as it
    takes), 0 (refuse at once) or seconds > 0."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise ConfigError(
            f"{name} ({value}) must be None (producers wait as long as it takes), 0 (refuse "
            "their SENDs at once) or the seconds they may wait before an ERROR"
        )


def waited(timeout: float | None) -> str:
    """How long a refused producer waited, for its ERROR."""
    return "at once" if not timeout else f"after waiting {timeout:g} s"


class StoreUsage:
    """Bytes of stored message frames added by this broker and not yet consumed.

    When ``used`` reaches ``limit`` the gate closes and persistent producers wait at it;
    consumers keep going and every release that makes room opens it. ``limit`` 0 means no
    limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.gate = ProducerGate()

    @property
    def full(self) -> bool:
        return self.limit > 0 and self.used >= self.limit

    @property
    def blocked(self) -> int:
        """Producers waiting for room."""
        return self.gate.waiting

    def add(self, size: int) -> None:
        self.used += size
        if self.full:
            self.gate.closed = True

    def release(self, size: int) -> None:
        self.used = max(0, self.used - size)
        if self.gate.closed and not self.full:
            self.gate.open()

    def refusal(self) -> str:
        return (
            f"the store usage limit of {self.limit} bytes (store_usage_limit, "
            f"MQSTORE_STORE_USAGE_MB) is reached ({self.used} bytes of stored messages not "
            "yet consumed): consume messages or raise the limit"
        )
