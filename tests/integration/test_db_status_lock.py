"""`mqstore db status` says who holds the lock as `lock status` does."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.integration.test_cli import mqstore


def test_db_status_shows_a_row_lock_master(dsn: str, engine: Engine) -> None:
    """A row-lock master writes nothing into the lock row; `db status` still names it as
    holding the lock, and shows it free once that session ends."""
    with engine.connect() as master:
        master.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR NO KEY UPDATE"))
        held = mqstore("db", "status", "--dsn", dsn)
    assert held.returncode == 0, held.stderr
    assert "row-lock master" in " ".join(held.stdout.split()), held.stdout
    free = mqstore("db", "status", "--dsn", dsn)
    assert free.returncode == 0, free.stderr
    assert "free" in free.stdout and "row-lock master" not in free.stdout, free.stdout
