"""Group store writes: work that arrives together (from many connections) becomes one
``store.commit(Batch)`` run in a worker thread, so throughput is not one round trip per message.

Each submitted :class:`Op` stays atomic (a transaction's sends and acks, a DLQ move); if a
merged batch fails, its ops are retried one by one so only the faulty op fails.

When the thread is idle and the store can commit without waiting (:class:`InlineCommit`, the
journaled store: one fsync, no database), work is committed on the event loop at the end of
the loop's turn instead: a lone producer waiting for receipts then pays no thread hand-offs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from mqstore.errors import MessageNotFoundError
from mqstore.store.model import Ack, Batch, NewMessage, Removal
from mqstore.store.port import Store

log = logging.getLogger(__name__)

Done = Callable[[list[int] | None, BaseException | None], None]

#: How long work nobody waits for may wait for company before it is committed alone.
LINGER_S = 0.002

Item = tuple["Op", "asyncio.Future[list[int]]"]


@runtime_checkable
class InlineCommit(Protocol):
    """A store that can tell, without waiting, whether a commit can go ahead now."""

    def try_commit(self, batch: Batch) -> list[int] | None:
        """Commit ``batch`` (durably) unless that would wait; None if nothing was written."""


@dataclass(slots=True)
class Op:
    """One atomic unit of store work; ``done`` runs on the loop, in submission order."""

    adds: list[NewMessage] = field(default_factory=list)
    removes: list[Removal] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    updates: list[tuple[str, int, bytes]] = field(default_factory=list)
    done: Done | None = None
    #: Nobody waits for it (an ACK without a receipt): it may linger briefly to share a
    #: commit, and its fsync, with the next send.
    lazy: bool = False

    @property
    def weight(self) -> int:
        return len(self.adds) + len(self.removes) + len(self.acks) + len(self.updates) or 1


class StoreWriter:
    """Runs :class:`Op` s through the store in batches, one batch at a time, in order.

    A dedicated thread takes everything queued, commits it as one batch and hands the results
    back to the event loop, then at once takes what arrived meanwhile: the loop never waits
    for a commit, and a commit never waits for the loop (group commit, in order).
    """

    def __init__(self, store: Store, max_batch: int = 1000, *, inline: bool = True) -> None:
        self.store = store
        self.max_batch = max_batch
        self._inline = store if inline and isinstance(store, InlineCommit) else None
        self._queue: deque[Item] = deque()
        self._eager = 0  # queued ops someone waits for
        self._busy = 0  # chunks taken (by the thread or inline) whose completions have not run
        self._inline_running = False
        self._flush_due = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._finished: asyncio.Event | None = None
        self.batches = 0
        self.ops = 0
        self.inline_batches = 0
        self._nudge: asyncio.TimerHandle | None = None
        self._due = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._finished = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="mqstore-store-writer", daemon=True)
        self._thread.start()

    def submit(self, op: Op) -> asyncio.Future[list[int]]:
        """Queue ``op``; the future gets the IDs of its adds once it is durable."""
        assert self._loop is not None, "writer not started"
        fut: asyncio.Future[list[int]] = self._loop.create_future()
        with self._cond:
            self._queue.append((op, fut))
            if not op.lazy:
                self._eager += 1
                if self._inline is None or self._busy:
                    self._cond.notify()
                elif not self._flush_due:
                    # The thread is idle: commit on the loop once this turn's frames are read.
                    self._flush_due = True
                    self._loop.call_soon(self._flush)
            elif self._nudge is None:
                # Lazy work does not wake the writer: the next eager op takes it along, or
                # this timer hands it over alone once it has waited LINGER_S.
                self._nudge = self._loop.call_later(LINGER_S, self._linger_over)
        return fut

    def _linger_over(self) -> None:
        with self._cond:
            self._nudge = None
            if self._queue:
                self._due = True
                self._cond.notify()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    async def close(self) -> None:
        """Finish every queued op, then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._finished is not None and self._thread is not None:
            await self._finished.wait()
            await asyncio.to_thread(self._thread.join)

    def _take(self) -> list[Item] | None:
        with self._cond:
            while self._inline_running or not (
                self._queue
                and (
                    self._eager or self._due or self._closing or len(self._queue) >= self.max_batch
                )
            ):
                if self._closing and not self._queue and not self._inline_running:
                    return None
                self._cond.wait()
            chunk = self._pop_locked()
            # Lazy work left past max_batch lingered as long: it is still due (its timer
            # has fired, and no other may come).
            self._due = self._due and bool(self._queue)
            return chunk

    def _pop_locked(self) -> list[Item]:
        chunk: list[Item] = []
        weight = 0
        while self._queue and (not chunk or weight < self.max_batch):
            item = self._queue.popleft()
            weight += item[0].weight
            self._eager -= not item[0].lazy
            chunk.append(item)
        self._busy += 1
        return chunk

    def _flush(self) -> None:
        """On the loop: commit what is queued here if the thread is idle, else wake it."""
        store = self._inline
        assert store is not None
        with self._cond:
            self._flush_due = False
            if not self._eager:
                return  # the thread took it meanwhile
            if self._busy or self._closing:
                self._cond.notify()
                return
            chunk = self._pop_locked()
            self._inline_running = True
        results: list[list[int] | BaseException] | None = None
        try:
            results = self._try_inline(store, [op for op, _ in chunk])
        finally:
            with self._cond:
                self._inline_running = False
                if results is None:  # it would wait: the thread commits it, still first in line
                    self._queue.extendleft(reversed(chunk))
                    self._eager += sum(not op.lazy for op, _ in chunk)
                    self._busy -= 1
                if self._queue:
                    self._cond.notify()
        if results is not None:
            self.inline_batches += 1
            self.ops += len(chunk)
            self._complete(chunk, results)

    @staticmethod
    def _try_inline(store: InlineCommit, ops: list[Op]) -> list[list[int] | BaseException] | None:
        """The results of committing ``ops`` as one batch now, or None to leave it to the thread.

        A failure of a single op is its result; a failed merge goes to the thread, which
        retries op by op. Message updates are left to the thread too.
        """
        if any(op.updates for op in ops):
            return None
        batch = _merge(ops)
        try:
            ids = store.try_commit(batch) if batch else []
        except Exception as exc:
            if len(ops) > 1:
                return None
            return [exc]
        if ids is None:
            return None
        return _split(ops, ids)

    def _run(self) -> None:
        assert self._loop is not None and self._finished is not None
        loop, finished = self._loop, self._finished
        try:
            while (chunk := self._take()) is not None:
                results = self._execute([op for op, _ in chunk])
                self.batches += 1
                self.ops += len(chunk)
                loop.call_soon_threadsafe(self._complete, chunk, results)
        finally:
            loop.call_soon_threadsafe(finished.set)

    def _complete(self, chunk: list[Item], results: list[list[int] | BaseException]) -> None:
        """On the loop: run completions and resolve futures, in submission order."""
        with self._cond:
            self._busy -= 1
        for (op, fut), res in zip(chunk, results, strict=True):
            exc = res if isinstance(res, BaseException) else None
            ids = None if exc is not None else res
            if op.done is not None:
                try:
                    op.done(ids if isinstance(ids, list) else None, exc)
                except Exception:
                    log.exception("store completion callback failed")
            if fut.cancelled():
                continue
            if exc is not None:
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: callers may only use ``done``
            else:
                fut.set_result(ids if isinstance(ids, list) else [])

    def _execute(self, ops: list[Op]) -> list[list[int] | BaseException]:
        """Worker thread: one merged commit, or op by op when the merged one fails."""
        if len(ops) > 1:
            try:
                return self._apply(ops)
            except Exception as exc:
                log.warning("batched store write failed (%s); retrying op by op", exc)
        out: list[list[int] | BaseException] = []
        for op in ops:
            try:
                out.extend(self._apply([op]))
            except Exception as exc:
                out.append(exc)
        return out

    def _apply(self, ops: list[Op]) -> list[list[int] | BaseException]:
        for op in ops:
            for container, ident, msg in op.updates:
                with contextlib.suppress(MessageNotFoundError):
                    self.store.update(container, ident, msg)
        batch = _merge(ops)
        ids = self.store.commit(batch) if batch else []
        return _split(ops, ids)


def _merge(ops: list[Op]) -> Batch:
    """One batch of the ops' adds, removes and acks, in order."""
    batch = Batch()
    for op in ops:
        batch.adds.extend(op.adds)
        batch.removes.extend(op.removes)
        batch.acks.extend(op.acks)
    return batch


def _split(ops: list[Op], ids: list[int]) -> list[list[int] | BaseException]:
    """Each op's share of a merged batch's new IDs."""
    out: list[list[int] | BaseException] = []
    pos = 0
    for op in ops:
        out.append(ids[pos : pos + len(op.adds)])
        pos += len(op.adds)
    return out
