"""The message ID sequence of the PostgreSQL store, and the bound it puts on pages.

IDs are handed out in memory, strictly increasing, as ActiveMQ's lock holder does; rows may
commit out of order, so a page never reads past the lowest ID still being committed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mqstore.errors import StoreError
from mqstore.schema import StoreSchema
from mqstore.store.model import NO_BOUND
from mqstore.store.validation import LONG_MAX


class IdSequence:
    """Hands out message IDs and bounds pages below those not yet committed (a part of
    :class:`mqstore.store.postgres.PostgresStore`, whose constructor sets the state)."""

    schema: StoreSchema
    _seq_lock: threading.Lock
    _last_id: int
    _inflight: dict[int, int]  # first ID of an uncommitted add batch -> count
    _started: bool
    _lock_lost: bool

    def next_ids(self, count: int) -> list[int]:
        """Reserve ``count`` strictly increasing IDs."""
        with self._seq_lock:
            first = self._take_ids_locked(count)
        return list(range(first, first + count))

    def _take_ids_locked(self, count: int) -> int:
        """The first of ``count`` new IDs (the caller holds the sequence lock)."""
        if count > LONG_MAX - self._last_id:
            raise StoreError(
                f"the message IDs are used up: the highest ID stored is {self._last_id} and "
                f"{count} more would pass {LONG_MAX}, the largest BIGINT; a row another "
                "program wrote with such an ID (or LAST_ACKED_ID) is the usual cause: find "
                f"it with SELECT max(id) FROM {self.schema.msgs.name} and SELECT "
                f"max(last_acked_id) FROM {self.schema.acks.name}, and lower it while no "
                "broker runs; nothing was written"
            )
        first = self._last_id + 1
        self._last_id += count
        return first

    @contextmanager
    def reserve_ids(self, count: int) -> Iterator[list[int]]:
        """Reserve ``count`` IDs for rows being committed: until the block ends, pages do
        not read past the first of them (reserving and marking happen at once, so a page
        never sees a later ID commit while an earlier one is still to come)."""
        if not count:
            yield []
            return
        with self._seq_lock:
            first = self._take_ids_locked(count)
            self._inflight[first] = count
        try:
            yield list(range(first, first + count))
        finally:
            with self._seq_lock:
                self._inflight.pop(first, None)

    def stats_last_id(self) -> int:
        """The last ID handed out."""
        return self._last_id

    def advance_sequence(self, min_last_id: int) -> None:
        """Make the next ID larger than ``min_last_id`` (e.g. IDs found in a journal)."""
        with self._seq_lock:
            self._last_id = max(self._last_id, min_last_id)

    def bound(self) -> int:
        """Pages never read past the lowest uncommitted ID (IDs may commit out of order).

        Nor past the next ID to be handed out: a page's query reads the table a moment
        after it takes this bound, and IDs reserved in between may commit out of order
        before it does. A store that is not writing (stopped, deposed) bounds nothing.
        """
        with self._seq_lock:
            writing = self._started and not self._lock_lost
            next_id = self._last_id + 1 if writing else NO_BOUND
            return min(min(self._inflight, default=NO_BOUND), next_id)


__all__ = ["IdSequence"]
