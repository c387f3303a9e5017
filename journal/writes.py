"""The write path of a journaled store: flow control on the pending window, the writers'
gate, one journal record per write made durable (group commit) and applied in log order,
and message IDs assigned once a write is admitted."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from journal.admission import Admission, Claims, Key
from journal.errors import JournalError, JournalFullError
from journal.format import Position
from journal.reads import MergedReads
from journal.records import AckSubscription, AddMessage, Op, RemoveMessages
from journal.state import encode_target
from journal.support import WouldBlock, WriterGate
from mqstore.errors import JournalUnavailableError, StoreClosedError
from mqstore.store.model import Ack, NewMessage, Outcome, Removal
from mqstore.store.validation import check_work

__all__ = ["JournalWriteError", "JournaledWrites"]


class JournalWriteError(JournalError, JournalUnavailableError):
    """A write the journal did not take, raised as the store port's errors are (a
    :class:`~mqstore.errors.StoreError`): its disk is full, or it failed."""


@dataclass(slots=True)
class _Applying:
    """A journaled record waiting in line to be applied; ``removed`` once it is."""

    ops: list[Op]
    removed: int | None = None


class JournaledWrites(MergedReads):
    """The write path of :class:`journal.store.JournaledStore`, whose ``__init__`` sets up the
    state declared here."""

    max_pending_bytes: int
    journal_max_bytes: int
    _started: bool
    _space: threading.Condition
    _gate: WriterGate
    _wake: threading.Event
    _admission: Admission
    _applying: deque[_Applying]
    _applied_end: Position
    _tail: list[tuple[int, list[Op]]] | None

    def _check_open(self) -> None:
        if not self._started:
            raise StoreClosedError("the journaled store is not started (call start() first)")

    def _admit(self, nbytes: int, wait: bool) -> None:
        """Flow control: producers wait while the un-checkpointed window is full."""
        with self._space:
            while (
                self._started
                and self._state.pending_bytes > 0
                and self._state.pending_bytes + nbytes > self.max_pending_bytes
            ):
                self._wake.set()
                if not wait:
                    raise WouldBlock
                self._space.wait(0.05)

    @contextmanager
    def _writing(self, wait: bool = True) -> Iterator[None]:
        self._check_open()
        with self._gate.shared(wait=wait):
            self._check_open()
            self.pg.check_writable()  # lock held (LockLostError otherwise)
            yield

    def _append(self, ops: list[Op]) -> int:
        """Journal one record (durable on return), then apply it; returns rows it removed.

        Records are applied in log order, as replay applies them: each joins the line when
        it is written, and whoever returns first applies every record ahead of its own
        (acknowledged too, since the log is durable up to its own).
        """
        entry = _Applying(ops)
        try:
            end = self.journal.append(ops, on_written=lambda: self._applying.append(entry))
        except JournalFullError as exc:
            self._wake.set()  # a checkpoint releases segments: room for the next write
            raise JournalWriteError(str(exc)) from exc
        except JournalError as exc:
            raise JournalWriteError(str(exc)) from exc
        with self._lock:
            self._applied_end = max(self._applied_end, end)
            while entry.removed is None:
                head = self._applying.popleft()
                now = int(time.time() * 1000)
                head.removed = self._state.apply(head.ops, now)
                if self._tail is not None:
                    self._tail.append((now, head.ops))
            removed = entry.removed
            pending = self._state.pending_bytes
        full = self.journal.bytes_on_disk >= self.journal_max_bytes
        if full or pending * 2 >= self.max_pending_bytes:
            self._wake.set()
        return removed

    def _assign(self, count: int) -> list[int]:
        with self._lock:
            ids = self.pg.next_ids(count)
            self._inflight[ids[0]] = count
        return ids

    def _write(
        self,
        adds: Sequence[NewMessage],
        removes: Sequence[Removal],
        acks: Sequence[Ack],
        *,
        wait: bool = True,
    ) -> tuple[list[int], int]:
        check_work(adds, removes, acks, self.pg.max_message_bytes)
        if adds:
            self._admit(sum(len(m.msg) for m in adds) + 200 * len(adds), wait)
        with self._writing(wait):
            ids: list[int] = []
            keys: list[Key] = []
            claimed: Claims = {}
            written = False
            try:
                keys = self._admission.reserve(adds, wait=wait) if adds else []
                claimed = self._admission.claim(removes, wait=wait) if removes else {}
                # IDs only once admitted: a refused or declined write takes none
                ids = self._assign(len(adds)) if adds else []
                col = self.pg.column_priority
                ops: list[Op] = [
                    AddMessage(
                        i,
                        m.container,
                        m.msgid_prod,
                        m.msgid_seq,
                        m.expiration,
                        col(m.priority),
                        bytes(m.msg),
                    )
                    for m, i in zip(adds, ids, strict=True)
                ]
                ops += [
                    RemoveMessages(encode_target(c, o, Outcome.ACKNOWLEDGED), tuple(r))
                    for (c, o), r in claimed.items()
                ]
                ops += [
                    AckSubscription(
                        a.key.container,
                        a.key.client_id,
                        a.key.sub_name,
                        a.message_id,
                        col(a.priority),
                    )
                    for a in acks
                ]
                removed = self._append(ops) if ops else 0
                written = True
            finally:
                if ids:
                    with self._lock:
                        self._inflight.pop(ids[0], None)
                self._admission.release(keys, claimed, written=written)
        self._counters["added"] += len(ids)
        self._counters["removed"] += removed
        self._counters["acked"] += len(acks)
        return ids, removed
