"""Alembic's own command line, as an operator may run it beside mqstore's: `alembic stamp`
refuses ActiveMQ's tables not taken over yet (recording a revision on them would make them
look migrated, and `mqstore db adopt` would then refuse them as managed already), while
`alembic stamp base` (which undoes a stamp) goes ahead; and a server that accepts the
connection but never answers ends the run with one line instead of hanging it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from tests.conftest import load_activemq_fixture
from tests.integration.test_cli import mqstore
from tests.migrations.alembic_cli import alembic


def test_alembic_stamp_refuses_activemq_tables_not_adopted_and_says_to_adopt(
    empty_dsn: str, empty_engine: Engine
) -> None:
    load_activemq_fixture(empty_engine)
    stamp = alembic("-x", f"dsn={empty_dsn}", "stamp", "head")
    assert stamp.returncode != 0, (stamp.stdout, stamp.stderr)
    assert "Traceback" not in stamp.stderr
    last = stamp.stderr.strip().splitlines()[-1]
    assert "alembic stamp records a revision and changes no table" in last
    assert "`mqstore db adopt`" in last
    with empty_engine.connect() as conn:
        assert migrate.current_revision(conn) is None
    adopt = mqstore("db", "adopt", "--dsn", empty_dsn)
    assert adopt.returncode == 0, adopt.stderr


def test_alembic_stamp_base_undoes_a_stamp_and_db_adopt_records_the_revision_again(
    dsn: str, engine: Engine
) -> None:
    head = migrate.head_revision()
    assert alembic("-x", f"dsn={dsn}", "stamp", head).returncode == 0  # managed: as it was
    assert alembic("-x", f"dsn={dsn}", "stamp", "base").returncode == 0
    with engine.connect() as conn:
        assert migrate.current_revision(conn) is None
    stamp = alembic("-x", f"dsn={dsn}", "stamp", head)  # guessed: adopt finds the match
    assert stamp.returncode != 0
    assert "`mqstore db adopt`" in stamp.stderr.strip().splitlines()[-1]
    adopt = mqstore("db", "adopt", "--dsn", dsn)
    assert adopt.returncode == 0, adopt.stderr
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == head


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung server, or a path that
    drops everything after the handshake)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        listener.close()
        for conn in accepted:
            conn.close()


def test_alembic_on_a_server_that_never_answers_says_so_in_one_line(silent_server: int) -> None:
    """mqstore's connect timeout applies to Alembic's own engine (the run would otherwise
    wait for ever: the test's 120 s limit fails it)."""
    dsn = f"postgresql://mqstore@127.0.0.1:{silent_server}/mqstore"
    result = alembic("-x", f"dsn={dsn}", "upgrade", "head")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{silent_server}" in line, line


def test_alembic_sessions_name_mqstore_in_pg_stat_activity(dsn: str, engine: Engine) -> None:
    """An Alembic run waiting behind a lock on the version table shows as mqstore's."""
    with engine.connect() as holder:
        holder.execute(sa.text("LOCK TABLE mqstore_version IN ACCESS EXCLUSIVE MODE"))
        names: list[str] = []
        done = threading.Event()

        def run() -> None:
            alembic("-x", f"dsn={dsn}", "upgrade", "head")
            done.set()

        thread = threading.Thread(target=run)
        thread.start()
        try:
            with engine.connect() as watcher:
                while not done.is_set() and not names:
                    names = list(
                        watcher.execute(
                            sa.text(
                                "SELECT application_name FROM pg_stat_activity "
                                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                            )
                        ).scalars()
                    )
                    watcher.rollback()  # pg_stat_activity is read once per transaction
                    done.wait(0.05)
        finally:
            holder.rollback()
            thread.join(timeout=120)
    assert names == ["mqstore"]
