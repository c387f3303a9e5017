"""Which writes of the journaled store may go ahead, decided before they are journaled.

A new message is refused when its (destination, producer, sequence) is already stored --
in the pending state, reserved by a write in flight, or in the database -- as the unique
index would refuse it there. A removal is claimed by exactly one write, and only when it
hits a message that is stored (pending or visible in the database). Reservations and
claims last until the write that made them is applied (:meth:`Admission.release`); only
then do its sequences count as seen.

Whether a removal hits a database row is asked of the database once per write for all its
removals -- except for rows the store knows are there: rows of queues its reads found in the
database (:meth:`Admission.seen_in_database`). A consumer removes what it read, so a drain
of checkpointed messages asks the database nothing more than its reads did. Only this store
writes the rows of queues, and they leave the database only by its checkpoints (which drop
what they deleted from that knowledge, :meth:`Admission.applied_locked`) or by XA work
(after which it starts over): a remembered row not removed by the window is still visible.
Topic rows are never remembered, as ``cleanup`` deletes them past the window. Reads do not
hold writers off: the rows of a read count only if no checkpoint was applied since it began
(``generation``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from journal.merge import DatabaseView
from journal.state import PendingState
from journal.support import WouldBlock
from mqstore.errors import DuplicateMessageError
from mqstore.store.model import NewMessage, Outcome, Removal, StoredMessage

Key = tuple[str, str, int]  # (container, MSGID_PROD, MSGID_SEQ)
Claims = dict[tuple[str, Outcome], list[int]]

_TOPICS = "topic://"

#: Producers whose highest sequence is remembered; past it the memory starts over.
MAX_CEILINGS = 100_000
#: Database rows remembered as visible; past it the memory starts over (a miss only costs
#: the removal's write one query).
MAX_KNOWN = 1_000_000


class Admission:
    """Duplicate checks and removal claims; ``lock`` is the store's own state lock."""

    def __init__(
        self, db: DatabaseView, lock: threading.Lock, state: Callable[[], PendingState]
    ) -> None:
        self.db = db
        self._lock = lock
        self._state = state
        self._reserved: set[Key] = set()
        self._ceiling: dict[tuple[str, str], int] = {}  # highest MSGID_SEQ seen per producer
        self._fresh: tuple[str, ...] = ()  # MSGID_PROD prefixes minted by our caller
        self._claimed: set[int] = set()
        self._known: dict[int, str] = {}  # ID -> container of queue rows read in the database
        self._generation = 0  # raised whenever rows may have left the database

    def new_producers(self, prefix: str) -> None:
        """Producer ids starting with ``prefix`` have stored nothing before: their first
        writes need no database query (see :meth:`Store.new_producers`)."""
        with self._lock:
            self._fresh = (*self._fresh, prefix)

    def reserve(self, adds: Sequence[NewMessage], *, wait: bool = True) -> list[Key]:
        """Reserve the adds' keys; raises :class:`DuplicateMessageError` if one is taken.

        ``wait=False`` raises :class:`WouldBlock` where the database would have to be asked.
        """
        keys = [(m.container, m.msgid_prod, m.msgid_seq) for m in adds]
        maybe = self._maybe_stored(keys, wait)
        if maybe and not wait:
            raise WouldBlock
        found = self.db.existing_keys(maybe)
        with self._lock:
            state = self._state()
            for key in keys:
                hit = found.get(key)
                if (
                    key in state.keys
                    or key in self._reserved
                    # A purge in the window leaves XA-prepared rows in place (as the
                    # checkpoint's purge does): only a visible row can be hidden.
                    or (hit is not None and (hit[1] or not state.hides(hit[0], key[0])))
                ):
                    raise DuplicateMessageError(
                        "a message with the same JMS message id is already stored in that "
                        f"destination ({key[1]}:{key[2]} in {key[0]}); nothing was added"
                    )
            self._reserved.update(keys)
        return keys

    def stored_elsewhere(self, adds: Sequence[NewMessage]) -> None:
        """Messages were stored past the journal (XA work goes to the database directly):
        their sequences count as seen, so a later add of one of them is checked."""
        with self._lock:
            self._raise_ceilings([(m.container, m.msgid_prod, m.msgid_seq) for m in adds])

    def _raise_ceilings(self, keys: list[Key]) -> None:
        for container, prod, seq in keys:
            pair = (container, prod)
            self._ceiling[pair] = max(self._ceiling.get(pair, -1), seq)

    def _maybe_stored(self, keys: list[Key], wait: bool) -> list[Key]:
        """The keys that could already be in the database.

        Only this store writes, so a producer's sequence above the highest one it has seen
        for that (container, producer) -- in the database or written since -- cannot be a
        duplicate: one query per new producer instead of one per write.
        """
        with self._lock:
            unknown = list({(c, p) for c, p, _ in keys if (c, p) not in self._ceiling})
            for pair in [pair for pair in unknown if pair[1].startswith(self._fresh)]:
                self._ceiling[pair] = -1  # nothing stored yet: only what it writes from now
                unknown.remove(pair)
        if unknown:
            if not wait:
                raise WouldBlock
            found = self.db.max_sequences(unknown)
            with self._lock:
                if len(self._ceiling) > MAX_CEILINGS:
                    self._ceiling.clear()  # bounded memory; a miss only costs a query
                    self._fresh = ()  # a fresh producer may have stored since: ask again
                for pair, seq in found.items():
                    self._ceiling[pair] = max(self._ceiling.get(pair, -1), seq)
        with self._lock:
            return [k for k in keys if k[2] <= self._ceiling.get((k[0], k[1]), 2**63 - 1)]

    # ------------------------------------------------------------------ known rows
    def generation(self) -> int:
        """Taken before a database read whose rows go to :meth:`seen_in_database`."""
        with self._lock:
            return self._generation

    def seen_in_database(self, rows: Iterable[StoredMessage], generation: int) -> None:
        """A read found these rows in the database (visible, outside XA transactions);
        remembered unless rows may have left it since the read began (``generation``)."""
        with self._lock:
            if generation != self._generation:
                return
            found = {m.id: m.container for m in rows if not m.container.startswith(_TOPICS)}
            if len(self._known) + len(found) > MAX_KNOWN:
                self._known.clear()
            self._known.update(found)

    def applied_locked(self, removed: Iterable[int], purged: Iterable[str]) -> None:
        """A checkpoint deleted these rows (and purged these containers); the lock is held."""
        for i in removed:
            self._known.pop(i, None)
        gone = set(purged)
        if gone:
            self._known = {i: c for i, c in self._known.items() if c not in gone}
        self._generation += 1

    def forget_locked(self) -> None:
        """Rows may have left the database in ways not told apart: remember none (the lock
        is held)."""
        self._known.clear()
        self._generation += 1

    def claim(self, removes: Sequence[Removal], *, wait: bool = True) -> Claims:
        """Decide which removals hit a stored message; claim those IDs, by outcome.

        One query for the removals of database rows the store does not know, none if it
        knows them all (a writer holds the writers' gate: no checkpoint is applied before it
        decides). ``wait=False`` raises :class:`WouldBlock` where the database would have to
        be asked.
        """
        with self._lock:
            state = self._state()
            unknown = [
                r.id
                for r in removes
                if r.id not in state.adds
                and not state.hides(r.id, r.container)
                and self._known.get(r.id) != r.container
            ]
        if unknown and not wait:
            raise WouldBlock
        in_db = self.db.visible(unknown) if unknown else {}
        out: Claims = {}
        with self._lock:
            state = self._state()
            for r in removes:
                msg = state.adds.get(r.id)
                stored = (
                    msg.container == r.container
                    if msg is not None
                    else not state.hides(r.id, r.container)
                    and r.container in (in_db.get(r.id), self._known.get(r.id))
                )
                if stored and r.id not in self._claimed:
                    self._claimed.add(r.id)
                    out.setdefault((r.container, r.outcome or Outcome.ACKNOWLEDGED), []).append(
                        r.id
                    )
        return out

    def release(self, keys: list[Key], claims: Claims, *, written: bool) -> None:
        """Forget a write's reservations and claims (it was applied, or it failed).

        Only a ``written`` write's sequences count as seen: raised for one that failed,
        a producer's ceiling would send its next add, even that very message again, to the
        database for a duplicate check, which fails while the database is away.
        """
        with self._lock:
            if written:
                self._raise_ceilings(keys)
            self._reserved.difference_update(keys)
            for group in claims.values():
                self._claimed.difference_update(group)
