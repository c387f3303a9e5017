"""Two migrations of one database at the same moment (two brokers or operators starting
together): the second waits for the first, then finds the work done.

Each migration runs in its own process, as two brokers do (Alembic's ``context`` and ``op``
are process-wide). The first is held mid-transaction, just before one of its statements,
until the second is seen waiting on a lock in PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.db import create_engine
from tests.conftest import REPO, count_rows, load_activemq_fixture

#: Only a guard against a hung test: every wait below normally ends in well under a second.
HANG_GUARD_S = 120.0

#: Runs ``<argv[2]>(engine)`` (``upgrade`` from migrate, ``adopt`` from takeover); with
#: argv[3], holds before the first statement that starts with it: prints "held", waits for
#: a line on stdin. Prints "ok" or the error.
_CHILD = """
import sys, sqlalchemy as sa
from mqstore import migrate, takeover
from mqstore.db import create_engine
engine = create_engine(sys.argv[1])
if len(sys.argv) > 3:
    held = []
    @sa.event.listens_for(engine, "before_cursor_execute")
    def hold(conn, cursor, statement, *rest):
        if statement.lstrip().startswith(sys.argv[3]) and not held:
            held.append(1)
            print("held", flush=True)
            sys.stdin.readline()
try:
    getattr(takeover if sys.argv[2] == "adopt" else migrate, sys.argv[2])(engine)
    print("ok", flush=True)
except Exception as exc:
    print(f"error {type(exc).__name__}: {exc}".splitlines()[0], flush=True)
"""


def _start(dsn: str, operation: str, hold_before: str | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", _CHILD, dsn, operation, *([hold_before] if hold_before else [])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        args, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=HANG_GUARD_S)
    return out.strip().splitlines()[-1]


def _wait_until_blocked(observer: Engine) -> None:
    """Until a session of this database waits on a lock (the second migration)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        with observer.connect() as conn:
            if conn.execute(query).scalar_one() > 0:
                return
        time.sleep(0.02)
    raise AssertionError("the second migration never reached the first one's lock")


def _race(dsn: str, observer: Engine, operation: str, hold_before: str) -> tuple[str, str]:
    """The first ``operation`` held before ``hold_before``, a second started meanwhile."""
    first = _start(dsn, operation, hold_before)
    assert first.stdout is not None and first.stdin is not None
    assert first.stdout.readline().strip() == "held"
    second = _start(dsn, operation)
    try:
        _wait_until_blocked(observer)
    finally:
        first.stdin.write("go\n")
        first.stdin.flush()
    return _result(first), _result(second)


@pytest.fixture
def observer(empty_dsn: str) -> Iterator[Engine]:
    engine = create_engine(empty_dsn)
    yield engine
    engine.dispose()


def test_two_upgrades_at_once_on_an_empty_database_both_succeed(
    empty_dsn: str, observer: Engine
) -> None:
    first, second = _race(empty_dsn, observer, "upgrade", "CREATE TABLE activemq_msgs")
    assert (first, second) == ("ok", "ok")
    assert migrate.check(observer) == []


def test_two_adopts_at_once_one_adopts_the_other_says_it_is_done(
    empty_dsn: str, observer: Engine
) -> None:
    load_activemq_fixture(observer)
    first, second = _race(empty_dsn, observer, "adopt", "CREATE TABLE mqstore_version")
    assert first == "ok"
    assert second.startswith("error SchemaError: this database is already managed by mqstore")
    assert migrate.check(observer) == []
    assert count_rows(observer, "activemq_msgs") == 17
