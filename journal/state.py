"""The journaled store's in-memory state: the net effect of records not yet checkpointed.

One :class:`PendingState` holds what the journal has acknowledged since the last checkpoint
and the database does not yet show: live adds (in delivery order per destination and
priority), removals of database-resident rows, purged destinations, body updates,
subscription changes and durable acks reduced to the newest per subscription and priority.
:meth:`PendingState.apply` is the only mutator; it is used both for live writes and for
replay, so a replayed journal rebuilds exactly the state the writer had.

Outcomes of removals are carried in the container field of ``RemoveMessages`` and
``PurgeDestination`` as ``"<outcome>@<container>"`` (a real container always starts with
``queue://``, ``topic://``, ...), since the log format has no outcome field; plain container
text means "acknowledged" for removals and "purged" for purges.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from journal.records import (
    AckSubscription,
    AddMessage,
    AddSubscription,
    DeleteSubscription,
    Op,
    PurgeDestination,
    RemoveMessages,
    UpdateMessage,
)
from mqstore.errors import StoreError
from mqstore.store.model import Cursor, Outcome, StoredMessage, SubscriptionKey

__all__ = [
    "ElidedRow",
    "PendingState",
    "PendingSub",
    "decode_target",
    "encode_target",
    "history_copy",
]

#: Rough per-entry bookkeeping cost, counted against ``max_pending_bytes``.
ENTRY_OVERHEAD = 200


def encode_target(container: str, outcome: Outcome, default: Outcome) -> str:
    """The container field of a removal/purge op carrying a non-default outcome."""
    return container if outcome is default else f"{outcome.value}@{container}"


def decode_target(text: str, default: Outcome) -> tuple[str, Outcome]:
    """Inverse of :func:`encode_target`."""
    head, sep, rest = text.partition("@")
    if sep and "://" not in head:
        return rest, Outcome(head)
    return text, default


def history_copy(msg: StoredMessage, keep_body: bool) -> StoredMessage:
    """What an elided message's history row keeps: everything, or all but the body."""
    if keep_body:
        return msg
    return StoredMessage(
        msg.id,
        msg.container,
        msg.msgid_prod,
        msg.msgid_seq,
        msg.expiration,
        msg.priority,
        b"",
        msg.xid,
    )


@dataclass(slots=True)
class PendingSub:
    """A subscription created since the last checkpoint (not yet in ACTIVEMQ_ACKS)."""

    key: SubscriptionKey
    selector: str | None
    sub_dest: str | None
    start: int
    prioritized: bool


@dataclass(frozen=True, slots=True)
class ElidedRow:
    """A message added and removed within one window: a history row, never an MSGS row."""

    message: StoredMessage
    outcome: Outcome
    removed_at: int


@dataclass(slots=True)
class _Lane:
    """IDs of one (container, column priority) in ascending order; dead IDs skipped lazily."""

    ids: list[int] = field(default_factory=list)
    head: int = 0


class PendingState:
    """Un-checkpointed changes; not thread-safe (the store serialises access)."""

    def __init__(self, *, keep_history: bool, keep_bodies: bool) -> None:
        self.keep_history, self.keep_bodies = keep_history, keep_bodies
        self.adds: dict[int, StoredMessage] = {}
        self.lanes: dict[str, dict[int, _Lane]] = {}
        self.live: dict[str, int] = {}  # container -> live memory adds
        self.keys: dict[tuple[str, str, int], int] = {}  # (container, prod, seq) -> id
        self.removed: dict[int, tuple[str, Outcome, int]] = {}  # id -> (container, outcome, at)
        self.removed_in: dict[str, set[int]] = {}
        self.purged: dict[str, tuple[Outcome, int]] = {}
        self.updates: dict[int, tuple[str, bytes]] = {}
        #: Bodies the window gave database rows it then removed (kept only for history
        #: with bodies): the checkpoint writes them before the deletes record history.
        self.removed_bodies: dict[int, tuple[str, bytes]] = {}
        self.subs_added: dict[SubscriptionKey, PendingSub] = {}
        self.subs_deleted: set[SubscriptionKey] = set()
        self.acks: dict[tuple[SubscriptionKey, int], int] = {}
        self.elided: list[ElidedRow] = []
        self.elided_count = 0
        self.max_id = 0  # the highest ID applied: of messages, acks and subscription starts
        self.max_message_id = 0  # the highest ID of a message added (removed since or not)
        self.pending_bytes = 0
        self.records = 0
        #: The adds a checkpoint in flight is writing: from its commit on they are also
        #: database rows, so dropping one of them removes that row too.
        self.in_flight: Mapping[int, StoredMessage] = {}

    def copy(self) -> PendingState:
        """An independent copy (messages are immutable and shared): what a checkpoint
        writes while writers go on applying records to the original (whose
        :attr:`in_flight` the caller then sets to the copy's adds)."""
        new = PendingState(keep_history=self.keep_history, keep_bodies=self.keep_bodies)
        new.adds = dict(self.adds)
        new.lanes = {
            c: {p: _Lane(lane.ids[lane.head :]) for p, lane in lanes.items()}
            for c, lanes in self.lanes.items()
        }
        new.live = dict(self.live)
        new.keys = dict(self.keys)
        new.removed = dict(self.removed)
        new.removed_in = {c: set(ids) for c, ids in self.removed_in.items()}
        new.purged = dict(self.purged)
        new.updates = dict(self.updates)
        new.removed_bodies = dict(self.removed_bodies)
        new.subs_added = dict(self.subs_added)
        new.subs_deleted = set(self.subs_deleted)
        new.acks = dict(self.acks)
        new.elided = list(self.elided)
        new.elided_count = self.elided_count
        new.max_id = self.max_id
        new.max_message_id = self.max_message_id
        new.pending_bytes = self.pending_bytes
        new.records = self.records
        return new

    # ------------------------------------------------------------------ mutation
    def apply(self, ops: Sequence[Op], now_ms: int | None = None) -> int:
        """Apply one journal record; returns how many stored messages it removed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        self.records += 1
        for op in ops:
            if type(op) is AddMessage:
                self._add(op)
            elif type(op) is RemoveMessages:
                container, outcome = decode_target(op.container, Outcome.ACKNOWLEDGED)
                removed += self._remove(container, op.ids, outcome, now)
            elif type(op) is AckSubscription:
                key = SubscriptionKey(op.container, op.client_id, op.sub_name)
                slot = (key, op.priority or 0)
                self.acks[slot] = max(self.acks.get(slot, -1), op.last_acked_id)
                self.max_id = max(self.max_id, op.last_acked_id)
                self.pending_bytes += 8
            elif type(op) is UpdateMessage:
                self._update(op)
            elif type(op) is PurgeDestination:
                container, outcome = decode_target(op.container, Outcome.PURGED)
                removed += self._purge(container, outcome, now)
            elif type(op) is AddSubscription:
                key = SubscriptionKey(op.container, op.client_id, op.sub_name)
                # Acks journaled before it named no subscription: they matched no row.
                for slot in [s for s in self.acks if s[0] == key]:
                    del self.acks[slot]
                self.subs_added[key] = PendingSub(
                    key, op.selector, op.sub_dest, op.last_acked_id, op.prioritized
                )
                self.max_id = max(self.max_id, op.last_acked_id)
                self.pending_bytes += ENTRY_OVERHEAD
            elif type(op) is DeleteSubscription:
                key = SubscriptionKey(op.container, op.client_id, op.sub_name)
                self.subs_added.pop(key, None)
                self.subs_deleted.add(key)
                for slot in [s for s in self.acks if s[0] == key]:
                    del self.acks[slot]
            else:
                raise StoreError(
                    f"journal record holds {type(op).__name__}, which this store never writes; "
                    "was the journal written by another program?"
                )
        return removed

    def _add(self, op: AddMessage) -> None:
        msg = StoredMessage(
            op.id, op.container, op.msgid_prod, op.msgid_seq, op.expiration, op.priority, op.msg
        )
        self.adds[op.id] = msg
        lane = self.lanes.setdefault(op.container, {}).setdefault(op.priority, _Lane())
        if not lane.ids or lane.ids[-1] < op.id:
            lane.ids.append(op.id)
        else:
            bisect.insort(lane.ids, op.id)
        self.live[op.container] = self.live.get(op.container, 0) + 1
        if op.msgid_prod is not None and op.msgid_seq is not None:
            self.keys[(op.container, op.msgid_prod, op.msgid_seq)] = op.id
        self.max_id = max(self.max_id, op.id)
        self.max_message_id = max(self.max_message_id, op.id)
        self.pending_bytes += len(op.msg) + ENTRY_OVERHEAD

    def _drop_add(self, msg: StoredMessage, outcome: Outcome, now: int) -> None:
        """A memory add removed: elided (history row kept if history is on)."""
        del self.adds[msg.id]
        self.live[msg.container] -= 1
        if msg.msgid_prod is not None and msg.msgid_seq is not None:
            self.keys.pop((msg.container, msg.msgid_prod, msg.msgid_seq), None)
        self.pending_bytes -= len(msg.msg) + ENTRY_OVERHEAD
        self.elided_count += 1
        if self.keep_history:
            kept = history_copy(msg, self.keep_bodies)
            self.elided.append(ElidedRow(kept, outcome, now))
            self.pending_bytes += len(kept.msg) + 64
        if msg.id in self.in_flight:
            self.removed[msg.id] = (msg.container, outcome, now)
            self.removed_in.setdefault(msg.container, set()).add(msg.id)
            self.pending_bytes += 64
        lane = self.lanes[msg.container][msg.priority]
        while lane.head < len(lane.ids) and lane.ids[lane.head] not in self.adds:
            lane.head += 1
        if lane.head > 4096:
            del lane.ids[: lane.head]
            lane.head = 0

    def _remove(self, container: str, ids: Iterable[int], outcome: Outcome, now: int) -> int:
        count = 0
        for i in ids:
            msg = self.adds.get(i)
            if msg is not None and msg.container == container:
                self._drop_add(msg, outcome, now)
                count += 1
            elif i not in self.removed and container not in self.purged:
                self.removed[i] = (container, outcome, now)
                self.removed_in.setdefault(container, set()).add(i)
                body = self.updates.pop(i, None)
                if body is not None and self.keep_history and self.keep_bodies:
                    self.removed_bodies[i] = body
                self.pending_bytes += 64
                count += 1
        return count

    def _update(self, op: UpdateMessage) -> None:
        msg = self.adds.get(op.id)
        if msg is not None:
            self.pending_bytes += len(op.msg) - len(msg.msg)
            self.adds[op.id] = replace(msg, msg=bytes(op.msg))
        else:
            old = self.updates.get(op.id)
            self.pending_bytes += len(op.msg) - (len(old[1]) if old else -ENTRY_OVERHEAD)
            self.updates[op.id] = (op.container, bytes(op.msg))

    def _purge(self, container: str, outcome: Outcome, now: int) -> int:
        count = 0
        for lane in self.lanes.get(container, {}).values():
            for i in lane.ids[lane.head :]:
                msg = self.adds.get(i)
                if msg is not None:
                    self._drop_add(msg, outcome, now)
                    count += 1
        self.lanes.pop(container, None)
        self.purged[container] = (outcome, now)
        self.pending_bytes += ENTRY_OVERHEAD
        return count

    # ------------------------------------------------------------------ queries
    @property
    def empty(self) -> bool:
        """Nothing was applied since this state was created."""
        return self.records == 0

    def hides(self, message_id: int, container: str) -> bool:
        """Whether a database row is removed (or purged) by this state."""
        return message_id in self.removed or container in self.purged

    def iter_lane(
        self, container: str, priority: int, after_id: int, bound: int
    ) -> Iterator[StoredMessage]:
        """Live adds of one lane with ``after_id < id < bound``, ascending."""
        lane = self.lanes.get(container, {}).get(priority)
        if lane is None:
            return
        ids = lane.ids
        start = max(lane.head, bisect.bisect_right(ids, after_id))
        for i in ids[start:]:
            if i >= bound:
                return
            msg = self.adds.get(i)
            if msg is not None:
                yield msg

    def page(
        self,
        container: str,
        after: Cursor,
        limit: int,
        bound: int,
        floors: dict[int, int] | None = None,
    ) -> list[StoredMessage]:
        """Up to ``limit`` live adds after ``after`` in delivery order.

        ``floors`` (per column priority) keeps only IDs above a subscription's last ack;
        priorities missing from ``floors`` are skipped.
        """
        out: list[StoredMessage] = []
        for prio in sorted(self.lanes.get(container, {}), reverse=True):
            if prio > after.priority:
                continue
            after_id = after.id if prio == after.priority else -1
            if floors is not None:
                if prio not in floors:
                    continue
                after_id = max(after_id, floors[prio])
            for msg in self.iter_lane(container, prio, after_id, bound):
                out.append(msg)
                if len(out) >= limit:
                    return out
        return out

    def count_after(self, container: str, floors: dict[int, int]) -> int:
        """Live adds of a container above the per-priority floors."""
        total = 0
        for prio, lane in self.lanes.get(container, {}).items():
            if prio in floors:
                lo = bisect.bisect_right(lane.ids, floors[prio])
                total += sum(1 for i in lane.ids[max(lo, lane.head) :] if i in self.adds)
        return total

    def excluded(self, container: str) -> list[int]:
        """IDs of database rows of ``container`` this state removed."""
        return list(self.removed_in.get(container, ()))

    def in_flight_live(self, container: str | None = None) -> list[int]:
        """In-flight adds still live (of ``container``, or all): the database may hold them
        too, so counts of its rows leave them out."""
        if not self.in_flight:
            return []
        return [
            i
            for i, m in self.in_flight.items()
            if i in self.adds and (container is None or m.container == container)
        ]

    def container_of_live(self) -> set[str]:
        """Containers with live memory adds."""
        return {c for c, n in self.live.items() if n > 0}
