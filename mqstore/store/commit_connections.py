"""Autocommit connections kept open for the store's one-statement commits.

A commit is one autocommitted statement (docs/store-api.md). Checking a connection out of
SQLAlchemy's pool for it, switching it to autocommit and back, resetting it on return, and
building SQLAlchemy's execution context and result around the statement cost more client
CPU than the statement itself; a single-message commit, which is what a producer waiting
for each receipt pays, was twice as dear for it. Here the connections stay checked out of
the pool, in autocommit, each with one psycopg cursor; each statement is prepared (parsed
once per connection) and still planned for its parameters every time (see
:data:`SESSION_SQL`). Driver errors come out as SQLAlchemy's, as from any other statement.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

#: Plan every execution for its own parameters. PostgreSQL would otherwise switch a
#: one-row commit statement to a generic plan after five executions, and a generic plan
#: made while ACTIVEMQ_MSGS is empty (or not yet analyzed) deletes by scanning the table,
#: and keeps doing so however large it grows, until the next ANALYZE.
SESSION_SQL = "SET plan_cache_mode = force_custom_plan"
RESET_SQL = "RESET plan_cache_mode"


@dataclass(slots=True)
class _Kept:
    conn: Connection
    driver: psycopg.Connection[Any]
    cursor: psycopg.Cursor[Any]


class CommitConnections:
    """Up to ``keep`` idle autocommit connections; each statement takes one for its run.

    More concurrent statements than ``keep`` get connections of their own, given back
    after use. A connection whose statement failed is given back rather than kept
    (discarded from the pool when the failure was a lost connection), so a database
    restart costs one failed commit per kept connection; a dropped connection taken from
    the pool is replaced before the statement is sent.
    """

    def __init__(self, engine: Engine, keep: int = 2) -> None:
        self.engine = engine
        self.keep = keep
        self._idle: list[_Kept] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, sql: str, params: Mapping[str, object]) -> tuple[Any, ...] | None:
        """Run ``sql`` (psycopg's ``%(name)s`` style) in autocommit; its first row (None if empty).

        Raises SQLAlchemy's :class:`DBAPIError` subclasses (``IntegrityError``,
        ``OperationalError``, ...) without the parameters, which hold message bodies.
        """
        kept = self._take()
        try:
            kept.cursor.execute(sql, params, prepare=True)
            row = kept.cursor.fetchone()
        except psycopg.Error as exc:
            lost = self.engine.dialect.is_disconnect(cast(Any, exc), kept.conn.connection, None)
            self._give_back(kept, lost)
            raise DBAPIError.instance(
                sql,
                None,
                exc,
                psycopg.Error,
                hide_parameters=True,
                connection_invalidated=lost,
                dialect=self.engine.dialect,
            ) from exc
        except BaseException:
            self._give_back(kept, lost=False)
            raise
        with self._lock:
            if not self._closed and len(self._idle) < self.keep:
                self._idle.append(kept)
                return row
        self._give_back(kept, lost=False)
        return row

    def close(self) -> None:
        """Give every idle connection back to the pool (ones in use follow when done)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for kept in idle:
            self._give_back(kept, lost=False)

    def reopen(self) -> None:
        """Keep connections again after :meth:`close` (a store started anew)."""
        with self._lock:
            self._closed = False

    def _take(self) -> _Kept:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return self._open()
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            # A pooled connection the database dropped (a restart): SQLAlchemy has
            # invalidated the pool, and nothing of the commit was sent; take a fresh one.
            return self._open()

    def _open(self) -> _Kept:
        conn = self.engine.connect()
        try:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(SESSION_SQL)
            driver: psycopg.Connection[Any] = conn.connection.driver_connection  # type: ignore[assignment]
            # The engine's connections never prepare (mqstore.db.create_engine); these do,
            # each statement at its first run, planned per execution all the same.
            driver.prepare_threshold = 0
            return _Kept(conn, driver, driver.cursor())
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _give_back(kept: _Kept, lost: bool) -> None:
        """Back to the pool as its other users expect it (default plan caching; SQLAlchemy
        ends autocommit), or out of it when the connection is lost or cannot be reset."""
        if not lost:
            try:
                kept.cursor.close()
                kept.driver.prepare_threshold = None
                kept.driver.execute(RESET_SQL)
            except psycopg.Error:
                log.debug("a commit connection could not be reset; discarding it", exc_info=True)
                lost = True
        if lost:
            kept.conn.invalidate()
        kept.conn.close()
