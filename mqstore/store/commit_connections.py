"""Autocommit connections kept open for the store's one-statement commits.

A commit is one autocommitted statement (docs/store-api.md). Checking a connection out of
SQLAlchemy's pool for it, switching it to autocommit and back, and resetting it on return
cost about as much client CPU as the statement itself; a single-message commit, which is
what a producer waiting for each receipt pays, is then twice as dear. These connections
stay checked out and in autocommit, and run with custom plans (see :data:`SESSION_SQL`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection, Engine

log = logging.getLogger(__name__)

#: Plan every execution for its own parameters. PostgreSQL would otherwise switch a
#: one-row commit statement to a generic plan after five executions, and a generic plan
#: made while ACTIVEMQ_MSGS is empty (or not yet analyzed) deletes by scanning the table,
#: and keeps doing so however large it grows, until the next ANALYZE.
SESSION_SQL = "SET plan_cache_mode = force_custom_plan"
RESET_SQL = "RESET plan_cache_mode"


class CommitConnections:
    """Up to ``keep`` idle autocommit connections, handed to one committer at a time.

    More concurrent committers than ``keep`` get connections of their own, given back after
    use. A connection whose statement failed is given back rather than kept (SQLAlchemy
    discards it from the pool if the failure was a lost connection), so a database restart
    costs one failed commit per kept connection, not a failure per commit.
    """

    def __init__(self, engine: Engine, keep: int = 2) -> None:
        self.engine = engine
        self.keep = keep
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """An autocommit connection for one commit statement."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        except BaseException:
            self._release(conn)
            raise
        with self._lock:
            if not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        self._release(conn)

    def close(self) -> None:
        """Return every idle connection to the pool (connections in use follow when done)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self._release(conn)

    def reopen(self) -> None:
        """Keep connections again after :meth:`close` (a store started anew)."""
        with self._lock:
            self._closed = False

    def _open(self) -> Connection:
        conn = self.engine.connect()
        try:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(SESSION_SQL)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _release(conn: Connection) -> None:
        """Back to the pool as other users expect it: default plan caching, no autocommit."""
        try:
            conn.exec_driver_sql(RESET_SQL)
        except Exception:  # a dead connection: the pool discards it on close
            log.debug("could not reset a commit connection before returning it", exc_info=True)
        conn.close()
