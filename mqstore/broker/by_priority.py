"""A set of stored message ids, each with its PRIORITY column value, that finds the lowest
id of a priority without a pass over the set."""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class IdsByPriority:
    """Message ids by PRIORITY column value; :meth:`lowest` costs O(log n) amortized.

    One min-heap per priority; an id discarded stays in its heap until it reaches the top
    (or the heaps are rebuilt once stale entries outnumber live ones).
    """

    def __init__(self) -> None:
        self._priority: dict[int, int] = {}
        self._heaps: dict[int, list[int]] = {}
        self._count: dict[int, int] = {}  # priority -> ids held
        self._entries = 0

    def __contains__(self, ident: object) -> bool:
        return ident in self._priority

    def __len__(self) -> int:
        return len(self._priority)

    def __iter__(self) -> Iterator[int]:
        return iter(self._priority)

    def add(self, ident: int, priority: int) -> None:
        """Hold ``ident`` under ``priority`` (a no-op when it is held there already)."""
        held = self._priority.get(ident)
        if held == priority:
            return
        if held is not None:
            self._count[held] -= 1
        self._priority[ident] = priority
        self._count[priority] = self._count.get(priority, 0) + 1
        heapq.heappush(self._heaps.setdefault(priority, []), ident)
        self._entries += 1
        if self._entries > 2 * len(self._priority) + 64:
            self._rebuild()

    def discard(self, ident: int) -> None:
        held = self._priority.pop(ident, None)
        if held is not None:
            self._count[held] -= 1

    def clear(self) -> None:
        self._priority.clear()
        self._heaps.clear()
        self._count.clear()
        self._entries = 0

    def priorities(self) -> list[int]:
        """The priorities that hold an id, ascending."""
        return sorted(p for p, n in self._count.items() if n)

    def lowest(self, priority: int) -> int | None:
        """The lowest id held under ``priority``, or None."""
        heap = self._heaps.get(priority)
        while heap and self._priority.get(heap[0]) != priority:
            heapq.heappop(heap)
            self._entries -= 1
        return heap[0] if heap else None

    def _rebuild(self) -> None:
        self._heaps = {}
        for ident, priority in self._priority.items():
            self._heaps.setdefault(priority, []).append(ident)
        for heap in self._heaps.values():
            heapq.heapify(heap)
        self._entries = len(self._priority)


__all__ = ["IdsByPriority"]
