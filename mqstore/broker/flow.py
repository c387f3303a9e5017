"""Producer flow control: a limit on the bytes of stored messages (ActiveMQ's storeUsage),
and the gate where producers to one destination wait while it holds too much in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StoreUsage:
    """Bytes of stored message frames added by this broker and not yet consumed.

    When ``used`` reaches ``limit`` persistent producers wait in :meth:`wait_for_space`;
    consumers keep going and every release wakes the waiters. ``limit`` 0 means no limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.blocked = 0
        self._space = asyncio.Event()
        self._space.set()

    @property
    def full(self) -> bool:
        return self.limit > 0 and self.used >= self.limit

    def add(self, size: int) -> None:
        self.used += size
        if self.full:
            self._space.clear()

    def release(self, size: int) -> None:
        self.used = max(0, self.used - size)
        if not self.full:
            self._space.set()

    async def wait_for_space(self, timeout: float) -> bool:
        """Wait until below the limit; False if ``timeout`` seconds passed first."""
        if not self.full:
            return True
        self.blocked += 1
        try:
            async with asyncio.timeout(timeout):
                while self.full:
                    await self._space.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self.blocked -= 1


class ProducerGate:
    """Where producers to one destination wait while it holds too much (ActiveMQ's producer
    flow control on memory).

    Whoever counts the destination's bytes closes it (``closed = True``) past a high-water
    mark and calls :meth:`open` once below a low-water mark; a producer checks ``closed``
    (a plain attribute: the per-SEND cost) and only then waits in :meth:`wait`.
    """

    def __init__(self) -> None:
        self.closed = False
        self.waiting = 0
        self._waiters: dict[asyncio.Future[None], None] = {}  # in arrival order

    async def wait(self, stop: Callable[[], bool], poll: float | None = None) -> None:
        """Return once the gate is open, or ``stop()`` is true when woken: by :meth:`open`,
        :meth:`wake`, or with ``poll`` every ``poll`` seconds."""
        self.waiting += 1
        loop = asyncio.get_running_loop()
        try:
            while self.closed and not stop():
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters[fut] = None
                timer = loop.call_later(poll, _wake, fut) if poll else None
                try:
                    await fut
                finally:
                    self._waiters.pop(fut, None)
                    if timer is not None:
                        timer.cancel()
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
