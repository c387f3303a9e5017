"""The journaled store while its database refuses connections: what it can still accept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from mqstore.errors import MqstoreError
from tests.conftest import Databases, count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


@contextmanager
def database_away(engine: Engine, databases: Databases) -> Iterator[None]:
    """The test database refuses new connections and its sessions are ended, then returns."""
    name = engine.url.database
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (name,))  # fmt: skip
        try:
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )


def test_its_own_new_producers_can_send_while_the_database_is_away(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases
) -> None:
    store = make_journaled(checkpoint_interval_ms=50)
    store.new_producers("ID:this-broker-")
    with database_away(engine, databases):
        ids = store.add([msg(Q, 1, producer="ID:this-broker-7:1:1")])
        with pytest.raises(MqstoreError):  # any other producer may have stored before
            store.add([msg(Q, 1, producer="ID:someone-else:1:1")])
    store.checkpoint()
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT id, msgid_prod FROM activemq_msgs")).all()
    assert stored == [(ids[0], "ID:this-broker-7:1:1")]
    assert count_rows(engine, "activemq_msgs") == 1
