"""`db downgrade` refusals, before any table is dropped or made: while a broker holds
ACTIVEMQ_LOCK's row lock (mqstore's ``--lock row``, ActiveMQ's default database locker) or
its master lease (``--lock lease``), and for a prefix that has no schema."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mqstore import migrate
from mqstore.errors import SchemaError, SchemaVersionError
from tests.conftest import REPO
from tests.migrations.alembic_cli import alembic

ALL_TABLES = {
    "activemq_msgs",
    "activemq_acks",
    "activemq_lock",
    "mqstore_journal",
    "mqstore_history",
    "mqstore_version",
}


@pytest.fixture
def row_lock_holder(engine: Engine) -> Iterator[Connection]:
    """A session holding the lock row as a live master does: SELECT ... FOR UPDATE in a
    transaction left open."""
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR UPDATE"))
        yield conn
        conn.rollback()


@pytest.fixture
def live_lease(engine: Engine) -> None:
    """The lock row as a ``--lock lease`` master leaves it: its name, a lease a minute ahead."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'live-one', time = :t"),
            {"t": int(time.time() * 1000) + 60_000},
        )


def test_downgrade_refuses_while_a_broker_holds_the_lease(engine: Engine, live_lease: None) -> None:
    with pytest.raises(SchemaError, match=r"held by live-one .*stop that broker first"):
        migrate.downgrade(engine, revision="0001")
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES
    migrate.downgrade(engine, revision="0001", force=True)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0001"


def test_alembic_cli_downgrade_refuses_a_live_lease_unless_forced(
    dsn: str, engine: Engine, live_lease: None
) -> None:
    refused = alembic("-x", f"dsn={dsn}", "downgrade", "base")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert "held by live-one" in last and "-x force=true" in last
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES
    forced = alembic("-x", f"dsn={dsn}", "-x", "force=true", "downgrade", "base")
    assert forced.returncode == 0, forced.stderr
    assert set(sa.inspect(engine).get_table_names()) == {"mqstore_version"}


def test_downgrade_refuses_while_a_broker_holds_the_row_lock(
    engine: Engine, row_lock_holder: Connection
) -> None:
    with pytest.raises(SchemaError, match=r"locked by a running broker.*stop that broker"):
        migrate.downgrade(engine, revision="0001")
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()


def test_cli_downgrade_refuses_it_even_with_force(
    dsn: str, engine: Engine, row_lock_holder: Connection
) -> None:
    args = ["db", "downgrade", "0001", "--yes", "--force", "--dsn", dsn]
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout
    assert "locked by a running broker" in result.stderr
    assert "Traceback" not in result.stderr
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES


def test_alembic_cli_downgrade_refuses_it_too(
    dsn: str, engine: Engine, row_lock_holder: Connection
) -> None:
    result = alembic("-x", f"dsn={dsn}", "downgrade", "0001")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "locked by a running broker" in result.stderr.strip().splitlines()[-1]
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES


def test_downgrade_of_a_prefix_with_no_schema_says_so_and_creates_nothing(engine: Engine) -> None:
    with pytest.raises(SchemaVersionError, match=r"nothing to downgrade: .* prefix 'NOPE_'"):
        migrate.downgrade(engine, "NOPE_")
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES


def test_alembic_cli_downgrade_of_a_prefix_with_no_schema_creates_nothing(
    dsn: str, engine: Engine
) -> None:
    result = alembic("-x", f"dsn={dsn}", "-x", "prefix=NOPE_", "downgrade", "base")
    assert result.returncode != 0
    assert "nothing to downgrade" in result.stderr.strip().splitlines()[-1]
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES


@pytest.fixture
def journal_left_running(engine: Engine) -> None:
    """A journal whose broker died (no STOPPED_AT) beside one stopped cleanly."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO mqstore_journal (journal_id, segment, position, broker_name, "
                "updated_at, stopped_at) VALUES ('j-died', 3, 128, 'b1', 1, NULL), "
                "('j-stopped', 1, 0, 'b2', 1, 2)"
            )
        )


def test_downgrade_below_0003_refuses_while_a_journal_has_no_clean_stop(
    dsn: str, engine: Engine, journal_left_running: None
) -> None:
    """Going down and up again would count the died journal as stopped: a broker starting
    on another journal would no longer refuse to, and its uncheckpointed writes be lost."""
    with pytest.raises(SchemaError, match=r"journal j-died has no clean stop .* --yes`"):
        migrate.downgrade(engine, revision="0002")
    refused = alembic("-x", f"dsn={dsn}", "downgrade", "base")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "journal j-died has no clean stop" in refused.stderr.strip().splitlines()[-1]
    assert set(sa.inspect(engine).get_table_names()) == ALL_TABLES
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()

    forget = [sys.executable, "-m", "mqstore", "journal", "forget", "j-died", "--yes"]
    done = subprocess.run(
        [*forget, "--dsn", dsn], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    migrate.downgrade(engine, revision="0002")
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0002"
