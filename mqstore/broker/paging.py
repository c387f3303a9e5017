"""What a destination paged from the store left for its next page to bring in."""

from __future__ import annotations

from mqstore.broker.messages import BrokerMessage
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
