"""Dead-lettering (mixed into :class:`~mqstore.broker.server.Broker`): messages consumed
and their copies added to the DLQ in one store write, with ActiveMQ's DLQ audit, and the
store IDs whose move is in flight (an expiry sweep leaves those alone)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mqstore.broker.config import BrokerConfig
from mqstore.broker.dlq_audit import DeadLetterAudit
from mqstore.broker.flow import StoreUsage
from mqstore.broker.messages import BrokerMessage, dead_letter
from mqstore.broker.subscriptions import Dispatcher
from mqstore.broker.writer import Done, Op
from mqstore.errors import DuplicateMessageError, StoreError
from mqstore.schema import NAME_LENGTH
from mqstore.store.model import Outcome
from mqstore.store.port import Store

log = logging.getLogger(__name__)

#: Destinations whose too-long DLQ name is remembered as told of (as ActiveMQ's 10,000
#: destinations with their own DLQ audit).
_MAX_WARNED = 10_000

#: The outcomes of moves, counted from 0 (a scrape shows each before its first move).
_COUNTED = (Outcome.DEAD_LETTERED.value, Outcome.EXPIRED.value)


class DeadLetters:
    """Moves of messages to their dead-letter queue; the state lives in the broker."""

    store: Store
    config: BrokerConfig
    usage: StoreUsage
    _retries: set[asyncio.Task[None]]  # DLQ moves tried again (kept alive)
    _dlq_audit: DeadLetterAudit
    #: store IDs whose move to the DLQ (or expiry removal) is in flight: how many moves
    _moving: dict[int, int]
    #: destinations told of (logged) whose individual DLQ's name is too long to store
    _dlq_name_warned: set[str]
    #: messages taken as dead letters, by outcome (replaced whole: another thread reads it)
    _dead_letters: dict[str, int]

    if TYPE_CHECKING:  # provided by the broker

        def writer_submit(self, op: Op, done: Done | None) -> asyncio.Future[list[int]]: ...
        def stored(self, msg: BrokerMessage, ident: int) -> None: ...
        def route(self, msg: BrokerMessage) -> None: ...

    def _init_dead_letters(self) -> None:
        """No move in flight yet."""
        self._retries = set()
        self._dlq_audit = DeadLetterAudit()
        self._moving = {}
        self._dlq_name_warned = set()
        self._dead_letters = dict.fromkeys(_COUNTED, 0)

    def dead_letter_counts(self) -> dict[str, int]:
        """Messages taken from their queue or subscription as dead letters since the start,
        by outcome: ``dead-lettered`` (NACKed, redelivered too often, a body that cannot be
        rendered) and ``expired``; each once its move is stored, whether or not a copy was
        added to a DLQ (non-persistent ones, the DLQ's own, a copy the DLQ audit holds).
        Safe to call from any thread."""
        return dict(self._dead_letters)

    def dead_letter(
        self,
        dest: Dispatcher,
        msgs: list[BrokerMessage],
        outcome: Outcome,
        *,
        delivered: bool = False,
    ) -> asyncio.Future[list[int]]:
        """Atomically consume ``msgs`` from ``dest`` and add copies to the DLQ (persistent only).
        If the store write fails they come back to ``dest``, marked redelivered if
        ``delivered`` (NACKed by a consumer; not so expired or unrenderable ones).

        As ActiveMQ's DLQ audit, a copy the DLQ holds, is about to hold or lately held
        (another subscriber of a topic dead-lettered the same message) is not added twice;
        the messages are consumed all the same.
        """
        op, finish = dest.settle_work(msgs, outcome)
        move = _Move(op, finish, asyncio.get_running_loop().create_future(), dest, msgs)
        move.delivered = delivered
        move.outcome = outcome
        move.ids = [m.store_id for m in msgs if m.store_id is not None]
        self._hold(move.ids)
        for m in msgs:
            dlq = self._dlq_for(m.container)
            if (m.persistent or self.config.dlq_non_persistent) and m.container != dlq:
                self._add_copy(move, dead_letter(m, dlq))
        if move.copies:
            log.info("%d message(s) of %s moved to the DLQ (%s)", len(move.copies), dest.container,
                     outcome.value)  # fmt: skip
        self._submit_move(move, retry=True)
        return move.result

    def _dlq_for(self, container: str) -> str:
        """The DLQ of ``container``'s messages; the first time one goes to the shared DLQ
        because its individual DLQ's name would be too long to store, a warning says so."""
        if (
            self.config.individual_dlq_too_long(container)
            and container not in self._dlq_name_warned
        ):
            if len(self._dlq_name_warned) >= _MAX_WARNED:
                self._dlq_name_warned.clear()  # bounded: a later warning may repeat
            self._dlq_name_warned.add(container)
            log.warning(
                "the individual DLQ of %s would be named %d characters long; ActiveMQ's "
                "CONTAINER column holds at most %d: its dead letters go to the shared DLQ %s "
                "(give the destination a shorter name to have its own)",
                container, len(self.config.individual_dlq_name(container)), NAME_LENGTH,
                self.config.dlq_for(container),
            )  # fmt: skip
        return self.config.dlq_for(container)

    def _add_copy(self, move: _Move, copy: BrokerMessage) -> None:
        """Add ``copy`` to ``move`` unless a copy of it is on its way to the DLQ already."""
        row = copy.new_message()
        key = (row.container, row.msgid_prod, row.msgid_seq)
        if not self._dlq_audit.claim(key):
            log.info("not adding duplicate %s to %s", copy.ow.jms_message_id, copy.container)
            return
        move.keys.append(key)
        move.copies.append(copy)

    def _submit_move(self, move: _Move, *, retry: bool) -> None:
        op = move.op
        op.adds = [c.new_message() for c in move.copies]

        def done(ids: list[int] | None, exc: BaseException | None) -> None:
            if retry and move.copies and isinstance(exc, DuplicateMessageError):
                task = asyncio.get_running_loop().create_task(self._move_without_stored(move))
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)
                return
            self._dlq_audit.settle(move.keys, added=exc is None and ids is not None)
            self._release(move.ids)
            if exc is not None or ids is None:
                log.error("moving messages to the DLQ failed: %s", exc)
                move.dest.unsettled(move.msgs, delivered=move.delivered)
                _fail(move.result, exc or StoreError("the store returned no IDs"))
                return
            for copy, ident in zip(move.copies, ids, strict=True):
                self.stored(copy, ident)
                self.usage.add(copy.size)
                self.route(copy)
            move.finish()
            counts = self._dead_letters
            self._dead_letters = {
                **counts,
                move.outcome.value: counts.get(move.outcome.value, 0) + len(move.msgs),
            }
            if not move.result.done():
                move.result.set_result(ids)

        self.writer_submit(op, done)

    async def _move_without_stored(self, move: _Move) -> None:
        """The DLQ refused a copy as a duplicate (one stored before, e.g. before a restart):
        move again without the copies it holds, so the messages are still consumed."""
        try:
            stored = await asyncio.to_thread(self._stored_copies, move.copies)
        except Exception as exc:
            self._dlq_audit.settle(move.keys, added=False)
            self._release(move.ids)
            log.error("moving messages to the DLQ failed: %s", exc)
            move.dest.unsettled(move.msgs, delivered=move.delivered)
            _fail(move.result, exc)
            return
        for copy in stored:
            log.info("not adding duplicate %s to %s", copy.ow.jms_message_id, copy.container)
        move.copies = [c for c in move.copies if c not in stored]
        move.op = Op(removes=move.op.removes, acks=move.op.acks)
        self._submit_move(move, retry=False)

    def _hold(self, ids: list[int]) -> None:
        """Mark store IDs as being moved (an expiry sweep leaves them alone)."""
        for i in ids:
            self._moving[i] = self._moving.get(i, 0) + 1

    def _release(self, ids: list[int]) -> None:
        for i in ids:
            left = self._moving.pop(i, 1) - 1
            if left > 0:
                self._moving[i] = left

    def _stored_copies(self, copies: list[BrokerMessage]) -> list[BrokerMessage]:
        """Worker thread: the copies whose JMS message id their DLQ holds already."""
        found = []
        for copy in copies:
            row = copy.new_message()
            if self.store.find(row.msgid_prod, row.msgid_seq, row.container) is not None:
                found.append(copy)
        return found


@dataclass(eq=False)
class _Move:
    """One move of messages to the DLQ: the settle work and the copies it adds."""

    op: Op
    finish: Callable[[], None]
    result: asyncio.Future[list[int]]
    dest: Dispatcher  # where the messages are consumed from
    msgs: list[BrokerMessage]  # the messages it consumes
    copies: list[BrokerMessage] = field(default_factory=list)
    keys: list[tuple[str, str, int]] = field(default_factory=list)  # audit entries it holds
    ids: list[int] = field(default_factory=list)  # store IDs of the messages it consumes
    delivered: bool = False  # the messages were sent to a consumer (a NACK moves them)
    outcome: Outcome = Outcome.DEAD_LETTERED  # recorded for the messages it consumes


def _fail(fut: asyncio.Future[list[int]], exc: BaseException) -> None:
    """Fail ``fut`` (marked retrieved: callers may not wait for it)."""
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()
