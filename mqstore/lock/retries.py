"""Warnings about an attempt retried until it succeeds, without flooding the log."""

from __future__ import annotations

import logging
import time

#: While one failure lasts, it is warned about again this often (seconds).
REPEAT_WARNING_S = 60.0


class RetryWarnings:
    """Warn about a retried failure when it first happens, when its text changes, and once
    every :data:`REPEAT_WARNING_S` while it lasts (with how often it came since); debug
    otherwise. A standby polling a database that refuses every attempt (read-only, say)
    would otherwise log a warning each poll."""

    def __init__(self, log: logging.Logger, every_s: float = REPEAT_WARNING_S) -> None:
        self.log, self.every_s = log, every_s
        self._last: str | None = None
        self._told = 0.0
        self._since = 0  # failures with this text since it was last warned about

    def failed(self, what: str, detail: str) -> None:
        """``what`` failed with ``detail``, and will be retried."""
        now = time.monotonic()
        if detail != self._last or now - self._told >= self.every_s:
            again = f" ({self._since} more times since)" if detail == self._last else ""
            self.log.warning("%s, retrying: %s%s", what, detail, again)
            self._last, self._told, self._since = detail, now, 0
        else:
            self._since += 1
            self.log.debug("%s again: %s", what, detail)

    def succeeded(self) -> None:
        """The attempt got through: the next failure is news again."""
        self._last, self._since = None, 0
