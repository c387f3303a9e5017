"""`mqstore db check` sees an index that keeps its name and columns but no longer serves the
store: another access method, or left invalid by a failed concurrent rebuild."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.db import libpq_dsn


def test_check_reports_an_index_rebuilt_with_another_method(engine: Engine) -> None:
    with engine.begin() as conn:  # a hash index cannot serve the expiry sweep's range scan
        conn.execute(sa.text("DROP INDEX activemq_msgs_eidx"))
        conn.execute(
            sa.text("CREATE INDEX activemq_msgs_eidx ON activemq_msgs USING hash (expiration)")
        )
    assert migrate.check(engine) == [
        "index activemq_msgs_eidx on activemq_msgs uses hash, expected btree"
    ]


def test_check_reports_an_index_a_failed_concurrent_rebuild_left_invalid(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX activemq_msgs_uidx"))
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq) "
                "VALUES (1, 'queue://q', 'ID:p', 1), (2, 'queue://q', 'ID:p', 1)"
            )
        )
    with (
        psycopg.connect(libpq_dsn(engine.url), autocommit=True) as raw,
        pytest.raises(psycopg.errors.UniqueViolation),
    ):
        raw.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY activemq_msgs_uidx "
            "ON activemq_msgs (container, msgid_prod, msgid_seq)"
        )
    assert migrate.check(engine) == [
        "index activemq_msgs_uidx on activemq_msgs is invalid (a CREATE INDEX CONCURRENTLY "
        "or REINDEX that failed): PostgreSQL does not use it; remove what made it fail, "
        "then REINDEX INDEX activemq_msgs_uidx"
    ]
