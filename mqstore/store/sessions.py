"""Database sessions of the PostgreSQL store: fenced write transactions and reads, with
driver and database failures turned into store errors that say what to do."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from mqstore.db import describe_connect_error, sqlstate
from mqstore.errors import (
    CommitOutcomeUnknownError,
    DatabaseUnavailableError,
    DuplicateMessageError,
    InvalidMessageError,
    LeaseNotRenewedError,
    LockLostError,
    StoreClosedError,
    StoreError,
)
from mqstore.lock import Locker
from mqstore.statements import Statements
from mqstore.store.sequence import IdSequence

#: Every part of the PostgreSQL store logs to this one logger, the name operators configure.
log = logging.getLogger("mqstore.store.postgres")
T = TypeVar("T")

#: SQLSTATE of a unique (or primary key) violation.
UNIQUE_VIOLATION = "23505"


def _refused_value(exc: DataError | UnicodeEncodeError, done: str) -> InvalidMessageError:
    """The store error for a value PostgreSQL cannot take (a NUL character, a lone
    surrogate, an integer past BIGINT) in a call that does not check every value first."""
    if isinstance(exc, UnicodeEncodeError):
        detail = f"{exc.reason} in {exc.object[:40]!r}, which UTF-8 cannot encode"
    else:
        detail = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    return InvalidMessageError(
        f"PostgreSQL cannot take a value of this call ({detail}): correct the value; {done}"
    )


def _pool_exhausted(engine: Engine, done: str) -> DatabaseUnavailableError:
    """The store error for a call that waited the pool's timeout for a connection."""
    pool = engine.pool
    timeout = pool.timeout() if isinstance(pool, sa.QueuePool) else "its"
    return DatabaseUnavailableError(
        f"no database connection of the engine's pool came free in {timeout} s: every one is "
        "in use (a slow database, or more threads than connections); size the pool for the "
        f"threads calling the store, plus the store's own (docs/store-api.md); {done}"
    )


@contextmanager
def driver_refusals(engine: Engine, done: str, pool_done: str | None = None) -> Iterator[None]:
    """A value PostgreSQL refuses, and a pool with no connection free, as store errors
    saying ``done`` (``pool_done`` for the pool, when it differs)."""
    try:
        yield
    except (DataError, UnicodeEncodeError) as exc:
        raise _refused_value(exc, done) from None
    except PoolTimeoutError:
        raise _pool_exhausted(engine, pool_done or done) from None


class StoreSessions(IdSequence):
    """Fenced transactions and reads of a
    :class:`mqstore.store.postgres.PostgresStore` (whose constructor sets the state)."""

    engine: Engine
    sql: Statements
    locker: Locker

    def check_writable(self) -> None:
        """Raise unless started and holding the master lock."""
        if not self._started:
            raise StoreClosedError("the store is not started (call start() first)")
        if not self.locker.is_held():
            lost = self.locker.lost_reason
            if lost or self._lock_lost:
                raise LockLostError(
                    f"this store no longer holds the master lock on {self.schema.lock.name}"
                    f"{f' ({lost})' if lost else ''}; it stopped writing. Restart it to wait "
                    "as a slave."
                )
            raise LeaseNotRenewedError(
                f"this store cannot renew its lease on {self.schema.lock.name}: the database "
                "did not answer before the lease ran out, so writes are refused until a "
                "renewal gets through (it keeps the lease if no other broker took it)"
            )

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A fenced write transaction; database failures become store errors (a connection
        lost while its COMMIT was under way leaves the outcome unknown, and says so)."""
        self.check_writable()
        committing = False
        try:
            with (
                driver_refusals(self.engine, "nothing of this operation was committed"),
                self.engine.begin() as conn,
            ):
                # A lock a database session holds (the row lock) is fenced first: a standby's
                # FOR UPDATE, once that session ends, waits for the writes past the fence. A
                # lease is fenced last, just before the COMMIT, so the row is held for share
                # only from there and the master's own renewals never queue behind a
                # transaction waiting on the database (a table another session locked, a slow
                # disk); a takeover meanwhile fails the fence and everything rolls back.
                session_lock = self.locker.fence_session is not None
                if session_lock:
                    self.locker.fence(conn)
                yield conn
                if not session_lock:
                    self.locker.fence(conn)
                # The lease may have run out (and been taken) while this transaction ran:
                # then roll back rather than commit beside the new master.
                self.check_writable()
                committing = True
        except IntegrityError as exc:
            self.check_writable()  # deposed meanwhile: a new master's rows, not a bad write
            mapped = self._write_failed(exc)
            if mapped is exc:
                raise
            raise mapped from None
        except OperationalError as exc:
            unknown = committing and exc.connection_invalidated
            error = CommitOutcomeUnknownError if unknown else DatabaseUnavailableError
            raise error(
                describe_connect_error(exc, self.engine.url)
                + (
                    "; the connection ended during the COMMIT: this operation may or may not "
                    "have been committed"
                    if unknown
                    else "; nothing of this operation was committed"
                )
            ) from None

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on a pooled connection; a lost database, or a value PostgreSQL cannot
        take, becomes a store error."""
        try:
            with (
                driver_refusals(self.engine, "nothing was read", "run it again"),
                self.engine.connect() as conn,
            ):
                return fn(conn)
        except OperationalError as exc:
            raise DatabaseUnavailableError(describe_connect_error(exc, self.engine.url)) from None

    @staticmethod
    def _duplicate(exc: IntegrityError) -> Exception:
        """The store error for a failed INSERT: a duplicate JMS message id, or ``exc`` itself."""
        if "_uidx" in str(exc.orig):
            return DuplicateMessageError(
                "a message with the same JMS message id is already stored in that "
                f"destination ({str(exc.orig).splitlines()[-1].strip()}); nothing was added"
            )
        return exc

    def _write_failed(self, exc: IntegrityError) -> Exception:
        """:meth:`_duplicate`, or for a message ID already stored :meth:`_id_taken`. Called
        once the write's connection is given back (the latter reads the table)."""
        mapped = self._duplicate(exc)
        table = getattr(getattr(exc.orig, "diag", None), "table_name", None)
        if mapped is exc and sqlstate(exc) == UNIQUE_VIOLATION and table == self.schema.msgs.name:
            return self._id_taken(exc)  # the primary key: MSGS has no other unique index
        return mapped

    def _id_taken(self, exc: IntegrityError) -> StoreError:
        """The store error for a message ID already stored: another writer stored rows under
        IDs this store hands out. The sequence resumes after the table's highest ID (as at
        start), so the next write does not meet the same rows."""
        try:
            with self.engine.connect() as conn:
                self.advance_sequence(int(conn.execute(self.sql.last_sequence).scalar_one()))
        except Exception:  # the error below matters more than the resync
            log.warning("could not resume the ID sequence after the table", exc_info=True)
        detail = (str(exc.orig).strip().splitlines() or [""])[-1].strip()
        return StoreError(
            f"a message ID this store handed out is already stored in {self.schema.msgs.name} "
            f"({detail}): another broker or program writes these tables beside this one (only "
            "the master may write: check that every broker on them uses the same lock); "
            "nothing was written"
        )


__all__ = ["UNIQUE_VIOLATION", "StoreSessions", "driver_refusals"]
