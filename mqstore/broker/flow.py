"""Producer flow control: a limit on the bytes of stored messages (ActiveMQ's storeUsage)."""

from __future__ import annotations

import asyncio


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
