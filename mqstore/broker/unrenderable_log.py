"""How a destination logs its stored messages that do not render (a malformed ``MSG``): the
first with what is wrong with it, the others only counted, so that many of them (a queue
of rows written by a broken client) do not flood the log."""

from __future__ import annotations

import asyncio
import logging

from mqstore.broker.messages import UnrenderableError

log = logging.getLogger(__name__)

#: Seconds between two lines counting a destination's messages that do not render.
MALFORMED_LOG_INTERVAL = 60.0


class UnrenderableLog:
    """One destination's (or durable subscription's) log of messages that do not render,
    its lines starting with ``label``."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._logged = False  # the first one was logged in full
        self._unlogged: dict[str, int] = {}  # counted since, by what became of them
        self._last: UnrenderableError | None = None
        self._count_due: asyncio.TimerHandle | None = None

    def report(self, exc: UnrenderableError, fate: str) -> None:
        """Log the first message that does not render, with what is wrong with it; count the
        others, in one line at most every :data:`MALFORMED_LOG_INTERVAL` (on the running
        loop)."""
        if not self._logged:
            self._logged = True
            log.error(
                "%s: %s; %s (more such messages of %s are counted in one line a minute)",
                self.label, exc, fate, self.label,
            )  # fmt: skip
            return
        self._unlogged[fate] = self._unlogged.get(fate, 0) + 1
        self._last = exc
        if self._count_due is None:
            self._count_due = asyncio.get_running_loop().call_later(
                MALFORMED_LOG_INTERVAL, self._log_count
            )

    def _log_count(self) -> None:
        self._count_due = None
        counts, self._unlogged = self._unlogged, {}
        if counts:
            log.error(
                "%s: %s more message(s) that do not render: %s (the last: %s)",
                self.label,
                sum(counts.values()),
                ", ".join(f"{n} {fate}" for fate, n in counts.items()),
                self._last,
            )
