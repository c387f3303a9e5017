"""A lease master's guard session: one idle, named database session kept open by its own
thread while the lease is held."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from typing import cast

import psycopg
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)


def never_time_out(conn: Connection) -> None:
    """Keep an idle guard session from being ended by the role's or server's
    ``idle_session_timeout`` (PostgreSQL 14+): a standby would take its end for the
    master's death and take over from a live master."""
    version = conn.dialect.server_version_info
    if version is not None and version >= (14,):
        conn.exec_driver_sql("SET idle_session_timeout = 0")


class Guard:
    """A master's guard session, kept by its own thread: the thread waits on the session's
    socket, and when the server ends the session (a restart, a dropped connection) it opens
    a new one as soon as the database answers again, not at the next renewal."""

    RETRY_S = 0.2

    def __init__(self, engine: Engine, name: str, check_s: float) -> None:
        self.engine, self.name, self.check_s = engine, name, check_s
        self._conn: Connection | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="mqstore-lease-guard", daemon=True)
        self._failing = False

    def adopt(self, conn: Connection) -> None:
        """Make ``conn`` the guard session, named inside the transaction open on it, before
        :meth:`start`. The server shows the name in ``pg_stat_activity`` as the ``SET`` runs,
        before that transaction commits (a rollback takes it back): the lease's acquiring
        UPDATE commits on this very session, so no session can see the lease taken while
        its guard is not open yet. A guard that is never started is closed with
        :meth:`close`, which drops the session (a named one never goes back to the pool)."""
        self._conn = conn
        conn.exec_driver_sql(f"SET application_name = '{self.name}'")
        never_time_out(conn)

    def start(self) -> None:
        if self._conn is None:
            self._open()  # at once, so a standby sees the guard as soon as it sees the lease
        self._thread.start()

    def close(self, wait: bool = True) -> None:
        """Stop the thread, which closes the session (``wait``: before this returns)."""
        self._stop.set()
        if self._thread.ident is None:  # never started
            self._drop()
            self._wake_r.close()
            self._wake_w.close()
            return
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if wait and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _open(self) -> bool:
        conn: Connection | None = None
        try:
            conn = self.engine.connect()
            conn.exec_driver_sql(f"SET application_name = '{self.name}'")
            never_time_out(conn)
            conn.commit()
        except SQLAlchemyError as exc:
            if conn is not None:
                with contextlib.suppress(SQLAlchemyError):
                    conn.invalidate()
                    conn.close()
            if not self._failing:
                log.warning(
                    "could not open the lease guard session (retrying): %s",
                    str(exc).splitlines()[0],
                )
            self._failing = True
            return False
        if self._failing:
            log.info("lease guard session open again")
        self._failing = False
        self._conn = conn
        return True

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError):
                conn.invalidate()  # never hand a named session back to the pool
                conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._conn is None and not self._open():
                    self._stop.wait(self.RETRY_S)
                elif not self._check():
                    log.warning(
                        "the lease guard session ended; reopening it as soon as the "
                        "database answers"
                    )
                    self._failing = True  # log its reopening
                    self._drop()
                    self._stop.wait(self.RETRY_S)
        finally:
            self._drop()
            self._wake_r.close()
            self._wake_w.close()

    def _check(self) -> bool:
        """Wait until the server sends something on the session (it ends it), ``check_s``
        passes or the guard is closed; False when the session is found ended."""
        conn = self._conn
        assert conn is not None
        try:
            raw = cast(psycopg.Connection[object], conn.connection.dbapi_connection)
            with selectors.DefaultSelector() as sockets:  # no FD_SETSIZE limit, unlike select()
                sockets.register(raw.fileno(), selectors.EVENT_READ)
                sockets.register(self._wake_r, selectors.EVENT_READ)
                sockets.select(self.check_s)
        except (OSError, ValueError, SQLAlchemyError, psycopg.Error):
            return False  # no socket any more
        if self._stop.is_set():
            return True
        try:
            conn.exec_driver_sql("SELECT 1")
            conn.commit()
        except SQLAlchemyError:
            return False
        return True
