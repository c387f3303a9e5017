"""A private PostgreSQL cluster that a test may stop, restart or crash under ``mqstore serve``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from mqstore import migrate
from mqstore.db import create_engine, libpq_dsn
from tests.conftest import ThrowawayServer


@dataclass
class PrivatePostgres:
    """A throwaway cluster of this test alone, its ``postgres`` database migrated to head."""

    server: ThrowawayServer

    @property
    def dsn(self) -> str:
        return self.server.dsn

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of ``sql`` on a new session (sessions do not outlive a restart)."""
        with psycopg.connect(libpq_dsn(self.dsn), autocommit=True, connect_timeout=5) as conn:
            return list(conn.execute(sql, params).fetchall())  # type: ignore[arg-type]


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    server = ThrowawayServer()
    try:
        engine = create_engine(server.dsn)
        migrate.upgrade(engine)
        engine.dispose()
        yield PrivatePostgres(server)
    finally:
        server.close()
