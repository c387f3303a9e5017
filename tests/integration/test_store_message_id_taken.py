"""A message ID another writer took, found by this store's next write.

Only the master writes ACTIVEMQ_MSGS; with `lock = none` (or a second broker misconfigured
beside it) another writer can store rows under IDs this store's in-memory sequence hands
out next. The write then failed with SQLAlchemy's raw IntegrityError (the SQL statement,
"duplicate key ... activemq_msgs_pkey"), not a store error, and every later write failed the
same way until the sequence had been used past the other writer's IDs. It is a StoreError
that says what happened (nothing written), and the sequence resumes after the table's
highest ID, so the next write goes through.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import MqstoreError, StoreError
from mqstore.store import Batch, PostgresStore, Xid
from tests.integration.conftest import msg

Q = "queue://ids-taken"
OTHER = "queue://written-by-another-broker"


def _foreign_rows(engine: Engine, first_id: int, count: int) -> None:
    """Rows another writer stores under IDs this store has not handed out yet."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "priority, msg) SELECT i, :c, 'ID:other-1:1:1', i, 0, 0, 'x' "
                "FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) AS i"
            ),
            {"c": OTHER, "a": first_id, "b": first_id + count - 1},
        )


@pytest.mark.parametrize("batch_size", [1, 3])
def test_an_id_another_writer_took_is_a_clear_store_error(
    store: PostgresStore, engine: Engine, batch_size: int
) -> None:
    [last] = store.add([msg(Q, 0)])
    _foreign_rows(engine, last + 1, 50)
    with pytest.raises(StoreError, match=r"another broker or program.*nothing was written"):
        store.add([msg(Q, i) for i in range(1, 1 + batch_size)])
    assert store.count(Q) == 1
    # The sequence resumed after the table: the next write is stored, after the other's IDs.
    [again] = store.add([msg(Q, 100)])
    assert again > last + 50
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 100]


def test_an_xa_commit_whose_fresh_id_another_writer_took_is_a_clear_store_error(
    store: PostgresStore, engine: Engine
) -> None:
    xid = Xid(1, b"ids-taken", b"")
    store.xa_prepare(xid, Batch(adds=[msg(Q, 1)]))
    _foreign_rows(engine, store.stats_last_id() + 1, 5)
    with pytest.raises(MqstoreError, match="another broker or program"):
        store.xa_commit(xid)
    assert [p.xid for p in store.xa_recover()] == [xid]  # still prepared: nothing written
    store.xa_commit(xid)
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1]
