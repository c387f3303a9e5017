"""Tables mqstore made whose version table was lost (dropped or emptied): `db check` and
`db upgrade` say to run `db adopt`, which records the revision the tables match (from
mqstore's own tables, which ActiveMQ never makes) and keeps every row; when they match none,
it names what differs and changes nothing; while a broker holds the lease it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate, takeover
from mqstore.errors import SchemaError
from tests.conftest import REPO


def _mqstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _fill(engine: Engine) -> None:
    """Rows in every table: two messages, a subscription, a journal, a history record."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, msg, priority) "
                "VALUES (1, 'queue://kept', 'ID:p', 1, 'a', 4), (2, 'queue://kept', 'ID:p', 2, "
                "'b', 4)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, client_id, sub_name, last_acked_id, "
                "priority) VALUES ('topic://t', 'c1', 's1', 0, 5)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO mqstore_journal (journal_id, segment, position, broker_name, "
                "updated_at, stopped_at) VALUES ('j1', 2, 64, 'b1', 1, 2)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO mqstore_history (id, container, removed_at, outcome) "
                "VALUES (9, 'queue://kept', 1, 'acked')"
            )
        )


def _rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table: int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("activemq_msgs", "activemq_acks", "mqstore_journal", "mqstore_history")
        }


def _revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return migrate.current_revision(conn)


def _lose_version_table(engine: Engine, how: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"{how} mqstore_version"))


@pytest.mark.parametrize("how", ["DROP TABLE", "DELETE FROM"])
def test_adopt_records_the_revision_of_tables_whose_version_table_was_lost(
    dsn: str, engine: Engine, how: str
) -> None:
    _fill(engine)
    _lose_version_table(engine, how)
    checked = _mqstore("db", "check", "--dsn", dsn)
    assert checked.returncode == 1
    said = " ".join(checked.stderr.split())
    assert "mqstore_journal, mqstore_history" in said and "run `mqstore db adopt`" in said
    assert "ActiveMQ made it" not in said
    with pytest.raises(SchemaError, match=r"records no revision .*`mqstore db adopt`"):
        migrate.upgrade(engine)
    adopted = _mqstore("db", "adopt", "--dsn", dsn)
    assert adopted.returncode == 0, adopted.stderr
    head = migrate.head_revision()
    out = " ".join(adopted.stdout.split())
    assert f"the tables match revision {head}: recorded revision {head}; every row kept" in out
    assert _revision(engine) == head
    assert _rows(engine) == {
        "activemq_msgs": 2,
        "activemq_acks": 1,
        "mqstore_journal": 1,
        "mqstore_history": 1,
    }
    assert _mqstore("db", "check", "--dsn", dsn).returncode == 0


def test_adopt_records_an_older_revision_and_upgrades_from_it(engine: Engine) -> None:
    _fill(engine)
    migrate.downgrade(engine, revision="0002")
    _lose_version_table(engine, "DROP TABLE")
    report = takeover.adopt(engine)
    head = migrate.head_revision()
    said = " ".join(report.actions)
    assert f"match revision 0002: recorded revision 0002, then upgraded them to {head}" in said
    assert _revision(engine) == head
    assert _rows(engine)["activemq_msgs"] == 2
    assert migrate.check(engine) == []


def test_adopt_names_what_differs_when_the_tables_match_no_revision(
    dsn: str, engine: Engine
) -> None:
    _fill(engine)
    _lose_version_table(engine, "DROP TABLE")
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX mqstore_history_ridx"))
    adopted = _mqstore("db", "adopt", "--dsn", dsn)
    assert adopted.returncode != 0
    assert "Traceback" not in adopted.stderr
    said = " ".join(adopted.stderr.split())
    assert "index mqstore_history_ridx on mqstore_history is missing" in said
    assert "nothing was changed" in said and "then run `mqstore db adopt` again" in said
    assert "mqstore_version" not in set(sa.inspect(engine).get_table_names())


def test_adopt_of_a_lost_version_table_refuses_while_a_broker_holds_the_lease(
    engine: Engine,
) -> None:
    _lose_version_table(engine, "DROP TABLE")
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'live-one', time = :t"),
            {"t": int(time.time() * 1000) + 60_000},
        )
    with pytest.raises(SchemaError, match=r"held by live-one .*stop that broker first"):
        takeover.adopt(engine)
    assert _revision(engine) is None
