"""A command that only reads, on a table another session has locked (a migration, an
operator's LOCK TABLE): it says so in one line within seconds instead of hanging."""

from __future__ import annotations

import threading

import psycopg
import pytest

from mqstore.db import libpq_dsn
from tests.integration.test_cli import mqstore


@pytest.mark.parametrize("args", [["stats"], ["browse", "orders"], ["db", "check"]], ids="-".join)
def test_a_read_waiting_on_a_locked_table_gives_up_saying_why(dsn: str, args: list[str]) -> None:
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(libpq_dsn(dsn)) as conn:
            conn.execute("LOCK TABLE activemq_msgs IN ACCESS EXCLUSIVE MODE")
            taken.set()
            release.wait(120)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(20)
        result = mqstore(*args, "--dsn", dsn)
    finally:
        release.set()
        holder.join(30)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert "lock timeout" in line and "another session holds a lock on a table" in line, line
