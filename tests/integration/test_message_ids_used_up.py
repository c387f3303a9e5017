"""IDs at the end of BIGINT: a row written by another program with an ID near 2^63 leaves
no ID for the next message. The add is refused in words, before anything is written (the
journal too, whose records could never be applied), and what is stored stays."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import StoreError
from mqstore.store import Batch, Store
from tests.integration.conftest import StoreFactory, msg

Q = "queue://ids"
LONG_MAX = 2**63 - 1


def row_at(engine: Engine, id_: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration,"
                " msg, priority) VALUES (:id, :c, 'ID:other-1-2-3:1:1', 1, 0, NULL, 0)"
            ),
            {"id": id_, "c": Q},
        )


def stored_ids(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT id FROM activemq_msgs ORDER BY id")).scalars())


def check_used_up(store: Store, engine: Engine, write: Callable[[], object]) -> None:
    with pytest.raises(StoreError, match="message IDs are used up") as info:
        write()
    assert str(LONG_MAX - 1) in str(info.value) and "max(id)" in str(info.value)
    assert [m.id for m in store.page(Q, None, 10)] == [LONG_MAX - 1]


def test_an_add_past_the_last_bigint_is_refused_and_nothing_written(
    make_store: StoreFactory, engine: Engine
) -> None:
    row_at(engine, LONG_MAX - 1)
    store = make_store()
    check_used_up(store, engine, lambda: store.add([msg(Q, 2), msg(Q, 3)]))
    check_used_up(store, engine, lambda: store.commit(Batch(adds=[msg(Q, 4), msg(Q, 5)])))
    assert store.add([msg(Q, 6)]) == [LONG_MAX]  # the last ID is still given
    assert stored_ids(engine) == [LONG_MAX - 1, LONG_MAX]
