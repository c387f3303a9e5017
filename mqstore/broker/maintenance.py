"""Broker maintenance (mixed into :class:`~mqstore.broker.server.Broker`): the periodic
jobs (expiry sweep, forgetting idle destinations, store cleanup) and the loop that runs
them."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from mqstore.broker.config import BrokerConfig
from mqstore.broker.messages import BrokerMessage
from mqstore.broker.queues import Queue
from mqstore.broker.subscriptions import Dispatcher
from mqstore.broker.topics import Topic
from mqstore.broker.writer import Done, Op
from mqstore.errors import MqstoreError
from mqstore.store.model import Outcome, Removal, StoredMessage
from mqstore.store.port import Store

log = logging.getLogger(__name__)


async def every(seconds: float, job: Any) -> None:
    """Run ``job`` every ``seconds``. While it keeps failing with the same kind of mqstore
    error (the database away), that is logged once a minute, without a traceback."""
    failing: str | None = None
    last_logged = 0.0
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except MqstoreError as exc:  # a known condition: one line
            now = time.monotonic()
            if type(exc).__name__ != failing or now - last_logged >= 60:
                log.error("%s failed: %s", job.__name__, exc)
                failing, last_logged = type(exc).__name__, now
        except Exception:
            log.exception("periodic broker job %s failed", job.__name__)
        else:
            if failing is not None:
                log.info("%s works again", job.__name__)
            failing = None


class Maintenance:
    """Periodic work on the broker's destinations and store; the state lives in the broker."""

    store: Store
    config: BrokerConfig
    queues: dict[str, Queue]
    topics: dict[str, Topic]
    _moving: dict[int, int]
    _idle_since: dict[str, float]  # destination -> when first seen idle
    #: store IDs removed while an expiry sweep reads the store (None: no sweep reading)
    _swept: set[int] | None

    if TYPE_CHECKING:  # provided by the broker

        def writer_submit(self, op: Op, done: Done | None) -> asyncio.Future[list[int]]: ...
        def queue(self, container: str) -> Queue: ...
        def read_row(self, row: StoredMessage, seq: int, where: str) -> BrokerMessage | None: ...
        def dead_letter(
            self, dest: Dispatcher, msgs: list[BrokerMessage], outcome: Outcome
        ) -> asyncio.Future[list[int]]: ...
        def _hold(self, ids: list[int]) -> None: ...
        def _release(self, ids: list[int]) -> None: ...

    def _init_maintenance(self) -> None:
        """No destination seen idle, no sweep reading the store."""
        self._idle_since = {}
        self._swept = None

    async def sweep_expired(self) -> None:
        """Dead-letter expired messages in memory and in the store (persistent ones)."""
        now = int(time.time() * 1000)
        for q in list(self.queues.values()):
            expired = q.expired_pending(now)
            if expired:
                self.dead_letter(q, expired, Outcome.EXPIRED)
        self._swept = set()
        try:
            rows = await asyncio.to_thread(
                self.store.expire, now, self.config.expiry_batch, remove=False
            )
            swept = self._swept
        finally:
            self._swept = None
        removals: list[Removal] = []
        for row in rows:
            if row.id in self._moving or row.id in swept:
                continue  # its move is in flight, or it left while the store was read
            if row.container.startswith("queue://"):
                q = self.queue(row.container)
                if row.id in q.tracked:
                    for msg in q.drop_pending({row.id}):
                        self.dead_letter(q, [msg], Outcome.EXPIRED)
                    continue
                gone = self.read_row(row, 0, f"expiry of {row.container}")
                if gone is None:  # nothing to dead-letter: it stays
                    continue
                q.tracked.add(row.id)
                self.dead_letter(q, [gone], Outcome.EXPIRED)
            else:
                removals.append(Removal(row.container, row.id, Outcome.EXPIRED))
        if removals:
            self._remove_expired(removals)

    def _remove_expired(self, removals: list[Removal]) -> None:
        """Remove expired durable topic messages (tracked so the next sweep skips them)."""
        ids = [r.id for r in removals]
        self._hold(ids)

        def done(_ids: list[int] | None, exc: BaseException | None) -> None:
            self._release(ids)
            if exc is not None:
                log.error("removing expired topic messages failed: %s", exc)
                return
            for container in {r.container for r in removals}:
                if (topic := self.topics.get(container)) is not None:
                    topic.expired({r.id for r in removals if r.container == container})

        self.writer_submit(Op(removes=removals), done)

    async def _cleanup(self) -> None:
        """Delete the topic messages every subscription acknowledged (in a worker thread)."""
        await asyncio.to_thread(self.store.cleanup)

    async def forget_idle(self) -> None:
        """Forget destinations found idle at every sweep for ``destination_gc_after``
        seconds (one-off reply queues would otherwise add memory and metrics for ever)."""
        now = time.monotonic()
        after = self.config.destination_gc_after
        dests: list[Queue | Topic] = [*self.queues.values(), *self.topics.values()]
        for dest in dests:
            name = dest.container
            if not dest.idle():
                self._idle_since.pop(name, None)
            elif now - self._idle_since.setdefault(name, now) >= after:
                table: dict[str, Any] = self.queues if isinstance(dest, Queue) else self.topics
                del table[name]
                del self._idle_since[name]

    def _noting_removals(self, removes: list[Removal], done: Done | None) -> Done:
        """``done``, also telling an expiry sweep reading the store what left it meanwhile."""

        def noted(ids: list[int] | None, exc: BaseException | None) -> None:
            if exc is None and self._swept is not None:
                self._swept.update(r.id for r in removes)
            if done is not None:
                done(ids, exc)

        return noted
