"""Guards around a migration: one migration of a prefix at a time, the role's privileges,
a live broker's row lock or lease, and PostgreSQL's refusals a user can fix, each as one
line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mqstore.db import LOCK_NOT_AVAILABLE, sqlstate
from mqstore.errors import SchemaError
from mqstore.lock.lease import guard_name
from mqstore.lock.standby import GuardWatch
from mqstore.lock.status import LockStatus, find_lock
from mqstore.schema import StoreSchema, build_schema, version_table_name


def lock_migrations(conn: Connection, prefix: str = "") -> None:
    """Wait until no other session migrates ``prefix`` in this schema; held to the end of
    ``conn``'s transaction, so two brokers upgrading at once run one after the other and the
    second finds the work done."""
    conn.execute(
        sa.text(
            "SELECT pg_advisory_xact_lock(hashtextextended("
            "'mqstore migrations ' || coalesce(current_schema(), '') || '.' || :table, 0))"
        ),
        {"table": version_table_name(prefix)},
    )


#: What a broker's database role needs on each of the prefix's tables.
BROKER_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def require_privileges(conn: Connection, wanted: dict[str, tuple[str, ...]]) -> None:
    """Raise :class:`SchemaError` naming the GRANT to run when the session's role lacks a
    privilege on one of the existing tables in ``wanted`` (tables that adopt or upgrade
    created are not covered by grants made before them)."""
    names = [name for name, privileges in wanted.items() for _ in privileges]
    privileges = [privilege for each in wanted.values() for privilege in each]
    rows = conn.execute(
        sa.text(
            "SELECT w.name, w.privilege, quote_ident(current_user), quote_ident(current_schema()) "
            "FROM unnest(CAST(:names AS text[]), CAST(:privileges AS text[])) "
            "AS w(name, privilege) "
            "WHERE to_regclass(quote_ident(w.name)) IS NOT NULL "
            "AND NOT has_table_privilege(to_regclass(quote_ident(w.name)), w.privilege)"
        ),
        {"names": names, "privileges": privileges},
    ).all()
    if not rows:
        return
    lacking: dict[str, list[str]] = {}
    for name, privilege, _, _ in rows:
        lacking.setdefault(name, []).append(privilege)
    user, schema = rows[0][2], rows[0][3]
    listed = "; ".join(f"{', '.join(p)} on {name}" for name, p in lacking.items())
    raise SchemaError(
        f"the database role {user} lacks {listed}: as the tables' owner run GRANT "
        f"{', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA {schema} TO {user}"
    )


def refuse_row_locked(conn: Connection, prefix: str = "") -> None:
    """Raise when a live broker holds the lock row in an open transaction (mqstore's
    ``--lock row``, ActiveMQ's default locker); otherwise keep the row locked until ``conn``'s
    transaction ends, so no broker starts meanwhile."""
    lock = build_schema(prefix).lock
    if lock.name not in set(sa.inspect(conn).get_table_names()):
        return
    try:
        with conn.begin_nested():
            conn.execute(sa.select(lock.c.id).with_for_update(nowait=True))
    except sa.exc.OperationalError as exc:
        if sqlstate(exc) != LOCK_NOT_AVAILABLE:
            raise
        raise SchemaError(
            f"{lock.name} is locked by a running broker (mqstore's --lock row or ActiveMQ's "
            "database locker), nothing was changed: stop that broker first"
        ) from None


#: How much longer than its renewal period a live holder may take to renew its lease.
RENEWAL_SLACK_MS = 1000

#: How often :func:`watch_lease` reads the lock row.
_WATCH_POLL_S = 0.1


def _held_lease(conn: Connection, schema: StoreSchema) -> LockStatus | None:
    """The lock row when it names a holder, else None (no lock table, no row, free)."""
    if schema.lock.name not in set(sa.inspect(conn).get_table_names()):
        return None
    status = find_lock(conn, schema)
    return status if status is not None and status.broker_name is not None else None


def _refuse_connected_guard(conn: Connection, schema: StoreSchema, status: LockStatus) -> None:
    """Raise while the guard session of the row's holder is open: an mqstore broker keeps
    one connected for as long as it holds the lease, so it is running, whatever the lease's
    time says. Read in a transaction of its own: ``pg_stat_activity`` is read once per
    transaction."""
    holder = str(status.broker_name)
    name = guard_name(schema, holder)
    if GuardWatch(conn.engine).see(conn, name).alive:
        raise SchemaError(
            f"{schema.lock.name} is {status.describe()} and the guard session of broker "
            f"{holder} is connected (application_name {name} in pg_stat_activity): that "
            "broker is running, nothing was changed: stop it first (--force goes ahead only "
            "once its holder is gone)"
        )


def watch_lease(engine: Engine, prefix: str, watch_ms: int) -> LockStatus | None:
    """For ``--force``: the live lease on the lock row, once watched for ``watch_ms`` from a
    session of its own without its holder renewing it or its guard session connecting;
    None when no lease is live. Raise while the holder's guard session (an mqstore broker's)
    is connected, or when the row changes meanwhile (a renewal: its holder is running).
    Run before the row is locked, which would hold a renewal back."""
    schema = build_schema(prefix)
    with engine.connect() as watch:
        first = _held_lease(watch, schema)
        watch.rollback()
        if first is None or not first.live():
            return None
        deadline = time.monotonic() + watch_ms / 1000
        while True:
            _refuse_connected_guard(watch, schema, first)
            seen = _held_lease(watch, schema)
            watch.rollback()
            if seen != first:
                now = "free" if seen is None else seen.describe()
                raise SchemaError(
                    f"{schema.lock.name} was {first.describe()} and changed within "
                    f"{watch_ms} ms (now {now}): its holder renewed it or another broker "
                    "took it, so a broker is running, nothing was changed: stop it first"
                )
            if time.monotonic() >= deadline:
                return first
            time.sleep(_WATCH_POLL_S)


def refuse_live_lease(
    conn: Connection, prefix: str, *, override: str | None, gone: LockStatus | None = None
) -> str | None:
    """Raise when a broker holds the master lease on the lock row (mqstore's ``--lock
    lease``, ActiveMQ's lease locker), which takes no database lock a migration could see,
    or while the guard session of the row's holder is connected (an mqstore broker, even
    with a lapsed lease). ``override`` names the option that goes ahead when that broker is
    gone and its lease merely stale (None: there is none, the lease runs out); ``gone`` is
    the lease :func:`watch_lease` judged left by a broker that is gone: only that very
    lease (same holder, same time) goes ahead, and the line saying so is returned."""
    schema = build_schema(prefix)
    status = _held_lease(conn, schema)
    if status is None:
        return None
    _refuse_connected_guard(conn, schema, status)
    if not status.live():
        return None
    if gone is not None and gone == status:
        return (
            f"{schema.lock.name} is {status.describe()}, but {status.broker_name} did not "
            "renew it while watched and has no guard session connected: taken as left by a "
            f"broker that is gone ({override or 'forced'})"
        )
    stale = f"pass {override}" if override else "run it again once the lease has run out"
    raise SchemaError(
        f"{schema.lock.name} is {status.describe()}, nothing was changed: stop that broker "
        f"first (or {stale} if it is gone and its lease is stale)"
    )


#: SQLSTATEs a user causes with the DSN (its role, search_path, server), and what to do.
_DATABASE_FIXES = {
    "42501": "only the owner of the tables (or a member of the role that owns them) may "
    "alter or drop them, whatever it is granted: run it as the owner of the tables (the "
    "DSN's user, or options=-crole=OWNER in the DSN)",
    "3F000": "the DSN's search_path names no existing schema: create the schema or fix "
    "options=-csearch_path=...",
    "25006": "the database is read-only (a standby, or default_transaction_read_only): "
    "point the DSN at the primary",
    LOCK_NOT_AVAILABLE: "another session holds a lock on a table it needs (a running "
    "broker?): stop it, or retry when it is idle",
    "57014": "a statement ran past the role's statement_timeout (adopt indexes every row): "
    "run it with a longer one, e.g. options=-cstatement_timeout=0 in the DSN",
    "42P07": "mqstore did not make that table or index: drop or rename it, or use another "
    "--table-prefix",
    "42710": "mqstore did not make that object: drop or rename it, or use another --table-prefix",
}


#: What to do when the role may not create tables in the schema (SQLSTATE 42501 too).
_NO_CREATE_ON_SCHEMA = (
    "the DSN's role may not create tables in that schema: run it as the owner of the tables "
    "(the role that is to own them, which alone may alter or drop them later), once it has "
    "CREATE on the schema (GRANT CREATE ON SCHEMA ... TO it, as the schema's owner)"
)


def describe_refusal(exc: sa.exc.DBAPIError, command: str) -> str | None:
    """One line for PostgreSQL's refusal of ``command`` (as the user typed it) when a user
    can fix it (rights, search_path, a standby), else None; its transaction was rolled back."""
    fix = _DATABASE_FIXES.get(sqlstate(exc))
    if fix is None:
        return None
    first = str(exc.orig).splitlines()[0]
    if sqlstate(exc) == "42501" and "permission denied for schema" in first:
        fix = _NO_CREATE_ON_SCHEMA
    return f"`{command}` was refused by the database ({first}), nothing was changed: {fix}"


@contextmanager
def database_errors(command_name: str) -> Iterator[None]:
    """PostgreSQL's refusals a user can fix as one-line :class:`SchemaError`
    (:func:`describe_refusal`)."""
    try:
        yield
    except sa.exc.DBAPIError as exc:
        message = describe_refusal(exc, f"mqstore db {command_name}")
        if message is None:
            raise
        raise SchemaError(message) from None
