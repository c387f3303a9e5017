"""``expire`` bounds the MSG bytes one call returns, on PostgresStore and JournaledStore.

The in-memory store the broker tests use keeps the same contract. The journaled store runs
with everything in its un-checkpointed window ("journaled"), a
checkpoint after every step ("checkpointed"), and half of the messages checkpointed and half
in the window with interleaved expirations ("mixed"), so the database rows and the memory
adds are merged under the bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.broker.memory_store import MemoryStore
from mqstore.store import NewMessage, Store, StoredMessage
from mqstore.store.model import NO_BYTE_BOUND
from tests.integration.conftest import StoreFactory, msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://expiring"
T = "topic://expiring"
KIB = 1024
MIB = 1024 * KIB


@dataclass
class Subject:
    store: Store
    mode: str
    settle: Callable[[], None]  # checkpoint ("checkpointed", "mixed" first half) or nothing


@pytest.fixture(params=["postgres", "journaled", "checkpointed", "mixed", "memory"])
def subject(
    request: pytest.FixtureRequest, make_store: StoreFactory, make_journaled: JournaledFactory
) -> Subject:
    mode = str(request.param)
    if mode == "postgres":
        return Subject(make_store(), mode, lambda: None)
    if mode == "memory":  # the broker tests' in-memory store keeps the same contract
        memory = MemoryStore()
        memory.start()
        return Subject(memory, mode, lambda: None)
    store = make_journaled()
    if mode == "journaled":
        return Subject(store, mode, lambda: None)

    def settle() -> None:
        store.checkpoint()

    return Subject(store, mode, settle)


def add_expired(s: Subject, messages: list[NewMessage]) -> None:
    """Store ``messages``; in "mixed" mode the even ones checkpointed, the odd ones not."""
    if s.mode != "mixed":
        s.store.add(messages)
        s.settle()
        return
    s.store.add(messages[0::2])
    s.settle()
    s.store.add(messages[1::2])


def drain(store: Store, max_bytes: int, *, remove: bool) -> list[list[StoredMessage]]:
    """Every call's rows until one returns none (``remove=False``: each call's rows are then
    removed, as the broker's sweep dead-letters them)."""
    calls: list[list[StoredMessage]] = []
    while rows := store.expire(10_000, 100, remove=remove, max_bytes=max_bytes):
        calls.append(rows)
        if not remove:
            for row in rows:
                assert store.remove(row.container, [row.id]) == 1
        assert len(calls) <= 100, "expire keeps returning rows"
    return calls


def body_bytes(rows: list[StoredMessage]) -> int:
    return sum(len(r.msg) for r in rows)


@pytest.mark.parametrize("remove", [True, False])
def test_expired_bodies_past_the_bound_come_back_across_calls_each_once(
    subject: Subject, remove: bool
) -> None:
    # 12 messages of 300 KiB (expirations out of ID order, two equal) under a 1 MiB bound:
    # four per call (each after less than 1 MiB), oldest first, every one exactly once.
    expirations = [900, 100, 500, 300, 300, 1200, 700, 200, 1100, 400, 1000, 600]
    messages = [
        msg(Q if i % 3 else T, i, expiration=e, body=bytes([i]) * (300 * KIB))
        for i, e in enumerate(expirations)
    ]
    add_expired(subject, messages)
    subject.store.add([msg(Q, 99, expiration=50_000), msg(Q, 98)])  # not expired

    calls = drain(subject.store, MIB, remove=remove)

    assert [len(rows) for rows in calls] == [4, 4, 4]
    assert all(body_bytes(rows[:-1]) < MIB for rows in calls)
    returned = [r for rows in calls for r in rows]
    assert sorted(r.msgid_seq or 0 for r in returned) == list(range(12))
    assert [r.expiration for r in returned] == sorted(expirations)
    assert all(r.msg == bytes([r.msgid_seq or 0]) * (300 * KIB) for r in returned)
    assert [r.msgid_seq for r in subject.store.page(Q, None, 10)] == [99, 98]


def test_the_bound_keeps_order_and_limit_of_one_call(subject: Subject) -> None:
    expirations = [400, 100, 300, 200, 500]
    add_expired(
        subject,
        [msg(Q, i, expiration=e, body=b"x" * (100 * KIB)) for i, e in enumerate(expirations)],
    )
    peek = subject.store.expire(10_000, 10, remove=False, max_bytes=250 * KIB)
    assert [r.expiration for r in peek] == [100, 200, 300]
    assert [r.expiration for r in subject.store.expire(10_000, 1, max_bytes=MIB)] == [100]
    unbounded = subject.store.expire(10_000, 10, remove=False, max_bytes=None)
    assert [r.expiration for r in unbounded] == [200, 300, 400, 500]
    assert [r.expiration for r in subject.store.expire(10_000, 3, max_bytes=MIB)] == [200, 300, 400]


def test_a_message_larger_than_the_bound_ends_its_call(subject: Subject) -> None:
    add_expired(
        subject,
        [
            msg(Q, 1, expiration=100, body=b"a" * (2 * MIB)),
            msg(Q, 2, expiration=200, body=b"b" * 100),
            msg(Q, 3, expiration=300, body=b"c" * (3 * MIB)),
            msg(Q, 4, expiration=400, body=b"d" * 100),
        ],
    )
    calls = drain(subject.store, MIB, remove=True)
    # The big ones end a call: nothing comes after 2 MiB, nor after 100 bytes and 3 MiB.
    assert [[r.msgid_seq for r in rows] for rows in calls] == [[1], [2, 3], [4]]
    assert subject.store.count(Q) == 0


def test_the_default_bound_is_64_mib(subject: Subject) -> None:
    body = 33 * MIB  # the third comes after 66 MiB
    add_expired(subject, [msg(Q, i, expiration=100 + i, body=os.urandom(body)) for i in range(3)])
    first = subject.store.expire(10_000, 1000, remove=False)
    assert len(first) == 2
    assert [r.msgid_seq for r in subject.store.expire(10_000, 1000)] == [0, 1]
    assert [r.msgid_seq for r in subject.store.expire(10_000, 1000)] == [2]


def toast_blocks_read(conn: sa.Connection, table: str) -> int:
    """Blocks of ``table``'s TOAST relation read in the current transaction."""
    return int(
        conn.execute(
            sa.text(
                "SELECT pg_stat_get_xact_blocks_fetched(reltoastrelid) FROM pg_class "
                "WHERE oid = CAST(:t AS regclass)"
            ),
            {"t": table},
        ).scalar_one()
    )


def test_bodies_of_rows_past_the_bound_are_not_read(
    make_store: StoreFactory, engine: Engine
) -> None:
    from journal.reads import _expired_sql  # the journaled store's database read

    store = make_store()
    # Incompressible 1 MiB bodies live out of line, about 130 TOAST blocks each.
    store.add([msg(Q, i, expiration=100 + i, body=os.urandom(MIB)) for i in range(8)])
    table = store.schema.msgs.name
    params = {"now": 10_000, "limit": 100, "max_bytes": MIB}
    journal_params = {**params, "excl": [], "purged": []}
    statements = [
        (store.sql.expired, params),
        (_expired_sql(table), journal_params),
        (store.sql.expired, {**params, "max_bytes": NO_BYTE_BOUND}),
    ]
    read = []
    for statement, values in statements:
        with engine.connect() as conn, conn.begin():
            before = toast_blocks_read(conn, table)
            rows = conn.execute(statement, values).all()
            read.append((len(rows), toast_blocks_read(conn, table) - before))
    (one, one_read), (journal_one, journal_read), (all_rows, all_read) = read
    assert (one, journal_one, all_rows) == (1, 1, 8)
    # One body's blocks, not eight bodies': the bound was applied before any body was read.
    assert one_read * 4 < all_read and journal_read * 4 < all_read
