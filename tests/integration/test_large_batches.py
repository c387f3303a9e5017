"""Work larger than one statement can carry: more rows than bind parameters (PostgreSQL
allows 65 535 of them), more bytes than a protocol message (at most 1 GiB)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import DuplicateMessageError
from mqstore.store import Ack, Batch, PostgresStore, Removal, SubscriptionKey, Xid
from mqstore.store import writes as store_writes
from tests.conftest import count_rows
from tests.integration.conftest import StoreFactory, msg

Q = "queue://bulk"
T = "topic://bulk"
#: More rows than PostgreSQL takes bind parameters in one statement.
MANY = 66_000


def _bulk(container: str, first_seq: int = 0) -> list:  # type: ignore[type-arg]
    return [msg(container, first_seq + i, body=b"x") for i in range(MANY)]


def test_an_xa_transaction_of_more_rows_than_bind_parameters_commits(
    store: PostgresStore,
) -> None:
    ids = store.add(_bulk(Q))
    xid = Xid(1, b"bulk-commit", b"")
    store.xa_prepare(xid, Batch(adds=_bulk(Q, MANY), removes=[Removal(Q, i) for i in ids]))
    assert store.count(Q) == 0  # the old rows are held by the transaction, the new unseen

    store.xa_commit(xid)

    assert store.xa_recover() == []
    assert store.count(Q) == MANY
    page = store.page(Q, None, MANY + 1)
    assert [m.msgid_seq for m in page] == list(range(MANY, 2 * MANY))  # in their order
    assert page[0].id > ids[-1]  # moved to fresh IDs, after everything committed before


def test_an_xa_transaction_of_more_rows_than_bind_parameters_rolls_back(
    store: PostgresStore, engine: Engine
) -> None:
    ids = store.add(_bulk(Q))
    xid = Xid(1, b"bulk-rollback", b"")
    store.xa_prepare(xid, Batch(adds=_bulk(Q, MANY), removes=[Removal(Q, i) for i in ids]))

    store.xa_rollback(xid)

    assert store.xa_recover() == []
    assert [m.id for m in store.page(Q, None, MANY + 1)] == ids  # the removals undone
    assert count_rows(engine, "activemq_msgs") == MANY  # the adds gone


def test_cleanup_batches_larger_than_bind_parameters_clean(make_store: StoreFactory) -> None:
    store = make_store(cleanup_batch=MANY + 1)
    key = SubscriptionKey(T, "client", "sub")
    store.add_subscription(key)
    ids = store.add(_bulk(T))
    store.acknowledge([Ack(key, ids[-1])])

    assert store.cleanup() == MANY
    assert store.count(T) == 0


def test_a_batch_of_more_bytes_than_one_statement_carries_commits(
    make_store: StoreFactory, engine: Engine
) -> None:
    body = b"x" * (100 * 1024 * 1024)  # eleven of them: more than PostgreSQL's 1 GiB message
    store = make_store(max_message_bytes=len(body))
    [old] = store.add([msg(Q, 0)])

    ids = store.commit(
        Batch(adds=[msg(Q, i, body=body) for i in range(1, 12)], removes=[Removal(Q, old)])
    )

    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, octet_length(msg) FROM activemq_msgs ORDER BY id")
        ).all()
    assert [tuple(r) for r in rows] == [(i, len(body)) for i in ids]
    assert store.add([msg(Q, 12)]) == [ids[-1] + 1]  # the store goes on


def test_a_batch_written_in_several_statements_is_still_all_or_nothing(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_writes, "STATEMENT_BYTES", 10)
    [taken] = store.add([msg(Q, 3)])
    with pytest.raises(DuplicateMessageError):  # the last statement's row is a duplicate
        store.commit(Batch(adds=[msg(Q, i, body=b"0123456789") for i in (1, 2, 3)], removes=[]))
    [kept] = store.add([msg(Q, 4)])
    key = SubscriptionKey(T, "client", "sub")
    store.add_subscription(key)
    [topic] = store.add([msg(T, 1)])

    ids = store.commit(
        Batch(
            adds=[msg(Q, i, body=b"0123456789") for i in (1, 2)],
            removes=[Removal(Q, taken)],
            acks=[Ack(key, topic)],
        )
    )

    assert [m.id for m in store.page(Q, None, 10)] == [kept, *ids]
    assert store.pending_count(key) == 0
