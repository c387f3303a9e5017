"""A durable subscription's ACKS row with a NULL LAST_ACKED_ID (ActiveMQ never writes one, a
hand edit can) delivers nothing, as ActiveMQ's ``M.ID > D.LAST_ACKED_ID`` matches no row:
prioritized, nothing of that row's PRIORITY; plain, the row drops out of the least
LAST_ACKED_ID (``min()`` skips NULL), and a subscription with only NULL rows is delivered
nothing. An acknowledgement sets the row, and the subscription reads on from there.

Every test runs on the database store, the journaled store with everything in its window,
and the journaled store checkpointed after each step.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal.store import JournaledStore
from mqstore.store import Ack, Store, SubscriptionKey
from tests.integration.conftest import msg
from tests.integration.journal.conftest import Subject
from tests.integration.test_store_plain_mode_priorities import _pending, _stored

T = "topic://prices"
A = SubscriptionKey(T, "client-a", "sub-a")
B = SubscriptionKey(T, "client-b", "sub-b")
MODES = pytest.mark.parametrize("prioritized", [False, True], ids=["plain", "prioritized"])


def _rows(engine: Engine, key: SubscriptionKey, last_acked: dict[int, int | None]) -> None:
    """ACKS rows of ``key``: LAST_ACKED_ID (None: NULL) per PRIORITY."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, "
                "last_acked_id, priority) VALUES (:c, :c, :client, :sub, :last, :priority)"
            ),
            [
                {
                    "c": key.container,
                    "client": key.client_id,
                    "sub": key.sub_name,
                    "last": last,
                    "priority": p,
                }
                for p, last in last_acked.items()
            ],
        )


def _last_acked(subject: Subject, key: SubscriptionKey) -> dict[int, int | None]:
    """LAST_ACKED_ID per PRIORITY of ``key``'s rows, once everything reached the database."""
    if isinstance(subject.store, JournaledStore):
        subject.store.checkpoint()
    sql = sa.text(
        "SELECT priority, last_acked_id FROM activemq_acks "
        "WHERE container = :c AND client_id = :client AND sub_name = :sub"
    )
    params = {"c": key.container, "client": key.client_id, "sub": key.sub_name}
    with subject.engine.connect() as conn:
        return {int(r[0]): r[1] for r in conn.execute(sql, params)}


def _seen(store: Store, key: SubscriptionKey) -> tuple[list[int], int, int, int]:
    """What a subscription is delivered, its pending count, its count in the statistics and
    the LAST_ACKED_ID the store reports for it."""
    sub = store.get_subscription(key)
    assert sub is not None
    counted = store.stats().subscriptions[key]
    return _pending(store, key), store.pending_count(key), counted, sub.last_acked_id


@MODES
def test_subscription_whose_rows_are_all_null_is_delivered_nothing(
    subject: Callable[..., Subject], prioritized: bool
) -> None:
    s = subject(prioritized=prioritized)
    priorities = range(10) if prioritized else (0,)
    _stored(s.engine, T, [0, 4, 0, 4, 9])
    _rows(s.engine, A, dict.fromkeys(priorities))
    _rows(s.engine, B, dict.fromkeys(priorities, 0))
    s.reopen()  # the journaled store reads the rows as they were edited
    [added] = s.store.add([msg(T, 1, priority=4)])
    assert _seen(s.store, A) == ([], 0, 0, -1)
    assert sorted(_pending(s.store, B)) == [1, 2, 3, 4, 5, added]
    s.settle()
    assert _seen(s.store, A) == ([], 0, 0, -1)
    assert sorted(_pending(s.store, B)) == [1, 2, 3, 4, 5, added]
    assert _last_acked(s, A) == dict.fromkeys(priorities)  # still NULL, the rows kept


@MODES
def test_null_row_beside_others_delivers_what_the_database_store_does(
    subject: Callable[..., Subject], prioritized: bool
) -> None:
    s = subject(prioritized=prioritized)
    _stored(s.engine, T, [0, 4, 0, 4, 9])
    if prioritized:  # nothing of PRIORITY 4: IDs 2 and 4
        rows: dict[int, int | None] = {p: None if p == 4 else 0 for p in range(10)}
        pending, last_acked = [5, 1, 3], 0
    else:  # after the least LAST_ACKED_ID of the rows not NULL
        rows, pending, last_acked = {0: None, 4: 2}, [3, 4, 5], 2
    _rows(s.engine, A, rows)
    s.reopen()
    [added] = s.store.add([msg(T, 1, priority=0)])
    expected = ([*pending, added], len(pending) + 1, len(pending) + 1, last_acked)
    assert _seen(s.store, A) == expected
    s.settle()
    assert _seen(s.store, A) == expected
    assert _last_acked(s, A) == rows


@MODES
def test_acknowledgement_sets_a_null_row_and_the_subscription_reads_on_from_it(
    subject: Callable[..., Subject], prioritized: bool
) -> None:
    s = subject(prioritized=prioritized)
    _stored(s.engine, T, [0, 4, 0, 4, 9])
    if prioritized:  # PRIORITY 4 now delivers after ID 2
        rows: dict[int, int | None] = {p: None if p == 4 else 0 for p in range(10)}
        ack, pending, after = Ack(A, 2, 4), [5, 4, 1, 3], {**rows, 4: 2}
        last_acked = 0
    else:  # the NULL row is set to 2, below the other row's 3: the least is 2
        rows = {0: None, 4: 3}
        ack, pending, after, last_acked = Ack(A, 2), [3, 4, 5], {0: 2, 4: 3}, 2
    _rows(s.engine, A, rows)
    s.reopen()
    s.store.acknowledge([ack])
    expected = (pending, len(pending), len(pending), last_acked)
    assert _seen(s.store, A) == expected
    s.settle()
    assert _seen(s.store, A) == expected
    assert _last_acked(s, A) == after
