"""Group store writes: work that arrives together (from many connections) becomes one
``store.commit(Batch)`` run in a worker thread, so throughput is not one round trip per message.

Each submitted :class:`Op` stays atomic (a transaction's sends and acks, a DLQ move); if a
merged batch fails, its ops are retried one by one so only the faulty op fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from mqstore.errors import MessageNotFoundError
from mqstore.store.model import Ack, Batch, NewMessage, Removal
from mqstore.store.port import Store

log = logging.getLogger(__name__)

Done = Callable[[list[int] | None, BaseException | None], None]


@dataclass(slots=True)
class Op:
    """One atomic unit of store work; ``done`` runs on the loop, in submission order."""

    adds: list[NewMessage] = field(default_factory=list)
    removes: list[Removal] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    updates: list[tuple[str, int, bytes]] = field(default_factory=list)
    done: Done | None = None

    @property
    def weight(self) -> int:
        return len(self.adds) + len(self.removes) + len(self.acks) + len(self.updates) or 1


class StoreWriter:
    """Runs :class:`Op` s through the store in batches, one batch at a time, in order."""

    def __init__(self, store: Store, max_batch: int = 1000) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: list[tuple[Op, asyncio.Future[list[int]]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.batches = 0
        self.ops = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")

    def submit(self, op: Op) -> asyncio.Future[list[int]]:
        """Queue ``op``; the future gets the IDs of its adds once it is durable."""
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.append((op, fut))
        self._wake.set()
        return fut

    @property
    def backlog(self) -> int:
        return len(self._queue)

    async def close(self) -> None:
        """Finish every queued op, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            take, weight = 0, 0
            while take < len(self._queue) and (take == 0 or weight < self.max_batch):
                weight += self._queue[take][0].weight
                take += 1
            chunk = self._queue[:take]
            del self._queue[:take]
            ops = [op for op, _ in chunk]
            results = await asyncio.to_thread(self._execute, ops)
            self.batches += 1
            self.ops += len(ops)
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
        batch = Batch()
        for op in ops:
            batch.adds.extend(op.adds)
            batch.removes.extend(op.removes)
            batch.acks.extend(op.acks)
        ids = self.store.commit(batch) if batch else []
        out: list[list[int] | BaseException] = []
        pos = 0
        for op in ops:
            out.append(ids[pos : pos + len(op.adds)])
            pos += len(op.adds)
        return out
