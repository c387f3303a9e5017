"""Paging from the store: what a destination left for its next page to bring in, and
the bounds (messages and bytes) of its in-memory window."""

from __future__ import annotations

from mqstore.broker.messages import BrokerMessage
from mqstore.broker.subscriptions import MESSAGE_OVERHEAD
from mqstore.store.model import Cursor

Position = tuple[int, int]  # (-PRIORITY, ID): page order


class LeftToPage:
    """Stored messages not taken into memory when they arrived, counted, and the earliest
    page position among them since the last :meth:`rewind`.

    In priority order such a message may sort before the cursor (or before where a page in
    flight moves it), so the next page must start no later than it.
    """

    def __init__(self) -> None:
        self.count = 0
        self.earliest: Position | None = None

    def skip(self, msg: BrokerMessage) -> None:
        assert msg.store_id is not None
        self.count += 1
        at = (-msg.store_priority, msg.store_id)
        if self.earliest is None or at < self.earliest:
            self.earliest = at

    def rewind(self, cursor: Cursor | None) -> Cursor | None:
        """The cursor to page from: ``cursor``, or just before the earliest skipped message
        when that sorts before it (None, the first row, needs no rewind)."""
        earliest, self.earliest = self.earliest, None
        if earliest is None or cursor is None or earliest > (-cursor.priority, cursor.id):
            return cursor
        neg_priority, ident = earliest
        return Cursor(-neg_priority, ident - 1)


#: Rows the first page read of a destination asks for, before any message size is known.
FIRST_PAGE_ROWS = 32
#: The most rows one page read asks for (ActiveMQ's maxPageSize): what a read may bring
#: beyond the room left, when messages grow larger than those seen so far, stays bounded.
MAX_PAGE_ROWS = 200


def window_cost(msg: BrokerMessage) -> int:
    """Bytes a message waiting in a memory window is counted for (body + overhead)."""
    return msg.size + MESSAGE_OVERHEAD


class MemoryBudget:
    """The bytes every memory window of one broker holds together, against one limit
    (ActiveMQ's broker-wide memoryUsage): past it, a window that holds anything takes no
    more; one that holds nothing still takes one message, so every destination flows."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def full(self) -> bool:
        return self.used >= self.limit


class Window:
    """The stored messages a destination holds in memory waiting for dispatch: at most
    ``memory_window`` messages and, but for the last one taken, ``memory_window_bytes``
    bytes (a message larger than that still goes, alone), within the broker's
    :class:`MemoryBudget` for all windows together.

    A page read asks for as many rows as the room left holds at the size the destination's
    messages were lately seen at (the largest seen, halved by each read without one as
    large: a burst of large messages shrinks reads at once, small ones grow them back);
    rows that come back beyond the room stay in the store for a later page. A read asks
    for at most :data:`MAX_PAGE_ROWS` rows, and for no more bytes than the room left
    (:meth:`page_bytes`), so a burst of messages larger than the estimate is cut by the
    store, not read whole; the next read follows at once while the window is down to half.
    """

    __slots__ = ("budget", "bytes", "max_bytes", "max_count", "row_bytes")

    def __init__(self, max_count: int, max_bytes: int, budget: MemoryBudget) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.budget = budget
        self.bytes = 0  #: counted bytes of the stored messages waiting
        self.row_bytes = 0  #: the size estimate for page reads (0: nothing seen yet)

    def seen(self, msg: BrokerMessage) -> None:
        """A stored message arrived: page reads are sized for messages as large."""
        self.row_bytes = max(self.row_bytes, window_cost(msg))

    def read(self, largest: int) -> None:
        """A page read came back with rows of at most ``largest`` bytes (MSG)."""
        self.row_bytes = max(largest + MESSAGE_OVERHEAD, self.row_bytes // 2)

    def add(self, msg: BrokerMessage) -> None:
        cost = window_cost(msg)
        self.bytes += cost
        self.budget.used += cost

    def remove(self, msg: BrokerMessage) -> None:
        cost = window_cost(msg)
        self.bytes -= cost
        self.budget.used -= cost

    def clear(self) -> None:
        """Every stored message left the window at once."""
        self.budget.used -= self.bytes
        self.bytes = 0

    def over(self) -> bool:
        """Whether the window takes no further message, whatever its count."""
        return self.bytes >= self.max_bytes or (self.bytes > 0 and self.budget.full)

    def full(self, count: int) -> bool:
        """Whether a window of ``count`` messages (and these bytes) takes no more."""
        return count >= self.max_count or self.over()

    def wants_page(self, count: int) -> bool:
        """Whether to page in more: the window is down to half, in messages and bytes, and
        the broker's budget has room (or the window holds nothing)."""
        return (
            count <= self.max_count // 2
            and self.bytes <= self.max_bytes // 2
            and not (self.bytes > 0 and self.budget.full)
        )

    def page_bytes(self) -> int:
        """The MSG bytes the next page read may bring: the room left in the window and in
        the broker's budget (a read still brings one message when there is none)."""
        return max(min(self.max_bytes - self.bytes, self.budget.limit - self.budget.used), 1)

    def page_rows(self, count: int) -> int:
        """The row limit of the next page read, for a window of ``count`` messages."""
        rows = min(self.max_count - count, MAX_PAGE_ROWS)
        if self.row_bytes == 0:
            rows = min(rows, FIRST_PAGE_ROWS)
        else:
            room = min(self.max_bytes - self.bytes, self.budget.limit - self.budget.used)
            rows = min(rows, room // self.row_bytes)
        return max(rows, 1)
