"""Which copies the dead-letter queues hold or are about to hold: ActiveMQ's DLQ audit."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

#: A DLQ copy is known by its DLQ and the original's MSGID_PROD and MSGID_SEQ.
CopyKey = tuple[str, str, int]

#: How many added copies are remembered (ActiveMQ's DLQ audit keeps a window of 1 000
#: sequence numbers for each of the last 1 024 producers).
AUDIT_DEPTH = 10_000


class DeadLetterAudit:
    """Copies being added to a DLQ, and the last :data:`AUDIT_DEPTH` added, whether or not
    they were consumed since: a message that two subscribers of a topic dead-letter goes to
    the DLQ once, even when the first copy was read before the second subscriber gave up."""

    def __init__(self, depth: int = AUDIT_DEPTH) -> None:
        self.depth = depth
        self._adding: set[CopyKey] = set()
        self._added: OrderedDict[CopyKey, None] = OrderedDict()

    def claim(self, key: CopyKey) -> bool:
        """True if the copy ``key`` is new: it is then being added until :meth:`settle`."""
        if key in self._adding or key in self._added:
            return False
        self._adding.add(key)
        return True

    def settle(self, keys: Iterable[CopyKey], *, added: bool) -> None:
        """The copies ``keys`` were added (remembered) or not (forgotten: a retry may add them)."""
        for key in keys:
            self._adding.discard(key)
            if added:
                self._added[key] = None
                self._added.move_to_end(key)
        while len(self._added) > self.depth:
            self._added.popitem(last=False)
