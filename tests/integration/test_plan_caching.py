"""Store connections plan each read for its parameters, so a destination that grows after
a statement was first run is still read by index.

psycopg prepares a statement on the server once a connection has run it five times, and
PostgreSQL then switches a prepared statement to one generic plan when that looks no
dearer than planning each execution. Made while ACTIVEMQ_MSGS was empty, that plan reads
a page by sorting the whole table, and keeps doing so as the table grows, until the next
ANALYZE. Pooled connections live as long as the broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.db import create_engine
from mqstore.statements import statements_for
from tests.conftest import Databases

SQL = statements_for("")
GROWTH = 100_000


@pytest.fixture
def conn(databases: Databases) -> Iterator[Connection]:
    """One connection of a store engine, on a migrated database whose tables are analyzed empty."""
    name = databases.create(template=databases.migrated_template())
    engine = create_engine(databases.dsn_for(name))
    with engine.connect() as c:
        c.execute(sa.text("ANALYZE activemq_msgs"))
        c.commit()
        yield c
    engine.dispose()


def _seq_scans(conn: Connection) -> int:
    """Sequential scans of ACTIVEMQ_MSGS by this connection in its current transaction."""
    return int(
        conn.execute(
            sa.text("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'activemq_msgs'")
        ).scalar_one()
    )


def test_a_page_read_after_the_queue_grew_is_an_index_scan(conn: Connection) -> None:
    page = {
        "container": "queue://q",
        "bound": 2**63 - 1,
        "neg_priority": -4,
        "limit": 100,
        "max_bytes": 1 << 20,
    }
    for after in range(1_000, 1_020):  # a consumer paging an empty queue, many times over
        assert conn.execute(SQL.page_queue, {**page, "after_id": after}).all() == []
    conn.commit()
    conn.execute(
        sa.text(
            "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
            "priority, msg) SELECT g, 'queue://q', 'ID:p-1:1:1', g, 0, 4, '\\x00'::bytea "
            "FROM generate_series(1, :n) g"
        ),
        {"n": GROWTH},
    )
    before = _seq_scans(conn)
    rows = conn.execute(SQL.page_queue, {**page, "after_id": 1_000}).all()
    assert [r.id for r in rows] == list(range(1_001, 1_101))
    assert _seq_scans(conn) == before, "the page was read by scanning the whole table"
